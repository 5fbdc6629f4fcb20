-- The operator's invoice actions (db/functions/63_invoice_actions.sql): retry_invoice, void_invoice.
BEGIN;
SELECT plan(46);

-- One user for the fixtures and the API's SECURITY DEFINER calls: on Citus a transaction may not
-- touch a placement another user modified in it (docs/scaling.md).
SET LOCAL ROLE billing_owner;

-- PL/pgSQL, and IMMUTABLE for the ids: see 510_charging (on Citus a SQL function reading every shard
-- with a parameter cannot be planned, and a temporary function's call must be folded in on the
-- coordinator).
CREATE FUNCTION pg_temp.sid(p_key text) RETURNS bigint LANGUAGE plpgsql IMMUTABLE AS
$$ BEGIN RETURN (SELECT subscription_id FROM billing.subscription_request WHERE idempotency_key = p_key); END $$;
CREATE FUNCTION pg_temp.inv(p_key text) RETURNS bigint LANGUAGE plpgsql IMMUTABLE AS
$$ DECLARE v_sub bigint := pg_temp.sid(p_key);
   BEGIN RETURN (SELECT id FROM billing.invoice WHERE subscription_id = v_sub AND kind = 'INITIAL'); END $$;
CREATE FUNCTION pg_temp.pay_key(p_invoice bigint, p_try integer) RETURNS text LANGUAGE sql AS
$$ SELECT (SELECT key_namespace FROM billing.installation) || '-inv-' || p_invoice || '-try-' || p_try $$;
CREATE FUNCTION pg_temp.events(p_type text, p_type_of text, p_id bigint) RETURNS bigint LANGUAGE plpgsql AS
$$ BEGIN RETURN (SELECT count(*) FROM billing.outbox_event
                  WHERE event_type = p_type AND aggregate_type = p_type_of AND aggregate_id = p_id); END $$;
CREATE FUNCTION pg_temp.claim(p_now timestamptz) RETURNS SETOF bigint LANGUAGE sql AS
$$ SELECT invoice_id FROM billing.claim_charges('w', 100, interval '5 minutes', p_now) $$;

SELECT billing.upsert_plan('IA_M', 3000, 'EUR', 'MONTH');
SELECT billing.upsert_plan('IA_BIG', 9000, 'EUR', 'MONTH');

-- -- retry_invoice ----------------------------------------------------------------------------
SELECT billing.create_subscription('ia-1', 4501, 'IA_M', '2026-05-01Z');
SELECT pg_temp.inv('ia-1') AS i1 \gset
SELECT pg_temp.claim('2026-05-01Z');
SELECT billing.record_payment_result(pg_temp.pay_key(:i1, 0), 'DECLINED', NULL, 'insufficient_funds', '2026-05-01 00:01Z');
SELECT next_attempt_at AS i1_next FROM billing.invoice WHERE id = :i1 \gset
SELECT ok(:'i1_next'::timestamptz > '2026-05-02Z', 'a declined invoice waits a day in dunning');
SELECT results_eq(format($$SELECT status, attempt_count, next_attempt_at FROM billing.retry_invoice(%s, '2026-05-01 06:00Z')$$, :i1),
                  $$VALUES ('OPEN', 1, '2026-05-01 06:00Z'::timestamptz)$$,
                  'retry: its next attempt is now, the dunning count unchanged');
SELECT is((billing.retry_invoice(:i1, '2026-05-01 07:00Z')).next_attempt_at, '2026-05-01 06:00Z'::timestamptz,
          'retrying an invoice already due changes nothing');
SELECT is((SELECT args ->> 'invoice_id' FROM billing.audit_log WHERE function = 'retry_invoice' ORDER BY id LIMIT 1),
          :i1::text, 'retry_invoice is audited');
SELECT results_eq($$SELECT * FROM pg_temp.claim('2026-05-01 07:00Z')$$, format('VALUES (%s::bigint)', :i1),
                  'the next claim takes it');
SELECT is((SELECT idempotency_key FROM billing.payment_attempt WHERE invoice_id = :i1 ORDER BY id DESC LIMIT 1),
          pg_temp.pay_key(:i1, 1), 'with the key of its current try');
