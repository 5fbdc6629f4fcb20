-- 16_shards: the shard groups and their leases, the ground of the batch claims inside one shard
-- group (docs/scaling.md, "Batch claims").
-- On Citus a claim cannot be one statement over the distributed tables ("could not run distributed
-- query with FOR UPDATE/SHARE commands"); it runs inside one shard group instead: a worker leases
-- groups (lease_shard_groups), then, connected to the node holding a group, claims in it. There
-- the statement reads and locks the group's own shards (their tables on that node): plain
-- PostgreSQL, FOR UPDATE SKIP LOCKED included. On a single PostgreSQL there is one group, 0: the
-- tables themselves, so the same calls work there.
-- Re-applied after every migration: CREATE OR REPLACE only.
-- Each claim inside a group sits beside its single-node twin: renew_in_shard in 41_renewal_rows.sql,
-- charge_claims_in_shard in 51_charge_claims.sql, refund_claims_in_shard in 58_refund_claims.sql,
-- the relay's claim_outbox_events_in_shard in 65_outbox_relay.sql.

CREATE OR REPLACE FUNCTION billing._distributed(p_table regclass)
RETURNS boolean
LANGUAGE plpgsql STABLE
-- (no SET search_path: a private helper, run inside its definer caller's; a SET costs ~7 us a call, issue 32)
AS $$
BEGIN
    IF pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NULL THEN
        RETURN false;  -- no Citus here
    END IF;
    -- Static SQL: planned once per session, and never without Citus (the branch above returns).
    RETURN EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition d WHERE d.logicalrelid = p_table AND d.partmethod = 'h');
END
$$;
COMMENT ON FUNCTION billing._distributed(regclass) IS
'Private: whether the table is distributed by hash on a Citus cluster (false on a single PostgreSQL).
Returns a boolean.';

CREATE OR REPLACE FUNCTION billing._shard_groups()
RETURNS TABLE (shard_group integer, node_name text, node_port integer, is_local boolean)
LANGUAGE plpgsql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    IF NOT billing._distributed('billing.customer') THEN
        RETURN QUERY SELECT 0, NULL::text, NULL::integer, true;
        RETURN;
    END IF;
    -- Groups numbered 1..n in hash order of billing.customer's shards; every colocated table has
    -- the same ranges in the same order, on the same node. Each shard's placements through their
    -- shardid index (LATERAL): a plain join of the catalog tables was planned as a scan of every
    -- placement of every table (16 ms at 64 groups, issue 32). Static SQL: planned once per
    -- session, and never without Citus (the branch above returns).
    RETURN QUERY
        SELECT s.shard_group, n.nodename::text, n.nodeport::integer,
               n.groupid = (SELECT l.groupid FROM pg_catalog.pg_dist_local_group l)
          FROM (SELECT (pg_catalog.row_number() OVER (ORDER BY d.shardminvalue::bigint))::integer AS shard_group, d.shardid
                  FROM pg_catalog.pg_dist_shard d
                 WHERE d.logicalrelid = 'billing.customer'::regclass) s
         CROSS JOIN LATERAL (SELECT p.groupid FROM pg_catalog.pg_dist_placement p WHERE p.shardid = s.shardid OFFSET 0) p
          JOIN pg_catalog.pg_dist_node n ON n.groupid = p.groupid AND n.noderole = 'primary'
         ORDER BY 1;
END
$$;
COMMENT ON FUNCTION billing._shard_groups() IS
'Private: the shard groups of the batch claims and the node holding each (1..n in hash order on Citus; one group 0, the whole database, on a single PostgreSQL).
Returns one row per group: its number, the node''s name and port, and whether it is this node.';

-- The tables of several groups at once, from one read of Citus' catalog (issue 32: a call per node
-- for all its groups, where the relay used to read the catalog twice per group and call; at 64
-- groups that read was most of a claim or mark of a few rows). The catalog is read every call, never
-- kept across calls: a group that moved must be refused (BL409) by the node it left, at once.
CREATE OR REPLACE FUNCTION billing._shard_tables(p_table regclass, p_shard_groups integer[])
RETURNS TABLE (shard_group integer, table_name text)
LANGUAGE plpgsql STABLE
SET search_path = billing, pg_catalog, pg_temp
-- Planned once per session (issue 32, groups3): a custom plan of the catalog query below was made at
-- every call (~1 ms, most of a call), and the catalog read through its indexes, never a scan of every
-- shard or placement of the cluster (2,002 shards at 64 groups).
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
DECLARE
    v_local  integer;
    v_groups integer[];
    v_found  record;
    v_group  integer;
    v_node   record;
