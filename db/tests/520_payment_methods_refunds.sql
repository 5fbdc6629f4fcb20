-- 520_payment_methods_refunds: payment methods, waiting invoices, hard declines, card expiry notices
-- and refunds (db/functions/52_payment_methods.sql, 57_refunds.sql, docs/providers.md).
BEGIN;
SELECT plan(39);

-- One user for the fixtures and the API's SECURITY DEFINER calls: on Citus a transaction may not
-- touch a placement another user modified in it (docs/scaling.md).
SET LOCAL ROLE billing_owner;

-- PL/pgSQL, and IMMUTABLE for the ids: see 510_charging (on Citus a SQL function reading every shard
-- with a parameter cannot be planned, and a temporary function's call must be folded in on the
-- coordinator).
CREATE FUNCTION pg_temp.inv(p_key text) RETURNS bigint LANGUAGE plpgsql IMMUTABLE AS
$$ BEGIN RETURN (SELECT i.id FROM billing.invoice i
                   JOIN billing.subscription_request r ON r.customer_id = i.customer_id AND r.subscription_id = i.subscription_id
                  WHERE r.idempotency_key = p_key AND i.kind = 'INITIAL'); END $$;
CREATE FUNCTION pg_temp.key(p_key text, p_try integer DEFAULT 0) RETURNS text LANGUAGE plpgsql IMMUTABLE AS
$$ BEGIN RETURN (SELECT key_namespace FROM billing.installation) || '-inv-' || pg_temp.inv(p_key) || '-try-' || p_try; END $$;
CREATE FUNCTION pg_temp.events(p_type text, p_id bigint) RETURNS bigint LANGUAGE plpgsql AS
$$ BEGIN RETURN (SELECT count(*) FROM billing.outbox_event WHERE event_type = p_type AND aggregate_id = p_id); END $$;

SELECT billing.upsert_plan('T_PM', 3000, 'USD', 'MONTH');
SELECT billing.upsert_customer(g, 'UTC') FROM generate_series(40001, 40006) g;

-- -- set_payment_method: checks, default, upsert ------------------------------------------------
SELECT throws_ok($$SELECT billing.set_payment_method(49999, 'stripe', 'cus', 'pm_x', 'visa', '4242', 12, 2030, '2026-06-01Z')$$,
                 'BL404', NULL, 'an unknown customer: BL404');
SELECT throws_ok($$SELECT billing.set_payment_method(40001, 'Stripe!', 'cus', 'pm_x', 'visa', '4242', 12, 2030, '2026-06-01Z')$$,
                 'BL422', NULL, 'a provider name is lower-case letters, digits or _');
SELECT throws_ok($$SELECT billing.set_payment_method(40001, 'stripe', 'cus', 'pm_x', 'visa', '42a2', 12, 2030, '2026-06-01Z')$$,
                 'BL422', 'last4 is four digits', 'last4 is four digits');
SELECT throws_ok($$SELECT billing.set_payment_method(40001, 'stripe', 'cus', 'pm_x', 'visa', '4242', 13, 2030, '2026-06-01Z')$$,
                 'BL422', NULL, 'a month is 1..12');
SELECT throws_ok($$SELECT billing.set_payment_method(40001, 'stripe', 'cus', 'pm_x', 'visa', '4242', 5, 2026, '2026-06-01Z')$$,
                 'BL422', 'the card expired at the end of 5/2026', 'a card expired at p_now is refused');
SELECT lives_ok($$SELECT billing.set_payment_method(40001, 'stripe', 'cus_1', 'pm_a', 'visa', '4242', 6, 2026, '2026-06-01Z')$$,
                'a card valid to the end of this month is accepted');
SELECT billing.set_payment_method(40001, 'stripe', 'cus_1', 'pm_b', 'mastercard', '5555', 1, 2031, '2026-06-01Z');
SELECT results_eq($$SELECT payment_method_ref, is_default, status FROM billing.list_payment_methods(40001)$$,
                  $$VALUES ('pm_b', true, 'ACTIVE'), ('pm_a', false, 'ACTIVE')$$,
                  'the last method set is the one default');
SELECT billing.set_payment_method(40001, 'stripe', 'cus_1', 'pm_a', 'visa', '4242', 6, 2027, '2026-06-01Z');
SELECT results_eq($$SELECT payment_method_ref, is_default, exp_year FROM billing.list_payment_methods(40001)$$,
                  $$VALUES ('pm_a', true, 2027), ('pm_b', false, 2031)$$,
                  'setting a known method again updates it and makes it the default (no duplicate row)');
SELECT is((SELECT count(*)::int FROM billing.outbox_event WHERE aggregate_type = 'customer' AND aggregate_id = 40001
            AND event_type = 'PaymentMethodUpdated'), 3, 'PaymentMethodUpdated for each change, on the customer');
SELECT ok(NOT (SELECT payload::jsonb -> 'data' ? 'paymentMethodRef' FROM billing.outbox_event
                WHERE aggregate_id = 40001 AND aggregate_type = 'customer' ORDER BY id DESC LIMIT 1),
          'the provider references stay out of events');

