-- 005_money_rules: the rules of docs/money.md, one block each: terms snapshot and price history,
-- proration at the invoiced price and across intervals, credit tied to its source, the failed
-- upgrade, dunning after a cancellation, keys bounded by their lifetime (lookup, NOT_FOUND,
-- REVIEW), the key namespace, webhooks that disagree with their attempt, the jitter CHECK.
BEGIN;
SET LOCAL ROLE billing_owner;  -- on Citus, reads of shards in the writers' role (see 200_plans_customers)
SELECT plan(45);

CREATE FUNCTION pg_temp.sid(p_key text) RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN
    RETURN (SELECT subscription_id FROM billing.subscription_request WHERE idempotency_key = p_key);
END
$$;
CREATE FUNCTION pg_temp.settle(p_sub bigint, p_outcome text, p_at timestamptz) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    c record;
    n bigint := 0;
BEGIN
    FOR c IN SELECT * FROM billing.claim_charges('rules', 1000, interval '5 minutes', p_at) LOOP
        IF (SELECT i.subscription_id FROM billing.invoice i WHERE i.customer_id = c.customer_id AND i.id = c.invoice_id) = p_sub THEN
            PERFORM billing.record_payment_result(c.idempotency_key, p_outcome, 'ch_' || c.idempotency_key, 'card_declined', p_at);
            n := n + 1;
        END IF;
    END LOOP;
    RETURN n;
END
$$;
-- The key of the payment attempt (matching p_like) of subscription p_sub_key's invoice: read here, on the
-- coordinator, then passed to the API (on Citus a call whose argument reads a distributed table may be
-- sent to a worker whole).
CREATE FUNCTION pg_temp.attempt_key(p_sub_key text, p_like text DEFAULT '%') RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_sub     bigint := pg_temp.sid(p_sub_key);
    v_invoice bigint := (SELECT i.id FROM billing.invoice i WHERE i.subscription_id = v_sub);
BEGIN
    RETURN (SELECT a.idempotency_key FROM billing.payment_attempt a WHERE a.idempotency_key LIKE p_like AND a.invoice_id = v_invoice);
END
$$;
CREATE FUNCTION pg_temp.decline_to_the_end(p_invoice bigint) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_inv billing.invoice;
BEGIN
    FOR n IN 1..6 LOOP
        SELECT * INTO v_inv FROM billing.invoice WHERE id = p_invoice;
        EXIT WHEN v_inv.status <> 'OPEN';
        PERFORM billing.record_payment_result(c.idempotency_key, 'DECLINED', NULL, 'insufficient_funds', v_inv.next_attempt_at)
           FROM billing.claim_charges('rules', 1000, interval '5 minutes', v_inv.next_attempt_at) c
          WHERE c.invoice_id = p_invoice;
    END LOOP;
    RETURN (SELECT status FROM billing.invoice WHERE id = p_invoice);
END
$$;
CREATE FUNCTION pg_temp.balance(p_customer bigint) RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN
    RETURN (SELECT coalesce(sum(balance), 0)::bigint FROM billing.credit_balance WHERE customer_id = p_customer);
END
$$;
-- The books of every customer: balance = granted - consumed by invoices owed or paid.
CREATE FUNCTION pg_temp.books_balance() RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    RETURN (SELECT bool_and(coalesce(b.balance, 0) = coalesce(g.granted, 0) - coalesce(c.consumed, 0))
      FROM (SELECT customer_id, currency FROM billing.invoice UNION SELECT customer_id, currency FROM billing.credit_entry) k
      LEFT JOIN billing.credit_balance b USING (customer_id, currency)
      LEFT JOIN (SELECT customer_id, currency, sum(amount) AS granted FROM billing.credit_entry
                  WHERE reason = 'PRORATION' GROUP BY 1, 2) g USING (customer_id, currency)
      LEFT JOIN (SELECT customer_id, currency, sum(credit_applied) AS consumed FROM billing.invoice
                  WHERE status IN ('PAID', 'OPEN', 'REVIEW') GROUP BY 1, 2) c USING (customer_id, currency));
END
$$;
CREATE FUNCTION pg_temp.events(p_type text, p_aggregate bigint) RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN
    RETURN (SELECT count(*) FROM billing.outbox_event WHERE event_type = p_type AND aggregate_id = p_aggregate);
END
$$;

