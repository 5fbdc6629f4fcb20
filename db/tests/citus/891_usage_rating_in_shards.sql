-- citus/891_usage_rating_in_shards: the usage rating per shard group on the cluster (89_usage_rating_shards:
-- claim_usage_in_shard + rate_usage_in_shard on the node holding each group, the set statement of
-- 81_usage_rating_set on the group's shards, the customers' usage locks held on the coordinator
-- meanwhile) rates exactly what the rating one subscription at a time rates (_rate_subscription on
-- the coordinator, the path rate_usage takes on Citus, itself equal to the single node's set-based
-- statement: 721_usage_rating_set), on 721's world: every aggregation and pricing model, edge hours,
-- two periods at once, exclusive and inclusive tax, credit, coupons, a plan change inside a period, a
-- cancellation, then late events (adjustment lines for the earlier span) and a second rating. The
-- per-group calls are other sessions (dblink), so the state is committed: the world is built twice,
-- for two sets of customers (8911.. and 8921..) with the same history, one rated by each path, and
-- their effects compared field by field with the customer and row ids left out. A third set (8901..),
-- rated by billing.rate_usage on the coordinator (admin, the demo: the set statement per group on its
-- node through _rate_usage_group, force-delegated; the rest one at a time), before the others (the
-- lowest customer ids are due first), compared the same way. Run by `make test-citus` only (its
-- single-node form, group 0: 890_usage_rating_in_shard).
\set ON_ERROR_STOP 1
SELECT plan(23);
SET ROLE billing_owner;
SET citus.multi_shard_modify_mode TO 'sequential';

-- the world (db/tests/fixtures/usage_world*.sql, docs/testing.md "Shared fixtures"): catalogue c891,
-- then three sets of its customers with the same history: a (8911..8918, subscriptions c891a-8911 ..,
-- temp table c891a), b (8921..8928, c891b) and c (8901..8908, c891c)
\set w c891
\ir ../fixtures/usage_world.sql
\set batch 10000
\set set a
\set base 8910
\ir ../fixtures/usage_world_customers.sql
\set set b
\set base 8920
\ir ../fixtures/usage_world_customers.sql
\set set c
\set base 8900
\ir ../fixtures/usage_world_customers.sql

RESET citus.multi_shard_modify_mode;
RESET ROLE;

