-- 711_usage_ingest_batch: the Kafka consumer's door (billing.ingest_usage_batch: JSON texts, up to
-- 10,000) answers as the HTTP door (billing.ingest_usage) does, one event for one key across both,
-- every rejection reason and invalid_json; the rollups the ingestion statement writes (hourly and
-- daily) equal the ones rebuilt from the stored events, and a span read from them (days, hours,
-- events at its ends) equals a count of the raw events (issue 29; docs/usage.md "Ingestion, two doors").
BEGIN;
\ir fixtures/usage_partitions_lock.sql
SET LOCAL ROLE billing_owner;
SELECT plan(19);

SELECT billing.upsert_customer(7111);
SELECT billing.upsert_customer(7112);
SELECT billing.upsert_customer(7113);
SELECT billing.upsert_meter('t711_req', 't711.req', 'count', NULL, '{}', '2027-01-01Z');
SELECT billing.upsert_meter('t711_users', 't711.req', 'unique_count', '{user}', '{}', '2027-01-01Z');
SELECT billing.upsert_meter('t711_tok', 't711.call', 'sum', '{tokens}', '{}', '2027-01-01Z');
SELECT billing.upsert_meter('t711_peak', 't711.call', 'max', '{tokens}', '{"model": ["a", "b"]}', '2027-01-01Z');
SELECT billing.upsert_meter('t711_last', 't711.gauge', 'latest', '{level}', '{}', '2027-01-01Z');

CREATE TEMP TABLE t711_events (n integer, body text);
INSERT INTO t711_events VALUES
  (1, '{"specversion":"1.0","id":"r1","source":"gw","type":"t711.req","time":"2027-01-10T10:15:00Z","subject":"7111","data":{"user":"u1"}}'),
  (2, '{"specversion":"1.0","id":"r1","source":"gw","type":"t711.req","time":"2027-01-10T10:15:00Z","subject":"7111","data":{"user":"u1"}}'),
  (3, '{"specversion":"1.0","id":"r1","source":"other","type":"t711.req","time":"2027-01-10T10:16:00Z","subject":"7111","data":{"user":"u2"}}'),
  (4, '{"specversion":"1.0","id":"c1","source":"gw","type":"t711.call","time":"2027-01-10T11:00:00Z","subject":"7111","data":{"model":"a","tokens":10.5}}'),
  (5, '{"specversion":"1.0","id":"c2","source":"gw","type":"t711.call","time":"2027-01-10T11:30:00Z","subject":"7111","data":{"model":"c","tokens":40}}'),
  (6, '{"specversion":"1.0","id":"g1","source":"gw","type":"t711.gauge","time":"2027-01-10T11:00:00Z","subject":"7111","data":{"level":5}}'),
  (7, '{"specversion":"1.0","id":"g2","source":"gw","type":"t711.gauge","time":"2027-01-10T11:00:00Z","subject":"7111","data":{"level":9}}'),
  (8, '{"specversion":"1.0","id":"g3","source":"gw","type":"t711.gauge","time":"2027-01-10T10:59:00Z","subject":"7111","data":{"level":100}}'),
  (9, '{"specversion":"1.0","id":"x1","source":"gw","type":"t711.call","time":"2027-01-10T12:00:00Z","subject":"7111","data":{"model":"a","tokens":"12"}}'),
  (10, '{"specversion":"1.0","id":"x2","source":"gw","type":"t711.req","time":"2027-01-10T12:00:00Z","subject":"7111","data":{}}'),
  (11, '{"specversion":"1.0","id":"x3","source":"gw","type":"t711.req","time":"2027-01-10T12:00:00Z","subject":"7199","data":{"user":"u"}}'),
  (12, '{"specversion":"1.0","id":"x4","source":"gw","type":"t711.req","time":"2027-01-10T12:36:00Z","subject":"7111","data":{"user":"u"}}'),
  (13, '{"specversion":"1.0","id":"x5","source":"gw","type":"t711.req","time":"2026-08-01T00:00:00Z","subject":"7111","data":{"user":"u"}}'),
  (14, '{"specversion":"1.0","id":"x6","source":"gw","type":"t711.req","time":"10 January 2027","subject":"7111","data":{"user":"u"}}'),
  (15, '{"id":"x7","source":"gw","type":"t711.req","time":"2027-01-10T12:00:00Z","subject":"7111"}'),
  (16, '{not json'),
  (17, 'NaN'),
  (18, '{"specversion":"1.0","id":"x8\u0000","source":"gw","type":"t711.req","time":"2027-01-10T12:00:00Z","subject":"7111"}'),
  (19, '"just a string"'),
  (20, '{"specversion":"1.0","id":"r2","source":"gw","type":"t711.req","time":"2027-01-10T12:00:00Z","subject":"7112","data":{"user":"u1"}}'),
  (21, '{"specversion":"1.0","id":"r2","source":"gw","type":"t711.req","time":"2027-01-10T12:01:00Z","subject":"7112","data":{"user":"u7"}}'),
  (22, '{"specversion":"1.0","id":"x9","source":"gw","type":"t711.req","time":"2027-01-10T24:00:00Z","subject":"7111","data":{"user":"u"}}');