-- Terms snapshot and price history ---------------------------------------------------------------
SELECT billing.upsert_plan('M_A', 1000, 'USD', 'MONTH', 1, '2030-01-01Z');
SELECT billing.upsert_plan('M_B', 3000, 'USD', 'MONTH', 1, '2030-01-01Z');
SELECT billing.create_subscription('t-terms', 11001, 'M_A', '2030-01-10Z');
SELECT results_eq($$SELECT p.code, i.plan_price, i.billing_interval, i.interval_count FROM billing.invoice i
                     JOIN billing.plan p ON p.id = i.plan_id WHERE i.subscription_id = (SELECT pg_temp.sid('t-terms'))$$,
                  $$VALUES ('M_A', 1000::bigint, 'MONTH', 1)$$, 'an invoice records its terms: plan, price, interval');
SELECT billing.upsert_plan('M_A', 1500, 'USD', 'MONTH', 1, '2030-03-01Z');
SELECT throws_ok($$SELECT billing.upsert_plan('M_A', 1700, 'USD', 'MONTH', 1, '2030-02-01Z')$$, 'BL422', NULL,
                 'a price change cannot take effect before the last one');
SELECT count(billing.create_due_invoices(500, '2030-04-15Z')) FROM generate_series(1, 5);
SELECT is((SELECT array_agg(subtotal ORDER BY period_start) FROM billing.invoice
            WHERE subscription_id = (SELECT pg_temp.sid('t-terms')) AND kind = 'RENEWAL'),
          ARRAY[1000, 1500, 1500]::bigint[],
          'a late catch-up prices each period as when it started: Feb 10 at 1000, Mar 10 and Apr 10 at 1500');
SELECT is((SELECT period_price FROM billing.subscription WHERE id = (SELECT pg_temp.sid('t-terms'))), 1500::bigint,
          'the period being served is billed at its invoiced price');
SELECT billing.upsert_plan('M_A', 900, 'USD', 'MONTH', 1, '2030-04-20Z');
SELECT is((SELECT period_price FROM billing.subscription WHERE id = (SELECT pg_temp.sid('t-terms'))), 1500::bigint,
          'a price change leaves the current period alone (applies from the next one)');
SELECT is((SELECT count(*) FROM billing.plan_price WHERE plan_id = (SELECT id FROM billing.plan WHERE code = 'M_A')),
          3::bigint, 'every price the plan had is kept');

-- Proration at the invoiced price, and across intervals --------------------------------------------
SELECT billing.upsert_plan('D30_A', 1000, 'USD', 'DAY', 30, '2030-01-01Z');
SELECT billing.upsert_plan('D30_B', 3000, 'USD', 'DAY', 30, '2030-01-01Z');
SELECT billing.upsert_plan('Y_A', 12000, 'USD', 'YEAR', 1, '2030-01-01Z');
SELECT billing.create_subscription('t-pro', 11002, 'D30_A', '2030-06-01Z');
SELECT pg_temp.settle((SELECT pg_temp.sid('t-pro')), 'SUCCEEDED', '2030-06-01Z');
SELECT billing.change_plan(pg_temp.sid('t-pro'), 'D30_B', '2030-06-16Z');
SELECT results_eq($$SELECT subtotal, plan_price, from_price FROM billing.invoice
                     WHERE subscription_id = (SELECT pg_temp.sid('t-pro')) AND kind = 'PRORATION'$$,
                  $$VALUES (1000::bigint, 3000::bigint, 1000::bigint)$$,
                  'upgrade half way: (3000 - 1000) / 2, recording the terms it replaced');
SELECT pg_temp.settle((SELECT pg_temp.sid('t-pro')), 'SUCCEEDED', '2030-06-16Z');
SELECT billing.change_plan(pg_temp.sid('t-pro'), 'Y_A', '2030-06-21Z');
-- 10 of 30 days left at 3000 (the price the period is billed at now): 1000 credited against the year.
SELECT results_eq($$SELECT kind, period_start, period_end, subtotal, credit_applied, amount FROM billing.invoice
                     WHERE subscription_id = (SELECT pg_temp.sid('t-pro')) AND kind = 'PLAN_CHANGE'$$,
                  $$VALUES ('PLAN_CHANGE', '2030-06-21Z'::timestamptz, '2031-06-21Z'::timestamptz, 12000::bigint, 1000::bigint, 11000::bigint)$$,
                  'another interval: a new period from the change, the unused rest credited against it');

-- Credit tied to its source ---------------------------------------------------------------------
SELECT billing.create_subscription('t-cr', 11003, 'D30_B', '2030-07-01Z');
SELECT billing.change_plan(pg_temp.sid('t-cr'), 'D30_A', '2030-07-16Z');
SELECT results_eq($$SELECT amount, status FROM billing.credit_pending WHERE customer_id = 11003$$,
                  $$VALUES (1000::bigint, 'PENDING')$$, 'credit from an unpaid period waits (pending)');
