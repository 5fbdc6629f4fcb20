-- 67_webhook_deliveries: the webhook delivery worker's side: claim an endpoint's due deliveries in
-- aggregate order, record the attempts (backoff, disabling). The order rules are in 66_webhooks.sql's
-- header.
-- Re-applied after every migration: CREATE OR REPLACE only.

-- ---------------------------------------------------------------------------------------------
-- The delivery worker's side
-- ---------------------------------------------------------------------------------------------
-- claim_webhook_deliveries on Citus (convention 3): the endpoint's due deliveries read without
-- locks (every shard), oldest first in the outbox's order (billing._outbox_order), then each locked by its primary key
-- (customer_id, endpoint_id, outbox_id) with SKIP LOCKED and leased unless an earlier PENDING
-- delivery of its aggregate to this endpoint is outside the claim (an aggregate's deliveries are
-- all in its customer's shard).
CREATE OR REPLACE FUNCTION billing._claim_webhook_deliveries_per_row(
    p_endpoint_id bigint, p_batch_size integer, p_lease interval, p_now timestamptz)
RETURNS TABLE (outbox_id bigint, event_id uuid, event_type text, aggregate_type text, aggregate_id bigint,
               attempts integer, payload text)
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_candidate record;
    v_delivery  billing.webhook_delivery;
    v_claimed   bigint[] := '{}';
    v_customers bigint[] := '{}';
BEGIN
    FOR v_candidate IN
        SELECT d.customer_id, d.outbox_id
          FROM billing.webhook_delivery d
         WHERE d.endpoint_id = p_endpoint_id AND d.status = 'PENDING' AND d.available_at <= p_now
           AND (d.lease_until IS NULL OR d.lease_until <= p_now)
         ORDER BY billing._outbox_order(d.aggregate_seq, d.outbox_id), d.outbox_id
         LIMIT p_batch_size
    LOOP
        SELECT * INTO v_delivery
          FROM billing.webhook_delivery d
         WHERE d.customer_id = v_candidate.customer_id AND d.endpoint_id = p_endpoint_id
           AND d.outbox_id = v_candidate.outbox_id
           AND d.status = 'PENDING' AND d.available_at <= p_now AND (d.lease_until IS NULL OR d.lease_until <= p_now)
           FOR UPDATE SKIP LOCKED;
        CONTINUE WHEN NOT FOUND;
        CONTINUE WHEN EXISTS (
            SELECT 1 FROM billing.webhook_delivery earlier
             WHERE earlier.customer_id = v_delivery.customer_id AND earlier.endpoint_id = p_endpoint_id
               AND earlier.status = 'PENDING'
               AND earlier.aggregate_type = v_delivery.aggregate_type AND earlier.aggregate_id = v_delivery.aggregate_id
               AND billing._outbox_order(earlier.aggregate_seq, earlier.outbox_id) < billing._outbox_order(v_delivery.aggregate_seq, v_delivery.outbox_id)
               AND NOT earlier.outbox_id = ANY (v_claimed));
        UPDATE billing.webhook_delivery d SET lease_until = p_now + p_lease
         WHERE d.customer_id = v_delivery.customer_id AND d.endpoint_id = p_endpoint_id AND d.outbox_id = v_delivery.outbox_id;
        v_claimed := v_claimed || v_delivery.outbox_id;
        v_customers := v_customers || v_delivery.customer_id;
    END LOOP;
    RETURN QUERY
    SELECT d.outbox_id, d.event_id, d.event_type, d.aggregate_type, d.aggregate_id, d.attempts, e.payload::text
      FROM billing.webhook_delivery d
      JOIN billing.outbox_event e ON e.customer_id = d.customer_id AND e.id = d.outbox_id
     WHERE d.customer_id = ANY (v_customers) AND d.endpoint_id = p_endpoint_id AND d.outbox_id = ANY (v_claimed)
     ORDER BY billing._outbox_order(d.aggregate_seq, d.outbox_id), d.outbox_id;
END
$$;
COMMENT ON FUNCTION billing._claim_webhook_deliveries_per_row(bigint, integer, interval, timestamptz) IS
'Private: claim_webhook_deliveries on Citus, row by row (each locked by its primary key with SKIP LOCKED, the head-of-line rule by the event''s order key).
Returns the claimed deliveries with their payloads, each aggregate''s in order.';

CREATE OR REPLACE FUNCTION billing.claim_webhook_deliveries(
    p_endpoint_id bigint, p_batch_size integer DEFAULT 100, p_lease interval DEFAULT interval '1 minute',
    p_now timestamptz DEFAULT now())
RETURNS TABLE (outbox_id bigint, event_id uuid, event_type text, aggregate_type text, aggregate_id bigint,
               attempts integer, payload text)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
SET jit = off
-- Plain index scans only, as claim_outbox_events (65_outbox_relay.sql): a bitmap scan of the pending
-- index re-reads the heap page of every dead entry (every delivered event) on every claim.
SET enable_indexscan = on
SET enable_bitmapscan = off
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_ids bigint[];
BEGIN
    PERFORM billing._audit('claim_webhook_deliveries', jsonb_build_object('endpoint_id', p_endpoint_id, 'batch_size', p_batch_size, 'lease', p_lease, 'now', p_now));
    PERFORM billing._check_claim_args(p_batch_size, p_lease, p_now);
    IF NOT EXISTS (SELECT 1 FROM billing.webhook_endpoint w WHERE w.id = p_endpoint_id AND w.status = 'ENABLED') THEN
        RETURN;
    END IF;
    IF billing._distributed('billing.webhook_delivery') THEN
        -- Citus refuses FOR UPDATE across shards: the per-row path (docs/scaling.md).
        RETURN QUERY SELECT * FROM billing._claim_webhook_deliveries_per_row(p_endpoint_id, p_batch_size, p_lease, p_now);
        RETURN;
    END IF;

    -- In the outbox's order (billing._outbox_order: webhook_delivery_pending_idx is on its key).
    WITH candidate AS MATERIALIZED (
        SELECT d.outbox_id, d.aggregate_type, d.aggregate_id, billing._outbox_order(d.aggregate_seq, d.outbox_id) AS k
          FROM billing.webhook_delivery d
         WHERE d.endpoint_id = p_endpoint_id
           AND d.status = 'PENDING'
           AND d.available_at <= p_now
           AND (d.lease_until IS NULL OR d.lease_until <= p_now)
         ORDER BY billing._outbox_order(d.aggregate_seq, d.outbox_id), d.outbox_id
         LIMIT p_batch_size
           FOR UPDATE SKIP LOCKED
    )
    SELECT array_agg(c.outbox_id) INTO v_ids
      FROM candidate c
     WHERE NOT EXISTS (
               SELECT 1
                 FROM billing.webhook_delivery earlier
                WHERE earlier.endpoint_id = p_endpoint_id
                  AND earlier.status <> 'DELIVERED' AND earlier.status <> 'FAILED'  -- = PENDING, one index only
                  AND earlier.aggregate_type = c.aggregate_type
                  AND earlier.aggregate_id = c.aggregate_id
                  AND billing._outbox_order(earlier.aggregate_seq, earlier.outbox_id) < c.k
                  AND earlier.outbox_id NOT IN (SELECT outbox_id FROM candidate)
               OFFSET 0);

    RETURN QUERY
    WITH leased AS (
        UPDATE billing.webhook_delivery d
           SET lease_until = p_now + p_lease
         WHERE d.endpoint_id = p_endpoint_id AND d.outbox_id = ANY (v_ids)
        RETURNING d.outbox_id, d.event_id, d.event_type, d.aggregate_type, d.aggregate_id, d.attempts, d.aggregate_seq
    )
    SELECT l.outbox_id, l.event_id, l.event_type, l.aggregate_type, l.aggregate_id, l.attempts, e.payload::text
      FROM leased l
      JOIN billing.outbox_event e ON e.id = l.outbox_id
     ORDER BY billing._outbox_order(l.aggregate_seq, l.outbox_id), l.outbox_id;
END
$$;
COMMENT ON FUNCTION billing.claim_webhook_deliveries(bigint, integer, interval, timestamptz) IS
'Claims up to p_batch_size due PENDING deliveries of one ENABLED endpoint in the outbox''s order (billing._outbox_order of the event, then its id; SKIP LOCKED), leasing them until p_now + p_lease.
Returns them with the event''s payload (the body); deliver each aggregate''s in order and stop an aggregate at its first failure.';

-- record_webhook_attempts' bookkeeping on Citus: each result's delivery found by its customer
-- (an unlocked read of every shard), locked by its primary key, updated with values computed from
-- the locked row (Citus refuses a STABLE timestamptz + interval over a column in a distributed
-- UPDATE), and its attempt written beside it, in the same shard.
CREATE OR REPLACE FUNCTION billing._record_webhook_attempts_per_row(
    p_endpoint_id bigint, p_outbox_ids bigint[], p_outcomes text[], p_status_codes integer[], p_errors text[],
    p_durations_ms integer[], p_now timestamptz, p_backoff interval, p_backoff_cap interval, p_give_up_after interval)
RETURNS TABLE (outbox_id bigint, error text)
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_r         record;
    v_delivery  billing.webhook_delivery;
    v_delivered boolean;
    v_error     text;
    v_status    text;
    v_finished  timestamptz;
    v_first_failed timestamptz;
    v_available timestamptz;
BEGIN
    FOR v_r IN
        SELECT r.*, d.customer_id
          FROM unnest(p_outbox_ids, p_outcomes, p_status_codes, p_errors, p_durations_ms)
               AS r(outbox_id, outcome, status_code, error, duration_ms)
          JOIN (SELECT x.customer_id, x.outbox_id FROM billing.webhook_delivery x
                 WHERE x.endpoint_id = p_endpoint_id AND x.outbox_id = ANY (p_outbox_ids)) d ON d.outbox_id = r.outbox_id
         ORDER BY r.outbox_id
    LOOP
        SELECT * INTO v_delivery FROM billing.webhook_delivery d
         WHERE d.customer_id = v_r.customer_id AND d.endpoint_id = p_endpoint_id AND d.outbox_id = v_r.outbox_id
           AND d.status = 'PENDING'
           FOR UPDATE;
        CONTINUE WHEN NOT FOUND;  -- delivered meanwhile, or its endpoint's queue dropped (at least once)
        IF v_r.outcome = 'RELEASED' THEN
            UPDATE billing.webhook_delivery d SET lease_until = NULL
             WHERE d.customer_id = v_r.customer_id AND d.endpoint_id = p_endpoint_id AND d.outbox_id = v_r.outbox_id;
            CONTINUE;
        END IF;
        v_delivered := v_r.outcome = 'DELIVERED';
        v_error := CASE WHEN v_delivered THEN NULL ELSE left(coalesce(v_r.error, 'failed'), 2000) END;
        -- Every new value computed here (Citus allows no STABLE function in a distributed UPDATE's
        -- CASE), as record_webhook_attempts' statement computes them.
        v_status := CASE WHEN v_delivered THEN 'DELIVERED' ELSE 'PENDING' END;
        v_finished := CASE WHEN v_delivered THEN p_now END;
        v_first_failed := CASE WHEN v_delivered THEN NULL ELSE coalesce(v_delivery.first_failed_at, p_now) END;
        v_available := CASE WHEN v_delivered THEN v_delivery.available_at
                            ELSE p_now + least(p_backoff * power(2, least(v_delivery.attempts, 30)), p_backoff_cap) END;
        UPDATE billing.webhook_delivery d
           SET attempts = v_delivery.attempts + 1,
               lease_until = NULL,
               status = v_status,
               finished_at = v_finished,
               first_failed_at = v_first_failed,
               available_at = v_available,
               last_status = v_r.status_code,
               last_error = v_error
         WHERE d.customer_id = v_r.customer_id AND d.endpoint_id = p_endpoint_id AND d.outbox_id = v_r.outbox_id;
        INSERT INTO billing.webhook_attempt (endpoint_id, outbox_id, attempt, attempted_at, status_code, error, duration_ms,
                                             customer_id)
        VALUES (p_endpoint_id, v_r.outbox_id, v_delivery.attempts + 1, p_now, v_r.status_code, v_error,
                greatest(coalesce(v_r.duration_ms, 0), 0), v_r.customer_id)
        ON CONFLICT ON CONSTRAINT webhook_attempt_pkey DO NOTHING;
        IF NOT v_delivered AND outbox_id IS NULL
           AND coalesce(v_delivery.first_failed_at, p_now) <= p_now - p_give_up_after THEN
            outbox_id := v_r.outbox_id;
            error := v_r.error;
        END IF;
    END LOOP;
    RETURN NEXT;
END
$$;
COMMENT ON FUNCTION billing._record_webhook_attempts_per_row(bigint, bigint[], text[], integer[], text[], integer[], timestamptz, interval, interval, interval) IS
'Private: record_webhook_attempts'' bookkeeping on Citus, delivery by delivery (each by its primary key).
Returns the first delivery (in outbox id order) failing for p_give_up_after, or NULLs.';

CREATE OR REPLACE FUNCTION billing.record_webhook_attempts(
    p_endpoint_id bigint, p_outbox_ids bigint[], p_outcomes text[], p_status_codes integer[], p_errors text[],
    p_durations_ms integer[], p_now timestamptz DEFAULT now(),
    p_backoff interval DEFAULT interval '5 seconds', p_backoff_cap interval DEFAULT interval '1 hour',
    p_give_up_after interval DEFAULT interval '1 day')
RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_endpoint billing.webhook_endpoint;
    v_gave_up  record;
BEGIN
    PERFORM billing._audit('record_webhook_attempts', jsonb_build_object('endpoint_id', p_endpoint_id, 'outbox_ids', p_outbox_ids, 'outcomes', p_outcomes, 'status_codes', p_status_codes, 'now', p_now));
    PERFORM billing._check_now(p_now);
    IF cardinality(p_outbox_ids) IS DISTINCT FROM cardinality(p_outcomes)
       OR cardinality(p_outbox_ids) IS DISTINCT FROM cardinality(p_status_codes)
       OR cardinality(p_outbox_ids) IS DISTINCT FROM cardinality(p_errors)
       OR cardinality(p_outbox_ids) IS DISTINCT FROM cardinality(p_durations_ms) THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = 'the result arrays must all have one entry per delivery';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(p_outcomes) o WHERE o IS NULL OR o NOT IN ('DELIVERED', 'FAILED', 'RELEASED')) THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = 'an outcome is DELIVERED, FAILED or RELEASED';
    END IF;
    -- Serialises with a concurrent delete or disable of the endpoint.
    SELECT * INTO v_endpoint FROM billing.webhook_endpoint WHERE id = p_endpoint_id FOR UPDATE;
    IF NOT FOUND THEN
        RETURN 'DELETED';
    END IF;

    IF billing._distributed('billing.webhook_delivery') THEN
        -- Citus: row by row, each delivery by its primary key (docs/scaling.md).
        SELECT * INTO v_gave_up
          FROM billing._record_webhook_attempts_per_row(p_endpoint_id, p_outbox_ids, p_outcomes, p_status_codes,
                                                        p_errors, p_durations_ms, p_now, p_backoff, p_backoff_cap,
                                                        p_give_up_after);
    ELSE
    WITH r AS (
        SELECT * FROM unnest(p_outbox_ids, p_outcomes, p_status_codes, p_errors, p_durations_ms)
                   AS r(outbox_id, outcome, status_code, error, duration_ms)
    ), attempted AS (
        -- Only deliveries still PENDING count (a lease that ran out and was re-claimed elsewhere
        -- may report twice: at least once).
        UPDATE billing.webhook_delivery d
           SET attempts = d.attempts + 1,
               lease_until = NULL,
               status = CASE WHEN r.outcome = 'DELIVERED' THEN 'DELIVERED' ELSE 'PENDING' END,
               finished_at = CASE WHEN r.outcome = 'DELIVERED' THEN p_now END,
               first_failed_at = CASE WHEN r.outcome = 'DELIVERED' THEN NULL ELSE coalesce(d.first_failed_at, p_now) END,
               available_at = CASE WHEN r.outcome = 'DELIVERED' THEN d.available_at
                                   ELSE p_now + least(p_backoff * power(2, least(d.attempts, 30)), p_backoff_cap) END,
               last_status = r.status_code,
               last_error = CASE WHEN r.outcome = 'DELIVERED' THEN NULL ELSE left(coalesce(r.error, 'failed'), 2000) END
          FROM r
         WHERE d.endpoint_id = p_endpoint_id AND d.outbox_id = r.outbox_id AND d.status = 'PENDING'
           AND r.outcome <> 'RELEASED'
        RETURNING d.outbox_id, d.attempts, d.first_failed_at, r.status_code, r.error, r.duration_ms, r.outcome, d.customer_id
    ), logged AS (
        INSERT INTO billing.webhook_attempt (endpoint_id, outbox_id, attempt, attempted_at, status_code, error, duration_ms,
                                             customer_id)
        SELECT p_endpoint_id, a.outbox_id, a.attempts, p_now, a.status_code,
               CASE WHEN a.outcome = 'DELIVERED' THEN NULL ELSE left(coalesce(a.error, 'failed'), 2000) END,
               greatest(coalesce(a.duration_ms, 0), 0), a.customer_id
          FROM attempted a
        ON CONFLICT ON CONSTRAINT webhook_attempt_pkey DO NOTHING
    )
    SELECT a.outbox_id, a.error INTO v_gave_up
      FROM attempted a
     WHERE a.outcome = 'FAILED' AND a.first_failed_at <= p_now - p_give_up_after
     ORDER BY a.outbox_id
     LIMIT 1;

    -- Not attempted (held back behind a failure of its aggregate): back to the queue as it was.
    UPDATE billing.webhook_delivery d
       SET lease_until = NULL
      FROM unnest(p_outbox_ids, p_outcomes) AS r(outbox_id, outcome)
     WHERE d.endpoint_id = p_endpoint_id AND d.outbox_id = r.outbox_id AND r.outcome = 'RELEASED' AND d.status = 'PENDING';
    END IF;

    IF v_gave_up.outbox_id IS NULL OR v_endpoint.status <> 'ENABLED' THEN
        RETURN v_endpoint.status;
    END IF;

    -- Failing for a day: the endpoint is disabled, its queue dropped, and that is announced.
    UPDATE billing.webhook_endpoint
       SET status = 'DISABLED', disabled_at = p_now,
           disabled_reason = left(format('delivery of outbox event %s failed for %s: %s', v_gave_up.outbox_id,
                                         p_give_up_after, coalesce(v_gave_up.error, 'failed')), 2000)
     WHERE id = p_endpoint_id
    RETURNING * INTO v_endpoint;
    UPDATE billing.webhook_delivery
       SET status = 'FAILED', finished_at = p_now, lease_until = NULL
     WHERE endpoint_id = p_endpoint_id AND status = 'PENDING';
    PERFORM billing._emit_event('webhook_endpoint', v_endpoint.id, 'WebhookEndpointDisabled',
        jsonb_build_object('endpointId', v_endpoint.id, 'url', v_endpoint.url, 'status', v_endpoint.status,
                           'disabledAt', billing._utc_text(p_now), 'reason', v_endpoint.disabled_reason,
                           'eventId', (SELECT d.event_id::text FROM billing.webhook_delivery d
                                        WHERE d.endpoint_id = p_endpoint_id AND d.outbox_id = v_gave_up.outbox_id)),
        p_now);
    RETURN v_endpoint.status;
END
$$;
COMMENT ON FUNCTION billing.record_webhook_attempts(bigint, bigint[], text[], integer[], text[], integer[], timestamptz, interval, interval, interval) IS
'Records one batch of attempts to an endpoint: DELIVERED (2xx), FAILED (backoff p_backoff doubling up to p_backoff_cap) or RELEASED (not attempted, held back behind its aggregate).
Returns the endpoint''s status afterwards (DISABLED once a delivery has failed for p_give_up_after: its queue FAILED, WebhookEndpointDisabled emitted; DELETED when it is gone).';
