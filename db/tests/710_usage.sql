-- 710_usage: meters, the ingestion of usage events (exactly once, every rejection reason), the
-- rollups against the raw events, the open period's grace, partitions and retention (issue 29).
BEGIN;
\ir fixtures/usage_partitions_lock.sql
SET LOCAL ROLE billing_owner;
SELECT plan(40);

SELECT billing.upsert_customer(7101);
SELECT billing.upsert_customer(7102);
-- (reference tables first: on Citus a transaction may not write one after a parallel read of a distributed table)
SELECT billing.upsert_plan('T710_M', 1000, 'USD', 'MONTH', 1, '2026-03-01Z');
SELECT billing.create_subscription('t710-s', 7102, 'T710_M', '2026-03-01Z');

-- meters ---------------------------------------------------------------------------------------
SELECT is((billing.upsert_meter('t710_req', 't710.request', 'count', NULL, '{}', '2026-03-01Z')).property, NULL,
          'a count meter reads no property');
SELECT billing.upsert_meter('t710_tokens', 't710.call', 'sum', '{usage,tokens}', '{"model": ["a", "b"]}', '2026-03-01Z');
SELECT billing.upsert_meter('t710_users', 't710.request', 'unique_count', '{user}', '{}', '2026-03-01Z');
SELECT billing.upsert_meter('t710_peak', 't710.call', 'max', '{usage,tokens}', '{}', '2026-03-01Z');
SELECT billing.upsert_meter('t710_last', 't710.gauge', 'latest', '{level}', '{"region": "eu"}', '2026-03-01Z');
SELECT throws_ok($$SELECT billing.upsert_meter('t710 bad', 'x', 'count')$$, 'BL422', NULL, 'a code with a space is BL422');
SELECT throws_ok($$SELECT billing.upsert_meter('t710_x', 'x', 'median', '{v}')$$, 'BL422', NULL, 'an unknown aggregation is BL422');
SELECT throws_ok($$SELECT billing.upsert_meter('t710_x', 'x', 'sum')$$, 'BL422', NULL, 'sum without a property is BL422');
SELECT throws_ok($$SELECT billing.upsert_meter('t710_x', 'x', 'count', NULL, '{"k": {"a": 1}}')$$, 'BL422', NULL,
                 'a filter that is an object is BL422');
SELECT throws_ok($$SELECT billing.upsert_meter('t710_x', 'x', 'count', NULL, '{"k": []}')$$, 'BL422', NULL,
                 'an empty in-list is BL422');

