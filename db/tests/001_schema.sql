-- 001_schema: the tables, constraints, functions and privileges the contract names.
BEGIN;
SET LOCAL ROLE billing_owner;  -- on Citus, reads of shards in the writers' role (see 200_plans_customers)
SELECT plan(44);

SELECT has_schema('billing');
SELECT has_table('billing', t, 'table billing.' || t) FROM unnest(ARRAY[
    'plan', 'customer', 'subscription', 'invoice', 'payment_attempt', 'outbox_event',
    'credit_entry', 'gateway_webhook', 'dunning_step']) AS t;
SELECT col_type_is('billing', 'plan', 'price_amount', 'bigint', 'money is bigint');
SELECT col_type_is('billing', 'invoice', 'amount', 'bigint', 'invoice amount is bigint');
SELECT col_type_is('billing', 'subscription', 'current_period_end', 'timestamp with time zone', 'instants are timestamptz');
SELECT has_column('billing', 'subscription', c, 'subscription.' || c) FROM unnest(ARRAY[
    'customer_id', 'plan_id', 'status', 'current_period_start', 'current_period_end',
    'cancel_at_period_end', 'billing_anchor', 'version']) AS c;
SELECT col_is_unique('billing', 'invoice', ARRAY['customer_id', 'subscription_id', 'period_start', 'kind'],
                     'one invoice per customer, subscription, period start and kind');
