-- 350_lifecycle: trials, coupons, pause and resume, uncancel, reactivation, seats, scheduled plan
-- changes and calendar billing (docs/lifecycle.md): each function's happy path, every error code,
-- time zones, month ends and DST.
BEGIN;
SET LOCAL ROLE billing_owner;  -- on Citus, reads of shards in the writers' role (see 200_plans_customers)
SELECT plan(173);

CREATE FUNCTION pg_temp.sid(p_key text) RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN
    RETURN (SELECT subscription_id FROM billing.subscription_request WHERE idempotency_key = p_key);
END
$$;
CREATE FUNCTION pg_temp.events(p_type text, p_sub bigint) RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN
    RETURN (SELECT count(*) FROM billing.outbox_event WHERE event_type = p_type AND payload ->> 'subject' = 'subscription/' || p_sub);
END
$$;
CREATE FUNCTION pg_temp.invoices(p_sub bigint) RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN
    RETURN (SELECT count(*) FROM billing.invoice WHERE subscription_id = p_sub);
END
$$;
-- Claims p_invoice (and leases whatever else is due) and reports p_outcome for it.
CREATE FUNCTION pg_temp.pay(p_invoice bigint, p_outcome text, p_now timestamptz) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    RETURN (SELECT (billing.record_payment_result(c.idempotency_key, p_outcome, 'ch_' || p_invoice, 'card_declined', p_now)).status
     FROM billing.claim_charges('t60', 1000, '5 minutes', p_now) c WHERE c.invoice_id = p_invoice);
END
$$;

SELECT billing.upsert_plan('L_M', 1000, 'USD', 'MONTH', 1, '2025-01-01Z');
SELECT billing.upsert_plan('L_M3', 3000, 'USD', 'MONTH', 1, '2025-01-01Z');
SELECT billing.upsert_plan('L_Y', 12000, 'USD', 'YEAR', 1, '2025-01-01Z');
SELECT billing.upsert_plan('L_E', 1000, 'EUR', 'MONTH', 1, '2025-01-01Z');
SELECT billing.upsert_plan('L_C1', 3100, 'USD', 'MONTH', 1, '2025-01-01Z', 1);
SELECT billing.upsert_plan('L_C31', 3100, 'USD', 'MONTH', 1, '2025-01-01Z', 31);
SELECT billing.upsert_customer(6001, 'UTC');
SELECT billing.upsert_customer(6002, 'America/New_York');
SELECT billing.upsert_customer(6003, 'Europe/Berlin');
SELECT billing.upsert_customer(6004, 'UTC');

-- =============================================================================================
-- Trials
-- =============================================================================================
SELECT billing.create_subscription('t60-trial', 6002, 'L_M', '2026-03-01 12:00Z', 14);
SELECT results_eq(
    $$SELECT status, current_period_start, current_period_end, trial_end, trial_notice_at, period_price, lifecycle_pending
        FROM billing.get_subscription(pg_temp.sid('t60-trial'))$$,
    $$VALUES ('TRIALING', '2026-03-01 12:00Z'::timestamptz, '2026-03-15 11:00Z'::timestamptz,
              '2026-03-15 11:00Z'::timestamptz, '2026-03-12 11:00Z'::timestamptz, 0::bigint, true)$$,
    'trial: TRIALING for 14 local days (07:00 EST -> 07:00 EDT across the DST change), notice 3 days before');
SELECT is(pg_temp.invoices((SELECT pg_temp.sid('t60-trial'))), 0::bigint, 'trial: no invoice');
SELECT billing.create_due_invoices(100, '2026-03-12 10:00Z');
SELECT is(pg_temp.events('SubscriptionTrialWillEnd', (SELECT pg_temp.sid('t60-trial'))), 0::bigint, 'no notice before its time');
SELECT billing.create_due_invoices(100, '2026-03-12 12:00Z');
SELECT billing.create_due_invoices(100, '2026-03-13 12:00Z');
SELECT is(pg_temp.events('SubscriptionTrialWillEnd', (SELECT pg_temp.sid('t60-trial'))), 1::bigint,
          'SubscriptionTrialWillEnd once, 3 days before the end');
SELECT is(pg_temp.invoices((SELECT pg_temp.sid('t60-trial'))), 0::bigint, 'still no invoice before the end');
SELECT billing.create_due_invoices(100, '2026-03-15 11:00Z');
SELECT results_eq(
    $$SELECT kind, status, period_start, period_end, subtotal FROM billing.invoice
       WHERE subscription_id = (SELECT pg_temp.sid('t60-trial'))$$,
    $$VALUES ('INITIAL', 'OPEN', '2026-03-15 11:00Z'::timestamptz, '2026-04-15 11:00Z'::timestamptz, 1000::bigint)$$,
    'the trial ends: first invoice for the period from the trial''s end');
SELECT results_eq(
    $$SELECT status, billing_anchor, current_period_end, period_price, lifecycle_pending
        FROM billing.get_subscription(pg_temp.sid('t60-trial'))$$,
    $$VALUES ('ACTIVE', '2026-03-15 11:00Z'::timestamptz, '2026-04-15 11:00Z'::timestamptz, 1000::bigint, false)$$,
    'ACTIVE, anchored at the trial''s end, back on the renewal statement');
SELECT is((SELECT payload::jsonb -> 'data' -> 'changes' -> 'status' FROM billing.outbox_event
            WHERE event_type = 'SubscriptionUpdated' AND payload ->> 'subject' = 'subscription/' || (SELECT pg_temp.sid('t60-trial'))),
          '{"before": "TRIALING", "after": "ACTIVE"}'::jsonb, 'SubscriptionUpdated TRIALING -> ACTIVE');
SELECT billing.create_due_invoices(100, '2026-04-15 11:00Z');
SELECT is((SELECT max(period_end) FROM billing.invoice WHERE subscription_id = (SELECT pg_temp.sid('t60-trial'))),
          '2026-05-15 11:00Z'::timestamptz, 'the next renewal follows the new anchor');

-- month end: a 30-day trial from 1 January ends on 31 January; the first period ends 28 February
SELECT billing.create_subscription('t60-trial-me', 6001, 'L_M', '2026-01-01Z', 30);
SELECT billing.create_due_invoices(100, '2026-01-31Z');
SELECT is((SELECT period_end FROM billing.invoice WHERE subscription_id = (SELECT pg_temp.sid('t60-trial-me'))),
          '2026-02-28Z'::timestamptz, 'month end: a trial ending on 31 January bills to 28 February');
-- cancelling in a trial costs nothing, now or at its end
SELECT billing.create_subscription('t60-trial-c1', 6001, 'L_M', '2026-01-01Z', 7);
SELECT is((billing.cancel_subscription(pg_temp.sid('t60-trial-c1'), false, '2026-01-03Z')).status, 'CANCELED',
          'a trial canceled now');
SELECT billing.create_subscription('t60-trial-c2', 6001, 'L_M', '2026-01-01Z', 7);
SELECT billing.cancel_subscription(pg_temp.sid('t60-trial-c2'), true, '2026-01-03Z');
SELECT billing.create_due_invoices(100, '2026-01-09Z');
SELECT results_eq(
    $$SELECT status, cancel_reason, (SELECT count(*) FROM billing.invoice i WHERE i.customer_id = s.customer_id AND i.subscription_id = s.id)
        FROM billing.subscription s WHERE id IN ((SELECT pg_temp.sid('t60-trial-c1')), (SELECT pg_temp.sid('t60-trial-c2'))) ORDER BY id$$,
    $$VALUES ('CANCELED', 'REQUESTED', 0::bigint), ('CANCELED', 'PERIOD_END', 0::bigint)$$,
    'cancelling during a trial (now or at its end) costs nothing: no invoice');
-- a plan change in a trial switches without proration
SELECT billing.create_subscription('t60-trial-cp', 6001, 'L_M', '2026-01-01Z', 7);
SELECT is((billing.change_plan(pg_temp.sid('t60-trial-cp'), 'L_M3', '2026-01-02Z')).plan_id,
          (SELECT id FROM billing.plan WHERE code = 'L_M3'), 'a plan change in a trial switches the plan');
SELECT is(pg_temp.invoices((SELECT pg_temp.sid('t60-trial-cp'))), 0::bigint, 'without any invoice');
SELECT billing.create_due_invoices(100, '2026-01-08Z');
SELECT is((SELECT subtotal FROM billing.invoice WHERE subscription_id = (SELECT pg_temp.sid('t60-trial-cp'))), 3000::bigint,
          'the trial ends on the new plan');
