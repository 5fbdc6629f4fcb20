-- 220_import: import_customers / import_subscriptions (22_import.sql): many in one call, keyed by
-- external id (a re-run skips what is here), all or nothing, and the first renewal here starts where
-- the source's billed period ended: nothing billed for it, nothing skipped after it.
BEGIN;
SET LOCAL ROLE billing_owner;  -- on Citus, reads of shards in the writers' role (see 200_plans_customers)
SELECT plan(33);

SELECT billing.upsert_plan('I_M', 1000, 'USD', 'MONTH', 1, '2026-01-01Z', NULL, 'price_m');
SELECT billing.upsert_plan('I_Y', 12000, 'USD', 'YEAR', 1, '2026-01-01Z');
SELECT billing.upsert_coupon('I_HALF_3', 50, NULL, NULL, 'repeating', 3);
SELECT billing.upsert_coupon('I_ONCE', 10, NULL, NULL, 'once', NULL, 1);

-- Customers ----------------------------------------------------------------------------------
SELECT results_eq($$SELECT external_id, outcome FROM billing.import_customers(
    '[{"external_id": "cus_1", "id": 22001, "name": "Ada", "email": "ada@example.com"},
      {"external_id": "cus_2", "id": 22002, "timezone": "Europe/Paris"},
      {"external_id": "cus_3", "id": 22003}]', '2026-03-10Z')$$,
    $$VALUES ('cus_1', 'created'), ('cus_2', 'created'), ('cus_3', 'created')$$, 'three customers imported');
SELECT results_eq($$SELECT external_id, customer_id, outcome FROM billing.import_customers(
    '[{"external_id": "cus_1"}, {"external_id": "cus_4", "id": 22004}]', '2026-03-10Z')$$,
    $$VALUES ('cus_1', 22001::bigint, 'exists'), ('cus_4', 22004::bigint, 'created')$$,
    'a re-run skips what was imported and imports the rest');
SELECT results_eq($$SELECT timezone, name, external_id FROM billing.customer WHERE id = 22002$$,
                  $$VALUES ('Europe/Paris', NULL::text, 'cus_2')$$, 'the customer row as imported');
SELECT throws_ok($$SELECT * FROM billing.import_customers('[{"external_id": "cus_9", "id": 22009}, {"external_id": "cus_10", "timezone": "Mars/Olympus"}]', '2026-03-10Z')$$,
                 'BL422', NULL, 'an unknown zone refuses the batch');
SELECT is(billing.resolve_external_id('customer', 'cus_9'), NULL::bigint, 'all or nothing: the good row was not imported either');
SELECT throws_ok($$SELECT * FROM billing.import_customers('[{"external_id": "cus_11", "id": 22001}]', '2026-03-10Z')$$,
                 'BL422', NULL, 'an id taken by another customer is refused');
SELECT throws_ok($$SELECT * FROM billing.import_customers('[{"external_id": "cus_12"}, {"external_id": "cus_12"}]', '2026-03-10Z')$$,
                 'BL422', NULL, 'an external id twice in one batch is refused');
SELECT results_eq($$SELECT outcome, problem FROM billing.import_customers('[{"external_id": "cus_1"}, {"external_id": "cus_13", "email": "nope"}]', '2026-03-10Z', true)$$,
                  $$VALUES ('exists', NULL::text), ('refused', 'malformed email ''nope''')$$, 'a dry run reports each row');
SELECT is(billing.resolve_external_id('customer', 'cus_13'), NULL::bigint, 'a dry run writes nothing');
SELECT ok((SELECT customer_id > 22004 FROM billing.import_customers('[{"external_id": "cus_auto"}]', '2026-03-10Z')),
          'a customer without an id gets the next free one');

