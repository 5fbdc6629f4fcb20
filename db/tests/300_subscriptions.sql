-- 300_subscriptions: signup idempotency, cancellation and plan changes.
BEGIN;
SET LOCAL ROLE billing_owner;  -- on Citus, reads of shards in the writers' role (see 200_plans_customers)
SELECT plan(45);

CREATE FUNCTION pg_temp.sid(p_key text) RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN
    RETURN (SELECT subscription_id FROM billing.subscription_request WHERE idempotency_key = p_key);
END
$$;
CREATE FUNCTION pg_temp.events(p_type text, p_subject text) RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN
    RETURN (SELECT count(*) FROM billing.outbox_event WHERE event_type = p_type AND payload ->> 'subject' = p_subject);
END
$$;

SELECT billing.upsert_plan('T_B', 100000, 'USD', 'MONTH');
SELECT billing.upsert_plan('T_P', 300000, 'USD', 'MONTH');
SELECT billing.upsert_plan('T_E', 1000, 'EUR', 'MONTH');
SELECT billing.upsert_plan('T_Y', 1000000, 'USD', 'YEAR');
SELECT billing.upsert_plan('T_B30', 100000, 'USD', 'DAY', 30);
SELECT billing.upsert_plan('T_P30', 300000, 'USD', 'DAY', 30);
SELECT billing.upsert_plan('T_E30', 1000, 'EUR', 'DAY', 30);

-- create_subscription --------------------------------------------------------------------------
SELECT billing.create_subscription('t05-a', 5001, 'T_B', '2026-01-31 15:00Z');
SELECT results_eq(
    $$SELECT status, current_period_start, current_period_end, billing_anchor, version, cancel_at_period_end
        FROM billing.get_subscription(pg_temp.sid('t05-a'))$$,
    $$VALUES ('ACTIVE', '2026-01-31 15:00Z'::timestamptz, '2026-02-28 15:00Z'::timestamptz,
              '2026-01-31 15:00Z'::timestamptz, 1::bigint, false)$$,
    'new subscription: ACTIVE, period [now, next boundary), version 1');
SELECT results_eq(
    $$SELECT kind, status, amount, currency::text, next_attempt_at, period_start, period_end
        FROM billing.invoice WHERE subscription_id = (SELECT pg_temp.sid('t05-a'))$$,
    $$VALUES ('INITIAL', 'OPEN', 100000::bigint, 'USD', '2026-01-31 15:00Z'::timestamptz,
              '2026-01-31 15:00Z'::timestamptz, '2026-02-28 15:00Z'::timestamptz)$$,
    'an OPEN INITIAL invoice due at signup');
SELECT is((billing.create_subscription('t05-a', 5001, 'T_B', '2026-01-31 16:00Z')).id, (SELECT pg_temp.sid('t05-a')),
          'same key and parameters: the same subscription');
SELECT is((SELECT count(*) FROM billing.invoice WHERE subscription_id = (SELECT pg_temp.sid('t05-a'))), 1::bigint,
          'a replay creates no second invoice');