-- a trial ended but the renewal job has not run: a change first bills the first period at the plan
-- it started under (found by the money adversary)
SELECT billing.create_subscription('t60-trial-late', 6001, 'L_M', '2026-01-01Z', 3);
SELECT billing.change_plan(pg_temp.sid('t60-trial-late'), 'L_M3', '2026-01-05Z');
SELECT results_eq(
    $$SELECT kind, period_start, subtotal FROM billing.invoice WHERE subscription_id = (SELECT pg_temp.sid('t60-trial-late')) ORDER BY id$$,
    $$VALUES ('INITIAL', '2026-01-04Z'::timestamptz, 1000::bigint), ('PRORATION', '2026-01-05Z'::timestamptz, 1936::bigint)$$,
    'a change after the trial''s end: the first period billed at its plan, then the change prorated');
SELECT billing.create_subscription('t60-trial-late2', 6001, 'L_M', '2026-01-01Z', 3);
SELECT billing.cancel_subscription(pg_temp.sid('t60-trial-late2'), true, '2026-01-02Z');
SELECT throws_ok(format('SELECT billing.set_quantity(%s, 2, %L)', (SELECT pg_temp.sid('t60-trial-late2')), '2026-01-05Z'),
                 'BL422', NULL, 'it ended with its trial: BL422');
-- errors
SELECT throws_ok($$SELECT billing.create_subscription('t60-bad1', 6001, 'L_M', '2026-01-01Z', -1)$$, 'BL422', NULL,
                 'trial days below 0: BL422');
SELECT throws_ok($$SELECT billing.create_subscription('t60-bad2', 6001, 'L_M', '2026-01-01Z', 731)$$, 'BL422', NULL,
                 'trial days above 730: BL422');
SELECT throws_ok($$SELECT billing.create_subscription('t60-trial', 6002, 'L_M', '2026-03-01 12:00Z', 7)$$, 'BL409', NULL,
                 'the same key with other trial days: BL409');
SELECT is((billing.create_subscription('t60-trial', 6002, 'L_M', '2026-03-02Z', 14)).id, (SELECT pg_temp.sid('t60-trial')),
          'the same key and options: the same subscription');
-- set_trial_will_end_notice
SELECT is(billing.set_trial_will_end_notice('1 day'), interval '1 day', 'the notice is configurable');
SELECT billing.create_subscription('t60-trial-n', 6001, 'L_M', '2026-01-01Z', 10);
SELECT is((SELECT trial_notice_at FROM billing.subscription WHERE id = (SELECT pg_temp.sid('t60-trial-n'))),
          '2026-01-10Z'::timestamptz, 'and applies to trials started afterwards');
SELECT billing.set_trial_will_end_notice('3 days');
SELECT throws_ok($$SELECT billing.set_trial_will_end_notice('-1 day')$$, 'BL422', NULL, 'a negative notice: BL422');
SELECT throws_ok($$SELECT billing.set_trial_will_end_notice('31 days')$$, 'BL422', NULL, 'over 30 days: BL422');

-- =============================================================================================
-- Coupons
-- =============================================================================================
SELECT is((billing.upsert_coupon('L_THIRD', 33.33, NULL, NULL, 'repeating', 2)).duration_periods, 2,
          'upsert_coupon: a repeating percentage');
SELECT billing.upsert_coupon('L_BIG', NULL, 5000, 'USD', 'once');
SELECT billing.upsert_coupon('L_FOREVER', 10, NULL, NULL, 'forever', NULL, 2);
SELECT billing.upsert_coupon('L_OLD', 10, NULL, NULL, 'once', NULL, NULL, '2026-01-01Z');
SELECT billing.upsert_coupon('L_PRO_ONLY', 10, NULL, NULL, 'once', NULL, NULL, NULL, ARRAY['L_M3']);
SELECT billing.upsert_coupon('L_EURO', NULL, 100, 'EUR', 'once');
SELECT throws_ok($$SELECT billing.upsert_coupon('L_X', 10, 100, 'USD', 'once')$$, 'BL422', NULL, 'both a percentage and an amount: BL422');
SELECT throws_ok($$SELECT billing.upsert_coupon('L_X', NULL, NULL, NULL, 'once')$$, 'BL422', NULL, 'neither: BL422');
SELECT throws_ok($$SELECT billing.upsert_coupon('L_X', 0, NULL, NULL, 'once')$$, 'BL422', NULL, '0 percent: BL422');
SELECT throws_ok($$SELECT billing.upsert_coupon('L_X', 100.5, NULL, NULL, 'once')$$, 'BL422', NULL, 'over 100 percent: BL422');
SELECT throws_ok($$SELECT billing.upsert_coupon('L_X', 33.333, NULL, NULL, 'once')$$, 'BL422', NULL, 'three decimals: BL422');
SELECT throws_ok($$SELECT billing.upsert_coupon('L_X', NULL, 100, NULL, 'once')$$, 'BL422', NULL, 'an amount without currency: BL422');
SELECT throws_ok($$SELECT billing.upsert_coupon('L_X', NULL, -5, 'USD', 'once')$$, 'BL422', NULL, 'a negative amount: BL422');
SELECT throws_ok($$SELECT billing.upsert_coupon('L_X', 10, NULL, NULL, 'repeating')$$, 'BL422', NULL, 'repeating without periods: BL422');
SELECT throws_ok($$SELECT billing.upsert_coupon('L_X', 10, NULL, NULL, 'once', 3)$$, 'BL422', NULL, 'periods for once: BL422');
SELECT throws_ok($$SELECT billing.upsert_coupon('L_X', 10, NULL, NULL, 'twice')$$, 'BL422', NULL, 'an unknown duration: BL422');
SELECT throws_ok($$SELECT billing.upsert_coupon('bad code', 10, NULL, NULL, 'once')$$, 'BL422', NULL, 'a code with a space: BL422');
SELECT throws_ok($$SELECT billing.upsert_coupon('L_X', 10, NULL, NULL, 'once', NULL, 0)$$, 'BL422', NULL, 'max redemptions 0: BL422');
SELECT throws_ok($$SELECT billing.upsert_coupon('L_X', 10, NULL, NULL, 'once', NULL, NULL, NULL, ARRAY['NOPE'])$$, 'BL422', NULL,
                 'an unknown plan: BL422');
SELECT throws_ok($$SELECT billing.upsert_coupon('L_X', 10, NULL, NULL, 'once', NULL, NULL, NULL, ARRAY[]::text[])$$, 'BL422', NULL,
                 'an empty plan list: BL422');
SELECT throws_ok($$SELECT billing.upsert_coupon('L_X', NULL, 100, 'USD', 'once', NULL, NULL, NULL, ARRAY['L_E'])$$, 'BL422', NULL,
                 'an amount in USD for a EUR plan: BL422');

-- a percentage, repeating twice, rounded down; on the INITIAL invoice when given at signup
SELECT billing.create_subscription('t60-cp1', 6001, 'L_M', '2026-01-10Z', 0, 'L_THIRD');
SELECT billing.create_due_invoices(100, '2026-02-10Z');
SELECT billing.create_due_invoices(100, '2026-03-10Z');
SELECT results_eq(
    $$SELECT kind, subtotal, discount_amount, coupon_code FROM billing.invoice
       WHERE subscription_id = (SELECT pg_temp.sid('t60-cp1')) ORDER BY period_start$$,
    $$VALUES ('INITIAL', 667::bigint, 333::bigint, 'L_THIRD'), ('RENEWAL', 667::bigint, 333::bigint, 'L_THIRD'),
             ('RENEWAL', 1000::bigint, 0::bigint, NULL)$$,
    'repeating 2: two invoices get 33.33% off (333.3 rounded down to 333), the third none');
SELECT is((SELECT lifecycle_pending FROM billing.subscription WHERE id = (SELECT pg_temp.sid('t60-cp1'))), false,
          'a used-up coupon sends the subscription back to the renewal statement');
SELECT is((SELECT times_redeemed FROM billing.coupon WHERE code = 'L_THIRD'), 1, 'one redemption counted');
SELECT throws_ok($$SELECT billing.upsert_coupon('L_THIRD', 50, NULL, NULL, 'repeating', 2)$$, 'BL422', NULL,
                 'a redeemed coupon''s discount cannot change: BL422');
SELECT is((billing.upsert_coupon('L_THIRD', 33.33, NULL, NULL, 'repeating', 2, 10)).max_redemptions, 10,
          'its limits can');
SELECT throws_ok($$SELECT billing.upsert_coupon('L_THIRD', 33.33, NULL, NULL, 'repeating', 2, 0)$$, 'BL422', NULL,
                 'max redemptions below 1: BL422');

-- apply_coupon: from the next period invoice; an amount larger than the invoice takes it to zero
SELECT billing.create_subscription('t60-cp2', 6001, 'L_M', '2026-01-10Z');
SELECT is((billing.apply_coupon(pg_temp.sid('t60-cp2'), 'L_BIG', '2026-01-15Z')).lifecycle_pending, true,
          'apply_coupon marks the next renewal');
SELECT is(pg_temp.events('SubscriptionUpdated', (SELECT pg_temp.sid('t60-cp2'))), 1::bigint, 'and announces couponCode');
SELECT is((billing.apply_coupon(pg_temp.sid('t60-cp2'), 'L_BIG', '2026-01-16Z')).version,
          (SELECT version FROM billing.subscription WHERE id = (SELECT pg_temp.sid('t60-cp2'))), 'applying it again changes nothing');
