-- Archiving plans and coupons (issue 28; 20_plans_customers archive_plan, 34_coupons archive_coupon):
-- no new subscription, plan change or redemption; what uses them continues and renews; idempotent,
-- audited; the lists' archived filter. And a customer id is a positive integer across the SQL API
-- (events' schemas say customerId >= 1).
BEGIN;
SELECT plan(29);

SET LOCAL ROLE billing_owner;

SELECT billing.upsert_plan('AR_OLD', 1000, 'USD', 'MONTH');
SELECT billing.upsert_plan('AR_NEW', 2000, 'USD', 'MONTH');
SELECT billing.upsert_plan('AR_LIVE', 3000, 'USD', 'MONTH');
SELECT billing.upsert_coupon('AR_TEN', 10, NULL, NULL, 'repeating', 3);
SELECT id AS sub FROM billing.create_subscription('ar-1', 93001, 'AR_OLD', '2026-03-01Z', 0, 'AR_TEN') \gset
SELECT id AS sub2 FROM billing.create_subscription('ar-2', 93002, 'AR_OLD', '2026-03-01Z') \gset
SELECT billing.change_plan(:sub2, 'AR_NEW', '2026-03-02Z', NULL, 'period_end');
SELECT id AS sub3 FROM billing.create_subscription('ar-4', 93004, 'AR_LIVE', '2026-03-01Z') \gset

-- archive_plan
SELECT is((SELECT archived_at FROM billing.archive_plan('AR_OLD', '2026-03-05Z')), '2026-03-05Z'::timestamptz, 'a plan archived at p_now');
SELECT is((SELECT archived_at FROM billing.archive_plan('AR_OLD', '2026-03-09Z')), '2026-03-05Z'::timestamptz,
          'archived again: unchanged (idempotent)');
SELECT is((SELECT count(*) FROM billing.audit_log WHERE function = 'archive_plan' AND args->>'code' = 'AR_OLD'), 2::bigint,
          'each call audited as other catalog writes');
SELECT throws_ok($$SELECT billing.archive_plan('AR_NONE', '2026-03-05Z')$$, 'BL404', NULL, 'an unknown plan: BL404');
SELECT throws_ok($$SELECT billing.create_subscription('ar-3', 93003, 'AR_OLD', '2026-03-06Z')$$, 'BL422',
                 'plan AR_OLD is archived', 'no new subscription on an archived plan');
SELECT is((SELECT id FROM billing.create_subscription('ar-1', 93001, 'AR_OLD', '2026-03-01Z', 0, 'AR_TEN')), :sub::bigint,
          'an idempotency key used before the archiving still answers its subscription');
SELECT throws_ok($$SELECT billing.change_plan($$ || :sub3 || $$, 'AR_OLD', '2026-03-06Z')$$, 'BL422',
                 'plan AR_OLD is archived', 'no plan change to an archived plan');
SELECT billing.archive_plan('AR_NEW', '2026-03-06Z');
SELECT is((SELECT scheduled_plan_id FROM billing.change_plan(:sub, 'AR_OLD', '2026-03-07Z', NULL, 'period_end')), NULL::bigint,
          'the current (archived) plan is always allowed: withdraws nothing, changes nothing');
SELECT is((SELECT price_amount FROM billing.upsert_plan('AR_OLD', 1500, 'USD', 'MONTH', 1, '2026-03-10Z')), 1500::bigint,
          'an archived plan''s price may still change');
SELECT is((SELECT archived_at FROM billing.plan WHERE code = 'AR_OLD'), '2026-03-05Z'::timestamptz, 'and it stays archived');

-- archive_coupon
SELECT is((SELECT archived_at FROM billing.archive_coupon('AR_TEN', '2026-03-05Z')), '2026-03-05Z'::timestamptz, 'a coupon archived');
SELECT is((SELECT archived_at FROM billing.archive_coupon('AR_TEN', '2026-03-08Z')), '2026-03-05Z'::timestamptz, 'again: unchanged');
SELECT is((SELECT count(*) FROM billing.audit_log WHERE function = 'archive_coupon'), 2::bigint, 'audited');
SELECT throws_ok($$SELECT billing.archive_coupon('AR_NONE', '2026-03-05Z')$$, 'BL404', NULL, 'an unknown coupon: BL404');
SELECT throws_ok($$SELECT billing.apply_coupon($$ || :sub2 || $$, 'AR_TEN', '2026-03-06Z')$$, 'BL422',
                 'coupon AR_TEN is archived', 'no new redemption of an archived coupon');
SELECT is((SELECT coupon_code FROM billing.apply_coupon(:sub, 'AR_TEN', '2026-03-06Z')), 'AR_TEN',
          'applying the active (archived) coupon again changes nothing');

SELECT is((SELECT outcome FROM billing.import_subscriptions(
              '[{"external_id": "ar-imp", "customer_id": 93001, "plan_code": "AR_OLD", "coupon_code": "AR_TEN",
                 "coupon_until": "2026-05-01Z", "current_period_start": "2026-03-01Z", "current_period_end": "2026-04-01Z"}]',
              '2026-03-10Z', true)), 'new', 'an import may name an archived plan and coupon (they exist at the source)');

