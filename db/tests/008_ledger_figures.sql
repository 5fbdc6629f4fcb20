-- 96_ledger_figures: issue 26, defects 4, 5, 9, 10 and 14 replayed through the SQL API alone.
-- Each assertion failed on the engine before the rule it names (docs/money.md, "One ledger").
-- The report functions sum every subscription of a currency: each scenario has its own currency
-- (made-up ISO-shaped codes) and its own years, so no scenario sees another's.
BEGIN;
SET LOCAL ROLE billing_owner;
SELECT plan(33);

CREATE FUNCTION pg_temp.sid(p_key text) RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN
    RETURN (SELECT subscription_id FROM billing.subscription_request WHERE idempotency_key = p_key);
END
$$;
-- Claims what is due at p_at and reports p_outcome for the invoices of subscription p_sub.
CREATE FUNCTION pg_temp.settle(p_sub bigint, p_outcome text, p_at timestamptz) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    c record;
    n bigint := 0;
BEGIN
    FOR c IN SELECT * FROM billing.claim_charges('ledger-figures', 1000, interval '5 minutes', p_at) LOOP
        IF (SELECT i.subscription_id FROM billing.invoice i WHERE i.customer_id = c.customer_id AND i.id = c.invoice_id) = p_sub THEN
            PERFORM billing.record_payment_result(c.idempotency_key, p_outcome, 'ch_' || c.idempotency_key, 'card_declined', p_at);
            n := n + 1;
        END IF;  -- another scenario's invoice stays leased: re-claimed with its key later
    END LOOP;
    RETURN n;
END
$$;
-- Claims what is due at p_at and reports p_outcome for invoice p_invoice only.
CREATE FUNCTION pg_temp.pay(p_invoice bigint, p_outcome text, p_at timestamptz) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    c record;
    n bigint := 0;
BEGIN
    FOR c IN SELECT * FROM billing.claim_charges('ledger-figures', 1000, interval '5 minutes', p_at) LOOP
        IF c.invoice_id = p_invoice THEN
            PERFORM billing.record_payment_result(c.idempotency_key, p_outcome, 'ch_' || c.idempotency_key, 'card_declined', p_at);
            n := n + 1;
        END IF;
    END LOOP;
    RETURN n;
END
$$;
-- Declines invoice p_invoice at each of its retry times until dunning ends (or 8 tries).
CREATE FUNCTION pg_temp.decline_to_the_end(p_invoice bigint) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_inv billing.invoice;
BEGIN
    FOR n IN 1..8 LOOP
        SELECT * INTO v_inv FROM billing.invoice WHERE id = p_invoice;
        EXIT WHEN v_inv.status <> 'OPEN';
        PERFORM billing.record_payment_result(c.idempotency_key, 'DECLINED', NULL, 'insufficient_funds', v_inv.next_attempt_at)
           FROM billing.claim_charges('ledger-figures', 1000, interval '5 minutes', v_inv.next_attempt_at) c
          WHERE c.invoice_id = p_invoice;
    END LOOP;
    RETURN (SELECT status FROM billing.invoice WHERE id = p_invoice);
END
$$;
CREATE FUNCTION pg_temp.mrr(p_currency text, p_at timestamptz) RETURNS numeric LANGUAGE plpgsql AS $$
BEGIN
    RETURN coalesce((SELECT m.mrr FROM billing.report_mrr(p_at) m WHERE m.currency = p_currency), 0);
END
$$;

-- =============================================================================================
-- 4. MRR: one figure for one history (billing.mrr_at). Net of discounts and seats, 0 while
--    paused, a downgrade counted from its instant as an upgrade is, a reverted upgrade never
--    counted; the console shows the report's figure.
-- =============================================================================================
-- 4a. A pause mid-period: MRR 0 from the pause (the unused rest was credited).
SELECT billing.upsert_plan('F4A', 3000, 'XMA', 'MONTH');
SELECT billing.create_subscription('f4a', 26401, 'F4A', '2041-03-01 00:00Z');
SELECT pg_temp.settle((SELECT pg_temp.sid('f4a')), 'SUCCEEDED', '2041-03-01 00:00Z');
SELECT billing.pause_subscription((SELECT pg_temp.sid('f4a')), NULL, '2041-03-11 00:00Z');
SELECT is(pg_temp.mrr('XMA', '2041-03-05 00:00Z'), 3000.00, 'issue 26 #4: MRR before the pause');
SELECT is(pg_temp.mrr('XMA', '2041-03-20 00:00Z'), 0::numeric, 'issue 26 #4: a paused subscription has no MRR');

