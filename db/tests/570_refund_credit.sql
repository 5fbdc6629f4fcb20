-- 570_refund_credit: refunds and credit for unused time share one bound per period (docs/money.md,
-- "Refunds and credit"): a refunded period earns no more downgrade credit than the customer kept,
-- and money returned as credit is not refunded again, in every order. Each case runs in its own
-- June (30 days), so the numbers are simple: 3000 a month, half a month left is 1500.
BEGIN;
SELECT plan(38);

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
-- Pays every invoice of the subscription due at p_at (the simulator, charged by customer id).
CREATE FUNCTION pg_temp.pay(p_key text, p_at timestamptz) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    v_sub bigint := pg_temp.sid(p_key);
    v_paid bigint := 0;
    c record;
BEGIN
    FOR c IN SELECT * FROM billing.claim_charges('t41', 1000, interval '5 minutes', p_at) LOOP
        IF (SELECT i.subscription_id FROM billing.invoice i WHERE i.customer_id = c.customer_id AND i.id = c.invoice_id) = v_sub THEN
            PERFORM billing.record_payment_result(c.idempotency_key, 'SUCCEEDED', 'ch_' || c.idempotency_key, NULL, p_at);
            v_paid := v_paid + 1;
        END IF;
    END LOOP;
    RETURN v_paid;
END
$$;
CREATE FUNCTION pg_temp.balance(p_customer bigint) RETURNS bigint LANGUAGE plpgsql AS
$$ BEGIN RETURN (SELECT coalesce(sum(balance), 0)::bigint FROM billing.credit_balance WHERE customer_id = p_customer); END $$;
CREATE FUNCTION pg_temp.pending(p_customer bigint) RETURNS bigint LANGUAGE plpgsql AS
$$ BEGIN RETURN (SELECT coalesce(sum(amount), 0)::bigint FROM billing.credit_pending
                  WHERE customer_id = p_customer AND status = 'PENDING'); END $$;
-- Given back for a subscription: its refunds not FAILED plus its change credit not reversed.
CREATE FUNCTION pg_temp.given_back(p_key text) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    v_sub bigint := pg_temp.sid(p_key);
BEGIN
    RETURN (SELECT coalesce(sum(r.amount), 0) FROM billing.refund r
              JOIN billing.invoice i ON i.customer_id = r.customer_id AND i.id = r.invoice_id
             WHERE i.subscription_id = v_sub AND r.status <> 'FAILED')::bigint
         + (SELECT coalesce(sum(amount), 0) FROM billing.credit_pending
             WHERE subscription_id = v_sub AND status <> 'REVERSED')::bigint
         + (SELECT coalesce(sum(amount), 0) FROM billing.credit_entry
             WHERE subscription_id = v_sub AND reason = 'PRORATION' AND period_start IS NOT NULL)::bigint;
END
$$;
CREATE FUNCTION pg_temp.billed(p_key text) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    v_sub bigint := pg_temp.sid(p_key);
BEGIN
    RETURN (SELECT coalesce(sum(subtotal), 0)::bigint FROM billing.invoice WHERE subscription_id = v_sub AND status = 'PAID');
END
$$;

SELECT billing.upsert_plan('RC_HI', 3000, 'USD', 'MONTH');
SELECT billing.upsert_plan('RC_LO', 1000, 'USD', 'MONTH');
SELECT billing.upsert_plan('RC_FREE', 0, 'USD', 'MONTH');
SELECT billing.upsert_plan('RC_YEAR', 30000, 'USD', 'YEAR');
SELECT billing.upsert_plan('RC_DAY', 100, 'USD', 'DAY');
SELECT billing.upsert_customer(g, 'UTC') FROM generate_series(41001, 41013) g;
SELECT billing.upsert_coupon('RC_BIG', NULL, 100000, 'USD', 'forever', NULL);

