-- 68_retention_replay: the operator's side of the outbox. Retention deletes, in batches, what is
-- past its window: published events (once no webhook delivery still needs them), finished
-- webhook deliveries with their attempts, and stored gateway webhooks. Replay reads published
-- events back in the outbox's order for `billing events replay`; retry-dead puts DEAD events back in line.
-- Why batches and not partitions: bench/README.md, "Retention".

-- purge_expired on Citus: each kind's oldest candidates read without locks (a read of every
-- shard), then deleted by customer and key in one statement over their shards only, every
-- condition checked again on the row (a concurrent purger's rows are deleted once: the second
-- DELETE finds them gone). Ids and keys are unique across the cluster or per customer, and the
-- conditions are re-checked, so customer_id = ANY and key = ANY delete only rows past the window.
CREATE OR REPLACE FUNCTION billing._purge_expired_citus(p_cutoff timestamptz, p_batch_size integer)
RETURNS TABLE (outbox_events bigint, webhook_deliveries bigint, gateway_webhooks bigint)
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_customers bigint[];
    v_ids       bigint[];
    v_endpoints bigint[];
    v_keys      text[];
BEGIN
    SELECT array_agg(DISTINCT x.customer_id), array_agg(x.id) INTO v_customers, v_ids
      FROM (SELECT e.customer_id, e.id FROM billing.outbox_event e
             WHERE e.status = 'PUBLISHED' AND e.published_at < p_cutoff
             ORDER BY e.published_at LIMIT p_batch_size) x;
    DELETE FROM billing.outbox_event e
     WHERE e.customer_id = ANY (coalesce(v_customers, '{}')) AND e.id = ANY (coalesce(v_ids, '{}'))
       AND e.status = 'PUBLISHED' AND e.published_at < p_cutoff
       AND NOT EXISTS (SELECT 1 FROM billing.webhook_delivery d
                        WHERE d.customer_id = e.customer_id AND d.outbox_id = e.id AND d.status = 'PENDING');
    GET DIAGNOSTICS outbox_events = ROW_COUNT;

    SELECT array_agg(DISTINCT x.customer_id), array_agg(DISTINCT x.endpoint_id), array_agg(x.outbox_id)
      INTO v_customers, v_endpoints, v_ids
      FROM (SELECT d.customer_id, d.endpoint_id, d.outbox_id FROM billing.webhook_delivery d
             WHERE d.status <> 'PENDING' AND d.finished_at < p_cutoff
             ORDER BY d.finished_at LIMIT p_batch_size) x;
    -- An attempt goes with its finished delivery only (the customer x endpoint x id product may
    -- name a delivery still PENDING: its attempts stay).
    DELETE FROM billing.webhook_attempt a
     WHERE a.customer_id = ANY (coalesce(v_customers, '{}')) AND a.endpoint_id = ANY (coalesce(v_endpoints, '{}'))
       AND a.outbox_id = ANY (coalesce(v_ids, '{}'))
       AND EXISTS (SELECT 1 FROM billing.webhook_delivery d
                    WHERE d.customer_id = a.customer_id AND d.endpoint_id = a.endpoint_id AND d.outbox_id = a.outbox_id
                      AND d.status <> 'PENDING' AND d.finished_at < p_cutoff);
    DELETE FROM billing.webhook_delivery d
     WHERE d.customer_id = ANY (coalesce(v_customers, '{}')) AND d.endpoint_id = ANY (coalesce(v_endpoints, '{}'))
       AND d.outbox_id = ANY (coalesce(v_ids, '{}'))
       AND d.status <> 'PENDING' AND d.finished_at < p_cutoff;
    GET DIAGNOSTICS webhook_deliveries = ROW_COUNT;

    SELECT array_agg(DISTINCT x.customer_id), array_agg(x.event_id) INTO v_customers, v_keys
      FROM (SELECT w.customer_id, w.event_id FROM billing.gateway_webhook w
             WHERE w.received_at < p_cutoff ORDER BY w.received_at LIMIT p_batch_size) x;
    DELETE FROM billing.gateway_webhook w
     WHERE w.customer_id = ANY (coalesce(v_customers, '{}')) AND w.event_id = ANY (coalesce(v_keys, '{}'))
       AND w.received_at < p_cutoff;
    GET DIAGNOSTICS gateway_webhooks = ROW_COUNT;
    RETURN NEXT;
END
$$;
COMMENT ON FUNCTION billing._purge_expired_citus(timestamptz, integer) IS
'Private: purge_expired on Citus (no FOR UPDATE across shards): the oldest candidates read, then deleted by customer and key with every condition checked again.
Returns how many of each kind were deleted (a call may delete a few more than p_batch_size deliveries).';

