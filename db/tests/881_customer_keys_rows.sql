-- 881_customer_keys_rows: the composite foreign keys of migration 0080 refuse a child row that
-- names another customer's parent (docs/scaling.md).
BEGIN;
SELECT plan(3);
-- One user for the fixtures and the API's SECURITY DEFINER calls: on Citus a transaction may not
-- touch a placement another user modified in it (docs/scaling.md).
SET LOCAL ROLE billing_owner;

-- The error of a statement, as "SQLSTATE: message" (NULL when it succeeds).
CREATE FUNCTION pg_temp.error_of(p_sql text) RETURNS text LANGUAGE plpgsql AS
$$ BEGIN EXECUTE p_sql; RETURN NULL; EXCEPTION WHEN OTHERS THEN RETURN SQLSTATE || ': ' || SQLERRM; END $$;
-- A foreign key broken: 23503 naming the constraint; on Citus the worker's error comes back as XX000
-- naming the shard's constraint (<name>_<shard id>).
CREATE FUNCTION pg_temp.fk_broken(p_constraint text) RETURNS text LANGUAGE sql AS
$$ SELECT CASE WHEN billing._distributed('billing.customer') THEN '^XX000: .*violates foreign key constraint "'
                    || p_constraint || '_[0-9]+"'
               ELSE '^23503: .*violates foreign key constraint "' || p_constraint || '"' END $$;

SELECT billing.upsert_plan('T81_PLAN', 1000, 'USD', 'MONTH');
SELECT billing.upsert_customer(81001);
SELECT billing.upsert_customer(81002);
SELECT billing.create_subscription('t81-key', 81001, 'T81_PLAN', '2026-01-01Z');

SELECT matches(pg_temp.error_of($$
    INSERT INTO billing.credit_entry (customer_id, currency, amount, reason, subscription_id, created_at)
    SELECT 81002, 'USD', 1, 'PRORATION', r.subscription_id, '2026-01-01Z'
      FROM billing.subscription_request r WHERE r.idempotency_key = 't81-key'$$),
    pg_temp.fk_broken('credit_entry_subscription_fkey'), 'a credit entry cannot name another customer''s subscription');

SELECT lives_ok($$
    INSERT INTO billing.credit_entry (customer_id, currency, amount, reason, subscription_id, created_at)
    SELECT 81001, 'USD', 1, 'PRORATION', r.subscription_id, '2026-01-01Z'
      FROM billing.subscription_request r WHERE r.idempotency_key = 't81-key'$$,
    'the same entry for the subscription''s own customer is accepted');

SELECT matches(pg_temp.error_of($$
    INSERT INTO billing.payment_attempt (customer_id, invoice_id, attempt_number, idempotency_key, amount, currency,
                                         worker, first_claimed_at, last_claimed_at, key_expires_at)
    SELECT 81002, i.id, 1, 't81-attempt', i.amount, i.currency, 'pgtap', '2026-01-01Z', '2026-01-01Z', '2026-01-02Z'
      FROM billing.invoice i
      JOIN billing.subscription_request r ON r.customer_id = i.customer_id AND r.subscription_id = i.subscription_id
     WHERE r.idempotency_key = 't81-key' AND i.amount > 0 LIMIT 1$$),
    pg_temp.fk_broken('payment_attempt_invoice_fkey'), 'a payment attempt cannot name another customer''s invoice');

SELECT * FROM finish();
ROLLBACK;
