-- The operator console's SQL (db/functions/86_console.sql): sessions, reads, MRR, replay.
BEGIN;
SELECT plan(46);
-- One user for the fixtures and the SECURITY DEFINER calls (on Citus a transaction may not read
-- placements another user wrote in it); the same on a single PostgreSQL.
SET LOCAL ROLE billing_owner;

SELECT billing.upsert_plan('C_M', 3000, 'EUR', 'MONTH', 1);
SELECT billing.upsert_plan('C_Y', 24000, 'EUR', 'YEAR', 1);
SELECT billing.upsert_plan('C_W', 700, 'JPY', 'WEEK', 2);
SELECT billing.upsert_customer(41, 'UTC');
SELECT billing.upsert_customer(42, 'Asia/Tokyo');
SELECT (billing.create_subscription('c-1', 41, 'C_M', '2026-03-01Z')).id AS s1 \gset
SELECT (billing.create_subscription('c-2', 41, 'C_Y', '2026-03-01Z')).id AS s2 \gset
SELECT (billing.create_subscription('c-3', 42, 'C_W', '2026-03-01Z')).id AS s3 \gset

-- -- sessions ---------------------------------------------------------------------------------
SELECT billing.create_api_key('bk_console01', 'admin', sha256('k1'), ARRAY['admin']);
SELECT billing.create_api_key('bk_console02', 'reader', sha256('k2'), ARRAY['subscriptions:read']);
SELECT billing.create_api_key('bk_console03', 'writer', sha256('k3'), ARRAY['subscriptions:write']);
SELECT is((SELECT scopes FROM billing.console_open_session(sha256('t1'), sha256('k1'), '1 hour', '2026-03-02Z')),
          ARRAY['admin'], 'an admin key opens a session');
SELECT is((SELECT key_id FROM billing.console_session(sha256('t1'), '2026-03-02 00:30Z')), 'bk_console01',
          'the token finds its session');
SELECT is((SELECT count(*)::int FROM billing.console_session(sha256('t1'), '2026-03-02 01:00:01Z')), 0,
          'an expired session finds nothing');
SELECT is((SELECT count(*)::int FROM billing.console_session(sha256('nope'), '2026-03-02 00:30Z')), 0,
          'another token finds nothing');
SELECT is((SELECT actor || ' ' || (args ->> 'key_id') FROM billing.audit_log WHERE function = 'console_open_session'),
          'api-key:bk_console01 bk_console01', 'opening a session is audited as its key, without the token');
SELECT throws_ok($$SELECT * FROM billing.console_open_session(sha256('t3'), sha256('k3'), '1 hour', '2026-03-02Z')$$,
                 'BL422', NULL, 'a key without admin or subscriptions:read cannot log in');
SELECT throws_ok($$SELECT * FROM billing.console_open_session(sha256('t4'), sha256('nobody'), '1 hour', '2026-03-02Z')$$,
                 'BL404', NULL, 'an unknown key cannot log in');
SELECT throws_ok($$SELECT * FROM billing.console_open_session(sha256('t5'), sha256('bk_console01'), '1 hour', '2026-03-02Z')$$,
                 'BL404', NULL, 'a key''s public id is not its secret: no session without the key itself');
SELECT throws_ok($$SELECT * FROM billing.console_open_session(sha256('t4'), sha256('k2'), '30 days', '2026-03-02Z')$$,
                 'BL422', NULL, 'a session lasts at most 7 days');
SELECT lives_ok($$SELECT * FROM billing.console_open_session(sha256('t2'), sha256('k2'), '1 hour', '2026-03-02Z')$$,
                'a read key opens a session');
SELECT billing.revoke_api_key('bk_console02');
SELECT is((SELECT count(*)::int FROM billing.console_session(sha256('t2'), '2026-03-02 00:10Z')), 0,
          'revoking the key ends its sessions at once');
SELECT ok(billing.console_close_session(sha256('t1'), '2026-03-02 00:20Z'), 'logging out closes the session');
SELECT is((SELECT count(*)::int FROM billing.console_session(sha256('t1'), '2026-03-02 00:21Z')), 0,
          'a closed session finds nothing');

