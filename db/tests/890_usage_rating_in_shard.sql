-- 890_usage_rating_in_shard: the usage rating per shard group (89_usage_rating_shards) on one
-- PostgreSQL, group 0 (the tables themselves): claim_usage_in_shard + rate_usage_in_shard rate exactly
-- what rate_usage rates (81_usage_rating_set's statement, its static form), on 721's world (every
-- aggregation and pricing model, edge hours, two periods at once, exclusive and inclusive tax, credit,
-- coupons, a plan change inside a period, a cancellation, late events and their adjustment lines, a
-- second rating): the world rated by rate_usage inside a savepoint rolled back, then per group, and
-- compared field by field (USAGE invoices, lines, ratings, cursors, credit, events); the set-based
-- statement rated the live ones (its audit row), nothing is rated twice, the lease and the arguments
-- are checked, and the grants. Its Citus form, per group on the cluster's nodes:
-- citus/891_usage_rating_in_shards.
BEGIN;
\ir fixtures/usage_partitions_lock.sql
SET LOCAL ROLE billing_owner;
SELECT plan(15);

-- the world (db/tests/fixtures/usage_world*.sql, docs/testing.md "Shared fixtures"): catalogue c890,
-- customers 8901..8908 (subscriptions c890-8901 .. c890-8908 and c890-8905b, temp table c890), state()
\set w c890
\ir fixtures/usage_world.sql
\set set ''
\set base 8900
\set batch 100
\ir fixtures/usage_world_customers.sql
\ir fixtures/usage_world_state.sql


-- the per-group path in group 0, as the worker calls it (one transaction: claim, then rate)
CREATE FUNCTION pg_temp.by_group(p_now timestamptz) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    v_c bigint[];
    v_s bigint[];
BEGIN
    PERFORM billing.lease_shard_groups('t890', 1, interval '10 minutes', p_now);
    SELECT array_agg(c.customer_id), array_agg(c.subscription_id) INTO v_c, v_s
      FROM billing.claim_usage_in_shard('t890', 0, 1000, p_now, interval '1 hour') c;
    RETURN (SELECT count(*) FROM billing.rate_usage_in_shard('t890', 0, coalesce(v_c, '{}'), coalesce(v_s, '{}'), p_now, interval '1 hour'));
END
$$;

SAVEPOINT by_set;
SELECT count(*) FROM billing.rate_usage(1000, '2026-05-01T12:00:00Z', interval '1 hour');
SELECT pg_temp.late(8900);
SELECT billing.create_due_invoices(100, '2026-06-01T10:20:31Z');
SELECT count(*) FROM billing.rate_usage(1000, '2026-06-01T12:00:00Z', interval '1 hour');
SELECT pg_temp.state() AS by_set \gset
ROLLBACK TO SAVEPOINT by_set;

SELECT throws_ok($$SELECT * FROM billing.claim_usage_in_shard('t890-nobody', 0, 10, '2026-05-01T12:00:00Z')$$, 'BL409',
                 NULL, 'a worker without the group''s lease cannot claim in it');
SELECT billing.lease_shard_groups('t890', 1, interval '10 minutes', '2026-05-01T12:00:00Z');
SELECT throws_ok($$SELECT * FROM billing.rate_usage_in_shard('t890', 0, '{1,2}', '{1}', '2026-05-01T12:00:00Z')$$, 'BL422',
                 NULL, 'the customer and subscription arrays must be of one length');
SELECT throws_ok($$SELECT * FROM billing.claim_usage_in_shard('t890', 7, 10, '2026-05-01T12:00:00Z')$$, 'BL404',
                 NULL, 'an unknown group');
SELECT is(pg_temp.by_group('2026-05-01T12:00:00Z'), 9::bigint, 'May: every subscription of the world rated in group 0');
SELECT is((SELECT (a.args ->> 'set_based')::integer FROM billing.audit_log a
            WHERE a.function = 'rate_usage_in_shard' AND a.args ->> 'worker' = 't890' ORDER BY a.id DESC LIMIT 1), 7,
          'the set-based statement rated the 7 live subscriptions with whole-period segments (the rest one at a time)');
SELECT is(pg_temp.late(8900), 2::bigint, 'two late events');
SELECT billing.create_due_invoices(100, '2026-06-01T10:20:31Z');
SELECT ok(pg_temp.by_group('2026-06-01T12:00:00Z') >= 7, 'June rated (the late ones one at a time)');

SELECT is(pg_temp.state() -> 'invoices', :'by_set'::jsonb -> 'invoices', 'per group: the same USAGE invoices (tax, credit, status) as rate_usage');
SELECT is(pg_temp.state() -> 'lines', :'by_set'::jsonb -> 'lines', 'per group: the same USAGE lines (quantities, amounts, discounts, tax, late adjustments)');
SELECT is(pg_temp.state() - 'invoices' - 'lines', :'by_set'::jsonb - 'invoices' - 'lines',
          'per group: the same ratings, cursors, credit and events');
SELECT is(pg_temp.by_group('2026-06-01T12:30:00Z'), 0::bigint, 'rated again: nothing due, nothing billed twice');

SELECT ok(has_function_privilege('billing_worker', 'billing.claim_usage_in_shard(text, integer, integer, timestamptz, interval, boolean)', 'EXECUTE')
          AND has_function_privilege('billing_worker', 'billing.rate_usage_in_shard(text, integer, bigint[], bigint[], timestamptz, interval)', 'EXECUTE')
          AND has_function_privilege('billing_worker', 'billing.lock_usage_customers(bigint[])', 'EXECUTE'),
          'the worker role rates per group');
SELECT ok(NOT has_function_privilege('billing_api', 'billing.rate_usage_in_shard(text, integer, bigint[], bigint[], timestamptz, interval)', 'EXECUTE')
          AND NOT has_function_privilege('billing_api', 'billing.lock_usage_customers(bigint[])', 'EXECUTE')
          AND NOT has_function_privilege('billing_worker', 'billing._rate_usage_set_in_shard(integer, bigint[], bigint[], timestamptz, interval)', 'EXECUTE'),
          'the API cannot, nor anyone the private statement');

SELECT * FROM finish();
ROLLBACK;