SELECT throws_ok(format($$SELECT billing.retry_invoice(%s, '2026-05-01 07:01Z')$$, :i1), 'BL409', NULL,
                 'retry while its charge is in flight: BL409');
SELECT throws_ok(format($$SELECT billing.void_invoice(%s, 'goodwill', '2026-05-01 07:01Z')$$, :i1), 'BL409', NULL,
                 'void while its charge is in flight: BL409 (its result is not known)');
SELECT billing.record_payment_result(pg_temp.pay_key(:i1, 1), 'UNKNOWN', NULL, 'timeout', '2026-05-01 07:02Z');
SELECT throws_ok(format($$SELECT billing.void_invoice(%s, 'goodwill', '2026-05-01 07:03Z')$$, :i1), 'BL409',
                 format('invoice %s has a charge whose result is not known (unknown): it is not voided under it', :i1),
                 'void after an UNKNOWN answer: BL409');
SELECT is((billing.retry_invoice(:i1, '2026-05-01 07:03Z')).next_attempt_at, '2026-05-01 07:03Z'::timestamptz,
          'retry after an UNKNOWN answer asks again now');
SELECT results_eq($$SELECT idempotency_key FROM billing.claim_charges('w', 100, interval '5 minutes', '2026-05-01 07:03Z')$$,
                  format('VALUES (%L)', pg_temp.pay_key(:i1, 1)), 'with the same key (never a second charge)');
SELECT billing.record_payment_result(pg_temp.pay_key(:i1, 1), 'SUCCEEDED', 'ch_1', NULL, '2026-05-01 07:04Z');
SELECT is((SELECT status FROM billing.get_subscription(pg_temp.sid('ia-1'))), 'ACTIVE', 'paid: ACTIVE again');
SELECT throws_ok(format($$SELECT billing.retry_invoice(%s, '2026-05-01 08:00Z')$$, :i1), 'BL409',
                 format('invoice %s is PAID: only an OPEN invoice is charged again', :i1), 'retry a PAID invoice: BL409');
SELECT throws_ok(format($$SELECT billing.void_invoice(%s, 'goodwill', '2026-05-01 08:00Z')$$, :i1), 'BL409',
                 format('invoice %s is PAID: only an unpaid OPEN invoice is voided', :i1), 'void a PAID invoice: BL409');
SELECT throws_ok($$SELECT billing.retry_invoice(987654321, '2026-05-01Z')$$, 'BL404', NULL, 'retry an unknown invoice: BL404');
SELECT throws_ok(format($$SELECT billing.retry_invoice(%s, NULL)$$, :i1), 'BL422', NULL, 'retry without p_now: BL422');

-- Waiting for a payment method (a real provider, none recorded), in REVIEW, FAILED.
SELECT billing.create_subscription('ia-2', 4502, 'IA_M', '2026-05-01Z');
SELECT pg_temp.inv('ia-2') AS i2 \gset
SELECT billing.claim_charges('w', 100, interval '5 minutes', '2026-05-01 00:00:01Z', 'stripe');
SELECT is((SELECT waiting_for FROM billing.invoice WHERE id = :i2), 'PAYMENT_METHOD', 'a stripe customer without a card waits');
SELECT throws_ok(format($$SELECT billing.retry_invoice(%s, '2026-05-01 01:00Z')$$, :i2), 'BL409', NULL,
                 'retry an invoice waiting for a payment method: BL409');
