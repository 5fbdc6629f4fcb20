-- 200_plans_customers: plan and customer upserts validate their input.
BEGIN;
-- As the owner of the schema: on Citus a transaction may not read as one user the shards another
-- user (the SECURITY DEFINER functions run as billing_owner) wrote in it.
SET LOCAL ROLE billing_owner;
SELECT plan(15);

SELECT is((billing.upsert_plan('T_BASIC', 1000, 'USD', 'MONTH')).interval_count, 1, 'interval count defaults to 1');
SELECT is((billing.upsert_plan('T_BASIC', 1500, 'USD', 'MONTH')).price_amount, 1500::bigint, 'upsert updates the price');
SELECT is((SELECT count(*) FROM billing.plan WHERE code = 'T_BASIC'), 1::bigint, 'one row per code');
SELECT throws_ok($$SELECT billing.upsert_plan('T_NEG', -1, 'USD', 'MONTH')$$, 'BL422', NULL, 'negative price is BL422');
SELECT throws_ok($$SELECT billing.upsert_plan('T_CUR', 1, 'usd', 'MONTH')$$, 'BL422', NULL, 'lower-case currency is BL422');
SELECT throws_ok($$SELECT billing.upsert_plan('T_CUR', 1, 'US', 'MONTH')$$, 'BL422', NULL, 'two-letter currency is BL422');
SELECT throws_ok($$SELECT billing.upsert_plan('T_INT', 1, 'USD', 'HOUR')$$, 'BL422', NULL, 'unknown interval is BL422');
SELECT throws_ok($$SELECT billing.upsert_plan('T_INT', 1, 'USD', 'MONTH', 0)$$, 'BL422', NULL, 'interval count 0 is BL422');
SELECT billing.create_subscription('t04-k1', 4001, 'T_BASIC', '2026-01-01Z');
SELECT throws_ok($$SELECT billing.upsert_plan('T_BASIC', 1500, 'EUR', 'MONTH')$$, 'BL422', NULL,
                 'a plan in use cannot change currency');

SELECT is((billing.upsert_customer(4002)).timezone, 'UTC', 'time zone defaults to UTC');
SELECT is((billing.upsert_customer(4002, 'America/Sao_Paulo')).timezone, 'America/Sao_Paulo', 'time zone can change');
SELECT throws_ok($$SELECT billing.upsert_customer(4003, 'Europe/Atlantis')$$, 'BL422', NULL, 'unknown zone is BL422');
SELECT FROM (SELECT set_config('billing.tz_' || md5('Europe/Atlantis'), 'ok', true)) forged WHERE false;
SELECT throws_ok($$SELECT billing.upsert_customer(4003, 'Europe/Atlantis')$$, 'BL422', NULL,
                 'a session setting cannot vouch for a zone (validation reads only catalog data)');
-- (A query text, not a subquery: on Citus a read of one customer's shard goes to its worker whole,
-- pgTAP's call included, where this transaction's plan is unknown.)
SELECT results_eq($$SELECT timezone FROM billing.customer WHERE id = 4001$$, $$VALUES ('UTC')$$,
                  'create_subscription created the unknown customer in UTC');
-- A time zone change leaves existing calendars alone.
SELECT billing.upsert_customer(4001, 'Asia/Tokyo');
SELECT results_eq($$SELECT timezone FROM billing.subscription WHERE customer_id = 4001$$, $$VALUES ('UTC')$$,
                  'existing subscriptions keep their zone');

SELECT * FROM finish();
ROLLBACK;
