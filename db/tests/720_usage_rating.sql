-- 720_usage_rating: rating usage in arrears on the service ledger (issue 29, docs/usage.md "Rating in
-- arrears"): a period rated once its grace is over, onto a USAGE invoice whose lines say what was sold;
-- a plan change mid-period rated in two parts; late events as adjustment lines on the next USAGE
-- invoice (never lost, never billed twice); a cancellation neither voids nor skips the usage served.
BEGIN;
\ir fixtures/usage_partitions_lock.sql
SET LOCAL ROLE billing_owner;
SELECT plan(48);

-- (reference tables first: on Citus a transaction may not write one after a parallel read of a distributed table)
SELECT billing.upsert_customer(7201);
SELECT billing.upsert_plan('T720_U', 0, 'USD', 'MONTH', 1, '2026-03-01Z');
SELECT billing.upsert_plan('T720_V', 0, 'USD', 'MONTH', 1, '2026-03-01Z');
SELECT billing.upsert_plan('T720_F', 500, 'USD', 'MONTH', 1, '2026-03-01Z');
SELECT billing.upsert_meter('t720_req', 't720.request', 'count', NULL, '{}', '2026-03-01Z');
SELECT billing.upsert_plan_charge('T720_U', 't720_req', 'per_unit', 10, NULL, '[]', 0, NULL, NULL, '2026-03-01Z');
SELECT billing.upsert_plan_charge('T720_V', 't720_req', 'per_unit', 20, NULL, '[]', 0, NULL, NULL, '2026-03-01Z');
SELECT billing.upsert_plan_charge('T720_F', 't720_req', 'graduated', NULL, NULL,
                                  '[{"upTo": 2, "unitAmount": 0}, {"upTo": null, "unitAmount": 100}]', 0, NULL, NULL, '2026-03-01Z');

CREATE FUNCTION pg_temp.ev(p_id text, p_time text, p_subject bigint DEFAULT 7201) RETURNS jsonb LANGUAGE sql AS $$
    SELECT jsonb_build_object('specversion', '1.0', 'id', p_id, 'source', 'gw', 'type', 't720.request',
                              'time', p_time, 'subject', p_subject::text, 'data', '{}'::jsonb)
$$;
CREATE FUNCTION pg_temp.usage_invoices() RETURNS TABLE (period_start timestamptz, period_end timestamptz, subtotal bigint, status text)
LANGUAGE sql AS $$
    SELECT i.period_start, i.period_end, i.subtotal, i.status FROM billing.invoice i
     WHERE i.customer_id = 7201 AND i.kind = 'USAGE' ORDER BY i.period_start
$$;

SELECT billing.create_subscription('t720-s', 7201, 'T720_U', '2026-03-01Z');
CREATE TEMP TABLE t720 AS SELECT id FROM billing.subscription WHERE customer_id = 7201;

-- March: 3 requests on plan U (10 each), a change to V on 16 March, 2 requests on V (20 each)
SELECT is((SELECT count(*) FROM billing.ingest_usage(jsonb_build_array(
    pg_temp.ev('m1', '2026-03-05T10:00:00Z'), pg_temp.ev('m2', '2026-03-05T10:00:01Z'), pg_temp.ev('m3', '2026-03-15T23:59:59Z')),
    '2026-03-16Z') WHERE status = 'accepted'), 3::bigint, 'three March events on plan U');
SELECT billing.change_plan((SELECT id FROM t720), 'T720_V', '2026-03-16Z');
SELECT is((SELECT count(*) FROM billing.ingest_usage(jsonb_build_array(
    pg_temp.ev('m4', '2026-03-16T00:00:00Z'), pg_temp.ev('m5', '2026-03-20T08:00:00Z')),
    '2026-03-20T09:00:00Z') WHERE status = 'accepted'), 2::bigint, 'two March events on plan V');

SELECT billing.create_due_invoices(100, '2026-04-01T00:00:01Z');
SELECT is((SELECT count(*) FROM billing.rate_usage(100, '2026-04-01T00:30:00Z', interval '1 hour') WHERE invoice_id IS NOT NULL),
          0::bigint, 'within the grace nothing is rated');
SELECT is((SELECT count(*) FROM billing.ingest_usage(jsonb_build_array(pg_temp.ev('m6', '2026-03-31T23:00:00Z')),
          '2026-04-01T00:40:00Z') WHERE status = 'accepted'), 1::bigint, 'an event of the ended period within its grace');
SELECT is((SELECT count(*) FROM billing.rate_usage(100, '2026-04-01T01:00:00Z', interval '1 hour') WHERE invoice_id IS NOT NULL),
          1::bigint, 'once the grace is over the period is rated: one USAGE invoice');
SELECT results_eq($$SELECT * FROM pg_temp.usage_invoices()$$,
  $$VALUES ('2026-03-01Z'::timestamptz, '2026-04-01Z'::timestamptz, 90::bigint, 'OPEN'::text)$$,
  'March''s usage: 3 x 10 on U + 3 x 20 on V = 90, on an invoice of March, due');
SELECT results_eq($$SELECT l.kind, l.item, l.meter_code, l.plan_id, l.usage_quantity, l.span_start, l.span_end, l.gross, l.net
                      FROM billing.service_line l JOIN billing.invoice i ON i.customer_id = l.customer_id AND i.id = l.invoice_id
                     WHERE l.customer_id = 7201 AND i.kind = 'USAGE' ORDER BY l.span_start$$,
  $$VALUES ('CHARGE'::text, 'USAGE'::text, 't720_req'::text, (SELECT id FROM billing.plan WHERE code = 'T720_U'), 3::numeric,
            '2026-03-01Z'::timestamptz, '2026-03-16Z'::timestamptz, 30::bigint, 30::bigint),
           ('CHARGE', 'USAGE', 't720_req', (SELECT id FROM billing.plan WHERE code = 'T720_V'), 3::numeric,
            '2026-03-16Z', '2026-04-01Z', 60, 60)$$,
  'the plan change mid-period is rated in two parts, each at its plan''s charge, on the ledger');
-- (the invoice read into a local table first: on Citus a row of a distributed table passed to a function goes to its worker)
CREATE TEMP TABLE t720_inv AS SELECT * FROM billing.invoice WHERE customer_id = 7201 AND kind = 'USAGE';
SELECT results_eq($$SELECT kind, amount FROM billing._invoice_lines((SELECT ROW(t.*)::billing.invoice FROM t720_inv t), NULL)
                    WHERE kind = 'USAGE'$$,
  $$VALUES ('USAGE'::text, 30::bigint), ('USAGE', 60::bigint)$$, 'the invoice document shows one USAGE line per service line');
SELECT is((SELECT count(*) FROM billing.rate_usage(100, '2026-04-01T02:00:00Z', interval '1 hour') WHERE invoice_id IS NOT NULL),
          0::bigint, 'rated again: nothing billed twice');

-- a late event after the rating: accepted, billed on the next USAGE invoice as an adjustment
SELECT results_eq($$SELECT status FROM billing.ingest_usage(jsonb_build_array(pg_temp.ev('late1', '2026-03-25T00:00:00Z')),
                    '2026-04-02Z')$$, $$VALUES ('accepted'::text)$$, 'an event of a period already rated is accepted');
SELECT results_eq($$SELECT status FROM billing.ingest_usage(jsonb_build_array(pg_temp.ev('late1', '2026-03-25T00:00:00Z')),
                    '2026-04-02T00:00:01Z')$$, $$VALUES ('duplicate'::text)$$, 'sent again: a duplicate');
SELECT results_eq($$SELECT late_since FROM billing.usage_cursor WHERE customer_id = 7201$$, $$VALUES ('2026-03-25Z'::timestamptz)$$,
          'its span is marked to be rated again');
SELECT is((SELECT count(*) FROM billing.rate_usage(100, '2026-04-03Z', interval '1 hour') WHERE invoice_id IS NOT NULL),
          0::bigint, 'a live subscription''s late events wait for its next USAGE invoice');
SELECT billing.ingest_usage(jsonb_build_array(pg_temp.ev('a1', '2026-04-10T00:00:00Z')), '2026-04-10T00:00:01Z');
-- the upcoming invoice, as of 20 April: April's usage so far and the late March adjustment
SELECT results_eq($$SELECT l->>'kind', l->>'meterCode', (l->>'quantity')::numeric, (l->>'amount')::bigint, (l->>'late')::boolean,
                           (l->>'periodStart')::timestamptz
                      FROM jsonb_array_elements(billing.upcoming_invoice((SELECT id FROM t720), '2026-04-20Z')->'lines') l$$,
  $$VALUES ('USAGE'::text, 't720_req'::text, 4::numeric, 20::bigint, true, '2026-03-16Z'::timestamptz),
           ('USAGE', 't720_req', 1, 20, false, '2026-04-01Z')$$,
  'the upcoming invoice previews the late adjustment and the usage so far, as the rating will bill them');
SELECT is((billing.upcoming_invoice((SELECT id FROM t720), '2026-04-20Z')->>'total')::bigint, 40::bigint,
          'its total (no fixed price on a usage-only plan, no tax here)');
SELECT throws_ok($$SELECT billing.upcoming_invoice(-1, '2026-04-20Z')$$, 'BL404', NULL, 'an unknown subscription is BL404');
SELECT billing.create_due_invoices(100, '2026-05-01T00:00:01Z');
SELECT billing.rate_usage(100, '2026-05-01T01:00:00Z', interval '1 hour');
SELECT results_eq($$SELECT * FROM pg_temp.usage_invoices()$$,
  $$VALUES ('2026-03-01Z'::timestamptz, '2026-04-01Z'::timestamptz, 90::bigint, 'OPEN'::text),
           ('2026-04-01Z', '2026-05-01Z', 40, 'OPEN')$$,
  'April''s invoice: its own usage (1 x 20) and the late March event (1 x 20)');
SELECT results_eq($$SELECT l.span_start, l.span_end, l.usage_quantity, l.net FROM billing.service_line l
                     WHERE l.customer_id = 7201 AND l.item = 'USAGE'
                       AND l.invoice_id = (SELECT id FROM billing.invoice WHERE customer_id = 7201 AND kind = 'USAGE' AND period_start = '2026-04-01Z')
                     ORDER BY l.span_start$$,
  $$VALUES ('2026-03-16Z'::timestamptz, '2026-04-01Z'::timestamptz, 4::numeric, 20::bigint),
           ('2026-04-01Z', '2026-05-01Z', 1, 20)$$,
  'the adjustment line names the earlier span and bills only the increase (4 x 20 - 60 already billed)');
SELECT results_eq($$SELECT late_since FROM billing.usage_cursor WHERE customer_id = 7201$$, $$VALUES (NULL::timestamptz)$$,
                  'the late mark is cleared');
SELECT results_eq($$SELECT sum(billed)::bigint FROM billing.usage_rating WHERE customer_id = 7201$$,
                  $$SELECT sum(net)::bigint FROM billing.service_line WHERE customer_id = 7201 AND item = 'USAGE'$$,
                  'every rating''s billed amount is a line of the ledger');

-- a cancellation before the rating: the USAGE invoice due stays due, the last days are still rated
SELECT billing.ingest_usage(jsonb_build_array(pg_temp.ev('c1', '2026-05-05T00:00:00Z'), pg_temp.ev('c2', '2026-05-09T00:00:00Z')),
                            '2026-05-09T00:00:01Z');
SELECT billing.cancel_subscription((SELECT id FROM t720), false, '2026-05-10Z');
SELECT results_eq($$SELECT status FROM pg_temp.usage_invoices()$$, $$VALUES ('OPEN'::text), ('OPEN')$$,
                  'a cancellation never voids a USAGE invoice (usage already served)');
SELECT is((SELECT count(*) FROM billing.rate_usage(100, '2026-05-10T00:30:00Z', interval '1 hour') WHERE invoice_id IS NOT NULL),
          0::bigint, 'the canceled service''s grace runs first');
SELECT is((SELECT count(*) FROM billing.ingest_usage(jsonb_build_array(pg_temp.ev('c3', '2026-05-09T23:59:59Z'), pg_temp.ev('c4', '2026-05-10T00:00:00Z')),
          '2026-05-10T00:40:00Z') WHERE status = 'accepted'), 2::bigint, 'events within its grace (one after the end)');
SELECT billing.rate_usage(100, '2026-05-10T01:00:00Z', interval '1 hour');
SELECT results_eq($$SELECT period_start, period_end, subtotal FROM pg_temp.usage_invoices() WHERE period_start = '2026-05-01Z'$$,
  $$VALUES ('2026-05-01Z'::timestamptz, '2026-05-10Z'::timestamptz, 60::bigint)$$,
  'the canceled subscription''s last days are rated to its end (3 x 20; the event after the end is not its usage)');
SELECT results_eq($$SELECT finished FROM billing.usage_cursor WHERE customer_id = 7201$$, $$VALUES (true)$$, 'rated to its end');
SELECT billing.ingest_usage(jsonb_build_array(pg_temp.ev('c5', '2026-05-09T12:00:00Z')), '2026-05-12Z');
SELECT billing.rate_usage(100, '2026-05-12T00:00:01Z', interval '1 hour');
SELECT results_eq($$SELECT period_start, period_end, subtotal FROM pg_temp.usage_invoices() WHERE period_start >= '2026-05-10Z'$$,
  $$VALUES ('2026-05-10Z'::timestamptz, '2026-05-12T00:00:01Z'::timestamptz, 20::bigint)$$,
  'a late event after the end: an adjustment invoice of its own, never lost');
SELECT is((SELECT count(*) FROM billing.rate_usage(100, '2026-05-13Z', interval '1 hour') WHERE invoice_id IS NOT NULL),
          0::bigint, 'and nothing more after it');

-- every USAGE invoice sells what its lines say
SELECT results_eq($$SELECT i.id, i.subtotal FROM billing.invoice i WHERE i.customer_id = 7201 AND i.kind = 'USAGE' ORDER BY i.id$$,
                  $$SELECT l.invoice_id, sum(l.net)::bigint FROM billing.service_line l WHERE l.customer_id = 7201 AND l.item = 'USAGE'
                     GROUP BY l.invoice_id ORDER BY l.invoice_id$$,
                  'each USAGE invoice''s subtotal is the net of its lines');

-- tiers per period and a fixed price beside: a plan change does not touch usage lines (item PLAN only)
SELECT billing.upsert_customer(7202);
SELECT billing.create_subscription('t720-f', 7202, 'T720_F', '2026-03-01Z');
CREATE TEMP TABLE t720f AS SELECT id FROM billing.subscription WHERE customer_id = 7202;
SELECT billing.ingest_usage(jsonb_build_array(pg_temp.ev('f1', '2026-03-02T00:00:00Z', 7202), pg_temp.ev('f2', '2026-03-03T00:00:00Z', 7202),
                                              pg_temp.ev('f3', '2026-03-04T00:00:00Z', 7202)), '2026-03-05Z');
SELECT billing.create_due_invoices(100, '2026-04-01T00:00:01Z');
SELECT billing.rate_usage(100, '2026-04-01T01:00:00Z', interval '1 hour');
SELECT results_eq($$SELECT kind, subtotal FROM billing.invoice WHERE customer_id = 7202 ORDER BY period_start, kind$$,
  $$VALUES ('INITIAL'::text, 500::bigint), ('USAGE', 100), ('RENEWAL', 500)$$,
  'fixed price in advance, usage in arrears on its own invoice: 2 free + 1 x 100');
SELECT results_eq($$SELECT l->>'kind', (l->>'amount')::bigint FROM jsonb_array_elements(
                      billing.upcoming_invoice((SELECT id FROM t720f), '2026-04-10Z')->'lines') l$$,
  $$VALUES ('PLAN'::text, 500::bigint), ('USAGE', 0)$$, 'a fixed price beside usage: both previewed');
SELECT billing.change_plan((SELECT id FROM t720f), 'T720_U', '2026-04-16Z');
SELECT results_eq($$SELECT count(*) FROM billing.service_line WHERE customer_id = 7202 AND kind = 'REVERSAL' AND item = 'USAGE'$$,
                  $$VALUES (0::bigint)$$, 'a plan change reverses plan lines only, never usage');

-- usage alerts: a threshold announced once per open period
SELECT billing.upsert_customer(7203);
SELECT billing.set_usage_alert(7203, 't720_req', 2, '2026-06-01Z');
SELECT billing.set_usage_alert(7203, 't720_req', 2, '2026-06-01Z');
SELECT results_eq($$SELECT count(*) FROM billing.usage_alert WHERE customer_id = 7203$$, $$VALUES (1::bigint)$$,
                  'the same threshold twice is one alert');
SELECT billing.ingest_usage(jsonb_build_array(pg_temp.ev('al1', '2026-06-10T00:00:00Z', 7203)), '2026-06-10T00:00:01Z');
SELECT is(billing.check_usage_alerts(100, '2026-06-10T00:01:00Z'), 0, 'below its threshold an alert is quiet');
SELECT billing.ingest_usage(jsonb_build_array(pg_temp.ev('al2', '2026-06-10T00:02:00Z', 7203), pg_temp.ev('al3', '2026-06-10T00:03:00Z', 7203)),
                            '2026-06-10T00:03:01Z');
SELECT is(billing.check_usage_alerts(100, '2026-06-10T00:04:00Z'), 1, 'reached: it fires');
SELECT is(billing.check_usage_alerts(100, '2026-06-11Z'), 0, 'once per period');
SELECT results_eq($$SELECT payload->'data'->>'meterCode', (payload->'data'->>'value')::numeric, payload->>'subject'
                      FROM billing.outbox_event WHERE event_type = 'UsageThresholdReached'$$,
  $$VALUES ('t720_req'::text, 3::numeric, 'customer/7203'::text)$$, 'UsageThresholdReached says the meter and its value');
SELECT billing.ingest_usage(jsonb_build_array(pg_temp.ev('al4', '2026-07-01T00:00:00Z', 7203), pg_temp.ev('al5', '2026-07-01T00:01:00Z', 7203)),
                            '2026-07-01T00:01:01Z');
SELECT is(billing.check_usage_alerts(100, '2026-07-01T00:02:00Z'), 1, 'the next period: it fires again');
SELECT throws_ok($$SELECT billing.set_usage_alert(7203, 't720_nope', 1, '2026-06-01Z')$$, 'BL404', NULL, 'an unknown meter is BL404');
SELECT throws_ok($$SELECT billing.set_usage_alert(7203, 't720_req', 0, '2026-06-01Z')$$, 'BL422', NULL, 'a threshold of 0 is BL422');
-- the rest of the CRUD (HTTP: /v1/customers/{id}/usage-alerts)
SELECT billing.set_usage_alert(7203, 't720_req', 5, '2026-07-02Z');
SELECT results_eq($$SELECT threshold, fired_for IS NOT NULL FROM billing.list_usage_alerts(7203)$$,
                  $$VALUES (2::numeric, true), (5::numeric, false)$$, 'the alerts listed by meter and threshold');
SELECT results_eq($$SELECT (billing.update_usage_alert(7203, (SELECT min(id) FROM billing.list_usage_alerts(7203)), 4, '2026-07-02Z')).threshold$$,
                  $$VALUES (4::numeric)$$, 'a new threshold');
SELECT throws_ok($$SELECT billing.update_usage_alert(7203, (SELECT min(id) FROM billing.list_usage_alerts(7203)), 5, '2026-07-02Z')$$,
                 'BL409', NULL, 'the threshold of another alert of the meter is BL409');
SELECT results_eq($$SELECT (billing.delete_usage_alert(7203, (SELECT min(id) FROM billing.list_usage_alerts(7203)), '2026-07-02Z')).threshold$$,
                  $$VALUES (4::numeric)$$, 'deleted');
SELECT throws_ok($$SELECT billing.delete_usage_alert(7203, 0, '2026-07-02Z')$$, 'BL404', NULL, 'an unknown alert is BL404');
SELECT throws_ok($$SELECT * FROM billing.list_usage_alerts(999999)$$, 'BL404', NULL, 'an unknown customer is BL404');
SELECT results_eq($$SELECT (d ->> 'charged')::boolean, d -> 'upcoming' ->> 'object', jsonb_typeof(d -> 'meters')
                      FROM billing.console_usage((SELECT id FROM t720), '2026-07-03Z') d$$,
                  $$VALUES (true, 'upcoming_invoice'::text, 'array'::text)$$, 'the console''s usage panel of a subscription');

-- bad calls and grants
SELECT throws_ok($$SELECT * FROM billing.rate_usage(0, '2026-04-01Z')$$, 'BL422', NULL, 'a batch of 0 is BL422');
SELECT ok(has_function_privilege('billing_worker', 'billing.rate_usage(integer, timestamptz, interval, boolean)', 'EXECUTE')
          AND NOT has_function_privilege('billing_api', 'billing.rate_usage(integer, timestamptz, interval, boolean)', 'EXECUTE'),
          'the worker rates; the API may not');

SELECT * FROM finish();
ROLLBACK;
