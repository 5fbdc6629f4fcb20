-- 830_coupon_per_customer: a coupon's limit per customer (max_redemptions_per_customer, migration
-- 0830; docs/lifecycle.md "Coupons"): enforced on every redemption path (apply_coupon,
-- create_subscription, create_subscriptions, import_subscriptions), BL409 past it; a redemption
-- replaced or ended still counts (remove and apply again never resets it); NULL keeps no limit; the
-- limit is per customer (another customer redeems it too). The race of two redemptions by one
-- customer at once: driver/tests/test_sql_races.py.
BEGIN;
SET LOCAL ROLE billing_owner;  -- on Citus, reads of shards in the writers' role (see 200_plans_customers)
SELECT plan(20);

-- (counts and ids read through EXECUTE: on Citus a statement naming one customer's shard is run
-- whole on its worker, pgTAP's call with it)
CREATE FUNCTION pg_temp.n(p_query text) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    v bigint;
BEGIN
    EXECUTE p_query INTO v;
    RETURN v;
END
$$;
CREATE FUNCTION pg_temp.sid(p_key text) RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN
    RETURN pg_temp.n(format('SELECT subscription_id FROM billing.subscription_request WHERE idempotency_key = %L', p_key));
END
$$;

SELECT billing.upsert_plan('CPC_M', 1000, 'USD', 'MONTH', 1, '2026-01-01Z');
SELECT billing.upsert_plan('CPC_B', 500, 'USD', 'MONTH', 1, '2026-01-01Z');
SELECT is((billing.upsert_coupon('CPC_ONE', 50, NULL, NULL, 'forever', NULL, NULL, NULL, NULL, 1)).max_redemptions_per_customer, 1,
          'upsert_coupon keeps max_redemptions_per_customer');
SELECT is((billing.upsert_coupon('CPC_ANY', 10, NULL, NULL, 'forever')).max_redemptions_per_customer, NULL,
          'without it: no limit per customer (NULL)');
SELECT throws_ok($$SELECT billing.upsert_coupon('CPC_BAD', 10, NULL, NULL, 'forever', NULL, NULL, NULL, NULL, 0)$$,
                 'BL422', NULL, 'a limit per customer below 1 is refused');
SELECT billing.upsert_coupon('CPC_TWO', 5, NULL, NULL, 'once', NULL, NULL, NULL, NULL, 2);

-- create_subscription with the coupon: once per customer -------------------------------------------
SELECT lives_ok($$SELECT billing.create_subscription('cpc-1', 83001, 'CPC_M', '2026-03-01Z', 0, 'CPC_ONE')$$,
                'the first redemption by a customer');
SELECT throws_ok($$SELECT billing.create_subscription('cpc-2', 83001, 'CPC_M', '2026-03-01Z', 0, 'CPC_ONE')$$,
                 'BL409', NULL, 'a second signup of the same customer with it: BL409');
SELECT is(pg_temp.n($q$SELECT count(*) FROM billing.subscription WHERE customer_id = 83001$q$), 1::bigint, 'and nothing of it was made');
SELECT lives_ok($$SELECT billing.create_subscription('cpc-3', 83002, 'CPC_M', '2026-03-01Z', 0, 'CPC_ONE')$$,
                'another customer redeems it too (the limit is per customer)');

-- apply_coupon: a redemption replaced or ended still counts ------------------------------------------
SELECT billing.create_subscription('cpc-4', 83001, 'CPC_B', '2026-03-01Z');
SELECT throws_ok($$SELECT billing.apply_coupon(pg_temp.sid('cpc-4'),
                                               'CPC_ONE', '2026-03-02Z')$$,
                 'BL409', NULL, 'apply_coupon on another subscription of the same customer: BL409');
-- customer 83002 replaces its coupon with another, then asks for the first one back on a new subscription
SELECT billing.apply_coupon(pg_temp.sid('cpc-3'),
                            'CPC_ANY', '2026-03-02Z');
SELECT is(pg_temp.n($q$SELECT count(*) FROM billing.coupon_redemption WHERE customer_id = 83002 AND coupon_code = 'CPC_ONE' AND ended_at IS NOT NULL$q$),
          1::bigint, 'the replaced redemption is kept, ended');
SELECT billing.create_subscription('cpc-5', 83002, 'CPC_B', '2026-03-02Z');
SELECT throws_ok($$SELECT billing.apply_coupon(pg_temp.sid('cpc-5'),
                                               'CPC_ONE', '2026-03-03Z')$$,
                 'BL409', NULL, 'replaced, it still counts: no second redemption');
SELECT throws_ok($$SELECT billing.apply_coupon(pg_temp.sid('cpc-3'),
                                               'CPC_ONE', '2026-03-03Z')$$,
                 'BL409', NULL, 'nor back on the subscription it was removed from');
SELECT is(pg_temp.n($q$SELECT count(*) FROM billing.coupon_redemption WHERE customer_id = 83002 AND coupon_code = 'CPC_ONE'$q$), 1::bigint,
          'one redemption of it by customer 83002, ever');
SELECT is(pg_temp.n($q$SELECT times_redeemed FROM billing.coupon WHERE code = 'CPC_ONE'$q$), 2::bigint, 'the coupon counted two (one per customer)');

-- a limit of two: two subscriptions of one customer, not three -----------------------------------------
SELECT billing.create_subscription('cpc-t' || g, 83003, 'CPC_M', '2026-03-01Z', 0, 'CPC_TWO') FROM generate_series(1, 2) g;
SELECT throws_ok($$SELECT billing.create_subscription('cpc-t3', 83003, 'CPC_M', '2026-03-01Z', 0, 'CPC_TWO')$$,
                 'BL409', NULL, 'the third of a limit of two: BL409');

-- create_subscriptions in bulk: the batch's rows count too, all or nothing --------------------------------
SELECT throws_ok($$SELECT billing.create_subscriptions('[{"idempotency_key": "cpc-b1", "customer_id": 83004, "plan_code": "CPC_M", "coupon_code": "CPC_ONE"},
                                                        {"idempotency_key": "cpc-b2", "customer_id": 83004, "plan_code": "CPC_M", "coupon_code": "CPC_ONE"}]',
                                                      '2026-03-01Z')$$,
                 'BL409', NULL, 'two rows of one customer with a once-per-customer coupon in one batch: BL409');
