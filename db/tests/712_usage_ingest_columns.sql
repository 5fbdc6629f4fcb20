-- 712_usage_ingest_columns: the Kafka consumer's parsed door (billing.ingest_usage_columns: each
-- event's envelope attributes as columns and its data as a JSON text, or its raw JSON text) answers
-- as the JSON-text door (billing.ingest_usage_batch) does: every rejection reason, invalid_json,
-- duplicates within the batch and across the doors, one key counted once (issue 29; docs/usage.md
-- "Ingestion, two doors").
BEGIN;
\ir fixtures/usage_partitions_lock.sql
SET LOCAL ROLE billing_owner;
SELECT plan(14);

SELECT billing.upsert_customer(7121);
SELECT billing.upsert_customer(7122);
SELECT billing.upsert_meter('t712_req', 't712.req', 'count', NULL, '{}', '2027-01-01Z');
SELECT billing.upsert_meter('t712_users', 't712.req', 'unique_count', '{user}', '{}', '2027-01-01Z');
SELECT billing.upsert_meter('t712_tok', 't712.call', 'sum', '{tokens}', '{}', '2027-01-01Z');

CREATE TEMP TABLE t712_events (n integer, body text, raw boolean);
INSERT INTO t712_events VALUES
  (1, '{"specversion":"1.0","id":"r1","source":"gw","type":"t712.req","time":"2027-01-10T10:15:00Z","subject":"7121","data":{"user":"u1"}}', false),
  (2, '{"specversion":"1.0","id":"r1","source":"gw","type":"t712.req","time":"2027-01-10T10:15:00Z","subject":"7121","data":{"user":"u1"}}', true),
  (3, '{"specversion":"1.0","id":"r1","source":"other","type":"t712.req","time":"2027-01-10T10:16:00Z","subject":"7121","data":{"user":"u2"}}', false),
  (4, '{"specversion":"1.0","id":"c1","source":"gw","type":"t712.call","time":"2027-01-10T11:00:00Z","subject":"7121","data":{"tokens":10.5}}', true),
  (5, '{"specversion":"1.0","id":"c2","source":"gw","type":"t712.call","time":"2027-01-10T11:30:00Z","subject":"7121","data":{"tokens":40}}', false),
  (6, '{"specversion":"1.0","id":"x1","source":"gw","type":"t712.call","time":"2027-01-10T12:00:00Z","subject":"7121","data":{"tokens":"12"}}', false),
  (7, '{"specversion":"1.0","id":"x2","source":"gw","type":"t712.req","time":"2027-01-10T12:00:00Z","subject":"7121","data":{}}', false),
  (8, '{"specversion":"1.0","id":"x3","source":"gw","type":"t712.req","time":"2027-01-10T12:00:00Z","subject":"7199","data":{"user":"u"}}', false),
  (9, '{"specversion":"1.0","id":"x4","source":"gw","type":"t712.req","time":"2027-01-10T12:36:00Z","subject":"7121","data":{"user":"u"}}', false),
  (10, '{"specversion":"1.0","id":"x5","source":"gw","type":"t712.req","time":"2026-08-01T00:00:00Z","subject":"7121","data":{"user":"u"}}', false),
  (11, '{"specversion":"1.0","id":"x6","source":"gw","type":"t712.req","time":"10 January 2027","subject":"7121","data":{"user":"u"}}', false),
  (12, '{"id":"x7","source":"gw","type":"t712.req","time":"2027-01-10T12:00:00Z","subject":"7121"}', false),
  (13, '{not json', true),
  (14, '"just a string"', true),
  (15, '{"specversion":"1.0","id":"r2","source":"gw","type":"t712.req","time":"2027-01-10T12:00:00Z","subject":"7122","data":{"user":"u1"}}', false),
  (16, '{"specversion":"1.0","id":"r2","source":"gw","type":"t712.req","time":"2027-01-10T12:01:00Z","subject":"7122","data":{"user":"u7"}}', false),
  (17, '{"specversion":"1.0","id":"x9","source":"gw","type":"t712.req","time":"2027-01-10T24:00:00Z","subject":"7121","data":{"user":"u"}}', false),
  (18, '{"specversion":"1.0","id":"x10","source":"gw","type":"t712.req","time":"2027-01-10T12:00:00Z","subject":"7121","data":[1]}', false),
  (19, '{"specversion":"1.0","id":"r3","source":"gw","type":"t712.ping","time":"2027-01-10T12:00:00Z","subject":"7121","data":null}', false),
  (20, '{"specversion":"1.0","id":"r4","source":"gw","type":"t712.ping","time":"2027-01-10T12:00:00Z","subject":"7121"}', false);

