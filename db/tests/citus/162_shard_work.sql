-- citus/162_shard_work: claim and work per shard group on the cluster (docs/scaling.md, "Batch
-- claims"): the groups spread over the workers alive (lease_shard_groups' fair share), and
-- charge_claims_in_shard keys and leases a group's invoices on the node holding it exactly as
-- claim_charges does, so the driver's charger takes the same rows; a second claimer in the group
-- takes none of them. The claimers are dblink sessions on the worker node, so the fixtures are
-- committed (no enclosing transaction); the database is make test-citus' own, made fresh each run.
\set ON_ERROR_STOP 1
SELECT plan(15);

-- Leases and workers other committing suites left (this suite's claimers commit through dblink, so
-- it cannot hide them in a transaction): released, so that only this suite's workers count.
UPDATE billing.shard_lease SET holder = NULL, lease_until = NULL, leased_at = NULL WHERE holder IS NOT NULL;
DELETE FROM billing.shard_worker;

\set T '''2028-06-01 12:00Z'''
SELECT billing.upsert_plan('SW_MONTH', 1200, 'USD', 'MONTH', 1, '2026-01-01Z') IS NOT NULL AS plan \gset
INSERT INTO billing.customer (id) SELECT 610000 + g FROM generate_series(1, 64) g;
INSERT INTO billing.subscription (customer_id, plan_id, status, timezone, billing_anchor, current_period_start,
                                  current_period_end, period_price)
SELECT 610000 + g, p.id, 'ACTIVE', 'UTC', '2028-05-01Z', '2028-05-01Z', '2028-06-01Z', 1200
  FROM generate_series(1, 64) g, billing.plan p WHERE p.code = 'SW_MONTH';
INSERT INTO billing.invoice (subscription_id, customer_id, kind, period_start, period_end, subtotal, amount, currency,
                             status, due_at, next_attempt_at, created_at, plan_id, plan_price, billing_interval,
                             interval_count)
SELECT s.id, s.customer_id, 'INITIAL', s.current_period_start, s.current_period_end, 1200, 1200, 'USD', 'OPEN',
       s.current_period_start, s.current_period_start, s.current_period_start, s.plan_id, 1200, 'MONTH', 1
  FROM billing.subscription s WHERE s.customer_id > 610000;

-- The groups spread over the workers alive: alone, w1 takes all 8; w2 arrives (its share is 4, none
-- free yet); at its next call w1 gives back what is beyond its share; then w2 takes it.
SELECT is((SELECT count(*) FROM billing.lease_shard_groups('sw-1', 10000, '30 seconds', :T)), 8::bigint,
          'a worker alone leases every group');
SELECT is((SELECT count(*) FROM billing.lease_shard_groups('sw-2', 10000, '30 seconds', timestamptz :T + interval '1 second')),
          0::bigint, 'a second worker finds every group held');
SELECT results_eq($$SELECT shard_group FROM billing.lease_shard_groups('sw-1', 10000, '30 seconds', timestamptz $$ || quote_literal(:T) || $$ + interval '2 seconds')$$,
                  $$VALUES (1), (2), (3), (4)$$, 'the first gives back what is beyond its share (8 groups / 2 workers)');
SELECT results_eq($$SELECT shard_group FROM billing.lease_shard_groups('sw-2', 10000, '30 seconds', timestamptz $$ || quote_literal(:T) || $$ + interval '3 seconds')$$,
                  $$VALUES (5), (6), (7), (8)$$, 'the second takes them');
SELECT results_eq($$SELECT shard_group, holder FROM billing.shard_groups(timestamptz $$ || quote_literal(:T) || $$ + interval '4 seconds') WHERE shard_group IN (1, 8)$$,
                  $$VALUES (1, 'sw-1'), (8, 'sw-2')$$, 'shard_groups shows each group''s holder');

-- The busiest group of sw-2 and its node.
SELECT g.shard_group AS grp,
       format('host=%s port=%s dbname=%s user=postgres', g.node_name, g.node_port, current_database()) AS conninfo
  FROM billing._shard_groups() g
 WHERE g.shard_group = (SELECT x.shard_group
                          FROM (SELECT s.shardid, (row_number() OVER (ORDER BY s.shardminvalue::bigint))::integer AS shard_group
                                  FROM pg_dist_shard s WHERE s.logicalrelid = 'billing.invoice'::regclass) x
                          JOIN billing.invoice i ON get_shard_id_for_distribution_column('billing.invoice', i.customer_id) = x.shardid
                         WHERE i.customer_id > 610000 AND x.shard_group >= 5
                         GROUP BY x.shard_group ORDER BY count(*) DESC, x.shard_group LIMIT 1) \gset
CREATE TEMP TABLE due AS
SELECT i.customer_id, i.id FROM billing.invoice i
 WHERE i.status = 'OPEN' AND i.next_attempt_at <= :T  -- the fixture's, and any other suite's left due
   AND get_shard_id_for_distribution_column('billing.invoice', i.customer_id) =
       (SELECT s.shardid FROM (SELECT d.shardid, row_number() OVER (ORDER BY d.shardminvalue::bigint) AS n
                                 FROM pg_dist_shard d WHERE d.logicalrelid = 'billing.invoice'::regclass) s WHERE s.n = :grp);
SELECT cmp_ok((SELECT count(*) FROM due), '>=', 4::bigint, 'the chosen group holds several due invoices');

CREATE EXTENSION IF NOT EXISTS dblink;
SELECT dblink_connect('c1', :'conninfo') AS c1 \gset
SELECT throws_like(format('SELECT * FROM dblink(%L, %L) AS t(x bigint)', 'c1',
                          format('SELECT invoice_id FROM billing.charge_claims_in_shard(%L, %s, 10, %L, %L)', 'sw-1', :grp,
                                 interval '5 minutes', timestamptz :T + interval '5 seconds')),
                   '%does not hold the lease%', 'charge_claims_in_shard without the group''s lease is refused');
SELECT throws_like($$SELECT * FROM billing.charge_claims_in_shard('sw-2', $$ || :grp || $$, 10, '5 minutes', timestamptz $$ || quote_literal(:T) || $$ + interval '5 seconds')$$,
                   '%is on node%', 'charge_claims_in_shard on a node that does not hold the group is refused');

-- sw-2 claims 3 of the group on its node, then the rest; each is keyed as claim_charges keys it.
CREATE TEMP TABLE c1 AS SELECT * FROM dblink('c1', format(
    'SELECT customer_id, invoice_id, idempotency_key, lookup FROM billing.charge_claims_in_shard(%L, %s, 3, %L, %L)',
    'sw-2', :grp, interval '5 minutes', timestamptz :T + interval '5 seconds'))
    AS t(customer_id bigint, id bigint, idempotency_key text, lookup boolean);
CREATE TEMP TABLE c2 AS SELECT * FROM dblink('c1', format(
    'SELECT customer_id, invoice_id, idempotency_key, lookup FROM billing.charge_claims_in_shard(%L, %s, 10000, %L, %L)',
    'sw-2', :grp, interval '5 minutes', timestamptz :T + interval '6 seconds'))
    AS t(customer_id bigint, id bigint, idempotency_key text, lookup boolean);
SELECT is((SELECT count(*) FROM c1), 3::bigint, 'a claim takes its batch');
SELECT set_eq('SELECT customer_id, id FROM c1 UNION ALL SELECT customer_id, id FROM c2', 'SELECT * FROM due',
              'the next claim takes the rest, none twice: every due invoice of the group once');
SELECT set_eq('SELECT id, idempotency_key, lookup FROM c1 UNION ALL SELECT id, idempotency_key, lookup FROM c2',
              $$SELECT d.id, n.key_namespace || '-inv-' || d.id || '-try-0' AS k, false AS l FROM due d, billing.installation n$$,
              'each keyed <namespace>-inv-<id>-try-<n>, as claim_charges keys it');
SELECT results_eq($$SELECT count(*), min(a.worker), min(a.claim_count), max(a.claim_count),
                           bool_and(i.next_attempt_at = timestamptz $$ || quote_literal(:T) || $$ + interval '5 minutes 5 seconds'
                                    OR i.next_attempt_at = timestamptz $$ || quote_literal(:T) || $$ + interval '5 minutes 6 seconds')
                      FROM billing.payment_attempt a JOIN billing.invoice i ON i.customer_id = a.customer_id AND i.id = a.invoice_id
                      JOIN due d ON d.customer_id = i.customer_id AND d.id = i.id$$,
                  $$SELECT count(*), 'sw-2'::text, 1, 1, true FROM due$$,
                  'one payment attempt per invoice, and each invoice leased until its claim time plus the lease');

-- Renewals: renew_in_shard on the node renews every due subscription of the group once (one
-- period each, set-based on the group's shards), in its transaction; nothing outside the group.
CREATE TEMP TABLE due_subs AS
SELECT s.customer_id, s.id, s.current_period_end FROM billing.subscription s
 WHERE s.status IN ('ACTIVE', 'PAST_DUE') AND s.current_period_end <= :T
   AND get_shard_id_for_distribution_column('billing.subscription', s.customer_id) =
       (SELECT x.shardid FROM (SELECT d.shardid, row_number() OVER (ORDER BY d.shardminvalue::bigint) AS n
                                 FROM pg_dist_shard d WHERE d.logicalrelid = 'billing.subscription'::regclass) x WHERE x.n = :grp);
CREATE TEMP TABLE renewals_before AS SELECT count(*) AS n FROM billing.invoice WHERE kind = 'RENEWAL';
SELECT is((SELECT t.n FROM dblink('c1', format('SELECT billing.renew_in_shard(%L, %s, 10000, %L)', 'sw-2', :grp,
                                                timestamptz :T + interval '7 seconds')) AS t(n integer)),
          (SELECT count(*)::integer FROM due_subs), 'renew_in_shard renews every due subscription of the group');
SELECT set_eq($$SELECT i.customer_id, i.subscription_id, i.period_start FROM billing.invoice i
                 WHERE i.kind = 'RENEWAL' AND i.created_at = timestamptz $$ || quote_literal(:T) || $$ + interval '7 seconds'$$,
              'SELECT customer_id, id, current_period_end FROM due_subs',
              'one RENEWAL invoice each, for the period that ended, and none outside the group');
SELECT is((SELECT t.n FROM dblink('c1', format('SELECT billing.renew_in_shard(%L, %s, 10000, %L)', 'sw-2', :grp,
                                                timestamptz :T + interval '7 seconds')) AS t(n integer))
          + (SELECT count(*)::integer FROM due_subs d JOIN billing.subscription s ON s.customer_id = d.customer_id AND s.id = d.id
              WHERE s.current_period_end <= :T),
          (SELECT count(*)::integer FROM due_subs d JOIN billing.subscription s ON s.customer_id = d.customer_id AND s.id = d.id
            WHERE s.current_period_end <= :T) * 2,
          'a second call renews only what is still behind (catch-up, one period per call)');

SELECT dblink_disconnect('c1') AS c1_done \gset
-- What this suite leased, released (the next suites must not find its workers alive).
UPDATE billing.shard_lease SET holder = NULL, lease_until = NULL, leased_at = NULL WHERE holder IN ('sw-1', 'sw-2');
DELETE FROM billing.shard_worker WHERE worker IN ('sw-1', 'sw-2');
SELECT * FROM finish();
