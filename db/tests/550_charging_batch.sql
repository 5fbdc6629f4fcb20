-- 550_charging_batch: record_payment_results, many gateway results in one call.
BEGIN;
SELECT plan(37);

-- One user for the fixtures and the API's SECURITY DEFINER calls: on Citus a transaction may not
-- touch a placement another user modified in it (docs/scaling.md).
SET LOCAL ROLE billing_owner;

-- PL/pgSQL and IMMUTABLE: see 510_charging (on Citus a SQL function reading every shard with a
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

-- -- the per-row claims (Citus) do what the statements do -----------------------------------------
-- On Citus claim_charges, claim_refunds and announce_expiring_payment_methods cannot lock rows of
-- many shards in one statement: they take a per-row path (_claim_charges_rows, _claim_refunds_rows,
-- _announce_expiring_rows). Here both run from the same state (the statement's work rolled back to a
-- savepoint, kept in psql variables): the same rows returned, the same rows written, the same events.
-- (On Citus the statements are the per-row paths themselves: the comparison holds trivially there.)
SELECT billing.upsert_customer(g, 'UTC') FROM generate_series(30201, 30205) g;
SELECT billing.set_payment_method(30202, 'stripe', 'cus_2', 'pm_2', 'visa', '4242', 1, 2031, '2030-12-01Z');
SELECT billing.set_payment_method(30203, 'stripe', 'cus_3', 'pm_3', 'visa', '4343', 12, 2030, '2030-12-01Z');
SELECT billing.set_payment_method(30204, 'stripe', 'cus_4', 'pm_4', 'visa', '4444', 12, 2032, '2030-12-01Z');
SELECT billing.set_payment_method(30205, 'stripe', 'cus_5', 'pm_5', 'visa', '4545', 12, 2032, '2030-12-01Z');
-- c4: sent, answered UNKNOWN, its key's lifetime (23 h) over by the comparison: REVIEW.
SELECT billing.create_subscription('t30c-4', 30204, 'T_RB', '2031-01-01 00:00Z');
SELECT count(*) FROM billing.claim_charges('w', 100, interval '5 minutes', '2031-01-01 00:00Z', 'stripe');
SELECT billing.record_payment_result(pg_temp.pay_key('t30c-4'), 'UNKNOWN', NULL, 'timeout', '2031-01-01 00:01Z');
-- c5: sent, UNKNOWN, its key ends within the lookup margin of the comparison's call: looked up.
SELECT billing.create_subscription('t30c-5', 30205, 'T_RB', '2031-01-01 02:00Z');
SELECT count(*) FROM billing.claim_charges('w', 100, interval '5 minutes', '2031-01-01 02:00Z', 'stripe');
SELECT billing.record_payment_result(pg_temp.pay_key('t30c-5'), 'UNKNOWN', NULL, 'timeout', '2031-01-01 02:01Z');
-- c1 no method (waits), c2 a usable card (charged with it), c3 an expired card (waits).
SELECT billing.create_subscription('t30c-' || g, 30200 + g, 'T_RB', '2031-01-01 23:00Z') FROM generate_series(1, 3) g;

-- What a claim leaves: every invoice's claim state, every attempt, the events it wrote.
CREATE FUNCTION pg_temp.charge_state(p_at timestamptz) RETURNS jsonb LANGUAGE plpgsql AS $$
BEGIN
    RETURN jsonb_build_object(
        'invoices', (SELECT jsonb_agg(jsonb_build_array(i.id, i.status, i.next_attempt_at, i.waiting_for, i.give_up_at,
                                                        i.review_reason) ORDER BY i.id) FROM billing.invoice i),
        'attempts', (SELECT jsonb_agg(jsonb_build_array(a.invoice_id, a.attempt_number, a.idempotency_key, a.claim_count,
                                                        a.worker, a.last_claimed_at, a.key_expires_at, a.provider,
                                                        a.payment_method_id, a.customer_ref, a.payment_method_ref)
                                      ORDER BY a.invoice_id, a.attempt_number) FROM billing.payment_attempt a),
        'events', (SELECT jsonb_agg(jsonb_build_array(e.aggregate_id, e.event_type, e.payload::jsonb -> 'data', e.customer_id)
                                    ORDER BY e.aggregate_id, e.event_type) FROM billing.outbox_event e
                    WHERE e.created_at = p_at));
END
$$;
SAVEPOINT per_row;
SELECT jsonb_agg(to_jsonb(c) - 'attempt_id' ORDER BY c.invoice_id) AS charge_rows_statement
  FROM billing.claim_charges('w', 100, interval '5 minutes', '2031-01-02 00:00Z', 'stripe') c \gset
SELECT pg_temp.charge_state('2031-01-02 00:00Z') AS charge_state_statement \gset
ROLLBACK TO SAVEPOINT per_row;
SELECT jsonb_agg(to_jsonb(c) - 'attempt_id' ORDER BY c.invoice_id) AS charge_rows_per_row
  FROM billing._claim_charges_rows('w', 100, interval '5 minutes', '2031-01-02 00:00Z', 'stripe') c \gset
SELECT pg_temp.charge_state('2031-01-02 00:00Z') AS charge_state_per_row \gset
SELECT is(:'charge_rows_per_row'::jsonb, :'charge_rows_statement'::jsonb,
          'claim_charges per row: the same charges handed out (keys, amounts, methods, look-ups)');
SELECT is(:'charge_state_per_row'::jsonb -> 'invoices', :'charge_state_statement'::jsonb -> 'invoices',
          'the same invoices leased, waiting or in review');
SELECT is(:'charge_state_per_row'::jsonb -> 'attempts', :'charge_state_statement'::jsonb -> 'attempts',
          'the same attempts, one per key');
SELECT is(:'charge_state_per_row'::jsonb -> 'events', :'charge_state_statement'::jsonb -> 'events',
          'the same events');
SELECT ok((SELECT bool_and(x) FROM (VALUES
               (:'charge_rows_statement'::jsonb @> '[{"lookup": true}]'),
               (:'charge_rows_statement'::jsonb @> '[{"customer_ref": "cus_2", "payment_method_ref": "pm_2"}]'),
               ((SELECT count(*) FROM jsonb_array_elements(:'charge_state_statement'::jsonb -> 'events') e
                  WHERE e ->> 1 = 'InvoicePaymentReview') > 0),
               ((SELECT count(*) FROM jsonb_array_elements(:'charge_state_statement'::jsonb -> 'events') e
                  WHERE e ->> 1 = 'InvoicePaymentMethodRequired') >= 2)) v(x)),
          'and the comparison covers a charge, a look-up, a review and waits');
-- charge_claims_in_shard (issue 32: set-based on a group's shards, the rest row by row) from the
-- same state, in the one group of a single PostgreSQL: the same rows, writes and events.
-- (On Citus there is no group 0: citus/162_shard_work runs it in a group of the cluster.)
SELECT billing._distributed('billing.customer') AS on_citus \gset
\if :on_citus
SELECT skip('charge_claims_in_shard in group 0: a single PostgreSQL only', 5);
\else
ROLLBACK TO SAVEPOINT per_row;
SELECT count(*) FROM billing.lease_shard_groups('w', 1, '1 day', '2031-01-02 00:00Z');
CREATE FUNCTION pg_temp.set_based_count() RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    v_ids bigint[];
    v_customers bigint[];
    v_rows jsonb;
    v_done bigint[];
    v_cfg billing.installation;
BEGIN
    SELECT * INTO v_cfg FROM billing.installation;
    SELECT array_agg(i.id ORDER BY i.id), array_agg(i.customer_id ORDER BY i.id) INTO v_ids, v_customers
      FROM billing.invoice i WHERE i.status = 'OPEN' AND i.next_attempt_at <= '2031-01-02 00:00Z';
    EXECUTE billing._charge_keys_statement('billing.invoice', 'billing.payment_attempt', 'billing.payment_method',
                                           pg_catalog.pg_get_serial_sequence('billing.payment_attempt', 'id'))
       INTO v_rows, v_done
      USING v_customers, v_ids, 'stripe', timestamptz '2031-01-02 00:00Z', interval '5 minutes', 'w', v_cfg.key_namespace,
            v_cfg.key_lifetime, v_cfg.lookup_margin;
    RETURN cardinality(v_done);
END
$$;
SAVEPOINT in_shard;
SELECT cmp_ok(pg_temp.set_based_count(), '>=', 1,
              'the set-based step alone keys what it may (here the numbered invoice with a live key; the others are not numbered yet, or wait, or go to review)');
ROLLBACK TO SAVEPOINT in_shard;
SELECT jsonb_agg(to_jsonb(c) - 'attempt_id' ORDER BY c.invoice_id) AS charge_rows_in_shard
  FROM billing.charge_claims_in_shard('w', 0, 100, interval '5 minutes', '2031-01-02 00:00Z', 'stripe') c \gset
SELECT pg_temp.charge_state('2031-01-02 00:00Z') AS charge_state_in_shard \gset
SELECT is(:'charge_rows_in_shard'::jsonb, :'charge_rows_statement'::jsonb,
          'charge_claims_in_shard: the same charges handed out as claim_charges (keys, amounts, methods, look-ups)');
SELECT is(:'charge_state_in_shard'::jsonb -> 'invoices', :'charge_state_statement'::jsonb -> 'invoices',
          'charge_claims_in_shard: the same invoices leased, waiting or in review');
SELECT is(:'charge_state_in_shard'::jsonb -> 'attempts', :'charge_state_statement'::jsonb -> 'attempts',
          'charge_claims_in_shard: the same attempts, one per key');
SELECT is(:'charge_state_in_shard'::jsonb -> 'events', :'charge_state_statement'::jsonb -> 'events',
          'charge_claims_in_shard: the same events');
\endif

-- Refunds: a new one, one to look up, one past its key's lifetime (RefundReview).
SELECT billing.record_payment_result(pg_temp.pay_key('t30c-2'), 'SUCCEEDED', 'ch_30c_2', NULL, '2031-01-02 00:01Z');
SELECT billing.refund_invoice(pg_temp.inv('t30c-2'), 1000, 'rk-30c-3', '2031-01-02 00:02Z');
SELECT count(*) FROM billing.claim_refunds('w', 100, interval '5 minutes', '2031-01-02 00:02Z');
SELECT billing.record_refund_result(r.idempotency_key, 'UNKNOWN', NULL, 'timeout', '2031-01-02 00:03Z')
  FROM billing.list_refunds(pg_temp.inv('t30c-2')) r;
SELECT billing.refund_invoice(pg_temp.inv('t30c-2'), 1000, 'rk-30c-2', '2031-01-02 02:00Z');
SELECT count(*) FROM billing.claim_refunds('w', 100, interval '5 minutes', '2031-01-02 02:00Z');
SELECT billing.record_refund_result(r.idempotency_key, 'UNKNOWN', NULL, 'timeout', '2031-01-02 02:01Z')
  FROM billing.list_refunds(pg_temp.inv('t30c-2')) r WHERE r.request_key = 'rk-30c-2';
SELECT billing.refund_invoice(pg_temp.inv('t30c-2'), 1000, 'rk-30c-1', '2031-01-02 23:00Z');
CREATE FUNCTION pg_temp.refund_state(p_at timestamptz) RETURNS jsonb LANGUAGE plpgsql AS $$
BEGIN
    RETURN jsonb_build_object(
        'refunds', (SELECT jsonb_agg(jsonb_build_array(r.id, r.status, r.next_attempt_at, r.review_reason, r.claim_count,
                                                       r.first_claimed_at, r.key_expires_at, r.idempotency_key)
                                     ORDER BY r.id) FROM billing.refund r),
        'events', (SELECT jsonb_agg(jsonb_build_array(e.aggregate_id, e.event_type, e.payload::jsonb -> 'data', e.customer_id)
                                    ORDER BY e.aggregate_id, e.event_type) FROM billing.outbox_event e
                    WHERE e.created_at = p_at));
END
$$;
SAVEPOINT per_row_refunds;
SELECT jsonb_agg(to_jsonb(c) ORDER BY c.refund_id) AS refund_rows_statement
  FROM billing.claim_refunds('w', 100, interval '5 minutes', '2031-01-03 00:00Z') c \gset
SELECT pg_temp.refund_state('2031-01-03 00:00Z') AS refund_state_statement \gset
ROLLBACK TO SAVEPOINT per_row_refunds;
SELECT jsonb_agg(to_jsonb(c) ORDER BY c.refund_id) AS refund_rows_per_row
  FROM billing._claim_refunds_rows('w', 100, interval '5 minutes', '2031-01-03 00:00Z') c \gset
SELECT pg_temp.refund_state('2031-01-03 00:00Z') AS refund_state_per_row \gset
SELECT is(:'refund_rows_per_row'::jsonb, :'refund_rows_statement'::jsonb,
          'claim_refunds per row: the same refunds handed out (keys, charges, look-ups)');
SELECT is(:'refund_state_per_row'::jsonb, :'refund_state_statement'::jsonb,
          'the same refunds leased or in review, the same events');
SELECT ok(jsonb_array_length(:'refund_rows_statement'::jsonb) = 3
          AND :'refund_rows_statement'::jsonb @> '[{"lookup": true}, {"lookup": false}]'
          AND (SELECT count(*) FROM jsonb_array_elements(:'refund_state_statement'::jsonb -> 'events') e
                WHERE e ->> 1 = 'RefundReview') = 1,
          'and the comparison covers a new refund, a look-up and a review');

-- Card expiry notices.
SAVEPOINT per_row_expiring;
SELECT billing.announce_expiring_payment_methods(7, 100, '2031-01-28Z') AS announced_statement \gset
SELECT jsonb_agg(jsonb_build_array(e.aggregate_id, e.event_type, e.payload::jsonb -> 'data') ORDER BY e.aggregate_id)
       AS expiring_events_statement
  FROM billing.outbox_event e WHERE e.event_type = 'PaymentMethodExpiring' \gset
ROLLBACK TO SAVEPOINT per_row_expiring;
SELECT billing._announce_expiring_rows(7, 100, '2031-01-28Z') AS announced_per_row \gset
SELECT jsonb_agg(jsonb_build_array(e.aggregate_id, e.event_type, e.payload::jsonb -> 'data') ORDER BY e.aggregate_id)
       AS expiring_events_per_row
  FROM billing.outbox_event e WHERE e.event_type = 'PaymentMethodExpiring' \gset
SELECT is(:announced_per_row, :announced_statement, 'announce_expiring_payment_methods per row: as many announced');
SELECT is(:'expiring_events_per_row'::jsonb, :'expiring_events_statement'::jsonb, 'the same PaymentMethodExpiring events');
SELECT is(:announced_statement, 2, 'two cards end before their renewal (30202, 30203)');

SELECT * FROM finish();
ROLLBACK;