-- Subscriptions --------------------------------------------------------------------------------
-- sub_a: paid at the source for [Feb 15, Mar 15); sub_b: a trial until Mar 20; sub_c: a coupon
-- with discount at the source until May 15; sub_d: cancels at its period end.
SELECT results_eq($$SELECT external_id, outcome FROM billing.import_subscriptions('[
    {"external_id": "sub_a", "customer_external_id": "cus_1", "plan_external_id": "price_m", "status": "active",
     "current_period_start": "2026-02-15T00:00:00Z", "current_period_end": "2026-03-15T00:00:00Z", "quantity": 2},
    {"external_id": "sub_b", "customer_external_id": "cus_2", "plan_code": "I_M", "status": "trialing",
     "current_period_start": "2026-03-06T00:00:00Z", "current_period_end": "2026-03-20T00:00:00Z"},
    {"external_id": "sub_c", "customer_id": 22003, "plan_code": "I_M", "current_period_start": "2026-02-15T00:00:00Z",
     "current_period_end": "2026-03-15T00:00:00Z", "coupon_code": "I_HALF_3", "coupon_until": "2026-05-15T00:00:00Z"},
    {"external_id": "sub_d", "customer_id": 22004, "plan_code": "I_Y", "current_period_start": "2025-06-01T00:00:00Z",
     "current_period_end": "2026-06-01T00:00:00Z", "cancel_at_period_end": true}]', '2026-03-10Z')$$,
    $$VALUES ('sub_a', 'created'), ('sub_b', 'created'), ('sub_c', 'created'), ('sub_d', 'created')$$,
    'four subscriptions imported');
SELECT billing.resolve_external_id('subscription', 'sub_a') AS sub_a, billing.resolve_external_id('subscription', 'sub_b') AS sub_b,
       billing.resolve_external_id('subscription', 'sub_c') AS sub_c, billing.resolve_external_id('subscription', 'sub_d') AS sub_d \gset
SELECT results_eq(format($$SELECT status, current_period_start, current_period_end, quantity, lifecycle_pending, external_id
                             FROM billing.subscription WHERE customer_id = 22001 AND id = %s$$, :'sub_a'),
                  $$VALUES ('ACTIVE', '2026-02-15Z'::timestamptz, '2026-03-15Z'::timestamptz, 2, false, 'sub_a')$$,
                  'sub_a: ACTIVE in the source''s period, two seats');
SELECT results_eq($$SELECT count(*) FROM billing.invoice WHERE customer_id IN (22001, 22002, 22003, 22004)$$,
                  $$VALUES (0::bigint)$$, 'no invoice for the periods billed at the source');
SELECT results_eq($$SELECT count(*) FROM billing.service_line WHERE customer_id IN (22001, 22002, 22003, 22004)$$,
                  $$VALUES (0::bigint)$$, 'and no service line: nothing of them can come back as credit or refund');
SELECT results_eq($$SELECT event_type, count(*) FROM billing.outbox_event WHERE customer_id IN (22001, 22002, 22003, 22004) GROUP BY 1$$,
                  $$VALUES ('SubscriptionCreated', 4::bigint)$$, 'SubscriptionCreated for each');
SELECT results_eq($$SELECT payload::jsonb -> 'data' FROM billing.outbox_event WHERE customer_id = 22001$$,
                  format($$SELECT billing._subscription_data(billing.get_subscription(%s))$$, :'sub_a'),
                  'the event''s data is the subscription''s, as a signup''s would be');
SELECT results_eq($$SELECT outcome FROM billing.import_subscriptions('[{"external_id": "sub_a", "customer_external_id": "cus_1",
     "plan_code": "I_M", "current_period_start": "2026-02-15T00:00:00Z", "current_period_end": "2026-03-15T00:00:00Z"}]', '2026-03-10Z')$$,
    $$VALUES ('exists')$$, 'a re-run skips it');
SELECT results_eq($$SELECT count(*) FROM billing.subscription WHERE customer_id = 22001$$, $$VALUES (1::bigint)$$, 'nothing duplicated');
SELECT is((SELECT times_redeemed FROM billing.coupon WHERE code = 'I_HALF_3'), 1, 'the coupon''s redemption counted once');

-- Refusals (each batch all or nothing).
SELECT throws_ok($$SELECT * FROM billing.import_subscriptions('[{"external_id": "sub_x", "customer_id": 22001, "plan_code": "I_M",
     "current_period_start": "2026-02-01T00:00:00Z", "current_period_end": "2026-03-01T00:00:00Z"}]', '2026-03-10Z')$$,
    'BL422', NULL, 'a period that has ended is refused (the source may have billed the next)');
