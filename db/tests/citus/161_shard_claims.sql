-- citus/161_shard_claims: the batch claims inside one shard group, on the cluster (docs/scaling.md,
-- "Batch claims"). Two claimers in the same group (the first one's group lease ran out while it was
-- still working) never take the same row, and together they leave nothing due; a leased row comes
-- back when its lease runs out. The claimers are two other sessions (dblink) on the worker holding
-- the group, so the fixtures are committed (no enclosing transaction); the database is make
-- test-citus' own, made fresh each run. Run by `make test-citus` only.
\set ON_ERROR_STOP 1
SELECT plan(16);

-- Leases and workers other committing suites left (this suite's claimers commit through dblink, so
-- it cannot hide them in a transaction): released, so that only this suite's workers count.
UPDATE billing.shard_lease SET holder = NULL, lease_until = NULL, leased_at = NULL WHERE holder IS NOT NULL;
DELETE FROM billing.shard_worker;

-- Fixtures: 48 customers with two subscriptions each, all due; an OPEN invoice and a PENDING event
-- per subscription, all due. T is the claims' clock.
\set T '''2027-03-01 12:00Z'''
\set T2 '''2027-03-01 13:00Z'''
SELECT billing.upsert_plan('SC_MONTH', 1000, 'USD', 'MONTH', 1, '2026-01-01Z') IS NOT NULL AS plan \gset
INSERT INTO billing.customer (id) SELECT 500000 + g FROM generate_series(1, 48) g;
INSERT INTO billing.subscription (customer_id, plan_id, status, timezone, billing_anchor, current_period_start,
                                  current_period_end, period_price)
SELECT 500000 + g, p.id, 'ACTIVE', 'UTC', '2027-01-01Z', '2027-01-01Z', timestamptz '2027-02-01Z' + g * interval '1 minute', 1000
  FROM generate_series(1, 48) g, generate_series(1, 2) k, billing.plan p WHERE p.code = 'SC_MONTH';
INSERT INTO billing.invoice (subscription_id, customer_id, kind, period_start, period_end, subtotal, amount, currency,
                             status, due_at, next_attempt_at, created_at, plan_id, plan_price, billing_interval,
                             interval_count)
SELECT s.id, s.customer_id, 'RENEWAL', s.current_period_start, s.current_period_end, 1000, 1000, 'USD', 'OPEN',
       s.current_period_start, s.current_period_end, s.current_period_start, s.plan_id, 1000, 'MONTH', 1
  FROM billing.subscription s WHERE s.customer_id > 500000;
INSERT INTO billing.outbox_event (event_id, aggregate_type, aggregate_id, event_type, payload, created_at, available_at,
                                  customer_id)
SELECT u, 'subscription', s.id, 'SubscriptionUpdated',
       billing._cloud_event(u, 'SubscriptionUpdated', 'subscription', s.id, '2027-02-01Z',
                            jsonb_build_object('customerId', s.customer_id)), '2027-02-01Z', '2027-02-01Z', s.customer_id
  FROM billing.subscription s, LATERAL (SELECT md5(s.customer_id || '-' || s.id)::uuid AS u) x WHERE s.customer_id > 500000;

-- The group with the most fixture subscriptions, and the node holding it.
CREATE TEMP TABLE group_shard AS
SELECT s.shardid, (pg_catalog.row_number() OVER (ORDER BY s.shardminvalue::bigint))::integer AS shard_group
  FROM pg_dist_shard s WHERE s.logicalrelid = 'billing.subscription'::regclass;
CREATE TEMP TABLE fixture_subs AS
SELECT x.customer_id, x.id, get_shard_id_for_distribution_column('billing.subscription', x.customer_id) AS shardid
  FROM billing.subscription x WHERE x.customer_id > 500000;
SELECT g.shard_group AS grp,
       format('host=%s port=%s dbname=%s user=postgres', g.node_name, g.node_port, current_database()) AS conninfo
  FROM billing._shard_groups() g
 WHERE g.shard_group = (SELECT gs.shard_group FROM fixture_subs f JOIN group_shard gs USING (shardid)
                         GROUP BY gs.shard_group ORDER BY count(*) DESC, gs.shard_group LIMIT 1) \gset
