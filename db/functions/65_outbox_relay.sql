-- 65_outbox_relay: the relay's side of the outbox: the NOTIFY trigger, the claim, published and
-- failed; each beside its form per shard group on Citus (docs/scaling.md, "Events, webhooks and
-- reads on Citus"). The order rules are in 64_outbox.sql's header.
-- Re-applied after every migration: CREATE OR REPLACE only.

-- ---------------------------------------------------------------------------------------------
-- The relay side
-- ---------------------------------------------------------------------------------------------
-- One notification per INSERT statement (not per row), with how many rows it wrote.
CREATE OR REPLACE FUNCTION billing._outbox_notify()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_count bigint;
BEGIN
    SELECT count(*) INTO v_count FROM new_events;
    IF v_count > 0 THEN
        PERFORM pg_notify('billing_outbox', json_build_object('count', v_count)::text);
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION billing._outbox_notify() IS
'Private trigger: one pg_notify(''billing_outbox'', ''{"count": n}'') per statement that inserted outbox events.
Returns NULL (statement-level AFTER trigger).';

CREATE OR REPLACE TRIGGER outbox_event_notify
    AFTER INSERT ON billing.outbox_event
    REFERENCING NEW TABLE AS new_events
    FOR EACH STATEMENT EXECUTE FUNCTION billing._outbox_notify();

CREATE OR REPLACE FUNCTION billing._outbox_event_customers(p_ids bigint[])
RETURNS bigint[]
LANGUAGE plpgsql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    RETURN ARRAY(SELECT DISTINCT e.customer_id FROM billing.outbox_event e WHERE e.id = ANY (p_ids));
END
$$;
COMMENT ON FUNCTION billing._outbox_event_customers(bigint[]) IS
'Private: the customers of the given outbox events (an unlocked read by the id index: every shard on Citus), so that the statements after it name each row by (customer_id, id).
Returns the distinct customer ids (empty when none exists).';

-- The per-row path of claim_outbox_events on Citus (convention 3): an unlocked multi-shard read of
-- the candidates in id order, then each one locked by (customer_id, id) with SKIP LOCKED (a query
-- routed to one shard), checked again, and leased, under the same head-of-line rule with the
-- outbox's order (billing._outbox_order, 64_outbox.sql). The rule holds event by
-- event: an event is leased only when no earlier unpublished event of its aggregate is PENDING
-- outside this claim, and an aggregate's events are all in one shard, so the probe is one shard's.
CREATE OR REPLACE FUNCTION billing._claim_outbox_events_per_row(
    p_batch_size integer, p_lease interval, p_now timestamptz)
RETURNS SETOF billing.outbox_event
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_candidate record;
    v_event     billing.outbox_event;
    v_claimed   bigint[] := '{}';
    v_customers bigint[] := '{}';
BEGIN
    -- The oldest first in the outbox's order (in id order an aggregate's earlier event may come
    -- after its later one on Citus: a window of ids full of such later events would claim nothing).
    FOR v_candidate IN
        SELECT e.customer_id, e.id
          FROM billing.outbox_event e
         WHERE e.status = 'PENDING' AND e.available_at <= p_now AND (e.lease_until IS NULL OR e.lease_until <= p_now)
         ORDER BY billing._outbox_order(e.aggregate_seq, e.id), e.id
         LIMIT p_batch_size
    LOOP
        SELECT * INTO v_event
          FROM billing.outbox_event e
         WHERE e.customer_id = v_candidate.customer_id AND e.id = v_candidate.id
           AND e.status = 'PENDING' AND e.available_at <= p_now AND (e.lease_until IS NULL OR e.lease_until <= p_now)
           FOR UPDATE SKIP LOCKED;
        CONTINUE WHEN NOT FOUND;  -- another claimer holds it, or it changed since the read
        CONTINUE WHEN EXISTS (
            SELECT 1 FROM billing.outbox_event earlier
             WHERE earlier.customer_id = v_event.customer_id
               AND earlier.status = 'PENDING'
               AND earlier.aggregate_type = v_event.aggregate_type AND earlier.aggregate_id = v_event.aggregate_id
               AND billing._outbox_order(earlier.aggregate_seq, earlier.id) < billing._outbox_order(v_event.aggregate_seq, v_event.id)
               AND NOT earlier.id = ANY (v_claimed));
        UPDATE billing.outbox_event e SET lease_until = p_now + p_lease
         WHERE e.customer_id = v_event.customer_id AND e.id = v_event.id;
        v_claimed := v_claimed || v_event.id;
        v_customers := v_customers || v_event.customer_id;
    END LOOP;
    RETURN QUERY
    SELECT * FROM billing.outbox_event e
     WHERE e.customer_id = ANY (v_customers) AND e.id = ANY (v_claimed)
     ORDER BY billing._outbox_order(e.aggregate_seq, e.id), e.id;
