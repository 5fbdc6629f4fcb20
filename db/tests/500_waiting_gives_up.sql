-- 500_waiting_gives_up: an invoice waiting for a payment method is given up at the end of its
-- dunning span, as exhausted dunning ends (db/functions/50_charging.sql, docs/providers.md). The
-- default schedule's delays add up to 9 days (1 + 3 + 5).
BEGIN;
SELECT plan(16);

-- One user for the fixtures and the API's SECURITY DEFINER calls: on Citus a transaction may not
-- touch a placement another user modified in it (docs/scaling.md).
SET LOCAL ROLE billing_owner;

-- PL/pgSQL, and IMMUTABLE for the ids: see 510_charging (on Citus a SQL function reading every shard
-- with a parameter cannot be planned, and a temporary function's call must be folded in on the
-- coordinator).
CREATE FUNCTION pg_temp.sid(p_key text) RETURNS bigint LANGUAGE plpgsql IMMUTABLE AS
$$ BEGIN RETURN (SELECT subscription_id FROM billing.subscription_request WHERE idempotency_key = p_key); END $$;
CREATE FUNCTION pg_temp.inv(p_key text, p_kind text DEFAULT 'INITIAL') RETURNS bigint LANGUAGE plpgsql IMMUTABLE AS
$$ DECLARE v_sub bigint := pg_temp.sid(p_key);
   BEGIN RETURN (SELECT max(id) FROM billing.invoice WHERE subscription_id = v_sub AND kind = p_kind); END $$;
CREATE FUNCTION pg_temp.events(p_type text, p_id bigint) RETURNS bigint LANGUAGE plpgsql AS
$$ BEGIN RETURN (SELECT count(*) FROM billing.outbox_event WHERE event_type = p_type AND aggregate_id = p_id); END $$;
-- Claims with the stripe provider and answers every claim of the customer with p_outcome.
CREATE FUNCTION pg_temp.answer(p_customer bigint, p_outcome text, p_hard boolean, p_at timestamptz) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_answered bigint := 0;
    c record;
BEGIN
    FOR c IN SELECT * FROM billing.claim_charges('t42', 100, interval '5 minutes', p_at, 'stripe') x
              WHERE x.customer_id = p_customer LOOP
        PERFORM billing.record_payment_result(c.idempotency_key, p_outcome, 'pi_' || c.idempotency_key,
                                              CASE WHEN p_hard THEN 'stolen_card' END, p_at, p_hard);
        v_answered := v_answered + 1;
    END LOOP;
    RETURN v_answered;
END
$$;

SELECT billing.upsert_plan('WG_M', 3000, 'USD', 'MONTH');
SELECT billing.upsert_plan('WG_HI', 6000, 'USD', 'MONTH');
SELECT billing.upsert_customer(g, 'UTC') FROM generate_series(42001, 42005) g;

-- -- never given a method ---------------------------------------------------------------------
SELECT billing.create_subscription('t42-a', 42001, 'WG_M', '2042-06-01Z');
SELECT pg_temp.answer(42001, 'SUCCEEDED', false, '2042-06-01Z');
SELECT results_eq($$SELECT status, waiting_for, give_up_at FROM billing.invoice WHERE id = pg_temp.inv('t42-a')$$,
                  $$VALUES ('OPEN', 'PAYMENT_METHOD', '2042-06-10Z'::timestamptz)$$,
                  'an invoice without a method waits, to be given up 9 days (the dunning span) later');
SELECT is(billing.give_up_waiting_invoices(100, '2042-06-09 23:59Z'), 0, 'not before');
SELECT is(billing.give_up_waiting_invoices(100, '2042-06-10Z'), 1, 'then given up');
SELECT results_eq($$SELECT i.status, i.waiting_for, s.status, s.cancel_reason
                      FROM billing.invoice i JOIN billing.subscription s ON s.customer_id = i.customer_id AND s.id = i.subscription_id
                     WHERE i.id = pg_temp.inv('t42-a')$$,
                  $$VALUES ('FAILED', NULL::text, 'CANCELED', 'DUNNING_EXHAUSTED')$$,
                  'FAILED, and its subscription canceled as exhausted dunning does');
SELECT is(pg_temp.events('InvoicePaymentFailed', pg_temp.inv('t42-a')) + pg_temp.events('InvoiceFailed', pg_temp.inv('t42-a')),
          2::bigint, 'with InvoicePaymentFailed (final) and InvoiceFailed');
SELECT is(pg_temp.events('SubscriptionCanceled', pg_temp.sid('t42-a')), 1::bigint, 'and SubscriptionCanceled');
SELECT is(billing.give_up_waiting_invoices(100, '2042-06-11Z'), 0, 'once');

