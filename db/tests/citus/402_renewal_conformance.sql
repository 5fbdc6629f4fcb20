-- citus/402_renewal_conformance: the renewal's paths on the cluster give the same result from the same
-- state (db/tests/401_renewal_conformance.sql on a single PostgreSQL): create_due_invoices on the
-- coordinator (the per-row path, _renew_rows) and renew_in_shard on the node holding each shard
-- group (_renew_row for the lifecycle's rows, then _renew_batch_in_shard: the renewal statement's
-- text on the group's shards). The renew_in_shard calls are other sessions (dblink), so the state is
-- committed: built twice, for two sets of customers (402001.. and 402101..) with the same history,
-- one renewed by each path; their effects are compared with the customer and row ids left out. The
-- clock (2026) is before any other committing suite's fixture falls due. Run by `make test-citus` only.
\set ON_ERROR_STOP 1
SELECT plan(6);

SELECT billing.upsert_plan('T402_M', 1000, 'USD', 'MONTH', 1, '2026-01-01Z') IS NOT NULL AS m \gset
SELECT billing.upsert_plan('T402_N', 1800, 'USD', 'MONTH', 1, '2026-01-01Z') IS NOT NULL AS n \gset
-- Price history: 1500 until 2026-02-20, then 2500; a period starting 2026-02-10 is billed at 1500.
-- (Each once: the database is make test-citus' own, but a rerun of this file alone must not fail here.)
SELECT count(billing.upsert_plan('T402_P', 1500, 'USD', 'MONTH', 1, '2026-01-01Z')) AS p1
  FROM (SELECT 1 WHERE NOT EXISTS (SELECT 1 FROM billing.plan WHERE code = 'T402_P')) x \gset
SELECT count(billing.upsert_plan('T402_P', 2500, 'USD', 'MONTH', 1, '2026-02-20Z')) AS p2
  FROM (SELECT 1 WHERE (SELECT price_amount FROM billing.plan WHERE code = 'T402_P') = 1500) x \gset
SELECT billing.upsert_coupon('T402_HALF', 50, NULL, NULL, 'once') IS NOT NULL AS c \gset
SELECT billing.upsert_tax_rate('T402_VAT', 'FR', NULL, 'VAT', 2000, false) IS NOT NULL AS vat \gset

-- One set of subscriptions (the same as 401's), for customers p_base + 1 .. p_base + 14.
CREATE FUNCTION pg_temp.fixture(p_base bigint, p_prefix text) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_id bigint;
BEGIN
    PERFORM billing.upsert_customer(p_base + 9);
    PERFORM billing.set_customer_details(p_base + 9, 'Taxed', NULL, NULL, NULL, NULL, NULL, 'FR', NULL);
    PERFORM billing.create_subscription(p_prefix || 'plain', p_base + 1, 'T402_M', '2026-01-10Z');
    PERFORM billing.create_subscription(p_prefix || 'seats', p_base + 2, 'T402_M', '2026-01-10Z', 0, NULL, 3);
    PERFORM billing.create_subscription(p_prefix || 'credit-a', p_base + 3, 'T402_M', '2026-01-10Z');
    PERFORM billing.create_subscription(p_prefix || 'credit-b', p_base + 3, 'T402_M', '2026-01-10 06:00Z');
    PERFORM billing._grant_credit(p_base + 3, 'USD', 1700, 'PRORATION', NULL, NULL, '2026-01-20Z');
    PERFORM billing.create_subscription(p_prefix || 'paid-by-credit', p_base + 5, 'T402_M', '2026-01-10Z');
    PERFORM billing._grant_credit(p_base + 5, 'USD', 5000, 'PRORATION', NULL, NULL, '2026-01-20Z');
    v_id := (billing.create_subscription(p_prefix || 'cancel', p_base + 6, 'T402_M', '2026-01-10Z')).id;
    PERFORM billing.cancel_subscription(v_id, true, '2026-01-20Z');
    v_id := (billing.create_subscription(p_prefix || 'past-due', p_base + 7, 'T402_M', '2026-01-10Z')).id;
    UPDATE billing.subscription SET status = 'PAST_DUE' WHERE customer_id = p_base + 7 AND id = v_id;
    PERFORM billing.create_subscription(p_prefix || 'price-history', p_base + 8, 'T402_P', '2026-01-10Z');
    PERFORM billing.create_subscription(p_prefix || 'taxed', p_base + 9, 'T402_M', '2026-01-10Z');
    PERFORM billing.create_subscription(p_prefix || 'trial-ends', p_base + 10, 'T402_M', '2026-02-01Z', 10);
    PERFORM billing.create_subscription(p_prefix || 'trial-notice', p_base + 11, 'T402_M', '2026-02-20Z', 7);
    v_id := (billing.create_subscription(p_prefix || 'resume', p_base + 12, 'T402_M', '2026-01-10Z')).id;
    PERFORM billing.pause_subscription(v_id, '2026-02-15Z', '2026-01-25Z');
    v_id := (billing.create_subscription(p_prefix || 'coupon', p_base + 13, 'T402_M', '2026-01-10Z')).id;
    PERFORM billing.apply_coupon(v_id, 'T402_HALF', '2026-01-20Z');
    v_id := (billing.create_subscription(p_prefix || 'scheduled', p_base + 14, 'T402_M', '2026-01-10Z')).id;
    PERFORM billing.change_plan(v_id, 'T402_N', '2026-01-20Z', NULL, 'period_end');
END
$$;

-- What a set's renewal left behind, one line per row, customer and row ids left out. PL/pgSQL, the
-- rows gathered into a temporary table first (the joins colocated by customer, pushed down), then
-- ordered and aggregated there on the coordinator.
CREATE TEMP TABLE eff_402 (line text);
CREATE TEMP TABLE eff_402_events (sub text, seq bigint, item text);
CREATE FUNCTION pg_temp.effects(p_base bigint, p_prefix text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    TRUNCATE eff_402, eff_402_events;
    INSERT INTO eff_402
    SELECT concat_ws(' ', 'invoice', substr(r.idempotency_key, length(p_prefix) + 1),
                     (to_jsonb(i) - ARRAY['id', 'subscription_id', 'customer_id'])::text)
      FROM billing.invoice i JOIN billing.subscription_request r ON r.customer_id = i.customer_id AND r.subscription_id = i.subscription_id
     WHERE i.customer_id BETWEEN p_base + 1 AND p_base + 14;
    INSERT INTO eff_402
    SELECT concat_ws(' ', 'subscription', substr(r.idempotency_key, length(p_prefix) + 1),
                     (to_jsonb(s) - ARRAY['id', 'customer_id', 'created_at', 'scheduled_plan_id', 'plan_id'])::text,
                     s.plan_id, s.scheduled_plan_id)
      FROM billing.subscription s JOIN billing.subscription_request r ON r.customer_id = s.customer_id AND r.subscription_id = s.id
     WHERE s.customer_id BETWEEN p_base + 1 AND p_base + 14;
    INSERT INTO eff_402
    SELECT concat_ws(' ', 'credit', b.customer_id - p_base, (to_jsonb(b) - ARRAY['customer_id'])::text)
      FROM billing.credit_balance b WHERE b.customer_id BETWEEN p_base + 1 AND p_base + 14;
    INSERT INTO eff_402
    SELECT concat_ws(' ', 'credit-entry', c.customer_id - p_base,
                     (to_jsonb(c) - ARRAY['id', 'customer_id', 'invoice_id', 'subscription_id'])::text)
      FROM billing.credit_entry c WHERE c.customer_id BETWEEN p_base + 1 AND p_base + 14;
    INSERT INTO eff_402_events
    SELECT substr(r.idempotency_key, length(p_prefix) + 1), coalesce(e.aggregate_seq, e.id),
           concat_ws(':', e.event_type, ((e.payload::jsonb -> 'data') - ARRAY['invoiceId', 'id', 'number', 'customerId', 'subscriptionId'])::text)
      FROM billing.outbox_event e
      LEFT JOIN billing.invoice i ON e.aggregate_type = 'invoice' AND i.customer_id = e.customer_id AND i.id = e.aggregate_id
      JOIN billing.subscription_request r ON r.customer_id = e.customer_id
                                          AND r.subscription_id = coalesce(i.subscription_id, e.aggregate_id)
     WHERE e.customer_id BETWEEN p_base + 1 AND p_base + 14 AND e.created_at >= '2026-02-25Z';
    INSERT INTO eff_402
    SELECT concat_ws(' ', 'events', v.sub, string_agg(v.item, ' / ' ORDER BY v.seq, v.item)) FROM eff_402_events v GROUP BY v.sub;
    RETURN (SELECT string_agg(line, E'\n' ORDER BY line) FROM eff_402);
END
$$;

-- Set A: the coordinator's create_due_invoices (per row on Citus).
-- As the owner of the schema, as the API's SECURITY DEFINER functions run: on Citus a transaction may
-- not touch placements another user modified in it (docs/scaling.md).
SET ROLE billing_owner;
-- One transaction per set (one call): its coupon write (a reference table) follows reads of
-- distributed tables, which Citus allows over one connection per node only.
SET citus.multi_shard_modify_mode TO 'sequential';
SELECT pg_temp.fixture(402000, 't402a-') IS NOT NULL AS a \gset
SELECT billing.create_due_invoices(10000, '2026-02-25Z') AS by_rows_count \gset
RESET ROLE;
RESET citus.multi_shard_modify_mode;
SELECT pg_temp.effects(402000, 't402a-') AS by_rows \gset
SET ROLE billing_owner;
SELECT billing.create_due_invoices(10000, '2026-02-25Z') IS NOT NULL AS again \gset
RESET ROLE;
SELECT is(pg_temp.effects(402000, 't402a-'), :'by_rows'::text, 'create_due_invoices: nothing of this set due twice');

-- Set B: renew_in_shard in every group, each on the node holding it.
SET ROLE billing_owner;
SET citus.multi_shard_modify_mode TO 'sequential';
SELECT pg_temp.fixture(402100, 't402b-') IS NOT NULL AS b \gset
RESET citus.multi_shard_modify_mode;
RESET ROLE;
UPDATE billing.shard_lease SET holder = NULL, lease_until = NULL, leased_at = NULL WHERE holder IS NOT NULL;
DELETE FROM billing.shard_worker;
CREATE EXTENSION IF NOT EXISTS dblink;
CREATE TEMP TABLE groups_402 AS
SELECT l.shard_group, format('host=%s port=%s dbname=%s user=postgres', l.node_name, l.node_port, current_database()) AS conninfo
  FROM billing.lease_shard_groups('conf402', 10000, interval '10 minutes', '2026-02-25Z') l;
SELECT cmp_ok((SELECT count(*) FROM groups_402), '>', 1::bigint, 'the conformance worker holds every group');
SELECT sum(t.n) AS by_shard_count
  FROM groups_402 g, LATERAL dblink(g.conninfo, format('SELECT billing.renew_in_shard(%L, %s, 10000, %L)', 'conf402',
                                                        g.shard_group, '2026-02-25Z')) AS t(n integer) \gset
SELECT pg_temp.effects(402100, 't402b-') AS by_shard \gset
SELECT sum(t.n) IS NOT NULL AS again
  FROM groups_402 g, LATERAL dblink(g.conninfo, format('SELECT billing.renew_in_shard(%L, %s, 10000, %L)', 'conf402',
                                                        g.shard_group, '2026-02-25Z')) AS t(n integer) \gset
SELECT is(pg_temp.effects(402100, 't402b-'), :'by_shard'::text, 'renew_in_shard: nothing of this set due twice');

-- (On make test-citus' fresh database nothing else is due in 2026: both counts are this suite's.)
SELECT is(:by_shard_count::integer, :by_rows_count::integer, 'renew_in_shard handles as many as create_due_invoices (' || :by_rows_count || ')');
SELECT ok(pg_temp.effects(402000, 't402a-') LIKE '%"tax_amount": 200,%' AND pg_temp.effects(402000, 't402a-') LIKE '%InvoicePaid%'
          AND pg_temp.effects(402000, 't402a-') LIKE '%SubscriptionTrialWillEnd%', 'the state covers tax, credit paying a whole invoice and a trial notice');
SELECT is(:'by_shard'::text, :'by_rows'::text,
          'per shard group on the cluster: the same invoices, subscriptions, credit and events as create_due_invoices');

-- What this suite leased, released (the next suites must not find its worker alive).
UPDATE billing.shard_lease SET holder = NULL, lease_until = NULL, leased_at = NULL WHERE holder = 'conf402';
DELETE FROM billing.shard_worker WHERE worker = 'conf402';
SELECT * FROM finish();