CREATE TEMP TABLE t710_answer AS
SELECT * FROM billing.ingest_usage(jsonb_build_array(
  '{"specversion":"1.0","id":"r1","source":"gw","type":"t710.request","time":"2026-03-10T10:15:00Z","subject":"7101","data":{"user":"u1"}}'::jsonb,
  '{"specversion":"1.0","id":"r1","source":"gw","type":"t710.request","time":"2026-03-10T10:15:00Z","subject":"7101","data":{"user":"u1"}}'::jsonb,
  '{"specversion":"1.0","id":"r1","source":"other","type":"t710.request","time":"2026-03-10T10:16:00Z","subject":"7101","data":{"user":"u2"}}'::jsonb,
  '{"specversion":"1.0","id":"r1","source":"gw","type":"t710.request","time":"2026-03-10T10:17:00Z","subject":"7102","data":{"user":"u1"}}'::jsonb,
  '{"specversion":"1.0","id":"c1","source":"gw","type":"t710.call","time":"2026-03-10T11:00:00Z","subject":"7101","data":{"model":"a","usage":{"tokens":10.5}}}'::jsonb,
  '{"specversion":"1.0","id":"c2","source":"gw","type":"t710.call","time":"2026-03-10T11:59:59Z","subject":"7101","data":{"model":"c","usage":{"tokens":40}}}'::jsonb,
  '{"specversion":"1.0","id":"c3","source":"gw","type":"t710.call","time":"2026-03-10T12:01:00+01:00","subject":"7101","data":{"model":"b","usage":{"tokens":3}}}'::jsonb,
  '{"specversion":"1.0","id":"g1","source":"gw","type":"t710.gauge","time":"2026-03-10T12:00:00Z","subject":"7101","data":{"region":"eu","level":5}}'::jsonb,
  '{"specversion":"1.0","id":"g2","source":"gw","type":"t710.gauge","time":"2026-03-10T11:00:00Z","subject":"7101","data":{"region":"eu","level":9}}'::jsonb,
  '{"specversion":"1.0","id":"g3","source":"gw","type":"t710.gauge","time":"2026-03-10T12:10:00Z","subject":"7101","data":{"region":"us","level":1}}'::jsonb,
  -- the rejections
  '{"specversion":"1.0","id":"x1","source":"gw","type":"t710.call","time":"2026-03-10T12:00:00Z","subject":"7101","data":{"model":"a","usage":{"tokens":"12"}}}'::jsonb,
  '{"specversion":"1.0","id":"x2","source":"gw","type":"t710.call","time":"2026-03-10T12:00:00Z","subject":"7101","data":{"model":"a"}}'::jsonb,
  '{"specversion":"1.0","id":"x3","source":"gw","type":"t710.request","time":"2026-03-10T12:00:00Z","subject":"7101","data":{}}'::jsonb,
  '{"specversion":"1.0","id":"x4","source":"gw","type":"t710.request","time":"2026-03-10T12:00:00Z","subject":"7199","data":{"user":"u"}}'::jsonb,
  '{"specversion":"1.0","id":"x5","source":"gw","type":"t710.request","time":"2026-03-10T12:36:00Z","subject":"7101","data":{"user":"u"}}'::jsonb,
  '{"specversion":"1.0","id":"x6","source":"gw","type":"t710.request","time":"2025-10-01T23:59:59Z","subject":"7101","data":{"user":"u"}}'::jsonb,
  '{"specversion":"1.0","id":"x7","source":"gw","type":"t710.request","time":"10 March 2026","subject":"7101","data":{"user":"u"}}'::jsonb,
  '{"id":"x8","source":"gw","type":"t710.request","time":"2026-03-10T12:00:00Z","subject":"7101"}'::jsonb,
  '{"specversion":"1.0","id":"x9","source":"gw","type":"t710.request","time":"2026-03-10T12:00:00Z","subject":"alice","data":{"user":"u"}}'::jsonb,
  '"not an object"'::jsonb),
  '2026-03-10T12:30:00Z');

SELECT results_eq($$SELECT ord, status, reason FROM t710_answer ORDER BY ord$$,
  $$VALUES (1, 'accepted', NULL::text), (2, 'duplicate', NULL), (3, 'accepted', NULL), (4, 'accepted', NULL),
           (5, 'accepted', NULL), (6, 'accepted', NULL), (7, 'accepted', NULL), (8, 'accepted', NULL),
           (9, 'accepted', NULL), (10, 'accepted', NULL),
           (11, 'rejected', 'not_numeric'), (12, 'rejected', 'not_numeric'), (13, 'rejected', 'missing_property'),
           (14, 'rejected', 'unknown_customer'), (15, 'rejected', 'in_future'), (16, 'rejected', 'too_old'),
           (17, 'rejected', 'invalid_time'), (18, 'rejected', 'invalid_event'), (19, 'rejected', 'unknown_customer'),
           (20, 'rejected', 'invalid_event')$$,
  'one answer per event: a key sent twice in a batch counts once; the same id from another source or customer is another event; each rejection has its reason');
SELECT is((SELECT count(*) FROM billing.usage_event WHERE customer_id IN (7101, 7102)), 9::bigint,
          'the accepted events are stored, once each, nothing rejected');