-- 4b. A downgrade mid-period counts from its instant (as an upgrade does).
SELECT billing.upsert_plan('F4B_PRO', 3000, 'XMB', 'MONTH');
SELECT billing.upsert_plan('F4B_BASIC', 1000, 'XMB', 'MONTH');
SELECT billing.create_subscription('f4b', 26402, 'F4B_PRO', '2041-03-01 00:00Z');
SELECT pg_temp.settle((SELECT pg_temp.sid('f4b')), 'SUCCEEDED', '2041-03-01 00:00Z');
SELECT billing.change_plan((SELECT pg_temp.sid('f4b')), 'F4B_BASIC', '2041-03-16 00:00Z');
SELECT is(pg_temp.mrr('XMB', '2041-03-10 00:00Z'), 3000.00, 'issue 26 #4: MRR before the downgrade');
SELECT is(pg_temp.mrr('XMB', '2041-03-20 00:00Z'), 1000.00, 'issue 26 #4: a downgrade counts from its instant');

-- 4c. A failed upgrade, reverted: never counted at the upgraded price once reverted.
SELECT billing.upsert_plan('F4C_BASIC', 1000, 'XMC', 'MONTH');
SELECT billing.upsert_plan('F4C_PRO', 3000, 'XMC', 'MONTH');
SELECT billing.create_subscription('f4c', 26403, 'F4C_BASIC', '2041-03-01 00:00Z');
SELECT pg_temp.settle((SELECT pg_temp.sid('f4c')), 'SUCCEEDED', '2041-03-01 00:00Z');
SELECT billing.change_plan((SELECT pg_temp.sid('f4c')), 'F4C_PRO', '2041-03-05 00:00Z');
SELECT is(pg_temp.decline_to_the_end((SELECT id FROM billing.invoice WHERE subscription_id = (SELECT pg_temp.sid('f4c')) AND kind = 'PRORATION')),
          'FAILED', 'issue 26 #4: the upgrade''s invoice failed');
SELECT is((SELECT p.code FROM billing.subscription s JOIN billing.plan p ON p.id = s.plan_id WHERE s.id = (SELECT pg_temp.sid('f4c'))),
          'F4C_BASIC', 'issue 26 #4: the upgrade was reverted');
SELECT is(pg_temp.mrr('XMC', '2041-03-28 00:00Z'), 1000.00, 'issue 26 #4: a reverted upgrade is not MRR');

-- 4d. The console's MRR is the report's: coupons and seats, a week as 52/12 of a month.
SELECT billing.upsert_plan('F4D_M', 1000, 'XMD', 'MONTH');
SELECT billing.upsert_plan('F4D_W', 700, 'XMD', 'WEEK');
SELECT billing.upsert_coupon('F4D_HALF', 50, NULL, NULL, 'forever');
SELECT billing.create_subscription('f4d-m', 26404, 'F4D_M', '2041-03-01 00:00Z', 0, 'F4D_HALF', 3);
SELECT billing.create_subscription('f4d-w', 26405, 'F4D_W', '2041-03-01 00:00Z');
-- 3 seats x 1000 x 50% = 1500, plus a week of 700 x 52 / 12 = 3033.33.
SELECT is(pg_temp.mrr('XMD', '2041-03-05 00:00Z'), 4533.33, 'issue 26 #4: the report: seats, coupon, 52 weeks a year');
SELECT is((SELECT c.mrr FROM billing.console_mrr('2041-03-05 00:00Z', 3) c WHERE c.currency = 'XMD' AND c.at = '2041-03-05 00:00Z'),
          4533::bigint, 'issue 26 #4: the console''s MRR now is the report''s (rounded to the minor unit)');
