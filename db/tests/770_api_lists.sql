-- The HTTP API's lists and reads (db/functions/77_api_lists.sql): cursor pages in both directions,
-- the filters, the bounds, create_customer, and the index each page is planned on.
BEGIN;
SELECT plan(48);

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
SELECT id AS sub3 FROM al_subs WHERE customer_id = 77003 \gset
SELECT results_eq(format($$SELECT customer_id, subscription_id FROM billing.list_invoices(100, NULL, NULL, NULL, NULL, NULL, NULL, %s)$$, :sub3),
                  format($$VALUES (77003::bigint, %s::bigint)$$, :sub3), 'invoices of a subscription (through its customer)');

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

-- The plan of each list's page, on the very statement its function runs (billing._page), with the
-- planner told that a scan of the table is out of the question (enable_seqscan off, as on a table
-- of millions): each filter walks its index from the cursor, never a sort of the whole table. The
-- bench of 1 million subscriptions behind these choices: bench/api_lists (docs/http-api.md).
-- (Single PostgreSQL only: on Citus each shard plans its own page on the shard's copy of the same
-- index and the coordinator merges the shards' sorted pages; EXPLAIN shows the merge, not this.)
-- A time range's page (p_walk): the walk of the id index when it fills the page, else the range's
-- own index with the newest ids kept; either way exactly the rows a plain ORDER BY id would give.
CREATE FUNCTION pg_temp.range_page(p_walk integer, p_after bigint, p_before bigint) RETURNS bigint[] LANGUAGE plpgsql AS $$
DECLARE v bigint[]; BEGIN
    EXECUTE format('SELECT array_agg(id) FROM (%s) x',
                   billing._page('billing.invoice', 'id', ARRAY['period_start >= $3', 'period_start < $4'],
                                 p_after IS NOT NULL, p_before IS NOT NULL, 3, p_walk))
       INTO v USING p_after, p_before, '2026-05-01 12:00Z'::timestamptz, '2026-05-01 16:00Z'::timestamptz;
    RETURN v; END $$;
CREATE TEMP TABLE al_range AS
    SELECT id FROM billing.invoice WHERE period_start >= '2026-05-01 12:00Z' AND period_start < '2026-05-01 16:00Z';
SELECT is(pg_temp.range_page(1, NULL, NULL), ARRAY(SELECT id FROM al_range ORDER BY id DESC LIMIT 3),
          'a range, the walk too short: the range''s index, newest first');
SELECT is(pg_temp.range_page(2000, NULL, NULL), ARRAY(SELECT id FROM al_range ORDER BY id DESC LIMIT 3),
          'a range, the walk fills the page: the same rows');
SELECT is(pg_temp.range_page(1, (SELECT max(id) FROM al_range), NULL),
          ARRAY(SELECT id FROM al_range WHERE id < (SELECT max(id) FROM al_range) ORDER BY id DESC LIMIT 3),
          'a range after a cursor');
SELECT is(pg_temp.range_page(1, NULL, (SELECT min(id) FROM al_range)),
          ARRAY(SELECT id FROM al_range WHERE id > (SELECT min(id) FROM al_range) ORDER BY id LIMIT 3),
          'a range before a cursor: ascending, nearest first');

SELECT billing._distributed('billing.subscription') AS on_citus \gset
\if :on_citus
SELECT skip('the plans of a page are the shards'' own on Citus (the coordinator merges sorted pages)', 17);
\else
-- The statistics these plans read are this file's own rows (ANALYZE in the transaction counts the
-- rows it inserted; rolled back with it), not whatever autovacuum last saw of the rows other files
-- committed and rolled back: make test failed on two of these checks in one day (2026-12-06), each
-- passing alone.
ANALYZE billing.subscription, billing.invoice, billing.customer, billing.plan, billing.credit_note,
        billing.refund, billing.outbox_event;