-- sent again (a retry, a redelivery): every one a duplicate, nothing counted twice
SELECT results_eq($$SELECT status, count(*) FROM billing.ingest_usage(jsonb_build_array(
  '{"specversion":"1.0","id":"r1","source":"gw","type":"t710.request","time":"2026-03-10T10:15:00Z","subject":"7101","data":{"user":"u1"}}'::jsonb,
  '{"specversion":"1.0","id":"c1","source":"gw","type":"t710.call","time":"2026-03-10T11:00:00Z","subject":"7101","data":{"model":"a","usage":{"tokens":10.5}}}'::jsonb,
  '{"specversion":"1.0","id":"c1","source":"gw","type":"t710.call","time":"2026-03-10T11:05:00Z","subject":"7101","data":{"model":"a","usage":{"tokens":99}}}'::jsonb),
  '2026-03-10T12:31:00Z') GROUP BY status$$,
  $$VALUES ('duplicate', 3::bigint)$$, 'a batch sent again is all duplicates, even with a changed time or value');

-- the aggregations, from the rollups (current_usage) and recomputed from the raw events
SELECT results_eq($$SELECT meter_code, value, events FROM billing.current_usage(7101, '2026-03-10T12:31:00Z') WHERE meter_code LIKE 't710%' ORDER BY 1$$,
  $$VALUES ('t710_last', 5::numeric, 2::bigint), ('t710_peak', 40::numeric, 3::bigint), ('t710_req', 2::numeric, 2::bigint),
           ('t710_tokens', 13.5::numeric, 2::bigint), ('t710_users', 2::numeric, 2::bigint)$$,
  'count, sum (filter in), max, latest (filter equals; the latest by time, not by arrival), unique_count');
SELECT results_eq($$SELECT value FROM billing.current_usage(7102, '2026-03-10T12:31:00Z') WHERE meter_code = 't710_users'$$,
  $$VALUES (1::numeric)$$, 'another customer''s usage is its own');
SELECT results_eq($$SELECT meter_code, value FROM billing.usage_between(7101, '2026-03-10T11:00:00Z', '2026-03-10T11:59:59Z') WHERE meter_code LIKE 't710%' ORDER BY 1$$,
  $$VALUES ('t710_last', 9::numeric), ('t710_peak', 10.5::numeric), ('t710_req', 0::numeric), ('t710_tokens', 13.5::numeric), ('t710_users', 0::numeric)$$,
  'a span of partial hours reads the events: [11:00, 11:59:59) leaves out the event at 11:59:59');
SELECT results_eq($$SELECT meter_code, value FROM billing.usage_between(7101, '2026-03-10T10:15:00.000001Z', '2026-03-10T12:00:00Z') WHERE meter_code LIKE 't710%' ORDER BY 1$$,
  $$VALUES ('t710_last', 9::numeric), ('t710_peak', 40::numeric), ('t710_req', 1::numeric), ('t710_tokens', 13.5::numeric), ('t710_users', 1::numeric)$$,
  'a whole hour from the rollup plus a partial one from the events');

-- a meter redefined: its rollups are rebuilt from the stored events
SELECT billing.upsert_meter('t710_tokens', 't710.call', 'sum', '{usage,tokens}', '{}', '2026-03-10T12:40:00Z');
SELECT results_eq($$SELECT value FROM billing.current_usage(7101, '2026-03-10T12:41:00Z') WHERE meter_code = 't710_tokens'$$,
  $$VALUES (53.5::numeric)$$, 'a filter removed: the meter counts every stored event of its type');
SELECT billing.upsert_meter('t710_new', 't710.request', 'count', NULL, '{}', '2026-03-10T12:40:00Z');
SELECT results_eq($$SELECT value FROM billing.current_usage(7101, '2026-03-10T12:41:00Z') WHERE meter_code = 't710_new'$$,
  $$VALUES (2::numeric)$$, 'a new meter counts the events stored before it');