SELECT is((SELECT c.mrr FROM billing.console_mrr('2041-03-05 00:00Z', 3) c WHERE c.currency = 'XMD' AND c.at = '2041-03-04 00:00Z'),
          4533::bigint, 'issue 26 #4: the console''s trend is the report''s figure at each point');

-- =============================================================================================
-- 5. Revenue: credit from a downgrade is recognized once. The credit reverses the unused part
--    of the period it came from; the invoice it pays is recognized in full.
-- =============================================================================================
SELECT billing.upsert_plan('F5_PRO', 3000, 'XRV', 'MONTH');
SELECT billing.upsert_plan('F5_BASIC', 1000, 'XRV', 'MONTH');
SELECT billing.create_subscription('f5', 26501, 'F5_PRO', '2042-06-01 00:00Z');
SELECT pg_temp.settle((SELECT pg_temp.sid('f5')), 'SUCCEEDED', '2042-06-01 00:00Z');
-- 15 of June's 30 days left: credit 1500 - 500 = 1000; July (1000) is paid by it.
SELECT billing.change_plan((SELECT pg_temp.sid('f5')), 'F5_BASIC', '2042-06-16 00:00Z');
SELECT billing.create_due_invoices(500, '2042-07-01 00:00Z');
SELECT is((SELECT amount FROM billing.invoice WHERE subscription_id = (SELECT pg_temp.sid('f5')) AND period_start = '2042-07-01 00:00Z'),
          0::bigint, 'issue 26 #5: July is paid by the downgrade''s credit');
SELECT is((SELECT sum(recognized) FROM billing.report_revenue('2042-06-01', '2042-07-31') WHERE currency = 'XRV'),
          3000::numeric, 'issue 26 #5: recognized over June and July = the cash kept (3000), the credit counted once');
SELECT is((SELECT recognized FROM billing.report_revenue('2042-06-01', '2042-06-30') WHERE currency = 'XRV'),
          2000::bigint, 'issue 26 #5: June: half at 3000 (1500) and half at 1000 (500)');
SELECT is((SELECT r.recognized FROM billing._revenue_recognized('2042-01-01 00:00Z', '2043-01-01 00:00Z') r WHERE r.currency = 'XRV'),
          3000::bigint, 'issue 26 #5: billing.recognized_revenue over the whole history = the cash kept');

-- =============================================================================================
-- 9. Dunning acts on its own period only. An old period's invoice whose dunning runs out is
--    written off; the paid current period (a year) is left alone.
-- =============================================================================================
SELECT billing.upsert_plan('F9_M', 1000, 'XDN', 'MONTH');
SELECT billing.upsert_plan('F9_Y', 12000, 'XDN', 'YEAR');
SELECT billing.create_subscription('f9', 26901, 'F9_M', '2043-01-01 00:00Z');
SELECT pg_temp.settle((SELECT pg_temp.sid('f9')), 'SUCCEEDED', '2043-01-01 00:00Z');
SELECT billing.create_due_invoices(500, '2043-02-01 00:00Z');
SELECT pg_temp.settle((SELECT pg_temp.sid('f9')), 'DECLINED', '2043-02-01 00:00Z');
SELECT billing.change_plan((SELECT pg_temp.sid('f9')), 'F9_Y', '2043-02-05 00:00Z');
SELECT is(pg_temp.pay((SELECT id FROM billing.invoice WHERE subscription_id = (SELECT pg_temp.sid('f9')) AND kind = 'PLAN_CHANGE'),
                      'SUCCEEDED', '2043-02-05 00:00Z'), 1::bigint, 'issue 26 #9: the year is paid');
SELECT is(pg_temp.decline_to_the_end((SELECT id FROM billing.invoice WHERE subscription_id = (SELECT pg_temp.sid('f9')) AND kind = 'RENEWAL')),
          'FAILED', 'issue 26 #9: the old month''s dunning runs out');
