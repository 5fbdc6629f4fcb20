-- 170_ledger_repros: the sequences of issue 26 that gave a wrong amount because each money rule
-- recomputed "what was sold, for which time, at what net price" from scalars of the subscription,
-- replayed through the SQL API alone. Each failed on the engine before the service ledger
-- (billing.service_line, docs/money.md); the rule now in force is named in each block. Distinct
-- customers and increasing years, so one scenario's renewals never touch another's.
BEGIN;
SET LOCAL ROLE billing_owner;  -- on Citus, reads of shards in the writers' role (see 200_plans_customers)
SELECT plan(51);

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
    FOR c IN SELECT * FROM billing.claim_charges('ledger', 1000, interval '5 minutes', p_at) LOOP
        IF (SELECT i.subscription_id FROM billing.invoice i WHERE i.customer_id = c.customer_id AND i.id = c.invoice_id) = p_sub THEN
            PERFORM billing.record_payment_result(c.idempotency_key, p_outcome, 'ch_' || c.idempotency_key, 'card_declined', p_at);
            n := n + 1;
        END IF;
    END LOOP;
    RETURN n;
END
$$;
-- Declines invoice p_invoice at each of its retry times until dunning ends (or 6 tries).
CREATE FUNCTION pg_temp.decline_to_the_end(p_invoice bigint) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_inv billing.invoice;
BEGIN
    FOR n IN 1..6 LOOP
        SELECT * INTO v_inv FROM billing.invoice WHERE id = p_invoice;
        EXIT WHEN v_inv.status <> 'OPEN';
        PERFORM billing.record_payment_result(c.idempotency_key, 'DECLINED', NULL, 'insufficient_funds', v_inv.next_attempt_at)
           FROM billing.claim_charges('ledger', 1000, interval '5 minutes', v_inv.next_attempt_at) c
          WHERE c.invoice_id = p_invoice;
    END LOOP;
    RETURN (SELECT status FROM billing.invoice WHERE id = p_invoice);
END
$$;
-- (Ids read in PL/pgSQL, then passed: on Citus a one-shard query calling the API is sent to a worker.)
CREATE FUNCTION pg_temp.inv(p_key text) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    v_sub bigint := pg_temp.sid(p_key);
BEGIN
    RETURN (SELECT min(id) FROM billing.invoice WHERE subscription_id = v_sub);
END
$$;
CREATE FUNCTION pg_temp.refund_key(p_customer bigint) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    RETURN (SELECT idempotency_key FROM billing.refund WHERE customer_id = p_customer ORDER BY id DESC LIMIT 1);
END
$$;
CREATE FUNCTION pg_temp.balance(p_customer bigint) RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN
    RETURN (SELECT coalesce(sum(balance), 0)::bigint FROM billing.credit_balance WHERE customer_id = p_customer);
END
$$;

-- 1. A coupon outlives its plan. Rule: a coupon's plan restriction is checked on every line it
--    discounts, not only at redemption: after a change to another plan it discounts nothing.
SELECT billing.upsert_plan('L1_BASIC', 1000, 'USD', 'MONTH');
SELECT billing.upsert_plan('L1_ENT', 5000, 'USD', 'MONTH');
SELECT billing.upsert_coupon('L1_FREE', 100, NULL, NULL, 'forever', NULL, NULL, NULL, ARRAY['L1_BASIC']);
SELECT billing.create_subscription('l1', 20001, 'L1_BASIC', '2040-01-01 00:00Z', 0, 'L1_FREE');
SELECT billing.change_plan(pg_temp.sid('l1'), 'L1_ENT', '2040-01-16 00:00Z');
SELECT billing.create_due_invoices(500, '2040-02-01 00:00Z');
SELECT results_eq($$SELECT subtotal, discount_amount FROM billing.invoice
                     WHERE customer_id = 20001 AND kind = 'RENEWAL' AND period_start = '2040-02-01 00:00Z'$$,
                  $$VALUES (5000::bigint, 0::bigint)$$,
                  'ledger 1: a coupon restricted to BASIC does not discount the ENTERPRISE renewal');
SELECT results_eq($$SELECT subtotal FROM billing.invoice WHERE customer_id = 20001 AND kind = 'PRORATION'$$,
                  $$VALUES (2580::bigint)$$,
                  'ledger 1: nor the ENTERPRISE part of the month (16 of 31 days at 5000, the BASIC line cost 0)');

