-- 643_relay_in_shards: the relay's claim and mark in several shard groups of a node at once (issue
-- 32: one call per node and round, whatever the number of groups; db/functions/65_outbox_relay.sql,
-- _shard_tables in 16_shards.sql): their arguments, their errors, one audit row per claim and none
-- per mark. On one PostgreSQL the one group, 0, is the table itself; on the Citus coordinator, which
-- holds no group, every group is refused (BL409 naming its node). Each group's events and their
-- order, one call per node against the group's own claim, on the three-node cluster:
-- driver/tests/test_relay_citus.py::test_one_outbox_order_on_one_node_and_on_citus; the real relay
-- over it: test_relay_citus.py.
BEGIN;
SELECT plan(19);
SET LOCAL ROLE billing_owner;

\set T '''1989-03-01 00:00Z'''

SELECT throws_ok($$SELECT * FROM billing.claim_outbox_events_in_shards('t643', '{}', 10, interval '30 seconds', '1989-03-01Z')$$,
                 'BL422', NULL, 'no group: BL422');
SELECT throws_ok($$SELECT * FROM billing.claim_outbox_events_in_shards('t643', NULL, 10, interval '30 seconds', '1989-03-01Z')$$,
                 'BL422', NULL, 'NULL groups: BL422');
SELECT throws_ok($$SELECT * FROM billing.claim_outbox_events_in_shards('', ARRAY[0], 10, interval '30 seconds', '1989-03-01Z')$$,
                 'BL422', NULL, 'no worker name: BL422 (as every claim)');
SELECT throws_ok($$SELECT * FROM billing.claim_outbox_events_in_shards('t643', ARRAY[0], 0, interval '30 seconds', '1989-03-01Z')$$,
                 'BL422', NULL, 'a batch of 0: BL422');
SELECT throws_ok($$SELECT * FROM billing.claim_outbox_events_in_shards('t643', ARRAY[100000], 10, interval '30 seconds', '1989-03-01Z')$$,
                 'BL404', 'shard group 100000 does not exist', 'an unknown group: BL404');
SELECT throws_ok($$SELECT * FROM billing.claim_outbox_events_in_shards('t643', ARRAY[NULL::integer], 10, interval '30 seconds', '1989-03-01Z')$$,
                 'BL404', 'shard group NULL does not exist', 'a NULL group: BL404');
SELECT throws_ok($$SELECT billing.mark_outbox_published_in_shards(ARRAY[0, 0], ARRAY[1]::bigint[], '1989-03-01Z')$$,
                 'BL422', NULL, 'a mark with fewer ids than groups: BL422');
SELECT throws_ok($$SELECT billing.mark_outbox_published_in_shards(NULL, ARRAY[1]::bigint[], '1989-03-01Z')$$,
                 'BL422', NULL, 'a mark without groups: BL422');
SELECT throws_ok($$SELECT billing.mark_outbox_published_in_shards(ARRAY[100000], ARRAY[1]::bigint[], '1989-03-01Z')$$,
                 'BL404', 'shard group 100000 does not exist', 'a mark in an unknown group: BL404');

-- Events of 6 aggregates, due in 1989 (before anything another suite leaves due), rolled back at the end.
DO $$ BEGIN FOR c IN 643001..643006 LOOP PERFORM billing.upsert_customer(c); END LOOP; END $$;
CREATE TEMP TABLE e643 AS
SELECT billing._emit_event('invoice', c, 'InvoicePaid', jsonb_build_object('customerId', c, 'invoiceId', c, 'n', n), :T) AS id
  FROM generate_series(643001, 643006) c, generate_series(1, 2) n;

SELECT billing._distributed('billing.outbox_event') AS on_citus \gset
\if :on_citus
SELECT throws_like($$SELECT * FROM billing.claim_outbox_events_in_shards('t643', ARRAY[1, 2], 10, interval '30 seconds', '1989-03-01 00:01Z')$$,
                   '%is on node%', 'on the coordinator (no group there): BL409 naming the node');
SELECT throws_like($$SELECT billing.mark_outbox_published_in_shards(ARRAY[1], ARRAY[1]::bigint[], '1989-03-01 00:01Z')$$,
                   '%is on node%', 'a mark there: BL409');