SELECT results_eq($$SELECT status, canceled_at FROM billing.subscription WHERE id = (SELECT pg_temp.sid('f9'))$$,
                  $$VALUES ('ACTIVE', NULL::timestamptz)$$,
                  'issue 26 #9: the paid year is left alone (not canceled), the subscription ACTIVE again');
SELECT ok(EXISTS (SELECT 1 FROM billing.outbox_event e
                   WHERE e.event_type = 'InvoiceWrittenOff'
                     AND e.aggregate_id = (SELECT id FROM billing.invoice WHERE subscription_id = (SELECT pg_temp.sid('f9')) AND kind = 'RENEWAL')),
          'issue 26 #9: the old period''s invoice is written off');

-- =============================================================================================
-- 10. A plan that subscriptions are scheduled to move to (or may be reverted to) keeps its
--     currency and period.
-- =============================================================================================
SELECT billing.upsert_plan('F10_A', 1000, 'USD', 'MONTH');
SELECT billing.upsert_plan('F10_B', 2000, 'USD', 'MONTH');
SELECT billing.create_subscription('f10', 26101, 'F10_A', '2044-01-01 00:00Z');
SELECT billing.change_plan((SELECT pg_temp.sid('f10')), 'F10_B', '2044-01-10 00:00Z', NULL, 'period_end');
SELECT throws_ok($$SELECT billing.upsert_plan('F10_B', 2000, 'EUR', 'MONTH', 1, '2044-01-11 00:00Z')$$, 'BL422', NULL,
                 'issue 26 #10: a plan a subscription is scheduled to move to cannot change currency');
SELECT throws_ok($$SELECT billing.upsert_plan('F10_B', 2000, 'USD', 'YEAR', 1, '2044-01-11 00:00Z')$$, 'BL422', NULL,
                 'issue 26 #10: nor its period');
-- An upgrade not paid yet may be reverted to the plan it left: that plan keeps its currency too.
SELECT billing.upsert_plan('F10_C', 1000, 'USD', 'MONTH');
SELECT billing.upsert_plan('F10_D', 3000, 'USD', 'MONTH');
SELECT billing.create_subscription('f10-r', 26102, 'F10_C', '2044-01-01 00:00Z');
SELECT pg_temp.settle((SELECT pg_temp.sid('f10-r')), 'SUCCEEDED', '2044-01-01 00:00Z');
SELECT billing.change_plan((SELECT pg_temp.sid('f10-r')), 'F10_D', '2044-01-10 00:00Z');
SELECT throws_ok($$SELECT billing.upsert_plan('F10_C', 1000, 'EUR', 'MONTH', 1, '2044-01-11 00:00Z')$$, 'BL422', NULL,
                 'issue 26 #10: the plan an unpaid upgrade may revert to cannot change currency');

-- =============================================================================================
-- 14. The legal snapshot in one instant: bill-to, tax and lines together; numbered no later
--     than the first charge attempt.
-- =============================================================================================
SELECT billing.upsert_tax_rate('F14_FR_VAT', 'FR', NULL, 'TVA', 2000, false);
SELECT billing.upsert_plan('F14_P', 1000, 'XTX', 'MONTH');
SELECT billing.upsert_customer(26141);
SELECT billing.set_customer_details(26141, 'Client SARL', 'a@client.fr', '1 rue X', 'Paris', '75001', NULL, 'FR', NULL, 'TAXABLE');
SELECT billing.create_subscription('f14-a', 26141, 'F14_P', '2045-01-01 00:00Z');
SELECT is((SELECT tax_amount FROM billing.invoice WHERE subscription_id = (SELECT pg_temp.sid('f14-a'))), 200::bigint,
          'issue 26 #14: French VAT on the invoice at creation');
