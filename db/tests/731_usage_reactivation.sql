-- 731_usage_reactivation: a subscription canceled by dunning and rated to its cancellation (its usage
-- cursor finished), then reactivated, is rated again: the time from the cancellation to the new
-- period (usage served while canceled is billed, as when the reactivation comes before the rating
-- reached the cancellation), then each new period. (Found in session 3: the finished cursor was never
-- reopened, so a reactivated subscription's usage was never rated again.) Single node and Citus.
BEGIN;
\ir fixtures/usage_partitions_lock.sql
SET LOCAL ROLE billing_owner;
-- (Citus: the reference table plan_charge is written after distributed reads in this transaction)
SET LOCAL citus.multi_shard_modify_mode TO 'sequential';
SELECT plan(9);

SELECT billing.upsert_customer(7311);
SELECT billing.upsert_plan('T731', 1000, 'USD', 'MONTH', 1, '2026-01-01Z');
SELECT billing.upsert_meter('t731_req', 't731.request', 'count', NULL, '{}', '2026-01-01Z');
SELECT billing.upsert_plan_charge('T731', 't731_req', 'per_unit', 10, NULL, '[]', 0, NULL, NULL, '2026-01-01Z');

CREATE FUNCTION pg_temp.ev(p_id text, p_time text) RETURNS jsonb LANGUAGE sql AS $$
    SELECT jsonb_build_object('specversion', '1.0', 'id', p_id, 'source', 'gw', 'type', 't731.request',
                              'time', p_time, 'subject', '7311', 'data', '{}'::jsonb)
$$;
-- Claims p_invoice and reports p_outcome for it (as 350_lifecycle).
CREATE FUNCTION pg_temp.pay(p_invoice bigint, p_outcome text, p_now timestamptz) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    RETURN (SELECT (billing.record_payment_result(c.idempotency_key, p_outcome, 'ch_' || p_invoice, 'card_declined', p_now)).status
     FROM billing.claim_charges('t731', 1000, '5 minutes', p_now) c WHERE c.invoice_id = p_invoice);
END
$$;
CREATE FUNCTION pg_temp.usage_invoices()
RETURNS TABLE (period_start timestamptz, period_end timestamptz, subtotal bigint)
LANGUAGE sql AS $$
    SELECT i.period_start, i.period_end, i.subtotal FROM billing.invoice i
     WHERE i.customer_id = 7311 AND i.kind = 'USAGE' ORDER BY i.period_start
$$;

SELECT billing.create_subscription('t731-a', 7311, 'T731', '2026-01-31 12:00Z');
CREATE TEMP TABLE t731_sub AS SELECT id FROM billing.subscription WHERE customer_id = 7311;
CREATE TEMP TABLE t731_first AS SELECT id FROM billing.invoice WHERE customer_id = 7311 AND kind = 'INITIAL';
SELECT billing.ingest_usage(jsonb_build_array(pg_temp.ev('a1', '2026-02-01T10:00:00Z'), pg_temp.ev('a2', '2026-02-05T10:00:00Z')),
                            '2026-02-06Z');
-- dunning: four declines, canceled at the last
SELECT pg_temp.pay((SELECT id FROM t731_first), 'DECLINED', '2026-01-31 12:10Z');
SELECT pg_temp.pay((SELECT id FROM t731_first), 'DECLINED', '2026-02-02 12:10Z');
SELECT pg_temp.pay((SELECT id FROM t731_first), 'DECLINED', '2026-02-06 12:10Z');
SELECT pg_temp.pay((SELECT id FROM t731_first), 'DECLINED', '2026-02-12 12:10Z');
-- (results_eq: on Citus a query of one customer is sent whole to its worker, pgTAP's is() with it)
SELECT results_eq($$SELECT status::text FROM billing.invoice WHERE customer_id = 7311 AND kind = 'INITIAL'$$,
                  $$VALUES ('FAILED')$$, 'dunning exhausted');
SELECT results_eq($$SELECT cancel_reason::text FROM billing.subscription WHERE customer_id = 7311$$,
                  $$VALUES ('DUNNING_EXHAUSTED')$$, 'canceled by dunning');

-- rated to the cancellation: the cursor is finished
SELECT count(*) FROM billing.rate_usage(100, '2026-02-12 14:00Z', interval '1 hour');
SELECT results_eq($$SELECT rated_until, finished FROM billing.usage_cursor WHERE customer_id = 7311$$,
                  $$VALUES ('2026-02-12 12:10Z'::timestamptz, true)$$, 'rated to the cancellation: finished');

-- used while canceled; its USAGE invoice paid (a reactivation needs nothing unpaid), then
-- reactivated on 1 March; used in March
SELECT billing.ingest_usage(jsonb_build_array(pg_temp.ev('g1', '2026-02-20T10:00:00Z')), '2026-02-21Z');
CREATE TEMP TABLE t731_usage AS SELECT id FROM billing.invoice WHERE customer_id = 7311 AND kind = 'USAGE';
SELECT pg_temp.pay((SELECT id FROM t731_usage), 'SUCCEEDED', '2026-02-22Z');
SELECT results_eq($$SELECT status::text FROM billing.invoice WHERE customer_id = 7311 AND kind = 'USAGE'$$,
                  $$VALUES ('PAID')$$, 'the usage to the cancellation paid');
SELECT results_eq($$SELECT status::text FROM billing.reactivate_subscription((SELECT id FROM t731_sub), '2026-03-01Z')$$,
                  $$VALUES ('ACTIVE')$$, 'reactivated on 1 March');
SELECT count(*) FROM billing.rate_usage(100, '2026-03-01 02:00Z', interval '1 hour');
SELECT billing.ingest_usage(jsonb_build_array(pg_temp.ev('m1', '2026-03-10T10:00:00Z'), pg_temp.ev('m2', '2026-03-11T10:00:00Z'),
                                              pg_temp.ev('m3', '2026-03-12T10:00:00Z')), '2026-03-13Z');
SELECT billing.create_due_invoices(100, '2026-04-01T00:00:01Z');
SELECT count(*) FROM billing.rate_usage(100, '2026-04-01 02:00Z', interval '1 hour');

SELECT results_eq($$SELECT * FROM pg_temp.usage_invoices()$$,
                  $$VALUES ('2026-01-31 12:00Z'::timestamptz, '2026-02-12 12:10Z'::timestamptz, 20::bigint),
                           ('2026-02-12 12:10Z'::timestamptz, '2026-03-01Z'::timestamptz, 10::bigint),
                           ('2026-03-01Z'::timestamptz, '2026-04-01Z'::timestamptz, 30::bigint)$$,
                  'rated to the cancellation, then from it to the reactivation (1 x 10), then March (3 x 10)');
SELECT results_eq($$SELECT rated_until, finished FROM billing.usage_cursor WHERE customer_id = 7311$$,
                  $$VALUES ('2026-04-01Z'::timestamptz, false)$$, 'followed again: rated to April');
SELECT results_eq($$SELECT sum(quantity)::bigint FROM billing.usage_rating WHERE customer_id = 7311$$,
                  $$VALUES (6::bigint)$$, 'every request rated once');
SELECT is((SELECT count(*) FROM billing.rate_usage(100, '2026-04-01 05:00Z', interval '1 hour') WHERE invoice_id IS NOT NULL),
          0::bigint, 'rated again: nothing billed twice');

SELECT * FROM finish();
ROLLBACK;