SELECT is(pg_temp.n($q$SELECT count(*) FROM billing.subscription WHERE customer_id = 83004$q$), 0::bigint, 'nothing of the batch was made');
SELECT is((SELECT count(*) FROM billing.create_subscriptions('[{"idempotency_key": "cpc-b3", "customer_id": 83004, "plan_code": "CPC_M", "coupon_code": "CPC_ONE"},
                                                              {"idempotency_key": "cpc-b4", "customer_id": 83005, "plan_code": "CPC_M", "coupon_code": "CPC_ONE"}]',
                                                            '2026-03-01Z')), 2::bigint, 'one each for two customers: both made');

-- import_subscriptions: the source's redemptions count against the limit here ------------------------------
SELECT billing.upsert_customer(83006, 'UTC');
SELECT throws_ok($$SELECT * FROM billing.import_subscriptions('[
    {"external_id": "cpc_i1", "customer_id": 83006, "plan_code": "CPC_M", "current_period_start": "2026-02-15T00:00:00Z",
     "current_period_end": "2026-03-15T00:00:00Z", "coupon_code": "CPC_ONE"},
    {"external_id": "cpc_i2", "customer_id": 83006, "plan_code": "CPC_M", "current_period_start": "2026-02-15T00:00:00Z",
     "current_period_end": "2026-03-15T00:00:00Z", "coupon_code": "CPC_ONE"}]', '2026-03-10Z')$$,
                 'BL409', NULL, 'an import of two redemptions by one customer of a once-per-customer coupon: BL409');
SELECT throws_ok($$SELECT * FROM billing.import_subscriptions('[
    {"external_id": "cpc_i3", "customer_id": 83001, "plan_code": "CPC_M", "current_period_start": "2026-02-15T00:00:00Z",
     "current_period_end": "2026-03-15T00:00:00Z", "coupon_code": "CPC_ONE"}]', '2026-03-10Z')$$,
                 'BL409', NULL, 'an import for a customer who redeemed it here already: BL409');
SELECT is((SELECT count(*) FROM billing.import_subscriptions('[
    {"external_id": "cpc_i4", "customer_id": 83006, "plan_code": "CPC_M", "current_period_start": "2026-02-15T00:00:00Z",
     "current_period_end": "2026-03-15T00:00:00Z", "coupon_code": "CPC_ONE"}]', '2026-03-10Z')), 1::bigint,
          'one for a customer who has none: imported');

SELECT * FROM finish();
ROLLBACK;
