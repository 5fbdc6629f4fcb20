-- citus/641_events: the outbox, the relay's per-group calls and the cross-customer reads on the
-- cluster (docs/scaling.md, "Events, webhooks and reads on Citus"). An aggregate's events written on
-- worker 2, worker 1 and then the coordinator take ids of decreasing ranges (each node its own
-- range of the sequence): the order key (aggregate_seq) keeps the order they were written in, for
-- the coordinator's API (claim_outbox_events' per-row path) and for the relay's claim inside a
-- group. The writes on the workers are other sessions (dblink), so the fixtures are committed; the
-- database is make test-citus' own, made fresh each run. Its customers (640001..640040) are this
-- file's alone and its clock is in 1990, before anything the other suites leave due; the figures over
-- every customer (stats, retry-dead) are compared with direct counts (customer 640041: the order key's
-- kept statement, at the end). It leases nothing. Run by
-- `make test-citus` only.
\set ON_ERROR_STOP 1
SELECT plan(39);

\set T '''1990-06-01 00:00Z'''

-- 40 customers, one invoice aggregate each; its event n = 0 written on worker 2, n = 1 on worker 1,
-- n = 2 on the coordinator.
SELECT format('host=%s port=%s dbname=%s user=postgres', nodename, nodeport, current_database()) AS w2
  FROM pg_dist_node WHERE groupid > 0 AND noderole = 'primary' ORDER BY groupid DESC LIMIT 1 \gset