-- the rollups equal an independent count of the raw events, per meter
SELECT results_eq($$SELECT sum(events)::bigint FROM billing.usage_rollup WHERE customer_id = 7101 AND meter_code = 't710_tokens'$$,
                  $$SELECT count(*) FROM billing.usage_event WHERE customer_id = 7101 AND event_type = 't710.call'$$,
                  'rollup events = the raw events of the meter');

-- the open period's grace, with a subscription (monthly from 1 March)
SELECT billing.create_due_invoices(100, '2026-04-01T00:00:01Z');
SELECT results_eq($$SELECT current_period_start FROM billing.subscription WHERE customer_id = 7102$$,
                  $$VALUES ('2026-04-01Z'::timestamptz)$$, 'renewed: the April period is open');
SELECT results_eq($$SELECT status, reason FROM billing.ingest_usage(jsonb_build_array(
  '{"specversion":"1.0","id":"late1","source":"gw","type":"t710.request","time":"2026-03-31T23:00:00Z","subject":"7102","data":{"user":"u9"}}'::jsonb,
  '{"specversion":"1.0","id":"early1","source":"gw","type":"t710.request","time":"2026-02-28T23:00:00Z","subject":"7102","data":{"user":"u9"}}'::jsonb),
  '2026-04-01T00:30:00Z', interval '1 hour') ORDER BY ord$$,
  $$VALUES ('accepted', NULL::text), ('accepted', NULL)$$,
  'within the grace an event of the ended period is accepted; one before it too (late: within the retention)');
SELECT results_eq($$SELECT status, reason FROM billing.ingest_usage(jsonb_build_array(
  '{"specversion":"1.0","id":"late2","source":"gw","type":"t710.request","time":"2026-03-31T23:00:00Z","subject":"7102","data":{"user":"u9"}}'::jsonb,
  '{"specversion":"1.0","id":"now2","source":"gw","type":"t710.request","time":"2026-04-01T00:10:00Z","subject":"7102","data":{"user":"u9"}}'::jsonb),
  '2026-04-01T01:00:00Z', interval '1 hour') ORDER BY ord$$,
  $$VALUES ('accepted', NULL::text), ('accepted', NULL)$$,
  'after the grace an event of the ended period is still accepted (a late event, rated as an adjustment: 720_usage_rating)');
SELECT results_eq($$SELECT period_start, value FROM billing.current_usage(7102, '2026-04-01T01:00:00Z') WHERE meter_code = 't710_req'$$,
  $$VALUES ('2026-04-01Z'::timestamptz, 1::numeric)$$, 'current usage is the open period''s');
SELECT results_eq($$SELECT value FROM billing.usage_between(7102, '2026-03-01Z', '2026-04-01Z') WHERE meter_code = 't710_req'$$,
  $$VALUES (3::numeric)$$, 'the ended period kept the events accepted within and after its grace');

SELECT results_eq($$SELECT status, reason FROM billing.ingest_usage(jsonb_build_array(
  '{"specversion":"1.0","id":"feb30","source":"gw","type":"t710.request","time":"2026-02-30T10:00:00Z","subject":"7102","data":{"user":"u"}}'::jsonb,
  '{"specversion":"1.0","id":"ok30","source":"gw","type":"t710.request","time":"2026-04-01T00:20:00Z","subject":"7102","data":{"user":"u"}}'::jsonb),
  '2026-04-01T01:00:00Z') ORDER BY ord$$,
  $$VALUES ('rejected', 'invalid_time'), ('accepted', NULL::text)$$,
  'a date that does not exist is rejected alone, the rest of its batch accepted');

-- bad calls
SELECT throws_ok($$SELECT * FROM billing.ingest_usage('{"a":1}', '2026-03-10Z')$$, 'BL422', NULL, 'not an array is BL422');
SELECT throws_ok($$SELECT * FROM billing.ingest_usage((SELECT jsonb_agg(g) FROM generate_series(1, 1001) g), '2026-03-10Z')$$,
                 'BL413', NULL, 'more than 1000 events is BL413');