CREATE TEMP TABLE t711_answer AS
SELECT * FROM billing.ingest_usage_batch((SELECT array_agg(body ORDER BY n) FROM t711_events), '2027-01-10T12:30:00Z');
SELECT results_eq($$SELECT ord, status, reason, customer_id FROM t711_answer ORDER BY ord$$,
  $$VALUES (1, 'accepted', NULL::text, 7111::bigint), (2, 'duplicate', NULL, 7111), (3, 'accepted', NULL, 7111),
           (4, 'accepted', NULL, 7111), (5, 'accepted', NULL, 7111), (6, 'accepted', NULL, 7111),
           (7, 'accepted', NULL, 7111), (8, 'accepted', NULL, 7111),
           (9, 'rejected', 'not_numeric', 7111), (10, 'rejected', 'missing_property', 7111),
           (11, 'rejected', 'unknown_customer', NULL), (12, 'rejected', 'in_future', 7111),
           (13, 'rejected', 'too_old', 7111), (14, 'rejected', 'invalid_time', 7111), (15, 'rejected', 'invalid_event', 7111),
           (16, 'rejected', 'invalid_json', NULL), (17, 'rejected', 'invalid_json', NULL), (18, 'rejected', 'invalid_json', NULL),
           (19, 'rejected', 'invalid_event', NULL), (20, 'accepted', NULL, 7112),
           (21, 'duplicate', NULL, 7112), (22, 'rejected', 'invalid_time', 7111)$$,
  'the batch door: accepted, duplicates (in the batch, same key with another time), every rejection reason, invalid_json');

-- the HTTP door after it: every accepted event is a duplicate, every rejection the same reason
SELECT results_eq($$SELECT a.status, a.reason FROM billing.ingest_usage(
      (SELECT jsonb_agg(body::jsonb ORDER BY n) FROM t711_events WHERE n NOT IN (16, 17, 18)), '2027-01-10T12:30:00Z') a
    ORDER BY a.ord$$,
  $$SELECT CASE status WHEN 'accepted' THEN 'duplicate' ELSE status END, reason FROM t711_answer
     WHERE ord NOT IN (16, 17, 18) ORDER BY ord$$,
  'the HTTP door answers the same events the same way: what the batch door accepted is a duplicate');
SELECT results_eq($$SELECT DISTINCT status FROM billing.ingest_usage_batch(
      (SELECT array_agg(body ORDER BY n) FROM t711_events WHERE n IN (1, 3, 4, 20)), '2027-01-10T12:40:00Z')$$,
  $$VALUES ('duplicate')$$, 'the batch door again: duplicates');
-- the batch's times are checked by one regular expression over them joined by newlines: a time
-- holding a newline between two valid instants is still invalid_time, and so is an event without a
-- time, the rest of the batch accepted
SELECT results_eq($$SELECT ord, status, reason FROM billing.ingest_usage_batch(ARRAY[
  '{"specversion":"1.0","id":"nl1","source":"gw","type":"t711.req","time":"2027-01-10T12:00:00Z\n2027-01-10T12:00:01Z","subject":"7113","data":{"user":"u1"}}',
  '{"specversion":"1.0","id":"nl2","source":"gw","type":"t711.req","subject":"7113","data":{"user":"u1"}}',
  '{"specversion":"1.0","id":"nl3","source":"gw","type":"t711.req","time":"2027-01-10T12:02:00.5+00:00","subject":"7113","data":{"user":"u1"}}'],
  '2027-01-10T12:30:00Z') ORDER BY ord$$,
  $$VALUES (1, 'rejected', 'invalid_time'), (2, 'rejected', 'invalid_time'), (3, 'accepted', NULL::text)$$,
  'a time holding a newline, or none, is invalid_time; the batch''s valid times are accepted');
