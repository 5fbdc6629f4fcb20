-- 510_charging: claims, leases, payment results (late, duplicate, out of order) and webhooks.
BEGIN;
SELECT plan(58);

-- One user for the fixtures and the API's SECURITY DEFINER calls: on Citus a transaction may not
-- touch a placement another user modified in it (docs/scaling.md).
SET LOCAL ROLE billing_owner;

-- PL/pgSQL: on Citus a SQL function that reads a distributed table across shards with a parameter
-- cannot be planned. The look-ups of ids are IMMUTABLE so that a statement of the suite naming a row
-- through them folds the id in when it is planned (each runs once, planned as it runs): on Citus the
-- call of a temporary function is never sent to the workers, where it does not exist.
CREATE FUNCTION pg_temp.sid(p_key text) RETURNS bigint LANGUAGE plpgsql IMMUTABLE AS
$$ BEGIN RETURN (SELECT subscription_id FROM billing.subscription_request WHERE idempotency_key = p_key); END $$;
CREATE FUNCTION pg_temp.inv(p_key text) RETURNS bigint LANGUAGE plpgsql IMMUTABLE AS
$$ DECLARE v_sub bigint := pg_temp.sid(p_key);
   BEGIN RETURN (SELECT id FROM billing.invoice WHERE subscription_id = v_sub AND kind = 'INITIAL'); END $$;
CREATE FUNCTION pg_temp.pay_key(p_key text, p_try integer) RETURNS text LANGUAGE plpgsql IMMUTABLE AS
$$ BEGIN RETURN (SELECT key_namespace FROM billing.installation) || '-inv-' || pg_temp.inv(p_key) || '-try-' || p_try; END $$;
CREATE FUNCTION pg_temp.events(p_type text, p_invoice bigint) RETURNS bigint LANGUAGE plpgsql AS
$$ BEGIN RETURN (SELECT count(*) FROM billing.outbox_event
                  WHERE event_type = p_type AND aggregate_type = 'invoice' AND aggregate_id = p_invoice); END $$;
CREATE FUNCTION pg_temp.claim(p_now timestamptz) RETURNS SETOF text LANGUAGE sql AS
$$ SELECT idempotency_key FROM billing.claim_charges('w', 100, interval '5 minutes', p_now) $$;

SELECT billing.upsert_plan('T_C', 5000, 'USD', 'MONTH');

-- Claims ---------------------------------------------------------------------------------------
SELECT billing.create_subscription('t07-a', 7001, 'T_C', '2026-06-01 10:00Z');
SELECT results_eq(
    $$SELECT invoice_id, attempt_id IS NOT NULL, idempotency_key, customer_id, amount, currency
        FROM billing.claim_charges('w1', 10, interval '5 minutes', '2026-06-01 10:00Z')$$,
    $$SELECT pg_temp.inv('t07-a'), true, pg_temp.pay_key('t07-a', 0), 7001::bigint, 5000::bigint, 'USD'::text$$,
    'claim returns the charge with key <namespace>-inv-<id>-try-0');
SELECT is((SELECT next_attempt_at FROM billing.invoice WHERE id = pg_temp.inv('t07-a')), '2026-06-01 10:05Z'::timestamptz,
          'the claim leases the invoice');
SELECT is_empty($$SELECT * FROM billing.claim_charges('w2', 10, interval '5 minutes', '2026-06-01 10:04Z')$$,
                'another worker cannot claim it during the lease');
SELECT results_eq($$SELECT * FROM pg_temp.claim('2026-06-01 10:06Z')$$, $$SELECT pg_temp.pay_key('t07-a', 0)$$,
                  'after the lease it comes back with the same key');
SELECT results_eq($$SELECT count(*), max(claim_count) FROM billing.payment_attempt WHERE invoice_id = pg_temp.inv('t07-a')$$,
                  $$VALUES (1::bigint, 2)$$, 'one attempt row per key, claimed twice');
SELECT throws_ok($$SELECT * FROM billing.claim_charges('', 10)$$, 'BL422', NULL, 'claim without a worker name: BL422');

-- Success, repeated and contradicted -----------------------------------------------------------
SELECT results_eq(
    $$SELECT status, paid_at, gateway_reference, next_attempt_at
        FROM billing.record_payment_result(pg_temp.pay_key('t07-a', 0), 'SUCCEEDED', 'ch_a', NULL, '2026-06-01 10:07Z')$$,
    $$VALUES ('PAID', '2026-06-01 10:07Z'::timestamptz, 'ch_a', NULL::timestamptz)$$, 'SUCCEEDED: PAID');