SELECT has_index('billing', 'subscription', 'subscription_due_idx', 'partial index of due subscriptions');
SELECT has_index('billing', 'invoice', 'invoice_chargeable_idx', 'partial index of chargeable invoices');
-- On Citus (billing db migrate --citus, docs/scaling.md) a few of these read differently, each checked as
-- strictly there: the relay polls (no NOTIFY trigger: a notification would be raised on a worker), the
-- invoice's subscription is checked by the composite foreign key that replaces the statement trigger,
-- and a constraint broken on a worker is reported by the worker (a foreign key as XX000), naming the
-- shard's relation or constraint (<name>_<shard id>).
CREATE FUNCTION pg_temp.raises(p_sql text, p_sqlstate text, p_message_like text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE p_sql;
    RETURN false;
EXCEPTION WHEN OTHERS THEN
    IF SQLSTATE = p_sqlstate AND SQLERRM LIKE p_message_like THEN
        RETURN true;
    END IF;
    RAISE WARNING 'caught % %', SQLSTATE, SQLERRM;
    RETURN false;
END
$$;
SELECT CASE WHEN billing._distributed('billing.outbox_event')
            THEN hasnt_trigger('billing', 'outbox_event', 'outbox_event_notify', 'outbox insert notifies (on Citus: no, the relay polls)')
            ELSE has_trigger('billing', 'outbox_event', 'outbox_event_notify', 'outbox insert notifies') END;
SELECT CASE WHEN billing._distributed('billing.invoice')
            THEN ok((SELECT pg_temp.raises($$INSERT INTO billing.invoice (subscription_id, customer_id, kind, period_start, period_end, subtotal, amount,
                      currency, due_at, next_attempt_at, created_at, plan_id, plan_price, billing_interval, interval_count)
                   SELECT -42, 1, 'RENEWAL', '2026-01-01Z', '2026-02-01Z', 1, 1, 'USD', '2026-01-01Z', '2026-01-01Z', '2026-01-01Z',
                          p.id, 1, 'MONTH', 1
                     FROM billing.upsert_plan('T01_FK', 1, 'USD', 'MONTH') p$$,
                                            'XX000', '%violates foreign key constraint "invoice\_subscription\_fkey\_%"')),
                    'an invoice must refer to an existing subscription (on Citus: the composite foreign key, on the worker)')
            ELSE throws_ok($$INSERT INTO billing.invoice (subscription_id, customer_id, kind, period_start, period_end, subtotal, amount,
                      currency, due_at, next_attempt_at, created_at, plan_id, plan_price, billing_interval, interval_count)
                   SELECT -42, 1, 'RENEWAL', '2026-01-01Z', '2026-02-01Z', 1, 1, 'USD', '2026-01-01Z', '2026-01-01Z', '2026-01-01Z',
                          p.id, 1, 'MONTH', 1
                     FROM billing.upsert_plan('T01_FK', 1, 'USD', 'MONTH') p$$,
                 '23503', 'invoice refers to subscription -42, which does not exist',
                 'an invoice must refer to an existing subscription (checked per statement)') END;
SELECT throws_ok($$DELETE FROM billing.subscription$$, '23503', NULL, 'subscriptions are never deleted');
SELECT CASE WHEN billing._distributed('billing.customer')
            THEN ok((SELECT pg_temp.raises($$INSERT INTO billing.plan (code, price_amount, currency, billing_interval) VALUES ('T_X', -1, 'USD', 'MONTH')$$,
                                            '23514', 'new row for relation "plan\_%" violates check constraint "plan_price_not_negative"')),
                    'constraints are named after the rule they keep (on Citus: on the worker''s shard of the relation)')
            ELSE throws_ok($$INSERT INTO billing.plan (code, price_amount, currency, billing_interval) VALUES ('T_X', -1, 'USD', 'MONTH')$$,
                 '23514', 'new row for relation "plan" violates check constraint "plan_price_not_negative"',
                 'constraints are named after the rule they keep') END;

-- Every API function is SECURITY DEFINER with a pinned search_path and a two-line comment.
SELECT is(
    (SELECT array_agg(p.proname ORDER BY p.proname)
       FROM pg_proc p
      WHERE p.pronamespace = 'billing'::regnamespace AND p.proname !~ '^_'
        AND (NOT p.prosecdef OR NOT coalesce(p.proconfig::text ~ 'search_path=billing, pg_catalog', false))),
    NULL, 'API functions are SECURITY DEFINER with search_path = billing, pg_catalog');
SELECT is(
    (SELECT array_agg(p.proname ORDER BY p.proname)
       FROM pg_proc p
      WHERE p.pronamespace = 'billing'::regnamespace
        AND coalesce(array_length(regexp_split_to_array(btrim(obj_description(p.oid, 'pg_proc'), E'\n'), E'\n'), 1), 0) <> 2),
    NULL, 'every function has a two-line comment');

SELECT is(
    (SELECT array_agg(p.proname::text ORDER BY p.proname)
       FROM pg_proc p
      WHERE p.pronamespace = 'billing'::regnamespace AND p.proname = ANY (ARRAY[
          'upsert_plan', 'upsert_customer', 'create_subscription', 'get_subscription', 'cancel_subscription',
          'change_plan', 'proration_amount', 'period_end', 'create_due_invoices', 'claim_charges',
          'record_payment_result', 'apply_gateway_webhook', 'dunning_next_attempt', 'claim_outbox_events',
          'mark_outbox_published', 'mark_outbox_failed'])),
    ARRAY['apply_gateway_webhook', 'cancel_subscription', 'change_plan', 'claim_charges', 'claim_outbox_events',
          'create_due_invoices', 'create_subscription', 'dunning_next_attempt', 'get_subscription',
          'mark_outbox_failed', 'mark_outbox_published', 'period_end', 'proration_amount',
          'record_payment_result', 'upsert_customer', 'upsert_plan'],
    'each contract function exists exactly once (no stale overloads)');

SELECT function_returns('billing', 'create_due_invoices', ARRAY['integer', 'timestamp with time zone'], 'integer');
SELECT function_returns('billing', 'claim_charges', ARRAY['text', 'integer', 'interval', 'timestamp with time zone', 'text'], 'setof record');
SELECT function_returns('billing', 'record_payment_result',
    ARRAY['text', 'text', 'text', 'text', 'timestamp with time zone', 'boolean'], 'billing.invoice');
SELECT function_returns('billing', 'claim_outbox_events', ARRAY['integer', 'interval', 'timestamp with time zone'], 'setof billing.outbox_event');
SELECT is(
    (SELECT pg_get_function_arguments('billing.cancel_subscription(bigint,boolean,timestamptz,bigint,text)'::regprocedure)),
    'p_subscription_id bigint, p_at_period_end boolean, p_now timestamp with time zone DEFAULT now(), p_expected_version bigint DEFAULT NULL::bigint, p_proration text DEFAULT ''none''::text',
    'cancel_subscription parameters and defaults');

-- Roles: billing_app executes the API and nothing else.
SELECT has_role('billing_app');
SELECT ok(NOT has_table_privilege('billing_app', 'billing.subscription', 'SELECT'), 'billing_app cannot read tables');
SELECT ok(NOT has_table_privilege('billing_app', 'billing.invoice', 'UPDATE'), 'billing_app cannot write tables');
SELECT ok(has_function_privilege('billing_app', 'billing.create_due_invoices(integer,timestamptz)', 'EXECUTE'),
          'billing_app executes API functions');
SELECT ok(NOT has_function_privilege('billing_app', 'billing._void_invoices(bigint,bigint[],timestamptz)', 'EXECUTE'),
          'billing_app cannot execute private helpers');
SELECT ok(NOT has_function_privilege('public', 'billing.create_due_invoices(integer,timestamptz)', 'EXECUTE'),
          'PUBLIC cannot execute API functions');

SET LOCAL ROLE billing_app;
SELECT throws_ok('SELECT * FROM billing.invoice', '42501', NULL, 'reading a table as billing_app is refused');
SELECT lives_ok($$SELECT billing.upsert_plan('T_ROLE', 100, 'USD', 'MONTH')$$, 'billing_app can call the API');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
