-- 730_usage_cursor_start: where a subscription's usage rating starts (docs/usage.md, "What is
-- followed"). A usage charge added to a plan that already had subscriptions applies from the period
-- then current, never back to their first period; an imported subscription whose plan gains a
-- charge during its imported period has that period rated, even when the first rating call comes
-- after its first renewal. (Found in session 2: the cursor started at the first period's start
-- whenever it was first followed.)
BEGIN;
\ir fixtures/usage_partitions_lock.sql
SET LOCAL ROLE billing_owner;
-- (Citus: the reference table plan_charge is written after distributed reads in this transaction)
SET LOCAL citus.multi_shard_modify_mode TO 'sequential';
SELECT plan(9);

SELECT billing.upsert_customer(7221);
SELECT billing.upsert_customer(7222);
SELECT billing.upsert_plan('T722_A', 1000, 'USD', 'MONTH', 1, '2026-01-01Z');
SELECT billing.upsert_plan('T722_B', 1000, 'USD', 'MONTH', 1, '2026-01-01Z');
SELECT billing.upsert_meter('t722_req', 't722.request', 'count', NULL, '{}', '2026-01-01Z');

CREATE FUNCTION pg_temp.ev(p_id text, p_time text, p_subject bigint) RETURNS jsonb LANGUAGE sql AS $$
    SELECT jsonb_build_object('specversion', '1.0', 'id', p_id, 'source', 'gw', 'type', 't722.request',
                              'time', p_time, 'subject', p_subject::text, 'data', '{}'::jsonb)
$$;
CREATE FUNCTION pg_temp.usage_invoices(p_customer bigint)
RETURNS TABLE (period_start timestamptz, period_end timestamptz, subtotal bigint)
LANGUAGE sql AS $$
    SELECT i.period_start, i.period_end, i.subtotal FROM billing.invoice i
     WHERE i.customer_id = p_customer AND i.kind = 'USAGE' ORDER BY i.period_start
$$;

-- (1) A charge added in March to a plan subscribed since January
SELECT billing.create_subscription('t722-a', 7221, 'T722_A', '2026-01-01Z');
SELECT billing.ingest_usage(jsonb_build_array(pg_temp.ev('j1', '2026-01-10T12:00:00Z', 7221), pg_temp.ev('j2', '2026-01-11T12:00:00Z', 7221)),
                            '2026-01-12Z');
SELECT billing.create_due_invoices(100, '2026-02-01T00:00:01Z');
SELECT billing.ingest_usage(jsonb_build_array(pg_temp.ev('f1', '2026-02-10T12:00:00Z', 7221), pg_temp.ev('f2', '2026-02-11T12:00:00Z', 7221),
                                              pg_temp.ev('f3', '2026-02-12T12:00:00Z', 7221)), '2026-02-13Z');
SELECT billing.create_due_invoices(100, '2026-03-01T00:00:01Z');
SELECT billing.ingest_usage(jsonb_build_array(pg_temp.ev('m1', '2026-03-10T12:00:00Z', 7221)), '2026-03-11Z');
SELECT is((SELECT count(*) FROM billing.rate_usage(100, '2026-03-12Z', interval '1 hour')), 0::bigint,
          'no charge yet: nothing followed, nothing rated');
SELECT billing.upsert_plan_charge('T722_A', 't722_req', 'per_unit', 10, NULL, '[]', 0, NULL, NULL, '2026-03-15Z');
SELECT results_eq($$SELECT rated_until FROM billing.usage_cursor WHERE customer_id = 7221$$,
                  $$VALUES ('2026-03-01Z'::timestamptz)$$,
                  'the subscription is followed when its plan gains the charge, from the period then current');
SELECT billing.ingest_usage(jsonb_build_array(pg_temp.ev('m2', '2026-03-20T12:00:00Z', 7221)), '2026-03-21Z');
SELECT billing.create_due_invoices(100, '2026-04-01T00:00:01Z');
SELECT is((SELECT count(*) FROM billing.rate_usage(100, '2026-04-01T02:00:00Z', interval '1 hour') WHERE invoice_id IS NOT NULL),
          1::bigint, 'March is rated once its grace is over');
SELECT results_eq($$SELECT * FROM pg_temp.usage_invoices(7221)$$,
                  $$VALUES ('2026-03-01Z'::timestamptz, '2026-04-01Z'::timestamptz, 20::bigint)$$,
                  'only March, the period the charge was added in (2 x 10): January and February are not rated back');
SELECT results_eq($$SELECT count(*) FROM billing.usage_rating WHERE customer_id = 7221 AND span_start < '2026-03-01Z'$$,
                  $$VALUES (0::bigint)$$, 'no rating of a span before the charge''s period');

-- (2) An imported subscription (no invoice for its imported period) whose plan gains a charge in that
-- period; the worker's first rating call comes after its first renewal
SELECT subscription_id IS NOT NULL FROM billing.import_subscriptions(
    '[{"external_id": "t722-imp", "customer_id": 7222, "plan_code": "T722_B", "status": "ACTIVE",
       "current_period_start": "2026-01-10T00:00:00Z", "current_period_end": "2026-02-10T00:00:00Z"}]', '2026-01-20Z');
SELECT billing.ingest_usage(jsonb_build_array(pg_temp.ev('i1', '2026-01-21T12:00:00Z', 7222)), '2026-01-21T13:00:00Z');
SELECT billing.upsert_plan_charge('T722_B', 't722_req', 'per_unit', 7, NULL, '[]', 0, NULL, NULL, '2026-01-22Z');
SELECT billing.ingest_usage(jsonb_build_array(pg_temp.ev('i2', '2026-01-25T12:00:00Z', 7222), pg_temp.ev('i3', '2026-02-01T12:00:00Z', 7222)),
                            '2026-02-02Z');
SELECT billing.create_due_invoices(100, '2026-02-10T00:00:01Z');
SELECT is((SELECT count(*) FROM billing.rate_usage(100, '2026-02-10T02:00:00Z', interval '1 hour') WHERE invoice_id IS NOT NULL),
          1::bigint, 'the imported period is rated after the renewal');
SELECT results_eq($$SELECT * FROM pg_temp.usage_invoices(7222)$$,
                  $$VALUES ('2026-01-10Z'::timestamptz, '2026-02-10Z'::timestamptz, 21::bigint)$$,
                  'the imported period, the one current when the charge was added: its 3 requests x 7');

-- (3) A subscription created after the charge: from its first period, as before
SELECT billing.upsert_customer(7223);
SELECT billing.create_subscription('t722-c', 7223, 'T722_B', '2026-02-20Z');
SELECT billing.ingest_usage(jsonb_build_array(pg_temp.ev('c1', '2026-02-21T12:00:00Z', 7223)), '2026-02-22Z');
SELECT billing.create_due_invoices(100, '2026-03-20T00:00:01Z');
SELECT is((SELECT count(*) FROM billing.rate_usage(100, '2026-03-20T02:00:00Z', interval '1 hour')
            WHERE invoice_id IS NOT NULL AND customer_id = 7223), 1::bigint, 'a subscription made after the charge');
SELECT results_eq($$SELECT * FROM pg_temp.usage_invoices(7223)$$,
                  $$VALUES ('2026-02-20Z'::timestamptz, '2026-03-20Z'::timestamptz, 7::bigint)$$,
                  'is rated from its first period');

SELECT * FROM finish();
ROLLBACK;