-- (results_eq on query texts: on Citus a query of one shard group would take is() to the worker)
SELECT results_eq($$SELECT count(*) FROM billing.usage_event WHERE customer_id IN (7111, 7112)$$, $$VALUES (8::bigint)$$,
                  'eight events stored, once each');
SELECT results_eq($$SELECT count(*) FROM billing.usage_dedup WHERE customer_id IN (7111, 7112)$$, $$VALUES (8::bigint)$$,
                  'eight keys');

-- the rollups written by the statement (two batches) = the ones rebuilt from the stored events
SELECT billing.ingest_usage_batch(ARRAY[
  '{"specversion":"1.0","id":"c3","source":"gw","type":"t711.call","time":"2027-01-10T11:59:59.999999Z","subject":"7111","data":{"model":"b","tokens":2}}',
  '{"specversion":"1.0","id":"g4","source":"gw","type":"t711.gauge","time":"2027-01-10T11:00:00Z","subject":"7111","data":{"level":7}}',
  '{"specversion":"1.0","id":"r3","source":"gw","type":"t711.req","time":"2027-01-10T10:59:00Z","subject":"7111","data":{"user":"u1"}}'],
  '2027-01-10T12:40:00Z');
-- events over three UTC days, then late ones into the middle day (its day rows updated again)
SELECT billing.ingest_usage_batch(ARRAY[
  '{"specversion":"1.0","id":"r10","source":"gw","type":"t711.req","time":"2027-01-08T23:30:00Z","subject":"7111","data":{"user":"u3"}}',
  '{"specversion":"1.0","id":"c10","source":"gw","type":"t711.call","time":"2027-01-08T23:50:00Z","subject":"7111","data":{"model":"a","tokens":3}}',
  '{"specversion":"1.0","id":"g10","source":"gw","type":"t711.gauge","time":"2027-01-08T23:40:00Z","subject":"7111","data":{"level":1}}',
  '{"specversion":"1.0","id":"r11","source":"gw","type":"t711.req","time":"2027-01-09T00:00:00Z","subject":"7111","data":{"user":"u1"}}',
  '{"specversion":"1.0","id":"r12","source":"gw","type":"t711.req","time":"2027-01-09T13:20:00Z","subject":"7111","data":{"user":"u4"}}',
  '{"specversion":"1.0","id":"c11","source":"gw","type":"t711.call","time":"2027-01-09T13:00:00Z","subject":"7111","data":{"model":"b","tokens":7}}',
  '{"specversion":"1.0","id":"g11","source":"gw","type":"t711.gauge","time":"2027-01-09T23:59:59Z","subject":"7111","data":{"level":3}}',
  '{"specversion":"1.0","id":"r13","source":"gw","type":"t711.req","time":"2027-01-11T00:10:00Z","subject":"7111","data":{"user":"u5"}}',
  '{"specversion":"1.0","id":"c12","source":"gw","type":"t711.call","time":"2027-01-11T00:20:00Z","subject":"7111","data":{"model":"c","tokens":1}}',
  '{"specversion":"1.0","id":"g12","source":"gw","type":"t711.gauge","time":"2027-01-11T00:05:00Z","subject":"7111","data":{"level":2}}'],
  '2027-01-11T01:00:00Z');
SELECT billing.ingest_usage_batch(ARRAY[
  '{"specversion":"1.0","id":"r14","source":"gw","type":"t711.req","time":"2027-01-09T06:00:00Z","subject":"7111","data":{"user":"u3"}}',
  '{"specversion":"1.0","id":"c13","source":"gw","type":"t711.call","time":"2027-01-09T06:00:00Z","subject":"7111","data":{"model":"a","tokens":50}}',
  '{"specversion":"1.0","id":"g13","source":"gw","type":"t711.gauge","time":"2027-01-09T23:59:59Z","subject":"7111","data":{"level":8}}'],
  '2027-01-11T02:00:00Z');