SELECT billing.create_subscription('ia-3', 4503, 'IA_M', '2026-05-01Z');
SELECT pg_temp.inv('ia-3') AS i3 \gset
UPDATE billing.invoice SET status = 'REVIEW', next_attempt_at = NULL, review_reason = 'KEY_EXPIRED' WHERE id = :i3;
SELECT throws_ok(format($$SELECT billing.retry_invoice(%s, '2026-05-01 01:00Z')$$, :i3), 'BL409', NULL, 'retry in REVIEW: BL409');
SELECT throws_ok(format($$SELECT billing.void_invoice(%s, 'x', '2026-05-01 01:00Z')$$, :i3), 'BL409', NULL, 'void in REVIEW: BL409');
UPDATE billing.invoice SET status = 'FAILED', review_reason = NULL, closed_at = '2026-05-01 01:00Z' WHERE id = :i3;
SELECT throws_ok(format($$SELECT billing.retry_invoice(%s, '2026-05-01 01:00Z')$$, :i3), 'BL409', NULL, 'retry FAILED: BL409');
SELECT throws_ok(format($$SELECT billing.void_invoice(%s, 'x', '2026-05-01 01:00Z')$$, :i3), 'BL409', NULL, 'void FAILED: BL409');

-- -- void_invoice: one in dunning; the subscription recovers ----------------------------------
SELECT billing.create_subscription('ia-4', 4504, 'IA_M', '2026-05-01Z');
SELECT pg_temp.inv('ia-4') AS i4, pg_temp.sid('ia-4') AS s4 \gset
SELECT pg_temp.claim('2026-05-01Z');
SELECT billing.record_payment_result(pg_temp.pay_key(:i4, 0), 'DECLINED', NULL, 'insufficient_funds', '2026-05-01 00:01Z');
SELECT is((SELECT status FROM billing.subscription WHERE id = :s4), 'PAST_DUE', 'declined: PAST_DUE');
SELECT throws_ok(format($$SELECT billing.void_invoice(%s, '  ', '2026-05-01 02:00Z')$$, :i4), 'BL422',
                 'a reason of 1 to 500 characters is required', 'void without a reason: BL422');
SELECT throws_ok(format($$SELECT billing.void_invoice(%s, repeat('x', 501), '2026-05-01 02:00Z')$$, :i4), 'BL422', NULL,
                 'a reason too long: BL422');
SELECT throws_ok(format($$SELECT billing.void_invoice(%s, 'x', NULL)$$, :i4), 'BL422', NULL, 'void without p_now: BL422');
SELECT throws_ok($$SELECT billing.void_invoice(987654321, 'x', '2026-05-01Z')$$, 'BL404', NULL, 'void an unknown invoice: BL404');
SELECT results_eq(format($$SELECT status, next_attempt_at, closed_at FROM billing.void_invoice(%s, 'goodwill: outage', '2026-05-01 02:00Z')$$, :i4),
                  $$VALUES ('VOID', NULL::timestamptz, '2026-05-01 02:00Z'::timestamptz)$$,
                  'void: VOID, never scheduled again, closed now');
SELECT is((SELECT payload::jsonb -> 'data' ->> 'reason' FROM billing.outbox_event
            WHERE event_type = 'InvoiceVoided' AND aggregate_type = 'invoice' AND aggregate_id = :i4),
          'goodwill: outage', 'InvoiceVoided carries the reason');
SELECT is((SELECT (status, version)::text FROM billing.subscription WHERE id = :s4), '(ACTIVE,3)',
          'nothing OPEN left: the subscription is ACTIVE again');
SELECT is(pg_temp.events('SubscriptionRecovered', 'subscription', :s4), 1::bigint, 'SubscriptionRecovered');
SELECT is_empty($$SELECT * FROM pg_temp.claim('2026-05-03Z')$$, 'a VOID invoice is never claimed');
SELECT is((billing.void_invoice(:i4, 'again', '2026-05-01 03:00Z')).closed_at, '2026-05-01 02:00Z'::timestamptz,
          'voiding it again changes nothing');
SELECT is(pg_temp.events('InvoiceVoided', 'invoice', :i4), 1::bigint, '... and announces nothing again');
SELECT throws_ok(format($$SELECT billing.retry_invoice(%s, '2026-05-01 04:00Z')$$, :i4), 'BL409', NULL, 'retry a VOID invoice: BL409');
SELECT is((SELECT args ->> 'reason' FROM billing.audit_log WHERE function = 'void_invoice' AND args ->> 'invoice_id' = :'i4'
            ORDER BY id LIMIT 1), 'goodwill: outage', 'void_invoice is audited with its reason');

