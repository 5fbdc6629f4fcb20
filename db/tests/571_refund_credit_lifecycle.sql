-- 571_refund_credit_lifecycle: the lifecycle's credit for unused time (a pause, seats removed, a
-- change without proration) follows the same bound as a plan change's (docs/money.md section 6):
-- computed from what the customer kept of the period, never more than it has not given back, and
-- a refund leaves out what went back as credit. Each case in its own June (30 days).
BEGIN;
SELECT plan(9);

-- One user for the fixtures and the API's SECURITY DEFINER calls: on Citus a transaction may not
-- touch a placement another user modified in it (docs/scaling.md).
SET LOCAL ROLE billing_owner;

-- PL/pgSQL, and IMMUTABLE for the ids: see 510_charging (on Citus a SQL function reading every shard
-- with a parameter cannot be planned, and a temporary function's call must be folded in on the
-- coordinator).
CREATE FUNCTION pg_temp.sid(p_key text) RETURNS bigint LANGUAGE plpgsql IMMUTABLE AS
$$ BEGIN RETURN (SELECT subscription_id FROM billing.subscription_request WHERE idempotency_key = p_key); END $$;
CREATE FUNCTION pg_temp.inv(p_key text) RETURNS bigint LANGUAGE plpgsql IMMUTABLE AS
$$ DECLARE v_sub bigint := pg_temp.sid(p_key);
   BEGIN RETURN (SELECT max(id) FROM billing.invoice WHERE subscription_id = v_sub AND kind = 'INITIAL'); END $$;
CREATE FUNCTION pg_temp.pay(p_key text, p_at timestamptz) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    v_sub bigint := pg_temp.sid(p_key);
    v_paid bigint := 0;
    c record;
BEGIN
    FOR c IN SELECT * FROM billing.claim_charges('t44', 1000, interval '5 minutes', p_at) LOOP
        IF (SELECT i.subscription_id FROM billing.invoice i WHERE i.customer_id = c.customer_id AND i.id = c.invoice_id) = v_sub THEN
            PERFORM billing.record_payment_result(c.idempotency_key, 'SUCCEEDED', 'ch_' || c.idempotency_key, NULL, p_at);
            v_paid := v_paid + 1;
        END IF;
    END LOOP;
    RETURN v_paid;
END
$$;
CREATE FUNCTION pg_temp.credit(p_customer bigint) RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN
    RETURN coalesce((SELECT sum(balance) FROM billing.credit_balance WHERE customer_id = p_customer), 0)::bigint
         + coalesce((SELECT sum(amount) FROM billing.credit_pending WHERE customer_id = p_customer AND status = 'PENDING'), 0)::bigint;
END
$$;

SELECT billing.upsert_plan('RCL_SEAT', 1000, 'USD', 'MONTH');
SELECT billing.upsert_customer(g, 'UTC') FROM generate_series(44001, 44006) g;

-- A pause credits the unused rest: nothing after a whole refund, from what was kept after half.
SELECT billing.create_subscription('t44-a', 44001, 'RCL_SEAT', '2051-06-01Z', 0, NULL, 3);
SELECT pg_temp.pay('t44-a', '2051-06-01Z');
SELECT billing.refund_invoice(pg_temp.inv('t44-a'), 3000, NULL, '2051-06-02Z');
SELECT billing.pause_subscription(pg_temp.sid('t44-a'), NULL, '2051-06-16Z');
SELECT is(pg_temp.credit(44001), 0::bigint, 'a pause after a whole refund credits nothing');

SELECT billing.create_subscription('t44-b', 44002, 'RCL_SEAT', '2052-06-01Z', 0, NULL, 3);
SELECT pg_temp.pay('t44-b', '2052-06-01Z');
SELECT billing.refund_invoice(pg_temp.inv('t44-b'), 1500, NULL, '2052-06-02Z');
SELECT billing.pause_subscription(pg_temp.sid('t44-b'), NULL, '2052-06-16Z');
SELECT is(pg_temp.credit(44002), 750::bigint, 'a pause after half refunded credits half of the unused half (750)');

SELECT billing.create_subscription('t44-c', 44003, 'RCL_SEAT', '2053-06-01Z', 0, NULL, 3);
SELECT pg_temp.pay('t44-c', '2053-06-01Z');
SELECT billing.pause_subscription(pg_temp.sid('t44-c'), NULL, '2053-06-16Z');
SELECT is(pg_temp.credit(44003), 1500::bigint, 'a pause credits the unused half (1500)');
SELECT throws_ok($$SELECT billing.refund_invoice(pg_temp.inv('t44-c'), 1501, NULL, '2053-06-17Z')$$, 'BL422', NULL,
                 'then a refund leaves the pause''s credit out');
SELECT lives_ok($$SELECT billing.refund_invoice(pg_temp.inv('t44-c'), 1500, NULL, '2053-06-17Z')$$, 'the rest is refundable');

-- Seats removed credit like a downgrade.
SELECT billing.create_subscription('t44-d', 44004, 'RCL_SEAT', '2054-06-01Z', 0, NULL, 3);
SELECT pg_temp.pay('t44-d', '2054-06-01Z');
SELECT billing.refund_invoice(pg_temp.inv('t44-d'), 3000, NULL, '2054-06-02Z');
SELECT billing.set_quantity(pg_temp.sid('t44-d'), 1, '2054-06-16Z');
SELECT is(pg_temp.credit(44004), 0::bigint, 'seats removed after a whole refund credit nothing');

SELECT billing.create_subscription('t44-e', 44005, 'RCL_SEAT', '2055-06-01Z', 0, NULL, 3);
SELECT pg_temp.pay('t44-e', '2055-06-01Z');
SELECT billing.set_quantity(pg_temp.sid('t44-e'), 1, '2055-06-16Z');
SELECT is(pg_temp.credit(44005), 1000::bigint, 'two of three seats removed at half month credit 1000');
SELECT throws_ok($$SELECT billing.refund_invoice(pg_temp.inv('t44-e'), 2001, NULL, '2055-06-17Z')$$, 'BL422', NULL,
                 'then a refund leaves that credit out');

-- A change without proration credits nothing, whatever was refunded.
SELECT billing.upsert_plan('RCL_LO', 100, 'USD', 'MONTH');
SELECT billing.create_subscription('t44-f', 44006, 'RCL_SEAT', '2056-06-01Z');
SELECT pg_temp.pay('t44-f', '2056-06-01Z');
SELECT billing.change_plan(pg_temp.sid('t44-f'), 'RCL_LO', '2056-06-16Z', NULL, 'now', false);
SELECT lives_ok($$SELECT billing.refund_invoice(pg_temp.inv('t44-f'), 1000, NULL, '2056-06-17Z')$$,
                'an unprorated change gave nothing back: the whole charge is refundable');

SELECT * FROM finish();
ROLLBACK;