SELECT format('host=%s port=%s dbname=%s user=postgres', nodename, nodeport, current_database()) AS w1
  FROM pg_dist_node WHERE groupid > 0 AND noderole = 'primary' ORDER BY groupid LIMIT 1 \gset
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS dblink;
RESET client_min_messages;
-- The customers exist (an event of a customer owes it an email: the notification row's foreign key).
DO $$ BEGIN FOR c IN 640001..640040 LOOP PERFORM billing.upsert_customer(c); END LOOP; END $$;
\set EMIT 'SELECT billing._emit_event(''invoice'', c, ''InvoicePaid'', jsonb_build_object(''customerId'', c, ''invoiceId'', c, ''n'', %s), %L) FROM generate_series(640001, 640040) c'
SELECT count(*) AS n0 FROM dblink(:'w2', format(:'EMIT', 0, :T)) AS t(id bigint) \gset
SELECT count(*) AS n1 FROM dblink(:'w1', format(:'EMIT', 1, :T)) AS t(id bigint) \gset
SELECT count(*) AS n2 FROM (SELECT billing._emit_event('invoice', c, 'InvoicePaid',
                                   jsonb_build_object('customerId', c, 'invoiceId', c, 'n', 2), :T)
                              FROM generate_series(640001, 640040) c) x \gset
CREATE TEMP TABLE ev AS
SELECT e.customer_id, e.id, (e.payload::jsonb -> 'data' ->> 'n')::int AS n, e.aggregate_seq FROM billing.outbox_event e
 WHERE e.customer_id BETWEEN 640001 AND 640040;

SELECT is((SELECT count(*) FROM ev), 120::bigint, 'three events for each of 40 aggregates');
SELECT is((SELECT count(DISTINCT get_shard_id_for_distribution_column('billing.outbox_event', customer_id)) FROM ev),
          8::bigint, 'spread over the 8 shard groups');
SELECT is((SELECT count(*) FROM ev a JOIN ev b ON b.customer_id = a.customer_id AND b.n = a.n + 1 WHERE b.id < a.id),
          80::bigint, 'each later event of an aggregate took a smaller id (the nodes'' ranges)');
SELECT is((SELECT count(*) FROM ev a JOIN ev b ON b.customer_id = a.customer_id AND b.n = a.n + 1
            WHERE b.aggregate_seq > a.aggregate_seq), 80::bigint, 'the order key follows the order of writing');
SELECT is((SELECT count(*) FROM pg_trigger WHERE tgrelid = 'billing.outbox_event'::regclass AND tgname = 'outbox_event_seq'),
          1::bigint, 'the order key''s trigger is there on Citus');

-- The coordinator's API: claim_outbox_events' per-row path.
CREATE TEMP TABLE c1 AS
SELECT e.k, e.customer_id, e.id, (e.payload::jsonb -> 'data' ->> 'n')::int AS n
  FROM billing.claim_outbox_events(40, interval '30 seconds', timestamptz :T + interval '1 minute') WITH ORDINALITY
       AS e(id, event_id, aggregate_type, aggregate_id, event_type, payload, status, created_at, available_at, lease_until,
            attempts, last_error, published_at, customer_id, aggregate_seq, k);
SELECT is((SELECT array_agg(DISTINCT n) FROM c1), ARRAY[0], 'a claim of 40 takes the oldest by the order key: every n = 0');
SELECT is((SELECT count(*) FROM billing.outbox_event WHERE lease_until = timestamptz :T + interval '90 seconds'),
          40::bigint, 'and leases them');
SELECT is_empty($$SELECT * FROM billing.claim_outbox_events(1000, interval '30 seconds', timestamptz '1990-06-01 00:01:01Z')$$,
                'the later events of their aggregates wait while those are leased');
SELECT is(billing.mark_outbox_published(ARRAY(SELECT id FROM c1), timestamptz :T + interval '2 minutes'), 40,
          'mark_outbox_published by ids alone finds their customers');
SELECT is(billing.mark_outbox_published(ARRAY(SELECT id FROM c1), timestamptz :T + interval '2 minutes'), 0,
          'marking again changes nothing');
CREATE TEMP TABLE c2 AS
SELECT e.k, e.customer_id, e.id, (e.payload::jsonb -> 'data' ->> 'n')::int AS n
  FROM billing.claim_outbox_events(1000, interval '30 seconds', timestamptz :T + interval '3 minutes') WITH ORDINALITY
       AS e(id, event_id, aggregate_type, aggregate_id, event_type, payload, status, created_at, available_at, lease_until,
            attempts, last_error, published_at, customer_id, aggregate_seq, k);
SELECT is((SELECT count(*) FROM c2), 80::bigint, 'then both later events of every aggregate in one claim');
SELECT is((SELECT count(*) FROM c2 a JOIN c2 b ON b.customer_id = a.customer_id AND b.n = a.n + 1 WHERE b.k < a.k),
          0::bigint, 'each aggregate''s in the order written, though its ids run the other way');
SELECT lives_ok(format('SELECT billing.mark_outbox_failed(%s, %L, %L)',
                       (SELECT id FROM c2 WHERE customer_id = 640001 AND n = 1), 'broker down', timestamptz :T + interval '3 minutes 20 seconds'),
                'mark_outbox_failed by id alone');
SELECT results_eq($$SELECT attempts, available_at, lease_until, status FROM billing.outbox_event
                     WHERE customer_id = 640001 AND (payload::jsonb -> 'data' ->> 'n') = '1'$$,
                  $$VALUES (1, timestamptz '1990-06-01 00:03:25Z', NULL::timestamptz, 'PENDING')$$,
                  'it backs off 5 seconds');
SELECT billing.mark_outbox_failed(id, 'broker down', timestamptz :T + interval '3 minutes 26 seconds')
  FROM c2 WHERE customer_id = 640001 AND n = 1;  -- then 10 seconds: due at 00:03:36
SELECT is((SELECT count(*) || ' ' || bool_or(customer_id = 640001)
             FROM billing.claim_outbox_events(1000, interval '30 seconds', timestamptz :T + interval '3 minutes 31 seconds')),
          '78 false', 'the others come back when their leases run out; neither it (backing off) nor its later event');
SELECT throws_ok($$SELECT billing.mark_outbox_failed(-1, 'x', '1990-06-01Z')$$, 'BL404', NULL, 'an unknown event: BL404');

-- The relay per shard group: claims and marks on the node holding each group.
SELECT is((SELECT array_agg(shard_group ORDER BY shard_group) FROM billing.relay_shard_groups()), ARRAY[1, 2, 3, 4, 5, 6, 7, 8],
          'the relay''s groups: the 8 shard groups');
SELECT is((SELECT count(*) FROM billing.relay_shard_groups() r JOIN pg_dist_node n ON n.nodename = r.node_name AND n.nodeport = r.node_port
            WHERE n.groupid > 0), 8::bigint, 'each with the worker holding it');
CREATE TEMP TABLE group_shard AS
SELECT s.shardid, (row_number() OVER (ORDER BY s.shardminvalue::bigint))::integer AS shard_group
  FROM pg_dist_shard s WHERE s.logicalrelid = 'billing.outbox_event'::regclass;
SELECT format('host=%s port=%s dbname=%s user=postgres', g.node_name, g.node_port, current_database()) AS node,
       (SELECT count(*) FROM billing.outbox_event e
          JOIN group_shard gs ON gs.shardid = get_shard_id_for_distribution_column('billing.outbox_event', e.customer_id)
         WHERE gs.shard_group = 1 AND e.status = 'PENDING' AND e.customer_id BETWEEN 640001 AND 640040) AS pending
  FROM billing._shard_groups() g
 WHERE g.shard_group = 1 \gset
SELECT throws_like($$SELECT * FROM billing.claim_outbox_events_in_shard('relay-x', 1, 100, interval '30 seconds', '1990-06-01 00:10:05Z')$$,
                   '%is on node%', 'a claim on a node that does not hold the group is refused');
-- The leases of the coordinator's claims ran out at 00:03:30; the failed event is due again.
CREATE TEMP TABLE g1 AS
SELECT * FROM ROWS FROM (dblink(:'node', 'SELECT id, customer_id, (payload::jsonb -> ''data'' ->> ''n'')::int
                                 FROM billing.claim_outbox_events_in_shard(''relay-x'', 1, 100, ''30 seconds'', ''1990-06-01 00:10:05Z'')')
                         AS (id bigint, customer_id bigint, n int))
    WITH ORDINALITY AS t(id, customer_id, n, k);
SELECT cmp_ok(:pending::bigint, '>=', 4::bigint, 'group 1 holds several pending events');
SELECT is((SELECT count(*) FROM g1), :pending::bigint, 'inside its group the relay claims every pending event there');
SELECT is((SELECT count(*) FROM g1), 2 * (SELECT count(DISTINCT customer_id) FROM g1), 'both events of each aggregate');
SELECT is((SELECT count(*) FROM g1 a JOIN g1 b ON b.customer_id = a.customer_id AND b.n > a.n WHERE b.k < a.k), 0::bigint,
          'returned in each aggregate''s order');
SELECT is((SELECT x FROM dblink(:'node', format('SELECT billing.mark_outbox_published_in_shard(1, %L, ''1990-06-01 00:10:06Z'')',
                                                (SELECT array_agg(id) FROM g1))) AS t(x integer)),
          :pending::integer, 'and marks them published there');
SELECT is((SELECT count(*) FROM billing.outbox_event e WHERE e.id IN (SELECT id FROM g1) AND e.status = 'PUBLISHED'),
          :pending::bigint, 'as the coordinator sees');
SELECT throws_like(format('SELECT billing.mark_outbox_published_in_shard(1, %L, ''1990-06-01 00:10:06Z'')', (SELECT array_agg(id) FROM g1)),
                   '%is on node%', 'marking on another node is refused');

-- Stats, retention, replay, retry-dead on the coordinator.
SELECT is((SELECT backlog FROM billing.outbox_stats(timestamptz :T + interval '11 minutes')),
          (SELECT count(*) FROM billing.outbox_event WHERE status = 'PENDING'), 'outbox_stats: the backlog, summed over the shards');
SELECT is((SELECT outbox_backlog FROM billing.status_summary(timestamptz :T + interval '11 minutes')),
          (SELECT count(*) FROM billing.outbox_event WHERE status = 'PENDING'), 'status_summary runs there too');
-- A customer outside group 1 (its events still PENDING).
SELECT min(customer_id) AS dc FROM c2 WHERE n = 1 AND customer_id <> 640001 AND id NOT IN (SELECT id FROM g1) \gset
SELECT billing.mark_outbox_failed(id, 'poison', timestamptz :T + interval '12 minutes') FROM c2 CROSS JOIN generate_series(1, 10)
 WHERE customer_id = :dc AND n = 1;
-- (read first: a query of one customer's shard with is() in it would be sent whole to the worker)
SELECT status AS dead_status FROM billing.outbox_event WHERE customer_id = :dc AND (payload::jsonb -> 'data' ->> 'n') = '1' \gset
SELECT is(:'dead_status'::text, 'DEAD', 'ten failures: DEAD');
SELECT count(*) AS dead FROM billing.outbox_event WHERE status = 'DEAD' \gset
SELECT is(billing.retry_dead_outbox_events(NULL, timestamptz :T + interval '13 minutes'), :dead::integer,
          'retry-dead requeues it (and any other DEAD event)');
SELECT is((SELECT status FROM billing.replay_outbox_event((SELECT id FROM c1 WHERE customer_id = 640003), timestamptz :T + interval '13 minutes')),
          'PENDING', 'replay puts a published event back in line, found by its id alone');
SELECT is((SELECT count(*) FROM billing.outbox_events_from(1, NULL, NULL, NULL, 1000)),
          (SELECT count(*) FROM billing.outbox_event WHERE status = 'PUBLISHED'), 'outbox_events_from reads every shard');
SELECT count(*) AS published FROM billing.outbox_event WHERE status = 'PUBLISHED' AND published_at < '1990-07-02Z' \gset
SELECT results_eq($$SELECT outbox_events FROM billing.purge_expired('30 days', 5000, '1990-08-01Z')$$,
                  format('VALUES (%s::bigint)', :published),
                  'retention deletes every published event past the window, on every shard');
SELECT is((SELECT count(*) FROM billing.outbox_event WHERE status = 'PUBLISHED' AND customer_id BETWEEN 640001 AND 640040),
          0::bigint, 'none of them is left');
SELECT cmp_ok((SELECT count(*) FROM billing.read_audit(NULL, 1000, NULL, 'claim_outbox_events_in_shard')), '>=', 1::bigint,
          'read_audit reads the audit of every shard (the claim on the worker is there)');
SELECT is((SELECT count(*) FROM billing.read_audit(NULL, 1000, NULL, 'mark_outbox_published_in_shard')), 0::bigint,
          'a mark in a group writes no audit row (the claim''s row names the relay and the count)');

-- The order key's read is a statement kept per session and shard (issue 32, groups4): a statement of
-- the same name that the session prepared itself is replaced, never run. Customer 640041's first
-- event carries an order key far ahead of the clock; a session on the node holding it prepares a
-- statement of the trigger's name answering NULL, then writes the aggregate's next event there.
SELECT billing.upsert_customer(640041) IS NOT NULL AS c41 \gset
SELECT billing._emit_event('invoice', 640041, 'InvoicePaid', '{"customerId": 640041, "n": 0}', :T) AS e41 \gset
UPDATE billing.outbox_event SET aggregate_seq = 4000000000000000 WHERE customer_id = 640041 AND id = :e41;
SELECT format('host=%s port=%s dbname=%s user=postgres', s.nodename, s.nodeport, current_database()) AS wn,
       'billing.outbox_event_' || s.shardid AS shard41
  FROM citus_shards s WHERE s.shardid = get_shard_id_for_distribution_column('billing.outbox_event', 640041) \gset
SELECT dblink_connect('s41', :'wn') AS s41 \gset
SELECT name41 FROM dblink('s41', format('SELECT %L || %L::regclass::oid', 'billing_outbox_seq_', :'shard41')) AS t(name41 text) \gset
SELECT dblink_exec('s41', format('PREPARE %I(text, int8) AS SELECT NULL::bigint', :'name41')) AS prepared41 \gset
SELECT id41 FROM dblink('s41', format($q$SELECT billing._emit_event('invoice', 640041, 'InvoicePaid', '{"customerId": 640041, "n": 1}', %L)$q$, :T))
    AS t(id41 bigint) \gset
SELECT aggregate_seq AS seq41 FROM billing.outbox_event WHERE customer_id = 640041 AND id = :id41 \gset
SELECT is(:seq41::bigint, 4000000000000001::bigint,
          'an event written on the node of a session holding a same-named statement is still raised above its aggregate''s');
SELECT matches((SELECT statement FROM dblink('s41', format('SELECT statement FROM pg_prepared_statements WHERE name = %L', :'name41'))
                   AS t(statement text)),
               '^PREPARE .* SELECT pg_catalog\.max\(billing\._outbox_order\(',
               'the session''s statement of that name is now the trigger''s own');
SELECT id42 FROM dblink('s41', format($q$SELECT billing._emit_event('invoice', 640041, 'InvoicePaid', '{"customerId": 640041, "n": 2}', %L)$q$, :T))
    AS t(id42 bigint) \gset
SELECT aggregate_seq AS seq42 FROM billing.outbox_event WHERE customer_id = 640041 AND id = :id42 \gset
SELECT is(:seq42::bigint, 4000000000000002::bigint,
          'and the next event there, through the kept statement, is raised above both');
SELECT dblink_disconnect('s41') AS d41 \gset
-- (published: nothing of this customer is left for the other suites' claims)
UPDATE billing.outbox_event SET status = 'PUBLISHED', published_at = timestamptz :T WHERE customer_id = 640041;

SELECT * FROM finish();