SELECT throws_ok($$SELECT * FROM billing.ingest_usage('[]', '2026-03-10Z', interval '30 days')$$, 'BL422', NULL,
                 'a grace above 7 days is BL422');
SELECT is((SELECT count(*) FROM billing.ingest_usage('[]', '2026-03-10Z')), 0::bigint, 'an empty batch answers nothing');
SELECT throws_ok($$SELECT * FROM billing.current_usage(7199, '2026-03-10Z')$$, 'BL404', NULL, 'an unknown customer is BL404');
SELECT throws_ok($$SELECT * FROM billing.usage_between(7101, '2026-03-10Z', '2026-03-09Z')$$, 'BL422', NULL,
                 'an inverted span is BL422');

-- partitions: one a month, made by the ingestion or the upkeep, dropped past the retention
SELECT ok(to_regclass('billing.usage_event_p202603') IS NOT NULL, 'the ingestion made March''s partition');
SELECT is((SELECT count(*) FROM billing.usage_event_p202603 WHERE customer_id IN (7101, 7102)), 11::bigint,
          'the events are in their month''s partition');
SELECT results_eq($$SELECT partition_name, action FROM billing.usage_partitions('2026-04-15Z', interval '100 days') WHERE action = 'present'$$,
  $$VALUES ('usage_event_p202604', 'present'), ('usage_event_p202605', 'present'), ('usage_event_p202606', 'present')$$,
  'the upkeep makes this month and the next two');
SELECT ok(EXISTS (SELECT 1 FROM billing.usage_partitions('2026-07-15Z', interval '100 days')
                   WHERE partition_name = 'usage_event_p202603' AND action = 'dropped'),
          'March is dropped once it ended more than the retention ago');
SELECT results_eq($$SELECT count(*) FROM billing.usage_dedup WHERE customer_id = 7101$$, $$VALUES (0::bigint)$$,
                  'its exactly-once keys are purged with it');
SELECT results_eq($$SELECT status, reason FROM billing.ingest_usage(jsonb_build_array(
  '{"specversion":"1.0","id":"r1","source":"gw","type":"t710.request","time":"2026-03-10T10:15:00Z","subject":"7101","data":{"user":"u1"}}'::jsonb),
  '2026-07-15Z')$$, $$VALUES ('rejected', 'too_old')$$,
  'an event whose key was purged is refused as too old, never counted again');
SELECT results_eq($$SELECT sum(events) FROM billing.usage_rollup WHERE customer_id = 7101 AND meter_code = 't710_req'$$,
                  $$VALUES (2::numeric)$$, 'the rollups outlive the raw events (what was counted stays counted)');
SELECT throws_ok($$SELECT * FROM billing.usage_partitions('2026-07-15Z', interval '1 hour')$$, 'BL422', NULL,
                 'a retention under a day is BL422');

-- grants: the API ingests and reads, it does not define meters
SELECT ok(has_function_privilege('billing_api', 'billing.ingest_usage(jsonb, timestamptz, interval, interval, interval)', 'EXECUTE'),
          'billing_api ingests');
SELECT ok(NOT has_function_privilege('billing_api', 'billing.upsert_meter(text, text, text, text[], jsonb, timestamptz)', 'EXECUTE'),
          'billing_api does not define meters');
SELECT ok(has_function_privilege('billing_worker', 'billing.ingest_usage(jsonb, timestamptz, interval, interval, interval)', 'EXECUTE'),
          'billing_worker (the Kafka consumer) ingests');
SELECT ok(has_function_privilege('billing_admin', 'billing.upsert_meter(text, text, text, text[], jsonb, timestamptz)', 'EXECUTE'),
          'billing_admin defines meters');

SELECT * FROM finish();
ROLLBACK;