-- -- reads ------------------------------------------------------------------------------------
SELECT is((SELECT array_agg(id ORDER BY id) FROM billing.console_customers('42', 50)), ARRAY[42::bigint],
          'search by id');
SELECT is((SELECT count(*)::int FROM billing.console_customers('someone@example.com', 50)), 0,
          'text finds nothing where the customer table has no email or name');
-- A text search by words (customer_search_idx, migration 0311): each word of the query a word of
-- the name or the email (whole, local part, domain), the last one a word's start, any case.
SELECT billing.set_customer_details(41, 'Ana Souza-Lima', 'ana.souza@exemplo.com.br', NULL, NULL, NULL, NULL, NULL, NULL);
SELECT billing.set_customer_details(42, 'Souza Trading KK', 'billing@trading.example', NULL, NULL, NULL, NULL, NULL, NULL);
SELECT is((SELECT array_agg(id ORDER BY id) FROM billing.console_customers('souza', 50)), ARRAY[41, 42]::bigint[],
          'a word of either name (a part of a hyphenated one too)');
SELECT is((SELECT array_agg(id ORDER BY id) FROM billing.console_customers('ANA SOU', 50)), ARRAY[41]::bigint[],
          'every word must match, the last one as a word''s start, in any case');
SELECT is((SELECT array_agg(id ORDER BY id) FROM billing.console_customers('ana.souza@', 50)), ARRAY[41]::bigint[],
          'an email''s local part');
SELECT is((SELECT array_agg(id ORDER BY id) FROM billing.console_customers('trading.example', 50)), ARRAY[42]::bigint[],
          'an email''s domain');
SELECT is((SELECT array_agg(id ORDER BY id) FROM billing.console_customers('Billing@Trading.Example', 50)), ARRAY[42]::bigint[],
          'a whole email');
-- '@' and one word: an email's domain, or its start, through customer_email_domain_idx (migration
-- 0660, (domain, id)): each domain's first customers by id, merged; more than 10 domains: a range.
SELECT is((SELECT array_agg(id ORDER BY id) FROM billing.console_customers('@Trading.Example', 50)), ARRAY[42]::bigint[],
          'an email''s domain after an @, in any case');
SELECT is((SELECT array_agg(id ORDER BY id) FROM billing.console_customers('@exemplo.com', 50)), ARRAY[41]::bigint[],
          'the start of a domain (the operator still typing)');
SELECT is((SELECT count(*)::int FROM billing.console_customers('@souza', 50)), 0,
          'after an @ only the domains are searched, not the names nor the local parts');
SELECT billing.upsert_customer(900 + k, 'UTC') FROM generate_series(1, 12) k;
-- Customer 900 + k at domain d(13 - k): the domains' order is not the customers' order.
SELECT billing.set_customer_details(900 + k, NULL, format('x%s@D%s.example', k, lpad((13 - k)::text, 2, '0')), NULL, NULL, NULL, NULL,
                                    NULL, NULL)
  FROM generate_series(1, 12) k;
SELECT is((SELECT array_agg(id ORDER BY id) FROM billing.console_customers('@d0', 3)), ARRAY[904, 905, 906]::bigint[],
          'a page over 9 domains: the first customers by id of all of them');
SELECT is((SELECT array_agg(id ORDER BY id) FROM billing.console_customers('@d', 4)), ARRAY[901, 902, 903, 904]::bigint[],
          'a page over more than 10 domains (one range of the index): the first customers by id');
SELECT is((SELECT array_agg(id ORDER BY id) FROM billing.console_customers('@d1', 50)), ARRAY[901, 902, 903]::bigint[],
          'a page over 3 domains: all their customers');
SELECT is((SELECT array_agg(id ORDER BY id) FROM billing.console_customers('souza', 1)), ARRAY[41]::bigint[],
          'a page of the matches is the first ones by id (read through the index, then sorted)');
SELECT ok(CASE WHEN EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'citus')
               THEN billing._customer_search_matches(billing._customer_search_query('souza')) IS NULL
               ELSE billing._customer_search_matches(billing._customer_search_query('souza')) > 0 END,
          'the planner''s estimate of the matches, which picks the index or the walk in id order (Citus: none, the walk)');