-- Credit the invoice had consumed goes back.
SELECT billing.upsert_customer(4505, 'UTC');
SELECT billing._grant_credit(4505, 'EUR', 500, 'PRORATION', NULL, NULL, '2026-04-30Z');
SELECT billing.create_subscription('ia-5', 4505, 'IA_M', '2026-05-01Z');
SELECT pg_temp.inv('ia-5') AS i5 \gset
SELECT is((SELECT (credit_applied, amount)::text FROM billing.invoice WHERE id = :i5), '(500,2500)', 'the credit paid part of it');
SELECT billing.void_invoice(:i5, 'billed by mistake', '2026-05-01 00:00:30Z');
-- (Reads of one customer's rows as query texts: on Citus a statement that reads one shard goes to its
-- worker whole, a pgTAP call in it included.)
SELECT results_eq($$SELECT balance FROM billing.credit_balance WHERE customer_id = 4505 AND currency = 'EUR'$$,
                  $$VALUES (500::bigint)$$, 'voided: the credit it consumed is back');
SELECT results_eq($$SELECT count(*) FROM billing.credit_entry WHERE customer_id = 4505 AND reason = 'RESTORED'
                     AND invoice_id = $$ || :i5, $$VALUES (1::bigint)$$, 'a RESTORED entry');
SELECT is((SELECT status FROM billing.subscription WHERE id = pg_temp.sid('ia-5')), 'ACTIVE',
          'an ACTIVE subscription stays ACTIVE (voiding is not canceling)');

-- An unpaid upgrade voided is reverted, like one whose dunning failed.
SELECT billing.create_subscription('ia-6', 4506, 'IA_M', '2026-05-01Z');
SELECT pg_temp.inv('ia-6') AS i6, pg_temp.sid('ia-6') AS s6 \gset
SELECT pg_temp.claim('2026-05-01Z');
SELECT billing.record_payment_result(pg_temp.pay_key(:i6, 0), 'SUCCEEDED', 'ch_6', NULL, '2026-05-01 00:01Z');
SELECT billing.change_plan(:s6, 'IA_BIG', '2026-05-16Z');
SELECT id AS p6 FROM billing.invoice WHERE subscription_id = :s6 AND kind = 'PRORATION' \gset
-- (the plan's code by a join with the plans: on Citus a function reading a table, called in a query
-- over a distributed table, would run on its shards)
SELECT is((SELECT p.code FROM billing.subscription s JOIN billing.plan p ON p.id = s.plan_id WHERE s.id = :s6), 'IA_BIG',
          'upgraded, its proration unpaid');
SELECT lives_ok(format($$SELECT billing.void_invoice(%s, 'upgrade refused', '2026-05-16 01:00Z')$$, :p6), 'void the proration');
SELECT results_eq(format($$SELECT p.code, s.period_price, s.status FROM billing.subscription s
                            JOIN billing.plan p ON p.id = s.plan_id WHERE s.id = %s$$, :s6),
                  $$VALUES ('IA_M', 3000::bigint, 'ACTIVE')$$, 'back on the plan paid for, at the price paid');
SELECT is(pg_temp.events('SubscriptionPlanReverted', 'subscription', :s6), 1::bigint, 'SubscriptionPlanReverted');

-- Who may call them.
SELECT ok(has_function_privilege('billing_console', 'billing.void_invoice(bigint, text, timestamptz)', 'EXECUTE')
          AND has_function_privilege('billing_console', 'billing.retry_invoice(bigint, timestamptz)', 'EXECUTE'),
          'the console role may');
SELECT ok(NOT has_function_privilege('billing_readonly', 'billing.void_invoice(bigint, text, timestamptz)', 'EXECUTE')
          AND NOT has_function_privilege('billing_worker', 'billing.void_invoice(bigint, text, timestamptz)', 'EXECUTE')
          AND NOT has_function_privilege('billing_readonly', 'billing.retry_invoice(bigint, timestamptz)', 'EXECUTE'),
          'the read-only and worker roles may not');

SELECT * FROM finish();
ROLLBACK;
