-- 89_usage_rating_shards: the usage rating per shard group (issue 29 on Citus, docs/usage.md "Per
-- shard group (Citus)", docs/scaling.md "The usage rating"), as renew_in_shard renews: a worker that
-- leases a group claims the group's due subscriptions on the node holding it (claim_usage_in_shard:
-- its shards, FOR NO KEY UPDATE SKIP LOCKED), takes the customers' usage locks where the ingestion
-- takes them (lock_usage_customers, on the coordinator, in a transaction it keeps open until the
-- node's has committed), then rates them there (rate_usage_in_shard): the live ones without late
-- events set-based (_rate_usage_set_in_shard: 81_usage_rating_set's statement on the group's
-- shards), the rest one at a time (_rate_subscription, each statement a query of the group's own
-- shards, executed on that node). On one PostgreSQL the same calls work in group 0 (the tables).
-- Re-applied after every migration: CREATE OR REPLACE only.

-- The customers' usage locks (73_usage_cursor: the ingestion takes them shared), tried exclusive in
-- key order, never waited for: the ones taken, held until the caller's transaction ends. The
-- per-group rating takes them on the node where the ingestion runs (the coordinator: its advisory
-- locks are that node's only) and keeps that transaction open until the group's rating has committed
-- on its node, so an ingestion either committed before (the rating reads it) or starts after the
-- cursor moved (it marks its span late).
CREATE OR REPLACE FUNCTION billing.lock_usage_customers(p_customer_ids bigint[])
RETURNS TABLE (customer_id bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    IF p_customer_ids IS NULL OR cardinality(p_customer_ids) > 10000 THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = 'lock_usage_customers: 0..10000 customer ids, not NULL';
    END IF;
    RETURN QUERY
    SELECT q.c FROM (SELECT DISTINCT c FROM unnest(p_customer_ids) c WHERE c IS NOT NULL ORDER BY c) q
     WHERE pg_try_advisory_xact_lock(29, billing._usage_lock_key(q.c))
     ORDER BY q.c;
END
$$;
COMMENT ON FUNCTION billing.lock_usage_customers(bigint[]) IS
'Tries the usage lock of each customer (exclusive, in key order, never waiting: a customer whose ingestion is in flight is not taken), held until this transaction ends: the per-shard-group rating holds them on the coordinator while rate_usage_in_shard runs on the group''s node (docs/usage.md). BL422 for NULL or more than 10,000 ids.
Returns the customers locked.';

-- The due scan of one group (_usage_due's, on the group's shards): the cursors whose earliest due
-- instant is behind the grace, in that order, then the finished ones with late events; their
-- subscriptions locked FOR NO KEY UPDATE SKIP LOCKED (two claimers take disjoint rows; a rating locks
-- a subscription before its cursor, as every path that changes one). First (p_follow) the group's
-- subscriptions on a charged plan without a cursor get one (_usage_follow each; on one PostgreSQL
-- _usage_follow_all), those held elsewhere skipped until the next call.
CREATE OR REPLACE FUNCTION billing.claim_usage_in_shard(
    p_worker text, p_shard_group integer, p_batch_size integer DEFAULT 500, p_now timestamptz DEFAULT now(),
    p_grace interval DEFAULT interval '1 hour', p_follow boolean DEFAULT true)
RETURNS TABLE (customer_id bigint, subscription_id bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
SET jit = off
AS $$
DECLARE
    v_sub    text;
    v_cur    text;
    v_charge text;
    v_new    record;
    v_c      bigint[];
    v_s      bigint[];
    v_found  integer;
BEGIN
    PERFORM billing._check_now(p_now);
    PERFORM billing._check_between('batch size', p_batch_size, 1, 10000);
    IF p_grace IS NULL OR p_grace < interval '0' OR p_grace > interval '7 days' THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = format('claim_usage_in_shard: grace 0..7 days, got %s', p_grace);
    END IF;
    PERFORM billing._check_shard_lease(p_worker, p_shard_group, p_now);
    v_sub := billing._shard_table('billing.subscription', p_shard_group);
    v_cur := billing._shard_table('billing.usage_cursor', p_shard_group);
    IF coalesce(p_follow, true) THEN
        IF billing._distributed('billing.customer') THEN
            v_charge := billing._local_table('billing.plan_charge');
            FOR v_new IN EXECUTE format($q$
                SELECT s.customer_id, s.id FROM %1$s s
                 WHERE s.plan_id IN (SELECT c.plan_id FROM %3$s c)
                   AND NOT EXISTS (SELECT 1 FROM %2$s u WHERE u.customer_id = s.customer_id AND u.subscription_id = s.id)
                 ORDER BY s.customer_id, s.id
                   FOR KEY SHARE OF s SKIP LOCKED$q$, v_sub, v_cur, v_charge)
            LOOP
                PERFORM billing._usage_follow(v_new.customer_id, v_new.id, p_now);
            END LOOP;
        ELSE
            PERFORM billing._usage_follow_all(p_now);
        END IF;
    END IF;
    EXECUTE format($q$
        SELECT coalesce(array_agg(q.customer_id ORDER BY q.due_at, q.customer_id, q.subscription_id), '{}'),
               coalesce(array_agg(q.subscription_id ORDER BY q.due_at, q.customer_id, q.subscription_id), '{}')
          FROM (SELECT u.customer_id, u.subscription_id, u.due_at
                  FROM %2$s u
                  JOIN %1$s s ON s.customer_id = u.customer_id AND s.id = u.subscription_id
                 WHERE NOT u.finished AND u.due_at <= $1 - $2
                   AND ((s.status <> 'CANCELED' AND u.rated_until < s.current_period_start AND s.current_period_start + $2 <= $1)
                        OR (s.status = 'CANCELED'
                            AND least(coalesce(s.canceled_at, s.current_period_end), s.current_period_end) + $2 <= $1))
                 ORDER BY u.due_at
                 LIMIT $3
                   FOR NO KEY UPDATE OF s SKIP LOCKED) q$q$, v_sub, v_cur)
       INTO v_c, v_s USING p_now, p_grace, p_batch_size;
    v_found := cardinality(v_c);
    IF v_found < p_batch_size THEN
        EXECUTE format($q$
            SELECT $4 || coalesce(array_agg(q.customer_id ORDER BY q.customer_id, q.subscription_id), '{}'),
                   $5 || coalesce(array_agg(q.subscription_id ORDER BY q.customer_id, q.subscription_id), '{}')
              FROM (SELECT u.customer_id, u.subscription_id FROM %2$s u
                      JOIN %1$s s ON s.customer_id = u.customer_id AND s.id = u.subscription_id
                     WHERE u.finished AND u.late_since IS NOT NULL AND s.status = 'CANCELED'
                     ORDER BY u.customer_id, u.subscription_id
                     LIMIT $3
                       FOR NO KEY UPDATE OF s SKIP LOCKED) q$q$, v_sub, v_cur)
           INTO v_c, v_s USING p_now, p_grace, p_batch_size - v_found, v_c, v_s;
    END IF;
    RETURN QUERY SELECT k.c, k.s FROM unnest(v_c, v_s) WITH ORDINALITY AS k (c, s, n) ORDER BY k.n;
END
$$;
COMMENT ON FUNCTION billing.claim_usage_in_shard(text, integer, integer, timestamptz, interval, boolean) IS
'The usage rating''s claim inside one leased shard group, on the node holding it (docs/usage.md): follows the group''s subscriptions on a charged plan that have no cursor yet (p_follow), then locks up to p_batch_size subscriptions whose rating is due at p_now (a period or a canceled service ended p_grace ago and not rated; a finished one with late events), skipping those another claimer (or any change) holds; held until this transaction ends. Then lock their customers on the coordinator (lock_usage_customers) and rate them here (rate_usage_in_shard), in this transaction.
Returns the subscriptions claimed (customer_id, subscription_id); BL409 when the worker does not hold the group''s lease or the group is on another node, BL404 for an unknown group, BL422 for a bad batch size or grace.';

-- The rows a rating per shard group bills, locked on the group's shards in the one order both ratings
-- take (rate_usage_in_shard, _rate_usage_group): the customers' rows of p_try, FOR NO KEY UPDATE SKIP
-- LOCKED (on Citus an ingestion holds its customers' rows FOR SHARE here until it commits here, and a
-- batch left prepared by a failed COMMIT PREPARED holds them after its usage locks are gone:
-- 83_usage_ingest; such a customer is left to a later call, rated once the batch is committed,
-- docs/usage.md "Exactly once"), then the subscriptions and their cursors of the customers locked, in
-- key order (the subscription before its cursor). fast: live, without late events (the set statement's).
CREATE OR REPLACE FUNCTION billing._lock_usage_rows_in_shard(p_shard_group integer, p_try bigint[],
                                                             p_customer_ids bigint[], p_subscription_ids bigint[])
RETURNS TABLE (customer_id bigint, subscription_id bigint, fast boolean)
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_locked bigint[];
BEGIN
    EXECUTE format('SELECT ARRAY(SELECT c.id FROM %s c WHERE c.id = ANY ($1) ORDER BY c.id FOR NO KEY UPDATE SKIP LOCKED)',
                   billing._shard_table('billing.customer', p_shard_group))
       INTO v_locked USING p_try;
    RETURN QUERY EXECUTE format($q$
        SELECT u.customer_id, u.subscription_id, (NOT u.finished AND u.late_since IS NULL AND s.status <> 'CANCELED')
          FROM (SELECT DISTINCT k.c, k.i FROM unnest($1, $2) AS k (c, i) WHERE k.c = ANY ($3)) k
          JOIN %1$s s ON s.customer_id = k.c AND s.id = k.i
          JOIN %2$s u ON u.customer_id = k.c AND u.subscription_id = k.i
         ORDER BY u.customer_id, u.subscription_id
           FOR NO KEY UPDATE OF s FOR UPDATE OF u$q$,
        billing._shard_table('billing.subscription', p_shard_group), billing._shard_table('billing.usage_cursor', p_shard_group))
       USING p_customer_ids, p_subscription_ids, v_locked;
END
$$;
COMMENT ON FUNCTION billing._lock_usage_rows_in_shard(integer, bigint[], bigint[], bigint[]) IS
'Private: on one shard group''s shards, the customers of p_try locked FOR NO KEY UPDATE SKIP LOCKED, then the subscriptions and cursors (p_customer_ids, p_subscription_ids) of the customers locked, in key order.
Returns each subscription locked and whether it is live without late events (fast: the set statement''s).';

-- The rating of claimed subscriptions inside one group, on the node holding it: the customers' usage
-- locks tried here too (an ingestion on this node; on one PostgreSQL the only ones), the cursors
-- locked after their subscriptions, the live ones without late events rated by the set statement on
-- the group's shards, the rest (a period cut by a change or a pause, late events, a cancellation) one
-- at a time by _rate_subscription. Only rows of this group are rated (the others are not found).
CREATE OR REPLACE FUNCTION billing.rate_usage_in_shard(
    p_worker text, p_shard_group integer, p_customer_ids bigint[], p_subscription_ids bigint[],
    p_now timestamptz DEFAULT now(), p_grace interval DEFAULT interval '1 hour')
RETURNS TABLE (customer_id bigint, subscription_id bigint, invoice_id bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    v_locked bigint[];
    v_all_c  bigint[];
    v_all_s  bigint[];
    v_fast_c bigint[];
    v_fast_s bigint[];
    v_done   bigint[];
    v_done_c bigint[];
    v_done_i bigint[];
    v_row    record;
    v_rated  integer := 0;
    v_billed integer := 0;
BEGIN
    PERFORM billing._check_now(p_now);
    IF p_customer_ids IS NULL OR p_subscription_ids IS NULL
       OR cardinality(p_customer_ids) <> cardinality(p_subscription_ids) OR cardinality(p_customer_ids) > 10000
       OR p_grace IS NULL OR p_grace < interval '0' OR p_grace > interval '7 days' THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('rate_usage_in_shard: two arrays of one length (at most 10000) and grace 0..7 days, got %s, %s, %s',
                             cardinality(p_customer_ids), cardinality(p_subscription_ids), p_grace);
    END IF;
    PERFORM billing._check_shard_lease(p_worker, p_shard_group, p_now);
    -- the usage locks on this node, tried in key order, in a statement of their own (what follows reads
    -- with a snapshot taken after them)
    v_locked := ARRAY(SELECT c FROM (SELECT DISTINCT c FROM unnest(p_customer_ids) c WHERE c IS NOT NULL) q
                       WHERE pg_try_advisory_xact_lock(29, billing._usage_lock_key(c)) ORDER BY c);
    -- then their rows on this node, subscriptions and cursors (_lock_usage_rows_in_shard: a customer
    -- whose row is held is left to a later call); the live ones without late events go set-based
    SELECT coalesce(array_agg(q.customer_id ORDER BY q.customer_id, q.subscription_id), '{}'),
           coalesce(array_agg(q.subscription_id ORDER BY q.customer_id, q.subscription_id), '{}'),
           coalesce(array_agg(q.customer_id ORDER BY q.customer_id, q.subscription_id) FILTER (WHERE q.fast), '{}'),
           coalesce(array_agg(q.subscription_id ORDER BY q.customer_id, q.subscription_id) FILTER (WHERE q.fast), '{}')
      INTO v_all_c, v_all_s, v_fast_c, v_fast_s
      FROM billing._lock_usage_rows_in_shard(p_shard_group, v_locked, p_customer_ids, p_subscription_ids) q;
    SELECT coalesce(array_agg(r.subscription_id), '{}'), coalesce(array_agg(r.customer_id), '{}'),
           coalesce(array_agg(r.invoice_id), '{}')
      INTO v_done, v_done_c, v_done_i
      FROM billing._rate_usage_set_in_shard(p_shard_group, v_fast_c, v_fast_s, p_now, p_grace) r;
    v_rated := cardinality(v_done);
    v_billed := cardinality(array_remove(v_done_i, NULL));
    RETURN QUERY SELECT d.c, d.s, d.i FROM unnest(v_done_c, v_done, v_done_i) AS d (c, s, i);
    -- the rest, one at a time (each statement of _rate_subscription a query of this group's shards)
    FOR v_row IN
        SELECT k.c, k.i FROM unnest(v_all_c, v_all_s) AS k (c, i)
         WHERE NOT EXISTS (SELECT 1 FROM unnest(v_done_c, v_done) AS d (c, s) WHERE d.c = k.c AND d.s = k.i)
         ORDER BY k.c, k.i
    LOOP
        customer_id := v_row.c;
        subscription_id := v_row.i;
        invoice_id := billing._rate_subscription(v_row.c, v_row.i, p_now, p_grace);
        v_rated := v_rated + 1;
        v_billed := v_billed + (invoice_id IS NOT NULL)::integer;
        RETURN NEXT;
    END LOOP;
    -- an audit row only when something was billed (idle workers ask every round, per group)
    IF v_billed > 0 THEN
        PERFORM billing._audit('rate_usage_in_shard', jsonb_build_object('worker', p_worker, 'shard_group', p_shard_group,
                                                                         'rated', v_rated, 'set_based', cardinality(v_done),
                                                                         'invoiced', v_billed, 'now', p_now));
    END IF;
END
$$;
COMMENT ON FUNCTION billing.rate_usage_in_shard(text, integer, bigint[], bigint[], timestamptz, interval) IS
'Rates usage in arrears (as rate_usage) for subscriptions claimed by claim_usage_in_shard in this transaction, inside one leased shard group on the node holding it; on Citus the caller holds their customers'' usage locks on the coordinator (lock_usage_customers) until this transaction has committed, and passes only those. Each customer''s usage lock is tried here too, then its row FOR NO KEY UPDATE SKIP LOCKED (a customer busy elsewhere, or whose batch of usage is still prepared on this node, is skipped); only this group''s rows are rated: the live ones without late events by the set statement on the group''s shards (_rate_usage_set_in_shard), the rest one at a time (_rate_subscription).
Returns each subscription rated and its USAGE invoice (NULL: nothing billed); BL409 when the worker does not hold the group''s lease or the group is on another node, BL404 for an unknown group, BL422 for bad arrays or grace.';

-- rate_usage called on the Citus coordinator (admin, the demo): the set statement
-- for one group's due subscriptions, run on the group's node. Citus sends a call of this function to
-- the node holding p_anchor (a customer of the group): it is distributed colocated with
-- billing.customer with force_delegation (db/citus/10_adapt.sql), so the call runs there inside the
-- coordinator's transaction, which holds the customers' usage locks until that node has committed.
-- A force-delegated call may not reach other customers through the distributed tables: only the
-- group's shards and this node's copies of the reference tables are read and written here (the
-- customers' rows FOR NO KEY UPDATE SKIP LOCKED, then the subscriptions and cursors, then
-- _rate_usage_set_in_shard); the subscriptions it does not rate are left to the caller (one at a
-- time on the coordinator). On one PostgreSQL (group 0) the same, unused.
CREATE OR REPLACE FUNCTION billing._rate_usage_group(p_anchor bigint, p_shard_group integer, p_customer_ids bigint[],
                                                     p_subscription_ids bigint[], p_now timestamptz, p_grace interval)
RETURNS TABLE (customer_id bigint, subscription_id bigint, invoice_id bigint)
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    v_fast_c bigint[];
    v_fast_s bigint[];
BEGIN
    -- the customers' rows on this node (a batch of their usage still prepared here holds them:
    -- skipped; 83_usage_ingest), then their subscriptions and cursors, in key order
    SELECT coalesce(array_agg(q.customer_id ORDER BY q.customer_id, q.subscription_id) FILTER (WHERE q.fast), '{}'),
           coalesce(array_agg(q.subscription_id ORDER BY q.customer_id, q.subscription_id) FILTER (WHERE q.fast), '{}')
      INTO v_fast_c, v_fast_s
      FROM billing._lock_usage_rows_in_shard(p_shard_group, p_customer_ids, p_customer_ids, p_subscription_ids) q;
    RETURN QUERY SELECT r.customer_id, r.subscription_id, r.invoice_id
                   FROM billing._rate_usage_set_in_shard(p_shard_group, v_fast_c, v_fast_s, p_now, p_grace) r;
END
$$;
COMMENT ON FUNCTION billing._rate_usage_group(bigint, integer, bigint[], bigint[], timestamptz, interval) IS
'Private: rate_usage''s set-based step for one shard group on Citus, sent by Citus to the node holding p_anchor (force-delegated), inside the caller''s transaction, which holds the customers'' usage locks: their rows (skipping those held), subscriptions and cursors locked on the group''s shards, the live ones without late events rated by _rate_usage_set_in_shard.
Returns each subscription rated and its USAGE invoice (NULL: nothing billed); the others are left to the caller.';