-- each event as the consumer sends it: its attributes as ->> reads them and data as a JSON text, or raw
CREATE TEMP TABLE t712_answer AS
SELECT * FROM billing.ingest_usage_columns(
  (SELECT array_agg(CASE WHEN NOT raw THEN body::jsonb ->> 'specversion' END ORDER BY n) FROM t712_events),
  (SELECT array_agg(CASE WHEN NOT raw THEN body::jsonb ->> 'subject' END ORDER BY n) FROM t712_events),
  (SELECT array_agg(CASE WHEN NOT raw THEN body::jsonb ->> 'id' END ORDER BY n) FROM t712_events),
  (SELECT array_agg(CASE WHEN NOT raw THEN body::jsonb ->> 'source' END ORDER BY n) FROM t712_events),
  (SELECT array_agg(CASE WHEN NOT raw THEN body::jsonb ->> 'type' END ORDER BY n) FROM t712_events),
  (SELECT array_agg(CASE WHEN NOT raw THEN body::jsonb ->> 'time' END ORDER BY n) FROM t712_events),
  (SELECT array_agg(CASE WHEN NOT raw THEN (body::jsonb -> 'data')::text END ORDER BY n) FROM t712_events),
  (SELECT array_agg(CASE WHEN raw THEN body END ORDER BY n) FROM t712_events),
  '2027-01-10T12:30:00Z');
SELECT results_eq($$SELECT ord, status, reason, customer_id FROM t712_answer ORDER BY ord$$,
  $$VALUES (1, 'accepted', NULL::text, 7121::bigint), (2, 'duplicate', NULL, 7121), (3, 'accepted', NULL, 7121),
           (4, 'accepted', NULL, 7121), (5, 'accepted', NULL, 7121),
           (6, 'rejected', 'not_numeric', 7121), (7, 'rejected', 'missing_property', 7121),
           (8, 'rejected', 'unknown_customer', NULL), (9, 'rejected', 'in_future', 7121),
           (10, 'rejected', 'too_old', 7121), (11, 'rejected', 'invalid_time', 7121), (12, 'rejected', 'invalid_event', 7121),
           (13, 'rejected', 'invalid_json', NULL), (14, 'rejected', 'invalid_event', NULL), (15, 'accepted', NULL, 7122),
           (16, 'duplicate', NULL, 7122), (17, 'rejected', 'invalid_time', 7121), (18, 'rejected', 'invalid_event', 7121),
           (19, 'accepted', NULL, 7121), (20, 'accepted', NULL, 7121)$$,
  'the parsed door: accepted, duplicates (a raw one of a parsed one, same key another time), every reason, invalid_json');
-- the JSON-text door after it: every accepted event is a duplicate, every rejection the same reason
SELECT results_eq($$SELECT ord, CASE status WHEN 'accepted' THEN 'duplicate' ELSE status END, reason FROM t712_answer ORDER BY ord$$,
  $$SELECT ord, status, reason FROM billing.ingest_usage_batch((SELECT array_agg(body ORDER BY n) FROM t712_events),
                                                              '2027-01-10T12:30:00Z') ORDER BY ord$$,
  'the JSON-text door answers the same events the same way: what the parsed door accepted is a duplicate');
SELECT results_eq($$SELECT count(*) FROM billing.usage_event WHERE customer_id IN (7121, 7122)$$, $$VALUES (7::bigint)$$,
                  'seven events stored, once each');
SELECT results_eq($$SELECT event_id, data FROM billing.usage_event WHERE customer_id = 7121 AND event_id IN ('c1', 'r3', 'r4') ORDER BY 1$$,
  $$VALUES ('c1', '{"tokens": 10.5}'::jsonb), ('r3', 'null'), ('r4', NULL)$$,
  'data stored as sent: a raw event''s, JSON null, absent');
SELECT results_eq($$SELECT meter_code, value, events FROM billing.usage_between(7121, '2027-01-10T10:00:00Z', '2027-01-10T12:00:00Z')
                     WHERE meter_code LIKE 't712%' ORDER BY meter_code$$,
  $$VALUES ('t712_req', 2::numeric, 2::bigint), ('t712_tok', 50.5, 2), ('t712_users', 2, 2)$$,
  'counted once: the rollups of the parsed and the raw events');

