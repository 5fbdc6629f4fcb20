-- 690_notifications: emails owed to customers (docs/customers.md): written in the transaction of the
-- change (outbox trigger, finalization trigger, yearly renewal notices), once each; preferences and
-- the legal kinds; the worker's claim (lease, SKIPPED when turned off) and its result (backoff,
-- DEAD); portal links single-use, expiring, revocable.
BEGIN;
SELECT plan(32);
SET LOCAL ROLE billing_owner;

SELECT billing.upsert_plan('M', 1000, 'EUR', 'MONTH', 1, '2026-01-01Z');
SELECT billing.upsert_plan('Y', 10000, 'EUR', 'YEAR', 1, '2026-01-01Z');
SELECT billing.upsert_customer(1);
SELECT billing.upsert_customer(2);  -- no address: nothing is owed to it
SELECT billing.set_customer_details(1, 'Ana', 'ana@example.com', NULL, NULL, NULL, NULL, 'DE', NULL);

SELECT is((billing.set_customer_preferences(1, 'de', NULL, '2026-01-01Z')).locale, 'de', 'a locale is set');
SELECT throws_ok($$SELECT billing.set_customer_preferences(1, 'fr', NULL, '2026-01-01Z')$$, 'BL422', NULL, 'only the five languages');
SELECT throws_ok($$SELECT billing.set_customer_preferences(1, NULL, ARRAY['REFUND_ISSUED'], '2026-01-01Z')$$, 'BL422', NULL,
                 'a legal kind cannot be turned off');
SELECT throws_ok($$SELECT billing.set_customer_preferences(1, NULL, ARRAY['NEWSLETTER'], '2026-01-01Z')$$, 'BL422', NULL,
                 'only kinds of notification');
SELECT throws_ok($$SELECT billing.set_customer_preferences(99, 'de', NULL, '2026-01-01Z')$$, 'BL404', NULL, 'an unknown customer');
SELECT is((billing.set_customer_preferences(1, NULL, ARRAY['TRIAL_ENDING', 'PAYMENT_FAILED', 'TRIAL_ENDING'], '2026-01-01Z')).notification_opt_outs,
          ARRAY['PAYMENT_FAILED', 'TRIAL_ENDING'], 'opt-outs are kept sorted, once each');

-- A signup, a charge declined then paid: InvoicePaymentFailed and InvoicePaid owe emails; InvoiceCreated does not.
-- The invoice is finalized (issued, with its number) no later than its first charge attempt
-- (docs/invoices.md), so the claim itself owes the INVOICE_ISSUED email.
SELECT billing.create_subscription('s1', 1, 'M', '2026-01-01Z');
SELECT billing.create_subscription('s2', 2, 'M', '2026-01-01Z');
CREATE TEMP TABLE k AS SELECT idempotency_key, customer_id FROM billing.claim_charges('w', 10, '5 minutes', '2026-01-01Z', 'sim');
SELECT billing.record_payment_result(idempotency_key, 'DECLINED', NULL, 'insufficient_funds', '2026-01-01Z') FROM k;
SELECT results_eq($$SELECT customer_id, kind, subject, status FROM billing.notification WHERE customer_id = 1 ORDER BY id$$,
                  $$VALUES (1::bigint, 'INVOICE_ISSUED', 'invoice/' || (SELECT id FROM billing.invoice WHERE customer_id = 1), 'PENDING'),
                           (1::bigint, 'PAYMENT_FAILED', 'invoice/' || (SELECT id FROM billing.invoice WHERE customer_id = 1), 'PENDING')$$,
                  'issued at its first charge; a decline owes an email to the customer with an address, in the event''s transaction');
SELECT results_eq($$SELECT data ->> 'failureReason' FROM billing.notification WHERE customer_id = 1 AND kind = 'PAYMENT_FAILED'$$, $$VALUES ('insufficient_funds')$$, 'with the event''s data');

-- The worker's claim: the customer turned PAYMENT_FAILED off, so it becomes SKIPPED.
SELECT results_eq($$SELECT kind FROM billing.claim_notifications(10, '5 minutes', '2026-01-01Z')$$, $$VALUES ('INVOICE_ISSUED')$$,
                  'turned off: not handed out (the issued invoice is)');