CREATE TEMP TABLE due_subs AS
SELECT f.customer_id, f.id FROM fixture_subs f JOIN group_shard gs USING (shardid) WHERE gs.shard_group = :grp;
SELECT cmp_ok((SELECT count(*) FROM due_subs), '>=', 6::bigint, 'the chosen shard group holds several due subscriptions');

CREATE EXTENSION IF NOT EXISTS dblink;
SELECT dblink_connect('a', :'conninfo') AS a, dblink_connect('b', :'conninfo') AS b \gset
-- Claimer A leases every group for 30 s at T; B leases at T + 1 min, when A's lease has run out.
SELECT count(*) > 0 AS leased FROM billing.lease_shard_groups('claimer-a', 10000, interval '30 seconds', :T) \gset
SELECT is((SELECT count(*) FROM billing.lease_shard_groups('claimer-b', 10000, interval '30 seconds', :T)), 0::bigint,
          'a group another worker holds is not leased');

SELECT throws_like(format('SELECT * FROM dblink(%L, %L) AS t(x int)', 'a',
                          format('SELECT billing.renew_in_shard(%L, %s, 5, %L)', 'claimer-b', :grp, :T)),
                   '%does not hold the lease%', 'a claim without the group''s lease is refused');
SELECT throws_like($$SELECT billing.renew_in_shard('claimer-a', $$ || :grp || $$, 5, $$ || quote_literal(:T) || $$)$$,
                   '%is on node%', 'a claim on a node that does not hold the group is refused');

-- Renewals: renewed under row locks in the claimer's transaction (renew_in_shard: claim and work in
-- one call). A renews 5 and keeps its transaction open; B, in the same group after A's group lease
-- ran out, renews the rest, none of A's. Both roll back: the charges and events below meet the
-- fixtures as they were.
SELECT dblink_exec('a', 'BEGIN') AS a_begin \gset
SELECT n AS a_renewed FROM dblink('a', format('SELECT billing.renew_in_shard(%L, %s, 5, %L)', 'claimer-a', :grp, :T))
    AS t(n int) \gset
CREATE TEMP TABLE ra AS SELECT * FROM dblink('a', format(
    'SELECT customer_id, subscription_id FROM billing.invoice WHERE customer_id > 500000 AND created_at = %L', :T))
    AS t(customer_id bigint, id bigint);
SELECT count(*) > 0 AS b_leased FROM billing.lease_shard_groups('claimer-b', 10000, interval '30 seconds',
                                                                 timestamptz :T + interval '1 minute') \gset
SELECT dblink_exec('b', 'BEGIN') AS b_begin \gset
SELECT n AS b_renewed FROM dblink('b', format('SELECT billing.renew_in_shard(%L, %s, 10000, %L)', 'claimer-b', :grp,
    timestamptz :T + interval '1 minute')) AS t(n int) \gset
CREATE TEMP TABLE rb AS SELECT * FROM dblink('b', format(
    'SELECT customer_id, subscription_id FROM billing.invoice WHERE customer_id > 500000 AND created_at = %L',
    timestamptz :T + interval '1 minute')) AS t(customer_id bigint, id bigint);
SELECT is((SELECT count(*) FROM ra), 5::bigint, 'renewals: A renews its batch of 5');
SELECT is_empty('SELECT * FROM ra INTERSECT SELECT * FROM rb', 'renewals: B renews none of the rows A holds');
SELECT set_eq('SELECT * FROM ra UNION ALL SELECT * FROM rb', 'SELECT * FROM due_subs',
              'renewals: together they renew every due subscription of the group, each once');
SELECT dblink_exec('a', 'ROLLBACK') AS a_rollback, dblink_exec('b', 'ROLLBACK') AS b_rollback \gset

-- Charges and events: leased on the rows. A claims 5 at T (its group lease still held); B, at
-- T + 1 min with the group, gets the rest; then nothing is left to claim until the leases run out.
SELECT count(*) > 0 AS a_again FROM billing.lease_shard_groups('claimer-a', 10000, interval '30 seconds', :T2) \gset
CREATE TEMP TABLE ca AS SELECT * FROM dblink('a', format(
    'SELECT customer_id, invoice_id FROM billing.charge_claims_in_shard(%L, %s, 5, %L, %L)', 'claimer-a', :grp,
    interval '5 minutes', :T2)) AS t(customer_id bigint, id bigint);
CREATE TEMP TABLE oa AS SELECT * FROM dblink('a', format(
    'SELECT customer_id, id FROM billing.claim_outbox_events_in_shard(%L, %s, 5, %L, %L)', 'claimer-a', :grp,
    interval '5 minutes', :T2)) AS t(customer_id bigint, id bigint);