-- 2. Tax is never given back. Rule: what a period was paid counts its tax; a refund may give back
--    all of it, tax included, and its credit note reverses all of the tax.
SELECT billing.upsert_tax_rate('L2_VAT', 'XA', NULL, 'VAT 20%', 2000, false);
SELECT billing.upsert_customer(20002);
SELECT billing.set_customer_details(20002, 'L2 Ltd', 'l2@example.org', '1 Road', 'Town', '1000', NULL, 'XA', NULL);
SELECT billing.upsert_plan('L2_P', 1000, 'EUR', 'MONTH');
SELECT billing.create_subscription('l2', 20002, 'L2_P', '2041-01-01 00:00Z');
SELECT pg_temp.settle(pg_temp.sid('l2'), 'SUCCEEDED', '2041-01-01 00:00Z');
SELECT results_eq($$SELECT subtotal, tax_amount, amount, status FROM billing.invoice WHERE customer_id = 20002$$,
                  $$VALUES (1000::bigint, 200::bigint, 1200::bigint, 'PAID')$$, 'ledger 2: 1000 + 20% VAT paid 1200');
SELECT lives_ok($$SELECT billing.refund_invoice(pg_temp.inv('l2'), 1200, 'l2-r', '2041-01-02 00:00Z')$$,
                'ledger 2: the whole 1200 is refundable, tax included');
SELECT billing.record_refund_result(pg_temp.refund_key(20002), 'SUCCEEDED', 're_l2', NULL, '2041-01-03 00:00Z');
SELECT results_eq($$SELECT n.total, n.tax_amount FROM billing.credit_note n WHERE n.customer_id = 20002 AND n.reason = 'REFUND'$$,
                  $$VALUES (1200::bigint, 200::bigint)$$, 'ledger 2: and its credit note reverses all of the tax');

-- 6. A downgrade costs money under a coupon. Rule: the change reverses the unused part of the
--    line sold (at its own net: 50% off) and sells the rest on the new terms (50% off too).
SELECT billing.upsert_plan('L6_A', 2000, 'USD', 'MONTH');
SELECT billing.upsert_plan('L6_B', 1500, 'USD', 'MONTH');
SELECT billing.upsert_coupon('L6_HALF', 50, NULL, NULL, 'forever');
SELECT billing.create_subscription('l6', 20006, 'L6_A', '2043-01-01 00:00Z', 0, 'L6_HALF');
SELECT pg_temp.settle(pg_temp.sid('l6'), 'SUCCEEDED', '2043-01-01 00:00Z');
SELECT billing.change_plan(pg_temp.sid('l6'), 'L6_B', '2043-01-16 00:00Z');  -- 16 of 31 days left
SELECT is_empty($$SELECT 1 FROM billing.invoice WHERE customer_id = 20006 AND kind = 'PRORATION'$$,
                'ledger 6: downgrading under a coupon bills nothing (was 258)');
-- -floor(1000 * 16/31) + (floor(1500 * 16/31) - floor(774 * 50%)) = -516 + 387 = -129
SELECT results_eq($$SELECT pg_temp.balance(20006)$$, $$VALUES (129::bigint)$$,
                  'ledger 6: it credits the unused 516 less the 387 of the rest on the new plan after 50% off');
SELECT results_eq($$SELECT kind, net FROM billing.service_line
                     WHERE customer_id = 20006 AND created_at = '2043-01-16 00:00Z' ORDER BY kind, net$$,
                  $$VALUES ('CHARGE', 387::bigint), ('REVERSAL', -516::bigint)$$,
                  'ledger 6: as two lines: the unused part of January on A reversed, the rest sold on B');

-- 7. Removing one seat frees the others. Rule: the same: the 10-seat line is reversed from the
--    change at its own 90%-off net, the 9 seats are sold for the rest at 90% off.
SELECT billing.upsert_plan('L7_S', 1000, 'USD', 'MONTH');
SELECT billing.upsert_coupon('L7_90', 90, NULL, NULL, 'forever');
SELECT billing.create_subscription('l7', 20007, 'L7_S', '2044-04-01 00:00Z', 0, 'L7_90', 10);
SELECT pg_temp.settle(pg_temp.sid('l7'), 'SUCCEEDED', '2044-04-01 00:00Z');
SELECT billing.set_quantity(pg_temp.sid('l7'), 9, '2044-04-16 00:00Z');  -- 15 of 30 days left
SELECT results_eq($$SELECT pg_temp.balance(20007)$$, $$VALUES (50::bigint)$$,
                  'ledger 7: removing 1 of 10 seats at 90% off credits 50 (was 500)');
