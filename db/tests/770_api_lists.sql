-- The HTTP API's lists and reads (db/functions/77_api_lists.sql): cursor pages in both directions,
-- the filters, the bounds, create_customer, and the index each page is planned on.
BEGIN;
SELECT plan(20);

SET LOCAL ROLE billing_owner;

SELECT billing.upsert_plan('AL_A', 1000, 'USD', 'MONTH');
SELECT billing.upsert_plan('AL_B', 2000, 'USD', 'MONTH');
SELECT count(billing.create_subscription('al-' || n, 77000 + n, CASE WHEN n % 2 = 0 THEN 'AL_A' ELSE 'AL_B' END,
                                         '2026-05-01 10:00Z'::timestamptz + n * interval '1 hour'))
  FROM generate_series(1, 9) n;
CREATE TEMP TABLE al_subs AS
    SELECT id, customer_id FROM billing.subscription WHERE customer_id BETWEEN 77001 AND 77009;
SELECT max(id) AS top, min(id) AS bottom FROM al_subs \gset

-- pages forward: newest first, the cursor excluded, no gap, no repeat
SELECT results_eq($$SELECT id FROM billing.list_subscriptions(4, NULL, NULL) WHERE customer_id BETWEEN 77001 AND 77009$$,
                  $$SELECT id FROM al_subs ORDER BY id DESC LIMIT 4$$, 'the first page: the newest, descending');
SELECT results_eq(format($$SELECT id FROM billing.list_subscriptions(100, %s, NULL) WHERE customer_id BETWEEN 77001 AND 77009$$, :top),
                  $$SELECT id FROM al_subs ORDER BY id DESC OFFSET 1$$, 'starting_after: every row below the cursor, descending');
SELECT results_eq(format($$SELECT id FROM billing.list_subscriptions(3, NULL, %s)$$, :bottom),
                  format($$SELECT id FROM billing.subscription WHERE id > %s ORDER BY id LIMIT 3$$, :bottom),
                  'ending_before: the rows above the cursor, nearest first (ascending)');
SELECT is((SELECT count(*) FROM billing.list_subscriptions(100, :bottom, NULL) WHERE customer_id BETWEEN 77001 AND 77009),
          0::bigint, 'nothing after the last row');

-- filters
SELECT results_eq($$SELECT customer_id FROM billing.list_subscriptions(10, NULL, NULL, 77004)$$,
                  $$VALUES (77004::bigint)$$, 'by customer');
SELECT is((SELECT count(*) FROM billing.list_subscriptions(100, NULL, NULL, NULL, NULL, 'AL_A')), 4::bigint,
          'by plan code (the even customers)');
SELECT is((SELECT count(*) FROM billing.list_subscriptions(100, NULL, NULL, NULL, 'CANCELED', 'AL_A')), 0::bigint,
          'by status and plan');
SELECT is((SELECT count(*) FROM billing.list_subscriptions(100, NULL, NULL, NULL, NULL, 'NO_SUCH_PLAN')), 0::bigint,
          'an unknown plan code: none');
SELECT is((SELECT count(*) FROM billing.list_invoices(100, NULL, NULL, 77003)), 1::bigint, 'invoices by customer');
SELECT is((SELECT count(*) FROM billing.list_invoices(100, NULL, NULL, NULL, 'OPEN', '2026-05-01 12:00Z', '2026-05-01 15:00Z')),
          3::bigint, 'invoices by status and period start in [from, to)');

-- bounds
SELECT throws_ok($$SELECT * FROM billing.list_subscriptions(0)$$, 'BL422', NULL, 'a limit of 0 is refused');
SELECT throws_ok($$SELECT * FROM billing.list_subscriptions(102)$$, 'BL422', NULL, 'a limit past 101 is refused');
SELECT throws_ok($$SELECT * FROM billing.list_customers(5, 1, 2)$$, 'BL422', NULL, 'both cursors at once are refused');

-- customers
SELECT is((billing.create_customer(77100, 'Europe/Paris', 'Ada', 'Ada@Example.com', NULL, NULL, NULL, NULL, 'FR', NULL)).email,
          'Ada@Example.com', 'create_customer: created with its details');
SELECT throws_ok($$SELECT billing.create_customer(77100, 'UTC', 'Other', NULL, NULL, NULL, NULL, NULL, NULL, NULL)$$,
                 'BL409', NULL, 'create_customer: an existing id is a conflict');
SELECT results_eq($$SELECT id FROM billing.list_customers(10, NULL, NULL, 'ada@example.COM')$$, $$VALUES (77100::bigint)$$,
                  'customers by email, case-insensitive');
SELECT is((SELECT count(*) FROM billing.get_customer(424242)), 0::bigint, 'get_customer: none for an unknown id');

-- the plan of a page: its filter's index, no sort of the table (the planner told the table is big)
SET LOCAL enable_seqscan = off;
CREATE FUNCTION pg_temp.plan_of(p_sql text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE r record; v text := ''; BEGIN
    FOR r IN EXECUTE 'EXPLAIN ' || p_sql LOOP v := v || r."QUERY PLAN" || E'\n'; END LOOP; RETURN v; END $$;
SELECT matches(pg_temp.plan_of($$SELECT * FROM billing.subscription WHERE status = 'ACTIVE' AND id < 100 ORDER BY id DESC LIMIT 11$$),
               'subscription_status_idx', 'a status page walks subscription_status_idx');
SELECT matches(pg_temp.plan_of($$SELECT * FROM billing.invoice WHERE status = 'OPEN' ORDER BY id DESC LIMIT 11$$),
               'invoice_status_idx', 'an invoice status page walks invoice_status_idx');
SELECT ok(has_function_privilege('billing_api', 'billing.list_invoices(integer, bigint, bigint, bigint, text, timestamptz, timestamptz, bigint)', 'EXECUTE')
          AND NOT has_function_privilege('billing_readonly', 'billing.list_customers(integer, bigint, bigint, text)', 'EXECUTE'),
          'granted to the API, not to the read-only job');

SELECT * FROM finish();
ROLLBACK;
