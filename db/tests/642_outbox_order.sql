-- 642_outbox_order: one order for the outbox (issue 25): billing._outbox_order(aggregate_seq, id), ties
-- by id, is the order of the relay's claim, its per-group claim, the replay and the webhook claim, on
-- one PostgreSQL and on Citus; the indexes of db/schema/0380 are on what it inlines to, so the claims
-- walk them in order and never sort (the plans, on one PostgreSQL; on Citus the shards' plans are the
-- workers': there the index definitions are checked). The same order across a real Citus cluster
-- (events written on three nodes): driver/tests/test_relay_citus.py::test_one_outbox_order_on_one_node_and_on_citus.
BEGIN;
SELECT plan(13);
SET LOCAL ROLE billing_owner;

SELECT is(billing._outbox_order(NULL, 7), 7::bigint, 'no key: the id');
SELECT is(billing._outbox_order(1700000000000000, 7), 1700000000000000::bigint, 'a key (Citus): the key');

-- Events of two aggregates; then keys set as Citus's trigger would have (the ids of aggregate 642002
-- against their order of writing, and one event written before the database had keys).
CREATE TEMP TABLE o642 AS
SELECT n, billing._emit_event('invoice', 642000 + (n % 2) + 1, 'InvoicePaid', jsonb_build_object('invoiceId', 642000 + (n % 2) + 1, 'n', n),
                              '2026-06-01 10:00Z') AS id
  FROM generate_series(1, 8) n;
UPDATE billing.outbox_event e SET aggregate_seq = 1800000000000000 + 100 * (9 - o.n)
  FROM o642 o WHERE e.id = o.id AND o.n IN (2, 4, 6, 8) AND e.customer_id = 0;
UPDATE billing.outbox_event e SET aggregate_seq = 1800000000000000 + o.n
  FROM o642 o WHERE e.id = o.id AND o.n IN (3, 5, 7) AND e.customer_id = 0;
-- (n = 1 keeps no key: it comes first)
CREATE TEMP TABLE rule642 AS
SELECT row_number() OVER (ORDER BY billing._outbox_order(e.aggregate_seq, e.id), e.id) AS place, e.id
  FROM billing.outbox_event e JOIN o642 o ON o.id = e.id;
SELECT is(ARRAY(SELECT o.n FROM rule642 r JOIN o642 o ON o.id = r.id ORDER BY r.place),
          ARRAY[1, 3, 5, 7, 8, 6, 4, 2], 'the rule: no key first, then by key');

SAVEPOINT a;
SELECT is(ARRAY(SELECT c.id FROM billing.claim_outbox_events(10000, interval '30 seconds', '2026-06-01 10:01Z') c
                 WHERE c.id IN (SELECT id FROM o642)),
          ARRAY(SELECT id FROM rule642 ORDER BY place), 'claim_outbox_events hands them out in that order');
ROLLBACK TO SAVEPOINT a;
SELECT billing._distributed('billing.outbox_event') AS on_citus \gset
\if :on_citus
SELECT pass('(claim_outbox_events_in_shard runs on the node holding each group: test_relay_citus)');
SELECT pass('(claim_outbox_events_in_shards too: test_relay_citus)');
\else
SELECT is(ARRAY(SELECT c.id FROM billing.claim_outbox_events_in_shard('t642', 0, 10000, interval '30 seconds', '2026-06-01 10:01Z') c
                 WHERE c.id IN (SELECT id FROM o642)),
          ARRAY(SELECT id FROM rule642 ORDER BY place), 'claim_outbox_events_in_shard (group 0): the same order');
ROLLBACK TO SAVEPOINT a;
SELECT is(ARRAY(SELECT (c.event).id
                  FROM billing.claim_outbox_events_in_shards('t642', ARRAY[0], 10000, interval '30 seconds', '2026-06-01 10:01Z')
                       WITH ORDINALITY AS c(shard_group, event, k)
                 WHERE (c.event).id IN (SELECT id FROM o642) ORDER BY c.k),
          ARRAY(SELECT id FROM rule642 ORDER BY place), 'claim_outbox_events_in_shards (group 0): the same order');
\endif
ROLLBACK TO SAVEPOINT a;
UPDATE billing.outbox_event e SET status = 'PUBLISHED', published_at = '2026-06-01 10:01Z'
 WHERE e.id IN (SELECT id FROM o642) AND e.customer_id = 0;
SELECT is(ARRAY(SELECT f.id FROM billing.outbox_events_from((SELECT min(id) FROM o642), NULL, NULL, NULL, 100000) f
                 WHERE f.id IN (SELECT id FROM o642)),
          ARRAY(SELECT id FROM rule642 ORDER BY place), 'outbox_events_from reads them back in that order');