-- a data text that is not JSON (a caller's mistake): that event invalid_json, the others go on
SELECT results_eq($$SELECT ord, status, reason FROM billing.ingest_usage_columns(
    ARRAY['1.0', '1.0'], ARRAY['7122', '7122'], ARRAY['d1', 'd2'], ARRAY['gw', 'gw'], ARRAY['t712.req', 't712.req'],
    ARRAY['2027-01-10T12:00:00Z', '2027-01-10T12:00:00Z'], ARRAY['{"user":', '{"user": "u9"}'], ARRAY[NULL, NULL]::text[],
    '2027-01-10T12:30:00Z') ORDER BY ord$$,
  $$VALUES (1, 'rejected', 'invalid_json'), (2, 'accepted', NULL::text)$$, 'a data text that is not JSON is invalid_json');

-- bad calls
SELECT throws_ok($$SELECT * FROM billing.ingest_usage_columns(ARRAY['1.0'], ARRAY['7122'], ARRAY['d3'], ARRAY['gw'],
    ARRAY['t712.req'], ARRAY['2027-01-10T12:00:00Z'], ARRAY['{}'], ARRAY[NULL, NULL]::text[], '2027-01-10T12:30:00Z')$$,
  'BL422', NULL, 'arrays of different lengths are BL422');
SELECT throws_ok($$SELECT f.* FROM (SELECT array_fill(NULL::text, ARRAY[50001]) AS a) x,
                            billing.ingest_usage_columns(x.a, x.a, x.a, x.a, x.a, x.a, x.a, x.a, '2027-01-10Z') f$$,
  'BL413', NULL, 'more than 50000 events is BL413');
SELECT throws_ok($$SELECT * FROM billing.ingest_usage_columns(NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, '2027-01-10Z')$$,
  'BL422', NULL, 'NULL is BL422');
SELECT is((SELECT count(*) FROM billing.ingest_usage_columns('{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '2027-01-10Z')),
  0::bigint, 'an empty batch answers nothing');

-- the statement's planner settings (no nested loop, no merge join: 83) are its own: set back after it
SELECT is((SELECT current_setting('enable_nestloop') || ' ' || current_setting('enable_mergejoin')
             FROM (SELECT count(*) FROM billing.ingest_usage_columns(ARRAY['1.0'], ARRAY['7122'], ARRAY['d4'], ARRAY['gw'],
                       ARRAY['t712.req'], ARRAY['2027-01-10T12:00:00Z'], ARRAY['{"user": "u9"}'], ARRAY[NULL]::text[],
                       '2027-01-10T12:30:00Z')) x),
  'on on', 'enable_nestloop and enable_mergejoin are set back after the statement');

-- a batch above 10,000 (the limit until ingest7; the consumer sends 20,000 by default), 10% of it sent
-- twice, under a work_mem of 1 MB (the statement takes 64 MB for itself, then sets it back): every
-- distinct key counted once, the answers as many as the events
SELECT billing.upsert_customer(7123);
SET LOCAL work_mem = '1MB';
CREATE TEMP TABLE t712_big AS
SELECT n, 'b' || (CASE WHEN n > 20000 THEN (n - 20000) * 7 ELSE n END) AS id,
       '2027-01-10T12:' || lpad(((n % 30))::text, 2, '0') || ':00Z' AS at,
       '{"user": "u' || (n % 13) || '"}' AS data
  FROM generate_series(1, 22001) n;
SELECT is((SELECT array[count(*) FILTER (WHERE status = 'accepted'), count(*) FILTER (WHERE status = 'duplicate'), count(*)]
             FROM billing.ingest_usage_columns(
                 (SELECT array_agg('1.0'::text ORDER BY n) FROM t712_big), (SELECT array_agg('7123'::text ORDER BY n) FROM t712_big),
                 (SELECT array_agg(id ORDER BY n) FROM t712_big), (SELECT array_agg('big'::text ORDER BY n) FROM t712_big),
                 (SELECT array_agg('t712.req'::text ORDER BY n) FROM t712_big), (SELECT array_agg(at ORDER BY n) FROM t712_big),
                 (SELECT array_agg(data ORDER BY n) FROM t712_big), (SELECT array_agg(NULL::text) FROM t712_big),
                 '2027-01-10T12:30:00Z')),
  ARRAY[20000, 2001, 22001]::bigint[], 'a batch of 22,001 with 2,001 sent twice: 20,000 accepted, 2,001 duplicates');
SELECT results_eq($$SELECT sum(events)::bigint, count(*) FROM billing.usage_rollup WHERE customer_id = 7123 AND meter_code = 't712_req'$$,
  $$VALUES (20000::bigint, 1::bigint)$$, 'the count meter''s one hourly rollup counted each of the 20,000 once');
SELECT is(current_setting('work_mem'), '1MB', 'work_mem is set back after the statement');

SELECT * FROM finish();
ROLLBACK;