SELECT is(pg_temp.events('InvoicePaid', pg_temp.inv('t07-a')), 1::bigint, 'InvoicePaid written');
SELECT lives_ok($$SELECT billing.record_payment_result(pg_temp.pay_key('t07-a', 0), 'SUCCEEDED', 'ch_a', NULL, '2026-06-01 10:08Z')$$,
                'the same result again');
SELECT is(pg_temp.events('InvoicePaid', pg_temp.inv('t07-a')), 1::bigint, 'changes nothing (no second event)');
SELECT is((billing.record_payment_result(pg_temp.pay_key('t07-a', 0), 'DECLINED', NULL, 'card_declined', '2026-06-01 10:09Z')).status,
          'PAID', 'a DECLINED arriving after the success does not regress it');
SELECT is_empty($$SELECT * FROM pg_temp.claim('2026-06-02Z')$$, 'a PAID invoice is never claimed');
SELECT throws_ok($$SELECT billing.record_payment_result('inv-0-try-0', 'SUCCEEDED')$$, 'BL404', NULL, 'unknown key: BL404');
SELECT throws_ok($$SELECT billing.record_payment_result(pg_temp.pay_key('t07-a', 0), 'MAYBE')$$, 'BL422', NULL, 'unknown outcome: BL422');

-- Decline, dunning, UNKNOWN, late results ------------------------------------------------------
SELECT billing.create_subscription('t07-d', 7002, 'T_C', '2026-07-01 10:00Z');
SELECT pg_temp.claim('2026-07-01 10:00Z');
SELECT results_eq(
    $$SELECT status, attempt_count, next_attempt_at, last_failure_reason
        FROM billing.record_payment_result(pg_temp.pay_key('t07-d', 0), 'DECLINED', NULL, 'insufficient_funds', '2026-07-01 10:01Z')$$,
    $$SELECT 'OPEN', 1, billing.dunning_next_attempt(1, pg_temp.inv('t07-d'), '2026-07-01 10:01Z'), 'insufficient_funds'$$,
    'DECLINED: attempt_count + 1, next try from the dunning schedule seeded by the invoice id');
SELECT ok((SELECT next_attempt_at >= '2026-07-02 10:01Z' AND next_attempt_at < '2026-07-02 12:01Z'
             FROM billing.invoice WHERE id = pg_temp.inv('t07-d')), 'first retry within [+1 day, +1 day 2 h)');
SELECT results_eq($$SELECT status, version FROM billing.get_subscription(pg_temp.sid('t07-d'))$$,
                  $$VALUES ('PAST_DUE', 2::bigint)$$, 'the subscription is PAST_DUE');
SELECT is(pg_temp.events('InvoicePaymentFailed', pg_temp.inv('t07-d')), 1::bigint, 'InvoicePaymentFailed written');
SELECT is((billing.record_payment_result(pg_temp.pay_key('t07-d', 0), 'DECLINED', NULL, 'insufficient_funds', '2026-07-01 10:02Z')).attempt_count,
          1, 'a duplicate DECLINED changes nothing');
SELECT is(pg_temp.events('InvoicePaymentFailed', pg_temp.inv('t07-d')), 1::bigint, 'and writes no second event');
SELECT is_empty($$SELECT * FROM pg_temp.claim('2026-07-02 00:00Z')$$, 'not claimable before the retry time');
SELECT results_eq($$SELECT * FROM pg_temp.claim('2026-07-02 13:00Z')$$, $$SELECT pg_temp.pay_key('t07-d', 1)$$,
                  'the retry uses a new key, try-1');
SELECT results_eq(
    $$SELECT status, next_attempt_at, attempt_count
        FROM billing.record_payment_result(pg_temp.pay_key('t07-d', 1), 'UNKNOWN', NULL, 'timeout', '2026-07-02 13:01Z')$$,
    $$VALUES ('OPEN', '2026-07-02 13:16Z'::timestamptz, 1)$$, 'UNKNOWN: same attempt count, next try in 15 minutes');
SELECT results_eq($$SELECT * FROM pg_temp.claim('2026-07-02 13:16Z')$$, $$SELECT pg_temp.pay_key('t07-d', 1)$$,
                  'after UNKNOWN the same key is used again');
