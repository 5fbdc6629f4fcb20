-- 400_renewal: create_due_invoices renews, catches up, cancels at period end and spends credit.
BEGIN;
SET LOCAL ROLE billing_owner;  -- on Citus, reads of shards in the writers' role (see 200_plans_customers)
SELECT plan(36);

-- A subscription by its request key: a subquery, not a pg_temp function (on Citus a query over a
-- distributed table runs on the workers, where this session's pg_temp does not exist).
-- Each section ends by canceling its subscriptions so later sections sweep only their own (one call
-- at a time: on Citus the API is not called from inside a query over a distributed table).
CREATE FUNCTION pg_temp.close(p_prefix text, p_now timestamptz) RETURNS void LANGUAGE plpgsql AS
$$ DECLARE v_ids bigint[]; v_id bigint; BEGIN
   v_ids := ARRAY(SELECT subscription_id FROM billing.subscription_request WHERE idempotency_key LIKE p_prefix || '%');
   FOREACH v_id IN ARRAY v_ids LOOP PERFORM billing.cancel_subscription(v_id, false, p_now); END LOOP;
END $$;

SELECT billing.upsert_plan('T_M', 1000, 'USD', 'MONTH');
SELECT billing.upsert_plan('T_M_FREE', 0, 'USD', 'MONTH');

SELECT is(billing.create_due_invoices(500, '2026-01-01Z'), 0, 'nothing due: 0');
SELECT throws_ok($$SELECT billing.create_due_invoices(0, '2026-01-01Z')$$, 'BL422', NULL, 'batch size 0: BL422');

-- Renewal and catch-up -------------------------------------------------------------------------
SELECT billing.create_subscription('t06-a', 6001, 'T_M', '2026-01-31 15:00Z');
SELECT max(subscription_id) FILTER (WHERE idempotency_key = 't06-a') AS t06_a FROM billing.subscription_request \gset
SELECT is(billing.create_due_invoices(500, '2026-02-28 14:59:59Z'), 0, 'not due one second before the period end');
-- Three boundaries (Feb 28, Mar 31, Apr 30) passed while the job was down: one per call.
SELECT is(billing.create_due_invoices(500, '2026-05-01Z'), 1, 'catch-up call 1');
SELECT results_eq(
    format($$SELECT kind, status, period_start, period_end, amount, due_at, next_attempt_at FROM billing.invoice
       WHERE subscription_id = %1$s AND kind = 'RENEWAL'$$, :t06_a),
    $$VALUES ('RENEWAL', 'OPEN', '2026-02-28 15:00Z'::timestamptz, '2026-03-31 15:00Z'::timestamptz, 1000::bigint,
              '2026-05-01Z'::timestamptz, '2026-05-01Z'::timestamptz)$$,
    'an OPEN RENEWAL invoice for the next period, due now');
SELECT is(billing.create_due_invoices(500, '2026-05-01Z'), 1, 'catch-up call 2');
SELECT is(billing.create_due_invoices(500, '2026-05-01Z'), 1, 'catch-up call 3');
SELECT is(billing.create_due_invoices(500, '2026-05-01Z'), 0, 'caught up');
SELECT results_eq(
    format($$SELECT period_start, period_end FROM billing.invoice WHERE subscription_id = %1$s ORDER BY period_start$$, :t06_a),
    $$VALUES ('2026-01-31 15:00Z'::timestamptz, '2026-02-28 15:00Z'::timestamptz),
             ('2026-02-28 15:00Z'::timestamptz, '2026-03-31 15:00Z'::timestamptz),
             ('2026-03-31 15:00Z'::timestamptz, '2026-04-30 15:00Z'::timestamptz),
             ('2026-04-30 15:00Z'::timestamptz, '2026-05-31 15:00Z'::timestamptz)$$,
    'no period skipped, none billed twice, month ends without drift');
SELECT results_eq(
    format($$SELECT current_period_start, current_period_end, period_number, version, status FROM billing.get_subscription(%1$s)$$, :t06_a),
    $$VALUES ('2026-04-30 15:00Z'::timestamptz, '2026-05-31 15:00Z'::timestamptz, 4, 4::bigint, 'ACTIVE')$$,
    'the period advanced three times and every renewal bumped the version');
SELECT is((SELECT current_period_end FROM billing.subscription WHERE id = :t06_a),
          billing.period_end('2026-01-31 15:00Z', 'MONTH', 1, 4, 'UTC'), 'period end = period_end(anchor, ..., period_number)');
-- The unique key is the last safety net: a period cannot be billed twice even by a bug.
INSERT INTO billing.invoice (subscription_id, customer_id, kind, period_start, period_end, subtotal, amount, currency,
                             status, due_at, next_attempt_at, created_at, plan_id, plan_price, billing_interval, interval_count)
SELECT :t06_a, 6001, 'RENEWAL', '2026-05-31 15:00Z', '2026-06-30 15:00Z', 1000, 1000, 'USD',
       'OPEN', '2026-05-01Z', '2026-05-01Z', '2026-05-01Z', plan_id, 1000, 'MONTH', 1
  FROM billing.subscription WHERE id = :t06_a;
SELECT throws_ok($$SELECT billing.create_due_invoices(500, '2026-06-01Z')$$, '23505', NULL,
                 'a second invoice for one period violates invoice_one_per_period');
DELETE FROM billing.invoice WHERE subscription_id = :t06_a AND period_start = '2026-05-31 15:00Z';
SELECT pg_temp.close('t06-a', '2026-05-02Z');

-- Batch size, PAST_DUE, CANCELED ---------------------------------------------------------------
SELECT billing.create_subscription('t06-b' || n, 6100 + n, 'T_M', '2027-01-10Z') FROM generate_series(1, 3) n;
SELECT max(subscription_id) FILTER (WHERE idempotency_key = 't06-b1') AS t06_b1, max(subscription_id) FILTER (WHERE idempotency_key = 't06-b3') AS t06_b3 FROM billing.subscription_request \gset
UPDATE billing.subscription SET status = 'PAST_DUE' WHERE id = :t06_b1;
SELECT billing.cancel_subscription(:t06_b3, false, '2027-01-11Z');
SELECT is(billing.create_due_invoices(1, '2027-02-10Z'), 1, 'batch size bounds the claim');
SELECT is(billing.create_due_invoices(500, '2027-02-10Z'), 1, 'the rest on the next call');
SELECT is(billing.create_due_invoices(500, '2027-02-10Z'), 0, 'a canceled subscription is not renewed');
SELECT is((SELECT count(*) FROM billing.invoice WHERE subscription_id = :t06_b1 AND kind = 'RENEWAL'), 1::bigint,
          'a PAST_DUE subscription is still renewed');
SELECT is((SELECT status FROM billing.subscription WHERE id = :t06_b1), 'PAST_DUE', 'and stays PAST_DUE');
SELECT pg_temp.close('t06-b', '2027-02-11Z');

-- Cancel at period end -------------------------------------------------------------------------
SELECT billing.create_subscription('t06-c', 6201, 'T_M', '2028-03-01Z');
SELECT max(subscription_id) FILTER (WHERE idempotency_key = 't06-c') AS t06_c FROM billing.subscription_request \gset
SELECT billing.cancel_subscription(:t06_c, true, '2028-03-05Z');
SELECT is(billing.create_due_invoices(500, '2028-03-31Z'), 0, 'flagged but not yet at period end');
SELECT is(billing.create_due_invoices(500, '2028-04-01Z'), 1, 'at period end it is handled');
SELECT results_eq(format($$SELECT status, cancel_reason, canceled_at, version FROM billing.get_subscription(%1$s)$$, :t06_c),
                  $$VALUES ('CANCELED', 'PERIOD_END', '2028-04-01Z'::timestamptz, 3::bigint)$$,
                  'canceled instead of renewed');
SELECT is((SELECT count(*) FROM billing.invoice WHERE subscription_id = :t06_c AND kind = 'RENEWAL'), 0::bigint,
          'no renewal invoice');
SELECT is((SELECT status FROM billing.invoice WHERE subscription_id = :t06_c AND kind = 'INITIAL'), 'OPEN',
          'its unpaid invoice billed a month served: still owed (issue 26 #3)');
SELECT results_eq(format($$SELECT payload::jsonb -> 'data' ->> 'reason', payload ->> 'subject' FROM billing.outbox_event
                     WHERE event_type = 'SubscriptionCanceled' AND aggregate_id = %1$s$$, :t06_c),
                  format($$SELECT 'PERIOD_END', 'subscription/' || %1$s$$, :t06_c), 'SubscriptionCanceled written');

-- Credit ---------------------------------------------------------------------------------------
SELECT billing.create_subscription('t06-d' || n, 6301, 'T_M', '2029-01-15Z') FROM generate_series(1, 2) n;
SELECT billing._grant_credit(6301, 'USD', 2500, 'PRORATION', NULL, NULL, '2029-01-20Z');
SELECT billing._grant_credit(6301, 'EUR', 9999, 'PRORATION', NULL, NULL, '2029-01-20Z');
SELECT is(billing.create_due_invoices(500, '2029-02-15Z'), 2, 'both subscriptions of the customer in one batch');
SELECT results_eq(
    $$SELECT subtotal, credit_applied, amount, status, next_attempt_at IS NULL FROM billing.invoice
       WHERE customer_id = 6301 AND kind = 'RENEWAL' ORDER BY subscription_id$$,
    $$VALUES (1000::bigint, 1000::bigint, 0::bigint, 'PAID', true), (1000::bigint, 1000::bigint, 0::bigint, 'PAID', true)$$,
    'renewals covered by credit are PAID at once and never charged');
-- (one-shard reads as query texts: on Citus a SELECT of one shard is sent whole to its node, pgTAP's call too)
SELECT results_eq($$SELECT count(*) FROM billing.outbox_event e JOIN billing.invoice i ON e.customer_id = i.customer_id AND e.aggregate_id = i.id
                     WHERE e.event_type = 'InvoicePaid' AND i.customer_id = 6301$$, $$VALUES (2::bigint)$$, 'and announced with InvoicePaid');
SELECT results_eq($$SELECT balance FROM billing.credit_balance WHERE customer_id = 6301 AND currency = 'USD'$$, $$VALUES (500::bigint)$$,
          'the credit left stays');
SELECT is(billing.create_due_invoices(500, '2029-03-15Z'), 2, 'next period');
SELECT results_eq(
    $$SELECT credit_applied, amount, status FROM billing.invoice
       WHERE customer_id = 6301 AND kind = 'RENEWAL' AND period_start >= '2029-03-15Z' ORDER BY subscription_id$$,
    $$VALUES (500::bigint, 500::bigint, 'OPEN'), (0::bigint, 1000::bigint, 'OPEN')$$,
    'the last 500 of credit is spent on the first invoice, never below zero');
SELECT results_eq(
    $$SELECT currency::text, balance, (SELECT sum(amount) FROM billing.credit_entry e WHERE e.customer_id = b.customer_id
                                        AND e.currency = b.currency)::bigint
        FROM billing.credit_balance b WHERE customer_id = 6301 ORDER BY currency$$,
    $$VALUES ('EUR', 9999::bigint, 9999::bigint), ('USD', 0::bigint, 0::bigint)$$,
    'credit is per currency and the ledger sums to the balance');
SELECT pg_temp.close('t06-d', '2029-03-15Z');  -- at the period's start: none of it served, voided
SELECT results_eq($$SELECT balance FROM billing.credit_balance WHERE customer_id = 6301 AND currency = 'USD'$$, $$VALUES (500::bigint)$$,
          'voiding an invoice gives its credit back');
-- A free plan: nothing to charge, PAID at once.
SELECT billing.create_subscription('t06-e', 6401, 'T_M_FREE', '2030-01-01Z');
SELECT max(subscription_id) FILTER (WHERE idempotency_key = 't06-e') AS t06_e FROM billing.subscription_request \gset
SELECT is((SELECT status FROM billing.invoice WHERE subscription_id = :t06_e), 'PAID', 'a zero invoice is PAID at once');

-- The per-row path (create_due_invoices on Citus, where its statement cannot run; renew_in_shard) --
-- Same subscriptions renewed by the statement, then (rolled back) by _renew_rows: the same
-- invoices, credit, subscription states and events. A customer with two subscriptions and credit,
-- one canceled at period end (its unpaid invoice voided), one PAST_DUE.
SELECT pg_temp.close('t06-e', '2030-01-02Z');
SELECT billing.create_subscription('t06-r' || n, 6500 + least(n, 2), 'T_M', '2031-01-10Z') FROM generate_series(1, 4) n;
SELECT max(subscription_id) FILTER (WHERE idempotency_key = 't06-r3') AS t06_r3, max(subscription_id) FILTER (WHERE idempotency_key = 't06-r4') AS t06_r4 FROM billing.subscription_request \gset
SELECT billing._grant_credit(6501, 'USD', 700, 'PRORATION', NULL, NULL, '2031-01-20Z');
SELECT billing.cancel_subscription(:t06_r3, true, '2031-01-20Z');
UPDATE billing.subscription SET status = 'PAST_DUE' WHERE id = :t06_r4;
CREATE TEMP VIEW renewal_effects AS
SELECT 'invoice' AS what, r.idempotency_key AS sub, concat_ws(' ', i.kind, i.status, i.period_start, i.period_end, i.subtotal,
       i.credit_applied, i.amount, i.tax_amount, i.next_attempt_at, i.due_at) AS state
  FROM billing.invoice i JOIN billing.subscription_request r ON r.customer_id = i.customer_id AND r.subscription_id = i.subscription_id
 WHERE r.idempotency_key LIKE 't06-r%'
UNION ALL
SELECT 'subscription', r.idempotency_key, concat_ws(' ', s.status, s.current_period_start, s.current_period_end,
       s.period_number, s.version, s.cancel_reason, s.period_price)
  FROM billing.subscription s JOIN billing.subscription_request r ON r.customer_id = s.customer_id AND r.subscription_id = s.id
 WHERE r.idempotency_key LIKE 't06-r%'
UNION ALL
SELECT 'event', r.idempotency_key, e.event_type || ' ' || ((e.payload::jsonb -> 'data') - 'invoiceId'::text)::text
  FROM billing.outbox_event e
  JOIN billing.invoice i ON e.aggregate_type = 'invoice' AND i.customer_id = e.customer_id AND i.id = e.aggregate_id
  JOIN billing.subscription_request r ON r.customer_id = i.customer_id AND r.subscription_id = i.subscription_id
 WHERE r.idempotency_key LIKE 't06-r%' AND e.created_at >= '2031-02-10Z'
UNION ALL
SELECT 'credit', c.customer_id::text, concat_ws(' ', c.currency, c.balance) FROM billing.credit_balance c WHERE c.customer_id IN (6501, 6502);
SAVEPOINT by_statement;
SELECT is(billing.create_due_invoices(500, '2031-02-10 12:00Z'), 4, 'the statement: 4 renewed or canceled');
SELECT string_agg(concat_ws('|', what, sub, state), E'\n' ORDER BY concat_ws('|', what, sub, state)) AS by_statement FROM renewal_effects \gset
ROLLBACK TO SAVEPOINT by_statement;
SELECT is(billing._renew_rows(500, '2031-02-10 12:00Z'), 4, 'the per-row path: the same 4');
SELECT is((SELECT string_agg(concat_ws('|', what, sub, state), E'\n' ORDER BY concat_ws('|', what, sub, state)) FROM renewal_effects), :'by_statement',
          'the per-row path: the same invoices, credit, subscriptions and events as the statement');
SELECT is(billing._renew_rows(500, '2031-02-10 12:00Z'), 0, 'the per-row path: nothing due twice');
SELECT pg_temp.close('t06-r', '2031-02-11Z');

SELECT * FROM finish();
ROLLBACK;
