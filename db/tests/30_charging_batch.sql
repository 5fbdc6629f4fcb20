-- 30_charging_batch: record_payment_results, many gateway results in one call.
BEGIN;
SELECT plan(21);

-- One user for the fixtures and the API's SECURITY DEFINER calls: on Citus a transaction may not
-- touch a placement another user modified in it (docs/scaling.md).
SET LOCAL ROLE billing_owner;

-- PL/pgSQL and IMMUTABLE: see 07_charging (on Citus a SQL function reading every shard with a
-- parameter cannot be planned, and a temporary function's call must be folded in on the coordinator).
CREATE FUNCTION pg_temp.inv(p_key text) RETURNS bigint LANGUAGE plpgsql IMMUTABLE AS
$$ BEGIN RETURN (SELECT i.id FROM billing.invoice i
                   JOIN billing.subscription_request r ON r.customer_id = i.customer_id AND r.subscription_id = i.subscription_id
                  WHERE r.idempotency_key = p_key AND i.kind = 'INITIAL'); END $$;
CREATE FUNCTION pg_temp.pay_key(p_key text) RETURNS text LANGUAGE plpgsql IMMUTABLE AS
$$ BEGIN RETURN (SELECT key_namespace FROM billing.installation) || '-inv-' || pg_temp.inv(p_key) || '-try-0'; END $$;

SELECT billing.upsert_plan('T_RB', 4000, 'USD', 'MONTH');
SELECT billing.create_subscription('t30-' || g, 30000 + g, 'T_RB', '2026-06-01 10:00Z') FROM generate_series(1, 3) g;
SELECT count(*) FROM billing.claim_charges('w', 10, interval '5 minutes', '2026-06-01 10:00Z');

SELECT results_eq(
    $$SELECT idempotency_key, invoice_id, invoice_status, error_code
        FROM billing.record_payment_results(
               ARRAY[pg_temp.pay_key('t30-1'), 'unknown-inv-0-try-0', pg_temp.pay_key('t30-2'), pg_temp.pay_key('t30-3')],
               ARRAY['SUCCEEDED', 'SUCCEEDED', 'DECLINED', 'MAYBE'],
               ARRAY['ch_1', 'ch_x', NULL, NULL], ARRAY[NULL, NULL, 'card_declined', NULL], '2026-06-01 10:01Z')
       ORDER BY idempotency_key LIKE 'unknown-%' DESC, idempotency_key$$,
    $$VALUES ('unknown-inv-0-try-0', NULL::bigint, NULL::text, 'BL404'),
             (pg_temp.pay_key('t30-1'), pg_temp.inv('t30-1'), 'PAID', NULL),
             (pg_temp.pay_key('t30-2'), pg_temp.inv('t30-2'), 'OPEN', NULL),
             (pg_temp.pay_key('t30-3'), NULL, NULL, 'BL422')$$,
    'one row per result: the invoice after it, or the BL error that refused it');
SELECT is((SELECT status FROM billing.invoice WHERE id = pg_temp.inv('t30-1')), 'PAID', 'the success is recorded');
SELECT is((SELECT gateway_reference FROM billing.invoice WHERE id = pg_temp.inv('t30-1')), 'ch_1', 'with its reference');
SELECT is((SELECT attempt_count FROM billing.invoice WHERE id = pg_temp.inv('t30-2')), 1,
          'the decline follows dunning (attempt_count + 1), as record_payment_result does');
SELECT is((SELECT count(*) FROM billing.outbox_event WHERE aggregate_id = pg_temp.inv('t30-1') AND event_type = 'InvoicePaid'),
          1::bigint, 'InvoicePaid written once');
SELECT is((SELECT count(*) FROM billing.outbox_event
            WHERE aggregate_id = pg_temp.inv('t30-2') AND event_type = 'InvoicePaymentFailed'),
          1::bigint, 'InvoicePaymentFailed written once');
SELECT is((SELECT status FROM billing.invoice WHERE id = pg_temp.inv('t30-3')), 'OPEN',
          'a refused result changes nothing');
SELECT results_eq(
    $$SELECT invoice_status, error_code FROM billing.record_payment_results(
               ARRAY[pg_temp.pay_key('t30-1')], ARRAY['DECLINED'], NULL, NULL, '2026-06-01 10:02Z')$$,
    $$VALUES ('PAID', NULL::text)$$, 'idempotent and never regressing: a later DECLINED leaves the PAID invoice');
SELECT is((SELECT count(*) FROM billing.outbox_event
            WHERE aggregate_type = 'invoice' AND aggregate_id = pg_temp.inv('t30-1') AND event_type <> 'InvoiceCreated'), 1::bigint,
          'and writes no event (InvoicePaid stays the only one after the invoice''s creation)');
SELECT throws_ok($$SELECT * FROM billing.record_payment_results(ARRAY['a', 'b'], ARRAY['SUCCEEDED'])$$, 'BL422', NULL,
                 'arrays of different lengths: BL422');
SELECT throws_ok($$SELECT * FROM billing.record_payment_results(ARRAY[]::text[], ARRAY[]::text[])$$, 'BL422', NULL,
                 'an empty batch: BL422');
SELECT throws_ok($$SELECT * FROM billing.record_payment_results(ARRAY['a'], ARRAY['SUCCEEDED'], NULL, NULL, NULL)$$,
                 'BL422', NULL, 'p_now NULL: BL422, as everywhere');

-- -- the usual batch: every result accepted, one subtransaction, one audit row ----------------------
SELECT billing.create_subscription('t30b-' || g, 30100 + g, 'T_RB', '2026-06-01 11:00Z') FROM generate_series(1, 3) g;
SELECT is((SELECT count(*)::int FROM billing.claim_charges('w', 10, interval '5 minutes', '2026-06-01 11:00Z')), 4,
          'three new invoices claimed, and the refused result''s, back after its lease');
-- The audit rows written before (their ids, not the highest: on Citus each node draws ids from its
-- own range, so a later row may have a lower id).
CREATE TEMP TABLE t30_audit_before AS SELECT coalesce(array_agg(id), '{}') AS ids FROM billing.audit_log;
SELECT results_eq(
    $$SELECT idempotency_key, invoice_id, invoice_status, error_code
        FROM billing.record_payment_results(
               ARRAY[pg_temp.pay_key('t30b-3'), pg_temp.pay_key('t30b-1'), pg_temp.pay_key('t30b-2')],
               ARRAY['SUCCEEDED', 'DECLINED', 'SUCCEEDED'],
               ARRAY['ch_b3', NULL, 'ch_b2'], ARRAY[NULL, 'card_declined', NULL], '2026-06-01 11:01Z')$$,
    $$SELECT k, pg_temp.inv(r), s, NULL::text
        FROM (VALUES (pg_temp.pay_key('t30b-1'), 't30b-1', 'OPEN'), (pg_temp.pay_key('t30b-2'), 't30b-2', 'PAID'),
                     (pg_temp.pay_key('t30b-3'), 't30b-3', 'PAID')) v(k, r, s)
       ORDER BY k$$,
    'all accepted: one row per result, in key order, each with its invoice after it');
SELECT is((SELECT array_agg(function ORDER BY id) FROM billing.audit_log WHERE id <> ALL ((SELECT ids FROM t30_audit_before)::bigint[])),
          ARRAY['record_payment_results'],
          'one audit row for the batch, none per result');
SELECT is((SELECT args -> 'idempotency_keys' FROM billing.audit_log WHERE id <> ALL ((SELECT ids FROM t30_audit_before)::bigint[])),
          to_jsonb(ARRAY[pg_temp.pay_key('t30b-3'), pg_temp.pay_key('t30b-1'), pg_temp.pay_key('t30b-2')]),
          'and it holds every key of the batch');
SELECT is((SELECT count(*)::int FROM billing.outbox_event
            WHERE aggregate_id IN (pg_temp.inv('t30b-2'), pg_temp.inv('t30b-3')) AND event_type = 'InvoicePaid'), 2,
          'one InvoicePaid per success');
SELECT is((SELECT attempt_count FROM billing.invoice WHERE id = pg_temp.inv('t30b-1')), 1,
          'the decline in the same batch follows dunning');

-- -- claims: nothing due, nothing changed, no audit row (idle workers ask every second) ------------
TRUNCATE t30_audit_before;
INSERT INTO t30_audit_before SELECT array_agg(id) FROM billing.audit_log;
-- (each call in its own statement: a statement does not see the rows its own functions write)
CREATE TEMP TABLE t30_idle AS SELECT * FROM billing.claim_charges('idle', 10, interval '5 minutes', '2026-06-01 10:03Z');
SELECT is((SELECT count(*)::int FROM t30_idle) || ' ' || (SELECT count(*) FROM billing.audit_log
                                                           WHERE id <> ALL ((SELECT ids FROM t30_audit_before)::bigint[])), '0 0',
          'a claim that finds nothing due returns nothing and writes no audit row');
CREATE TEMP TABLE t30_busy AS SELECT * FROM billing.claim_charges('busy', 10, interval '5 minutes', '2026-06-01 11:06Z');
SELECT is((SELECT count(*)::int FROM t30_busy) || ' ' || (SELECT string_agg(function || ':' || (args ->> 'worker'), ',')
                                                            FROM billing.audit_log WHERE id <> ALL ((SELECT ids FROM t30_audit_before)::bigint[])),
          '1 claim_charges:busy',
          'a claim that takes an invoice (the refused result''s, back after its second lease) writes its audit row');
TRUNCATE t30_audit_before;
INSERT INTO t30_audit_before SELECT array_agg(id) FROM billing.audit_log;
CREATE TEMP TABLE t30_idle_refunds AS SELECT * FROM billing.claim_refunds('idle', 10, interval '5 minutes', '2026-06-01 11:07Z');
CREATE TEMP TABLE t30_given_up AS SELECT billing.give_up_waiting_invoices(10, '2026-06-01 11:07Z') AS n;
SELECT is((SELECT count(*)::int FROM t30_idle_refunds) || ' ' || (SELECT n FROM t30_given_up) || ' '
          || (SELECT count(*) FROM billing.audit_log WHERE id <> ALL ((SELECT ids FROM t30_audit_before)::bigint[])), '0 0 0',
          'a refund claim or a give-up run that finds nothing to do writes no audit row either');

SELECT * FROM finish();
ROLLBACK;