SELECT billing.create_due_invoices(500, '2044-05-01 00:00Z');
SELECT results_eq($$SELECT subtotal, discount_amount, quantity FROM billing.invoice
                     WHERE customer_id = 20007 AND kind = 'RENEWAL'$$,
                  $$VALUES (900::bigint, 8100::bigint, 9)$$, 'ledger 7: and May bills the 9 seats at 90% off');

-- 8. "3 months" of discount becomes 3 years. Rule: a repeating coupon lasts months of service
--    from its first discounted period, whatever the interval: a line is discounted for its share
--    of service inside them.
SELECT billing.upsert_plan('L8_M', 1000, 'USD', 'MONTH');
SELECT billing.upsert_plan('L8_Y', 12000, 'USD', 'YEAR');
SELECT billing.upsert_coupon('L8_3M', 50, NULL, NULL, 'repeating', 3);
SELECT billing.create_subscription('l8', 20008, 'L8_M', '2045-01-01 00:00Z', 0, 'L8_3M');
SELECT pg_temp.settle(pg_temp.sid('l8'), 'SUCCEEDED', '2045-01-01 00:00Z');
SELECT billing.change_plan(pg_temp.sid('l8'), 'L8_Y', '2045-01-16 00:00Z');
-- The year [16 Jan 2045, 16 Jan 2046) has 75 of its 365 days before 1 April: floor(6000 * 75 / 365).
SELECT results_eq($$SELECT discount_amount FROM billing.invoice WHERE customer_id = 20008 AND kind = 'PLAN_CHANGE'$$,
                  $$VALUES (1232::bigint)$$,
                  'ledger 8: the year is discounted for its 75 days inside the 3 months, not in full');
SELECT billing.create_due_invoices(500, '2046-01-16 00:00Z');
SELECT results_eq($$SELECT discount_amount FROM billing.invoice WHERE customer_id = 20008 AND kind = 'RENEWAL'$$,
                  $$VALUES (0::bigint)$$, 'ledger 8: and the next year not at all');
SELECT results_eq($$SELECT coupon_code FROM billing.subscription WHERE customer_id = 20008$$,
                  $$VALUES (NULL::text)$$, 'ledger 8: the coupon has ended');

-- 11. Credit waits on an unrelated invoice. Rule: change credit waits only on the unpaid invoices
--     that bill the period it comes from.
SELECT billing.upsert_plan('L11_A', 3100, 'USD', 'MONTH');
SELECT billing.upsert_plan('L11_B', 1000, 'USD', 'MONTH');
SELECT billing.create_subscription('l11', 20011, 'L11_B', '2046-01-01 00:00Z');
SELECT pg_temp.settle(pg_temp.sid('l11'), 'SUCCEEDED', '2046-01-01 00:00Z');
SELECT billing.change_plan(pg_temp.sid('l11'), 'L11_A', '2046-01-17 00:00Z');
SELECT pg_temp.settle(pg_temp.sid('l11'), 'DECLINED', '2046-01-17 00:00Z');  -- January's upgrade in dunning
SELECT billing.create_due_invoices(500, '2046-02-01 00:00Z');
SELECT billing.record_payment_result(c.idempotency_key, 'SUCCEEDED', 'ch_l11_feb', NULL, '2046-02-01 00:00Z')
  FROM billing.claim_charges('ledger', 1000, interval '5 minutes', '2046-02-01 00:00Z') c
 WHERE c.invoice_id = (SELECT id FROM billing.invoice WHERE subscription_id = (SELECT pg_temp.sid('l11')) AND kind = 'RENEWAL');
SELECT billing.change_plan(pg_temp.sid('l11'), 'L11_B', '2046-02-15 00:00Z');  -- 14 of 28 days of a paid February
SELECT results_eq($$SELECT pg_temp.balance(20011)$$, $$VALUES (1050::bigint)$$,
                  'ledger 11: the credit of a paid February is on the balance at once (1550 - 500)');
SELECT is_empty($$SELECT 1 FROM billing.credit_pending WHERE customer_id = 20011 AND status = 'PENDING'$$,
                'ledger 11: it does not wait on January''s upgrade in dunning');

