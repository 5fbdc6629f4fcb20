-- 004_money_repros: the ten ways an adversarial customer got money out of the engine (issue 10),
-- each replayed through the SQL API alone. Each assertion failed on the engine before the money
-- rules (docs/money.md); the rule that now holds is named in each block. The scenarios use
-- distinct customers and increasing years, so one scenario's claims never touch another's.
BEGIN;
SET LOCAL ROLE billing_owner;  -- on Citus, reads of shards in the writers' role (see 200_plans_customers)
SELECT plan(15);

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
    FOR c IN SELECT * FROM billing.claim_charges('repro', 1000, interval '5 minutes', p_at) LOOP
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
           FROM billing.claim_charges('repro', 1000, interval '5 minutes', v_inv.next_attempt_at) c
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

-- 1. Free credit loop. Rule: credit from a change waits until the invoices it depends on are
--    paid, and is reversed when they are voided.
SELECT billing.upsert_plan('R1_EXP', 10000, 'USD', 'MONTH');
SELECT billing.upsert_plan('R1_CHEAP', 1000, 'USD', 'MONTH');
SELECT billing.create_subscription('r1-a', 10001, 'R1_EXP', '2030-01-01 00:00Z');
SELECT billing.change_plan(pg_temp.sid('r1-a'), 'R1_CHEAP', '2030-01-01 00:00:01Z');
SELECT billing.cancel_subscription(pg_temp.sid('r1-a'), false, '2030-01-01 00:00:02Z');
SELECT billing.create_subscription('r1-b', 10001, 'R1_CHEAP', '2030-01-01 00:01Z');
SELECT results_eq($$SELECT status, credit_applied FROM billing.invoice WHERE subscription_id = (SELECT pg_temp.sid('r1-b'))$$,
                  $$VALUES ('OPEN', 0::bigint)$$,
                  'repro 1: a new subscription is not paid by credit from a never-paid, voided invoice');
SELECT is(pg_temp.balance(10001), 0::bigint, 'repro 1: no credit left to loop on');

-- 2. A change of billing interval. Rule: a new period starts at the change, at the new plan's
--    price, with the unused rest of the paid period credited against it.
SELECT billing.upsert_plan('R2_M', 1000, 'EUR', 'MONTH');
SELECT billing.upsert_plan('R2_Y', 12000, 'EUR', 'YEAR');
SELECT billing.create_subscription('r2-a', 10002, 'R2_M', '2031-04-01 00:00Z');
SELECT pg_temp.settle((SELECT pg_temp.sid('r2-a')), 'SUCCEEDED', '2031-04-01 00:00Z');
SELECT billing.change_plan(pg_temp.sid('r2-a'), 'R2_Y', '2031-04-16 00:00Z');
SELECT results_eq(
    $$SELECT subtotal, credit_applied, amount FROM billing.invoice
       WHERE subscription_id = (SELECT pg_temp.sid('r2-a')) AND created_at = '2031-04-16 00:00Z'$$,
    $$VALUES (12000::bigint, 500::bigint, 11500::bigint)$$,
    'repro 2: monthly to yearly on 16 April: the year at 12000 less the unused half of April (no 5500 proration)');
SELECT results_eq($$SELECT current_period_start, current_period_end FROM billing.subscription WHERE id = (SELECT pg_temp.sid('r2-a'))$$,
                  $$VALUES ('2031-04-16 00:00Z'::timestamptz, '2032-04-16 00:00Z'::timestamptz)$$,
                  'repro 2: the year paid for starts at the change');
SELECT billing.create_subscription('r2-b', 10003, 'R2_Y', '2031-01-01 00:00Z');
SELECT pg_temp.settle((SELECT pg_temp.sid('r2-b')), 'SUCCEEDED', '2031-01-01 00:00Z');
SELECT billing.change_plan(pg_temp.sid('r2-b'), 'R2_M', '2031-07-02 00:00Z');
SELECT is((SELECT current_period_end FROM billing.subscription WHERE id = (SELECT pg_temp.sid('r2-b'))), '2031-08-02 00:00Z'::timestamptz,
          'repro 2: yearly to monthly on 2 July: monthly billing from the change, not yearly service until 2032');
-- 183 of 365 days unused: floor(12000 * 183 / 365) = 6016; the first month (1000) is paid from it.
SELECT is(pg_temp.balance(10003), 5016::bigint, 'repro 2: credit = the unused part of the year paid for, less the first month');