-- what uses them continues: the renewal bills the archived plan (its new price) with the coupon's discount
SELECT ok(billing.create_due_invoices(500, '2026-04-01 00:00:01Z') >= 2, 'the subscriptions on archived plans renew');
SELECT results_eq($$SELECT amount, discount_amount FROM billing.invoice WHERE subscription_id = $$ || :sub || $$ AND kind = 'RENEWAL'$$,
                  $$VALUES (1350::bigint, 150::bigint)$$, 'at the archived plan''s price, the archived coupon''s discount continuing');
SELECT is((SELECT p.code FROM billing.subscription s JOIN billing.plan p ON p.id = s.plan_id WHERE s.id = :sub2), 'AR_NEW',
          'a change scheduled before its plan was archived still happens');

-- the lists' archived filter
SELECT results_eq($$SELECT code FROM billing.list_plans(100, NULL, NULL, true) WHERE code LIKE 'AR\_%'$$,
                  $$VALUES ('AR_NEW'), ('AR_OLD')$$, 'list_plans archived: only the archived, newest first');
SELECT results_eq($$SELECT code FROM billing.list_plans(100, NULL, NULL, false) WHERE code LIKE 'AR\_%'$$,
                  $$VALUES ('AR_LIVE')$$, 'list_plans not archived: only those offered');
SELECT is((SELECT count(*) FROM billing.list_plans(100) WHERE code LIKE 'AR\_%'), 3::bigint, 'no filter: all');
SELECT billing.upsert_coupon('AR_LIVE', 5, NULL, NULL, 'once');
SELECT results_eq($$SELECT code FROM billing.list_coupons(100, NULL, NULL, true) WHERE code LIKE 'AR\_%'$$,
                  $$VALUES ('AR_TEN')$$, 'list_coupons archived');
SELECT results_eq($$SELECT code FROM billing.list_coupons(100, NULL, NULL, false) WHERE code LIKE 'AR\_%'$$,
                  $$VALUES ('AR_LIVE')$$, 'list_coupons redeemable');

-- a customer id is a positive integer
SELECT throws_ok($$SELECT billing.create_subscription('ar-zero', 0, 'AR_LIVE', '2026-03-06Z')$$, 'BL422',
                 'a customer id is a positive integer, not 0', 'create_subscription: customer 0 refused');
SELECT throws_ok($$SELECT billing.upsert_customer(-5)$$, 'BL422', NULL, 'upsert_customer: a negative id refused');
SELECT throws_ok($$SELECT billing.set_customer_details(0, 'Zero', NULL, NULL, NULL, NULL, NULL, NULL, NULL, 'TAXABLE')$$,
                 'BL422', NULL, 'set_customer_details: customer 0 refused');
SELECT is((SELECT problem FROM billing.import_customers('[{"external_id": "zero", "id": 0}]', '2026-03-06Z', true)),
          'a customer id is a positive integer, not 0', 'import_customers: customer 0 refused');

SELECT * FROM finish();
ROLLBACK;