BEGIN
    -- Each group once, in order; a NULL group is unknown (BL404 below).
    v_groups := ARRAY(SELECT DISTINCT g FROM pg_catalog.unnest(p_shard_groups) g ORDER BY g);
    IF NOT billing._distributed(p_table) THEN
        -- A single PostgreSQL (one group, 0) or a table not distributed: the table itself.
        FOREACH v_group IN ARRAY v_groups LOOP
            IF v_group IS NULL OR NOT EXISTS (SELECT 1 FROM billing._shard_groups() g WHERE g.shard_group = v_group) THEN
                RAISE EXCEPTION USING ERRCODE = 'BL404',
                    MESSAGE = format('shard group %s does not exist', coalesce(v_group::text, 'NULL')),
                    HINT = 'Claim in the groups lease_shard_groups returned (one group, 0, on a single PostgreSQL).';
            END IF;
            shard_group := v_group;
            -- Qualified whatever the search_path (the relay's statements are kept per session).
            table_name := (SELECT pg_catalog.format('%I.%I', n.nspname, c.relname)
                             FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                            WHERE c.oid = p_table);
            RETURN NEXT;
        END LOOP;
        RETURN;
    END IF;
    -- Groups numbered 1..n in hash order of the table's shards: the same ranges, in the same order
    -- and on the same nodes, as billing.customer's (_shard_groups; every table is colocated with it).
    -- Static SQL: planned once per session (this branch never runs without Citus). The table's
    -- shards by its logicalrelid index, each one's placement on this node by the shardid index.
    v_local := (SELECT l.groupid FROM pg_catalog.pg_dist_local_group l);
    FOR v_found IN
        WITH shard AS (
            SELECT (pg_catalog.row_number() OVER (ORDER BY s.shardminvalue::bigint))::integer AS shard_group, s.shardid
              FROM pg_catalog.pg_dist_shard s
             WHERE s.logicalrelid = p_table)
        SELECT w.g, s.shardid,
               EXISTS (SELECT 1 FROM pg_catalog.pg_dist_placement p
                        WHERE p.shardid = s.shardid AND p.groupid = v_local OFFSET 0) AS is_local
          FROM pg_catalog.unnest(v_groups) w(g)
          LEFT JOIN shard s ON s.shard_group = w.g
         ORDER BY w.g NULLS FIRST
    LOOP
        IF v_found.shardid IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'BL404',
                MESSAGE = format('shard group %s does not exist', coalesce(v_found.g::text, 'NULL')),
                HINT = 'Claim in the groups lease_shard_groups returned (one group, 0, on a single PostgreSQL).';
        END IF;
        IF NOT v_found.is_local THEN
            SELECT * INTO v_node FROM billing._shard_groups() g WHERE g.shard_group = v_found.g;
            RAISE EXCEPTION USING ERRCODE = 'BL409',
                MESSAGE = format('shard group %s is on node %s:%s, not on this one', v_found.g, v_node.node_name,
                                 v_node.node_port),
                HINT = 'Claim on the node lease_shard_groups names for the group (a group that moved: lease again).';
        END IF;
        shard_group := v_found.g;
        table_name := shard_name(p_table, v_found.shardid);
        RETURN NEXT;
    END LOOP;
END
$$;
COMMENT ON FUNCTION billing._shard_tables(regclass, integer[]) IS
'Private: _shard_table for several groups at once, from one read of the catalog: each group once, in order, with the table to claim from (on Citus the group''s shard of p_table, on a single PostgreSQL the table itself, group 0).
Returns one row per group; BL404 for an unknown group, BL409 for a group not on this node.';

CREATE OR REPLACE FUNCTION billing._shard_table(p_table regclass, p_shard_group integer)
RETURNS text
LANGUAGE sql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
    SELECT t.table_name FROM billing._shard_tables(p_table, ARRAY[p_shard_group]) t
$$;
COMMENT ON FUNCTION billing._shard_table(regclass, integer) IS
'Private: the table to claim from for one shard group: on Citus the group''s shard of p_table (BL409 unless it is on this node), on a single PostgreSQL the table itself (group 0).
Returns a qualified, quoted relation name; BL404 for an unknown group.';

CREATE OR REPLACE FUNCTION billing._check_shard_lease(p_worker text, p_shard_group integer, p_now timestamptz)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM billing._check_worker(p_worker);  -- as _check_claim (10_util.sql)
    IF NOT EXISTS (SELECT 1 FROM billing.shard_lease l WHERE l.shard_group = p_shard_group) THEN
        RAISE EXCEPTION USING ERRCODE = 'BL404',
            MESSAGE = format('shard group %s does not exist', coalesce(p_shard_group::text, 'NULL')),
            HINT = 'Claim in the groups lease_shard_groups returned (one group, 0, on a single PostgreSQL).';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM billing.shard_lease l
                    WHERE l.shard_group = p_shard_group AND l.holder = p_worker AND l.lease_until > p_now) THEN
        RAISE EXCEPTION USING ERRCODE = 'BL409',
            MESSAGE = format('worker %L does not hold the lease of shard group %s at %s', p_worker,
                             coalesce(p_shard_group::text, 'NULL'), p_now),
            HINT = 'Lease the group with lease_shard_groups first (a lease that ran out may be another worker''s now).';
    END IF;