SELECT is((billing.record_payment_result(pg_temp.pay_key('t07-d', 0), 'DECLINED', NULL, 'late', '2026-07-02 13:17Z')).attempt_count,
          1, 'a stale DECLINED for try-0 after try-1 exists changes nothing');
-- The gateway finally reports that try-0 had gone through after all: success wins.
SELECT results_eq(
    $$SELECT status, paid_attempt_id = (SELECT id FROM billing.payment_attempt WHERE idempotency_key = pg_temp.pay_key('t07-d', 0))
        FROM billing.record_payment_result(pg_temp.pay_key('t07-d', 0), 'SUCCEEDED', 'ch_d0', NULL, '2026-07-02 13:18Z')$$,
    $$VALUES ('PAID', true)$$, 'a late SUCCEEDED for an older key still pays the invoice');
SELECT results_eq($$SELECT status, version FROM billing.get_subscription(pg_temp.sid('t07-d'))$$,
                  $$VALUES ('ACTIVE', 3::bigint)$$, 'the subscription is ACTIVE again when nothing else is unpaid');
SELECT lives_ok($$SELECT billing.record_payment_result(pg_temp.pay_key('t07-d', 1), 'SUCCEEDED', 'ch_d1', NULL, '2026-07-02 13:19Z')$$,
                'try-1 also succeeded at the gateway');
SELECT results_eq($$SELECT payload::jsonb -> 'data' ->> 'reason' FROM billing.outbox_event
                     WHERE event_type = 'RefundDue' AND aggregate_id = pg_temp.inv('t07-d')$$,
                  $$VALUES ('DUPLICATE_CHARGE')$$, 'a second successful charge of a paid invoice asks for a refund');
SELECT is(pg_temp.events('InvoicePaid', pg_temp.inv('t07-d')), 1::bigint, 'the invoice is announced paid once');

-- UNKNOWN then the real DECLINED for the same key ----------------------------------------------
SELECT billing.create_subscription('t07-u', 7003, 'T_C', '2026-08-01 10:00Z');
SELECT pg_temp.claim('2026-08-01 10:00Z');
SELECT billing.record_payment_result(pg_temp.pay_key('t07-u', 0), 'UNKNOWN', NULL, 'timeout', '2026-08-01 10:01Z');
SELECT is((billing.record_payment_result(pg_temp.pay_key('t07-u', 0), 'UNKNOWN', NULL, 'timeout', '2026-08-01 10:05Z')).next_attempt_at,
          '2026-08-01 10:16Z'::timestamptz, 'a repeated UNKNOWN for the same claim changes nothing');
SELECT is((billing.record_payment_result(pg_temp.pay_key('t07-u', 0), 'DECLINED', NULL, 'do_not_honor', '2026-08-01 10:06Z')).attempt_count,
          1, 'the real DECLINED after an UNKNOWN counts');
SELECT is((billing.record_payment_result(pg_temp.pay_key('t07-u', 0), 'UNKNOWN', NULL, 'timeout', '2026-08-01 10:07Z')).attempt_count,
          1, 'an UNKNOWN after the DECLINED changes nothing');

-- Several unpaid invoices: ACTIVE only when all are paid ---------------------------------------
SELECT billing.create_subscription('t07-g', 7004, 'T_C', '2026-09-01 10:00Z');
SELECT pg_temp.claim('2026-09-01 10:00Z');
SELECT billing.record_payment_result(pg_temp.pay_key('t07-g', 0), 'DECLINED', NULL, 'insufficient_funds', '2026-09-01 10:01Z');
SELECT billing.create_due_invoices(500, '2026-10-01 10:00Z');
SELECT pg_temp.claim('2026-10-01 10:00Z');
SELECT billing.record_payment_result(pg_temp.pay_key('t07-g', 1), 'SUCCEEDED', 'ch_g1', NULL, '2026-10-01 10:01Z');
SELECT is((billing.get_subscription(pg_temp.sid('t07-g'))).status, 'PAST_DUE', 'still PAST_DUE while the renewal is unpaid');
-- (the invoice read first: on Citus a call in a statement over a distributed table would run on its shards)
SELECT billing.record_payment_result((SELECT key_namespace FROM billing.installation) || '-inv-' || id || '-try-0', 'SUCCEEDED', 'ch_g2', NULL, '2026-10-01 10:02Z')
  FROM unnest((SELECT array_agg(id) FROM billing.invoice WHERE subscription_id = pg_temp.sid('t07-g') AND kind = 'RENEWAL')) id;