END
$$;
COMMENT ON FUNCTION billing._claim_outbox_events_per_row(integer, interval, timestamptz) IS
'Private: claim_outbox_events on Citus, row by row (each locked by (customer_id, id) with SKIP LOCKED, the head-of-line rule by the aggregate''s order key).
Returns the claimed rows, each aggregate''s in its order.';

-- The head-of-line check stays a per-candidate probe of outbox_event_aggregate_unpublished_idx,
-- the only index its predicate can use (db/schema/0021: another index made it O(batch^2) under
-- misleading statistics); OFFSET 0 keeps the planner from pulling it up into a hash anti-join over
-- every PENDING row;
-- and the lease update goes through the primary key, so a claim costs O(batch), not O(table),
-- with or without statistics (measured in bench/relay: a 5,000-row claim 550 ms -> ~150 ms).
-- The candidates are read by a plain index scan of outbox_event_pending_idx in the outbox's order
-- (its key is what billing._outbox_order inlines to: db/schema/0380), never a
-- bitmap scan: every event leaves dead entries in that index (its insert and its lease, once
-- published) until VACUUM. An index scan marks them dead the first time it meets them (later
-- scans skip them inside the index page); a bitmap scan cannot, and fetched every heap page of
-- every dead entry on every claim: at 2,000 events/s a claim of 25 rows went from 1 ms to 22 ms
-- within 20 s (bench/relay --trace). With few PENDING rows in the statistics the planner picked
-- the bitmap scan, hence plain index scans only for this function, whatever the session says.
CREATE OR REPLACE FUNCTION billing.claim_outbox_events(
    p_batch_size integer DEFAULT 500, p_lease interval DEFAULT interval '30 seconds', p_now timestamptz DEFAULT now())
RETURNS SETOF billing.outbox_event
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
SET jit = off
SET enable_indexscan = on
SET enable_bitmapscan = off
SET enable_seqscan = off
AS $$
DECLARE
    v_ids bigint[];
BEGIN
    PERFORM billing._audit('claim_outbox_events', jsonb_build_object('batch_size', p_batch_size, 'lease', p_lease, 'now', p_now));
    PERFORM billing._check_claim_args(p_batch_size, p_lease, p_now);
    IF billing._distributed('billing.outbox_event') THEN
        -- Citus refuses FOR UPDATE across shards: the per-row path (docs/scaling.md).
        RETURN QUERY SELECT * FROM billing._claim_outbox_events_per_row(p_batch_size, p_lease, p_now);
        RETURN;
    END IF;

    -- The same statement as claim_outbox_events_in_shard's, on the whole table.
    WITH candidate AS MATERIALIZED (
        SELECT e.id, e.aggregate_type, e.aggregate_id, billing._outbox_order(e.aggregate_seq, e.id) AS k
          FROM billing.outbox_event e
         WHERE e.status = 'PENDING'
           AND e.available_at <= p_now
           AND (e.lease_until IS NULL OR e.lease_until <= p_now)
         ORDER BY billing._outbox_order(e.aggregate_seq, e.id), e.id
         LIMIT p_batch_size
           FOR UPDATE SKIP LOCKED
    )
    SELECT array_agg(c.id) INTO v_ids
      FROM candidate c
     WHERE NOT EXISTS (
               SELECT 1
                 FROM billing.outbox_event earlier
                WHERE earlier.status <> 'PUBLISHED' AND earlier.status <> 'DEAD'  -- = PENDING, see above
                  AND earlier.aggregate_type = c.aggregate_type
                  AND earlier.aggregate_id = c.aggregate_id
                  AND billing._outbox_order(earlier.aggregate_seq, earlier.id) < c.k
                  AND earlier.id NOT IN (SELECT id FROM candidate)
               OFFSET 0);

    RETURN QUERY
    WITH leased AS (
        UPDATE billing.outbox_event e
           SET lease_until = p_now + p_lease
         WHERE e.id = ANY (v_ids)
        RETURNING e.*
    )
    SELECT * FROM leased ORDER BY billing._outbox_order(leased.aggregate_seq, leased.id), leased.id;