SELECT is(ARRAY(SELECT f.id FROM billing.outbox_events_from((SELECT min(id) FROM o642), NULL, ARRAY['InvoicePaid'],
                                                            (SELECT id FROM rule642 WHERE place = 4), 3) f),
          ARRAY(SELECT id FROM rule642 WHERE place BETWEEN 5 AND 7 ORDER BY place),
          'a page after an event goes on after its place');
ROLLBACK TO SAVEPOINT a;

-- The indexes are on the rule's key, and the claims' scans walk them in order.
SELECT matches(pg_get_indexdef('billing.outbox_event_pending_idx'::regclass),
               'COALESCE\(aggregate_seq, id\), id\) WHERE \(status = ''PENDING''', 'outbox_event_pending_idx: (key, id) of PENDING');
SELECT billing._distributed('billing.outbox_event') AS on_citus \gset
\if :on_citus
SELECT matches(pg_get_indexdef('billing.outbox_event_aggregate_unpublished_idx'::regclass),
               'aggregate_id, COALESCE\(aggregate_seq, id\)\)', 'the head-of-line index ends with the key');
SELECT matches(pg_get_indexdef('billing.webhook_delivery_pending_idx'::regclass),
               'endpoint_id, COALESCE\(aggregate_seq, outbox_id\), outbox_id\)', 'webhook_delivery_pending_idx: (endpoint, key, id)');
SELECT matches(pg_get_indexdef('billing.webhook_delivery_aggregate_open_idx'::regclass),
               'aggregate_id, COALESCE\(aggregate_seq, outbox_id\)\)', 'the webhook head-of-line index ends with the key');
SELECT matches(pg_get_indexdef('billing.outbox_event_keyed_idx'::regclass),
               'aggregate_seq, id\) WHERE \(\(aggregate_seq IS NOT NULL\) AND \(status = ''PUBLISHED''', 'outbox_event_keyed_idx: the keyed events for the replay');
\else
SET LOCAL enable_seqscan = off;
SET LOCAL enable_bitmapscan = off;
CREATE FUNCTION pg_temp.plan(p_query text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE r record; v text := ''; BEGIN
    FOR r IN EXECUTE 'EXPLAIN ' || p_query LOOP v := v || r."QUERY PLAN" || E'\n'; END LOOP;
    RETURN v; END $$;
SELECT ok(pg_temp.plan($$SELECT e.id FROM billing.outbox_event e
                          WHERE e.status = 'PENDING' AND e.available_at <= now() AND (e.lease_until IS NULL OR e.lease_until <= now())
                          ORDER BY billing._outbox_order(e.aggregate_seq, e.id), e.id LIMIT 500$$)
          ~ 'Index Scan using outbox_event_pending_idx' AND pg_temp.plan($$SELECT e.id FROM billing.outbox_event e
                          WHERE e.status = 'PENDING' ORDER BY billing._outbox_order(e.aggregate_seq, e.id), e.id LIMIT 500$$) !~ 'Sort',
          'the claim''s candidates: outbox_event_pending_idx in order, no sort');
SELECT matches(pg_temp.plan($$SELECT 1 FROM billing.outbox_event earlier
                               WHERE earlier.status <> 'PUBLISHED' AND earlier.status <> 'DEAD'
                                 AND earlier.aggregate_type = 'invoice' AND earlier.aggregate_id = 642001
                                 AND billing._outbox_order(earlier.aggregate_seq, earlier.id) < 1000$$),
               'using outbox_event_aggregate_unpublished_idx(.|\n)*Index Cond: .*COALESCE\(aggregate_seq, id\) < ',
               'the head-of-line probe: the key in the index condition');
SELECT ok(pg_temp.plan($$SELECT d.outbox_id FROM billing.webhook_delivery d
                          WHERE d.endpoint_id = 1 AND d.status = 'PENDING'
                          ORDER BY billing._outbox_order(d.aggregate_seq, d.outbox_id), d.outbox_id LIMIT 100$$)
          ~ '^Limit[^\n]*\n *->  Index Scan using webhook_delivery_pending_idx', 'the webhook claim: webhook_delivery_pending_idx in order, no sort');
-- (the unkeyed half walks outbox_event_id_idx as the replay did before; which index, on the few rows of
-- a test database, is a matter of statistics: the keyed one has no rival)
SELECT ok(pg_temp.plan($$SELECT e.id FROM billing.outbox_event e WHERE e.aggregate_seq IS NOT NULL AND (e.aggregate_seq, e.id) > (1, 5)
                              AND e.status = 'PUBLISHED' ORDER BY e.aggregate_seq, e.id LIMIT 1000$$) ~ '^Limit[^\n]*\n *->  Index (Only )?Scan using outbox_event_keyed_idx',
          'the replay''s keyed half: outbox_event_keyed_idx in order');
\endif

SELECT * FROM finish();
ROLLBACK;
