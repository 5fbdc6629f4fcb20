-- 851_plan_self_serve: a plan says whether customers may sign up to it themselves (plan.self_serve,
-- migration 0850; upsert_plan's p_self_serve). False for a new plan unless said; NULL (the default)
-- keeps the plan's, so a price change that does not name it neither withdraws nor offers the plan;
-- it may change on a plan in use; audited. The refusal of a customer session's signup is the HTTP
-- API's: driver/tests/test_customer_session_routes.py.
BEGIN;
SET LOCAL ROLE billing_owner;  -- on Citus, reads of shards in the writers' role (see 200_plans_customers)
SELECT plan(16);

SELECT col_not_null('billing', 'plan', 'self_serve', 'plan.self_serve is NOT NULL');
SELECT col_default_is('billing', 'plan', 'self_serve', 'false', 'plan.self_serve is false unless said (plans of before 0850 too)');

SELECT is((billing.upsert_plan('SS_STAFF', 0, 'USD', 'MONTH', 1, '2026-01-01Z')).self_serve, false,
          'a new plan is not self-serve unless the operator says so');
SELECT is((billing.upsert_plan('SS_PRO', 1500, 'USD', 'MONTH', 1, '2026-01-01Z', NULL, NULL, true)).self_serve, true,
          'p_self_serve true: customers may choose it');
SELECT is((billing.upsert_plan('SS_PRO', 1700, 'USD', 'MONTH', 1, '2026-02-01Z')).self_serve, true,
          'a price change that does not name it keeps it self-serve');
SELECT is((SELECT price_amount FROM billing.plan WHERE code = 'SS_PRO'), 1700::bigint, '... and the price changed');
SELECT is((billing.upsert_plan('SS_STAFF', 0, 'USD', 'MONTH', 1, '2026-02-01Z')).self_serve, false,
          'nor does it offer a plan that was not');

SELECT id AS ss_sub FROM billing.create_subscription('ss-1', 85101, 'SS_PRO', '2026-02-02Z') \gset
SELECT is((billing.upsert_plan('SS_PRO', 1700, 'USD', 'MONTH', 1, '2026-02-03Z', NULL, NULL, false)).self_serve, false,
          'a plan in use may be withdrawn from self-serve (only its terms are frozen)');
SELECT is(billing.plan_code((billing.get_subscription(:ss_sub)).plan_id), 'SS_PRO',
          '... its subscription stays on it');
SELECT is((SELECT args->>'self_serve' FROM billing.audit_log WHERE function = 'upsert_plan' ORDER BY id DESC LIMIT 1),
          'false', 'upsert_plan audits p_self_serve');

-- money10: set_plan_self_serve switches it alone (audited, idempotent, BL404 / BL422), and
-- lock_self_serve_plans answers the self-serve codes among those asked (what a customer session's
-- signup locks FOR SHARE in its transaction; the wait itself: test_customer_session_routes.py).
SELECT is((billing.set_plan_self_serve('SS_PRO', true, now())).self_serve, true, 'set_plan_self_serve switches it on');
SELECT is((billing.set_plan_self_serve('SS_PRO', true, now())).price_amount,
          (SELECT price_amount FROM billing.plan WHERE code = 'SS_PRO'), '... again: unchanged, nothing else of the plan moves');
SELECT is(billing.lock_self_serve_plans(ARRAY['SS_PRO', 'SS_STAFF', 'NO_SUCH_PLAN']), ARRAY['SS_PRO'],
          'lock_self_serve_plans: the self-serve codes only, unknown ones left out');
SELECT throws_ok($$SELECT billing.set_plan_self_serve('NO_SUCH_PLAN', true, now())$$, 'BL404', NULL, 'an unknown plan: BL404');
SELECT throws_ok($$SELECT billing.set_plan_self_serve('SS_PRO', NULL, now())$$, 'BL422', NULL, 'a NULL switch: BL422');
SELECT is((SELECT count(*)::int FROM billing.audit_log WHERE function = 'set_plan_self_serve'), 2, 'every call that switched audited (a refused one writes nothing)');

SELECT * FROM finish();
ROLLBACK;