-- 3. Proration at the price invoiced, not the plan's current price. Rule: the period is prorated
--    from subscription.period_price (what the period was invoiced at).
SELECT billing.upsert_plan('R3_GOLD', 3000, 'GBP', 'MONTH');
SELECT billing.upsert_plan('R3_SILVER', 1000, 'GBP', 'MONTH');
SELECT billing.create_subscription('r3', 10004, 'R3_GOLD', '2032-06-01 00:00Z');
SELECT pg_temp.settle((SELECT pg_temp.sid('r3')), 'SUCCEEDED', '2032-06-01 00:00Z');
SELECT billing.upsert_plan('R3_GOLD', 9000, 'GBP', 'MONTH');
SELECT billing.change_plan(pg_temp.sid('r3'), 'R3_SILVER', '2032-06-16 00:00Z');
SELECT is(pg_temp.balance(10004), 1000::bigint,
          'repro 3: half of June at 3000 -> 1000 is 1000 of credit (not 4000, more than the month cost)');

-- 4. Catch-up at today's terms. Rule: periods already due are billed at the terms in force when
--    each started (a plan change first renews what is overdue).
SELECT billing.upsert_plan('R4_PRO', 10000, 'USD', 'MONTH');
SELECT billing.upsert_plan('R4_BASIC', 1000, 'USD', 'MONTH');
SELECT billing.create_subscription('r4', 10005, 'R4_PRO', '2033-01-01 00:00Z');
SELECT billing.change_plan(pg_temp.sid('r4'), 'R4_BASIC', '2033-05-10 00:00Z');
SELECT count(billing.create_due_invoices(500, '2033-05-10 00:00Z')) FROM generate_series(1, 8);
SELECT is((SELECT array_agg(subtotal ORDER BY period_start) FROM billing.invoice
            WHERE subscription_id = (SELECT pg_temp.sid('r4')) AND kind = 'RENEWAL' AND period_start < '2033-05-01Z'),
          ARRAY[10000, 10000, 10000]::bigint[], 'repro 4: February, March and April are billed at PRO, the plan then');

-- 5. A failed upgrade. Rule: the upgrade is reverted (SubscriptionPlanReverted) and the plan paid
--    for is kept to the period's end.
SELECT billing.upsert_plan('R5_B', 1000, 'USD', 'MONTH');
SELECT billing.upsert_plan('R5_P', 3000, 'USD', 'MONTH');
SELECT billing.create_subscription('r5', 10006, 'R5_B', '2034-03-01 00:00Z');
SELECT pg_temp.settle((SELECT pg_temp.sid('r5')), 'SUCCEEDED', '2034-03-01 00:00Z');
SELECT billing.change_plan(pg_temp.sid('r5'), 'R5_P', '2034-03-16 00:00Z');
SELECT pg_temp.decline_to_the_end((SELECT id FROM billing.invoice WHERE subscription_id = (SELECT pg_temp.sid('r5')) AND kind = 'PRORATION'));
SELECT results_eq($$SELECT s.status, p.code FROM billing.subscription s JOIN billing.plan p ON p.id = s.plan_id
                     WHERE s.id = (SELECT pg_temp.sid('r5'))$$,
                  $$VALUES ('ACTIVE', 'R5_B')$$, 'repro 5: a paid subscription whose upgrade failed is not canceled: back on its plan');

-- 6. A FAILED invoice keeps the credit it consumed. Rule: it gives it back, as VOID does.
SELECT billing.upsert_plan('R6_B', 1000, 'USD', 'MONTH');
SELECT billing.upsert_plan('R6_P', 3000, 'USD', 'MONTH');
SELECT billing.create_subscription('r6-x', 10007, 'R6_P', '2035-01-01 00:00Z');
SELECT pg_temp.settle((SELECT pg_temp.sid('r6-x')), 'SUCCEEDED', '2035-01-01 00:00Z');
SELECT billing.change_plan(pg_temp.sid('r6-x'), 'R6_B', '2035-01-16 00:00Z');  -- 16 of 31 days: 1032 of credit
SELECT billing.create_subscription('r6-y', 10007, 'R6_P', '2035-01-20 00:00Z');  -- consumes it
SELECT pg_temp.decline_to_the_end((SELECT id FROM billing.invoice WHERE subscription_id = (SELECT pg_temp.sid('r6-y'))));
SELECT is(pg_temp.balance(10007), 1032::bigint, 'repro 6: the FAILED invoice gave back the credit it had consumed');