SELECT is((SELECT count(*)::int FROM billing.console_customers('ouza', 50)), 0,
          'the middle of a word is not a word (a search by words, not substrings)');
SELECT is((SELECT count(*)::int FROM billing.console_customers($$@@ ! o'brien\ 'x$$, 50)), 0,
          'quotes, backslashes and signs are searched as words, never an error');
SELECT is((SELECT (live_subscriptions, open_invoices)::text FROM billing.console_customers('41', 50)), '(2,2)',
          'a customer''s live subscriptions and open invoices');
SELECT is(jsonb_array_length(billing.console_customer(41) -> 'subscriptions'), 2, 'the customer page has its subscriptions');
-- The timeline's events are read among the customer's own (outbox_event_pkey, (customer_id, id)):
-- the same events as every event of its subscriptions and invoices, and no scan of the outbox (at
-- 5,000,000 subscriptions it holds tens of millions of published events; bench/README, scale6).
SELECT is((SELECT array_agg((t ->> 'ref')::bigint ORDER BY (t ->> 'ref')::bigint)
             FROM jsonb_array_elements(billing.console_customer(41) -> 'timeline') t WHERE t ->> 'kind' = 'event'),
          (SELECT array_agg(o.id ORDER BY o.id) FROM billing.outbox_event o
            WHERE (o.aggregate_type = 'subscription' AND o.aggregate_id IN (SELECT id FROM billing.subscription WHERE customer_id = 41))
               OR (o.aggregate_type = 'invoice' AND o.aggregate_id IN (SELECT id FROM billing.invoice WHERE customer_id = 41))),
          'the customer''s timeline has every event of its subscriptions and invoices');
SET LOCAL enable_seqscan = off;  -- a plan with a scan of the outbox takes it anyway (no index holds the published events' aggregates)
-- The functions' plans made again under it (adv11): those cached by the calls above were made with
-- seqscan on, under whatever statistics the outbox had; after 770's ANALYZE (its pg_class figures
-- are written in place, kept after its rollback: 18 rows in 6 pages) the cached plan scanned it.
DISCARD PLANS;
SELECT coalesce(sum(seq_scan), 0) AS outbox_scans FROM pg_catalog.pg_stat_xact_user_tables
 WHERE relid = 'billing.outbox_event'::regclass \gset
SELECT billing.console_customer(41) IS NOT NULL AS called \gset
SELECT is((SELECT coalesce(sum(seq_scan), 0) FROM pg_catalog.pg_stat_xact_user_tables WHERE relid = 'billing.outbox_event'::regclass),
          :outbox_scans::numeric, 'the customer page reads its events through the index of its own (no scan of the outbox)');
SET LOCAL enable_seqscan = on;
SELECT is(billing.console_customer(41) -> 'payment_methods',
          CASE WHEN to_regclass('billing.payment_method') IS NULL THEN 'null' ELSE '[]' END::jsonb,
          'payment methods when their table exists (none here), else none at all');
SELECT throws_ok($$SELECT billing.console_customer(999)$$, 'BL404', NULL, 'an unknown customer');
SELECT is((billing.console_overview('2026-03-02Z') -> 'subscriptions' ->> 'active')::int, 3, 'the overview counts');
-- MRR now, the reports' figure: 30.00 EUR monthly + 240.00 EUR yearly / 12 = 50.00 EUR; 700 JPY
-- every 2 weeks = 700 x 52 / 24 (a week is 52/12 of a month, as in report_mrr).
SELECT is((SELECT array_agg(currency || ' ' || mrr ORDER BY currency) FROM billing.console_mrr('2026-03-02Z', 3)
            WHERE at = '2026-03-02Z'),
          ARRAY['EUR 5000', 'JPY ' || round(700 * 52 / 24.0)::bigint], 'MRR per currency, as report_mrr counts it');
SELECT is((SELECT mrr FROM billing.console_mrr('2026-03-05Z', 3) WHERE currency = 'EUR' AND at = '2026-03-04Z'), 5000::bigint,
          'the trend counts the billed periods covering each day the same way');