SELECT throws_ok($$SELECT * FROM billing.import_subscriptions('[{"external_id": "sub_x", "customer_id": 22001, "plan_code": "I_M", "status": "past_due",
     "current_period_start": "2026-03-01T00:00:00Z", "current_period_end": "2026-04-01T00:00:00Z"}]', '2026-03-10Z')$$,
    'BL422', NULL, 'a past due subscription is refused (its unpaid period is the source''s to collect)');
SELECT throws_ok($$SELECT * FROM billing.import_subscriptions('[{"external_id": "sub_x", "customer_id": 22001, "plan_code": "I_M", "coupon_code": "I_ONCE",
     "current_period_start": "2026-03-01T00:00:00Z", "current_period_end": "2026-04-01T00:00:00Z"}]', '2026-03-10Z')$$,
    'BL422', NULL, 'a once coupon on an active subscription was used at the source: refused');
SELECT throws_ok($$SELECT * FROM billing.import_subscriptions('[{"external_id": "sub_x", "customer_id": 22001, "plan_code": "I_M", "coupon_code": "I_HALF_3",
     "coupon_until": "2026-09-01T00:00:00Z", "current_period_start": "2026-03-01T00:00:00Z", "current_period_end": "2026-04-01T00:00:00Z"}]', '2026-03-10Z')$$,
    'BL422', NULL, 'a discount longer than the coupon''s months is refused (no discount from nothing)');
SELECT results_eq($$SELECT outcome, problem FROM billing.import_subscriptions('[{"external_id": "sub_y", "customer_external_id": "cus_none",
     "plan_code": "I_M", "current_period_start": "2026-03-01T00:00:00Z", "current_period_end": "2026-04-01T00:00:00Z"}]', '2026-03-10Z', true)$$,
    $$VALUES ('refused', 'unknown customer ''cus_none''')$$, 'a dry run names what cannot be mapped');

-- The first renewal here starts where the source's period ended -------------------------------
SELECT is(billing.create_due_invoices(500, '2026-03-15Z'), 2, 'at Mar 15 sub_a and sub_c are due');
SELECT results_eq(format($$SELECT kind, period_start, period_end, subtotal FROM billing.invoice WHERE customer_id = 22001 AND subscription_id = %s$$, :'sub_a'),
                  $$VALUES ('RENEWAL', '2026-03-15Z'::timestamptz, '2026-04-15Z'::timestamptz, 2000::bigint)$$,
                  'sub_a: the first period billed here is [Mar 15, Apr 15), two seats');
SELECT results_eq(format($$SELECT period_start, period_end, subtotal, discount_amount FROM billing.invoice WHERE customer_id = 22003 AND subscription_id = %s$$, :'sub_c'),
                  $$VALUES ('2026-03-15Z'::timestamptz, '2026-04-15Z'::timestamptz, 500::bigint, 500::bigint)$$,
                  'sub_c: its coupon discounts the first period here');
SELECT is(billing.create_due_invoices(500, '2026-03-20Z'), 2, 'at Mar 20 sub_b''s trial-ending notice and its trial''s end');
SELECT results_eq(format($$SELECT kind, period_start FROM billing.invoice WHERE customer_id = 22002 AND subscription_id = %s$$, :'sub_b'),
                  $$VALUES ('INITIAL', '2026-03-20Z'::timestamptz)$$, 'sub_b: its first invoice from its trial''s end');
SELECT is(billing.create_due_invoices(500, '2026-04-15Z'), 2, 'at Apr 15 the next periods');
SELECT results_eq(format($$SELECT period_start, period_end FROM billing.invoice WHERE customer_id = 22001 AND subscription_id = %s ORDER BY period_start$$, :'sub_a'),
                  $$VALUES ('2026-03-15Z'::timestamptz, '2026-04-15Z'::timestamptz), ('2026-04-15Z'::timestamptz, '2026-05-15Z'::timestamptz)$$,
                  'sub_a: consecutive periods, none skipped, none twice');
SELECT is(billing.create_due_invoices(500, '2026-06-01Z'), 4, 'at Jun 1: sub_a, sub_b, sub_c renew, sub_d ends at its period end');
SELECT results_eq(format($$SELECT status, cancel_reason FROM billing.subscription WHERE customer_id = 22004 AND id = %s$$, :'sub_d'),
                  $$VALUES ('CANCELED', 'PERIOD_END')$$, 'sub_d: canceled at the end of the year billed at the source, never billed here');

SELECT * FROM finish();
ROLLBACK;