-- 7. Cancelling in dunning. Rule: an invoice in dunning bills a period already served: it stays
--    OPEN and collectible; written off (InvoiceWrittenOff) only when dunning is exhausted.
SELECT billing.upsert_plan('R7_D', 1000, 'USD', 'DAY');
SELECT billing.create_subscription('r7', 10008, 'R7_D', '2036-01-01 00:00Z');
SELECT pg_temp.settle((SELECT pg_temp.sid('r7')), 'DECLINED', '2036-01-01 00:00Z');
SELECT billing.create_due_invoices(500, '2036-01-02 00:00Z');
SELECT billing.cancel_subscription(pg_temp.sid('r7'), false, '2036-01-02 12:00Z');
SELECT is((SELECT status FROM billing.invoice WHERE subscription_id = (SELECT pg_temp.sid('r7')) AND kind = 'INITIAL'), 'OPEN',
          'repro 7: the served day in dunning is still owed after the cancellation');

-- 8. A late success on a VOID invoice whose credit was restored. Rule: a VOID invoice stays VOID
--    (RefundDue); credit granted = credit left + credit consumed by invoices still owed or paid.
SELECT billing.upsert_plan('R8_B', 1000, 'USD', 'MONTH');
SELECT billing.upsert_plan('R8_P', 3000, 'USD', 'MONTH');
SELECT billing.create_subscription('r8-x', 10009, 'R8_P', '2037-01-01 00:00Z');
SELECT pg_temp.settle((SELECT pg_temp.sid('r8-x')), 'SUCCEEDED', '2037-01-01 00:00Z');
SELECT billing.change_plan(pg_temp.sid('r8-x'), 'R8_B', '2037-01-16 00:00Z');
SELECT billing.create_subscription('r8-y', 10009, 'R8_P', '2037-01-20 00:00Z');
CREATE TEMP TABLE r8_claim AS
SELECT c.idempotency_key FROM billing.claim_charges('repro', 1000, interval '5 minutes', '2037-01-20 00:00Z') c
  JOIN billing.invoice i ON i.id = c.invoice_id WHERE i.subscription_id = (SELECT pg_temp.sid('r8-y'));
SELECT billing.cancel_subscription(pg_temp.sid('r8-y'), false, '2037-01-20 00:00Z');  -- none of it served: voided
SELECT billing.record_payment_result(idempotency_key, 'SUCCEEDED', 'ch_r8', NULL, '2037-01-20 00:01Z') FROM r8_claim;
-- (Reads of one customer's rows as query texts: on Citus a statement that reads one shard goes to its
-- worker whole, a pgTAP call in it included, where this transaction's plan is unknown.)
SELECT results_eq($$SELECT (SELECT sum(amount) FROM billing.credit_entry WHERE customer_id = 10009 AND reason = 'PRORATION')::bigint
                          - (SELECT coalesce(sum(credit_applied), 0) FROM billing.invoice
                              WHERE customer_id = 10009 AND status IN ('PAID', 'OPEN'))::bigint$$,
                  $$SELECT pg_temp.balance(10009)$$,
          'repro 8: the books balance: the restored credit is not also counted as consumed by a PAID invoice');

-- 9. A sub-second max_jitter. Rule: the CHECK accepts 0 or 1 s .. 1 day, what the function supports.
SELECT throws_ok($$UPDATE billing.dunning_step SET max_jitter = interval '500 milliseconds' WHERE failed_attempts = 1$$,
                 '23514', NULL, 'repro 9: a jitter under one second is refused');
SELECT billing.upsert_plan('R9', 1000, 'USD', 'MONTH');
SELECT billing.create_subscription('r9', 10010, 'R9', '2038-01-01 00:00Z');
SELECT lives_ok($$SELECT (SELECT pg_temp.settle((SELECT pg_temp.sid('r9')), 'DECLINED', '2038-01-01 00:00Z'))$$,
                'repro 9: so a decline is always scheduled (no division by zero)');

-- 10. change_plan racing a renewal. Rule: the decision is taken on the row as locked; a change
--     whose p_now precedes a period a renewal has just started applies from that period's start.
SELECT billing.upsert_plan('R10_B', 1000, 'USD', 'MONTH');
SELECT billing.upsert_plan('R10_P', 3000, 'USD', 'MONTH');
SELECT billing.create_subscription('r10', 10011, 'R10_B', '2039-01-01 00:00Z');
SELECT pg_temp.settle((SELECT pg_temp.sid('r10')), 'SUCCEEDED', '2039-01-01 00:00Z');
SELECT billing.create_due_invoices(500, '2039-02-01 00:00:05Z');  -- committed while the request waited for the lock
SELECT lives_ok($$SELECT billing.change_plan(pg_temp.sid('r10'), 'R10_P', '2039-01-31 23:59:59Z')$$,
                'repro 10: a change requested just before the renewal is not refused');

SELECT * FROM finish();
ROLLBACK;