-- 13. A reverted plan change keeps its seats. Rule: an unpaid change is never voided by the next
--     one (it bills the time it served); a change that fails is reverted to the terms the lines
--     in force sell, seats and price together.
SELECT billing.upsert_plan('L13_A', 1000, 'USD', 'MONTH');
SELECT billing.upsert_plan('L13_B', 2000, 'USD', 'MONTH');
SELECT billing.create_subscription('l13', 20013, 'L13_A', '2047-04-01 00:00Z');
SELECT pg_temp.settle(pg_temp.sid('l13'), 'SUCCEEDED', '2047-04-01 00:00Z');
SELECT billing.set_quantity(pg_temp.sid('l13'), 10, '2047-04-16 00:00Z');  -- 9 seats added, unpaid
SELECT billing.change_plan(pg_temp.sid('l13'), 'L13_B', '2047-04-16 01:00Z');
SELECT results_eq($$SELECT status FROM billing.invoice WHERE customer_id = 20013 AND kind = 'PRORATION' ORDER BY id$$,
                  $$VALUES ('OPEN'), ('OPEN')$$, 'ledger 13: the seats'' invoice is not voided by the plan change (it billed an hour)');
SELECT pg_temp.decline_to_the_end((SELECT max(id) FROM billing.invoice WHERE subscription_id = (SELECT pg_temp.sid('l13')) AND kind = 'PRORATION'));
SELECT results_eq($$SELECT p.code, s.quantity, s.period_price FROM billing.subscription s JOIN billing.plan p ON p.id = s.plan_id
                     WHERE s.customer_id = 20013$$,
                  $$VALUES ('L13_A', 10, 10000::bigint)$$,
                  'ledger 13: the failed change is reverted to 10 seats of A at the 10-seat price (was the 1-seat price)');
SELECT billing.set_quantity(pg_temp.sid('l13'), 1, '2047-04-20 00:00Z');
SELECT results_eq($$SELECT pg_temp.balance(20013)$$, $$VALUES (0::bigint)$$,
                  'ledger 13: removing the unpaid seats credits nothing now: the credit waits on the seats'' invoice');

-- Cancel now with p_proration (issue 26): none gives nothing back (the rule before); credit gives
-- the unused paid time to the balance; refund gives it back from the charge that paid it, tax
-- included, never what the period already gave back.
SELECT billing.upsert_plan('LC_P', 3000, 'USD', 'MONTH');
SELECT billing.create_subscription('lc-n', 20021, 'LC_P', '2048-04-01 00:00Z');
SELECT billing.create_subscription('lc-c', 20022, 'LC_P', '2048-04-01 00:00Z');
SELECT billing.create_subscription('lc-r', 20023, 'LC_P', '2048-04-01 00:00Z');
SELECT billing.record_payment_result(c.idempotency_key, 'SUCCEEDED', 'ch_' || c.idempotency_key, NULL, '2048-04-01 00:00Z')
  FROM billing.claim_charges('ledger', 1000, interval '5 minutes', '2048-04-01 00:00Z') c
 WHERE c.customer_id BETWEEN 20021 AND 20023;
SELECT throws_ok($$SELECT billing.cancel_subscription(pg_temp.sid('lc-n'), false, '2048-04-16 00:00Z', NULL, 'later')$$,
                 'BL422', NULL, 'cancel: an unknown p_proration is refused');
SELECT throws_ok($$SELECT billing.cancel_subscription(pg_temp.sid('lc-n'), true, '2048-04-16 00:00Z', NULL, 'credit')$$,
                 'BL422', NULL, 'cancel: at period end nothing is unused');
SELECT billing.cancel_subscription(pg_temp.sid('lc-n'), false, '2048-04-16 00:00Z');
SELECT billing.cancel_subscription(pg_temp.sid('lc-c'), false, '2048-04-16 00:00Z', NULL, 'credit');
SELECT billing.cancel_subscription(pg_temp.sid('lc-r'), false, '2048-04-16 00:00Z', NULL, 'refund');
SELECT results_eq($$SELECT pg_temp.balance(20021), pg_temp.balance(20022), pg_temp.balance(20023)$$,
                  $$VALUES (0::bigint, 1500::bigint, 0::bigint)$$,
                  'cancel: none keeps the 15 unused days, credit gives them to the balance (1500)');
SELECT results_eq($$SELECT amount, reason, status FROM billing.refund WHERE customer_id = 20023$$,
                  $$VALUES (1500::bigint, 'SUBSCRIPTION_CANCELED', 'REQUESTED')$$,
                  'cancel: refund gives the 1500 back from the charge that paid April');