SELECT is(pg_temp.balance(11003), 0::bigint, 'and is not spendable');
SELECT pg_temp.settle((SELECT pg_temp.sid('t-cr')), 'SUCCEEDED', '2030-07-16 01:00Z');
SELECT results_eq($$SELECT status FROM billing.credit_pending WHERE customer_id = 11003$$, $$VALUES ('RELEASED')$$,
                  'released when the period is paid');
SELECT is(pg_temp.balance(11003), 1000::bigint, 'and spendable then');
SELECT billing.create_subscription('t-cr2', 11004, 'D30_B', '2030-07-01Z');
SELECT billing.change_plan(pg_temp.sid('t-cr2'), 'D30_A', '2030-07-16Z');
SELECT pg_temp.decline_to_the_end((SELECT id FROM billing.invoice WHERE subscription_id = (SELECT pg_temp.sid('t-cr2'))));
SELECT results_eq($$SELECT status FROM billing.credit_pending WHERE customer_id = 11004$$, $$VALUES ('REVERSED')$$,
                  'reversed when the period fails');
SELECT is(pg_temp.balance(11004), 0::bigint, 'nothing from nothing');
SELECT ok(pg_temp.books_balance(), 'the books balance for every customer');

-- An unpaid upgrade bills the time it served: the next change reverses only its unused part -----
-- (issue 26, "unpaid is unpaid": it was voided whole before, the upgraded days free)
SELECT billing.create_subscription('t-sup', 11005, 'D30_A', '2030-08-01Z');
SELECT pg_temp.settle((SELECT pg_temp.sid('t-sup')), 'SUCCEEDED', '2030-08-01Z');
SELECT billing.change_plan(pg_temp.sid('t-sup'), 'D30_B', '2030-08-16Z');
SELECT billing.change_plan(pg_temp.sid('t-sup'), 'D30_A', '2030-08-21Z');
SELECT results_eq($$SELECT status FROM billing.invoice WHERE subscription_id = (SELECT pg_temp.sid('t-sup')) AND kind = 'PRORATION'$$,
                  $$VALUES ('OPEN')$$, 'the unpaid upgrade is not voided: it bills the five days served');
SELECT is(pg_temp.balance(11005), 0::bigint, 'and the downgrade back credits nothing that was not paid');
SELECT results_eq($$SELECT status FROM billing.credit_pending WHERE customer_id = 11005$$, $$VALUES ('PENDING')$$,
                  'its credit for the unused upgraded days waits on the upgrade''s invoice');

-- A failed upgrade is reverted --------------------------------------------------------------------
SELECT billing.create_subscription('t-rev', 11006, 'D30_A', '2030-09-01Z');
SELECT pg_temp.settle((SELECT pg_temp.sid('t-rev')), 'SUCCEEDED', '2030-09-01Z');
SELECT billing.change_plan(pg_temp.sid('t-rev'), 'D30_B', '2030-09-02Z');
SELECT is(pg_temp.decline_to_the_end((SELECT id FROM billing.invoice WHERE subscription_id = (SELECT pg_temp.sid('t-rev')) AND kind = 'PRORATION')),
          'FAILED', 'the upgrade charge failed');
SELECT results_eq($$SELECT s.status, p.code, s.period_price FROM billing.subscription s JOIN billing.plan p ON p.id = s.plan_id
                     WHERE s.id = (SELECT pg_temp.sid('t-rev'))$$,
                  $$VALUES ('ACTIVE', 'D30_A', 1000::bigint)$$, 'back on the plan paid for, ACTIVE');
SELECT is(pg_temp.events('SubscriptionPlanReverted', (SELECT pg_temp.sid('t-rev'))), 1::bigint, 'SubscriptionPlanReverted written');
SELECT billing.create_due_invoices(500, '2030-10-01Z');
SELECT is((SELECT subtotal FROM billing.invoice WHERE subscription_id = (SELECT pg_temp.sid('t-rev')) AND kind = 'RENEWAL'),
          1000::bigint, 'the next period is billed at the plan kept');

-- Cancel in dunning: the served period stays owed -------------------------------------------------
SELECT billing.create_subscription('t-dun', 11007, 'D30_A', '2030-11-01Z');
SELECT pg_temp.settle((SELECT pg_temp.sid('t-dun')), 'DECLINED', '2030-11-01Z');
SELECT billing.cancel_subscription(pg_temp.sid('t-dun'), false, '2030-11-01 12:00Z');
SELECT results_eq($$SELECT i.status, s.status FROM billing.invoice i JOIN billing.subscription s ON s.customer_id = i.customer_id AND s.id = i.subscription_id
                     WHERE i.subscription_id = (SELECT pg_temp.sid('t-dun'))$$,
                  $$VALUES ('OPEN', 'CANCELED')$$, 'canceled in dunning: the invoice stays OPEN');