SELECT is((billing.get_subscription(pg_temp.sid('t07-g'))).status, 'ACTIVE', 'ACTIVE once everything is paid');

-- Exhausted dunning ----------------------------------------------------------------------------
SELECT billing.create_subscription('t07-e', 7005, 'T_C', '2027-01-01 10:00Z');
SELECT pg_temp.claim('2027-01-01 10:00Z');
SELECT billing.record_payment_result(pg_temp.pay_key('t07-e', 0), 'DECLINED', NULL, 'no', '2027-01-01 10:01Z');
SELECT pg_temp.claim('2027-01-02 12:00Z');
SELECT billing.record_payment_result(pg_temp.pay_key('t07-e', 1), 'DECLINED', NULL, 'no', '2027-01-02 12:01Z');
SELECT pg_temp.claim('2027-01-05 14:00Z');
SELECT billing.record_payment_result(pg_temp.pay_key('t07-e', 2), 'DECLINED', NULL, 'no', '2027-01-05 14:01Z');
SELECT is((SELECT status FROM billing.invoice WHERE id = pg_temp.inv('t07-e')), 'OPEN', 'still OPEN after three declines');
SELECT pg_temp.claim('2027-01-10 16:00Z');
SELECT results_eq(
    $$SELECT status, attempt_count, next_attempt_at, closed_at
        FROM billing.record_payment_result(pg_temp.pay_key('t07-e', 3), 'DECLINED', NULL, 'no', '2027-01-10 16:01Z')$$,
    $$VALUES ('FAILED', 4, NULL::timestamptz, '2027-01-10 16:01Z'::timestamptz)$$, 'the fourth decline: FAILED');
SELECT results_eq($$SELECT status, cancel_reason FROM billing.get_subscription(pg_temp.sid('t07-e'))$$,
                  $$VALUES ('CANCELED', 'DUNNING_EXHAUSTED')$$, 'the subscription is CANCELED');
SELECT is((SELECT count(*) FROM billing.outbox_event WHERE event_type = 'SubscriptionCanceled'
             AND aggregate_id = pg_temp.sid('t07-e')), 1::bigint, 'SubscriptionCanceled written');
SELECT is(pg_temp.events('InvoicePaymentFailed', pg_temp.inv('t07-e')), 4::bigint, 'one InvoicePaymentFailed per decline');
SELECT results_eq(
    $$SELECT status FROM billing.record_payment_result(pg_temp.pay_key('t07-e', 3), 'SUCCEEDED', 'ch_e3', NULL, '2027-01-10 16:30Z')$$,
    $$VALUES ('FAILED')$$, 'a success after FAILED leaves the invoice closed (its credit went back, the period was written off)');
SELECT results_eq($$SELECT event_type, payload::jsonb -> 'data' ->> 'reason' FROM billing.outbox_event WHERE aggregate_type = 'invoice'
                     AND aggregate_id = pg_temp.inv('t07-e') AND created_at = '2027-01-10 16:30Z' ORDER BY id$$,
                  $$VALUES ('RefundDue', 'INVOICE_FAILED'), ('RefundRequested', 'INVOICE_FAILED')$$,
                  'RefundDue: the money is not owed, and a refund of it is requested');
SELECT is((billing.get_subscription(pg_temp.sid('t07-e'))).status, 'CANCELED', 'the subscription stays CANCELED');

-- VOID then success, and webhooks --------------------------------------------------------------
SELECT billing.create_subscription('t07-v', 7006, 'T_C', '2027-02-01 10:00Z');
SELECT pg_temp.claim('2027-02-01 10:00Z');
SELECT billing.cancel_subscription(pg_temp.sid('t07-v'), false, '2027-02-01 10:00Z');  -- at its start: none of it served
SELECT is((SELECT status FROM billing.invoice WHERE id = pg_temp.inv('t07-v')), 'VOID', 'canceled while being charged, at its very start (nothing served): VOID');
SELECT is(billing.apply_gateway_webhook('evt-v-1', pg_temp.pay_key('t07-v', 0), 'SUCCEEDED', 'ch_v',
                                        (SELECT jsonb_build_object('amount', a.amount, 'currency', btrim(a.currency), 'customerId', a.customer_id)
                                           FROM billing.payment_attempt a WHERE a.idempotency_key = pg_temp.pay_key('t07-v', 0)) || '{"id": "ch_v", "status": "succeeded"}', '2027-02-01 10:01Z'),
          'APPLIED', 'a webhook is applied');