-- -- claim_charges with a provider ---------------------------------------------------------------
SELECT billing.create_subscription('t40-' || g, g, 'T_PM', '2026-06-01 10:00Z') FROM generate_series(40001, 40003) g;
SELECT results_eq(
    $$SELECT customer_id, customer_ref, payment_method_ref
        FROM billing.claim_charges('w', 10, '5 minutes', '2026-06-01 10:00Z', 'stripe') ORDER BY customer_id$$,
    $$VALUES (40001::bigint, 'cus_1', 'pm_a')$$,
    'a real provider is handed the default method; customers without one are not charged');
SELECT results_eq(
    $$SELECT status, waiting_for, next_attempt_at IS NULL FROM billing.invoice WHERE id = pg_temp.inv('t40-40002')$$,
    $$VALUES ('OPEN', 'PAYMENT_METHOD', true)$$, 'without a method the invoice waits, OPEN and unscheduled');
SELECT is((SELECT payload::jsonb -> 'data' ->> 'reason' FROM billing.outbox_event
            WHERE event_type = 'InvoicePaymentMethodRequired' AND aggregate_id = pg_temp.inv('t40-40002')),
          'NO_PAYMENT_METHOD', 'with InvoicePaymentMethodRequired');
SELECT is((SELECT count(*) FROM billing.payment_attempt WHERE invoice_id = pg_temp.inv('t40-40002')), 0::bigint,
          'and no key is spent on it');
SELECT is((SELECT count(*)::int FROM billing.claim_charges('w', 10, '5 minutes', '2026-06-01 10:02Z', 'stripe')), 0,
          'a waiting invoice is never claimed');

-- The simulator charges a customer who never set a method by customer id, as before.
SELECT billing.create_subscription('t40-sim', 40004, 'T_PM', '2026-06-01 10:00Z');
SELECT results_eq(
    $$SELECT customer_id, customer_ref, payment_method_ref FROM billing.claim_charges('w', 10, '5 minutes', '2026-06-01 10:00Z')$$,
    $$VALUES (40004::bigint, NULL::text, NULL::text)$$, 'sim: no method recorded, charged by customer id');

-- -- a new default method retries at once; the re-claim keeps what the key was sent with ----------
SELECT billing.set_payment_method(40002, 'stripe', 'cus_2', 'pm_c', 'visa', '1111', 12, 2030, '2026-06-03 09:00Z');
SELECT results_eq(
    $$SELECT status, waiting_for, next_attempt_at FROM billing.invoice WHERE id = pg_temp.inv('t40-40002')$$,
    $$VALUES ('OPEN', NULL::text, '2026-06-03 09:00Z'::timestamptz)$$, 'a new method retries the waiting invoice at once');
SELECT billing.set_payment_method(40001, 'stripe', 'cus_1', 'pm_z', 'visa', '9999', 12, 2030, '2026-06-01 10:01Z');
SELECT results_eq(
    $$SELECT idempotency_key, payment_method_ref
        FROM billing.claim_charges('w', 10, '5 minutes', '2026-06-01 10:06Z', 'stripe') WHERE customer_id = 40001$$,
    $$VALUES (pg_temp.key('t40-40001'), 'pm_a')$$,
    'a re-claimed key is sent with the method it was first sent with (a new default waits for the next key)');

-- -- hard declines --------------------------------------------------------------------------------
SELECT is((SELECT status FROM billing.record_payment_result(pg_temp.key('t40-40001'), 'DECLINED', 'pi_1', 'stolen_card',
                                                            '2026-06-01 10:07Z', true)),
          'OPEN', 'a hard decline keeps the invoice OPEN');
SELECT results_eq(
    $$SELECT attempt_count, try_count, next_attempt_at, waiting_for FROM billing.invoice WHERE id = pg_temp.inv('t40-40001')$$,
    $$VALUES (1, 1, '2026-06-01 10:07Z'::timestamptz, NULL::text)$$,
    'another default set while the call was in flight: tried again at once, not waiting');
SELECT results_eq($$SELECT status, is_default, failure_reason FROM billing.payment_method
                     WHERE customer_id = 40001 AND payment_method_ref = 'pm_a'$$,
                  $$VALUES ('DECLINED', false, 'stolen_card')$$, 'the declined method is retired');
SELECT results_eq(
    $$SELECT payment_method_ref FROM billing.claim_charges('w', 10, '5 minutes', '2026-06-01 10:08Z', 'stripe')
       WHERE customer_id = 40001$$,
    $$VALUES ('pm_z')$$, 'the next key goes with the new default');
SELECT billing.record_payment_result(pg_temp.key('t40-40001', 1), 'DECLINED', 'pi_2', 'lost_card', '2026-06-01 10:09Z', true);
SELECT results_eq(
    $$SELECT attempt_count, next_attempt_at IS NULL, waiting_for FROM billing.invoice WHERE id = pg_temp.inv('t40-40001')$$,
    $$VALUES (2, true, 'PAYMENT_METHOD')$$, 'a hard decline with no other method: the schedule stops, the invoice waits');
