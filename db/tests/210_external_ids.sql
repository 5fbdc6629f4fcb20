-- 210_external_ids: the caller's own ids of customers, plans and subscriptions (21_external_ids.sql,
-- migration 0210): given once, unique per kind, usable wherever our id is.
BEGIN;
-- As the owner of the schema: on Citus a transaction may not read as one user the shards another
-- user (the SECURITY DEFINER functions run as billing_owner) wrote in it.
SET LOCAL ROLE billing_owner;
SELECT plan(27);

-- Plans.
SELECT is((billing.upsert_plan('X_BASIC', 1000, 'USD', 'MONTH', 1, '2026-01-01Z', NULL, 'price_basic')).external_id,
          'price_basic', 'upsert_plan gives a new plan its external id');
SELECT is((billing.upsert_plan('X_BASIC', 1200, 'USD', 'MONTH', 1, '2026-01-02Z', NULL, 'price_basic')).price_amount,
          1200::bigint, 'repeating the same external id is harmless');
SELECT is((billing.upsert_plan('X_BASIC', 1200, 'USD', 'MONTH')).external_id, 'price_basic',
          'an upsert without one keeps it');
SELECT throws_ok($$SELECT billing.upsert_plan('X_BASIC', 1200, 'USD', 'MONTH', 1, now(), NULL, 'price_other')$$,
                 'BL409', NULL, 'a plan''s external id never changes');
SELECT throws_ok($$SELECT billing.upsert_plan('X_PRO', 3000, 'USD', 'MONTH', 1, now(), NULL, 'price_basic')$$,
                 'BL409', NULL, 'an external id names one plan');
SELECT is((SELECT count(*) FROM billing.plan WHERE code = 'X_PRO'), 0::bigint, 'the refused plan was not created');
SELECT throws_ok($$SELECT billing.upsert_plan('X_PRO', 3000, 'USD', 'MONTH', 1, now(), NULL, ' price_pro')$$,
                 'BL422', NULL, 'an external id with surrounding blanks is BL422');
SELECT throws_ok($$SELECT billing.upsert_plan('X_PRO', 3000, 'USD', 'MONTH', 1, now(), NULL, repeat('p', 256))$$,
                 'BL422', NULL, 'an external id of 256 characters is BL422');
SELECT is((billing.get_plan_by_external_id('price_basic')).code, 'X_BASIC', 'get_plan_by_external_id');

-- Customers.
SELECT is((billing.upsert_customer(21001, 'Europe/Paris', 'cus_A')).external_id, 'cus_A',
          'upsert_customer gives the customer its external id');
SELECT is((billing.upsert_customer(21001, 'Europe/Paris')).external_id, 'cus_A', 'an upsert without one keeps it');
SELECT throws_ok($$SELECT billing.upsert_customer(21002, 'UTC', 'cus_A')$$, 'BL409', NULL,
                 'an external id names one customer');
SELECT throws_ok($$SELECT billing.upsert_customer(21001, 'UTC', 'cus_B')$$, 'BL409', NULL,
                 'a customer''s external id never changes');
SELECT is((billing.get_customer_by_external_id('cus_A')).id, 21001::bigint, 'get_customer_by_external_id');
SELECT is(billing.resolve_external_id('customer', 'cus_A'), 21001::bigint, 'resolve_external_id of a customer');

-- Subscriptions.
SELECT is((billing.create_subscription('x-1', 21001, 'X_BASIC', '2026-02-01Z', 0, NULL, 1, 'sub_1')).external_id,
          'sub_1', 'create_subscription gives the subscription its external id');
SELECT is((billing.create_subscription('x-1', 21001, 'X_BASIC', '2026-02-01Z', 0, NULL, 1, 'sub_1')).id,
          billing.resolve_external_id('subscription', 'sub_1'), 'a replayed key returns the same subscription');
SELECT throws_ok($$SELECT billing.create_subscription('x-1', 21001, 'X_BASIC', '2026-02-01Z', 0, NULL, 1, 'sub_9')$$,
                 'BL409', NULL, 'a key replayed with another external id is BL409');
SELECT throws_ok($$SELECT billing.create_subscription('x-2', 21001, 'X_BASIC', '2026-02-01Z', 0, NULL, 1, 'sub_1')$$,
                 'BL409', NULL, 'an external id names one subscription: a second signup with it is refused');
-- (Query texts, not subqueries: on Citus a read of one customer's shard goes to its worker whole,
-- pgTAP's call included, where this transaction's plan is unknown.)
SELECT results_eq($$SELECT count(*) FROM billing.subscription WHERE customer_id = 21001$$, $$VALUES (1::bigint)$$,
                  'the refused signup left nothing');
SELECT is((billing.get_subscription_by_external_id('sub_1')).customer_id, 21001::bigint, 'get_subscription_by_external_id');
-- Usable wherever our id is.
SELECT is((billing.cancel_subscription(billing.resolve_external_id('subscription', 'sub_1'), true, '2026-02-02Z')).cancel_at_period_end,
          true, 'a call by our id takes the resolved external id');

-- set_external_id on existing objects.
SELECT (billing.create_subscription('x-3', 21003, 'X_BASIC', '2026-02-01Z')).id AS x3 \gset
SELECT is(billing.set_external_id('subscription', :x3, 'sub_3', '2026-02-01Z'), :x3::bigint, 'set_external_id on a subscription');
SELECT results_eq($$SELECT external_id FROM billing.subscription WHERE customer_id = 21003$$, $$VALUES ('sub_3')$$,
                  'its row carries it');
SELECT throws_ok($$SELECT billing.set_external_id('customer', 21999, 'cus_none', '2026-02-01Z')$$, 'BL404', NULL,
                 'set_external_id of an absent object is BL404');
SELECT throws_ok($$SELECT billing.resolve_external_id('invoice', 'in_1')$$, 'BL422', NULL, 'an unknown kind is BL422');
SELECT is(billing.resolve_external_id('subscription', 'sub_none'), NULL::bigint, 'an unknown external id resolves to NULL');

SELECT * FROM finish();
ROLLBACK;