SELECT is(pg_temp.decline_to_the_end((SELECT id FROM billing.invoice WHERE subscription_id = (SELECT pg_temp.sid('t-dun')))),
          'FAILED', 'dunning goes on to its end');
SELECT is(pg_temp.events('InvoiceWrittenOff', (SELECT id FROM billing.invoice WHERE subscription_id = (SELECT pg_temp.sid('t-dun')))),
          1::bigint, 'and the write-off is explicit (InvoiceWrittenOff)');
SELECT billing.create_subscription('t-dun2', 11008, 'D30_A', '2030-11-01Z');
SELECT pg_temp.settle((SELECT pg_temp.sid('t-dun2')), 'DECLINED', '2030-11-01Z');
SELECT billing.cancel_subscription(pg_temp.sid('t-dun2'), false, '2030-11-01 12:00Z');
SELECT pg_temp.settle((SELECT pg_temp.sid('t-dun2')), 'SUCCEEDED', '2030-11-03Z');
SELECT results_eq($$SELECT status, (SELECT count(*) FROM billing.outbox_event
                              WHERE customer_id = i.customer_id AND event_type = 'RefundDue' AND aggregate_id = i.id)
                      FROM billing.invoice i WHERE subscription_id = (SELECT pg_temp.sid('t-dun2'))$$,
                  $$VALUES ('PAID', 0::bigint)$$, 'collected later: PAID, and nothing to refund (it was owed)');

-- Keys: namespace, lifetime, lookup, NOT_FOUND, REVIEW ---------------------------------------------
SELECT billing.create_subscription('t-key', 11009, 'D30_A', '2031-01-01Z');
SELECT ok((SELECT bool_and(idempotency_key = (SELECT key_namespace FROM billing.installation) || '-inv-' || invoice_id || '-try-0')
             FROM billing.claim_charges('rules', 10, interval '5 minutes', '2031-01-01Z')),
          'keys are <namespace>-inv-<id>-try-<n>');
CREATE TEMP TABLE old_ns AS SELECT key_namespace FROM billing.installation;
SELECT isnt(billing.new_key_namespace(), (SELECT key_namespace FROM old_ns), 'new_key_namespace draws another namespace');
SELECT billing.record_payment_result(k, 'UNKNOWN', NULL, 'timeout', '2031-01-01 00:01Z')
  FROM unnest((SELECT array_agg(idempotency_key) FROM billing.payment_attempt WHERE invoice_id = (SELECT id FROM billing.invoice WHERE subscription_id = (SELECT pg_temp.sid('t-key'))))) k;
SELECT results_eq($$SELECT idempotency_key LIKE (SELECT key_namespace FROM old_ns) || '-%', lookup
                      FROM billing.claim_charges('rules', 10, interval '5 minutes', '2031-01-01 00:16Z')
                     WHERE invoice_id = (SELECT id FROM billing.invoice WHERE subscription_id = (SELECT pg_temp.sid('t-key')))$$,
                  $$VALUES (true, false)$$, 'a re-claim keeps its key (old namespace) and sends it again while young');
SELECT throws_ok($$SELECT * FROM billing.claim_charges('rules', 10, interval '23 hours', '2031-01-01Z')$$, 'BL422', NULL,
                 'a lease as long as the key lifetime is refused');
SELECT is((SELECT next_attempt_at FROM billing.record_payment_result(
             pg_temp.attempt_key('t-key'),
             'UNKNOWN', NULL, 'timeout', '2031-01-01 21:50Z')),
          '2031-01-01 22:00Z'::timestamptz, 'near the end, an UNKNOWN retries at the start of the lookup margin, not 15 min later');
SELECT results_eq($$SELECT lookup FROM billing.claim_charges('rules', 10, interval '5 minutes', '2031-01-01 22:00Z')
                     WHERE invoice_id = (SELECT id FROM billing.invoice WHERE subscription_id = (SELECT pg_temp.sid('t-key')))$$,
                  $$VALUES (true)$$, 'in the lookup margin the claim says: ask the gateway, do not resend');
SELECT results_eq($$SELECT status, try_count, next_attempt_at FROM billing.record_payment_result(
                      pg_temp.attempt_key('t-key'),
                      'NOT_FOUND', NULL, 'no charge', '2031-01-01 22:01Z')$$,
                  $$VALUES ('OPEN', 1, '2031-01-01 22:01Z'::timestamptz)$$, 'NOT_FOUND: a new key, at once');