-- (Reads of one customer's rows as query texts: on Citus a statement that reads one shard goes to its
-- worker whole, a pgTAP call in it included, where this transaction's plan is unknown.)
SELECT results_eq($$SELECT count(*) FROM billing.subscription WHERE customer_id = 5001$$, $$VALUES (1::bigint)$$,
                  'a replay creates no second subscription');
SELECT ok((SELECT created_at = now() FROM billing.create_subscription('t05-new', 5001, 'T_B', '2026-01-31Z')),
          'a new subscription has created_at = now() (tells 201 from 200)');
SELECT throws_ok($$SELECT billing.create_subscription('t05-a', 5001, 'T_P', '2026-01-31 15:00Z')$$, 'BL409', NULL,
                 'same key, other plan: BL409');
SELECT throws_ok($$SELECT billing.create_subscription('t05-a', 5002, 'T_B', '2026-01-31 15:00Z')$$, 'BL409', NULL,
                 'same key, other customer: BL409');
SELECT throws_ok($$SELECT billing.create_subscription('t05-x', 5001, 'NOPE', '2026-01-31 15:00Z')$$, 'BL422', NULL,
                 'unknown plan: BL422');
SELECT throws_ok($$SELECT billing.create_subscription('', 5001, 'T_B', '2026-01-31 15:00Z')$$, 'BL422', NULL,
                 'empty idempotency key: BL422');
SELECT is((SELECT count(*) FROM billing.subscription_request WHERE idempotency_key = 't05-x'), 0::bigint,
          'a failed create leaves no key behind');
SELECT billing.upsert_customer(5003, 'America/New_York');
SELECT is((billing.create_subscription('t05-ny', 5003, 'T_B', '2026-02-15 14:00Z')).current_period_end,
          '2026-03-15 13:00Z'::timestamptz, 'period computed in the customer''s zone (09:00 local kept across DST)');
SELECT throws_ok($$SELECT billing.get_subscription(-1)$$, 'BL404', NULL, 'get of an unknown subscription: BL404');

-- cancel_subscription --------------------------------------------------------------------------
SELECT billing.create_subscription('t05-c', 5004, 'T_B', '2026-03-01Z');
SELECT results_eq($$SELECT status, cancel_at_period_end, version FROM billing.cancel_subscription(pg_temp.sid('t05-c'), true, '2026-03-05Z')$$,
                  $$VALUES ('ACTIVE', true, 2::bigint)$$, 'cancel at period end only sets the flag');
SELECT results_eq($$SELECT status, cancel_at_period_end, version FROM billing.cancel_subscription(pg_temp.sid('t05-c'), true, '2026-03-06Z')$$,
                  $$VALUES ('ACTIVE', true, 2::bigint)$$, 'repeating it is harmless');
SELECT is((SELECT status FROM billing.invoice WHERE subscription_id = (SELECT pg_temp.sid('t05-c'))), 'OPEN',
          'cancel at period end leaves invoices alone');
SELECT throws_ok($$SELECT billing.cancel_subscription(pg_temp.sid('t05-c'), false, '2026-03-07Z', 1)$$, 'BL409', NULL,
                 'cancel with a stale version: BL409');
SELECT results_eq($$SELECT status, canceled_at, version FROM billing.cancel_subscription(pg_temp.sid('t05-c'), false, '2026-03-07Z', 2)$$,
                  $$VALUES ('CANCELED', '2026-03-07Z'::timestamptz, 3::bigint)$$, 'cancel now: CANCELED');
SELECT results_eq($$SELECT status, unserved > 0 AND unserved < subtotal + tax_amount FROM billing.invoice
                     WHERE subscription_id = (SELECT pg_temp.sid('t05-c'))$$, $$VALUES ('OPEN', true)$$,
                  'its unpaid invoice bills the 6 days served, only the rest taken off (issue 26 #3)');
SELECT is(pg_temp.events('SubscriptionCanceled', 'subscription/' || (SELECT pg_temp.sid('t05-c'))), 1::bigint,
          'one SubscriptionCanceled event');
SELECT results_eq($$SELECT status, version FROM billing.cancel_subscription(pg_temp.sid('t05-c'), false, '2026-03-08Z')$$,
                  $$VALUES ('CANCELED', 3::bigint)$$, 'cancel of a canceled subscription returns it unchanged');
SELECT is(pg_temp.events('SubscriptionCanceled', 'subscription/' || (SELECT pg_temp.sid('t05-c'))), 1::bigint, 'and writes no second event');
SELECT throws_ok($$SELECT billing.change_plan(pg_temp.sid('t05-c'), 'T_P', '2026-03-09Z')$$, 'BL422', NULL,
                 'change_plan on a canceled subscription: BL422');
SELECT throws_ok($$SELECT billing.cancel_subscription(-1, false, '2026-03-09Z')$$, 'BL404', NULL, 'cancel of an unknown subscription: BL404');

-- change_plan ---------------------------------------------------------------------------------
-- Period 2026-10-01..2026-10-31 (30 days, a 30-DAY plan), as the seed's example.
SELECT billing.create_subscription('t05-p', 5005, 'T_B30', '2026-10-01 00:00Z');
CREATE FUNCTION pg_temp.pay_all(p_at timestamptz) RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN
    RETURN (SELECT count(billing.record_payment_result(idempotency_key, 'SUCCEEDED', 'ch', NULL, p_at))
     FROM billing.claim_charges('w', 100, interval '5 minutes', p_at));
END
$$;
SELECT pg_temp.pay_all('2026-10-01 00:00Z');  -- the period is paid: credit from it is real
SELECT results_eq($$SELECT version, plan_id FROM billing.change_plan(pg_temp.sid('t05-p'), 'T_P30', '2026-10-16 00:00Z')$$,
                  $$SELECT 2::bigint, id FROM billing.plan WHERE code = 'T_P30'$$, 'upgrade switches the plan and bumps the version');
SELECT results_eq(
    $$SELECT status, amount, period_start, period_end, next_attempt_at FROM billing.invoice
       WHERE subscription_id = (SELECT pg_temp.sid('t05-p')) AND kind = 'PRORATION'$$,
    $$VALUES ('OPEN', 100000::bigint, '2026-10-16Z'::timestamptz, '2026-10-31Z'::timestamptz, '2026-10-16Z'::timestamptz)$$,
    'upgrade half way: an OPEN PRORATION invoice of 100000 due now');
SELECT pg_temp.pay_all('2026-10-16 00:00Z');
SELECT lives_ok($$SELECT billing.change_plan(pg_temp.sid('t05-p'), 'T_B30', '2026-10-21 00:00Z')$$, 'downgrade');
SELECT results_eq($$SELECT amount, reason FROM billing.credit_entry WHERE subscription_id = (SELECT pg_temp.sid('t05-p'))$$,
                  $$VALUES (66667::bigint, 'PRORATION')$$, 'downgrade with 10 of 30 days left: credit of 66667');
SELECT results_eq($$SELECT balance FROM billing.credit_balance WHERE customer_id = 5005$$, $$VALUES (66667::bigint)$$, 'credit balance');
SELECT is((SELECT count(*) FROM billing.invoice WHERE subscription_id = (SELECT pg_temp.sid('t05-p')) AND kind = 'PRORATION'), 1::bigint,
          'a downgrade creates no invoice');
-- Upgrade again: the new PRORATION invoice consumes the credit first.
SELECT lives_ok($$SELECT billing.change_plan(pg_temp.sid('t05-p'), 'T_P30', '2026-10-26 00:00Z')$$, 'upgrade again');
SELECT results_eq($$SELECT subtotal, credit_applied, amount, status FROM billing.invoice
                    WHERE subscription_id = (SELECT pg_temp.sid('t05-p')) AND kind = 'PRORATION' AND period_start = '2026-10-26Z'$$,
                  $$VALUES (33334::bigint, 33334::bigint, 0::bigint, 'PAID')$$,
                  'a proration covered by credit is PAID at once');
SELECT results_eq($$SELECT balance FROM billing.credit_balance WHERE customer_id = 5005$$, $$VALUES (33333::bigint)$$, 'the rest stays as credit');
SELECT results_eq($$SELECT sum(amount) FROM billing.credit_entry WHERE customer_id = 5005$$, $$VALUES (33333::numeric)$$,
                  'ledger sums to the balance');
SELECT is(pg_temp.events('InvoicePaid', 'invoice/' || (SELECT id FROM billing.invoice WHERE subscription_id = (SELECT pg_temp.sid('t05-p'))
                                                        AND period_start = '2026-10-26Z')), 1::bigint,
          'and is announced with InvoicePaid');
-- Several changes at the very same instant each get their own invoice.
SELECT billing.change_plan(pg_temp.sid('t05-p'), 'T_B30', '2026-10-27 00:00Z');
SELECT billing.change_plan(pg_temp.sid('t05-p'), 'T_P30', '2026-10-27 00:00Z');
SELECT lives_ok($$SELECT billing.change_plan(pg_temp.sid('t05-p'), 'T_B30', '2026-10-27 00:00Z')$$, 'down at the same instant');
SELECT lives_ok($$SELECT billing.change_plan(pg_temp.sid('t05-p'), 'T_P30', '2026-10-27 00:00Z')$$, 'up again at the same instant');
SELECT is((SELECT count(*) FROM billing.invoice WHERE subscription_id = (SELECT pg_temp.sid('t05-p')) AND kind = 'PRORATION'
             AND period_start >= '2026-10-27Z'), 2::bigint, 'two same-instant upgrades give two invoices');
SELECT is((SELECT version FROM billing.get_subscription(pg_temp.sid('t05-p'))), 8::bigint, 'every change bumps the version');
SELECT results_eq($$SELECT billing.change_plan(pg_temp.sid('t05-p'), 'T_P30', '2026-10-28Z') = billing.get_subscription(pg_temp.sid('t05-p'))$$,
                  $$VALUES (true)$$, 'changing to the current plan changes nothing');
SELECT throws_ok($$SELECT billing.change_plan(pg_temp.sid('t05-p'), 'T_E30', '2026-10-28Z')$$, 'BL422', NULL,
                 'currency mismatch: BL422');
SELECT throws_ok($$SELECT billing.change_plan(pg_temp.sid('t05-p'), 'NOPE', '2026-10-28Z')$$, 'BL422', NULL, 'unknown plan: BL422');
SELECT throws_ok($$SELECT billing.change_plan(pg_temp.sid('t05-p'), 'T_B30', '2026-10-28Z', 3)$$, 'BL409', NULL, 'stale version: BL409');
SELECT throws_ok($$SELECT billing.change_plan(-1, 'T_B30', '2026-10-28Z')$$, 'BL404', NULL, 'unknown subscription: BL404');
-- A different period length starts a new period at the change (docs/money.md).
SELECT billing.create_subscription('t05-y', 5006, 'T_B', '2026-01-31 12:00Z');
SELECT results_eq($$SELECT billing_anchor, period_number, current_period_start FROM billing.change_plan(pg_temp.sid('t05-y'), 'T_Y', '2026-02-14 12:00Z')$$,
                  $$VALUES ('2026-02-14 12:00Z'::timestamptz, 1, '2026-02-14 12:00Z'::timestamptz)$$,
                  'monthly to yearly: a new yearly period from the change');

SELECT * FROM finish();
ROLLBACK;