SELECT results_eq($$SELECT status, gateway_reference FROM billing.invoice WHERE id = pg_temp.inv('t07-v')$$,
                  $$VALUES ('VOID', NULL::text)$$, 'a success on a VOID invoice leaves it VOID (nothing was owed)');
SELECT is(pg_temp.events('RefundDue', pg_temp.inv('t07-v')), 1::bigint, 'RefundDue: the money goes back');
SELECT is(billing.apply_gateway_webhook('evt-v-1', pg_temp.pay_key('t07-v', 0), 'SUCCEEDED', 'ch_v', '{}', '2027-02-01 10:02Z'),
          'DUPLICATE', 'the same webhook event again: DUPLICATE');
SELECT is(billing.apply_gateway_webhook('evt-v-2', pg_temp.pay_key('t07-v', 0), 'SUCCEEDED', 'ch_v', (SELECT jsonb_build_object('amount', a.amount, 'currency', btrim(a.currency), 'customerId', a.customer_id)
                                           FROM billing.payment_attempt a WHERE a.idempotency_key = pg_temp.pay_key('t07-v', 0)), '2027-02-01 10:03Z'),
          'APPLIED', 'another delivery of the same result is stored');
SELECT is(pg_temp.events('InvoicePaid', pg_temp.inv('t07-v')) + pg_temp.events('RefundDue', pg_temp.inv('t07-v')), 1::bigint,
          'but changes nothing');
SELECT throws_ok($$SELECT billing.apply_gateway_webhook('evt-x', 'inv-0-try-0', 'SUCCEEDED', 'ch', '{}', '2027-02-01Z')$$,
                 'BL404', NULL, 'a webhook for an unknown key: BL404');
SELECT is((SELECT count(*) FROM billing.gateway_webhook WHERE event_id = 'evt-x'), 0::bigint, 'and is not stored (the gateway retries)');

-- CONFLICT: the gateway holds a successful charge of other parameters under the key --------------
-- (a failover lost the writes that made it: chaos/test_failover's asynchronous run found one).
SELECT billing.create_subscription('t07-k', 7007, 'T_C', '2027-03-01 10:00Z');
SELECT pg_temp.claim('2027-03-01 10:00Z');
SELECT results_eq($$SELECT status, review_reason FROM billing.record_payment_result(pg_temp.pay_key('t07-k', 0), 'CONFLICT', 'ch_k',
                      'the key holds a charge of other parameters that succeeded, 92 USD (ch_k)', '2027-03-01 10:01Z')$$,
                  $$VALUES ('REVIEW', 'KEY_CONFLICT')$$, 'CONFLICT: the invoice goes to REVIEW (KEY_CONFLICT), never claimed again');
SELECT results_eq($$SELECT outcome, gateway_reference, failure_reason LIKE '%92 USD%' FROM billing.payment_attempt
                     WHERE idempotency_key = pg_temp.pay_key('t07-k', 0)$$,
                  $$VALUES ('UNKNOWN', 'ch_k', true)$$, 'the attempt''s own fate is unknown; the reason names what the key holds');
SELECT results_eq($$SELECT payload->'data'->>'reason' FROM billing.outbox_event WHERE event_type = 'InvoicePaymentReview'
                     AND aggregate_id = pg_temp.inv('t07-k')$$,
                  $$VALUES ('KEY_CONFLICT')$$, 'InvoicePaymentReview says KEY_CONFLICT');
SELECT is((billing.record_payment_result(pg_temp.pay_key('t07-k', 0), 'CONFLICT', 'ch_k', NULL, '2027-03-01 10:02Z')).status, 'REVIEW',
          'CONFLICT again changes nothing');
SELECT is(pg_temp.events('InvoicePaymentReview', pg_temp.inv('t07-k')), 1::bigint, 'and announces nothing again');
SELECT is_empty($$SELECT * FROM pg_temp.claim('2027-03-02 10:00Z') AS c(k) WHERE k LIKE '%-inv-' || pg_temp.inv('t07-k') || '-%'$$,
                'an invoice in REVIEW is not claimed');

SELECT * FROM finish();
ROLLBACK;