SELECT results_eq($$SELECT status || ' ' || last_error FROM billing.notification WHERE customer_id = 1 AND kind = 'PAYMENT_FAILED'$$, $$VALUES ('SKIPPED turned off by the customer')$$, 'recorded as SKIPPED');
-- (ids read first: on Citus a call inside a query over a distributed table would run on the shard)
CREATE TEMP TABLE issued AS SELECT customer_id, id FROM billing.notification WHERE customer_id = 1 AND kind = 'INVOICE_ISSUED';
SELECT billing.record_notification_result(customer_id, id, 'SENT', NULL, '<issued@x>', '2026-01-01Z') FROM issued;
-- Customer 2 has no address: nothing is owed to it (on Citus the shard's trigger writes the row and the claim skips it).
SELECT results_eq($$SELECT count(*) FROM billing.notification WHERE customer_id = 2 AND (status, last_error) IS DISTINCT FROM ('SKIPPED', 'no email address')$$,
          $$VALUES (0::bigint)$$, 'nothing sent to a customer without an address');

UPDATE k SET idempotency_key = (SELECT idempotency_key FROM billing.claim_charges('w', 10, '5 minutes', '2026-01-03Z', 'sim') WHERE customer_id = 1);
SELECT billing.record_payment_result(idempotency_key, 'SUCCEEDED', 'ch_1', NULL, '2026-01-03Z') FROM k WHERE customer_id = 1;
SELECT billing.finalize_invoices(10, '2026-01-03Z');
SELECT results_eq($$SELECT kind FROM billing.notification WHERE customer_id = 1 AND status = 'PENDING' ORDER BY id$$,
                  $$VALUES ('PAYMENT_SUCCEEDED')$$, 'the receipt (the invoice was issued at its first charge, not again)');
SELECT results_eq($$SELECT data ->> 'number' FROM billing.notification WHERE customer_id = 1 AND kind = 'INVOICE_ISSUED'$$,
          $$SELECT number FROM billing.invoice WHERE customer_id = 1$$, 'the issued invoice carries its number');
SELECT billing.finalize_invoices(10, '2026-01-04Z');
SELECT results_eq($$SELECT count(*) FROM billing.notification WHERE customer_id = 1 AND kind = 'INVOICE_ISSUED'$$, $$VALUES (1::bigint)$$, 'issued once');

-- Claim: leased with the address and language of now; a second claimer gets nothing.
SELECT results_eq($$SELECT kind, recipient, locale, attempts FROM billing.claim_notifications(10, '5 minutes', '2026-01-03Z') ORDER BY id$$,
                  $$VALUES ('PAYMENT_SUCCEEDED', 'ana@example.com', 'de', 1)$$,
                  'claimed with the address and language');
SELECT is((SELECT count(*) FROM billing.claim_notifications(10, '5 minutes', '2026-01-03Z')), 0::bigint, 'leased: not handed out twice');
CREATE TEMP TABLE n AS SELECT customer_id, id, kind FROM billing.notification WHERE customer_id = 1 AND status = 'PENDING' ORDER BY id;

-- Results: a failure backs off (30 s, 60 s ...) and ends DEAD; a success is final; a late duplicate changes nothing.
SELECT is((billing.record_notification_result(customer_id, id, 'FAILED', 'refused', NULL, '2026-01-03Z')).available_at,
          '2026-01-03Z'::timestamptz + interval '30 seconds', 'first failure: again in 30 s')
  FROM n WHERE kind = 'PAYMENT_SUCCEEDED';
SELECT is((SELECT count(*) FROM billing.claim_notifications(10, '5 minutes', '2026-01-03 00:00:20Z')), 0::bigint, 'not before its backoff');
SELECT is((SELECT attempts FROM billing.claim_notifications(10, '5 minutes', '2026-01-03 00:00:31Z')), 2, 'then claimed again');
SELECT is((billing.record_notification_result(customer_id, id, 'FAILED', 'refused', NULL, '2026-01-03 00:00:31Z', '30 seconds', '1 hour', 2)).status,
          'DEAD', 'DEAD after its last try') FROM n WHERE kind = 'PAYMENT_SUCCEEDED';
SELECT results_eq($$SELECT status FROM billing.notification WHERE customer_id = 1 AND kind = 'INVOICE_ISSUED'$$, $$VALUES ('SENT')$$, 'sent');
SELECT is((billing.record_notification_result(customer_id, id, 'FAILED', 'late', NULL, '2026-01-03Z')).status, 'SENT',
          'a late result for a sent one changes nothing') FROM issued;

-- Yearly renewal notices: within the notice, once per renewal.
SELECT billing.create_subscription('y1', 1, 'Y', '2025-01-10Z');
SELECT is(billing.announce_upcoming_renewals(14, 100, '2025-12-20Z'), 0, 'not yet within the notice');
SELECT is(billing.announce_upcoming_renewals(14, 100, '2025-12-28Z'), 1, 'within 14 days of the renewal');
SELECT is(billing.announce_upcoming_renewals(14, 100, '2025-12-29Z'), 0, 'once per renewal');

-- Portal links: single use, expiring, revocable; one answer for every refusal.
SELECT lives_ok($$SELECT billing.create_portal_link(1, sha256('a'), '1 hour', '2026-01-01Z')$$, 'a link');
SELECT lives_ok($$SELECT billing.use_portal_link(1, sha256('a'), '2026-01-01 00:30Z')$$, 'used once');
SELECT throws_ok($$SELECT billing.use_portal_link(1, sha256('a'), '2026-01-01 00:31Z')$$, 'BL404', NULL, 'never twice');
SELECT billing.create_portal_link(1, sha256('b'), '1 hour', '2026-01-01Z');
SELECT throws_ok($$SELECT billing.use_portal_link(1, sha256('b'), '2026-01-01 01:00Z')$$, 'BL404', NULL, 'not at its expiry');
SELECT throws_ok($$SELECT billing.use_portal_link(2, sha256('b'), '2026-01-01 00:10Z')$$, 'BL404', NULL, 'not for another customer');
SELECT billing.create_portal_link(1, sha256('c'), '1 hour', '2026-01-01Z');
SELECT is(billing.revoke_portal_links(1, '2026-01-01 00:10Z'), 2, 'revoked: every unused link still valid');
SELECT throws_ok($$SELECT billing.use_portal_link(1, sha256('c'), '2026-01-01 00:11Z')$$, 'BL404', NULL, 'a revoked link is refused');
ROLLBACK;
