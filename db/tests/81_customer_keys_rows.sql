-- 81_customer_keys_rows: the composite foreign keys of migration 0080 refuse a child row that
-- names another customer's parent (docs/scaling.md).
BEGIN;
SELECT plan(3);

SELECT billing.upsert_plan('T81_PLAN', 1000, 'USD', 'MONTH');
SELECT billing.upsert_customer(81001);
SELECT billing.upsert_customer(81002);
SELECT billing.create_subscription('t81-key', 81001, 'T81_PLAN', '2026-01-01Z');

SELECT throws_ok($$
    INSERT INTO billing.credit_entry (customer_id, currency, amount, reason, subscription_id, created_at)
    SELECT 81002, 'USD', 1, 'PRORATION', r.subscription_id, '2026-01-01Z'
      FROM billing.subscription_request r WHERE r.idempotency_key = 't81-key'$$,
    '23503', NULL, 'a credit entry cannot name another customer''s subscription');

SELECT lives_ok($$
    INSERT INTO billing.credit_entry (customer_id, currency, amount, reason, subscription_id, created_at)
    SELECT 81001, 'USD', 1, 'PRORATION', r.subscription_id, '2026-01-01Z'
      FROM billing.subscription_request r WHERE r.idempotency_key = 't81-key'$$,
    'the same entry for the subscription''s own customer is accepted');

SELECT throws_ok($$
    INSERT INTO billing.payment_attempt (customer_id, invoice_id, attempt_number, idempotency_key, amount, currency,
                                         worker, first_claimed_at, last_claimed_at, key_expires_at)
    SELECT 81002, i.id, 1, 't81-attempt', i.amount, i.currency, 'pgtap', '2026-01-01Z', '2026-01-01Z', '2026-01-02Z'
      FROM billing.invoice i JOIN billing.subscription_request r ON r.subscription_id = i.subscription_id
     WHERE r.idempotency_key = 't81-key' AND i.amount > 0 LIMIT 1$$,
    '23503', NULL, 'a payment attempt cannot name another customer''s invoice');

SELECT * FROM finish();
ROLLBACK;