-- The customer moves to Germany, reverse charge, before the invoice is finalized.
SELECT billing.set_customer_details(26141, 'Kunde GmbH', 'a@kunde.de', 'Str. 1', 'Berlin', '10115', NULL, 'DE', 'DE123456789', 'REVERSE_CHARGE');
SELECT billing.finalize_invoice((SELECT id FROM billing.invoice WHERE subscription_id = (SELECT pg_temp.sid('f14-a'))), '2045-01-01 00:00:05Z');
SELECT results_eq(
    $$SELECT bill_to->>'taxStatus', tax_detail->>'treatment', tax_amount, amount
        FROM billing.invoice WHERE subscription_id = (SELECT pg_temp.sid('f14-a'))$$,
    $$VALUES ('REVERSE_CHARGE', 'REVERSE_CHARGE', 0::bigint, 1000::bigint)$$,
    'issue 26 #14: the bill-to and the tax are of one instant: reverse charge, no VAT, the amount recomputed');
SELECT is((SELECT count(*) FROM billing.invoice_line l JOIN billing.invoice i ON i.customer_id = l.customer_id AND i.id = l.invoice_id
            WHERE i.subscription_id = (SELECT pg_temp.sid('f14-a')) AND l.kind = 'TAX' AND l.amount > 0), 0::bigint,
          'issue 26 #14: no VAT line on a reverse-charge document');
-- An invoice is numbered no later than its first charge attempt.
SELECT billing.create_subscription('f14-b', 26142, 'F14_P', '2045-02-01 00:00Z');
SELECT pg_temp.settle((SELECT pg_temp.sid('f14-b')), 'SUCCEEDED', '2045-02-01 00:00Z');
SELECT results_eq($$SELECT status, number IS NOT NULL FROM billing.invoice WHERE subscription_id = (SELECT pg_temp.sid('f14-b'))$$,
                  $$VALUES ('PAID', true)$$,
                  'issue 26 #14: a charged invoice has its number (finalized at the latest when claimed)');

-- The finalization job (finalize_invoices, set-based) takes them together too.
SELECT billing.upsert_customer(26143);
SELECT billing.set_customer_details(26143, 'Client 2', 'b@client.fr', '2 rue X', 'Lyon', '69001', NULL, 'FR', NULL, 'TAXABLE');
SELECT billing.create_subscription('f14-c', 26143, 'F14_P', '2045-03-01 00:00Z');
SELECT billing.set_customer_details(26143, 'Client 2', 'b@client.fr', '2 rue X', 'Lyon', '69001', NULL, 'FR', NULL, 'EXEMPT');
SELECT ok(billing.finalize_invoices(10000, '2045-03-01 00:00:05Z') >= 1, 'issue 26 #14: the job finalizes');
SELECT results_eq($$SELECT bill_to->>'taxStatus', tax_amount, amount, number IS NOT NULL
                      FROM billing.invoice WHERE subscription_id = (SELECT pg_temp.sid('f14-c'))$$,
                  $$VALUES ('EXEMPT', 0::bigint, 1000::bigint, true)$$,
                  'issue 26 #14: the job recomputes the tax of a customer who became exempt');
-- A claim finalizes first, with the tax of the customer now: the amount charged is the document's.
SELECT billing.upsert_customer(26144);
SELECT billing.set_customer_details(26144, 'Client 3', 'c@client.fr', '3 rue X', 'Nice', '06000', NULL, 'FR', NULL, 'TAXABLE');
SELECT billing.create_subscription('f14-d', 26144, 'F14_P', '2045-04-01 00:00Z');
SELECT billing.set_customer_details(26144, 'Kunde 3', 'c@kunde.de', 'Str. 3', 'Bonn', '53111', NULL, 'DE', 'DE999999999', 'REVERSE_CHARGE');
SELECT pg_temp.settle((SELECT pg_temp.sid('f14-d')), 'SUCCEEDED', '2045-04-01 00:00:01Z');
SELECT results_eq($$SELECT i.status, i.tax_amount, a.amount, i.bill_to->>'country'
                      FROM billing.invoice i JOIN billing.payment_attempt a ON a.customer_id = i.customer_id AND a.invoice_id = i.id
                     WHERE i.subscription_id = (SELECT pg_temp.sid('f14-d'))$$,
                  $$VALUES ('PAID', 0::bigint, 1000::bigint, 'DE')$$,
                  'issue 26 #14: claimed after the change: finalized with the new tax, charged the recomputed amount');