CREATE OR REPLACE FUNCTION billing.purge_expired(
    p_keep interval, p_batch_size integer DEFAULT 5000, p_now timestamptz DEFAULT now())
RETURNS TABLE (outbox_events bigint, webhook_deliveries bigint, gateway_webhooks bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
SET jit = off
AS $$
DECLARE
    v_cutoff timestamptz;
BEGIN
    PERFORM billing._audit('purge_expired', jsonb_build_object('keep', p_keep, 'batch_size', p_batch_size, 'now', p_now));
    PERFORM billing._check_now(p_now);
    PERFORM billing._check_between('batch size', p_batch_size, 1, 100000);
    IF p_keep IS NULL OR p_keep < interval '1 hour' THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = format('retention must keep at least 1 hour, got %s', p_keep),
            HINT = 'Consumers dedupe and replay from what is kept: keep days, not minutes.';
    END IF;
    v_cutoff := p_now - p_keep;
    -- The console overview's counters (70_stats.sql): one row per key again, every few minutes,
    -- whether or not a console is open (none on Citus).
    PERFORM billing._overview_count_fold() WHERE billing._overview_counts_kept();
    -- The MRR kept by the engine's writes (76_mrr_aggregate.sql): the customers marked since, recomputed.
    PERFORM billing._mrr_fold() WHERE billing._mrr_kept();
    IF billing._distributed('billing.outbox_event') THEN
        -- Citus refuses FOR UPDATE across shards: the per-shard form (docs/scaling.md).
        RETURN QUERY SELECT * FROM billing._purge_expired_citus(v_cutoff, p_batch_size);
        RETURN;
    END IF;

    -- Oldest publications first, through the partial index of PUBLISHED rows; an event a webhook
    -- endpoint has not received yet stays (its delivery reads the payload from here).
    WITH doomed AS (
        SELECT e.id
          FROM billing.outbox_event e
         WHERE e.status = 'PUBLISHED' AND e.published_at < v_cutoff
           AND NOT EXISTS (SELECT 1 FROM billing.webhook_delivery d WHERE d.outbox_id = e.id AND d.status = 'PENDING')
         ORDER BY e.published_at
         LIMIT p_batch_size
           FOR UPDATE SKIP LOCKED
    ), gone AS (
        DELETE FROM billing.outbox_event e USING doomed WHERE e.id = doomed.id RETURNING 1
    )
    SELECT count(*) INTO outbox_events FROM gone;

    WITH doomed AS (
        SELECT d.endpoint_id, d.outbox_id
          FROM billing.webhook_delivery d
         WHERE d.status <> 'PENDING' AND d.finished_at < v_cutoff
         ORDER BY d.finished_at
         LIMIT p_batch_size
    ), attempts AS (
        DELETE FROM billing.webhook_attempt a USING doomed
         WHERE a.endpoint_id = doomed.endpoint_id AND a.outbox_id = doomed.outbox_id
    ), gone AS (
        DELETE FROM billing.webhook_delivery d USING doomed
         WHERE d.endpoint_id = doomed.endpoint_id AND d.outbox_id = doomed.outbox_id
        RETURNING 1
    )
    SELECT count(*) INTO webhook_deliveries FROM gone;

    WITH doomed AS (
        SELECT w.event_id FROM billing.gateway_webhook w
         WHERE w.received_at < v_cutoff
         ORDER BY w.received_at
         LIMIT p_batch_size
    ), gone AS (
        DELETE FROM billing.gateway_webhook w USING doomed WHERE w.event_id = doomed.event_id RETURNING 1
    )
    SELECT count(*) INTO gateway_webhooks FROM gone;
    RETURN NEXT;
END
$$;
COMMENT ON FUNCTION billing.purge_expired(interval, integer, timestamptz) IS
'Deletes up to p_batch_size of each: events PUBLISHED before p_now - p_keep (none a webhook still needs), webhook deliveries finished before then (with their attempts), gateway webhooks received before then.
Returns how many of each; call again while any count equals p_batch_size. BL422 for p_keep under an hour.';

-- In the outbox's order (billing._outbox_order, then id), the relay's: an event's place in it is
-- (key, id). p_from_id keeps the events of ids from it on (a filter, as ever); p_after_id names the
-- last event of the previous page: the page goes on after its place (an id not found is taken as an
-- event without a key, whose key is its id). On one PostgreSQL that is the id's order. The two
-- halves of the order are walked by their own index, each in order and each cut at p_limit, and
-- merged: the events without a key (all of them on one PostgreSQL) by outbox_event_id_idx, the
-- keyed ones (Citus) by outbox_event_keyed_idx (db/schema/0380); a page costs O(p_limit).
CREATE OR REPLACE FUNCTION billing.outbox_events_from(
    p_from_id bigint, p_from_time timestamptz, p_types text[], p_after_id bigint, p_limit integer DEFAULT 1000)
RETURNS TABLE (id bigint, aggregate_type text, aggregate_id bigint, event_type text, payload text)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    -- The place (key, id) to go on after; (0, 0) on the first page.
    v_from_id    bigint := coalesce(p_from_id, 0);
    v_after_id   bigint := greatest(coalesce(p_after_id, 0), 0);
    v_after_key  bigint;
BEGIN
    IF (p_from_id IS NULL) = (p_from_time IS NULL) THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = 'replay starts from an outbox id or from a time, one of them';
    END IF;
    PERFORM billing._check_between('limit', p_limit, 1, 100000);
    v_after_key := coalesce((SELECT billing._outbox_order(e.aggregate_seq, e.id) FROM billing.outbox_event e
                              WHERE e.id = v_after_id LIMIT 1), v_after_id);
    RETURN QUERY
    SELECT u.id, u.aggregate_type, u.aggregate_id, u.event_type, u.payload::text
      FROM ((SELECT e.id, e.aggregate_type, e.aggregate_id, e.event_type, e.payload, e.aggregate_seq
               FROM billing.outbox_event e
              WHERE e.aggregate_seq IS NULL  -- place (id, id)
                AND e.id >= v_from_id
                AND e.id >= v_after_key AND (e.id > v_after_key OR e.id > v_after_id)
                AND e.status = 'PUBLISHED'
                AND (p_from_time IS NULL OR e.created_at >= p_from_time)
                AND (p_types IS NULL OR e.event_type = ANY (p_types))
              ORDER BY e.id
              LIMIT p_limit)
            UNION ALL
            (SELECT e.id, e.aggregate_type, e.aggregate_id, e.event_type, e.payload, e.aggregate_seq
               FROM billing.outbox_event e
              WHERE e.aggregate_seq IS NOT NULL  -- place (aggregate_seq, id)
                AND e.id >= v_from_id
                AND (e.aggregate_seq, e.id) > (v_after_key, v_after_id)
                AND e.status = 'PUBLISHED'
                AND (p_from_time IS NULL OR e.created_at >= p_from_time)
                AND (p_types IS NULL OR e.event_type = ANY (p_types))
              ORDER BY e.aggregate_seq, e.id
              LIMIT p_limit)) u
     ORDER BY billing._outbox_order(u.aggregate_seq, u.id), u.id
     LIMIT p_limit;
END
$$;
COMMENT ON FUNCTION billing.outbox_events_from(bigint, timestamptz, text[], bigint, integer) IS
'Published events of outbox ids from p_from_id, or created at or after p_from_time, of the given types (NULL: all), after event p_after_id (paging), in the outbox''s order (billing._outbox_order, then id: the id''s order on one PostgreSQL).
Returns up to p_limit rows with the payload as stored; BL422 unless exactly one starting point is given.';

CREATE OR REPLACE FUNCTION billing.retry_dead_outbox_events(p_types text[] DEFAULT NULL, p_now timestamptz DEFAULT now())
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_count integer;
BEGIN
    PERFORM billing._audit('retry_dead_outbox_events', jsonb_build_object('types', p_types, 'now', p_now));
    PERFORM billing._check_now(p_now);
    -- Back to PENDING with a fresh count of tries. The claim hands an aggregate's events out in
    -- the outbox's order (billing._outbox_order) and holds back later PENDING events of the aggregate behind them, so the requeued
    -- events go out in their commit order (those published while they were DEAD stay ahead).
    UPDATE billing.outbox_event
       SET status = 'PENDING', attempts = 0, available_at = p_now, lease_until = NULL,
           last_error = left('requeued from DEAD: ' || coalesce(last_error, ''), 2000)
     WHERE status = 'DEAD' AND (p_types IS NULL OR event_type = ANY (p_types));
    GET DIAGNOSTICS v_count = ROW_COUNT;
    IF v_count > 0 THEN
        PERFORM pg_notify('billing_outbox', json_build_object('count', v_count)::text);
    END IF;
    RETURN v_count;
END
$$;
COMMENT ON FUNCTION billing.retry_dead_outbox_events(text[], timestamptz) IS
'Requeues DEAD events (of the given types; NULL: all) as PENDING with no failed tries, due at p_now, and wakes the relay.
Returns how many were requeued.';
