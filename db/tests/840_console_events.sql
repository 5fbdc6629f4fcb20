-- 840_console_events: the console's events filtered by type alone (console_events with p_type and no
-- subject) read each matching type's newest events, at most a page of each (outbox_event_rare_type_idx,
-- migration 0781; the three types of the volume paths on the id index), never the walk of the outbox
-- back to a rare type's events: a type with five events behind 3,000 others is a few index entries read,
-- and the page is what the plain "ORDER BY id DESC LIMIT n" gives.
BEGIN;
SET LOCAL ROLE billing_owner;  -- on Citus, reads of shards in the writers' role (see 200_plans_customers)
SELECT plan(9);

-- (the helpers first: on Citus no function is made after a parallel read of a distributed table)
-- (PL/pgSQL: Citus plans no SQL function's query of a distributed table that reads its parameters)
CREATE FUNCTION pg_temp.plain(p_like text, p_before bigint, p_limit integer) RETURNS bigint[] LANGUAGE plpgsql AS $$
BEGIN
    RETURN ARRAY(SELECT o.id FROM billing.outbox_event o WHERE o.event_type ILIKE p_like AND (p_before IS NULL OR o.id < p_before)
                  ORDER BY o.id DESC LIMIT p_limit);
END $$;
CREATE FUNCTION pg_temp.page(p_type text, p_before bigint, p_limit integer) RETURNS bigint[] LANGUAGE plpgsql AS $$
BEGIN
    RETURN ARRAY(SELECT e.id FROM billing.console_events(NULL, p_type, p_before, p_limit) e ORDER BY e.id DESC);
END $$;
-- What this transaction has read of the outbox so far: index entries and table rows.
CREATE FUNCTION pg_temp.outbox_read() RETURNS bigint LANGUAGE sql AS $$
    SELECT (SELECT sum(pg_catalog.pg_stat_get_xact_tuples_returned(i.indexrelid)) FROM pg_catalog.pg_index i
             WHERE i.indrelid = 'billing.outbox_event'::regclass)
         + pg_catalog.pg_stat_get_xact_tuples_returned('billing.outbox_event'::regclass) $$;

-- Five events of a type of this file's own, then 3,000 of a volume type (newer), one of each kind of type
-- of the prefix 'T840' in between.
SELECT count(billing._emit_event('customer', 8401, 'T840Rare', '{"customerId": 8401}', '2026-05-01Z')) FROM generate_series(1, 5);
SELECT billing._emit_event('customer', 8401, 'T840Other', '{"customerId": 8401}', '2026-05-01Z');
SELECT count(billing._emit_event('customer', 8402, 'InvoiceCreated', '{"customerId": 8402}', '2026-05-02Z')) FROM generate_series(1, 3000);
SELECT is((SELECT count(*) FROM billing.outbox_event WHERE event_type IN ('T840Rare', 'InvoiceCreated') AND customer_id IN (8401, 8402)),
          3005::bigint, 'the world: 5 rare events, then 3,000 of a volume type');

SELECT is(pg_temp.page('t840rare', NULL, 50), pg_temp.plain('T840Rare%', NULL, 50), 'a rare type (any case): its five events, newest first');
SELECT is(pg_temp.page('T840', NULL, 3), pg_temp.plain('T840%', NULL, 3), 'a prefix of two types: the newest three of both, merged');
SELECT is(pg_temp.page('T840', (pg_temp.plain('T840%', NULL, 3))[3], 50), pg_temp.plain('T840%', (pg_temp.plain('T840%', NULL, 3))[3], 50),
          'the next page, below a cursor');
SELECT is(pg_temp.page('invoicecreat', NULL, 20), pg_temp.plain('InvoiceCreat%', NULL, 20), 'a volume type: its newest page');
SELECT is(pg_temp.page('I', NULL, 20), pg_temp.plain('I%', NULL, 20), 'a prefix of volume and other types');

-- How much it reads (on one PostgreSQL: on Citus the shards read, not the coordinator's table).
SELECT pg_temp.outbox_read() AS r840_before \gset
SELECT cardinality(pg_temp.page('T840Rare', NULL, 50));
SELECT pg_temp.outbox_read() AS r840_after \gset
SELECT cardinality(pg_temp.page('T840None', NULL, 50));
SELECT pg_temp.outbox_read() AS r840_none \gset
SELECT count(*) FROM billing.list_events(11, NULL, NULL, 'T840Rare');  -- GET /v1/events?type=: the same index
SELECT pg_temp.outbox_read() AS r840_list \gset
SELECT CASE WHEN billing._distributed('billing.outbox_event')
            THEN skip('on Citus the shards read the outbox (the coordinator''s counters say nothing)', 3)
            ELSE collect_tap(
                   cmp_ok((:r840_after - :r840_before)::bigint, '<=', 200::bigint,
                          format('a rare type behind 3,000 events: %s entries and rows read (the walk read them all)', :r840_after - :r840_before)),
                   cmp_ok((:r840_none - :r840_after)::bigint, '<=', 200::bigint,
                          format('a type with no event: %s read', :r840_none - :r840_after)),
                   cmp_ok((:r840_list - :r840_none)::bigint, '<=', 200::bigint,
                          format('list_events of the rare type (its index, proven from the type): %s read', :r840_list - :r840_none))) END;

SELECT * FROM finish();
ROLLBACK;