SELECT is((SELECT times_redeemed FROM billing.coupon WHERE code = 'L_BIG'), 1, 'and counts nothing');
SELECT billing.create_due_invoices(100, '2026-02-10Z');
SELECT results_eq(
    $$SELECT kind, subtotal, discount_amount, amount, status FROM billing.invoice
       WHERE subscription_id = (SELECT pg_temp.sid('t60-cp2')) ORDER BY period_start$$,
    $$VALUES ('INITIAL', 1000::bigint, 0::bigint, 1000::bigint, 'OPEN'),
             ('RENEWAL', 0::bigint, 1000::bigint, 0::bigint, 'PAID')$$,
    'the current invoice keeps its price; 5000 off a 1000 invoice: 0, never below zero, paid at once');
SELECT throws_ok(format('SELECT billing.apply_coupon(%s, %L, %L)', (SELECT pg_temp.sid('t60-cp2')), 'L_BIG', '2026-02-11Z'),
                 'BL409', NULL, 'a coupon used up on a subscription cannot be redeemed on it again: BL409');
-- forever, at most 2 redemptions
SELECT billing.create_subscription('t60-cp3', 6001, 'L_M', '2026-01-10Z', 0, 'L_FOREVER');
SELECT billing.create_subscription('t60-cp4', 6001, 'L_M', '2026-01-10Z', 0, 'L_FOREVER');
SELECT billing.create_subscription('t60-cp5', 6001, 'L_M', '2026-01-10Z');
SELECT throws_ok(format('SELECT billing.apply_coupon(%s, %L, %L)', (SELECT pg_temp.sid('t60-cp5')), 'L_FOREVER', '2026-01-11Z'),
                 'BL409', NULL, 'the third redemption of a coupon limited to 2: BL409');
SELECT throws_ok($$SELECT billing.upsert_coupon('L_FOREVER', 10, NULL, NULL, 'forever', NULL, 1)$$, 'BL422', NULL,
                 'a maximum below the redemptions so far: BL422');
SELECT throws_ok($$SELECT billing.upsert_coupon('L_X', 10, NULL, NULL, 'once', NULL, NULL, 'infinity')$$, 'BL422', NULL,
                 'an infinite redeem-by: BL422');
SELECT throws_ok($$SELECT billing.upsert_coupon('L_X', NULL, 100, 'usd', 'once')$$, 'BL422', NULL,
                 'a currency not in ISO 4217 form: BL422');
SELECT throws_ok($$SELECT billing.upsert_coupon('L_X', 10, NULL, NULL, 'repeating', 121)$$, 'BL422', NULL,
                 'more than 120 repeating periods: BL422');
SELECT throws_ok($$SELECT billing.create_subscription('t60-cp6', 6001, 'L_M', '2026-01-10Z', 0, 'L_FOREVER')$$,
                 'BL409', NULL, 'also at signup (nothing is created)');
SELECT is(pg_temp.sid('t60-cp6'), NULL, 'the failed signup left no trace');
SELECT billing.create_due_invoices(100, '2026-02-10Z');
SELECT billing.create_due_invoices(100, '2026-03-10Z');
SELECT is((SELECT array_agg(discount_amount ORDER BY period_start) FROM billing.invoice WHERE subscription_id = (SELECT pg_temp.sid('t60-cp3'))),
          ARRAY[100, 100, 100]::bigint[], 'forever: every period invoice');
-- apply_coupon errors
SELECT throws_ok($$SELECT billing.apply_coupon(99999999, 'L_BIG', '2026-01-11Z')$$, 'BL404', NULL, 'unknown subscription: BL404');
SELECT throws_ok(format('SELECT billing.apply_coupon(%s, %L, %L)', (SELECT pg_temp.sid('t60-cp5')), 'NOPE', '2026-01-11Z'),
                 'BL422', NULL, 'unknown coupon: BL422');
SELECT throws_ok(format('SELECT billing.apply_coupon(%s, %L, %L)', (SELECT pg_temp.sid('t60-cp5')), 'L_OLD', '2026-01-11Z'),
                 'BL422', NULL, 'past its redeem-by: BL422');
SELECT throws_ok(format('SELECT billing.apply_coupon(%s, %L, %L)', (SELECT pg_temp.sid('t60-cp5')), 'L_PRO_ONLY', '2026-01-11Z'),
                 'BL422', NULL, 'another plan''s coupon: BL422');
SELECT throws_ok(format('SELECT billing.apply_coupon(%s, %L, %L)', (SELECT pg_temp.sid('t60-cp5')), 'L_EURO', '2026-01-11Z'),
                 'BL422', NULL, 'an amount in another currency: BL422');
SELECT billing.cancel_subscription(pg_temp.sid('t60-cp5'), false, '2026-01-12Z');
SELECT throws_ok(format('SELECT billing.apply_coupon(%s, %L, %L)', (SELECT pg_temp.sid('t60-cp5')), 'L_BIG', '2026-01-13Z'),
                 'BL422', NULL, 'a canceled subscription: BL422');
-- a 100% coupon never makes credit: the period is billed 0, a downgrade credits 0
SELECT billing.upsert_coupon('L_FREE', 100, NULL, NULL, 'once');
SELECT billing.create_subscription('t60-cp7', 6001, 'L_M3', '2026-01-10Z', 0, 'L_FREE');
SELECT billing.change_plan(pg_temp.sid('t60-cp7'), 'L_M', '2026-01-11Z');
SELECT is((SELECT coalesce(sum(amount), 0) FROM billing.credit_entry WHERE subscription_id = (SELECT pg_temp.sid('t60-cp7')))
          + (SELECT coalesce(sum(amount), 0) FROM billing.credit_pending WHERE subscription_id = (SELECT pg_temp.sid('t60-cp7'))),
          0::numeric, 'a downgrade of a period billed 0 by a coupon credits nothing');

-- =============================================================================================
-- Pause and resume
-- =============================================================================================
SELECT billing.create_subscription('t60-p1', 6004, 'L_M', '2026-01-10Z');
SELECT is(pg_temp.pay((SELECT id FROM billing.invoice WHERE subscription_id = (SELECT pg_temp.sid('t60-p1'))), 'SUCCEEDED',
                      '2026-01-10 00:10Z'), 'PAID', 'the first period is paid');
SELECT results_eq(
    $$SELECT status, paused_at, resume_at FROM billing.pause_subscription(pg_temp.sid('t60-p1'), '2026-03-05Z', '2026-01-25Z')$$,
    $$VALUES ('PAUSED', '2026-01-25Z'::timestamptz, '2026-03-05Z'::timestamptz)$$, 'pause with a resume date');
