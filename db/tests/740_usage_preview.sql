-- 740_usage_preview: the upcoming invoice of a plan of several charges, across a plan change
-- mid-period (docs/usage.md "The upcoming invoice"): each usage line's quantity equals an
-- independent count of the raw events of its span (count, sum, distinct values), its amount the
-- charge's price of that quantity, line by line; and the rating then bills what was previewed.
-- (upcoming_invoice reads each span's usage once for all of its charges and prices them in one call.)
BEGIN;
\ir fixtures/usage_partitions_lock.sql
SET LOCAL ROLE billing_owner;
SELECT plan(7);

-- (reference tables first: on Citus a transaction may not write one after a parallel read of a distributed table)
SELECT billing.upsert_customer(7401);
SELECT billing.upsert_plan('T740_A', 0, 'USD', 'MONTH', 1, '2026-06-01Z');
SELECT billing.upsert_plan('T740_B', 0, 'USD', 'MONTH', 1, '2026-06-01Z');
SELECT billing.upsert_meter('t740_req', 't740.call', 'count', NULL, '{}', '2026-06-01Z');
SELECT billing.upsert_meter('t740_tok', 't740.call', 'sum', '{tokens}', '{}', '2026-06-01Z');
SELECT billing.upsert_meter('t740_usr', 't740.call', 'unique_count', '{user}', '{}', '2026-06-01Z');
SELECT billing.upsert_plan_charge('T740_A', 't740_req', 'per_unit', 3, NULL, '[]', 2, NULL, NULL, '2026-06-01Z');
SELECT billing.upsert_plan_charge('T740_A', 't740_tok', 'graduated', NULL, NULL,
                                  '[{"upTo": 50, "unitAmount": 1}, {"upTo": null, "unitAmount": 0.5, "flatAmount": 7}]', 0, NULL, NULL, '2026-06-01Z');
SELECT billing.upsert_plan_charge('T740_A', 't740_usr', 'package', 40, 2, '[]', 0, NULL, NULL, '2026-06-01Z');
SELECT billing.upsert_plan_charge('T740_B', 't740_req', 'per_unit', 5, NULL, '[]', 0, NULL, 100, '2026-06-01Z');
SELECT billing.upsert_plan_charge('T740_B', 't740_tok', 'volume', NULL, NULL,
                                  '[{"upTo": 30, "unitAmount": 2}, {"upTo": null, "unitAmount": 1}]', 0, 15, NULL, '2026-06-01Z');

CREATE FUNCTION pg_temp.evs(p_prefix text, p_from timestamptz, p_n integer) RETURNS jsonb LANGUAGE sql AS $$
    SELECT jsonb_agg(jsonb_build_object('specversion', '1.0', 'id', p_prefix || k, 'source', 'gw', 'type', 't740.call',
                                        'time', to_char((p_from + make_interval(mins => k * 37)) AT TIME ZONE 'UTC',
                                                        'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
                                        'subject', '7401', 'data', jsonb_build_object('tokens', (k * 7) % 23, 'user', 'u' || k % 5)))
      FROM generate_series(1, p_n) k
$$;
-- the independent count: the raw events of [p_from, p_to), per meter
CREATE FUNCTION pg_temp.raw(p_meter text, p_from timestamptz, p_to timestamptz) RETURNS numeric LANGUAGE sql AS $$
    SELECT CASE p_meter WHEN 't740_req' THEN count(*)::numeric
                        WHEN 't740_tok' THEN coalesce(sum((e.data ->> 'tokens')::numeric), 0)
                        ELSE count(DISTINCT e.data ->> 'user')::numeric END
      FROM billing.usage_event e
     WHERE e.customer_id = 7401 AND e.event_time >= p_from AND e.event_time < p_to
$$;

SELECT billing.create_subscription('t740-s', 7401, 'T740_A', '2026-06-01Z');
CREATE TEMP TABLE t740 AS SELECT id FROM billing.subscription WHERE customer_id = 7401;
SELECT is((SELECT count(*) FROM billing.ingest_usage(pg_temp.evs('a', '2026-06-02T00:10:00Z', 60), '2026-06-10Z')
            WHERE status = 'accepted'), 60::bigint, 'sixty June events on plan A');
SELECT billing.change_plan((SELECT id FROM t740), 'T740_B', '2026-06-12T06:30:00Z');
SELECT is((SELECT count(*) FROM billing.ingest_usage(pg_temp.evs('b', '2026-06-12T06:30:00Z', 45), '2026-06-20Z')
            WHERE status = 'accepted'), 45::bigint, 'forty-five more on plan B, from the change on');

-- the preview as of 20 June, its usage lines beside the raw count and the charge's price of it
CREATE TEMP TABLE t740_up AS
SELECT l ->> 'meterCode' AS meter, l ->> 'planCode' AS plan_code, (l ->> 'quantity')::numeric AS qty,
       (l ->> 'amount')::bigint AS amount, (l ->> 'periodStart')::timestamptz AS s, (l ->> 'periodEnd')::timestamptz AS e
  FROM jsonb_array_elements(billing.upcoming_invoice((SELECT id FROM t740), '2026-06-20Z') -> 'lines') l
 WHERE l ->> 'kind' = 'USAGE';
SELECT results_eq($$SELECT plan_code, meter, s, e FROM t740_up ORDER BY s, meter$$,
  $$VALUES ('T740_A'::text, 't740_req'::text, '2026-06-01Z'::timestamptz, '2026-06-12T06:30:00Z'::timestamptz),
           ('T740_A', 't740_tok', '2026-06-01Z', '2026-06-12T06:30:00Z'),
           ('T740_A', 't740_usr', '2026-06-01Z', '2026-06-12T06:30:00Z'),
           ('T740_B', 't740_req', '2026-06-12T06:30:00Z', '2026-06-20Z'),
           ('T740_B', 't740_tok', '2026-06-12T06:30:00Z', '2026-06-20Z')$$,
  'one usage line per plan segment and charge, in order');
SELECT is((SELECT count(*) FROM t740_up WHERE qty IS DISTINCT FROM pg_temp.raw(meter, s, e)), 0::bigint,
          'each line''s quantity is the independent count of the raw events of its span');
-- (the charges read into a local table first: on Citus a row of a reference table passed to a function is its shard's type)
CREATE TEMP TABLE t740_c AS SELECT c.* FROM billing.plan_charge c JOIN billing.plan p ON p.id = c.plan_id WHERE p.code LIKE 'T740_%';
SELECT is((SELECT count(*) FROM t740_up u
            WHERE u.amount IS DISTINCT FROM billing._usage_amount(
                    (SELECT ROW(t.*)::billing.plan_charge FROM t740_c t
                      WHERE t.plan_id = (SELECT p.id FROM billing.plan p WHERE p.code = u.plan_code) AND t.meter_code = u.meter), u.qty)), 0::bigint,
          'each line''s amount is its charge''s price of that quantity');
SELECT is((billing.upcoming_invoice((SELECT id FROM t740), '2026-06-20Z') ->> 'subtotal')::bigint,
          (SELECT sum(amount)::bigint FROM t740_up), 'the subtotal is the lines'' sum');

-- the rating bills what the preview said (no event since 20 June)
SELECT billing.create_due_invoices(100, '2026-07-01T00:00:01Z');
SELECT billing.rate_usage(100, '2026-07-01T02:00:00Z', interval '1 hour');
SELECT results_eq($$SELECT l.meter_code, l.span_start, l.gross FROM billing.service_line l
                     WHERE l.customer_id = 7401 AND l.item = 'USAGE'
                     ORDER BY l.span_start, l.meter_code$$,
  $$SELECT meter, s, amount FROM t740_up ORDER BY s, meter$$,
  'the rating of June bills each segment and charge as previewed');

SELECT * FROM finish();
ROLLBACK;