END
$$;
COMMENT ON FUNCTION billing._check_shard_lease(text, integer, timestamptz) IS
'Private: BL404 for a shard group that does not exist, BL409 unless p_worker holds its lease at p_now.
Returns nothing.';

CREATE OR REPLACE FUNCTION billing.lease_shard_groups(
    p_worker text, p_max_groups integer, p_lease interval DEFAULT interval '30 seconds', p_now timestamptz DEFAULT now())
RETURNS TABLE (shard_group integer, lease_until timestamptz, node_name text, node_port integer)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_held     integer;
    v_taken    integer := 0;
    v_released integer := 0;
    v_groups   integer;
    v_alive    integer;
    v_share    integer;
BEGIN
    PERFORM billing._check_now(p_now);
    PERFORM billing._check_worker(p_worker);  -- as _check_claim (10_util.sql)
    PERFORM billing._check_between('max groups', p_max_groups, 1, 10000);
    PERFORM billing._check_lease(p_lease);
    -- The worker is alive until p_now + p_lease; its fair share is the groups over the workers
    -- alive, rounded up (at most p_max_groups), so a worker that starts after the others gets
    -- groups too: the others give back what they hold beyond their share at their next call.
    INSERT INTO billing.shard_worker AS w (worker, seen_until) VALUES (p_worker, p_now + p_lease)
    ON CONFLICT (worker) DO UPDATE SET seen_until = excluded.seen_until;
    SELECT count(*) INTO v_groups FROM billing.shard_lease;
    SELECT count(*) INTO v_alive FROM billing.shard_worker w WHERE w.seen_until > p_now;
    v_share := least(p_max_groups, ceil(v_groups::numeric / greatest(v_alive, 1))::integer);
    -- The worker's own leases, renewed.
    UPDATE billing.shard_lease l
       SET lease_until = p_now + p_lease
     WHERE l.holder = p_worker AND l.lease_until > p_now;
    GET DIAGNOSTICS v_held = ROW_COUNT;
    IF v_held > v_share THEN
        -- Beyond its share: the highest groups go back, free at once (the rows they claimed stay
        -- locked or leased by their own claims, so a new holder cannot take them twice).
        UPDATE billing.shard_lease l
           SET holder = NULL, lease_until = NULL, leased_at = NULL
         WHERE l.shard_group IN (SELECT h.shard_group FROM billing.shard_lease h
                                  WHERE h.holder = p_worker AND h.lease_until > p_now
                                  ORDER BY h.shard_group DESC LIMIT v_held - v_share);
        GET DIAGNOSTICS v_released = ROW_COUNT;
        v_held := v_held - v_released;
    END IF;
    -- Free groups, or groups whose lease ran out, up to the share. Two workers after the same
    -- group: the second waits for the first's row lock, then finds it held and takes nothing.
    IF v_held < v_share THEN
        UPDATE billing.shard_lease l
           SET holder = p_worker, lease_until = p_now + p_lease, leased_at = p_now
         WHERE l.shard_group IN (SELECT f.shard_group FROM billing.shard_lease f
                                  WHERE f.lease_until IS NULL OR f.lease_until <= p_now
                                  ORDER BY f.lease_until NULLS FIRST, f.shard_group
                                  LIMIT v_share - v_held)
           AND (l.lease_until IS NULL OR l.lease_until <= p_now);
        GET DIAGNOSTICS v_taken = ROW_COUNT;
    END IF;
    -- Workers not seen for a day are forgotten.
    DELETE FROM billing.shard_worker w WHERE w.seen_until < p_now - interval '1 day';
    -- An audit row when a group changes hands (renewing one's own leases changes no holder).
    IF v_taken > 0 OR v_released > 0 THEN
        PERFORM billing._audit('lease_shard_groups', jsonb_build_object('worker', p_worker, 'max_groups', p_max_groups, 'lease', p_lease, 'now', p_now, 'taken', v_taken, 'released', v_released));
    END IF;
    RETURN QUERY
    SELECT l.shard_group, l.lease_until, g.node_name, g.node_port
      FROM billing.shard_lease l
      LEFT JOIN billing._shard_groups() g ON g.shard_group = l.shard_group
     WHERE l.holder = p_worker AND l.lease_until > p_now
     ORDER BY l.shard_group;
END
$$;
COMMENT ON FUNCTION billing.lease_shard_groups(text, integer, interval, timestamptz) IS
'Leases shard groups to a batch worker (docs/scaling.md): the worker counts as alive until p_now + p_lease; it renews its own leases to p_now + p_lease, gives back what it holds beyond its fair share (the groups over the workers alive, rounded up, at most p_max_groups), then takes free groups or groups whose lease ran out up to that share. The lease spreads the groups over the workers; what keeps a row from being claimed twice is the claim itself (row locks, row leases).
Returns the groups the worker holds, with the node holding each (NULL on a single PostgreSQL: group 0, this database); BL422 for a bad worker name, count or lease.';

CREATE OR REPLACE FUNCTION billing.shard_groups(p_now timestamptz DEFAULT now())
RETURNS TABLE (shard_group integer, node_name text, node_port integer, holder text, lease_until timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM billing._check_now(p_now);
    RETURN QUERY
    SELECT g.shard_group, g.node_name, g.node_port,
           CASE WHEN l.lease_until > p_now THEN l.holder END, CASE WHEN l.lease_until > p_now THEN l.lease_until END
      FROM billing._shard_groups() g
      LEFT JOIN billing.shard_lease l ON l.shard_group = g.shard_group
     ORDER BY g.shard_group;
END
$$;
COMMENT ON FUNCTION billing.shard_groups(timestamptz) IS
'The shard groups of the batch claims: each with the node holding it (NULL on a single PostgreSQL: one group, 0, this database) and its lease holder at p_now (NULL when free). The worker reads it to choose its path: per shard group when a node is named.
Returns one row per group.';

-- The renewal statement inside one shard group, set-based (renew_in_shard's fast path): the same
-- statement as _renew_batch (40_renewal.sql), run on the group's own shards on the node that holds
-- it (on a single PostgreSQL, group 0: the tables themselves), where it is plain PostgreSQL. Names
-- substituted: the group's shards of subscription, credit_balance, customer, invoice, credit_entry
-- and outbox_event, this node's copies of the reference tables plan and plan_price; ids from each
-- table's own sequence (a shard has no identity default: Citus gives each node its own range);
-- the tax through _tax_of called per row (not inlined: it reads the rates, a Citus table). Keep it
-- in step with _renew_batch: 06_renewal and 83_shard_claims compare them.
CREATE OR REPLACE FUNCTION billing._local_table(p_table regclass)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_name text;
BEGIN
    IF pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NULL THEN
        RETURN p_table::text;
    END IF;
    -- A reference table: its one shard, of which every node holds a copy.
    EXECUTE format('SELECT shard_name($1, s.shardid) FROM pg_catalog.pg_dist_shard s WHERE s.logicalrelid = $1')
       INTO v_name USING p_table;
    RETURN coalesce(v_name, p_table::text);
END
$$;
COMMENT ON FUNCTION billing._local_table(regclass) IS
'Private: this node''s copy of a reference table on Citus (its shard), the table itself elsewhere.
Returns a qualified, quoted relation name.';