-- -- 1. refund, then downgrade --------------------------------------------------------------------
-- Whole refund in flight: the period kept nothing, so its unused half credits nothing.
SELECT billing.create_subscription('t41-a', 41001, 'RC_HI', '2031-06-01Z');
SELECT pg_temp.pay('t41-a', '2031-06-01Z');
SELECT billing.refund_invoice(pg_temp.inv('t41-a'), 3000, NULL, '2031-06-05Z');
SELECT billing.change_plan(pg_temp.sid('t41-a'), 'RC_LO', '2031-06-16Z');
SELECT is(pg_temp.balance(41001) + pg_temp.pending(41001), 0::bigint,
          'a period refunded in full (refund still in flight) earns no downgrade credit');
SELECT billing.change_plan(pg_temp.sid('t41-a'), 'RC_FREE', '2031-06-20Z');
SELECT is(pg_temp.balance(41001), 0::bigint, 'nor does a second downgrade of the same period');

-- Half refunded: the credit is computed from the 1500 kept (750 for the unused half, less 500 for
-- the half at the new plan), not from the 3000 invoiced.
SELECT billing.create_subscription('t41-b', 41002, 'RC_HI', '2032-06-01Z');
SELECT pg_temp.pay('t41-b', '2032-06-01Z');
SELECT billing.record_refund_result(r.idempotency_key, 'SUCCEEDED', 're_b', NULL, '2032-06-06Z')
  FROM billing.refund_invoice(pg_temp.inv('t41-b'), 1500, NULL, '2032-06-05Z') r;
SELECT billing.change_plan(pg_temp.sid('t41-b'), 'RC_LO', '2032-06-16Z');
SELECT is(pg_temp.balance(41002), 250::bigint, 'half refunded: the downgrade credits 750 - 500 = 250, from what was kept');
SELECT throws_ok($$SELECT billing.refund_invoice(pg_temp.inv('t41-b'), 1251, NULL, '2032-06-17Z')$$, 'BL422', NULL,
                 'then at most 3000 - 1500 refunded - 250 credited = 1250 can still be refunded');
SELECT lives_ok($$SELECT billing.refund_invoice(pg_temp.inv('t41-b'), 1250, NULL, '2032-06-17Z')$$,
                'and exactly that can');
SELECT ok(pg_temp.given_back('t41-b') <= pg_temp.billed('t41-b'), 'refunds + credit never exceed what was billed');

-- A refund that FAILED gave nothing back: the downgrade credits in full.
SELECT billing.create_subscription('t41-c', 41003, 'RC_HI', '2033-06-01Z');
SELECT pg_temp.pay('t41-c', '2033-06-01Z');
SELECT billing.record_refund_result(r.idempotency_key, 'FAILED', NULL, 'charge_disputed', '2033-06-06Z')
  FROM billing.refund_invoice(pg_temp.inv('t41-c'), 3000, NULL, '2033-06-05Z') r;
SELECT billing.change_plan(pg_temp.sid('t41-c'), 'RC_LO', '2033-06-16Z');
SELECT is(pg_temp.balance(41003), 1000::bigint, 'a failed refund does not lower the credit (1500 - 500)');

-- -- 2. downgrade, then refund ---------------------------------------------------------------------
SELECT billing.create_subscription('t41-d', 41004, 'RC_HI', '2034-06-01Z');
SELECT pg_temp.pay('t41-d', '2034-06-01Z');
SELECT billing.change_plan(pg_temp.sid('t41-d'), 'RC_LO', '2034-06-16Z');
SELECT is(pg_temp.balance(41004), 1000::bigint, 'the downgrade credits 1000');
SELECT throws_like($$SELECT billing.refund_invoice(pg_temp.inv('t41-d'), 3000, NULL, '2034-06-17Z')$$,
                   '%at most 2000%went back as credit%', 'a refund of the whole charge is refused: 1000 went back as credit');
SELECT lives_ok($$SELECT billing.refund_invoice(pg_temp.inv('t41-d'), 1900, 'rk-41d', '2034-06-17Z')$$,
                'a partial refund within what is left is accepted');