SELECT throws_like($$SELECT billing._shard_table('billing.outbox_event', 1)$$, '%is on node%',
                   '_shard_table (the other claims'' lookup): the same answer');
SELECT is((SELECT count(*) FROM billing._shard_tables('billing.plan', ARRAY[1, 2])), 2::bigint,
          'a table that is not distributed: itself, for each group that exists');
SELECT pass('(claims and marks on the node holding each group: test_relay_citus)');
SELECT pass('(their audit: citus/641)');
SELECT pass('(one group, 0, on one PostgreSQL only)');
SELECT pass('(the session''s statements, on one PostgreSQL only; on the nodes: test_relay_citus)');
SELECT pass('(a statement of the same name: on one PostgreSQL only)');
SELECT pass('(run by the relay role: on one PostgreSQL only)');
\else
SELECT is((SELECT array_agg(DISTINCT c.shard_group) FROM billing.claim_outbox_events_in_shards('t643', ARRAY[0, 0], 10000, interval '30 seconds', '1989-03-01 00:01Z') c
            WHERE (c.event).id IN (SELECT id FROM e643)), ARRAY[0], 'group 0 once, however often it is named');
SELECT is((SELECT count(*) FROM billing.outbox_event e WHERE e.id IN (SELECT id FROM e643) AND e.lease_until = '1989-03-01 00:01:30Z'),
          12::bigint, 'every event of the 6 aggregates claimed and leased (both of each in one claim)');
SELECT is((SELECT count(*) FROM billing.read_audit(NULL, 1000, NULL, 'claim_outbox_events_in_shards') a
            WHERE a.args ->> 'worker' = 't643'), 1::bigint, 'one audit row for the call');
-- Each group's statements are prepared once per session (65_outbox_relay, _relay_statements).
SELECT is((SELECT count(*) FROM pg_prepared_statements WHERE name ~ '^billing_relay_(claim|lease)_'), 2::bigint,
          'the claim prepared its two statements for the session, once for group 0 named twice');
-- The session's own role may PREPARE a statement under the mark's name before the first mark: it is
-- replaced (its text is not the relay's), never run by the SECURITY DEFINER mark.
SELECT 'billing_relay_mark_' || left(md5(billing._shard_table('billing.outbox_event', 0)), 16) AS mark_name,
       (SELECT name FROM pg_prepared_statements WHERE name ~ '^billing_relay_claim_') AS claim_name \gset
SET LOCAL ROLE billing_relay;
PREPARE :"mark_name"(pg_catalog.timestamptz, pg_catalog.int8[]) AS SELECT 643;
SELECT throws_ok(format('EXECUTE %I(now(), 500)', :'claim_name'), '42501', NULL,
                 'the relay role cannot run the prepared claim itself (no privilege on the table)');
SET LOCAL ROLE billing_owner;
SELECT is(billing.mark_outbox_published_in_shards(array_fill(0, ARRAY[7]),
                                                  ARRAY(SELECT id FROM e643 ORDER BY id LIMIT 6) || ARRAY[-1]::bigint[],
                                                  '1989-03-01 00:01:01Z'),
          6, 'the mark: the 6 named PUBLISHED (an id not there changes nothing)');
SELECT is(billing.mark_outbox_published_in_shards(array_fill(0, ARRAY[12]), ARRAY(SELECT id FROM e643), '1989-03-01 00:01:02Z'),
          6, 'marking all 12: only the 6 still PENDING change');
SELECT is((SELECT generic_plans FROM pg_prepared_statements WHERE name = :'mark_name'), 2::bigint,
          'the mark ran the relay''s own statement (6, not 643) twice, on one generic plan');
SELECT is((SELECT count(*) FROM billing.read_audit(NULL, 1000, NULL, 'mark_outbox_published_in_shards')), 0::bigint,
          'no audit row for a mark (the claim''s row names the relay)');
SELECT ok(billing._shard_table('billing.outbox_event', 0) IN ('outbox_event', 'billing.outbox_event'), '_shard_table: group 0 is the table itself');
\endif

SELECT * FROM finish();
ROLLBACK;
