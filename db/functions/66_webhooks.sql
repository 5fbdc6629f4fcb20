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
-- On Citus (docs/scaling.md, "Triggers") the same statement trigger fires on the event's shard, on
-- the node holding it, once per statement that wrote there (the per-group renewal's one INSERT of
-- a batch's events, or one event of a call routed to that shard). Its statement cannot name the
-- distributed tables there (a transition table next to a Citus table: "unrecognized RTE kind: 7"),
-- so it names the shard group's own: the colocated shard of webhook_delivery and this node's copy of
-- webhook_endpoint (_fan_out_shard_statement), one plain statement for all the rows, where a row
-- trigger ran a distributed INSERT ... SELECT per event, its endpoints pulled through the
-- coordinator and planned over every shard of webhook_delivery (issue 32: 0.8 ms an event at 8 shard
-- groups, 3.8 ms at 64, most of renew_in_shard's cost). No notification there: on Citus the
-- delivery worker polls (a NOTIFY on a worker reaches no listener).
CREATE OR REPLACE FUNCTION billing._outbox_fan_out()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_count bigint;
BEGIN
    IF TG_RELID <> 'billing.outbox_event'::regclass THEN
        -- A shard of the distributed outbox (Citus): the group's own tables.
        EXECUTE billing._fan_out_shard_statement(TG_TABLE_SCHEMA, TG_TABLE_NAME);
        RETURN NULL;
    END IF;
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
'Private trigger: queues each new event for every ENABLED endpoint that wants its type, then one pg_notify(''billing_webhooks''); on a Citus shard of the outbox, the same for the statement''s rows into the shard group''s own webhook_delivery shard (_fan_out_shard_statement), without a notification.
Returns NULL (statement-level AFTER trigger).';

CREATE OR REPLACE TRIGGER outbox_event_fan_out
    AFTER INSERT ON billing.outbox_event
    REFERENCING NEW TABLE AS new_events
    FOR EACH STATEMENT EXECUTE FUNCTION billing._outbox_fan_out();

-- The fan-out's statement on a shard of the outbox (Citus): the shard's own group, found through
-- Citus' catalog (the shard's id is its name's suffix, as shard_name() makes it; the colocated
-- webhook_delivery shard has the same hash range), and this node's copy of the reference table
-- webhook_endpoint. Each delivery carries its event's aggregate_seq (the order its claims use).
DROP FUNCTION IF EXISTS billing._fan_out_shard_statement(regclass);
CREATE OR REPLACE FUNCTION billing._fan_out_shard_statement(p_schema text, p_table text)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_shard_id bigint;
    v_delivery text;
BEGIN
    -- The shard's id: its name is outbox_event_<id> in schema billing (anything else is refused).
    -- (By the trigger's names: Citus hides shards from pg_class on a worker.)
    IF p_schema = 'billing' THEN
        v_shard_id := pg_catalog.substring(p_table, '^outbox_event_([0-9]+)$')::bigint;
    END IF;
    -- Static SQL: planned once per session, and only on Citus (the caller's branch).
    SELECT pg_catalog.shard_name('billing.webhook_delivery'::regclass, d.shardid) INTO v_delivery
      FROM pg_catalog.pg_dist_shard o
      JOIN pg_catalog.pg_dist_shard d ON d.logicalrelid = 'billing.webhook_delivery'::regclass
                                     AND d.shardminvalue = o.shardminvalue
     WHERE o.shardid = v_shard_id AND o.logicalrelid = 'billing.outbox_event'::regclass;
    IF v_delivery IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'XX000',
            MESSAGE = format('%I.%I is not a shard of billing.outbox_event', p_schema, p_table);
    END IF;
    RETURN format($q$
        INSERT INTO %s (endpoint_id, outbox_id, event_id, event_type, aggregate_type, aggregate_id, created_at,
                        available_at, customer_id, aggregate_seq)
        SELECT w.id, e.id, e.event_id, e.event_type, e.aggregate_type, e.aggregate_id, e.created_at, e.created_at,
               e.customer_id, e.aggregate_seq
          FROM new_events e
          JOIN %s w
            ON w.status = 'ENABLED' AND (e.event_type = ANY (w.event_types) OR '*' = ANY (w.event_types))$q$,
        v_delivery, billing._local_table('billing.webhook_endpoint'));
END
$$;
COMMENT ON FUNCTION billing._fan_out_shard_statement(text, text) IS
'Private: the fan-out''s statement on a Citus shard of billing.outbox_event (its schema and name, as the trigger has them): the statement''s new events (transition table new_events) queued for every ENABLED endpoint that wants their type (this node''s copy of webhook_endpoint), into the colocated shard of webhook_delivery, with their aggregate_seq.
Returns the statement; raises XX000 for a relation that is not a shard of the outbox.';

-- The row trigger Citus ran before issue 32's groups4 (one distributed INSERT per event): gone, the
-- statement trigger above fires on the shards (db/citus/10_adapt.sql no longer replaces it).
DROP FUNCTION IF EXISTS billing._outbox_fan_out_row();