-- What a set's ratings wrote, without the ids: 721's state() over one set of customers, its external
-- ids without the set's prefix, customers as their offset.
CREATE FUNCTION pg_temp.state(p_base bigint, p_prefix text) RETURNS jsonb LANGUAGE plpgsql AS $$
BEGIN
    RETURN (SELECT jsonb_build_object(
      'invoices', (SELECT jsonb_agg(jsonb_build_object('s', replace(c.external_id, p_prefix || (p_base / 10)::text, ''), 'start', i.period_start, 'end', i.period_end,
                          'subtotal', i.subtotal, 'credit', i.credit_applied, 'amount', i.amount, 'currency', i.currency,
                          'status', i.status, 'tax', i.tax_amount, 'included', i.tax_included, 'detail', i.tax_detail,
                          'plan', i.plan_id, 'quantity', i.quantity, 'price', i.plan_price, 'due', i.due_at,
                          'paid', i.paid_at, 'next', i.next_attempt_at, 'discount', i.discount_amount, 'coupon', i.coupon_code)
                          ORDER BY c.external_id, i.period_start)
                     FROM billing.invoice i JOIN billing.subscription c ON c.customer_id = i.customer_id AND c.id = i.subscription_id
                    WHERE i.kind = 'USAGE' AND i.customer_id BETWEEN p_base + 1 AND p_base + 8),
      'lines', (SELECT jsonb_agg(jsonb_build_object('s', replace(c.external_id, p_prefix || (p_base / 10)::text, ''), 'invoice', i.period_start, 'meter', l.meter_code,
                          'q', l.usage_quantity, 'plan', l.plan_id, 'unit', l.unit_price, 'n', l.quantity,
                          'start', l.span_start, 'end', l.span_end, 'gross', l.gross, 'discount', l.discount, 'net', l.net,
                          'tax', l.tax, 'inclusive', l.tax_inclusive, 'currency', l.currency, 'kind', l.kind,
                          'basis', jsonb_build_array(l.basis_start, l.basis_gross, l.basis_net), 'coupon', l.coupon_code)
                          ORDER BY c.external_id, l.span_start, l.meter_code, l.created_at, l.net)
                     FROM billing.service_line l JOIN billing.subscription c ON c.customer_id = l.customer_id AND c.id = l.subscription_id
                     JOIN billing.invoice i ON i.customer_id = l.customer_id AND i.id = l.invoice_id
                    WHERE l.item = 'USAGE' AND l.customer_id BETWEEN p_base + 1 AND p_base + 8),
      'ratings', (SELECT jsonb_agg(jsonb_build_object('s', replace(c.external_id, p_prefix || (p_base / 10)::text, ''), 'meter', r.meter_code, 'start', r.span_start,
                          'end', r.span_end, 'plan', r.plan_id, 'q', r.quantity, 'amount', r.amount, 'billed', r.billed,
                          'at', r.rated_at, 'invoiced', r.invoice_id IS NOT NULL, 'line', r.line_id IS NOT NULL)
                          ORDER BY c.external_id, r.span_start, r.meter_code, r.rated_at)
                     FROM billing.usage_rating r JOIN billing.subscription c ON c.customer_id = r.customer_id AND c.id = r.subscription_id
                    WHERE r.customer_id BETWEEN p_base + 1 AND p_base + 8),
      'cursors', (SELECT jsonb_agg(jsonb_build_object('s', replace(c.external_id, p_prefix || (p_base / 10)::text, ''), 'until', u.rated_until, 'late', u.late_since,
                          'finished', u.finished, 'due', u.due_at, 'at', u.updated_at) ORDER BY c.external_id)
                     FROM billing.usage_cursor u JOIN billing.subscription c ON c.customer_id = u.customer_id AND c.id = u.subscription_id
                    WHERE u.customer_id BETWEEN p_base + 1 AND p_base + 8),
      'credit', (SELECT jsonb_agg(jsonb_build_object('c', b.customer_id - p_base, 'balance', b.balance) ORDER BY b.customer_id)
                     FROM billing.credit_balance b WHERE b.customer_id BETWEEN p_base + 1 AND p_base + 8),
      'entries', (SELECT jsonb_agg(jsonb_build_object('c', e.customer_id - p_base, 'amount', e.amount, 'reason', e.reason)
                          ORDER BY e.customer_id, e.subscription_id, e.amount)
                     FROM billing.credit_entry e WHERE e.customer_id BETWEEN p_base + 1 AND p_base + 8),
      'events', (SELECT jsonb_agg(jsonb_build_object('type', o.event_type,
                          'data', (o.payload::jsonb -> 'data') - ARRAY['invoiceId', 'customerId', 'subscriptionId'],
                          'time', o.payload::jsonb -> 'time', 'customer', o.customer_id - p_base)
                          ORDER BY o.customer_id, (o.payload::jsonb -> 'data' ->> 'subscriptionId')::numeric, o.payload::jsonb -> 'data' ->> 'periodStart', o.event_type)
                     FROM billing.outbox_event o
                    WHERE o.customer_id BETWEEN p_base + 1 AND p_base + 8 AND o.aggregate_type = 'invoice'
                      AND o.payload::jsonb -> 'data' ->> 'kind' = 'USAGE')));
END
$$;

-- Set A: one subscription at a time on the coordinator (_rate_subscription each: rate_usage's path on Citus).
CREATE FUNCTION pg_temp.by_rows(p_now timestamptz) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    v_c bigint[] := ARRAY(SELECT customer_id FROM c891a ORDER BY customer_id, id);
    v_s bigint[] := ARRAY(SELECT id FROM c891a ORDER BY customer_id, id);
    v_n bigint := 0;
BEGIN
    PERFORM billing._usage_follow_all(p_now);
    FOR i IN 1 .. cardinality(v_s) LOOP
        v_n := v_n + (billing._rate_subscription(v_c[i], v_s[i], p_now, interval '1 hour') IS NOT NULL)::integer;
    END LOOP;
    RETURN v_n;
END
$$;
-- Set B: per shard group, as the worker does (billing/worker/renewal.py): on each group's node, in one
-- transaction, the claim; the claimed customers' usage locks taken here, on the coordinator (this
-- statement's transaction holds them until every node's transaction has committed); the rating.
CREATE EXTENSION IF NOT EXISTS dblink;
CREATE FUNCTION pg_temp.by_groups(p_now timestamptz) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    v_g record;
    v_c bigint[];
    v_s bigint[];
    v_locked bigint[];
    v_n bigint := 0;