SELECT results_eq($$SELECT idempotency_key FROM billing.claim_charges('rules', 10, interval '5 minutes', '2031-01-01 22:01Z')
                     WHERE invoice_id = (SELECT id FROM billing.invoice WHERE subscription_id = (SELECT pg_temp.sid('t-key')))$$,
                  $$SELECT (SELECT key_namespace FROM billing.installation) || '-inv-' || (SELECT id FROM billing.invoice WHERE subscription_id = (SELECT pg_temp.sid('t-key'))) || '-try-1'$$,
                  'the new key is try-1 in the current namespace');
SELECT billing.record_payment_result(k, 'UNKNOWN', NULL, 'timeout', '2031-01-01 22:02Z')
  FROM unnest((SELECT array_agg(idempotency_key) FROM billing.payment_attempt WHERE idempotency_key LIKE '%-try-1' AND invoice_id = (SELECT id FROM billing.invoice WHERE subscription_id = (SELECT pg_temp.sid('t-key'))))) k;
SELECT is_empty($$SELECT * FROM billing.claim_charges('rules', 10, interval '5 minutes', '2031-01-02 21:03Z')
                   WHERE invoice_id = (SELECT id FROM billing.invoice WHERE subscription_id = (SELECT pg_temp.sid('t-key')))$$,
                'a key past its lifetime is never claimed again');
SELECT results_eq($$SELECT status, review_reason FROM billing.invoice WHERE subscription_id = (SELECT pg_temp.sid('t-key'))$$,
                  $$VALUES ('REVIEW', 'KEY_EXPIRED')$$, 'its invoice goes to REVIEW');
SELECT is(pg_temp.events('InvoicePaymentReview', (SELECT id FROM billing.invoice WHERE subscription_id = (SELECT pg_temp.sid('t-key')))),
          1::bigint, 'with InvoicePaymentReview');
SELECT is((billing.record_payment_result(
             pg_temp.attempt_key('t-key', '%-try-1'),
             'SUCCEEDED', 'ch_found', NULL, '2031-01-03Z')).status, 'PAID', 'a person settles it: the charge is found, PAID');

-- Webhooks that disagree with their attempt ---------------------------------------------------------
SELECT billing.create_subscription('t-wh', 11010, 'D30_A', '2031-02-01Z');
CREATE TEMP TABLE wh_key AS
SELECT idempotency_key FROM billing.claim_charges('rules', 10, interval '5 minutes', '2031-02-01Z') c
 WHERE c.invoice_id = (SELECT id FROM billing.invoice WHERE subscription_id = (SELECT pg_temp.sid('t-wh')));
SELECT is(billing.apply_gateway_webhook('evt-wh-1', (SELECT idempotency_key FROM wh_key), 'SUCCEEDED', 'ch_x',
                                        '{"amount": 1, "currency": "USD", "customerId": 11010}', '2031-02-01 00:01Z'),
          'REVIEW', 'a success for another amount is kept for review');
SELECT results_eq($$SELECT w.review_reason IS NOT NULL, i.status FROM billing.gateway_webhook w, billing.invoice i
                     WHERE w.event_id = 'evt-wh-1' AND w.customer_id = i.customer_id AND i.subscription_id = (SELECT pg_temp.sid('t-wh'))$$,
                  $$VALUES (true, 'OPEN')$$, 'stored with its reason, not applied');
SELECT is(pg_temp.events('PaymentReviewRequired', (SELECT id FROM billing.invoice WHERE subscription_id = (SELECT pg_temp.sid('t-wh')))),
          1::bigint, 'PaymentReviewRequired written');
SELECT is(billing.apply_gateway_webhook('evt-wh-2', (SELECT idempotency_key FROM wh_key), 'SUCCEEDED', 'ch_x',
                                        '{"amount": 1000, "currency": "USD", "customerId": 11010}', '2031-02-01 00:02Z'),
          'APPLIED', 'the matching success is applied');

-- The jitter CHECK ----------------------------------------------------------------------------------
SELECT lives_ok($$UPDATE billing.dunning_step SET max_jitter = interval '0' WHERE failed_attempts = 1$$, 'no jitter is fine');
SELECT lives_ok($$UPDATE billing.dunning_step SET max_jitter = interval '1 second' WHERE failed_attempts = 1$$, 'one second is fine');
SELECT throws_ok($$UPDATE billing.dunning_step SET max_jitter = interval '25 hours' WHERE failed_attempts = 1$$, '23514', NULL,
                 'more than a day is refused');

SELECT * FROM finish();
ROLLBACK;
