-- 851_plan_self_serve: a plan says whether customers may sign up to it themselves (plan.self_serve,
-- migration 0850; upsert_plan's p_self_serve). False for a new plan unless said; NULL (the default)
-- keeps the plan's, so a price change that does not name it neither withdraws nor offers the plan;
-- it may change on a plan in use; audited. The refusal of a customer session's signup is the HTTP
-- API's: driver/tests/test_customer_session_routes.py.
BEGIN;
SET LOCAL ROLE billing_owner;  -- on Citus, reads of shards in the writers' role (see 200_plans_customers)
SELECT plan(10);

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

SELECT * FROM finish();
ROLLBACK;