SELECT count(*) > 0 AS b_again FROM billing.lease_shard_groups('claimer-b', 10000, interval '30 seconds',
                                                                timestamptz :T2 + interval '1 minute') \gset
CREATE TEMP TABLE cb AS SELECT * FROM dblink('b', format(
    'SELECT customer_id, invoice_id FROM billing.charge_claims_in_shard(%L, %s, 10000, %L, %L)', 'claimer-b', :grp,
    interval '5 minutes', timestamptz :T2 + interval '1 minute')) AS t(customer_id bigint, id bigint);
CREATE TEMP TABLE ob AS SELECT * FROM dblink('b', format(
    'SELECT customer_id, id FROM billing.claim_outbox_events_in_shard(%L, %s, 10000, %L, %L)', 'claimer-b', :grp,
    interval '5 minutes', timestamptz :T2 + interval '1 minute')) AS t(customer_id bigint, id bigint);
SELECT is((SELECT count(*) FROM ca), 5::bigint, 'charges: A claims its batch of 5');
SELECT is_empty('SELECT * FROM ca INTERSECT SELECT * FROM cb', 'charges: B takes none of the invoices A leased');
SELECT set_eq('SELECT * FROM ca UNION ALL SELECT * FROM cb',
              'SELECT i.customer_id, i.id FROM billing.invoice i JOIN due_subs d ON d.customer_id = i.customer_id AND d.id = i.subscription_id',
              'charges: together they claim every due invoice of the group, each once');
SELECT is((SELECT count(*) FROM oa), 5::bigint, 'events: A claims its batch of 5');
SELECT is_empty('SELECT * FROM oa INTERSECT SELECT * FROM ob', 'events: B takes none of the events A leased');
SELECT set_eq('SELECT * FROM oa UNION ALL SELECT * FROM ob',
              'SELECT e.customer_id, e.id FROM billing.outbox_event e JOIN due_subs d ON d.customer_id = e.customer_id AND d.id = e.aggregate_id',
              'events: together they claim every pending event of the group, each once');
SELECT is((SELECT count(*) FROM dblink('b', format(
              'SELECT 1 FROM billing.charge_claims_in_shard(%L, %s, 10000, %L, %L) UNION ALL
               SELECT 1 FROM billing.claim_outbox_events_in_shard(%L, %s, 10000, %L, %L)',
              'claimer-b', :grp, interval '5 minutes', timestamptz :T2 + interval '1 minute',
              'claimer-b', :grp, interval '5 minutes', timestamptz :T2 + interval '1 minute')) AS t(x int)),
          0::bigint, 'nothing left to claim while the leases hold');

-- A claimer that died: its leases run out and the rows come back, none lost.
SELECT count(*) > 0 AS b_late FROM billing.lease_shard_groups('claimer-b', 10000, interval '30 seconds',
                                                               timestamptz :T2 + interval '10 minutes') \gset
SELECT is((SELECT count(*) FROM dblink('b', format(
              'SELECT 1 FROM billing.charge_claims_in_shard(%L, %s, 10000, %L, %L)', 'claimer-b', :grp,
              interval '5 minutes', timestamptz :T2 + interval '10 minutes')) AS t(x int)),
          (SELECT count(*) FROM ca) + (SELECT count(*) FROM cb),
          'charges: every invoice comes back once its lease has run out');
SELECT is((SELECT count(*) FROM dblink('b', format(
              'SELECT 1 FROM billing.claim_outbox_events_in_shard(%L, %s, 10000, %L, %L)', 'claimer-b', :grp,
              interval '5 minutes', timestamptz :T2 + interval '10 minutes')) AS t(x int)),
          (SELECT count(*) FROM oa) + (SELECT count(*) FROM ob),
          'events: every event comes back once its lease has run out');

SELECT dblink_disconnect('a') AS a_done, dblink_disconnect('b') AS b_done \gset
-- What this suite leased, released (the next suites must not find its workers alive).
UPDATE billing.shard_lease SET holder = NULL, lease_until = NULL, leased_at = NULL WHERE holder IN ('claimer-a', 'claimer-b');
DELETE FROM billing.shard_worker WHERE worker IN ('claimer-a', 'claimer-b');
SELECT * FROM finish();