END
$$;
COMMENT ON FUNCTION billing.claim_outbox_events(integer, interval, timestamptz) IS
'Claims up to p_batch_size PENDING events that are due and not leased, in the outbox''s order (billing._outbox_order, then id; SKIP LOCKED), leasing them until p_now + p_lease.
Returns the claimed rows in that order (publish them in it); an event waits while an earlier PENDING event of its aggregate is held elsewhere.';

-- ---------------------------------------------------------------------------------------------
-- The relay on Citus, per shard group (docs/scaling.md, "Events, webhooks and reads on Citus").
-- A relay takes its share of the shard groups (relay_shard_groups, advisory locks) and, connected to
-- the node holding a group, claims, marks published and marks failed in it. Each statement reads and writes the group's own
-- shard of billing.outbox_event on that node: plain PostgreSQL, FOR UPDATE SKIP LOCKED included.
-- On a single PostgreSQL the one group 0 is the table itself, so the calls work there too.
-- ---------------------------------------------------------------------------------------------
-- The relay's statements on a group's shard, kept per session (issue 32, groups3): each group's
-- claim, lease and mark statements are PREPAREd once per session and shard (named by the shard),
-- planned once (a generic plan), then only executed: at 64 groups, planning each group's dynamic
-- statements anew at every call was most of the per-group cost. What is NOT kept: where a group
-- is. Every call still reads Citus' catalog once (_shard_tables) before running any statement, so a
-- group that moved is refused (BL409) at once, and a statement of a shard that left this node is
-- never run again. A session's prepared statement can be made or replaced by whoever owns the
-- session (the relay role's own PREPARE of the same name), so each one is checked against its
-- exact text before use and replaced when it differs; run from this SECURITY DEFINER code it is
-- re-analyzed under this function's search_path (the plan cache checks it). Run directly by the
-- relay role it fails: the role has no privilege on the shards.
CREATE OR REPLACE FUNCTION billing._relay_statements(p_kind text, p_tables text[])
RETURNS text[]
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_template text;
    v_names    text[];
    v_stale    record;
BEGIN
    -- %1$I the statement's name, %2$s the shard (a qualified, quoted name from _shard_tables).
    -- Searched CASE: Citus deparses a simple CASE over a parameter wrongly (docs/scaling.md).
    v_template := CASE
        WHEN p_kind = 'claim' THEN
            -- claim_outbox_events' statement inside one group (an aggregate's events are all in
            -- its customer's shard, so the head-of-line rule is exact here), in the outbox's
            -- order (billing._outbox_order, through outbox_event_pending_idx: db/schema/0380).
            -- The head of that order is an aggregate's earliest unpublished event, so it is
            -- always claimable. $1 now, $2 the batch size.
            $t$PREPARE %1$I(pg_catalog.timestamptz, pg_catalog.int4) AS
            WITH candidate AS MATERIALIZED (
                SELECT e.id, e.aggregate_type, e.aggregate_id, billing._outbox_order(e.aggregate_seq, e.id) AS k
                  FROM %2$s e
                 WHERE e.status = 'PENDING'
                   AND e.available_at <= $1
                   AND (e.lease_until IS NULL OR e.lease_until <= $1)
                 ORDER BY billing._outbox_order(e.aggregate_seq, e.id), e.id
                 LIMIT $2
                   FOR UPDATE SKIP LOCKED
            )
            SELECT pg_catalog.array_agg(c.id)
              FROM candidate c
             WHERE NOT EXISTS (
                       SELECT 1
                         FROM %2$s earlier
                        WHERE earlier.status <> 'PUBLISHED' AND earlier.status <> 'DEAD'
                          AND earlier.aggregate_type = c.aggregate_type
                          AND earlier.aggregate_id = c.aggregate_id
                          AND billing._outbox_order(earlier.aggregate_seq, earlier.id) < c.k
                          AND earlier.id NOT IN (SELECT id FROM candidate)
                       OFFSET 0)$t$
        WHEN p_kind = 'lease' THEN
            -- $1 the lease's end, $2 the claimed ids, $3 the group.
            $t$PREPARE %1$I(pg_catalog.timestamptz, pg_catalog.int8[], pg_catalog.int4) AS
            WITH leased AS (
                UPDATE %2$s e SET lease_until = $1 WHERE e.id = ANY ($2) RETURNING e.*
            )
            SELECT $3, leased::billing.outbox_event
              FROM leased ORDER BY billing._outbox_order(leased.aggregate_seq, leased.id), leased.id$t$
        WHEN p_kind = 'mark' THEN
            -- $1 now, $2 the ids Kafka acknowledged; how many rows changed (PL/pgSQL gets no row count
            -- back from running a prepared statement).
            $t$PREPARE %1$I(pg_catalog.timestamptz, pg_catalog.int8[]) AS
            WITH marked AS (
                UPDATE %2$s e SET status = 'PUBLISHED', published_at = $1, lease_until = NULL
                 WHERE e.id = ANY ($2) AND e.status = 'PENDING'
                RETURNING 1
            )
            SELECT pg_catalog.count(*)::integer FROM marked$t$
    END;
    IF v_template IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = format('no relay statement %L', p_kind);
    END IF;
    v_names := ARRAY(SELECT 'billing_relay_' || p_kind || '_' || pg_catalog.left(pg_catalog.md5(t.name), 16)
                       FROM pg_catalog.unnest(p_tables) WITH ORDINALITY t(name, i) ORDER BY t.i);
    -- The session's statements read once a call; missing or different ones (re)made.
    FOR v_stale IN
        SELECT w.name, w.shard, p.name IS NOT NULL AS present
          FROM unnest(v_names, p_tables) w(name, shard)
          LEFT JOIN pg_catalog.pg_prepared_statements p ON p.name = w.name
         WHERE p.statement IS DISTINCT FROM format(v_template, w.name, w.shard)
    LOOP
        IF v_stale.present THEN
            EXECUTE format('DEALLOCATE %I', v_stale.name);
        END IF;
        EXECUTE format(v_template, v_stale.name, v_stale.shard);
    END LOOP;
    RETURN v_names;
END
$$;
COMMENT ON FUNCTION billing._relay_statements(text, text[]) IS
'Private: the names of this session''s prepared relay statements (p_kind claim, lease or mark) on the given shards, in their order, each prepared now when missing or not exactly the relay''s text (kept per session: planned once, a generic plan).
Returns one name per table; BL422 for an unknown kind.';

-- A timestamptz as a literal for an EXECUTE of a prepared statement (parameters cannot be bound
-- there from PL/pgSQL): JSON's ISO 8601 form with its offset, exact to the microsecond and read
-- back the same whatever the session's DateStyle or time zone.
CREATE OR REPLACE FUNCTION billing._timestamptz_literal(p_at timestamptz)
RETURNS text
LANGUAGE sql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
    SELECT pg_catalog.quote_literal(pg_catalog.to_json(p_at) #>> '{}') || '::pg_catalog.timestamptz'
$$;
COMMENT ON FUNCTION billing._timestamptz_literal(timestamptz) IS
'Private: p_at as an SQL literal that reads back exactly in any session (ISO 8601 with its offset).
Returns text.';

-- The claim in several groups of one node at once (issue 32): one call per node and round instead
-- of one per group, the catalog read once (_shard_tables), one audit row. Each group's statements
-- are claim_outbox_events' statement inside that group, prepared once per session
-- (_relay_statements); claim_outbox_events_in_shard is this claim of one group.
CREATE OR REPLACE FUNCTION billing._claim_outbox_in_shards(
    p_shard_groups integer[], p_batch_size integer, p_lease interval, p_now timestamptz)
RETURNS TABLE (shard_group integer, event billing.outbox_event)
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
SET jit = off
SET enable_bitmapscan = off
SET enable_seqscan = off  -- the PENDING events through their index, never the whole shard
SET plan_cache_mode = force_generic_plan  -- the prepared statements: planned once per session
AS $$
DECLARE
    v_groups integer[];
    v_tables text[];
    v_claim  text[];
    v_lease  text[];
    v_now    text;
    v_until  text;
    v_ids    bigint[];
BEGIN
    -- The catalog first, every call: BL404/BL409 before any statement runs.
    SELECT pg_catalog.array_agg(t.shard_group ORDER BY t.shard_group), pg_catalog.array_agg(t.table_name ORDER BY t.shard_group)
      INTO v_groups, v_tables
      FROM billing._shard_tables('billing.outbox_event', p_shard_groups) t;
    IF v_groups IS NULL THEN
        RETURN;
    END IF;
    v_claim := billing._relay_statements('claim', v_tables);
    v_lease := billing._relay_statements('lease', v_tables);
    v_now := billing._timestamptz_literal(p_now);
    v_until := billing._timestamptz_literal(p_now + p_lease);
    FOR i IN 1 .. pg_catalog.cardinality(v_groups) LOOP
        EXECUTE format('EXECUTE %I(%s, %s)', v_claim[i], v_now, p_batch_size) INTO v_ids;
        IF v_ids IS NULL THEN
            CONTINUE;  -- nothing due in this group: no update
        END IF;
        RETURN QUERY EXECUTE format('EXECUTE %I(%s, %L::pg_catalog.int8[], %s)', v_lease[i], v_until, v_ids, v_groups[i]);
    END LOOP;
END
$$;
COMMENT ON FUNCTION billing._claim_outbox_in_shards(integer[], integer, interval, timestamptz) IS
'Private: the relay''s claim in each of the given shard groups of this node (claim_outbox_events_in_shards, claim_outbox_events_in_shard): up to p_batch_size due PENDING events a group (SKIP LOCKED), none while an earlier unpublished event of its aggregate is PENDING outside the claim, each leased until p_now + p_lease.
Returns the claimed events by group, each group''s in the outbox''s order; BL404/BL409 as _shard_tables.';

CREATE OR REPLACE FUNCTION billing.claim_outbox_events_in_shards(
    p_worker text, p_shard_groups integer[], p_batch_size integer DEFAULT 500,
    p_lease interval DEFAULT interval '30 seconds', p_now timestamptz DEFAULT now())
RETURNS TABLE (shard_group integer, event billing.outbox_event)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_claimed bigint;
BEGIN
    PERFORM billing._check_claim(p_worker, p_batch_size, p_lease, p_now);
    PERFORM billing._check_between('shard groups', pg_catalog.cardinality(p_shard_groups), 1, 10000);
    -- No shard lease here: the relays share the groups with advisory locks (relay_shard_groups).
    RETURN QUERY SELECT c.shard_group, c.event
                   FROM billing._claim_outbox_in_shards(p_shard_groups, p_batch_size, p_lease, p_now) c;
    GET DIAGNOSTICS v_claimed = ROW_COUNT;
    -- One audit row per call, only when something was claimed (an idle relay asks every poll).
    IF v_claimed > 0 THEN
        PERFORM billing._audit('claim_outbox_events_in_shards', jsonb_build_object('worker', p_worker, 'shard_groups', p_shard_groups, 'batch_size', p_batch_size, 'lease', p_lease, 'now', p_now, 'claimed', v_claimed));
    END IF;
END
$$;
COMMENT ON FUNCTION billing.claim_outbox_events_in_shards(text, integer[], integer, interval, timestamptz) IS
'The relay''s claim in several shard groups at once, on the node holding them (p_worker names the relay in the audit): in each group, up to p_batch_size due PENDING events (SKIP LOCKED), none while an earlier unpublished event of its aggregate is PENDING outside the claim, each leased until p_now + p_lease. One call per node for all its groups: the catalog read once, one audit row.
Returns the claimed events with their group, each group''s in the outbox''s order (billing._outbox_order, then id); BL409 when a group is not on this node, BL404 for an unknown group, BL422 for a bad worker name, batch size, lease or an empty or NULL list of groups.';

CREATE OR REPLACE FUNCTION billing.claim_outbox_events_in_shard(
    p_worker text, p_shard_group integer, p_batch_size integer DEFAULT 500, p_lease interval DEFAULT interval '30 seconds',
    p_now timestamptz DEFAULT now())
RETURNS SETOF billing.outbox_event
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_claimed bigint;
BEGIN
    PERFORM billing._check_claim(p_worker, p_batch_size, p_lease, p_now);
    -- No shard lease here: the relays share the groups with advisory locks (relay_shard_groups).
    RETURN QUERY SELECT (c.event).*
                   FROM billing._claim_outbox_in_shards(ARRAY[p_shard_group], p_batch_size, p_lease, p_now) c;
    GET DIAGNOSTICS v_claimed = ROW_COUNT;
    -- An audit row only when something was claimed (an idle relay asks every poll, per group).
    IF v_claimed > 0 THEN
        PERFORM billing._audit('claim_outbox_events_in_shard', jsonb_build_object('worker', p_worker, 'shard_group', p_shard_group, 'batch_size', p_batch_size, 'lease', p_lease, 'now', p_now, 'claimed', v_claimed));
    END IF;
END
$$;
COMMENT ON FUNCTION billing.claim_outbox_events_in_shard(text, integer, integer, interval, timestamptz) IS
'The relay''s claim inside one shard group, on the node holding it (p_worker names the relay in the audit): up to p_batch_size due PENDING events (SKIP LOCKED), none while an earlier unpublished event of its aggregate is PENDING outside the claim, each leased until p_now + p_lease. claim_outbox_events_in_shards for one group.
Returns the claimed events in the outbox''s order (billing._outbox_order, then id); BL409 on a node that does not hold the group, BL404 for an unknown group, BL422 for a bad worker name, batch size or lease.';
-- claim_outbox_in_shard (a claim without the work) was never called by the driver: removed.
DROP FUNCTION IF EXISTS billing.claim_outbox_in_shard(text, integer, integer, interval, timestamptz);

CREATE OR REPLACE FUNCTION billing.mark_outbox_published(p_ids bigint[], p_now timestamptz DEFAULT now())
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_count integer;
    v_customers bigint[];
BEGIN
    PERFORM billing._audit('mark_outbox_published', jsonb_build_object('ids', p_ids, 'now', p_now));
    PERFORM billing._check_now(p_now);
    IF billing._distributed('billing.outbox_event') THEN
        -- Their customers first (an unlocked read of every shard by the id index), then one
        -- statement on their shards only. Ids are unique across the cluster (each node its own
        -- range of the sequence), so customer_id = ANY and id = ANY name exactly these rows.
        v_customers := billing._outbox_event_customers(p_ids);
        UPDATE billing.outbox_event
           SET status = 'PUBLISHED', published_at = p_now, lease_until = NULL
         WHERE customer_id = ANY (v_customers) AND id = ANY (p_ids) AND status = 'PENDING';
        GET DIAGNOSTICS v_count = ROW_COUNT;
        RETURN v_count;
    END IF;
    UPDATE billing.outbox_event
       SET status = 'PUBLISHED', published_at = p_now, lease_until = NULL
     WHERE id = ANY (p_ids) AND status = 'PENDING';
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END
$$;
COMMENT ON FUNCTION billing.mark_outbox_published(bigint[], timestamptz) IS
'Marks the given PENDING events PUBLISHED (Kafka acknowledged them); others are left alone.
Returns how many rows changed.';

CREATE OR REPLACE FUNCTION billing.mark_outbox_published_in_shard(
    p_shard_group integer, p_ids bigint[], p_now timestamptz DEFAULT now())
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_count integer;
BEGIN
    PERFORM billing._check_now(p_now);
    -- No lease check: Kafka acknowledged these events, so marking them is right whoever holds the
    -- group now (at least once); only PENDING rows change.
    EXECUTE format($q$
        UPDATE %s e SET status = 'PUBLISHED', published_at = $1, lease_until = NULL
         WHERE e.id = ANY ($2) AND e.status = 'PENDING'$q$, billing._shard_table('billing.outbox_event', p_shard_group))
      USING p_now, p_ids;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    -- No audit row (issue 32): the claim's row names the relay, the group and how many it took, and
    -- a mark only records what Kafka acknowledged (each row's published_at). An audit row of
    -- customer 0 written from here is a write to another node whenever customer 0's shard is not on
    -- this one: a two-phase commit per mark, and the ids of the whole batch in its arguments.
    RETURN v_count;
END
$$;
COMMENT ON FUNCTION billing.mark_outbox_published_in_shard(integer, bigint[], timestamptz) IS
'mark_outbox_published inside one shard group, on the node holding it: the given PENDING events of the group are PUBLISHED (Kafka acknowledged them).
Returns how many rows changed; BL409 on a node that does not hold the group, BL404 for an unknown group.';

-- The mark in several groups of one node at once (issue 32): one call per node from its marker,
-- the catalog read once. p_shard_groups[i] is the group of p_ids[i].
CREATE OR REPLACE FUNCTION billing.mark_outbox_published_in_shards(
    p_shard_groups integer[], p_ids bigint[], p_now timestamptz DEFAULT now())
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan  -- the prepared marks: planned once per session
AS $$
DECLARE
    v_tables text[];
    v_ids    text[];
    v_mark   text[];
    v_now    text;
    v_count  integer;
    v_total  integer := 0;
BEGIN
    PERFORM billing._check_now(p_now);
    IF p_shard_groups IS NULL OR p_ids IS NULL
       OR pg_catalog.cardinality(p_shard_groups) <> pg_catalog.cardinality(p_ids) THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('one shard group per event id: %s groups for %s ids',
                             coalesce(pg_catalog.cardinality(p_shard_groups)::text, 'NULL'),
                             coalesce(pg_catalog.cardinality(p_ids)::text, 'NULL')),
            HINT = 'Pass the group of each id at the same place (p_shard_groups[i] for p_ids[i]).';
    END IF;
    -- No lease check and no audit row, as mark_outbox_published_in_shard (below). The ids grouped
    -- once (not one pass over them per group), the catalog read first (BL404/BL409 before any
    -- statement runs), then each group's prepared mark (_relay_statements).
    SELECT pg_catalog.array_agg(t.table_name ORDER BY t.shard_group),
           pg_catalog.array_agg(g.ids::text ORDER BY t.shard_group)
      INTO v_tables, v_ids
      FROM billing._shard_tables('billing.outbox_event', p_shard_groups) t
      JOIN (SELECT u.shard_group, pg_catalog.array_agg(u.id) AS ids
              FROM unnest(p_shard_groups, p_ids) AS u(shard_group, id)
             GROUP BY u.shard_group) g ON g.shard_group = t.shard_group;
    IF v_tables IS NULL THEN
        RETURN 0;
    END IF;
    v_mark := billing._relay_statements('mark', v_tables);
    v_now := billing._timestamptz_literal(p_now);
    FOR i IN 1 .. pg_catalog.cardinality(v_tables) LOOP
        EXECUTE format('EXECUTE %I(%s, %L::pg_catalog.int8[])', v_mark[i], v_now, v_ids[i]) INTO v_count;
        v_total := v_total + v_count;
    END LOOP;
    RETURN v_total;
END
$$;
COMMENT ON FUNCTION billing.mark_outbox_published_in_shards(integer[], bigint[], timestamptz) IS
'mark_outbox_published_in_shard for several groups of one node at once (its relay marker''s one call): the given PENDING events are PUBLISHED (Kafka acknowledged them), p_shard_groups[i] naming the group of p_ids[i].
Returns how many rows changed; BL422 unless both arrays have the same length, BL409 when a group is not on this node, BL404 for an unknown group.';

CREATE OR REPLACE FUNCTION billing.mark_outbox_failed(p_id bigint, p_error text, p_now timestamptz DEFAULT now())
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    -- After 10 failed publishes (about 36 minutes of retries) an event is DEAD: kept, never
    -- deleted, visible in `billing status`, and no longer holding back its aggregate.
    c_max_attempts constant integer := 10;
    v_event billing.outbox_event;
    v_customer_id bigint;
BEGIN
    PERFORM billing._audit('mark_outbox_failed', jsonb_build_object('id', p_id, 'error', left(p_error, 200), 'now', p_now));
    PERFORM billing._check_now(p_now);
    -- The row by (customer_id, id): one shard on Citus (convention 1 of the SQL API).
    v_customer_id := (billing._outbox_event_customers(ARRAY[p_id]))[1];
    SELECT * INTO v_event FROM billing.outbox_event WHERE customer_id = v_customer_id AND id = p_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'BL404', MESSAGE = format('outbox event %s does not exist', coalesce(p_id::text, 'NULL'));
    END IF;
    IF v_event.status <> 'PENDING' THEN
        RETURN;  -- published meanwhile (at least once is enough) or already dead
    END IF;
    -- From the locked row's values (Citus refuses a STABLE timestamptz + interval over a column in
    -- an UPDATE of a distributed table).
    UPDATE billing.outbox_event
       SET attempts = v_event.attempts + 1,
           last_error = left(coalesce(p_error, 'unknown error'), 2000),
           lease_until = NULL,
           status = CASE WHEN v_event.attempts + 1 >= c_max_attempts THEN 'DEAD' ELSE 'PENDING' END,
           -- 5 s, 10 s, 20 s ... capped at 15 minutes
           available_at = p_now + least(interval '5 seconds' * power(2, v_event.attempts), interval '15 minutes')
     WHERE customer_id = v_customer_id AND id = p_id;
END
$$;
COMMENT ON FUNCTION billing.mark_outbox_failed(bigint, text, timestamptz) IS
'Records a failed publish: retried after an exponential backoff (5 s doubling, capped at 15 min), DEAD after 10 failures (kept).
Returns nothing; BL404 for an unknown id.';

CREATE OR REPLACE FUNCTION billing.mark_outbox_failed_in_shard(
    p_shard_group integer, p_id bigint, p_error text, p_now timestamptz DEFAULT now())
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    c_max_attempts constant integer := 10;  -- as mark_outbox_failed
    v_table    text;
    v_attempts integer;
BEGIN
    PERFORM billing._audit('mark_outbox_failed_in_shard', jsonb_build_object('shard_group', p_shard_group, 'id', p_id, 'error', left(p_error, 200), 'now', p_now));
    PERFORM billing._check_now(p_now);
    v_table := billing._shard_table('billing.outbox_event', p_shard_group);
    EXECUTE format('SELECT e.attempts FROM %s e WHERE e.id = $1 FOR UPDATE', v_table) INTO v_attempts USING p_id;
    IF v_attempts IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'BL404',
            MESSAGE = format('outbox event %s does not exist in shard group %s', coalesce(p_id::text, 'NULL'), p_shard_group);
    END IF;
    -- Published meanwhile (at least once is enough) or already dead: nothing to do.
    EXECUTE format($q$
        UPDATE %s e
           SET attempts = $4 + 1,
               last_error = left(coalesce($2, 'unknown error'), 2000),
               lease_until = NULL,
               status = CASE WHEN $4 + 1 >= $5 THEN 'DEAD' ELSE 'PENDING' END,
               available_at = $3 + least(interval '5 seconds' * power(2, $4), interval '15 minutes')
         WHERE e.id = $1 AND e.status = 'PENDING'$q$, v_table)
      USING p_id, p_error, p_now, v_attempts, c_max_attempts;
END
$$;
COMMENT ON FUNCTION billing.mark_outbox_failed_in_shard(integer, bigint, text, timestamptz) IS
'mark_outbox_failed inside one shard group, on the node holding it: backoff 5 s doubling (capped at 15 min), DEAD after 10 failures.
Returns nothing; BL404 for an event not in the group, BL409 on a node that does not hold the group.';

-- The relay's shard groups and the node holding each. The relays share them among themselves with
-- advisory locks on the coordinator (billing.worker.relay.ShardRelay: a relay instance holds at most
-- ceil(groups / relays up) group locks, and a dead relay's locks go with its session), not with
-- billing.shard_lease: those leases are the batch workers' (renewal, charges), and a relay holding
-- one would keep them out of its group. Like those leases, the group locks only spread the work:
-- what keeps an event from being published out of order is the claim (row locks, row leases and
-- the head-of-line rule), whoever calls it.
CREATE OR REPLACE FUNCTION billing.relay_shard_groups()
RETURNS TABLE (shard_group integer, node_name text, node_port integer)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
    SELECT g.shard_group, g.node_name, g.node_port FROM billing._shard_groups() g ORDER BY g.shard_group
$$;
COMMENT ON FUNCTION billing.relay_shard_groups() IS
'The shard groups the relay publishes from, with the node holding each (one group, 0, this database, on a single PostgreSQL).
Returns one row per group, in order.';