SELECT results_eq($$SELECT kind, net FROM billing.service_line WHERE customer_id = 20023 ORDER BY id$$,
                  $$VALUES ('CHARGE', 3000::bigint), ('REVERSAL', -1500::bigint)$$,
                  'cancel: the unused half of April is reversed in the ledger');
SELECT throws_like($$SELECT billing.refund_invoice(pg_temp.inv('lc-r'), 1501, NULL, '2048-04-17 00:00Z')$$,
                   '%between 1 and 1500%', 'cancel: and the rest of April''s charge is all that is left to refund');

-- 3 (second half). Subscribe, use 8 days, cancel: the unpaid INITIAL invoice (never declined: it
--    waited for a payment method, or was not claimed yet) was voided whole, 8 days served for
--    nothing. Rule: unpaid is unpaid, whatever the reason: a cancellation bills the time served and
--    takes off only the rest, with an UNSERVED credit note (_bill_served, 19_ledger_cuts).
SELECT billing.upsert_plan('LU_P', 3000, 'USD', 'MONTH');
SELECT billing.upsert_customer(20031);
SELECT billing.create_subscription('lu', 20031, 'LU_P', '2049-04-01 00:00Z');
SELECT billing.cancel_subscription(pg_temp.sid('lu'), false, '2049-04-09 00:00Z');  -- 8 of 30 days served
SELECT results_eq($$SELECT status, unserved, amount - unserved FROM billing.invoice WHERE customer_id = 20031$$,
                  $$VALUES ('OPEN', 2200::bigint, 800::bigint)$$,
                  'ledger 3: cancelled after 8 of 30 days, the invoice still bills the 8 days (800), not voided');
SELECT results_eq($$SELECT reason, total FROM billing.credit_note WHERE customer_id = 20031$$,
                  $$VALUES ('UNSERVED', 2200::bigint)$$,
                  'ledger 3: the 22 days not served are taken off by an UNSERVED credit note');
-- (claimed into a temporary table first: on Citus a call in a query over a distributed table runs on its shards)
CREATE TEMP TABLE lu_claim AS SELECT * FROM billing.claim_charges('ledger', 1000, interval '5 minutes', '2049-04-09 00:00Z');
SELECT results_eq($$SELECT amount FROM lu_claim WHERE customer_id = 20031$$,
                  $$VALUES (800::bigint)$$, 'ledger 3: and the charge asks for the 800 served');
SELECT results_eq($$SELECT sum(net)::bigint FROM billing.service_line WHERE customer_id = 20031$$, $$VALUES (800::bigint)$$,
                  'ledger 3: the ledger sells the 8 days served');

-- 12. Cancelling one day into a month in dunning kept the whole month collectible (3100 for 1 of 28
--     days served). Rule: the same: the invoice in dunning bills the day served, the rest is taken off.
SELECT billing.upsert_plan('LD_P', 3100, 'USD', 'MONTH');
SELECT billing.upsert_customer(20032);
SELECT billing.create_subscription('ld', 20032, 'LD_P', '2050-01-01 00:00Z');
SELECT pg_temp.settle(pg_temp.sid('ld'), 'SUCCEEDED', '2050-01-01 00:00Z');
SELECT billing.create_due_invoices(500, '2050-02-01 00:00Z');
SELECT pg_temp.settle(pg_temp.sid('ld'), 'DECLINED', '2050-02-01 00:00Z');   -- February in dunning
SELECT billing.cancel_subscription(pg_temp.sid('ld'), false, '2050-02-02 00:00Z');  -- 1 of 28 days served
SELECT results_eq($$SELECT status, attempt_count, unserved, amount - unserved FROM billing.invoice
                     WHERE customer_id = 20032 AND kind = 'RENEWAL'$$,
                  $$VALUES ('OPEN', 1, 2989::bigint, 111::bigint)$$,
                  'ledger 12: one day into February in dunning, the invoice stays collectible for that day only (111)');
CREATE TEMP TABLE ld_claim AS SELECT * FROM billing.claim_charges('ledger', 1000, interval '5 minutes', '2050-03-01 00:00Z');
SELECT results_eq($$SELECT amount FROM ld_claim WHERE customer_id = 20032$$,
                  $$VALUES (111::bigint)$$, 'ledger 12: its next try charges 111');