SET LOCAL enable_seqscan = off;
-- (and a bitmap of a few rows then sorted: with the statistics of an empty table the planner takes it)
SET LOCAL enable_bitmapscan = off;
CREATE FUNCTION pg_temp.explain_lines(p_query text) RETURNS SETOF text LANGUAGE plpgsql AS $$
BEGIN RETURN QUERY EXECUTE 'EXPLAIN ' || p_query; END $$;
CREATE FUNCTION pg_temp.plan_of(p_from text, p_where text[], p_args text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE r record; v text := ''; v_types text; BEGIN
    -- the parameters' types from the arguments' casts ($1, $2 the cursors: bigint)
    SELECT string_agg(coalesce(m[1], 'bigint'), ', ' ORDER BY n) INTO v_types
      FROM unnest(string_to_array(p_args, ', ')) WITH ORDINALITY a(arg, n)
      LEFT JOIN LATERAL regexp_match(a.arg, '::([a-z ]+)$') m ON true;
    EXECUTE format('PREPARE al_page(%s) AS ', v_types) || billing._page(p_from, 'id', p_where, true, false, 11);
    FOR r IN EXECUTE 'EXPLAIN EXECUTE al_page(' || p_args || ')' LOOP v := v || r."QUERY PLAN" || E'\n'; END LOOP;
    DEALLOCATE al_page;
    RETURN v; END $$;
-- A page walks an index from the cursor and never sorts or scans the table. Which index is a matter
-- of statistics: on these few rows, with other pgTAP files writing the same tables at once (pg_prove
-- -j), the filter's own index and the id index walked with the filter checked on the way cost nearly
-- the same, and the planner picked either from run to run. Both are pages without a sort; the plans at
-- a million rows are bench/api_lists's (docs/http-api.md).
CREATE FUNCTION pg_temp.walks(p_plan text, p_index text) RETURNS boolean LANGUAGE sql AS $$
    SELECT p_plan ~ ('Index (Only )?Scan( Backward)? using (' || p_index || '|[a-z_]+_id_idx|[a-z_]+_pkey)\M')
       AND p_plan !~ 'Sort' AND p_plan !~ 'Seq Scan' $$;
-- ACTIVE is left out of subscription_status_idx (0540): most subscriptions are ACTIVE, and at scale the
-- page walks subscription_id_idx and checks the status on the way (200,000 rows: 4 buffers, bench/README);
-- on these few rows the planner may take the due index and sort one row instead. Never the table.
SELECT doesnt_match(pg_temp.plan_of('billing.subscription', ARRAY['status = $3'],
                                    $$1000::bigint, NULL::bigint, 'ACTIVE'::text$$), 'Seq Scan',
                    'subscriptions ACTIVE: an index, the status checked on the way (subscription_status_idx leaves ACTIVE out, 0540)');
SELECT ok(pg_temp.walks(pg_temp.plan_of('billing.subscription', ARRAY['status = $3'],
                                        $$1000::bigint, NULL::bigint, 'PAST_DUE'::text$$), 'subscription_status_idx'),
          'subscriptions by another status: subscription_status_idx from the cursor');
SELECT ok(pg_temp.walks(pg_temp.plan_of('billing.subscription', ARRAY['plan_id = (SELECT p.id FROM billing.plan p WHERE p.code = $3)'],
                                        $$1000::bigint, NULL::bigint, 'AL_A'::text$$), 'subscription_plan_idx'),
          'subscriptions by plan code: subscription_plan_idx');
SELECT ok(pg_temp.walks(pg_temp.plan_of('billing.subscription', ARRAY['customer_id = $3'],
                                        $$1000::bigint, NULL::bigint, 77004::bigint$$), 'subscription_(pkey|customer_id_key)'),
          'subscriptions of a customer: its primary key');
SELECT ok(pg_temp.walks(pg_temp.plan_of('billing.subscription', NULL, $$1000::bigint, NULL::bigint$$), 'subscription_id_idx'),
          'every subscription: subscription_id_idx');
SELECT matches(pg_temp.plan_of('billing.subscription', ARRAY['created_at >= $3', 'created_at < $4'],
                               $$1000::bigint, NULL::bigint, (now() - interval '1 day')::timestamptz, now()::timestamptz$$),
               'subscription_(created|id)_idx', 'subscriptions created in a range: subscription_created_idx (the range, then by id)');
SELECT ok(pg_temp.walks(pg_temp.plan_of('billing.invoice', ARRAY['status = $3', 'status <> ''OPEN'''],
                                        $$1000::bigint, NULL::bigint, 'PAID'::text$$),
                        'invoice_status_idx'), 'invoices by status (but OPEN): invoice_status_idx');
-- OPEN is left out of invoice_status_idx (0860): the page's walk of the id index (its plan above, the
-- status checked on the way), else the OPEN rows through invoice_chargeable_idx, newest kept.
SELECT doesnt_match(pg_temp.plan_of('billing.invoice', ARRAY['status = ''OPEN'''], $$1000::bigint, NULL::bigint$$), 'Seq Scan',
                    'invoices OPEN: an index, the status checked on the way');