BEGIN
    FOR v_g IN SELECT * FROM groups_891 ORDER BY shard_group LOOP
        PERFORM dblink_connect('t891', v_g.conninfo);
        PERFORM dblink_exec('t891', 'BEGIN');
        SELECT coalesce(array_agg(t.c ORDER BY t.c, t.s), '{}'), coalesce(array_agg(t.s ORDER BY t.c, t.s), '{}') INTO v_c, v_s
          FROM dblink('t891', format('SELECT customer_id, subscription_id FROM billing.claim_usage_in_shard(%L, %s, 1000, %L, %L)',
                                     't891', v_g.shard_group, p_now, '1 hour')) AS t (c bigint, s bigint);
        v_locked := ARRAY(SELECT l.customer_id FROM billing.lock_usage_customers(v_c) l);
        SELECT coalesce(array_agg(k.c ORDER BY k.c, k.s), '{}'), coalesce(array_agg(k.s ORDER BY k.c, k.s), '{}') INTO v_c, v_s
          FROM unnest(v_c, v_s) AS k (c, s) WHERE k.c = ANY (v_locked);
        v_n := v_n + (SELECT count(t.i) FROM dblink('t891', format(
                          'SELECT invoice_id FROM billing.rate_usage_in_shard(%L, %s, %L, %L, %L, %L)',
                          't891', v_g.shard_group, v_c, v_s, p_now, '1 hour')) AS t (i bigint));
        PERFORM dblink_exec('t891', 'COMMIT');
        PERFORM dblink_disconnect('t891');
    END LOOP;
    RETURN v_n;
END
$$;
UPDATE billing.shard_lease SET holder = NULL, lease_until = NULL, leased_at = NULL WHERE holder IS NOT NULL;
DELETE FROM billing.shard_worker;
CREATE TEMP TABLE groups_891 AS
SELECT l.shard_group, format('host=%s port=%s dbname=%s user=postgres', l.node_name, l.node_port, current_database()) AS conninfo
  FROM billing.lease_shard_groups('t891', 10000, interval '1 day', '2026-05-01T12:00:00Z') l;
SELECT cmp_ok((SELECT count(*) FROM groups_891), '>', 1::bigint, 'the rating worker holds every group, on both workers');