SELECT throws_ok($$SELECT billing.refund_invoice(pg_temp.inv('t41-d'), 101, NULL, '2034-06-17Z')$$, 'BL422', NULL,
                 'partial refunds add up: 1900 in flight + 1000 credited leaves 100');
SELECT is((SELECT amount FROM billing.refund_invoice(pg_temp.inv('t41-d'), 1900, 'rk-41d', '2034-06-18Z')), 1900::bigint,
          'a replayed refund request answers the same refund, whatever the room now');
-- From what was kept: floor(1000 x 1100/3000) = 366 a month, 11 of 30 days left: 134; only 100 is left.
SELECT billing.change_plan(pg_temp.sid('t41-d'), 'RC_FREE', '2034-06-20Z');
SELECT is(pg_temp.balance(41004), 1100::bigint,
          'a second downgrade credits at most what the period has not given back (100 of the 134 computed)');
SELECT is(pg_temp.given_back('t41-d'), pg_temp.billed('t41-d'), 'refunds + credit = billed, never more');

-- The credit pending on an unpaid period counts too: once paid, the refund still leaves it out.
SELECT billing.create_subscription('t41-e', 41005, 'RC_HI', '2035-06-01Z');
SELECT billing.change_plan(pg_temp.sid('t41-e'), 'RC_LO', '2035-06-16Z');
SELECT is(pg_temp.pending(41005), 1000::bigint, 'a downgrade of an unpaid period: credit pending');
SELECT pg_temp.pay('t41-e', '2035-06-17Z');
SELECT is(pg_temp.balance(41005), 1000::bigint, 'released when the period is paid');
SELECT throws_ok($$SELECT billing.refund_invoice(pg_temp.inv('t41-e'), 2001, NULL, '2035-06-18Z')$$, 'BL422', NULL,
                 'the released credit is not refunded again');
SELECT lives_ok($$SELECT billing.refund_invoice(pg_temp.inv('t41-e'), 2000, NULL, '2035-06-18Z')$$, 'the rest is');

-- An upgrade billed the period more: refunds and credit are bounded by both invoices together.
SELECT billing.create_subscription('t41-f', 41006, 'RC_LO', '2036-06-01Z');
SELECT pg_temp.pay('t41-f', '2036-06-01Z');
SELECT billing.change_plan(pg_temp.sid('t41-f'), 'RC_HI', '2036-06-16Z');
SELECT pg_temp.pay('t41-f', '2036-06-16Z');
SELECT is(pg_temp.billed('t41-f'), 2000::bigint, 'month 1000 + upgrade for the second half 1000');
SELECT billing.change_plan(pg_temp.sid('t41-f'), 'RC_FREE', '2036-06-24Z');
SELECT is(pg_temp.balance(41006), 700::bigint, 'downgrade with 7 days left credits 700 of the 3000 price');
SELECT lives_ok($$SELECT billing.refund_invoice(pg_temp.inv('t41-f'), 1000, NULL, '2036-06-25Z')$$,
                'the month''s charge can be refunded in full');
SELECT throws_ok($$SELECT billing.refund_invoice(pg_temp.inv('t41-f', 'PRORATION'), 301, NULL, '2036-06-25Z')$$,
                 'BL422', NULL, 'the upgrade''s charge only to 2000 - 1000 - 700 = 300');
SELECT lives_ok($$SELECT billing.refund_invoice(pg_temp.inv('t41-f', 'PRORATION'), 300, NULL, '2036-06-25Z')$$,
                'and exactly that');

-- -- 3. another period length ----------------------------------------------------------------------
SELECT billing.create_subscription('t41-g', 41007, 'RC_HI', '2037-06-01Z');
SELECT pg_temp.pay('t41-g', '2037-06-01Z');
SELECT billing.refund_invoice(pg_temp.inv('t41-g'), 3000, NULL, '2037-06-02Z');
SELECT billing.change_plan(pg_temp.sid('t41-g'), 'RC_YEAR', '2037-06-16Z');
SELECT results_eq($$SELECT subtotal, credit_applied, amount FROM billing.invoice WHERE id = pg_temp.inv('t41-g', 'PLAN_CHANGE')$$,
                  $$VALUES (30000::bigint, 0::bigint, 30000::bigint)$$,
                  'monthly to yearly after a whole refund: the unused half month is not netted against the year');