-- -- a hard decline: counted from the first decline, kept when it waits again ---------------------
SELECT billing.set_payment_method(42002, 'stripe', 'cus_2', 'pm_2a', 'visa', '4242', 12, 2045, '2042-06-01Z');
SELECT billing.create_subscription('t42-b', 42002, 'WG_M', '2042-06-01Z');
SELECT pg_temp.answer(42002, 'DECLINED', true, '2042-06-01Z');
SELECT billing.set_payment_method(42002, 'stripe', 'cus_2', 'pm_2b', 'visa', '1111', 12, 2045, '2042-06-05Z');
SELECT pg_temp.answer(42002, 'DECLINED', true, '2042-06-05Z');
SELECT results_eq($$SELECT status, waiting_for, attempt_count, give_up_at FROM billing.invoice WHERE id = pg_temp.inv('t42-b')$$,
                  $$VALUES ('OPEN', 'PAYMENT_METHOD', 2, '2042-06-10Z'::timestamptz)$$,
                  'two hard declines: it waits, still to be given up 9 days after the first one');
SELECT is(billing.give_up_waiting_invoices(100, '2042-06-10Z'), 1, 'given up then');
SELECT is((SELECT status FROM billing.subscription WHERE id = pg_temp.sid('t42-b')), 'CANCELED',
          'the subscription ends as dunning would have ended it');

-- -- a method in time pays it ---------------------------------------------------------------------
SELECT billing.create_subscription('t42-c', 42003, 'WG_M', '2042-06-01Z');
SELECT pg_temp.answer(42003, 'SUCCEEDED', false, '2042-06-01Z');
SELECT billing.set_payment_method(42003, 'stripe', 'cus_3', 'pm_3', 'visa', '4242', 12, 2045, '2042-06-08Z');
SELECT pg_temp.answer(42003, 'SUCCEEDED', false, '2042-06-08Z');
SELECT is(billing.give_up_waiting_invoices(100, '2042-06-20Z'), 0, 'a method given in time: nothing to give up');
SELECT is((SELECT status FROM billing.invoice WHERE id = pg_temp.inv('t42-c')), 'PAID', 'the invoice is paid');

-- -- a canceled subscription: never OPEN forever ----------------------------------------------------
SELECT billing.set_payment_method(42004, 'stripe', 'cus_4', 'pm_4', 'visa', '4242', 12, 2045, '2042-06-01Z');
SELECT billing.create_subscription('t42-d', 42004, 'WG_M', '2042-06-01Z');
SELECT pg_temp.answer(42004, 'DECLINED', true, '2042-06-01Z');
SELECT billing.cancel_subscription(pg_temp.sid('t42-d'), false, '2042-06-02Z');
SELECT is((SELECT waiting_for FROM billing.invoice WHERE id = pg_temp.inv('t42-d')), 'PAYMENT_METHOD',
          'canceled in dunning: the served days stay owed, waiting for a method');
SELECT is(billing.give_up_waiting_invoices(100, '2042-06-10Z'), 1, 'given up at the end of its span');
SELECT results_eq($$SELECT (SELECT status FROM billing.invoice WHERE id = pg_temp.inv('t42-d')),
                            pg_temp.events('InvoiceWrittenOff', pg_temp.inv('t42-d'))$$,
                  $$VALUES ('FAILED', 1::bigint)$$, 'FAILED and written off (InvoiceWrittenOff), not OPEN forever');

-- -- a waiting upgrade is reverted ------------------------------------------------------------------
SELECT billing.set_payment_method(42005, 'stripe', 'cus_5', 'pm_5', 'visa', '4242', 12, 2045, '2042-06-01Z');
SELECT billing.create_subscription('t42-e', 42005, 'WG_M', '2042-06-01Z');
SELECT pg_temp.answer(42005, 'SUCCEEDED', false, '2042-06-01Z');
SELECT billing.change_plan(pg_temp.sid('t42-e'), 'WG_HI', '2042-06-16Z');
SELECT pg_temp.answer(42005, 'DECLINED', true, '2042-06-16Z');
SELECT billing.give_up_waiting_invoices(100, '2042-06-25Z');
-- (the plan's code by a join with the plans: on Citus a function reading a table, called in a query
-- over a distributed table, would run on its shards)
SELECT results_eq($$SELECT p.code, s.status FROM billing.subscription s JOIN billing.plan p ON p.id = s.plan_id
                     WHERE s.id = pg_temp.sid('t42-e')$$,
                  $$VALUES ('WG_M', 'ACTIVE')$$,
                  'an upgrade given up is reverted: the plan paid for is kept, the subscription ACTIVE again');

SELECT * FROM finish();
ROLLBACK;