SELECT ok(pg_temp.walks(pg_temp.plan_of('billing.invoice', ARRAY['customer_id = $3'], $$1000::bigint, NULL::bigint, 77003::bigint$$),
                        'invoice_pkey'), 'invoices of a customer: its primary key');
-- The customer's invoices walked by the primary key with the subscription checked on the way, or the
-- subscription's few invoices through invoice_one_per_period (customer_id, subscription_id, ...) then
-- sorted: both bounded by one customer; which one is the statistics' call (autovacuum's ANALYZE of the
-- rows other files committed). make test failed once here (2026-12-06) on a plan the old check refused
-- (a Sort, or no index it named); the plan is now printed when the check fails. Never the table.
SELECT pg_temp.plan_of('billing.invoice', ARRAY['customer_id = (SELECT s.customer_id FROM billing.subscription s WHERE s.id = $3)',
                                               'subscription_id = $3'], $$1000::bigint, NULL::bigint, 1::bigint$$) AS sub_plan \gset
SELECT ok(:'sub_plan' ~ 'Index (Only )?Scan( Backward)? using (invoice_pkey|invoice_one_per_period|invoice_id_idx)\M'
          AND :'sub_plan' !~ 'Seq Scan',
          'invoices of a subscription: through its customer (no index on subscription_id alone, 0540)');
SELECT diag(:'sub_plan') WHERE NOT (:'sub_plan' ~ 'Index (Only )?Scan( Backward)? using (invoice_pkey|invoice_one_per_period|invoice_id_idx)\M'
                                    AND :'sub_plan' !~ 'Seq Scan');
SELECT ok(pg_temp.walks(pg_temp.plan_of('billing.invoice', NULL, $$1000::bigint, NULL::bigint$$), 'invoice_id_idx'),
          'every invoice: invoice_id_idx');
SELECT matches(pg_temp.plan_of('billing.invoice', ARRAY['period_start >= $3', 'period_start < $4'],
                               $$1000::bigint, NULL::bigint, (now() - interval '1 year')::timestamptz, now()::timestamptz$$),
               'invoice_(period|id)_idx', 'invoices by period: invoice_period_idx (the range, then by id)');
SELECT ok(pg_temp.walks(pg_temp.plan_of('billing.credit_note', NULL, $$1000::bigint, NULL::bigint$$), 'credit_note_id_idx'),
          'every credit note: credit_note_id_idx');
SELECT ok(pg_temp.walks(pg_temp.plan_of('billing.refund', NULL, $$1000::bigint, NULL::bigint$$), 'refund_id_idx'),
          'every refund: refund_id_idx');
SELECT ok(pg_temp.walks(pg_temp.plan_of('billing.customer', ARRAY['email IS NOT NULL AND lower(email) = lower($3)'],
                                        $$1000::bigint, NULL::bigint, 'a@b.c'::text$$), 'customer_email_idx'),
          'customers by email: customer_email_idx');
SELECT ok(pg_temp.walks(pg_temp.plan_of('billing.outbox_event', ARRAY['customer_id = $3'], $$1000::bigint, NULL::bigint, 77003::bigint$$),
                        'outbox_event_pkey'), 'events of a customer: the outbox primary key');
SELECT ok(pg_temp.walks(pg_temp.plan_of('billing.plan', ARRAY['archived_at IS NOT NULL'], $$1000::bigint, NULL::bigint$$),
                        'plan_archived_id_idx'), 'archived plans: plan_archived_id_idx (migration 0290)');