SELECT billing.create_subscription('t41-h', 41008, 'RC_HI', '2038-06-01Z');
SELECT pg_temp.pay('t41-h', '2038-06-01Z');
SELECT billing.change_plan(pg_temp.sid('t41-h'), 'RC_YEAR', '2038-06-16Z');
SELECT is((SELECT credit_applied FROM billing.invoice WHERE id = pg_temp.inv('t41-h', 'PLAN_CHANGE')), 1500::bigint,
          'monthly to yearly: the unused half month (1500) is netted against the year');
SELECT throws_ok($$SELECT billing.refund_invoice(pg_temp.inv('t41-h'), 1501, NULL, '2038-06-17Z')$$, 'BL422', NULL,
                 'the month''s charge is refundable only to what was not netted (1500)');

-- -- 4. cancel with credit ------------------------------------------------------------------------
SELECT billing.create_subscription('t41-i', 41009, 'RC_HI', '2039-06-01Z');
SELECT pg_temp.pay('t41-i', '2039-06-01Z');
SELECT billing.change_plan(pg_temp.sid('t41-i'), 'RC_LO', '2039-06-16Z');
SELECT billing.cancel_subscription(pg_temp.sid('t41-i'), false, '2039-06-17Z');
SELECT is(pg_temp.balance(41009), 1000::bigint, 'a canceled subscription''s change credit stays on the balance');
SELECT throws_ok($$SELECT billing.refund_invoice(pg_temp.inv('t41-i'), 2001, NULL, '2039-06-18Z')$$, 'BL422', NULL,
                 'after cancelling, the refund still leaves out what went back as credit');
SELECT lives_ok($$SELECT billing.refund_invoice(pg_temp.inv('t41-i'), 2000, NULL, '2039-06-18Z')$$, 'the rest is refundable');

-- A pending credit reversed (its invoice voided by the cancel) gave nothing back.
SELECT billing.create_subscription('t41-j', 41010, 'RC_HI', '2040-06-01Z');
SELECT pg_temp.pay('t41-j', '2040-06-01Z');
SELECT billing.change_plan(pg_temp.sid('t41-j'), 'RC_YEAR', '2040-06-16Z');
SELECT billing.cancel_subscription(pg_temp.sid('t41-j'), false, '2040-06-16 01:00Z');
SELECT is(pg_temp.balance(41010), 1496::bigint,
          'the year''s invoice bills the hour served (issue 26 #3): the credit it had consumed comes back but for that hour (4)');
SELECT results_eq($$SELECT status, amount - least(unserved, amount) FROM billing.invoice
                     WHERE customer_id = 41010 AND kind = 'PLAN_CHANGE'$$, $$VALUES ('PAID', 0::bigint)$$,
                  'and, nothing left to charge, it is PAID by that credit');
SELECT throws_ok($$SELECT billing.refund_invoice(pg_temp.inv('t41-j'), 1501, NULL, '2040-06-17Z')$$, 'BL422', NULL,
                 'and still cannot be refunded as well');

-- A change to a shorter interval opens a new period inside the old one's span (PLAN_CHANGE, a day):
-- it is that period's money, not the old one's. The month kept 3000 - 1500 credited = 1500; the
-- day's 100 (paid from that credit) counts for the day only (found by driver/tests/test_money_adversary.py).
SELECT billing.create_subscription('t41-l', 41012, 'RC_HI', '2042-06-01Z');
SELECT pg_temp.pay('t41-l', '2042-06-01Z');
SELECT billing.change_plan(pg_temp.sid('t41-l'), 'RC_DAY', '2042-06-16Z');
SELECT throws_like($$SELECT billing.refund_invoice(pg_temp.inv('t41-l'), 1501, NULL, '2042-06-16 01:00Z')$$,
                   '%at most 1500%', 'the month''s charge: at most what the month kept, the new day''s invoice not counted');