-- A lower total needs less of the credit it consumed: the rest goes back; covered, it is PAID.
SELECT billing.upsert_customer(26145);
SELECT billing.set_customer_details(26145, 'Client 4', 'd@client.fr', '4 rue X', 'Lille', '59000', NULL, 'FR', NULL, 'TAXABLE');
SELECT billing._grant_credit(26145, 'XTX', 1100, 'PRORATION', NULL, NULL, '2045-05-01 00:00Z');
SELECT billing.create_subscription('f14-e', 26145, 'F14_P', '2045-05-01 00:00Z');
SELECT billing.set_customer_details(26145, 'Client 4', 'd@client.fr', '4 rue X', 'Lille', '59000', NULL, 'FR', NULL, 'EXEMPT');
SELECT billing.finalize_invoice((SELECT id FROM billing.invoice WHERE subscription_id = (SELECT pg_temp.sid('f14-e'))), '2045-05-01 00:00:05Z');
SELECT results_eq($$SELECT status, credit_applied, amount FROM billing.invoice WHERE subscription_id = (SELECT pg_temp.sid('f14-e'))$$,
                  $$VALUES ('PAID', 1000::bigint, 0::bigint)$$,
                  'issue 26 #14: exempt now: the total 1000 is paid by credit (1100 applied before, at 1200 with VAT)');
SELECT results_eq($$SELECT balance FROM billing.credit_balance WHERE customer_id = 26145$$, $$VALUES (100::bigint)$$,
                  'issue 26 #14: the credit it no longer needs went back to the balance');

-- A claim never waits for the numbering counter: while another session holds it, the claim leaves
-- an unnumbered invoice for later (unclaimed, unnumbered), and takes it once the counter is free.
-- (Single PostgreSQL only: on Citus the second session's write of the series, a reference table,
-- waits for this test's own open transaction, which wrote reference tables too.)
SELECT billing._distributed('billing.customer') AS on_citus \gset
\if :on_citus
SELECT skip('a second session cannot write the series (a reference table) beside this open transaction on Citus', 3);
\else
RESET ROLE;  -- the session that holds the counter: a superuser connection (dblink)
CREATE EXTENSION IF NOT EXISTS dblink;
SELECT dblink_connect('f14', format('host=127.0.0.1 port=%s dbname=%s user=postgres', inet_server_port(), current_database()));
SET LOCAL ROLE billing_owner;
SELECT * FROM dblink('f14', 'SELECT billing._take_numbers(''2046'', 0)') AS t(n bigint);  -- the series exists (committed)
SELECT dblink_exec('f14', 'BEGIN');
SELECT * FROM dblink('f14', 'SELECT billing._take_numbers(''2046'', 0)') AS t(n bigint);  -- and is held by that session
SELECT billing.create_subscription('f14-f', 26146, 'F14_P', '2046-01-01 00:00Z');
SET LOCAL statement_timeout = '10s';
SELECT is((SELECT count(*) FROM billing.claim_charges('ledger-figures', 1000, interval '5 minutes', '2046-01-01 00:00:01Z')
            WHERE customer_id = 26146), 0::bigint,
          'issue 26 #14: counter held elsewhere: the claim does not wait and leaves the unnumbered invoice');
SELECT dblink_exec('f14', 'ROLLBACK');
SELECT dblink_disconnect('f14');
SELECT is((SELECT count(*) FROM billing.claim_charges('ledger-figures', 1000, interval '5 minutes', '2046-01-01 00:00:02Z')
            WHERE customer_id = 26146), 1::bigint, 'issue 26 #14: the counter free, the next claim takes it');
SELECT ok((SELECT number IS NOT NULL FROM billing.invoice WHERE subscription_id = (SELECT pg_temp.sid('f14-f'))),
          'issue 26 #14: numbered when claimed');
RESET statement_timeout;
\endif

SELECT * FROM finish();
ROLLBACK;