RESET enable_seqscan;
RESET enable_bitmapscan;
\endif
-- OPEN invoices (0860: not in invoice_status_idx): the rows of a page are the plain query's, whether the
-- walk of 2,000 id entries fills it or, past 2,100 newer PAID invoices, the OPEN rows' own index does.
SELECT results_eq($$SELECT id FROM billing.list_invoices(100, NULL, NULL, NULL, 'OPEN')$$,
                  $$SELECT id FROM billing.invoice WHERE status = 'OPEN' ORDER BY id DESC LIMIT 100$$,
                  'invoices OPEN: the walk fills the page');
INSERT INTO billing.invoice
SELECT (jsonb_populate_record(i, jsonb_build_object(
            'id', nextval(pg_get_serial_sequence('billing.invoice', 'id')), 'kind', 'RENEWAL',
            'period_start', i.period_start + n * interval '1 month', 'period_end', i.period_start + (n + 1) * interval '1 month',
            'status', 'PAID', 'paid_at', i.created_at, 'next_attempt_at', NULL))).*
  FROM billing.invoice i CROSS JOIN generate_series(1, 2100) n
 WHERE i.customer_id = 77003;
SELECT max(id) AS newest_open FROM billing.invoice WHERE status = 'OPEN' \gset
\if :on_citus
SELECT skip('the plans of a page are the shards'' own on Citus', 1);
\else
-- past the walk, the OPEN rows (9 of these 2,109 invoices) through their own index, never the id index
ANALYZE billing.invoice;
SET LOCAL enable_seqscan = off;
SET LOCAL enable_bitmapscan = off;
SELECT matches((SELECT string_agg(p, E'\n') FROM pg_temp.explain_lines(
                    $$SELECT r.id FROM billing.invoice r WHERE r.status = 'OPEN' ORDER BY r.id + 0 DESC LIMIT 5$$) p),
               'Index Scan using invoice_chargeable_idx', 'invoices OPEN past the walk: invoice_chargeable_idx (every OPEN row), newest kept');
RESET enable_seqscan;
RESET enable_bitmapscan;
\endif
SELECT results_eq($$SELECT id FROM billing.list_invoices(5, NULL, NULL, NULL, 'OPEN')$$,
                  $$SELECT id FROM billing.invoice WHERE status = 'OPEN' ORDER BY id DESC LIMIT 5$$,
                  'invoices OPEN behind 2,100 newer PAID ones: the OPEN rows'' index, newest first');
SELECT results_eq(format($$SELECT id FROM billing.list_invoices(5, %s, NULL, NULL, 'OPEN')$$, :newest_open),
                  format($$SELECT id FROM billing.invoice WHERE status = 'OPEN' AND id < %s ORDER BY id DESC LIMIT 5$$, :newest_open),
                  'invoices OPEN behind them, after a cursor');
SELECT results_eq($$SELECT id FROM billing.list_invoices(7, NULL, NULL, NULL, 'PAID')$$,
                  $$SELECT id FROM billing.invoice WHERE status = 'PAID' ORDER BY id DESC LIMIT 7$$,
                  'invoices PAID: invoice_status_idx''s range');
SELECT results_eq($$SELECT id FROM billing.console_invoices('OPEN', NULL, 5)$$,
                  $$SELECT id FROM billing.invoice WHERE status = 'OPEN' ORDER BY id DESC LIMIT 5$$,
                  'console_invoices OPEN behind 2,100 newer PAID ones');
SELECT results_eq(format($$SELECT id FROM billing.console_invoices('OPEN', %s, 500)$$, :newest_open),
                  format($$SELECT id FROM billing.invoice WHERE status = 'OPEN' AND id < %s ORDER BY id DESC LIMIT 500$$, :newest_open),
                  'console_invoices OPEN after a cursor');
SELECT results_eq($$SELECT id FROM billing.console_invoices('PAID', NULL, 3)$$,
                  $$SELECT id FROM billing.invoice WHERE status = 'PAID' ORDER BY id DESC LIMIT 3$$,
                  'console_invoices PAID');
SELECT ok(has_function_privilege('billing_api', 'billing.list_invoices(integer, bigint, bigint, bigint, text, timestamptz, timestamptz, bigint)', 'EXECUTE')
          AND NOT has_function_privilege('billing_readonly', 'billing.list_customers(integer, bigint, bigint, text)', 'EXECUTE'),
          'granted to the API, not to the read-only job');

SELECT * FROM finish();
ROLLBACK;