SELECT lives_ok($$SELECT billing.refund_invoice(pg_temp.inv('t41-l'), 1500, NULL, '2042-06-16 01:00Z')$$,
                'and exactly that can');
SELECT ok(pg_temp.given_back('t41-l') <= pg_temp.billed('t41-l'), 'refunds + credit never exceed what was billed');

-- A period paid, then given back whole as credit by a pause at its start, billed again by the resume
-- at the same instant (free by a coupon) and raised to 5 seats (owed): the first charge's period kept
-- nothing, and money still owed is none to give back (found by driver/tests/test_money_adversary.py).
SELECT billing.create_subscription('t41-m', 41013, 'RC_DAY', '2044-06-01Z');
SELECT billing.apply_coupon(pg_temp.sid('t41-m'), 'RC_BIG', '2044-06-01Z');
SELECT pg_temp.pay('t41-m', '2044-06-01Z');
SELECT billing.pause_subscription(pg_temp.sid('t41-m'), NULL, '2044-06-01Z');
SELECT billing.resume_subscription(pg_temp.sid('t41-m'), '2044-06-01Z');
SELECT billing.set_quantity(pg_temp.sid('t41-m'), 5, '2044-06-01Z');
SELECT throws_like($$SELECT billing.refund_invoice(pg_temp.inv('t41-m'), 1, NULL, '2044-06-01 00:01Z')$$,
                   '%at most 0%', 'a charge whose period went back as credit is not refunded as well');
SELECT ok(pg_temp.given_back('t41-m') <= pg_temp.billed('t41-m'), 'refunds + credit never exceed what was billed');

-- The engine's own refund of a charge (here: a payment that lands on a canceled subscription)
-- gives back all of it but what already went back as credit.
SELECT billing.create_subscription('t41-k', 41011, 'RC_HI', '2041-06-01Z');
SELECT count(*) FROM billing.claim_charges('t41', 1000, interval '5 minutes', '2041-06-01Z');
SELECT count(*) FROM billing.claim_charges('t41', 1000, interval '5 minutes', '2041-06-02Z');  -- key expired: REVIEW
SELECT billing.change_plan(pg_temp.sid('t41-k'), 'RC_LO', '2041-06-16Z');
SELECT billing.cancel_subscription(pg_temp.sid('t41-k'), false, '2041-06-16 01:00Z');
-- (the keys read first: on Citus a call in a statement over a distributed table would run on its shards)
SELECT billing.record_payment_result(k, 'SUCCEEDED', 'ch_k', NULL, '2041-06-17Z')
  FROM unnest((SELECT array_agg(a.idempotency_key) FROM billing.payment_attempt a WHERE a.invoice_id = pg_temp.inv('t41-k'))) k;
-- (the balance read first, into the query: on Citus a temporary function called in a query over a
-- distributed table would be sent to the workers)
-- Unpaid is unpaid (issue 26 #3, #12): the invoice's own line was ended by the downgrade, and the
-- downgrade's line (its credit waiting on this invoice) is cut at the cancellation: the invoice bills
-- the time served at the terms in force for it (UNSERVED 498: 15 days less an hour at 1000); the late
-- payment, sent for 3000 before the cut, is kept but for that excess (the engine's refund), and
-- releases the change's credit.
SELECT results_eq(format($$SELECT count(r.*), coalesce(sum(r.amount), 0)::bigint, min(r.reason), %s::bigint
                             FROM billing.refund r WHERE r.invoice_id = pg_temp.inv('t41-k')$$,
                         pg_temp.balance(41011)),
                  $$VALUES (1::bigint, 498::bigint, 'SUBSCRIPTION_CANCELED', 1000::bigint)$$,
                  'a late payment of time served on a canceled subscription is kept but the unserved downgraded rest; the change credit it waited for is released');

SELECT * FROM finish();
ROLLBACK;