-- May: two periods at once; set C first, by rate_usage on the coordinator (a batch of as many as set C
-- has due: the lowest customer ids due come first)
SET ROLE billing_owner;
SELECT billing._usage_follow_all('2026-05-01T12:00:00Z');  -- (every set's cursors, as each path makes them: due counted below)
SELECT array_agg(r.customer_id ORDER BY r.customer_id, r.subscription_id) AS c_rated, count(r.invoice_id) AS c_may
  FROM billing.rate_usage((SELECT count(*)::integer FROM billing._usage_due(10000, '2026-05-01T12:00:00Z', interval '1 hour') d
                             WHERE d.customer_id < 8910), '2026-05-01T12:00:00Z', interval '1 hour') r \gset
SELECT pg_temp.by_rows('2026-05-01T12:00:00Z') AS a_may \gset
RESET ROLE;
SELECT pg_temp.by_groups('2026-05-01T12:00:00Z') AS b_may \gset
SELECT is(:b_may::bigint, :a_may::bigint, 'May: as many USAGE invoices per group as one at a time (' || :a_may || ')');
SELECT is(:'c_rated'::bigint[], ARRAY(SELECT customer_id FROM c891c ORDER BY customer_id, id), 'May: rate_usage on the coordinator looked at set C''s 9 subscriptions');
SELECT is(:c_may::bigint, :a_may::bigint, 'May: as many USAGE invoices by rate_usage on the coordinator as one at a time');
SELECT is((SELECT sum((a.args ->> 'set_based')::integer) FROM billing.audit_log a
            WHERE a.function = 'rate_usage' AND (a.args ->> 'now')::timestamptz = '2026-05-01T12:00:00Z'),
          7::bigint, 'rate_usage on the coordinator: the set statement per group rated the 7 live subscriptions with whole-period segments');
SELECT is((SELECT sum((a.args ->> 'set_based')::integer) FROM billing.audit_log a
            WHERE a.function = 'rate_usage_in_shard' AND a.args ->> 'worker' = 't891' AND (a.args ->> 'now')::timestamptz = '2026-05-01T12:00:00Z'),
          7::bigint, 'the set statement on the groups'' shards rated the 7 live subscriptions with whole-period segments');
-- late events, June's renewal and rating
SELECT is(pg_temp.late(8910, 'a') + pg_temp.late(8920, 'b') + pg_temp.late(8900, 'c'), 6::bigint, 'two late events in each set');
SELECT billing.create_due_invoices(10000, '2026-06-01T10:20:31Z') IS NOT NULL AS renewed \gset
SELECT lease_until IS NOT NULL AS leased FROM billing.lease_shard_groups('t891', 10000, interval '1 day', '2026-06-01T12:00:00Z') LIMIT 1 \gset
SET ROLE billing_owner;
SELECT count(r.invoice_id) AS c_june
  FROM billing.rate_usage((SELECT count(*)::integer FROM billing._usage_due(10000, '2026-06-01T12:00:00Z', interval '1 hour') d
                             WHERE d.customer_id < 8910), '2026-06-01T12:00:00Z', interval '1 hour') r \gset
SELECT pg_temp.by_rows('2026-06-01T12:00:00Z') AS a_june \gset
RESET ROLE;
SELECT pg_temp.by_groups('2026-06-01T12:00:00Z') AS b_june \gset
SELECT is(:b_june::bigint, :a_june::bigint, 'June: as many USAGE invoices per group as one at a time (' || :a_june || ')');
SELECT is(:c_june::bigint, :a_june::bigint, 'June: as many USAGE invoices by rate_usage on the coordinator as one at a time');

SELECT pg_temp.state(8910, 'c891a-') AS by_rows \gset
SELECT pg_temp.state(8920, 'c891b-') AS by_groups \gset
SELECT pg_temp.state(8900, 'c891c-') AS by_rate_usage \gset
SELECT is(:'by_rate_usage'::jsonb -> 'invoices', :'by_rows'::jsonb -> 'invoices', 'rate_usage on the coordinator: the same USAGE invoices');
SELECT is(:'by_rate_usage'::jsonb -> 'lines', :'by_rows'::jsonb -> 'lines', 'rate_usage on the coordinator: the same USAGE lines');
SELECT is(:'by_rate_usage'::jsonb - 'invoices' - 'lines', :'by_rows'::jsonb - 'invoices' - 'lines',
          'rate_usage on the coordinator: the same ratings, cursors, credit and events');
SELECT is(:'by_groups'::jsonb -> 'invoices', :'by_rows'::jsonb -> 'invoices', 'per group: the same USAGE invoices (tax, credit, coupon, status)');
SELECT is(:'by_groups'::jsonb -> 'lines', :'by_rows'::jsonb -> 'lines',
          'per group: the same USAGE lines (quantities, amounts, discounts, tax; the plan change''s two segments; the late adjustment lines)');
SELECT is(:'by_groups'::jsonb - 'invoices' - 'lines', :'by_rows'::jsonb - 'invoices' - 'lines',
          'per group: the same ratings, cursors, credit and events');
SELECT ok(jsonb_array_length(:'by_groups'::jsonb -> 'lines') > 40
          AND (SELECT count(*) FROM jsonb_array_elements(:'by_groups'::jsonb -> 'lines') x WHERE x ->> 'start' < '2026-04' AND x ->> 'invoice' >= '2026-05') > 0
          AND (SELECT count(DISTINCT x ->> 'plan') FROM jsonb_array_elements(:'by_groups'::jsonb -> 'lines') x WHERE x ->> 's' = '6') = 2
          AND (SELECT count(*) FROM jsonb_array_elements(:'by_groups'::jsonb -> 'lines') x WHERE (x ->> 'discount')::bigint > 0) > 0,
          'the world compared is not empty: late adjustment lines of March on a later invoice, the two plans of the change, discounts');
SELECT pg_temp.by_groups('2026-06-01T12:30:00Z') AS again \gset
SELECT is(pg_temp.state(8920, 'c891b-'), :'by_groups'::jsonb, 'per group again: nothing due, nothing billed twice');

-- What this suite leased, released (the next suites must not find its worker alive).
UPDATE billing.shard_lease SET holder = NULL, lease_until = NULL, leased_at = NULL WHERE holder = 't891';
DELETE FROM billing.shard_worker WHERE worker = 't891';
SELECT * FROM finish();