SELECT billing.create_due_invoices(100, '2026-04-02Z');  -- renewals: a second billed period each
-- The trend is the reports' MRR (billing._mrr_at) at each point, rounded to the minor unit.
SELECT is((SELECT array_agg(currency || ' ' || at || ' ' || mrr ORDER BY currency, at)
             FROM billing.console_mrr('2026-04-20Z', 60) WHERE at < '2026-04-20Z' AND mrr <> 0),
          (SELECT array_agg(currency || ' ' || at || ' ' || mrr ORDER BY currency, at) FROM (
               SELECT m.currency, g AS at, round(sum(m.mrr))::bigint AS mrr
                 FROM generate_series(timestamptz '2026-04-20Z' - interval '60 days', '2026-04-19Z', interval '1 day') g
                CROSS JOIN LATERAL billing._mrr_at(g) m
                GROUP BY 1, 2) x WHERE mrr <> 0),
          'the trend equals the reports'' MRR at each point');
SELECT is((SELECT array_agg(name ORDER BY name) FROM billing.console_functions(ARRAY['change_plan', 'no_such_function'])),
          ARRAY['change_plan'], 'only the functions that exist are offered');

-- -- replay -----------------------------------------------------------------------------------
SELECT id AS ev FROM billing.outbox_event ORDER BY id LIMIT 1 \gset
SELECT throws_ok(format('SELECT * FROM billing.replay_outbox_event(%s, ''2026-03-02Z'')', :ev), 'BL409', NULL,
                 'a pending event is not replayed');
SELECT billing.mark_outbox_published(ARRAY[:ev]::bigint[], '2026-03-02Z');
SELECT is((SELECT status FROM billing.replay_outbox_event(:ev, '2026-03-03Z')), 'PENDING',
          'a published event goes back in the relay''s queue');
SELECT throws_ok($$SELECT * FROM billing.replay_outbox_event(-1, '2026-03-03Z')$$, 'BL404', NULL, 'an unknown event');

-- -- the event search by subject ----------------------------------------------------------------
-- A subject's events are read among its customer's own (outbox_event_pkey): for every aggregate of
-- the outbox, typed (invoice/12) and bare (12), the same events as a read of the whole outbox.
CREATE FUNCTION pg_temp.event_search_misses() RETURNS integer LANGUAGE plpgsql AS $f$
DECLARE r record; v integer := 0; BEGIN
    FOR r IN SELECT DISTINCT o.aggregate_type AS t, o.aggregate_id AS i FROM billing.outbox_event o LOOP
        IF ARRAY(SELECT e.id FROM billing.console_events(r.t || '/' || r.i, NULL, NULL, 500) e)
           IS DISTINCT FROM ARRAY(SELECT o.id FROM billing.outbox_event o WHERE o.aggregate_type = r.t AND o.aggregate_id = r.i
                                   ORDER BY o.id DESC LIMIT 500) THEN v := v + 1; END IF;
        IF ARRAY(SELECT e.id FROM billing.console_events(r.i::text, NULL, NULL, 500) e)
           IS DISTINCT FROM ARRAY(SELECT o.id FROM billing.outbox_event o WHERE o.aggregate_id = r.i
                                   ORDER BY o.id DESC LIMIT 500) THEN v := v + 1; END IF;
    END LOOP;
    RETURN v; END $f$;
SELECT is(pg_temp.event_search_misses(), 0, 'the events of each subject, typed or a bare id, found among its customer''s');
SET LOCAL enable_seqscan = off;
DISCARD PLANS;  -- (planned again under it: the plans event_search_misses cached were made with seqscan on; above)
SELECT coalesce(sum(seq_scan), 0) AS outbox_scans FROM pg_catalog.pg_stat_xact_user_tables
 WHERE relid = 'billing.outbox_event'::regclass \gset
SELECT count(*) AS found FROM (SELECT * FROM billing.console_events('subscription/' || :s1, NULL, NULL, 50)
                               UNION ALL SELECT * FROM billing.console_events(:s1::text, 'Invoice', NULL, 50)) e \gset
SELECT is((SELECT coalesce(sum(seq_scan), 0) FROM pg_catalog.pg_stat_xact_user_tables WHERE relid = 'billing.outbox_event'::regclass),
          :outbox_scans::numeric, 'the event search by subject reads its customer''s events (no scan of the outbox)');
SET LOCAL enable_seqscan = on;

SELECT * FROM finish();
ROLLBACK;