SELECT results_eq($$SELECT sum(l.net)::bigint FROM billing.service_line l JOIN billing.invoice i
                      ON i.customer_id = l.customer_id AND i.id = l.invoice_id
                     WHERE l.customer_id = 20032 AND i.kind = 'RENEWAL'$$, $$VALUES (111::bigint)$$,
                  'ledger 12: the ledger sells the one day of February served');

-- 3/12 (the rest): a downgrade in an unpaid period, then a cancellation: the line the downgrade
--     sold (no invoice: its credit waited on the period's invoice) was not cut, so the invoice
--     billed its whole period less the credit: the downgraded rest of the month after the
--     cancellation was billed (500 of 3000 - 1000). Rule: unpaid is unpaid: the period's invoice
--     bills the time served at the terms in force for it; the rest of the downgrade's line is
--     taken off with the UNSERVED note (_bill_served).
SELECT billing.upsert_plan('LV_A', 3000, 'USD', 'MONTH');
SELECT billing.upsert_plan('LV_B', 1500, 'USD', 'MONTH');
SELECT billing.upsert_customer(20033);
SELECT billing.create_subscription('lv', 20033, 'LV_A', '2051-04-01 00:00Z');        -- INITIAL 3000, unpaid
SELECT billing.change_plan(pg_temp.sid('lv'), 'LV_B', '2051-04-11 00:00Z');         -- credit 2000 - 1000 pending
SELECT billing.cancel_subscription(pg_temp.sid('lv'), false, '2051-04-21 00:00Z');  -- 10 days A, 10 days B served
SELECT results_eq($$SELECT status, unserved, amount - unserved FROM billing.invoice WHERE customer_id = 20033$$,
                  $$VALUES ('OPEN', 500::bigint, 2500::bigint)$$,
                  'ledger 3/12: the downgraded days not served (10 of 30 at 1500) are taken off the unpaid invoice');
SELECT results_eq($$SELECT sum(amount)::bigint FROM billing.credit_pending WHERE customer_id = 20033 AND status = 'PENDING'$$,
                  $$VALUES (1000::bigint)$$, 'ledger 3/12: the downgrade''s credit still waits on it');
SELECT results_eq($$SELECT sum(l.net)::bigint FROM billing.service_line l
                     LEFT JOIN billing.invoice i ON i.customer_id = l.customer_id AND i.id = l.invoice_id
                    WHERE l.customer_id = 20033 AND (l.invoice_id IS NULL OR i.status IN ('PAID', 'OPEN', 'REVIEW'))$$,
                  $$VALUES (1500::bigint)$$,
                  'ledger 3/12: the ledger sells exactly the time served: 10 days at 3000 and 10 at 1500 (1500)');

-- 3/12 (a change's own invoice): an upgrade's unpaid invoice (PRORATION) at a cancellation was
--     voided whole when never declined (the upgraded days served were free) and kept whole in
--     dunning (the upgraded rest after the cancellation stayed collectible). Rule: unpaid is unpaid:
--     it bills the difference it made for the time served: its new line is reversed from the
--     cancellation, the line it had reversed is sold again on it from then (a reversal of a
--     reversal), and cut from that line's own invoice when that is unpaid too (_cut_unserved). A
--     later failure of the change's invoice takes its lines with it: the month it had reversed is
--     sold again as its own invoice bills it (ended where the cancellation ended it).
--     3000 -> 6000 a month on 11 April (20 of 30 days left: reversal -2000, new line 4000, invoice
--     2000), canceled on 21 April (10 upgraded days served: 10 x 100 more a day = 1000).
SELECT billing.upsert_plan('LW_A', 3000, 'USD', 'MONTH');
SELECT billing.upsert_plan('LW_B', 6000, 'USD', 'MONTH');
CREATE FUNCTION pg_temp.proration(p_customer bigint) RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN
    RETURN (SELECT id FROM billing.invoice WHERE customer_id = p_customer AND kind = 'PRORATION');
END
$$;
CREATE FUNCTION pg_temp.sold(p_customer bigint) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    v_l billing.service_line;
    v_n bigint := 0;
BEGIN
    FOR v_l IN SELECT * FROM billing.service_line WHERE customer_id = p_customer LOOP
        IF billing._line_in_force(v_l) THEN
            v_n := v_n + v_l.net;
        END IF;
    END LOOP;
    RETURN v_n;
END
$$;
-- never declined, the month paid
SELECT billing.create_subscription('lw', 20034, 'LW_A', '2052-04-01 00:00Z');
SELECT pg_temp.settle(pg_temp.sid('lw'), 'SUCCEEDED', '2052-04-01 00:00Z');
SELECT billing.change_plan(pg_temp.sid('lw'), 'LW_B', '2052-04-11 00:00Z');
SELECT billing.cancel_subscription(pg_temp.sid('lw'), false, '2052-04-21 00:00Z');
SELECT results_eq($$SELECT status, attempt_count, unserved, amount - unserved FROM billing.invoice WHERE customer_id = 20034 AND kind = 'PRORATION'$$,
                  $$VALUES ('OPEN', 0, 1000::bigint, 1000::bigint)$$,
                  'ledger 3/12 (a change''s invoice never declined): it bills the 10 upgraded days served (1000), not voided');
SELECT results_eq($$SELECT kind, net, span_start FROM billing.service_line WHERE customer_id = 20034 AND invoice_id = (SELECT id FROM billing.invoice WHERE customer_id = 20034 AND kind = 'PRORATION') ORDER BY id$$,
                  $$VALUES ('REVERSAL', -2000::bigint, '2052-04-11 00:00Z'::timestamptz), ('CHARGE', 4000::bigint, '2052-04-11 00:00Z'),
                           ('REVERSAL', -2000::bigint, '2052-04-21 00:00Z'), ('CHARGE', 1000::bigint, '2052-04-21 00:00Z')$$,
                  'ledger 3/12: its new line reversed from the cancellation, the month it had reversed sold again from then');
SELECT results_eq($$SELECT pg_temp.sold(20034)$$, $$VALUES (4000::bigint)$$,
                  'ledger 3/12: the ledger sells the paid month (none: paid time kept) and the 10 upgraded days');
-- never declined, the month unpaid too
SELECT billing.create_subscription('lx', 20035, 'LW_A', '2053-04-01 00:00Z');
SELECT billing.change_plan(pg_temp.sid('lx'), 'LW_B', '2053-04-11 00:00Z');
SELECT billing.cancel_subscription(pg_temp.sid('lx'), false, '2053-04-21 00:00Z');
SELECT results_eq($$SELECT kind, status, unserved, amount - unserved FROM billing.invoice WHERE customer_id = 20035 ORDER BY id$$,
                  $$VALUES ('INITIAL', 'OPEN', 1000::bigint, 2000::bigint), ('PRORATION', 'OPEN', 1000::bigint, 1000::bigint)$$,
                  'ledger 3/12 (the month unpaid too): the month bills its 20 days (2000), the change its 10 upgraded days (1000)');
SELECT results_eq($$SELECT pg_temp.sold(20035)$$, $$VALUES (3000::bigint)$$,
                  'ledger 3/12: the ledger sells exactly the time served: 10 days at 3000 and 10 at 6000');
-- in dunning, the month paid; then its dunning runs out
SELECT billing.create_subscription('ly', 20036, 'LW_A', '2054-04-01 00:00Z');
SELECT pg_temp.settle(pg_temp.sid('ly'), 'SUCCEEDED', '2054-04-01 00:00Z');
SELECT billing.change_plan(pg_temp.sid('ly'), 'LW_B', '2054-04-11 00:00Z');
SELECT pg_temp.settle(pg_temp.sid('ly'), 'DECLINED', '2054-04-11 00:00Z');
SELECT billing.cancel_subscription(pg_temp.sid('ly'), false, '2054-04-21 00:00Z');
SELECT results_eq($$SELECT status, attempt_count, unserved, amount - unserved FROM billing.invoice WHERE customer_id = 20036 AND kind = 'PRORATION'$$,
                  $$VALUES ('OPEN', 1, 1000::bigint, 1000::bigint)$$,
                  'ledger 3/12 (a change''s invoice in dunning): it stays collectible for the upgraded days served only (was 2000)');
CREATE TEMP TABLE ly_claim AS SELECT * FROM billing.claim_charges('ledger', 1000, interval '5 minutes', '2054-05-30 00:00Z');
SELECT results_eq($$SELECT amount FROM ly_claim WHERE customer_id = 20036$$,
                  $$VALUES (1000::bigint)$$, 'ledger 3/12: its next try charges 1000');
SELECT billing.record_payment_result(idempotency_key, 'DECLINED', NULL, 'insufficient_funds', '2054-05-30 00:00Z') FROM ly_claim WHERE customer_id = 20036;
SELECT is(pg_temp.decline_to_the_end(pg_temp.proration(20036)), 'FAILED', 'ledger 3/12: its dunning runs out');
SELECT results_eq($$SELECT pg_temp.sold(20036)$$, $$VALUES (3000::bigint)$$,
                  'ledger 3/12: its failure takes its lines (the cut and the re-sale too): the paid month is sold whole again');
-- in dunning, the month unpaid too; then the change's dunning runs out
SELECT billing.create_subscription('lz', 20037, 'LW_A', '2055-04-01 00:00Z');
SELECT billing.change_plan(pg_temp.sid('lz'), 'LW_B', '2055-04-11 00:00Z');
SELECT pg_temp.settle(pg_temp.sid('lz'), 'DECLINED', '2055-04-11 00:00Z');
SELECT billing.cancel_subscription(pg_temp.sid('lz'), false, '2055-04-21 00:00Z');
SELECT results_eq($$SELECT kind, attempt_count, unserved, amount - unserved FROM billing.invoice WHERE customer_id = 20037 ORDER BY id$$,
                  $$VALUES ('INITIAL', 1, 1000::bigint, 2000::bigint), ('PRORATION', 1, 1000::bigint, 1000::bigint)$$,
                  'ledger 3/12 (both in dunning): the month bills its 20 days, the change its 10 upgraded days');
SELECT is(pg_temp.decline_to_the_end(pg_temp.proration(20037)), 'FAILED', 'ledger 3/12: the change''s dunning runs out');
SELECT results_eq($$SELECT pg_temp.sold(20037)$$, $$VALUES (2000::bigint)$$,
                  'ledger 3/12: then the ledger sells the 20 days the month still bills (the upgrade written off)');
SELECT results_eq($$SELECT span_start, net FROM billing.service_line WHERE customer_id = 20037 AND kind = 'REVERSAL' AND invoice_id IS NULL$$,
                  $$VALUES ('2055-04-21 00:00Z'::timestamptz, 0::bigint)$$,
                  'ledger 3/12: and the month it had reversed, in force again, ends at the cancellation (_end_restored_lines)');

-- The ledger itself: every invoice's subtotal is the net of its lines, none sold twice.
SELECT is_empty($$SELECT i.id FROM billing.invoice i
                   LEFT JOIN (SELECT customer_id, invoice_id, sum(net) AS net FROM billing.service_line
                               WHERE customer_id BETWEEN 20001 AND 20040 GROUP BY 1, 2) l
                     ON l.customer_id = i.customer_id AND l.invoice_id = i.id
                   LEFT JOIN (SELECT customer_id, invoice_id, sum(subtotal) AS cut FROM billing.credit_note
                               WHERE customer_id BETWEEN 20001 AND 20040 AND reason = 'UNSERVED' GROUP BY 1, 2) n
                     ON n.customer_id = i.customer_id AND n.invoice_id = i.id
                  WHERE i.customer_id BETWEEN 20001 AND 20040 AND coalesce(l.net, 0) <> i.subtotal - coalesce(n.cut, 0)$$,
                'ledger: every invoice''s subtotal (less what a cancellation took off) is the net of its service lines');
SELECT is_empty($$SELECT l.reverses_id FROM billing.service_line l
                   LEFT JOIN billing.invoice i ON i.customer_id = l.customer_id AND i.id = l.invoice_id
                  WHERE l.customer_id BETWEEN 20001 AND 20040 AND l.kind = 'REVERSAL'
                    AND (i.id IS NULL OR i.status IN ('PAID', 'OPEN', 'REVIEW'))
                  GROUP BY l.customer_id, l.reverses_id HAVING count(*) > 1$$,
                'ledger: no line is reversed twice while in force');
SELECT is_empty($$SELECT r.id FROM billing.service_line r
                   JOIN billing.service_line o ON o.customer_id = r.customer_id AND o.id = r.reverses_id
                  WHERE r.customer_id BETWEEN 20001 AND 20040
                    AND (-r.net > o.net OR -r.tax > o.tax OR r.span_end <> o.span_end OR r.span_start < o.span_start)$$,
                'ledger: a reversal never gives back more than its line, nor time outside it');
SELECT cmp_ok((SELECT count(*) FROM billing.service_line WHERE customer_id BETWEEN 20001 AND 20023), '>=', 20::bigint,
              'ledger: the lines exist');

SELECT * FROM finish();
ROLLBACK;
