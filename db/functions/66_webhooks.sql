-- 66_webhooks: outbound webhooks. Endpoints (create, list, get, delete), the fan-out of every
-- new outbox event into the queue of each enabled endpoint that wants its type (a statement
-- trigger, in the event's own transaction), and the delivery worker's side: claim, record.
-- Order: like the outbox claim, a delivery is never handed out while an earlier PENDING delivery
-- of the same aggregate to the same endpoint is outside the claim, so one aggregate's events
-- reach an endpoint in commit order. Each endpoint is claimed on its own: a slow or dead
-- endpoint holds back neither Kafka nor the other endpoints.
-- This file: endpoints and the fan-out; the delivery worker's side is 67_webhook_deliveries.sql.

-- ---------------------------------------------------------------------------------------------
-- Endpoints
-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION billing.create_webhook_endpoint(
    p_url text, p_event_types text[], p_secret text, p_now timestamptz DEFAULT now())
RETURNS billing.webhook_endpoint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_endpoint billing.webhook_endpoint;
    v_types    text[];
BEGIN
    PERFORM billing._audit('create_webhook_endpoint', jsonb_build_object('url', p_url, 'event_types', p_event_types, 'now', p_now));
    PERFORM billing._check_now(p_now);
    PERFORM billing._check_text('a webhook url', p_url, 2048);
    IF p_url !~ '^https?://[^/?#@\s]+([/?#]|$)' THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = format('webhook url %L is not an http(s) URL without credentials', p_url),
            HINT = 'Use https://host[:port]/path.';
    END IF;
    IF p_event_types IS NULL OR cardinality(p_event_types) NOT BETWEEN 1 AND 100
       OR EXISTS (SELECT 1 FROM unnest(p_event_types) t WHERE t IS NULL OR t !~ '^(\*|[A-Z][A-Za-z]{1,99})$') THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = 'event types must be 1 to 100 event type names, or *',
            HINT = 'See docs/events.md for the catalogue.';
    END IF;
    IF p_secret IS NULL OR length(p_secret) NOT BETWEEN 16 AND 256 THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = 'a webhook secret has 16 to 256 characters';
    END IF;
    -- The types sorted first (Citus plans no subquery inside an INSERT's VALUES).
    v_types := ARRAY(SELECT DISTINCT t FROM unnest(p_event_types) t ORDER BY t);
    INSERT INTO billing.webhook_endpoint (url, event_types, secret, created_at)
    VALUES (p_url, v_types, p_secret, p_now)
    RETURNING * INTO v_endpoint;
    RETURN v_endpoint;
END
$$;
COMMENT ON FUNCTION billing.create_webhook_endpoint(text, text[], text, timestamptz) IS
'New ENABLED endpoint receiving the given event types ({*}: all) from now on, signed with p_secret.
Returns the endpoint; BL422 for a bad url, types or secret.';

CREATE OR REPLACE FUNCTION billing.list_webhook_endpoints()
RETURNS SETOF billing.webhook_endpoint
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
    SELECT * FROM billing.webhook_endpoint ORDER BY id
$$;
COMMENT ON FUNCTION billing.list_webhook_endpoints() IS
'Every endpoint, in id order.
Returns the rows (the secret included: the API leaves it out).';

CREATE OR REPLACE FUNCTION billing.get_webhook_endpoint(p_endpoint_id bigint)
RETURNS billing.webhook_endpoint
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_endpoint billing.webhook_endpoint;
BEGIN
    SELECT * INTO v_endpoint FROM billing.webhook_endpoint WHERE id = p_endpoint_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'BL404',
            MESSAGE = format('webhook endpoint %s does not exist', coalesce(p_endpoint_id::text, 'NULL'));
    END IF;
    RETURN v_endpoint;
END
$$;
COMMENT ON FUNCTION billing.get_webhook_endpoint(bigint) IS
'Reads one endpoint.
Returns the row; BL404 when absent.';

CREATE OR REPLACE FUNCTION billing.delete_webhook_endpoint(p_endpoint_id bigint)
RETURNS billing.webhook_endpoint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_endpoint billing.webhook_endpoint;
BEGIN
    PERFORM billing._audit('delete_webhook_endpoint', jsonb_build_object('endpoint_id', p_endpoint_id));
    DELETE FROM billing.webhook_endpoint WHERE id = p_endpoint_id RETURNING * INTO v_endpoint;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'BL404',
            MESSAGE = format('webhook endpoint %s does not exist', coalesce(p_endpoint_id::text, 'NULL'));
    END IF;
    -- A delivery queued by a transaction still in flight is ignored (no endpoint) and removed
    -- by retention.
    DELETE FROM billing.webhook_delivery WHERE endpoint_id = p_endpoint_id;
    DELETE FROM billing.webhook_attempt WHERE endpoint_id = p_endpoint_id;
    RETURN v_endpoint;
END
$$;
COMMENT ON FUNCTION billing.delete_webhook_endpoint(bigint) IS
'Deletes an endpoint with its queue and attempts: nothing more is delivered to it.
Returns the deleted row; BL404 when absent.';

CREATE OR REPLACE FUNCTION billing.list_webhook_attempts(
    p_endpoint_id bigint, p_limit integer DEFAULT 100, p_before timestamptz DEFAULT NULL)
RETURNS TABLE (outbox_id bigint, event_id uuid, event_type text, attempt integer, attempted_at timestamptz,
               status_code integer, error text, duration_ms integer, delivery_status text)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM billing.get_webhook_endpoint(p_endpoint_id);
    PERFORM billing._check_between('limit', p_limit, 1, 1000);
    RETURN QUERY
    SELECT a.outbox_id, d.event_id, d.event_type, a.attempt, a.attempted_at, a.status_code, a.error, a.duration_ms,
           d.status
      FROM billing.webhook_attempt a
      JOIN billing.webhook_delivery d
        ON d.customer_id = a.customer_id AND d.endpoint_id = a.endpoint_id AND d.outbox_id = a.outbox_id
     WHERE a.endpoint_id = p_endpoint_id AND (p_before IS NULL OR a.attempted_at < p_before)
     ORDER BY a.attempted_at DESC, a.outbox_id DESC, a.attempt DESC
     LIMIT p_limit;
END
$$;
COMMENT ON FUNCTION billing.list_webhook_attempts(bigint, integer, timestamptz) IS
'The endpoint''s delivery attempts, newest first (before p_before when given), with the delivery''s current status.
Returns up to p_limit rows; BL404 for an unknown endpoint, BL422 for a limit outside 1..1000.';

-- ---------------------------------------------------------------------------------------------
-- Fan-out: one statement per outbox INSERT statement, in the event's transaction.
-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION billing._outbox_fan_out()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_count bigint;
BEGIN
    INSERT INTO billing.webhook_delivery (endpoint_id, outbox_id, event_id, event_type, aggregate_type, aggregate_id,
                                          created_at, available_at, customer_id)
    SELECT w.id, e.id, e.event_id, e.event_type, e.aggregate_type, e.aggregate_id, e.created_at, e.created_at, e.customer_id
      FROM new_events e
      JOIN billing.webhook_endpoint w
        ON w.status = 'ENABLED' AND (e.event_type = ANY (w.event_types) OR '*' = ANY (w.event_types));
    GET DIAGNOSTICS v_count = ROW_COUNT;
    IF v_count > 0 THEN
        PERFORM pg_notify('billing_webhooks', json_build_object('count', v_count)::text);
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION billing._outbox_fan_out() IS
'Private trigger: queues each new event for every ENABLED endpoint that wants its type, then one pg_notify(''billing_webhooks'').
Returns NULL (statement-level AFTER trigger).';

CREATE OR REPLACE TRIGGER outbox_event_fan_out
    AFTER INSERT ON billing.outbox_event
    REFERENCING NEW TABLE AS new_events
    FOR EACH STATEMENT EXECUTE FUNCTION billing._outbox_fan_out();

-- On Citus (docs/scaling.md, "Triggers"): a trigger with a transition table cannot be planned next
-- to a distributed table, so `billing db migrate --citus` puts this row trigger in its place. It
-- fires on the event's shard, on the node holding it; the deliveries it writes are the event's
-- customer's, in the same shard group. No notification: the delivery worker polls there.
CREATE OR REPLACE FUNCTION billing._outbox_fan_out_row()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    INSERT INTO billing.webhook_delivery (endpoint_id, outbox_id, event_id, event_type, aggregate_type, aggregate_id,
                                          created_at, available_at, customer_id, aggregate_seq)
    SELECT w.id, NEW.id, NEW.event_id, NEW.event_type, NEW.aggregate_type, NEW.aggregate_id, NEW.created_at,
           NEW.created_at, NEW.customer_id, NEW.aggregate_seq
      FROM billing.webhook_endpoint w
     WHERE w.status = 'ENABLED' AND (NEW.event_type = ANY (w.event_types) OR '*' = ANY (w.event_types));
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION billing._outbox_fan_out_row() IS
'Private trigger, on Citus only (billing db migrate --citus): queues the new event for every ENABLED endpoint that wants its type, in the event''s shard group.
Returns NULL (row-level AFTER trigger).';