-- late events into hours folded already (their days' rows get them too), one into an hour not folded
-- yet whose fold this batch also brings (a row the statement updates is not folded by it), a new hour
SELECT billing.ingest_usage_batch(ARRAY[
  '{"specversion":"1.0","id":"c14","source":"gw","type":"t711.call","time":"2027-01-10T11:10:00Z","subject":"7111","data":{"model":"a","tokens":5}}',
  '{"specversion":"1.0","id":"g14","source":"gw","type":"t711.gauge","time":"2027-01-10T11:00:00Z","subject":"7111","data":{"level":11}}',
  '{"specversion":"1.0","id":"r15","source":"gw","type":"t711.req","time":"2027-01-10T10:30:00Z","subject":"7111","data":{"user":"u9"}}',
  '{"specversion":"1.0","id":"r17","source":"gw","type":"t711.req","time":"2027-01-09T13:30:00Z","subject":"7111","data":{"user":"u4"}}',
  '{"specversion":"1.0","id":"r16","source":"gw","type":"t711.req","time":"2027-01-11T02:10:00Z","subject":"7111","data":{"user":"u1"}}'],
  '2027-01-11T02:30:00Z');
-- (on Citus each CTE of the statement is a command of its own, so a row the batch updated may be
-- folded by it too: at least the two rows of its newest hour stay unfolded)
SELECT results_eq($$SELECT count(*) FILTER (WHERE folded) >= 5 AND count(*) FILTER (WHERE folded IS NOT TRUE) >= 2
                       FROM billing.usage_rollup WHERE customer_id = 7111 AND meter_code LIKE 't711%'$$,
                  $$VALUES (true)$$, 'some hours are folded into their days, the latest ones not yet');
SELECT set_eq($$SELECT customer_id, meter_code, day, events, total, max_value, latest_time, latest_value
                  FROM billing.usage_rollup_day WHERE customer_id IN (7111, 7112) AND meter_code LIKE 't711%'$$,
              $$SELECT r.customer_id, r.meter_code, date_trunc('day', r.bucket AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS day,
                       sum(r.events) AS events, sum(r.total) AS total, max(r.max_value) AS max_value, max(r.latest_time) AS latest_time,
                       (array_agg(r.latest_value ORDER BY r.latest_time DESC NULLS LAST, r.latest_value DESC NULLS LAST))[1] AS latest_value
                  FROM billing.usage_rollup r WHERE r.customer_id IN (7111, 7112) AND r.meter_code LIKE 't711%' AND r.folded
                 GROUP BY 1, 2, 3$$,
              'each daily rollup is its folded hours added up (late events included)');
SELECT set_eq($$SELECT customer_id, meter_code, day, value FROM billing.usage_unique_day
                 WHERE customer_id IN (7111, 7112) AND meter_code LIKE 't711%'$$,
              $$SELECT DISTINCT customer_id, meter_code, date_trunc('day', bucket AT TIME ZONE 'UTC') AT TIME ZONE 'UTC', value
                  FROM billing.usage_unique WHERE customer_id IN (7111, 7112) AND meter_code LIKE 't711%'$$,
              'the daily distinct values are the hourly ones per UTC day');
-- spans with whole days, whole hours and partial hours at either end, within a day, empty: each meter's
-- value from usage_between = the one counted from the raw events
SELECT set_eq(
  $$SELECT s.f, u.meter_code, u.value, u.events
      FROM (VALUES ('2027-01-08T23:45:00Z'::timestamptz, '2027-01-11T00:30:00Z'::timestamptz), ('2027-01-08Z', '2027-01-12Z'),
                   ('2027-01-09T06:00:00Z', '2027-01-10T11:00:00Z'), ('2027-01-09T00:00:00.5Z', '2027-01-09T23:59:59Z'),
                   ('2027-01-09Z', '2027-01-10Z'), ('2027-01-08T23:30:00Z', '2027-01-10T10:16:00Z'),
                   ('2027-01-10T10:16:00Z', '2027-01-10T10:16:00Z')) AS s (f, t)
     CROSS JOIN LATERAL billing.usage_between(7111, s.f, s.t) u
     WHERE u.meter_code LIKE 't711%'$$,
  $$SELECT s.f, m.code AS meter_code,
           CASE m.aggregation WHEN 'count' THEN count(e.event_time)::numeric
                              WHEN 'sum' THEN coalesce(sum(e.num), 0)
                              WHEN 'max' THEN max(e.num)
                              WHEN 'unique_count' THEN count(DISTINCT e.val)::numeric
                              WHEN 'latest' THEN (array_agg(e.num ORDER BY e.event_time DESC, e.num DESC)
                                                  FILTER (WHERE e.event_time IS NOT NULL))[1] END AS value,
           count(e.event_time) AS events
      FROM (VALUES ('2027-01-08T23:45:00Z'::timestamptz, '2027-01-11T00:30:00Z'::timestamptz), ('2027-01-08Z', '2027-01-12Z'),
                   ('2027-01-09T06:00:00Z', '2027-01-10T11:00:00Z'), ('2027-01-09T00:00:00.5Z', '2027-01-09T23:59:59Z'),
                   ('2027-01-09Z', '2027-01-10Z'), ('2027-01-08T23:30:00Z', '2027-01-10T10:16:00Z'),
                   ('2027-01-10T10:16:00Z', '2027-01-10T10:16:00Z')) AS s (f, t)
     CROSS JOIN billing.meter m
      LEFT JOIN LATERAL (
           SELECT e.event_time,
                  CASE WHEN m.aggregation IN ('sum', 'max', 'latest') THEN (e.data #>> m.property)::numeric END AS num,
                  CASE WHEN m.aggregation = 'unique_count' THEN e.data #>> m.property END AS val
             FROM billing.usage_event e
            WHERE e.customer_id = 7111 AND e.event_type = m.event_type AND e.event_time >= s.f AND e.event_time < s.t
              AND (m.filters = '{}'::jsonb OR (e.data ->> 'model') IN ('a', 'b'))
              AND (m.aggregation = 'count' OR e.data #> m.property IS NOT NULL)) e ON true
     WHERE m.code LIKE 't711%'
     GROUP BY s.f, m.code, m.aggregation$$,
  'every span read from days, hours and events = the raw events counted');
CREATE TEMP VIEW t711_days AS  -- a day's figures as usage_between reads them: its row and its hours not folded
  SELECT x.customer_id, x.meter_code, x.day, sum(x.events) AS events, sum(x.total) AS total, max(x.max_value) AS max_value,
         max(x.latest_time) AS latest_time,
         (array_agg(x.latest_value ORDER BY x.latest_time DESC NULLS LAST, x.latest_value DESC NULLS LAST))[1] AS latest_value
    FROM (SELECT d.customer_id, d.meter_code, d.day, d.events, d.total, d.max_value, d.latest_time, d.latest_value
            FROM billing.usage_rollup_day d WHERE d.customer_id IN (7111, 7112) AND d.meter_code LIKE 't711%'
          UNION ALL
          SELECT r.customer_id, r.meter_code, date_trunc('day', r.bucket AT TIME ZONE 'UTC') AT TIME ZONE 'UTC', r.events, r.total,
                 r.max_value, r.latest_time, r.latest_value
            FROM billing.usage_rollup r WHERE r.customer_id IN (7111, 7112) AND r.meter_code LIKE 't711%' AND r.folded IS NOT TRUE) x
   GROUP BY 1, 2, 3;
CREATE TEMP TABLE t711_day AS SELECT * FROM t711_days;
CREATE TEMP TABLE t711_rollup AS
  SELECT customer_id, meter_code, bucket, events, total, max_value, latest_time, latest_value FROM billing.usage_rollup
   WHERE customer_id IN (7111, 7112) AND meter_code LIKE 't711%';
CREATE TEMP TABLE t711_unique AS
  SELECT customer_id, meter_code, bucket, value FROM billing.usage_unique
   WHERE customer_id IN (7111, 7112) AND meter_code LIKE 't711%';
DO $$
DECLARE
    m billing.meter;
BEGIN
    FOR m IN SELECT * FROM billing.meter WHERE code LIKE 't711%' LOOP
        PERFORM billing._usage_rebuild(m);  -- (a loop: on Citus the meter's row type is the coordinator's)
    END LOOP;
END
$$;
SELECT set_eq($$SELECT customer_id, meter_code, bucket, events, total, max_value, latest_time, latest_value
                  FROM billing.usage_rollup WHERE customer_id IN (7111, 7112) AND meter_code LIKE 't711%'$$,
              $$SELECT * FROM t711_rollup$$, 'the rollups are the ones rebuilt from the stored events');
SELECT set_eq($$SELECT customer_id, meter_code, bucket, value FROM billing.usage_unique
                 WHERE customer_id IN (7111, 7112) AND meter_code LIKE 't711%'$$,
              $$SELECT * FROM t711_unique$$, 'the distinct values too');
SELECT set_eq($$SELECT * FROM t711_days$$, $$SELECT * FROM t711_day$$,
              'the days too (each its row and its hours not folded)');
SELECT results_eq($$SELECT meter_code, value, events FROM billing.usage_between(7111, '2027-01-10T10:00:00Z', '2027-01-10T12:00:00Z')
                     WHERE meter_code LIKE 't711%' ORDER BY meter_code$$,
  $$VALUES ('t711_last', 11::numeric, 5::bigint), ('t711_peak', 10.5, 3), ('t711_req', 4, 4), ('t711_tok', 57.5, 4), ('t711_users', 3, 4)$$,
  'the hours read (with the late events): latest = the larger of the ones at the latest instant, max over the filter, sum, count, distinct users');

-- a count meter without filters (counted per (customer, type, hour), not per event: ingest9): a late
-- event into its hour folded already reaches the day's row too
SELECT billing.upsert_meter('t711_late', 't711.late', 'count', NULL, '{}', '2027-01-01Z');
SELECT billing.ingest_usage_batch(ARRAY['{"specversion":"1.0","id":"l1","source":"gw","type":"t711.late","time":"2027-01-10T03:00:00Z","subject":"7113","data":{}}'], '2027-01-11T03:00:00Z');
SELECT billing.ingest_usage_batch(ARRAY['{"specversion":"1.0","id":"l2","source":"gw","type":"t711.late","time":"2027-01-10T09:00:00Z","subject":"7113","data":{}}'], '2027-01-11T03:00:00Z');
SELECT billing.ingest_usage_batch(ARRAY['{"specversion":"1.0","id":"l3","source":"gw","type":"t711.late","time":"2027-01-10T03:20:00Z","subject":"7113","data":{}}', '{"specversion":"1.0","id":"l4","source":"gw","type":"t711.late","time":"2027-01-10T03:40:00Z","subject":"7113","data":{}}', '{"specversion":"1.0","id":"l4","source":"gw","type":"t711.late","time":"2027-01-10T03:40:00Z","subject":"7113","data":{}}'],
                                  '2027-01-11T03:00:00Z');
SELECT results_eq($$SELECT r.bucket, r.events, r.folded IS TRUE, d.events FROM billing.usage_rollup r
                      LEFT JOIN billing.usage_rollup_day d ON d.customer_id = r.customer_id AND d.meter_code = r.meter_code
                     WHERE r.customer_id = 7113 AND r.meter_code = 't711_late' ORDER BY r.bucket$$,
                  $$VALUES ('2027-01-10T03:00:00Z'::timestamptz, 3::bigint, true, 3::bigint),
                           ('2027-01-10T09:00:00Z', 1, false, 3)$$,
                  'a count meter''s late events into a folded hour: its hour and its day counted once each');

-- bad calls
SELECT throws_ok($$SELECT * FROM billing.ingest_usage_batch(array_fill('{}'::text, ARRAY[50001]), '2027-01-10Z')$$,
                 'BL413', NULL, 'more than 50000 events is BL413');
SELECT throws_ok($$SELECT * FROM billing.ingest_usage_batch(NULL, '2027-01-10Z')$$, 'BL422', NULL, 'NULL is BL422');
SELECT is((SELECT count(*) FROM billing.ingest_usage_batch('{}', '2027-01-10Z')), 0::bigint, 'an empty batch answers nothing');
SELECT throws_ok($$SELECT * FROM billing.ingest_usage_batch('{}', NULL)$$, 'BL422', NULL, 'a NULL p_now is BL422');

SELECT * FROM finish();
ROLLBACK;