-- (A query text: on Citus a statement reading one shard goes to its worker whole, pgTAP's call included.)
SELECT results_eq($$SELECT balance FROM billing.credit_balance WHERE customer_id = 6004 AND currency = 'USD'$$, $$VALUES (516::bigint)$$,
          'the unused, paid rest of the period is credited: floor(1000 x 16 / 31 days) = 516');
SELECT is(pg_temp.events('SubscriptionPaused', (SELECT pg_temp.sid('t60-p1'))), 1::bigint, 'SubscriptionPaused');
SELECT billing.create_due_invoices(100, '2026-02-10Z');
SELECT billing.create_due_invoices(100, '2026-03-04Z');
SELECT is(pg_temp.invoices((SELECT pg_temp.sid('t60-p1'))), 1::bigint, 'no invoice while paused');
SELECT billing.create_due_invoices(100, '2026-03-06Z');
SELECT results_eq(
    $$SELECT status, current_period_start, current_period_end, billing_anchor FROM billing.subscription
       WHERE id = (SELECT pg_temp.sid('t60-p1'))$$,
    $$VALUES ('ACTIVE', '2026-03-05Z'::timestamptz, '2026-04-05Z'::timestamptz, '2026-03-05Z'::timestamptz)$$,
    'resumed by itself at its date (the job ran later): a new period from then, new anchor');
SELECT results_eq(
    $$SELECT kind, period_start, subtotal, credit_applied, amount FROM billing.invoice
       WHERE subscription_id = (SELECT pg_temp.sid('t60-p1')) ORDER BY period_start DESC LIMIT 1$$,
    $$VALUES ('RENEWAL', '2026-03-05Z'::timestamptz, 1000::bigint, 516::bigint, 484::bigint)$$,
    'billed at once, the pause''s credit applied');
SELECT is(pg_temp.events('SubscriptionResumed', (SELECT pg_temp.sid('t60-p1'))), 1::bigint, 'SubscriptionResumed');
-- an unpaid period: the credit waits on it
SELECT billing.create_subscription('t60-p2', 6002, 'L_M', '2026-01-10Z');
SELECT billing.pause_subscription(pg_temp.sid('t60-p2'), NULL, '2026-01-25Z');
SELECT is((SELECT status FROM billing.credit_pending WHERE subscription_id = (SELECT pg_temp.sid('t60-p2'))), 'PENDING',
          'pausing an unpaid period: the credit is pending on its invoice, never free');
SELECT is((billing.pause_subscription(pg_temp.sid('t60-p2'), '2026-10-20 10:00Z', '2026-02-01Z')).resume_at,
          '2026-10-20 10:00Z'::timestamptz, 'pausing a paused subscription sets its resume date');
SELECT is((SELECT payload::jsonb -> 'data' -> 'changes' -> 'resumeAt' ->> 'after' FROM billing.outbox_event
            WHERE event_type = 'SubscriptionUpdated' AND payload ->> 'subject' = 'subscription/' || (SELECT pg_temp.sid('t60-p2'))
            ORDER BY id DESC LIMIT 1), '2026-10-20T10:00:00.000000Z', 'announced (resumeAt)');
-- manual resume in New York across the November DST change: 06:00 EDT -> 06:00 EST
SELECT results_eq(
    $$SELECT status, current_period_start, current_period_end FROM billing.resume_subscription(pg_temp.sid('t60-p2'), '2026-10-20 10:00Z')$$,
    $$VALUES ('ACTIVE', '2026-10-20 10:00Z'::timestamptz, '2026-11-20 11:00Z'::timestamptz)$$,
    'resume now: a new period from now, local time kept across DST');
SELECT is((SELECT version FROM billing.resume_subscription(pg_temp.sid('t60-p2'), '2026-10-21Z')),
          (SELECT version FROM billing.subscription WHERE id = (SELECT pg_temp.sid('t60-p2'))), 'resuming a live subscription changes nothing');
-- month end
SELECT billing.create_subscription('t60-p3', 6001, 'L_M', '2026-01-05Z');
SELECT billing.pause_subscription(pg_temp.sid('t60-p3'), '2026-01-31 12:00Z', '2026-01-20Z');
SELECT billing.create_due_invoices(100, '2026-01-31 12:00Z');
SELECT is((SELECT current_period_end FROM billing.subscription WHERE id = (SELECT pg_temp.sid('t60-p3'))),
          '2026-02-28 12:00Z'::timestamptz, 'month end: resumed on 31 January, the period ends 28 February');
-- errors
SELECT throws_ok($$SELECT billing.pause_subscription(99999999, NULL, '2026-01-11Z')$$, 'BL404', NULL, 'pause: unknown: BL404');
SELECT throws_ok(format('SELECT billing.pause_subscription(%s, %L, %L)', (SELECT pg_temp.sid('t60-p3')), '2026-02-01Z', '2026-02-01Z'),
                 'BL422', NULL, 'a resume date not after now: BL422');
SELECT billing.create_subscription('t60-trial-p', 6001, 'L_M', '2026-06-01Z', 30);
SELECT throws_ok(format('SELECT billing.pause_subscription(%s, NULL, %L)', (SELECT pg_temp.sid('t60-trial-p')), '2026-06-02Z'),
                 'BL422', NULL, 'a trial cannot be paused: BL422');
SELECT throws_ok(format('SELECT billing.pause_subscription(%s, NULL, %L)', (SELECT pg_temp.sid('t60-cp5')), '2026-02-02Z'),
                 'BL422', NULL, 'a canceled subscription cannot be paused: BL422');
SELECT billing.create_subscription('t60-p4', 6001, 'L_M', '2026-01-05Z');
SELECT billing.cancel_subscription(pg_temp.sid('t60-p4'), true, '2026-01-06Z');
SELECT throws_ok(format('SELECT billing.pause_subscription(%s, NULL, %L)', (SELECT pg_temp.sid('t60-p4')), '2026-01-07Z'),
                 'BL422', NULL, 'one cancelling at period end cannot be paused: BL422');
SELECT billing.create_subscription('t60-p5', 6001, 'L_M', '2026-01-05Z');
SELECT is(pg_temp.pay((SELECT id FROM billing.invoice WHERE subscription_id = (SELECT pg_temp.sid('t60-p5'))), 'DECLINED',
                      '2026-01-05 00:10Z'), 'OPEN', 'a declined first charge');
SELECT throws_ok(format('SELECT billing.pause_subscription(%s, NULL, %L)', (SELECT pg_temp.sid('t60-p5')), '2026-01-07Z'),
                 'BL422', NULL, 'a PAST_DUE subscription cannot be paused: BL422');
SELECT billing.create_subscription('t60-p6', 6001, 'L_M', '2026-01-05Z');
SELECT billing.pause_subscription(pg_temp.sid('t60-p6'), NULL, '2026-01-07Z');
SELECT throws_ok(format('SELECT billing.cancel_subscription(%s, true, %L)', (SELECT pg_temp.sid('t60-p6')), '2026-01-08Z'),
                 'BL422', NULL, 'a paused subscription has no period end to cancel at: BL422');
SELECT is((billing.cancel_subscription(pg_temp.sid('t60-p6'), false, '2026-01-08Z')).status, 'CANCELED',
          'but can be canceled now');
SELECT throws_ok(format('SELECT billing.resume_subscription(%s, %L)', (SELECT pg_temp.sid('t60-p6')), '2026-01-09Z'),
                 'BL422', NULL, 'resume: canceled: BL422');
SELECT throws_ok($$SELECT billing.resume_subscription(99999999, '2026-01-11Z')$$, 'BL404', NULL, 'resume: unknown: BL404');

-- =============================================================================================
-- Uncancel
-- =============================================================================================
SELECT billing.create_subscription('t60-u1', 6001, 'L_M', '2026-01-05Z');
SELECT billing.cancel_subscription(pg_temp.sid('t60-u1'), true, '2026-01-06Z');
SELECT is((billing.uncancel_subscription(pg_temp.sid('t60-u1'), '2026-01-07Z')).cancel_at_period_end, false,
          'uncancel clears a pending cancellation');
SELECT is((SELECT payload::jsonb -> 'data' -> 'changes' -> 'cancelAtPeriodEnd' FROM billing.outbox_event
            WHERE event_type = 'SubscriptionUpdated' AND payload ->> 'subject' = 'subscription/' || (SELECT pg_temp.sid('t60-u1'))
            ORDER BY id DESC LIMIT 1), '{"before": true, "after": false}'::jsonb, 'SubscriptionUpdated cancelAtPeriodEnd');
SELECT billing.create_due_invoices(100, '2026-02-05Z');
SELECT is((SELECT status FROM billing.subscription WHERE id = (SELECT pg_temp.sid('t60-u1'))), 'ACTIVE', 'and it renews');
SELECT is((SELECT version FROM billing.uncancel_subscription(pg_temp.sid('t60-u1'), '2026-02-06Z')),
          (SELECT version FROM billing.subscription WHERE id = (SELECT pg_temp.sid('t60-u1'))), 'nothing pending: unchanged');
SELECT billing.cancel_subscription(pg_temp.sid('t60-u1'), true, '2026-02-07Z');
SELECT throws_ok(format('SELECT billing.uncancel_subscription(%s, %L)', (SELECT pg_temp.sid('t60-u1')), '2026-03-05Z'),
                 'BL422', NULL, 'too late: the period end passed (renewal not yet run): BL422');
SELECT throws_ok(format('SELECT billing.uncancel_subscription(%s, %L)', (SELECT pg_temp.sid('t60-cp5')), '2026-03-05Z'),
                 'BL422', NULL, 'canceled: BL422');
SELECT throws_ok($$SELECT billing.uncancel_subscription(99999999, '2026-01-11Z')$$, 'BL404', NULL, 'uncancel: unknown: BL404');

-- =============================================================================================
-- Reactivation (after dunning)
-- =============================================================================================
SELECT billing.create_subscription('t60-r1', 6003, 'L_M', '2026-01-31 12:00Z');
CREATE TEMP TABLE r1 AS SELECT id FROM billing.invoice WHERE subscription_id = (SELECT pg_temp.sid('t60-r1'));
SELECT pg_temp.pay((SELECT id FROM r1), 'DECLINED', '2026-01-31 12:10Z');
SELECT pg_temp.pay((SELECT id FROM r1), 'DECLINED', '2026-02-02 12:10Z');
SELECT pg_temp.pay((SELECT id FROM r1), 'DECLINED', '2026-02-06 12:10Z');
SELECT is(pg_temp.pay((SELECT id FROM r1), 'DECLINED', '2026-02-12 12:10Z'), 'FAILED', 'dunning exhausted');
SELECT is((SELECT cancel_reason FROM billing.subscription WHERE id = (SELECT pg_temp.sid('t60-r1'))), 'DUNNING_EXHAUSTED',
          'canceled by dunning');
SELECT throws_ok(format('SELECT billing.reactivate_subscription(%s, %L)', (SELECT pg_temp.sid('t60-r1')), '2026-02-12Z'),
                 'BL422', NULL, 'p_now before the cancellation: BL422');
-- a customer paying with stored payment methods needs a new one (the one dunning wore out is not tried again)
SELECT billing.set_payment_method(6003, 'sim', 'cus_6003', 'pm_old', 'visa', '4242', 12, 2030, '2026-01-20Z');
SELECT throws_ok(format('SELECT billing.reactivate_subscription(%s, %L)', (SELECT pg_temp.sid('t60-r1')), '2026-03-01Z'),
                 'BL409', NULL, 'no payment method added since the cancellation: BL409');
SELECT billing.set_payment_method(6003, 'sim', 'cus_6003', 'pm_new', 'visa', '1881', 12, 2031, '2026-03-20Z');
SELECT results_eq(
    $$SELECT status, canceled_at, cancel_reason, current_period_start, current_period_end
        FROM billing.reactivate_subscription(pg_temp.sid('t60-r1'), '2026-03-28 23:30Z')$$,
    $$VALUES ('ACTIVE', NULL::timestamptz, NULL::text, '2026-03-28 23:30Z'::timestamptz, '2026-04-28 22:30Z'::timestamptz)$$,
    'reactivated: ACTIVE, a new period from now (Berlin: 00:30 CET before, 00:30 CEST after the change)');
SELECT results_eq(
    $$SELECT kind, status, period_start, subtotal FROM billing.invoice
       WHERE subscription_id = (SELECT pg_temp.sid('t60-r1')) ORDER BY id$$,
    $$VALUES ('INITIAL', 'FAILED', '2026-01-31 12:00Z'::timestamptz, 1000::bigint),
             ('RENEWAL', 'OPEN', '2026-03-28 23:30Z'::timestamptz, 1000::bigint)$$,
    'the new period is billed at once; the written-off invoice stays FAILED');
SELECT is((SELECT payload::jsonb -> 'data' -> 'changes' -> 'status' FROM billing.outbox_event
            WHERE event_type = 'SubscriptionUpdated' AND payload ->> 'subject' = 'subscription/' || (SELECT pg_temp.sid('t60-r1'))
            ORDER BY id DESC LIMIT 1), '{"before": "CANCELED", "after": "ACTIVE"}'::jsonb, 'SubscriptionUpdated CANCELED -> ACTIVE');
SELECT is((SELECT version FROM billing.reactivate_subscription(pg_temp.sid('t60-r1'), '2026-03-30Z')),
          (SELECT version FROM billing.subscription WHERE id = (SELECT pg_temp.sid('t60-r1'))), 'a live subscription: unchanged');
SELECT throws_ok(format('SELECT billing.reactivate_subscription(%s, %L)', (SELECT pg_temp.sid('t60-cp5')), '2026-03-05Z'),
                 'BL422', NULL, 'canceled on request, not by dunning: BL422');
SELECT throws_ok($$SELECT billing.reactivate_subscription(99999999, '2026-01-11Z')$$, 'BL404', NULL, 'reactivate: unknown: BL404');
-- an invoice still in dunning blocks it: an upgrade declined once, then the renewal's dunning ends
SELECT billing.create_subscription('t60-r2', 6001, 'L_M', '2026-01-01Z');
CREATE TEMP TABLE r2 AS SELECT id FROM billing.invoice WHERE subscription_id = (SELECT pg_temp.sid('t60-r2'));
SELECT pg_temp.pay((SELECT id FROM r2), 'DECLINED', '2026-01-01 00:10Z');
SELECT billing.change_plan(pg_temp.sid('t60-r2'), 'L_M3', '2026-01-02Z');
SELECT pg_temp.pay((SELECT id FROM billing.invoice WHERE subscription_id = (SELECT pg_temp.sid('t60-r2')) AND kind = 'PRORATION'),
                   'DECLINED', '2026-01-02 00:10Z');
SELECT pg_temp.pay((SELECT id FROM r2), 'DECLINED', '2026-01-02 03:00Z');
SELECT pg_temp.pay((SELECT id FROM r2), 'DECLINED', '2026-01-05 06:00Z');
SELECT pg_temp.pay((SELECT id FROM r2), 'DECLINED', '2026-01-10 09:00Z');
SELECT is((SELECT cancel_reason FROM billing.subscription WHERE id = (SELECT pg_temp.sid('t60-r2'))), 'DUNNING_EXHAUSTED',
          'canceled by dunning with an upgrade still in dunning');
SELECT throws_ok(format('SELECT billing.reactivate_subscription(%s, %L)', (SELECT pg_temp.sid('t60-r2')), '2026-01-11Z'),
                 'BL409', NULL, 'an invoice of it still unpaid: BL409');

-- =============================================================================================
-- Seats
-- =============================================================================================
SELECT billing.create_subscription('t60-s1', 6001, 'L_M', '2026-01-10Z', 0, NULL, 2);
SELECT is((SELECT subtotal FROM billing.invoice WHERE subscription_id = (SELECT pg_temp.sid('t60-s1'))), 2000::bigint,
          'quantity 2: the INITIAL invoice is price x quantity');
SELECT is(pg_temp.pay((SELECT id FROM billing.invoice WHERE subscription_id = (SELECT pg_temp.sid('t60-s1'))), 'SUCCEEDED',
                      '2026-01-10 00:10Z'), 'PAID', 'paid');
SELECT results_eq(
    $$SELECT quantity, period_price FROM billing.set_quantity(pg_temp.sid('t60-s1'), 4, '2026-01-25Z')$$,
    $$VALUES (4, 4000::bigint)$$, 'set_quantity: 2 -> 4 seats');
SELECT results_eq(
    $$SELECT kind, period_start, subtotal, quantity, from_quantity FROM billing.invoice
       WHERE subscription_id = (SELECT pg_temp.sid('t60-s1')) AND kind = 'PRORATION'$$,
    $$VALUES ('PRORATION', '2026-01-25Z'::timestamptz, 1032::bigint, 4, 2)$$,
    'two seats added for 16 of 31 days: floor(4000 x 16/31) - floor(2000 x 16/31) = 1032');
SELECT is(pg_temp.events('SubscriptionUpdated', (SELECT pg_temp.sid('t60-s1'))), 1::bigint, 'SubscriptionUpdated (quantity)');
SELECT billing.set_quantity(pg_temp.sid('t60-s1'), 3, '2026-01-25Z');
SELECT is((SELECT sum(amount) FROM billing.credit_pending WHERE subscription_id = (SELECT pg_temp.sid('t60-s1'))), 516::numeric,
          'one seat removed: 516 credited, pending while the upgrade is unpaid');
SELECT billing.create_due_invoices(100, '2026-02-10Z');
SELECT results_eq(
    $$SELECT subtotal, quantity, plan_price FROM billing.invoice
       WHERE subscription_id = (SELECT pg_temp.sid('t60-s1')) AND kind = 'RENEWAL'$$,
    $$VALUES (3000::bigint, 3, 1000::bigint)$$, 'the renewal statement bills price x quantity');
SELECT throws_ok(format('SELECT billing.set_quantity(%s, 0, %L)', (SELECT pg_temp.sid('t60-s1')), '2026-02-11Z'),
                 'BL422', NULL, 'quantity 0: BL422');
SELECT throws_ok(format('SELECT billing.set_quantity(%s, 1000001, %L)', (SELECT pg_temp.sid('t60-s1')), '2026-02-11Z'),
                 'BL422', NULL, 'quantity above 1000000: BL422');
SELECT throws_ok(format('SELECT billing.set_quantity(%s, 2, %L)', (SELECT pg_temp.sid('t60-cp5')), '2026-02-11Z'),
                 'BL422', NULL, 'a canceled subscription: BL422');
SELECT throws_ok($$SELECT billing.set_quantity(99999999, 2, '2026-01-11Z')$$, 'BL404', NULL, 'set_quantity: unknown: BL404');
SELECT throws_ok($$SELECT billing.create_subscription('t60-s0', 6001, 'L_M', '2026-01-10Z', 0, NULL, 0)$$, 'BL422', NULL,
                 'create with quantity 0: BL422');
-- in a trial: no proration
SELECT is((billing.set_quantity(pg_temp.sid('t60-trial-p'), 5, '2026-06-03Z')).quantity, 5, 'seats changed in a trial');
SELECT is(pg_temp.invoices((SELECT pg_temp.sid('t60-trial-p'))), 0::bigint, 'nothing billed');
-- a failed seat upgrade is reverted, seats included
SELECT billing.create_subscription('t60-s2', 6001, 'L_M', '2026-01-10Z');
SELECT pg_temp.pay((SELECT id FROM billing.invoice WHERE subscription_id = (SELECT pg_temp.sid('t60-s2'))), 'SUCCEEDED', '2026-01-10 00:10Z');
SELECT billing.set_quantity(pg_temp.sid('t60-s2'), 3, '2026-01-11Z');
CREATE TEMP TABLE s2 AS SELECT id FROM billing.invoice WHERE subscription_id = (SELECT pg_temp.sid('t60-s2')) AND kind = 'PRORATION';
SELECT pg_temp.pay((SELECT id FROM s2), 'DECLINED', '2026-01-11 00:10Z');
SELECT pg_temp.pay((SELECT id FROM s2), 'DECLINED', '2026-01-12 03:00Z');
SELECT pg_temp.pay((SELECT id FROM s2), 'DECLINED', '2026-01-15 06:00Z');
SELECT pg_temp.pay((SELECT id FROM s2), 'DECLINED', '2026-01-20 09:00Z');
SELECT results_eq(
    $$SELECT status, quantity, period_price FROM billing.subscription WHERE id = (SELECT pg_temp.sid('t60-s2'))$$,
    $$VALUES ('ACTIVE', 1, 1000::bigint)$$, 'the seats'' PRORATION failed: back to 1 seat at the price paid');

-- =============================================================================================
-- Scheduled plan changes and changes without proration
-- =============================================================================================
SELECT billing.create_subscription('t60-c1', 6001, 'L_M3', '2026-01-10Z');
SELECT is((SELECT code FROM billing.plan WHERE id = (billing.change_plan(pg_temp.sid('t60-c1'), 'L_M', '2026-01-20Z', NULL, 'period_end')).scheduled_plan_id),
          'L_M', 'a downgrade scheduled for the period end');
SELECT is(pg_temp.invoices((SELECT pg_temp.sid('t60-c1'))), 1::bigint, 'no proration invoice');
SELECT is((SELECT count(*) FROM billing.credit_pending WHERE subscription_id = (SELECT pg_temp.sid('t60-c1')))
          + (SELECT count(*) FROM billing.credit_entry WHERE subscription_id = (SELECT pg_temp.sid('t60-c1'))), 0::bigint, 'no credit');
SELECT is((SELECT payload::jsonb -> 'data' -> 'changes' -> 'scheduledPlanCode' FROM billing.outbox_event
            WHERE event_type = 'SubscriptionUpdated' AND payload ->> 'subject' = 'subscription/' || (SELECT pg_temp.sid('t60-c1'))),
          '{"before": null, "after": "L_M"}'::jsonb, 'announced (scheduledPlanCode)');
SELECT billing.create_due_invoices(100, '2026-02-10Z');
SELECT results_eq(
    $$SELECT (SELECT code FROM billing.plan p WHERE p.id = s.plan_id), scheduled_plan_id, lifecycle_pending
        FROM billing.subscription s WHERE id = (SELECT pg_temp.sid('t60-c1'))$$,
    $$VALUES ('L_M', NULL::bigint, false)$$, 'applied at the renewal');
SELECT is((SELECT subtotal FROM billing.invoice WHERE subscription_id = (SELECT pg_temp.sid('t60-c1')) AND kind = 'RENEWAL'),
          1000::bigint, 'which bills the new plan');
-- withdrawn: a change back to the current plan
SELECT billing.change_plan(pg_temp.sid('t60-c1'), 'L_M3', '2026-02-11Z', NULL, 'period_end');
SELECT is((billing.change_plan(pg_temp.sid('t60-c1'), 'L_M', '2026-02-12Z', NULL, 'period_end')).scheduled_plan_id, NULL,
          'a pending change is withdrawn by changing to the current plan');
-- a change now replaces a scheduled one
SELECT billing.change_plan(pg_temp.sid('t60-c1'), 'L_Y', '2026-02-13Z', NULL, 'period_end');
SELECT is((billing.change_plan(pg_temp.sid('t60-c1'), 'L_M3', '2026-02-14Z')).scheduled_plan_id, NULL,
          'a change now replaces the scheduled one');
-- a scheduled change of interval starts the new calendar at the period end
SELECT billing.create_subscription('t60-c2', 6002, 'L_M', '2026-01-31 15:00Z');
SELECT billing.change_plan(pg_temp.sid('t60-c2'), 'L_Y', '2026-02-01Z', NULL, 'period_end');
SELECT billing.create_due_invoices(100, '2026-02-28 15:00Z');
SELECT results_eq(
    $$SELECT kind, period_start, period_end, subtotal FROM billing.invoice
       WHERE subscription_id = (SELECT pg_temp.sid('t60-c2')) ORDER BY period_start DESC LIMIT 1$$,
    $$VALUES ('RENEWAL', '2026-02-28 15:00Z'::timestamptz, '2027-02-28 15:00Z'::timestamptz, 12000::bigint)$$,
    'monthly -> yearly at the period end (28 February after a 31 January signup): a year from then');
-- without proration
SELECT billing.create_subscription('t60-c3', 6001, 'L_M', '2026-01-10Z');
SELECT results_eq(
    $$SELECT (SELECT code FROM billing.plan p WHERE p.id = s.plan_id), period_price
        FROM billing.change_plan(pg_temp.sid('t60-c3'), 'L_M3', '2026-01-20Z', NULL, 'now', false) s$$,
    $$VALUES ('L_M3', 1000::bigint)$$, 'an upgrade without proration: the plan switches, the period keeps its price');
SELECT is(pg_temp.invoices((SELECT pg_temp.sid('t60-c3'))), 1::bigint, 'and nothing is invoiced');
SELECT billing.change_plan(pg_temp.sid('t60-c3'), 'L_M', '2026-01-21Z');
SELECT is((SELECT count(*) FROM billing.credit_pending WHERE subscription_id = (SELECT pg_temp.sid('t60-c3')))
          + (SELECT count(*) FROM billing.credit_entry WHERE subscription_id = (SELECT pg_temp.sid('t60-c3'))), 0::bigint,
          'going back down credits nothing (the upgrade was never billed)');
SELECT throws_ok(format('SELECT billing.change_plan(%s, %L, %L, NULL, %L)', (SELECT pg_temp.sid('t60-c3')), 'L_M3', '2026-01-22Z', 'later'),
                 'BL422', NULL, 'an unknown change time: BL422');
SELECT throws_ok(format('SELECT billing.change_plan(%s, %L, %L, NULL, %L, false)', (SELECT pg_temp.sid('t60-c3')), 'L_M3', '2026-01-22Z', 'period_end'),
                 'BL422', NULL, 'no proration at period end is meaningless: BL422');
SELECT throws_ok(format('SELECT billing.change_plan(%s, %L, %L, NULL, %L)', (SELECT pg_temp.sid('t60-cp5')), 'L_M3', '2026-01-22Z', 'period_end'),
                 'BL422', NULL, 'a canceled subscription: BL422');
SELECT throws_ok(format('SELECT billing.change_plan(%s, %L, %L, 999, %L)', (SELECT pg_temp.sid('t60-c3')), 'L_M3', '2026-01-22Z', 'period_end'),
                 'BL409', NULL, 'a stale version: BL409');

-- =============================================================================================
-- Calendar billing
-- =============================================================================================
SELECT throws_ok($$SELECT billing.upsert_plan('L_BAD', 100, 'USD', 'MONTH', 1, '2026-01-01Z', 0)$$, 'BL422', NULL, 'billing day 0: BL422');
SELECT throws_ok($$SELECT billing.upsert_plan('L_BAD', 100, 'USD', 'MONTH', 1, '2026-01-01Z', 32)$$, 'BL422', NULL, 'billing day 32: BL422');
SELECT throws_ok($$SELECT billing.upsert_plan('L_BAD', 100, 'USD', 'YEAR', 1, '2026-01-01Z', 1)$$, 'BL422', NULL,
                 'a billing day on a yearly plan: BL422');
SELECT billing.create_subscription('t60-k1', 6002, 'L_C1', '2026-03-11 05:00Z');
SELECT results_eq(
    $$SELECT current_period_start, current_period_end, period_price FROM billing.subscription WHERE id = (SELECT pg_temp.sid('t60-k1'))$$,
    $$VALUES ('2026-03-11 05:00Z'::timestamptz, '2026-04-01 04:00Z'::timestamptz, 2098::bigint)$$,
    'billed on the 1st at local midnight (EDT): the first period is prorated, floor(3100 x 503 h / 743 h) = 2098');
SELECT billing.create_due_invoices(100, '2026-04-01 04:00Z');
SELECT billing.create_due_invoices(100, '2026-05-01 04:00Z');
SELECT results_eq(
    $$SELECT kind, period_start, period_end, subtotal FROM billing.invoice WHERE subscription_id = (SELECT pg_temp.sid('t60-k1')) ORDER BY period_start$$,
    $$VALUES ('INITIAL', '2026-03-11 05:00Z'::timestamptz, '2026-04-01 04:00Z'::timestamptz, 2098::bigint),
             ('RENEWAL', '2026-04-01 04:00Z'::timestamptz, '2026-05-01 04:00Z'::timestamptz, 3100::bigint),
             ('RENEWAL', '2026-05-01 04:00Z'::timestamptz, '2026-06-01 04:00Z'::timestamptz, 3100::bigint)$$,
    'then whole months from the 1st');
SELECT billing.create_subscription('t60-k2', 6001, 'L_C31', '2026-02-10 12:00Z');
SELECT billing.create_due_invoices(100, '2026-02-28Z');
SELECT billing.create_due_invoices(100, '2026-03-31Z');
SELECT results_eq(
    $$SELECT period_start, period_end, subtotal FROM billing.invoice WHERE subscription_id = (SELECT pg_temp.sid('t60-k2')) ORDER BY period_start$$,
    $$VALUES ('2026-02-10 12:00Z'::timestamptz, '2026-02-28Z'::timestamptz, 1937::bigint),
             ('2026-02-28Z'::timestamptz, '2026-03-31Z'::timestamptz, 3100::bigint),
             ('2026-03-31Z'::timestamptz, '2026-04-30Z'::timestamptz, 3100::bigint)$$,
    'billing day 31: 28 February, 31 March, 30 April (month ends clamp without drift)');
SELECT billing.create_subscription('t60-k3', 6003, 'L_C1', '2026-10-20 10:00Z');
SELECT results_eq(
    $$SELECT current_period_end, period_price FROM billing.subscription WHERE id = (SELECT pg_temp.sid('t60-k3'))$$,
    $$VALUES ('2026-10-31 23:00Z'::timestamptz, 1152::bigint)$$,
    'Berlin across the October DST change: 1 November 00:00 CET, prorated over a 745-hour month');
-- after a trial: the first period runs to the billing day
SELECT billing.create_subscription('t60-k4', 6001, 'L_C1', '2026-02-10 12:00Z', 7);
SELECT billing.create_due_invoices(100, '2026-02-17 12:00Z');
SELECT results_eq(
    $$SELECT kind, period_start, period_end FROM billing.invoice WHERE subscription_id = (SELECT pg_temp.sid('t60-k4'))$$,
    $$VALUES ('INITIAL', '2026-02-17 12:00Z'::timestamptz, '2026-03-01Z'::timestamptz)$$,
    'a trial ending on 17 February bills to 1 March');
-- seats in a short first period: their share
SELECT billing.set_quantity(pg_temp.sid('t60-k1'), 2, '2026-05-01 04:00Z');
SELECT is((SELECT subtotal FROM billing.invoice WHERE subscription_id = (SELECT pg_temp.sid('t60-k1')) AND kind = 'PRORATION'),
          3100::bigint, 'a seat added at the start of a calendar month: a whole month');

-- =============================================================================================
-- Due but not yet processed: every call settles it first, at its own instant
-- (found by the money adversary: a period billed at terms chosen after it began)
-- =============================================================================================
SELECT billing.upsert_plan('L_D', 100, 'USD', 'DAY', 1, '2025-01-01Z');
SELECT billing.upsert_customer(6005, 'UTC');
SELECT billing.upsert_coupon('C_HALF', 50, NULL, NULL, 'forever');
CREATE FUNCTION pg_temp.lines(p_key text) RETURNS TABLE (kind text, period_start timestamptz, code text, quantity integer, subtotal bigint) LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_sub bigint := pg_temp.sid(p_key);
BEGIN
    RETURN QUERY SELECT i.kind, i.period_start, p.code, i.quantity, i.subtotal FROM billing.invoice i JOIN billing.plan p ON p.id = i.plan_id
    WHERE i.subscription_id = v_sub ORDER BY i.id;
END
$$;
-- the adversary's sequence: daily plan, paused to resume in 3 days, 4 days later a change now
SELECT billing.create_subscription('t60-due1', 6005, 'L_D', '2027-01-31 09:00Z');
SELECT billing.pause_subscription(pg_temp.sid('t60-due1'), '2027-02-03 09:00Z', '2027-01-31 10:00Z');
SELECT billing.change_plan(pg_temp.sid('t60-due1'), 'L_M', '2027-02-04 08:00Z');
SELECT billing.create_due_invoices(100, '2027-02-04 08:00Z');
SELECT results_eq($$SELECT * FROM pg_temp.lines('t60-due1')$$,
    $$VALUES ('INITIAL', '2027-01-31 09:00Z'::timestamptz, 'L_D', 1, 100::bigint),
             ('RENEWAL', '2027-02-03 09:00Z'::timestamptz, 'L_D', 1, 100::bigint),
             ('PLAN_CHANGE', '2027-02-04 08:00Z'::timestamptz, 'L_M', 1, 1000::bigint)$$,
    'a change after a resume date passed: the resumed period is billed at the plan in force then, the change after it');
-- the same with a change for the period end, and a renewal due after the resumed period too
SELECT billing.create_subscription('t60-due2', 6005, 'L_D', '2027-01-31 09:00Z');
SELECT billing.pause_subscription(pg_temp.sid('t60-due2'), '2027-02-03 09:00Z', '2027-01-31 10:00Z');
SELECT billing.change_plan(pg_temp.sid('t60-due2'), 'L_M', '2027-02-04 10:00Z', NULL, 'period_end');
SELECT billing.create_due_invoices(100, '2027-02-05 09:00Z');
SELECT results_eq($$SELECT * FROM pg_temp.lines('t60-due2')$$,
    $$VALUES ('INITIAL', '2027-01-31 09:00Z'::timestamptz, 'L_D', 1, 100::bigint),
             ('RENEWAL', '2027-02-03 09:00Z'::timestamptz, 'L_D', 1, 100::bigint),
             ('RENEWAL', '2027-02-04 09:00Z'::timestamptz, 'L_D', 1, 100::bigint),
             ('RENEWAL', '2027-02-05 09:00Z'::timestamptz, 'L_M', 1, 1000::bigint)$$,
    'a change for the period end after a resume date passed: from the end of the period begun before it');
-- seats: the resumed period at the seats in force then, the added seats prorated
SELECT billing.create_subscription('t60-due3', 6005, 'L_M', '2027-01-01Z', 0, NULL, 3);
SELECT billing.pause_subscription(pg_temp.sid('t60-due3'), '2027-01-11Z', '2027-01-06Z');
SELECT billing.set_quantity(pg_temp.sid('t60-due3'), 1, '2027-01-21Z');
SELECT results_eq($$SELECT kind, period_start, quantity, subtotal FROM pg_temp.lines('t60-due3') WHERE kind = 'RENEWAL'$$,
    $$VALUES ('RENEWAL', '2027-01-11Z'::timestamptz, 3, 3000::bigint)$$,
    'seats removed after a resume date passed: the resumed period billed at 3 seats');
SELECT results_eq(
    $$SELECT c.amount, c.customer_id = i.customer_id AND i.id = ANY (c.depends_on)
        FROM billing.credit_pending c
        JOIN billing.invoice i ON i.customer_id = c.customer_id AND i.subscription_id = c.subscription_id AND i.kind = 'RENEWAL'
       WHERE c.subscription_id = (SELECT pg_temp.sid('t60-due3')) ORDER BY c.id DESC LIMIT 1$$,
    $$VALUES (1355::bigint, true)$$,
    'the 2 seats removed credit the rest of the resumed period (2000 x 21 / 31 days), pending on its invoice');
-- a coupon: never discounts a period begun before it was applied
SELECT billing.create_subscription('t60-due4', 6005, 'L_M', '2027-01-01Z');
SELECT billing.pause_subscription(pg_temp.sid('t60-due4'), '2027-01-11Z', '2027-01-06Z');
SELECT billing.apply_coupon(pg_temp.sid('t60-due4'), 'C_HALF', '2027-01-12Z');
SELECT billing.create_due_invoices(100, '2027-02-11Z');
SELECT results_eq($$SELECT kind, period_start, subtotal FROM pg_temp.lines('t60-due4')$$,
    $$VALUES ('INITIAL', '2027-01-01Z'::timestamptz, 1000::bigint), ('RENEWAL', '2027-01-11Z'::timestamptz, 1000::bigint),
             ('RENEWAL', '2027-02-11Z'::timestamptz, 500::bigint)$$,
    'a coupon applied after a resume date passed discounts from the next period, not the resumed one');
SELECT billing.create_subscription('t60-due5', 6005, 'L_M', '2027-01-01Z');
SELECT billing.apply_coupon(pg_temp.sid('t60-due5'), 'C_HALF', '2027-02-02Z');
SELECT billing.create_due_invoices(100, '2027-03-01Z');
SELECT results_eq($$SELECT kind, period_start, subtotal FROM pg_temp.lines('t60-due5')$$,
    $$VALUES ('INITIAL', '2027-01-01Z'::timestamptz, 1000::bigint), ('RENEWAL', '2027-02-01Z'::timestamptz, 1000::bigint),
             ('RENEWAL', '2027-03-01Z'::timestamptz, 500::bigint)$$,
    'a coupon applied after a renewal was due (job not yet run) discounts from the next period');
-- cancel at period end decided after the period end passed: the period begun is billed and ended
SELECT billing.create_subscription('t60-due6', 6005, 'L_M', '2027-01-01Z');
SELECT billing.cancel_subscription(pg_temp.sid('t60-due6'), true, '2027-02-10Z');
SELECT billing.create_due_invoices(100, '2027-03-02Z');
SELECT results_eq(
    $$SELECT s.status, s.cancel_reason, (SELECT max(period_end) FROM billing.invoice i WHERE i.customer_id = s.customer_id AND i.subscription_id = s.id)
        FROM billing.subscription s WHERE id = (SELECT pg_temp.sid('t60-due6'))$$,
    $$VALUES ('CANCELED', 'PERIOD_END', '2027-03-01Z'::timestamptz)$$,
    'a cancel at period end after a renewal was due: February is billed, it ends on 1 March');
SELECT billing.create_subscription('t60-due7', 6005, 'L_M', '2027-01-01Z', 7);
SELECT billing.cancel_subscription(pg_temp.sid('t60-due7'), true, '2027-01-09Z');
SELECT billing.create_due_invoices(100, '2027-02-09Z');
SELECT results_eq(
    $$SELECT s.status, (SELECT string_agg(kind || ' ' || period_start, ',') FROM billing.invoice i WHERE i.customer_id = s.customer_id AND i.subscription_id = s.id)
        FROM billing.subscription s WHERE id = (SELECT pg_temp.sid('t60-due7'))$$,
    $$VALUES ('CANCELED', 'INITIAL ' || '2027-01-08Z'::timestamptz)$$,
    'a cancel at period end after the trial ended: the first period is billed, it ends then');
-- paused at its signup instant, a change scheduled, resumed at that instant: the day never served is
-- not billed (its unpaid INITIAL is voided at the pause), only the month the resume starts is
SELECT billing.create_subscription('t60-due0', 6005, 'L_D', '2027-01-20 09:00Z');
SELECT billing.pause_subscription(pg_temp.sid('t60-due0'), NULL, '2027-01-20 09:00Z');
SELECT billing.change_plan(pg_temp.sid('t60-due0'), 'L_M', '2027-01-20 09:00Z', NULL, 'period_end');
SELECT billing.resume_subscription(pg_temp.sid('t60-due0'), '2027-01-20 09:00Z');
SELECT results_eq($$SELECT i.kind, p.code, i.status, i.period_start, i.amount FROM billing.invoice i
                      JOIN billing.plan p ON p.id = i.plan_id WHERE i.subscription_id = (SELECT pg_temp.sid('t60-due0')) ORDER BY i.id$$,
    $$VALUES ('INITIAL', 'L_D', 'VOID', '2027-01-20 09:00Z'::timestamptz, 100::bigint),
             ('RENEWAL', 'L_M', 'OPEN', '2027-01-20 09:00Z'::timestamptz, 1000::bigint)$$,
    'paused at signup, resumed at once on the scheduled plan: the unserved day is voided, the month billed once');
SELECT is((SELECT coalesce(sum(amount), 0) FROM billing.credit_pending WHERE subscription_id = (SELECT pg_temp.sid('t60-due0'))
             AND status <> 'REVERSED')
          + (SELECT coalesce(sum(amount), 0) FROM billing.credit_entry WHERE subscription_id = (SELECT pg_temp.sid('t60-due0'))),
          0::numeric, 'and no credit is made of the voided day');
-- pause and resume after the resume date passed
SELECT billing.create_subscription('t60-due8', 6005, 'L_M', '2027-01-01Z');
SELECT billing.pause_subscription(pg_temp.sid('t60-due8'), '2027-01-11Z', '2027-01-06Z');
SELECT results_eq(
    $$SELECT status, current_period_start, resume_at FROM billing.pause_subscription(pg_temp.sid('t60-due8'), '2027-03-01Z', '2027-01-21Z')$$,
    $$VALUES ('PAUSED', '2027-01-11Z'::timestamptz, '2027-03-01Z'::timestamptz)$$,
    'pausing again after the resume date passed: it resumed then, and pauses now');
SELECT is((SELECT count(*) FROM billing.invoice WHERE subscription_id = (SELECT pg_temp.sid('t60-due8')) AND kind = 'RENEWAL'
            AND period_start = '2027-01-11Z'), 1::bigint, 'the ten days from the resume date are billed');
SELECT billing.create_subscription('t60-due9', 6005, 'L_M', '2027-01-01Z');
SELECT billing.pause_subscription(pg_temp.sid('t60-due9'), '2027-01-11Z', '2027-01-06Z');
SELECT results_eq(
    $$SELECT status, current_period_start FROM billing.resume_subscription(pg_temp.sid('t60-due9'), '2027-01-21Z')$$,
    $$VALUES ('ACTIVE', '2027-01-11Z'::timestamptz)$$,
    'resume after the resume date passed: resumed at its date, not now');
-- a pause after the trial ended: the first period is billed, then paused
SELECT billing.create_subscription('t60-due10', 6005, 'L_M', '2027-01-01Z', 7);
SELECT results_eq(
    $$SELECT status, current_period_start FROM billing.pause_subscription(pg_temp.sid('t60-due10'), NULL, '2027-01-10Z')$$,
    $$VALUES ('PAUSED', '2027-01-08Z'::timestamptz)$$,
    'a pause after the trial ended: its first period billed from the trial''s end, then paused');
-- time zones, DST and month ends on the settling path
SELECT billing.create_subscription('t60-due12', 6002, 'L_M', '2026-02-01 12:00Z');
SELECT billing.pause_subscription(pg_temp.sid('t60-due12'), '2026-03-01 12:00Z', '2026-02-10Z');
SELECT billing.set_quantity(pg_temp.sid('t60-due12'), 2, '2026-03-20Z');
SELECT results_eq(
    $$SELECT kind, period_start, period_end, quantity FROM billing.invoice WHERE subscription_id = (SELECT pg_temp.sid('t60-due12'))
       AND kind <> 'INITIAL' ORDER BY id$$,
    $$VALUES ('RENEWAL', '2026-03-01 12:00Z'::timestamptz, '2026-04-01 11:00Z'::timestamptz, 1),
             ('PRORATION', '2026-03-20Z'::timestamptz, '2026-04-01 11:00Z'::timestamptz, 2)$$,
    'New York across the March DST change: resumed at 07:00 EST by the seats call, to 07:00 EDT, then the seat prorated');
SELECT billing.create_subscription('t60-due13', 6005, 'L_M', '2026-01-05Z');
SELECT billing.pause_subscription(pg_temp.sid('t60-due13'), '2026-01-31 12:00Z', '2026-01-20Z');
SELECT billing.apply_coupon(pg_temp.sid('t60-due13'), 'C_HALF', '2026-03-02Z');
SELECT results_eq(
    $$SELECT kind, period_start, period_end, subtotal FROM billing.invoice WHERE subscription_id = (SELECT pg_temp.sid('t60-due13'))
       AND kind = 'RENEWAL' ORDER BY id$$,
    $$VALUES ('RENEWAL', '2026-01-31 12:00Z'::timestamptz, '2026-02-28 12:00Z'::timestamptz, 1000::bigint),
             ('RENEWAL', '2026-02-28 12:00Z'::timestamptz, '2026-03-31 12:00Z'::timestamptz, 1000::bigint)$$,
    'month end: resumed on 31 January and renewed on 28 February by the coupon call, both undiscounted');
-- errors through the settling: ended at a passed period end
SELECT billing.create_subscription('t60-due11', 6005, 'L_M', '2027-01-01Z');
SELECT billing.cancel_subscription(pg_temp.sid('t60-due11'), true, '2027-01-02Z');
SELECT throws_ok(format('SELECT billing.apply_coupon(%s, %L, %L)', (SELECT pg_temp.sid('t60-due11')), 'C_HALF', '2027-02-02Z'),
                 'BL422', NULL, 'a coupon after its period end passed with a cancel: BL422');
SELECT is((billing.cancel_subscription(pg_temp.sid('t60-due11'), false, '2027-02-02Z')).cancel_reason, 'PERIOD_END',
          'cancel now after it ended at its period end: it stays ended at its period end');

-- =============================================================================================
-- Keys: a redemption is the customer's (distributed by customer); coupon is a reference table
-- =============================================================================================
SELECT col_is_pk('billing', 'coupon_redemption', ARRAY['customer_id', 'subscription_id', 'coupon_code'],
                 'coupon_redemption: the primary key starts with customer_id');
SELECT fk_ok('billing', 'coupon_redemption', ARRAY['customer_id', 'subscription_id'],
             'billing', 'subscription', ARRAY['customer_id', 'id'],
             'coupon_redemption -> subscription carries customer_id');
SELECT throws_ok(format($$INSERT INTO billing.coupon_redemption (customer_id, subscription_id, coupon_code, redeemed_at)
                          VALUES (6001, %s, 'C_HALF', now())$$, (SELECT pg_temp.sid('t60-due5'))),
                 '23503', NULL, 'a redemption under another customer than its subscription''s is refused');

SELECT * FROM finish();
ROLLBACK;