SELECT is((SELECT s.status FROM billing.subscription s JOIN billing.invoice i ON i.customer_id = s.customer_id AND i.subscription_id = s.id
            WHERE i.id = pg_temp.inv('t40-40001')), 'PAST_DUE', 'the subscription is PAST_DUE');
SELECT is((SELECT array_agg(payload::jsonb -> 'data' ->> 'hardDecline' ORDER BY id) FROM billing.outbox_event
            WHERE event_type = 'InvoicePaymentFailed' AND aggregate_id = pg_temp.inv('t40-40001')),
          ARRAY['true', 'true'], 'InvoicePaymentFailed says hardDecline');
SELECT is(pg_temp.events('InvoicePaymentMethodRequired', pg_temp.inv('t40-40001')), 1::bigint,
          'InvoicePaymentMethodRequired (HARD_DECLINE) once the invoice waits');
SELECT billing.set_payment_method(40001, 'stripe', 'cus_1', 'pm_new', 'visa', '4444', 12, 2030, '2026-06-05Z');
SELECT billing.claim_charges('w', 10, '5 minutes', '2026-06-05Z', 'stripe');
SELECT is((SELECT status FROM billing.record_payment_result(pg_temp.key('t40-40001', 2), 'SUCCEEDED', 'pi_3', NULL,
                                                            '2026-06-05 00:01Z')),
          'PAID', 'a hard decline followed by a new method: paid at once');

-- -- card expiry notices --------------------------------------------------------------------------
SELECT billing.set_payment_method(40005, 'stripe', 'cus_5', 'pm_exp', 'visa', '0005', 6, 2026, '2026-06-01Z');
SELECT billing.create_subscription('t40-40005', 40005, 'T_PM', '2026-06-10 10:00Z');
SELECT is(billing.announce_expiring_payment_methods(7, 100, '2026-07-01Z'), 0,
          'the renewal (10 July) is more than 7 days away: nothing yet');
SELECT is(billing.announce_expiring_payment_methods(7, 100, '2026-07-04Z'), 1,
          'the card ends with June, before the renewal 6 days away: announced');
SELECT is(billing.announce_expiring_payment_methods(7, 100, '2026-07-05Z'), 0, 'once');
SELECT is((SELECT payload::jsonb -> 'data' ->> 'expiresAt' FROM billing.outbox_event WHERE event_type = 'PaymentMethodExpiring'),
          '2026-07-01T00:00:00.000000Z', 'PaymentMethodExpiring says when the card stops working');

-- -- refunds --------------------------------------------------------------------------------------
SELECT throws_ok($$SELECT billing.refund_invoice(pg_temp.inv('t40-40002'), 100, NULL, '2026-06-05Z')$$,
                 'BL422', NULL, 'an invoice not PAID cannot be refunded through the API');
SELECT throws_ok($$SELECT billing.refund_invoice(pg_temp.inv('t40-40001'), 3001, NULL, '2026-06-05Z')$$,
                 'BL422', NULL, 'never more than the charge collected');
SELECT is((SELECT status FROM billing.refund_invoice(pg_temp.inv('t40-40001'), 1000, 'rk-1', '2026-06-05Z')), 'REQUESTED',
          'a partial refund is REQUESTED');
SELECT is((SELECT id FROM billing.refund_invoice(pg_temp.inv('t40-40001'), 1000, 'rk-1', '2026-06-05Z')),
          (SELECT id FROM billing.refund WHERE request_key = 'rk-1'), 'the same request key answers the same refund');
SELECT throws_ok($$SELECT billing.refund_invoice(pg_temp.inv('t40-40001'), 2001, NULL, '2026-06-05Z')$$,
                 'BL422', NULL, 'what is being refunded counts: 1000 + 2001 > 3000');
SELECT results_eq(
    $$SELECT r.status, r.outcome FROM billing.claim_refunds('w', 10, '5 minutes', '2026-06-05Z') c
        CROSS JOIN LATERAL billing.record_refund_result(c.idempotency_key, 'FAILED', NULL, 'charge_disputed', '2026-06-05 00:01Z') r$$,
    $$VALUES ('FAILED', 'FAILED')$$, 'a refund the provider refuses is FAILED');
SELECT is((SELECT status FROM billing.refund_invoice(pg_temp.inv('t40-40001'), 3000, NULL, '2026-06-05 00:02Z')), 'REQUESTED',
          'a FAILED refund no longer counts: the whole amount may be asked again');
SELECT billing.claim_refunds('w', 10, '5 minutes', '2026-06-05 00:02Z');
-- (the keys read first: on Citus a call in a statement over a distributed table would run on its shards)
SELECT billing.record_refund_result(k, 'SUCCEEDED', 're_1', NULL, '2026-06-05 00:03Z')
  FROM unnest((SELECT array_agg(r.idempotency_key) FROM billing.refund r WHERE r.status = 'REQUESTED')) k;
SELECT results_eq($$SELECT status, amount_refunded FROM billing.invoice WHERE id = pg_temp.inv('t40-40001')$$,
                  $$VALUES ('PAID', 3000::bigint)$$, 'a refund that succeeded counts on the invoice it paid');

SELECT * FROM finish();
ROLLBACK;
