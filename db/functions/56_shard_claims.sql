-- 56_shard_claims: the batch claims inside one shard group (docs/scaling.md, "Batch claims").
-- On Citus a claim cannot be one statement over the distributed tables ("could not run distributed
-- query with FOR UPDATE/SHARE commands"); it runs inside one shard group instead: a worker leases
-- groups (lease_shard_groups), then, connected to the node holding a group, claims in it. There
-- the statement reads and locks the group's own shards (their tables on that node): plain
-- PostgreSQL, FOR UPDATE SKIP LOCKED included. On a single PostgreSQL there is one group, 0: the
-- tables themselves, so the same calls work there.
-- Re-applied after every migration: CREATE OR REPLACE only.

CREATE OR REPLACE FUNCTION billing._distributed(p_table regclass)
RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_distributed boolean;
BEGIN
    IF pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NULL THEN
        RETURN false;  -- no Citus here
    END IF;
    EXECUTE format('SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition WHERE logicalrelid = $1 AND partmethod = %L)', 'h')
       INTO v_distributed USING p_table;
    RETURN v_distributed;
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
    -- the same ranges in the same order, on the same node.
    RETURN QUERY EXECUTE format($q$
        SELECT (pg_catalog.row_number() OVER (ORDER BY s.shardminvalue::bigint))::integer,
               n.nodename::text, n.nodeport::integer,
               n.groupid = (SELECT g.groupid FROM pg_catalog.pg_dist_local_group g)
          FROM pg_catalog.pg_dist_shard s
          JOIN pg_catalog.pg_dist_placement p ON p.shardid = s.shardid
          JOIN pg_catalog.pg_dist_node n ON n.groupid = p.groupid AND n.noderole = 'primary'
         WHERE s.logicalrelid = 'billing.customer'::regclass
         ORDER BY 1$q$);
END
$$;
COMMENT ON FUNCTION billing._shard_groups() IS
'Private: the shard groups of the batch claims and the node holding each (1..n in hash order on Citus; one group 0, the whole database, on a single PostgreSQL).
Returns one row per group: its number, the node''s name and port, and whether it is this node.';

CREATE OR REPLACE FUNCTION billing._shard_table(p_table regclass, p_shard_group integer)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_group record;
    v_name  text;
BEGIN
    SELECT * INTO v_group FROM billing._shard_groups() g WHERE g.shard_group = p_shard_group;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'BL404',
            MESSAGE = format('shard group %s does not exist', coalesce(p_shard_group::text, 'NULL')),
            HINT = 'Claim in the groups lease_shard_groups returned (one group, 0, on a single PostgreSQL).';
    END IF;
    IF NOT billing._distributed(p_table) THEN
        RETURN p_table::text;
    END IF;
    IF NOT v_group.is_local THEN
        RAISE EXCEPTION USING ERRCODE = 'BL409',
            MESSAGE = format('shard group %s is on node %s:%s, not on this one', p_shard_group, v_group.node_name,
                             v_group.node_port),
            HINT = 'Claim on the node lease_shard_groups names for the group (a group that moved: lease again).';
    END IF;
    EXECUTE format($q$
        SELECT shard_name($1, s.shardid)
          FROM (SELECT d.shardid, pg_catalog.row_number() OVER (ORDER BY d.shardminvalue::bigint) AS i
                  FROM pg_catalog.pg_dist_shard d WHERE d.logicalrelid = $1) s
         WHERE s.i = $2$q$)
       INTO v_name USING p_table, p_shard_group;
    RETURN v_name;
END
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
    PERFORM billing._check_text('worker', p_worker, 200);
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
    PERFORM billing._check_text('worker', p_worker, 200);
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

CREATE OR REPLACE FUNCTION billing.claim_renewals_in_shard(
    p_worker text, p_shard_group integer, p_batch_size integer DEFAULT 500, p_now timestamptz DEFAULT now())
RETURNS TABLE (customer_id bigint, subscription_id bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
SET jit = off
AS $$
DECLARE
    v_claimed bigint;
BEGIN
    PERFORM billing._check_now(p_now);
    PERFORM billing._check_between('batch size', p_batch_size, 1, 10000);
    PERFORM billing._check_shard_lease(p_worker, p_shard_group, p_now);
    -- The renewal's claim (create_due_invoices' due rows, fast and lifecycle paths alike): locked
    -- until the caller's transaction ends, in which it renews them by (customer_id, id).
    RETURN QUERY EXECUTE format($q$
        SELECT s.customer_id, s.id
          FROM %s s
         WHERE s.status IN ('ACTIVE', 'PAST_DUE') AND s.current_period_end <= $1
         ORDER BY s.current_period_end
         LIMIT $2
           FOR NO KEY UPDATE SKIP LOCKED$q$, billing._shard_table('billing.subscription', p_shard_group))
      USING p_now, p_batch_size;
    -- An audit row only when something was claimed (idle workers ask every second, per group).
    GET DIAGNOSTICS v_claimed = ROW_COUNT;
    IF v_claimed > 0 THEN
        PERFORM billing._audit('claim_renewals_in_shard', jsonb_build_object('worker', p_worker, 'shard_group', p_shard_group, 'batch_size', p_batch_size, 'now', p_now));
    END IF;
END
$$;
COMMENT ON FUNCTION billing.claim_renewals_in_shard(text, integer, integer, timestamptz) IS
'Claims up to p_batch_size subscriptions due for renewal at p_now in one leased shard group, oldest due first: they stay locked (FOR NO KEY UPDATE, skipping rows another claimer holds) until the caller''s transaction ends, in which the caller renews them. Call it on the node holding the group (lease_shard_groups names it).
Returns (customer_id, subscription_id) per claimed subscription; BL409 when the worker does not hold the group''s lease or the group is on another node, BL404 for an unknown group, BL422 for a bad batch size.';

CREATE OR REPLACE FUNCTION billing.claim_charges_in_shard(
    p_worker text, p_shard_group integer, p_batch_size integer DEFAULT 100, p_lease interval DEFAULT interval '5 minutes',
    p_now timestamptz DEFAULT now())
RETURNS TABLE (customer_id bigint, invoice_id bigint, lease_until timestamptz)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
SET jit = off
AS $$
DECLARE
    v_claimed bigint;
BEGIN
    PERFORM billing._check_now(p_now);
    PERFORM billing._check_between('batch size', p_batch_size, 1, 10000);
    PERFORM billing._check_lease(p_lease);
    PERFORM billing._check_shard_lease(p_worker, p_shard_group, p_now);
    -- claim_charges' lease, inside one group: OPEN invoices due, oldest first, skipping rows another
    -- claimer holds; each comes back at p_now + p_lease unless a result settles it first.
    RETURN QUERY EXECUTE format($q$
        WITH due AS MATERIALIZED (
            SELECT i.customer_id, i.id
              FROM %1$s i
             WHERE i.status = 'OPEN' AND i.next_attempt_at <= $1
             ORDER BY i.next_attempt_at
             LIMIT $2
               FOR NO KEY UPDATE SKIP LOCKED
        ), leased AS (
            UPDATE %1$s i
               SET next_attempt_at = $1 + $3
              FROM due d
             WHERE i.customer_id = d.customer_id AND i.id = d.id
            RETURNING i.customer_id, i.id, i.next_attempt_at
        )
        SELECT * FROM leased ORDER BY 1, 2$q$, billing._shard_table('billing.invoice', p_shard_group))
      USING p_now, p_batch_size, p_lease;
    GET DIAGNOSTICS v_claimed = ROW_COUNT;
    IF v_claimed > 0 THEN
        PERFORM billing._audit('claim_charges_in_shard', jsonb_build_object('worker', p_worker, 'shard_group', p_shard_group, 'batch_size', p_batch_size, 'lease', p_lease, 'now', p_now));
    END IF;
END
$$;
COMMENT ON FUNCTION billing.claim_charges_in_shard(text, integer, integer, interval, timestamptz) IS
'Claims up to p_batch_size OPEN invoices due for a charge at p_now in one leased shard group, oldest due first, skipping rows another claimer holds: each is leased (next_attempt_at = p_now + p_lease) as claim_charges leases it, and comes back when the lease runs out unless a result settles it. Call it on the node holding the group.
Returns (customer_id, invoice_id, lease_until) per claimed invoice; BL409 when the worker does not hold the group''s lease or the group is on another node, BL404 for an unknown group, BL422 for a bad batch size or lease.';

CREATE OR REPLACE FUNCTION billing.claim_outbox_in_shard(
    p_worker text, p_shard_group integer, p_batch_size integer DEFAULT 500, p_lease interval DEFAULT interval '30 seconds',
    p_now timestamptz DEFAULT now())
RETURNS SETOF billing.outbox_event
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
SET jit = off
AS $$
BEGIN
    PERFORM billing._check_now(p_now);
    PERFORM billing._check_between('batch size', p_batch_size, 1, 10000);
    PERFORM billing._check_lease(p_lease);
    PERFORM billing._check_shard_lease(p_worker, p_shard_group, p_now);
    -- The relay's own per-group claim (60_outbox.sql): each aggregate's events in its order key
    -- (aggregate_seq on Citus, where nodes take ids from their own ranges; id on a single
    -- PostgreSQL), with the head-of-line rule. This call adds the shard lease check.
    RETURN QUERY SELECT * FROM billing.claim_outbox_events_in_shard(p_worker, p_shard_group, p_batch_size, p_lease, p_now);
END
$$;
COMMENT ON FUNCTION billing.claim_outbox_in_shard(text, integer, integer, interval, timestamptz) IS
'Claims up to p_batch_size PENDING events of one leased shard group, through the relay''s claim_outbox_events_in_shard after checking the worker''s shard lease: oldest first by each aggregate''s order key (aggregate_seq on Citus, id on a single PostgreSQL), skipping rows another claimer holds, none while an earlier pending event of its aggregate is held elsewhere; each is leased until p_now + p_lease. Call it on the node holding the group.
Returns the claimed events, each aggregate''s in order; BL409 when the worker does not hold the group''s lease or the group is on another node, BL404 for an unknown group, BL422 for a bad batch size or lease.';

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

CREATE OR REPLACE FUNCTION billing._renew_batch_in_shard(p_shard_group integer, p_batch_size integer, p_now timestamptz)
RETURNS TABLE (handled integer, canceled bigint[])
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
    v_claimed  integer;
    v_expected integer;
    v_updated  integer;
    v_taxes    boolean := EXISTS (SELECT 1 FROM billing.tax_rate WHERE active);
BEGIN
    EXECUTE format($q$
    WITH due AS MATERIALIZED (
        -- Locked rows come back in their latest committed version.
        SELECT s.ctid AS row_id, s.id, s.customer_id, s.plan_id, s.timezone, s.billing_anchor, s.period_number,
               s.current_period_end, s.cancel_at_period_end, s.quantity
          FROM %1$s s
         WHERE s.status IN ('ACTIVE', 'PAST_DUE') AND s.current_period_end <= $1
           -- A trial's end, a coupon or a scheduled change: the per-row path (_renew_lifecycle).
           AND NOT s.lifecycle_pending
         ORDER BY s.current_period_end
         LIMIT $2
           FOR NO KEY UPDATE SKIP LOCKED
    ), credit AS MATERIALIZED (
        -- Usually empty. Locked (waiting, not skipping) in key order, so concurrent renewals of
        -- one customer's subscriptions serialise on the balance instead of deadlocking.
        SELECT b.customer_id, b.currency, b.balance
          FROM %2$s b
         WHERE b.customer_id = ANY (ARRAY(SELECT d.customer_id FROM due d WHERE NOT d.cancel_at_period_end))
           AND b.balance > 0
         ORDER BY b.customer_id, b.currency
           FOR UPDATE
    ), priced AS MATERIALIZED (
        SELECT d.row_id, d.id, d.customer_id, d.current_period_end AS period_start,
               billing._period_end(d.billing_anchor, p.billing_interval, p.interval_count,
                                   d.period_number + 1, d.timezone) AS period_end,
               t.price_amount * d.quantity AS amount, t.price_amount AS plan_price, d.quantity,
               p.currency, p.id AS plan_id, p.billing_interval, p.interval_count,
               coalesce(tx.tax_amount, 0) AS tax_amount, coalesce(tx.tax_included, 0) AS tax_included, tx.tax_detail,
               -- A balance is spread over the customer's invoices of this batch in id order (on
               -- their totals, tax included).
               CASE WHEN c.balance IS NULL THEN 0::bigint
                    ELSE least(t.price_amount * d.quantity + coalesce(tx.tax_amount, 0),
                               greatest(0, c.balance - coalesce(sum(t.price_amount * d.quantity + coalesce(tx.tax_amount, 0)) OVER (
                             PARTITION BY d.customer_id, p.currency ORDER BY d.id
                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0)))::bigint
               END AS credit_applied
          FROM due d
          JOIN %3$s p ON p.id = d.plan_id
          -- The price in force when the period starts (a late renewal of a past period is priced
          -- as it was then); the history is read only for a period older than the current price.
          CROSS JOIN LATERAL (
              SELECT CASE WHEN p.price_effective_from IS NULL OR d.current_period_end >= p.price_effective_from
                          THEN p.price_amount
                          ELSE (SELECT pp.price_amount FROM %4$s pp
                                 WHERE pp.plan_id = p.id AND pp.effective_from <= d.current_period_end
                                 ORDER BY pp.effective_from DESC LIMIT 1) END AS price_amount) t
          -- Taxes by the customer's address (14_tax, inlined); skipped entirely while no rate exists.
          LEFT JOIN LATERAL (SELECT (x.t).tax_amount, (x.t).tax_included, (x.t).tax_detail
                               FROM (SELECT billing._tax_of(c.country, c.region, c.tax_status, t.price_amount * d.quantity) AS t
                                       FROM %5$s c WHERE c.id = d.customer_id AND $3) x) tx ON true
          LEFT JOIN credit c ON c.customer_id = d.customer_id AND c.currency = p.currency
         WHERE NOT d.cancel_at_period_end
    ), new_invoice AS (
        INSERT INTO %6$s (id, subscription_id, customer_id, kind, period_start, period_end, subtotal,
                                     credit_applied, amount, currency, status, due_at, next_attempt_at, paid_at,
                                     created_at, plan_id, plan_price, billing_interval, interval_count, quantity,
                                     tax_amount, tax_included, tax_detail)
        SELECT nextval(%9$L::regclass), p.id, p.customer_id, 'RENEWAL', p.period_start, p.period_end, p.amount,
               p.credit_applied, p.amount + p.tax_amount - p.credit_applied, p.currency,
               CASE WHEN p.amount + p.tax_amount = p.credit_applied THEN 'PAID' ELSE 'OPEN' END, $1,
               CASE WHEN p.amount + p.tax_amount = p.credit_applied THEN NULL ELSE $1 END,
               CASE WHEN p.amount + p.tax_amount = p.credit_applied THEN $1 END, $1,
               p.plan_id, p.plan_price, p.billing_interval, p.interval_count, p.quantity,
               p.tax_amount, p.tax_included, p.tax_detail
          FROM priced p
        RETURNING *
    ), renewed AS (
        UPDATE %1$s s
           SET current_period_start = p.period_start,
               current_period_end = p.period_end,
               period_number = s.period_number + 1,
               period_price = p.amount,
               version = s.version + 1,
               updated_at = $1
          FROM priced p
         WHERE s.ctid = p.row_id
        RETURNING 1
    ), canceled AS (
        UPDATE %1$s s
           SET status = 'CANCELED', canceled_at = $1, cancel_reason = 'PERIOD_END',
               version = s.version + 1, updated_at = $1
          FROM due d
         WHERE s.ctid = d.row_id AND d.cancel_at_period_end
        RETURNING s.*
    ), credit_used AS (
        UPDATE %2$s b
           SET balance = b.balance - u.used, updated_at = $1
          FROM (SELECT customer_id, currency, sum(credit_applied) AS used
                  FROM priced WHERE credit_applied > 0
                 GROUP BY customer_id, currency) u
         WHERE b.customer_id = u.customer_id AND b.currency = u.currency
    ), credit_ledger AS (
        INSERT INTO %7$s (id, customer_id, currency, amount, reason, subscription_id, invoice_id, created_at)
        SELECT nextval(%10$L::regclass), i.customer_id, i.currency, -i.credit_applied, 'APPLIED', i.subscription_id, i.id, $1
          FROM new_invoice i
         WHERE i.credit_applied > 0
    ), events AS (
        -- InvoiceCreated for every invoice, plus the rare rows (cancellations, invoices paid by
        -- credit): one INSERT, hence one NOTIFY.
        INSERT INTO %8$s (id, event_id, aggregate_type, aggregate_id, event_type, payload, created_at, available_at, customer_id)
        SELECT nextval(%11$L::regclass), e.event_id, e.aggregate_type, e.aggregate_id, e.event_type,
               billing._cloud_event(e.event_id, e.event_type, e.aggregate_type, e.aggregate_id, $1, e.data),
               $1, $1, e.customer_id
          FROM (SELECT gen_random_uuid() AS event_id, x.*
                  FROM (SELECT 'subscription' AS aggregate_type, c.id AS aggregate_id,
                               'SubscriptionCanceled' AS event_type,
                               billing._subscription_data(c::billing.subscription) AS data, 0 AS seq, c.customer_id
                          FROM canceled c
                        UNION ALL
                        SELECT 'invoice', i.id, 'InvoiceCreated', billing._invoice_data(i::billing.invoice), 1, i.customer_id
                          FROM new_invoice i
                        UNION ALL
                        SELECT 'invoice', i.id, 'InvoicePaid', billing._invoice_data(i::billing.invoice), 2, i.customer_id
                          FROM new_invoice i
                         WHERE i.status = 'PAID') x
                 ORDER BY x.aggregate_type, x.aggregate_id, x.seq) e
    )
    SELECT (SELECT count(*) FROM due),
           (SELECT count(*) FROM due),
           (SELECT count(*) FROM renewed) + (SELECT count(*) FROM canceled),
           (SELECT array_agg(d.id) FROM due d WHERE d.cancel_at_period_end)$q$,
        billing._shard_table('billing.subscription', p_shard_group),
        billing._shard_table('billing.credit_balance', p_shard_group),
        billing._local_table('billing.plan'),
        billing._local_table('billing.plan_price'),
        billing._shard_table('billing.customer', p_shard_group),
        billing._shard_table('billing.invoice', p_shard_group),
        billing._shard_table('billing.credit_entry', p_shard_group),
        billing._shard_table('billing.outbox_event', p_shard_group),
        pg_catalog.pg_get_serial_sequence('billing.invoice', 'id'),
        pg_catalog.pg_get_serial_sequence('billing.credit_entry', 'id'),
        pg_catalog.pg_get_serial_sequence('billing.outbox_event', 'id'))
      INTO v_claimed, v_expected, v_updated, canceled
     USING p_now, p_batch_size, v_taxes;
    IF v_updated <> v_expected THEN
        RAISE EXCEPTION USING ERRCODE = '40001',
            MESSAGE = format('%s of %s claimed subscriptions changed after the renewal statement began',
                             v_expected - v_updated, v_expected);
    END IF;
    handled := v_claimed;
    RETURN NEXT;
END
$$;
COMMENT ON FUNCTION billing._renew_batch_in_shard(integer, integer, timestamptz) IS
'Private: _renew_batch''s statement on one shard group''s own shards (renew_in_shard''s fast path: subscriptions without lifecycle_pending); raises 40001 when a claimed row changed under it.
Returns how many subscriptions it handled and the ids it canceled at period end.';

-- ---------------------------------------------------------------------------------------------
-- Claim and work in one call, inside one shard group: what the driver's workers call on the node
-- that holds the group (docs/scaling.md, "Batch claims"). The claim locks the group's due rows on
-- its own shard (SKIP LOCKED, so two claimers take disjoint rows); each claimed row is then worked
-- on by the per-row functions, whose statements name it by (customer_id, id): on Citus a
-- single-shard statement, executed locally on this node. All in the caller's one transaction.
-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION billing.renew_in_shard(
    p_worker text, p_shard_group integer, p_batch_size integer DEFAULT 500, p_now timestamptz DEFAULT now())
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
SET jit = off
AS $$
DECLARE
    v_customers bigint[];
    v_ids       bigint[];
    v_handled   integer := 0;
    v_batch     integer;
    v_canceled  bigint[];
    v_try       integer := 0;
BEGIN
    PERFORM billing._check_now(p_now);
    PERFORM billing._check_between('batch size', p_batch_size, 1, 10000);
    PERFORM billing._check_shard_lease(p_worker, p_shard_group, p_now);
    -- create_due_invoices inside the group, in the same two steps. First the per-row path: trial
    -- notices, resumes at their date and the renewals flagged lifecycle_pending (a trial ends, a
    -- coupon, a scheduled change), up to a batch of each, oldest first, locked on the group's shard
    -- (SKIP LOCKED) and worked on in customer order (credit balances locked in key order).
    EXECUTE format($q$
        WITH notice AS MATERIALIZED (
            SELECT s.customer_id, s.id FROM %1$s s
             WHERE s.status = 'TRIALING' AND s.trial_notice_at <= $1
             ORDER BY s.trial_notice_at, s.id LIMIT $2
               FOR NO KEY UPDATE SKIP LOCKED
        ), resuming AS MATERIALIZED (
            SELECT s.customer_id, s.id FROM %1$s s
             WHERE s.status = 'PAUSED' AND s.resume_at <= $1
             ORDER BY s.resume_at, s.id LIMIT $2
               FOR NO KEY UPDATE SKIP LOCKED
        ), renewing AS MATERIALIZED (
            SELECT s.customer_id, s.id FROM %1$s s
             WHERE s.lifecycle_pending AND s.status IN ('TRIALING', 'ACTIVE', 'PAST_DUE') AND s.current_period_end <= $1
             ORDER BY s.current_period_end, s.id LIMIT $2
               FOR NO KEY UPDATE SKIP LOCKED
        ), claimed AS (
            SELECT * FROM notice UNION SELECT * FROM resuming UNION SELECT * FROM renewing
        )
        SELECT array_agg(c.customer_id ORDER BY c.customer_id, c.id), array_agg(c.id ORDER BY c.customer_id, c.id)
          FROM claimed c$q$, billing._shard_table('billing.subscription', p_shard_group))
       INTO v_customers, v_ids USING p_now, p_batch_size;
    FOR i IN 1 .. coalesce(array_length(v_ids, 1), 0) LOOP
        v_handled := v_handled + billing._renew_row(v_customers[i], v_ids[i], p_now);
    END LOOP;
    -- Then the renewal statement, set-based on the group's own shards (the other due rows),
    -- retried on a fresh snapshot when a claimed row changed under it, as create_due_invoices does.
    LOOP
        v_try := v_try + 1;
        BEGIN
            SELECT r.handled, r.canceled INTO v_batch, v_canceled
              FROM billing._renew_batch_in_shard(p_shard_group, p_batch_size, p_now) r;
            EXIT;
        EXCEPTION WHEN serialization_failure THEN
            IF v_try >= 10 THEN
                RAISE;
            END IF;
        END;
    END LOOP;
    -- Canceled at period end: their OPEN invoices voided (a separate statement: it may give back
    -- credit the statement just consumed). The rows are still locked.
    IF v_canceled IS NOT NULL THEN
        PERFORM billing._void_open_invoices(v_canceled, p_now);
    END IF;
    v_handled := v_handled + v_batch;
    -- An audit row only when something was done (idle workers ask every second, per group).
    IF v_handled > 0 THEN
        PERFORM billing._audit('renew_in_shard', jsonb_build_object('worker', p_worker, 'shard_group', p_shard_group, 'batch_size', p_batch_size, 'now', p_now));
    END IF;
    RETURN v_handled;
END
$$;
COMMENT ON FUNCTION billing.renew_in_shard(text, integer, integer, timestamptz) IS
'create_due_invoices inside one leased shard group, in this transaction: trial notices, resumes and the renewals that need the per-row path (lifecycle_pending), claimed on the group''s shard (up to p_batch_size of each, oldest first, skipping rows another claimer holds) and handled by _renew_row; then up to p_batch_size other due subscriptions renewed by the renewal statement run set-based on the group''s own shards (_renew_batch_in_shard: invoices, credit, tax, period advance, cancellation at period end, events). Call it on the node holding the group (lease_shard_groups names it).
Returns how many it handled (0: nothing due in the group; call again to catch up missed periods); BL409 when the worker does not hold the group''s lease or the group is on another node, BL404 for an unknown group, BL422 for a bad batch size.';

-- Each claimed invoice is keyed and leased by billing._claim_charge_row (50_charging.sql): the
-- per-row form of claim_charges, shared with claim_charges' own path on the Citus coordinator.
CREATE OR REPLACE FUNCTION billing.charge_claims_in_shard(
    p_worker text, p_shard_group integer, p_batch_size integer DEFAULT 100, p_lease interval DEFAULT interval '5 minutes',
    p_now timestamptz DEFAULT now(), p_provider text DEFAULT 'sim')
RETURNS TABLE (invoice_id bigint, attempt_id bigint, idempotency_key text, customer_id bigint, amount bigint,
               currency text, lookup boolean, customer_ref text, payment_method_ref text)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    v_cfg       billing.installation;
    v_customers bigint[];
    v_ids       bigint[];
BEGIN
    PERFORM billing._check_now(p_now);
    PERFORM billing._check_text('a worker name', p_worker, 200);
    PERFORM billing._check_between('batch size', p_batch_size, 1, 10000);
    PERFORM billing._check_lease(p_lease);
    IF p_provider IS NULL OR p_provider !~ '^[a-z][a-z0-9_]{1,31}$' THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('a provider name is 2 to 32 lower-case letters, digits or _, got %L', p_provider),
            HINT = 'Pass the worker''s BILLING_GATEWAY_PROVIDER (sim, stripe, ...).';
    END IF;
    SELECT * INTO v_cfg FROM billing.installation;
    IF p_lease >= v_cfg.key_lifetime THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('the lease (%s) must be shorter than the gateway''s key lifetime (%s)', p_lease, v_cfg.key_lifetime),
            HINT = 'A call made near the end of a longer lease could reach the gateway after it forgot the key.';
    END IF;
    PERFORM billing._check_shard_lease(p_worker, p_shard_group, p_now);
    -- claim_charges' due invoices, in this group: oldest first, locked (SKIP LOCKED) until the
    -- transaction ends, then each keyed and leased as claim_charges does.
    EXECUTE format($q$
        WITH due AS MATERIALIZED (
            SELECT i.customer_id, i.id FROM %s i
             WHERE i.status = 'OPEN' AND i.next_attempt_at <= $1
             ORDER BY i.next_attempt_at LIMIT $2
               FOR NO KEY UPDATE SKIP LOCKED
        )
        SELECT array_agg(d.customer_id ORDER BY d.id), array_agg(d.id ORDER BY d.id) FROM due d$q$,
        billing._shard_table('billing.invoice', p_shard_group))
       INTO v_customers, v_ids USING p_now, p_batch_size;
    IF v_ids IS NULL THEN
        RETURN;  -- nothing due: no audit row
    END IF;
    PERFORM billing._audit('charge_claims_in_shard', jsonb_build_object('worker', p_worker, 'shard_group', p_shard_group, 'batch_size', p_batch_size, 'lease', p_lease, 'now', p_now, 'provider', p_provider));
    FOR i IN 1 .. array_length(v_ids, 1) LOOP
        RETURN QUERY SELECT * FROM billing._claim_charge_row(v_customers[i], v_ids[i], p_worker, p_lease, p_now, p_provider, v_cfg);
    END LOOP;
END
$$;
COMMENT ON FUNCTION billing.charge_claims_in_shard(text, integer, integer, interval, timestamptz, text) IS
'claim_charges inside one leased shard group: claims up to p_batch_size OPEN invoices of the group due by p_now (oldest first, SKIP LOCKED) and does claim_charges'' work on each (_claim_charge_row): the payment attempt and its key, the lease until p_now + p_lease, REVIEW past the key lifetime, waiting without a usable payment method. Call it on the node holding the group.
Returns what claim_charges returns, in invoice id order; BL409 when the worker does not hold the group''s lease or the group is on another node, BL404 for an unknown group, BL422 for bad arguments.';

CREATE OR REPLACE FUNCTION billing.refund_claims_in_shard(
    p_worker text, p_shard_group integer, p_batch_size integer DEFAULT 50, p_lease interval DEFAULT interval '5 minutes',
    p_now timestamptz DEFAULT now())
RETURNS TABLE (refund_id bigint, customer_id bigint, invoice_id bigint, idempotency_key text, provider text,
               charge_reference text, charge_key text, amount bigint, currency text, lookup boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    v_cfg       billing.installation;
    v_customers bigint[];
    v_ids       bigint[];
BEGIN
    PERFORM billing._check_now(p_now);
    PERFORM billing._check_text('a worker name', p_worker, 200);
    PERFORM billing._check_between('batch size', p_batch_size, 1, 10000);
    PERFORM billing._check_lease(p_lease);
    SELECT * INTO v_cfg FROM billing.installation;
    IF p_lease >= v_cfg.key_lifetime THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('the lease (%s) must be shorter than the gateway''s key lifetime (%s)', p_lease, v_cfg.key_lifetime);
    END IF;
    PERFORM billing._check_shard_lease(p_worker, p_shard_group, p_now);
    -- claim_refunds' due refunds, in this group: oldest first, locked (SKIP LOCKED) until the
    -- transaction ends, then each leased as claim_refunds leases it.
    EXECUTE format($q$
        WITH due AS MATERIALIZED (
            SELECT r.customer_id, r.id, r.next_attempt_at FROM %s r
             WHERE r.status = 'REQUESTED' AND r.next_attempt_at <= $1
             ORDER BY r.next_attempt_at, r.id LIMIT $2
               FOR NO KEY UPDATE SKIP LOCKED
        )
        SELECT array_agg(d.customer_id ORDER BY d.id), array_agg(d.id ORDER BY d.id) FROM due d$q$,
        billing._shard_table('billing.refund', p_shard_group))
       INTO v_customers, v_ids USING p_now, p_batch_size;
    IF v_ids IS NULL THEN
        RETURN;  -- nothing due: no audit row
    END IF;
    PERFORM billing._audit('refund_claims_in_shard', jsonb_build_object('worker', p_worker, 'shard_group', p_shard_group, 'batch_size', p_batch_size, 'lease', p_lease, 'now', p_now));
    FOR i IN 1 .. array_length(v_ids, 1) LOOP
        RETURN QUERY SELECT * FROM billing._claim_refund_row(v_customers[i], v_ids[i], p_lease, p_now, v_cfg);
    END LOOP;
END
$$;
COMMENT ON FUNCTION billing.refund_claims_in_shard(text, integer, integer, interval, timestamptz) IS
'claim_refunds inside one leased shard group: claims up to p_batch_size REQUESTED refunds of the group due by p_now (oldest first, SKIP LOCKED) and leases each as claim_refunds does (_claim_refund_row: same key, look-up only near or past its lifetime, RefundReview once past it). Call it on the node holding the group.
Returns what claim_refunds returns, in refund id order; BL409 when the worker does not hold the group''s lease or the group is on another node, BL404 for an unknown group, BL422 for bad arguments.';
