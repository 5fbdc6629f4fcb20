-- 64_outbox: the transactional outbox's writer (_emit_event); its NOTIFY trigger and the relay's
-- side are 65_outbox_relay.sql.
-- The order (one rule, here; docs/events.md "Order"): events go out by billing._outbox_order(
-- aggregate_seq, id) = coalesce(aggregate_seq, id), ties by id, on one PostgreSQL and on Citus
-- alike. On one PostgreSQL aggregate_seq is NULL and the order is the id's: an aggregate's events
-- are written under its row lock, so their ids follow commit order. On Citus each node takes ids
-- from its own range, so _outbox_event_seq (below) gives every event written there a key that follows
-- commit order within the aggregate (migration 0090); events written before the database was
-- distributed have none and come first. Every claim (claim_outbox_events, its per-row form on
-- Citus, claim_outbox_events_in_shard, claim_webhook_deliveries), the head-of-line probes and the
-- replay (outbox_events_from) call it, the relay keeps the order its claim returns (its redo too:
-- billing.worker.relay), and the indexes of migration 0380 are on what it inlines to
-- (db/tests/642_outbox_order.sql checks both).
-- Head of line: a claim never hands out an event while an earlier (in that order) PENDING event of
-- the same aggregate is not part of the same claim (leased elsewhere, backing off, or skipped as
-- locked), so even several relays publish one aggregate's events in order, provided each relay
-- publishes a claimed batch in the order the claim returns it and stops at the first failure of
-- an aggregate. A DEAD event no longer holds back later events of its aggregate.

CREATE OR REPLACE FUNCTION billing._outbox_order(p_aggregate_seq bigint, p_id bigint)
RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE  -- inlined: the planner sees coalesce(), the indexes' expression
AS $$
    SELECT coalesce(p_aggregate_seq, p_id)
$$;
COMMENT ON FUNCTION billing._outbox_order(bigint, bigint) IS
'Private: the outbox''s order key of an event (outbox_event: aggregate_seq, id; webhook_delivery: aggregate_seq, outbox_id), ties broken by the id; the same rule on one PostgreSQL (NULL key: the id) and on Citus.
Returns coalesce(p_aggregate_seq, p_id).';

-- ---------------------------------------------------------------------------------------------
-- The writer: every event is a CloudEvents 1.0 envelope inserted in the transaction of the change
-- it announces (the renewal statement inserts its rare events itself, with the same envelope).
-- ---------------------------------------------------------------------------------------------
-- The catalogue's versions: a type's `data` schema is docs/events/<type>.v<version>.json, named
-- in the envelope's `dataschema` (its $id). A breaking change of a type's data bumps its version
-- here; adding a type needs a schema file, not a line here (version 1). outbox_event's CloudEvents
-- CHECK (migration 0800) settles a version-1 envelope from its text alone and parses any other: a
-- type at version 2 costs its writers that parse (~10 us an event) until the CHECK names it too.
CREATE OR REPLACE FUNCTION billing._event_version(p_event_type text)
RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT 1
$$;
COMMENT ON FUNCTION billing._event_version(text) IS
'Private: the version of an event type''s data schema (every type is at version 1 so far).
Returns the version number.';

-- The envelope with its time already as text: a statement writing many events at one instant (the
-- renewal) formats the instant once. The keys in jsonb's own order (see _invoice_data).
-- The renewal statement (40_renewal.sql) writes the same envelope as a JSON text for its invoice
-- events: a change here must be made there too (401_renewal_conformance compares them).
CREATE OR REPLACE FUNCTION billing._cloud_event_at(
    p_event_id uuid, p_event_type text, p_aggregate_type text, p_aggregate_id bigint, p_time text, p_data jsonb)
RETURNS jsonb
LANGUAGE sql STABLE PARALLEL SAFE  -- inlinable (see billing._utc_text)
AS $$
    SELECT pg_catalog.jsonb_build_object(
        'id', p_event_id::text,
        'data', p_data,
        'time', p_time,
        'type', p_event_type,
        'source', 'billing',
        'subject', p_aggregate_type || '/' || p_aggregate_id::text,
        'dataschema', 'urn:billing:events:' || p_event_type || ':v' || billing._event_version(p_event_type),
        'specversion', '1.0',
        'datacontenttype', 'application/json')
$$;
COMMENT ON FUNCTION billing._cloud_event_at(uuid, text, text, bigint, text, jsonb) IS
'Private: _cloud_event with the event''s time given as its text (billing._utc_text of the instant).
Returns the envelope as jsonb.';

CREATE OR REPLACE FUNCTION billing._cloud_event(
    p_event_id uuid, p_event_type text, p_aggregate_type text, p_aggregate_id bigint, p_time timestamptz, p_data jsonb)
RETURNS jsonb
LANGUAGE sql STABLE PARALLEL SAFE  -- inlinable (see billing._utc_text)
AS $$
    SELECT billing._cloud_event_at(p_event_id, p_event_type, p_aggregate_type, p_aggregate_id, billing._utc_text(p_time), p_data)
$$;
COMMENT ON FUNCTION billing._cloud_event(uuid, text, text, bigint, timestamptz, jsonb) IS
'Private: the CloudEvents 1.0 envelope stored in outbox_event.payload (subject = <aggregate type>/<id>, dataschema = urn:billing:events:<type>:v<version>).
Returns the envelope as jsonb.';

CREATE OR REPLACE FUNCTION billing._emit_event(
    p_aggregate_type text, p_aggregate_id bigint, p_event_type text, p_data jsonb, p_now timestamptz)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_event_id uuid := gen_random_uuid();
    v_id       bigint;
BEGIN
    INSERT INTO billing.outbox_event (event_id, aggregate_type, aggregate_id, event_type, payload, created_at, available_at, customer_id)
    VALUES (v_event_id, p_aggregate_type, p_aggregate_id, p_event_type,
            billing._cloud_event(v_event_id, p_event_type, p_aggregate_type, p_aggregate_id, p_now, p_data),
            p_now, p_now, coalesce((p_data ->> 'customerId')::bigint, 0))
    RETURNING id INTO v_id;
    RETURN v_id;
END
$$;
COMMENT ON FUNCTION billing._emit_event(text, bigint, text, jsonb, timestamptz) IS
'Private: writes one event to the outbox; call it while holding the aggregate''s row lock so ids follow commit order.
Returns the outbox_event id.';

-- On Citus (db/schema/0090): each node takes ids from its own range of the sequence, so an
-- aggregate's event written on the coordinator after one written on a worker gets the smaller id.
-- This row trigger, on Citus only, gives every new event an order key: the time it is written, in
-- microseconds, raised above every unpublished event of its aggregate (the caller holds the
-- aggregate's row lock, as for the ids on one PostgreSQL). Every claim takes events in
-- billing._outbox_order (above). It fires on the event's shard, on the node holding it, and reads
-- that shard only (the aggregate's unpublished events, through their partial index).
--
-- The read is one statement per shard kept per session (issue 32, groups4): PREPAREd the first time a
-- session writes to that shard, then only executed (~25 us), where a dynamic statement planned anew
-- for each event cost 300-700 us, more with more shards on the node, most of what the per-group
-- renewal paid per event after the fan-out. A session's prepared statements belong to whoever owns
-- the session, so the statement's text is compared with this trigger's own at the start of every
-- INSERT statement on the shard (_outbox_event_seq_ready, a statement trigger) and replaced when it
-- differs, as the relay's kept statements are before each use (65_outbox_relay.sql): a same-named
-- statement the session made itself is never run. Nothing but the INSERT's own expressions (the
-- engine's: no role may write the outbox) runs between that check and the statement's rows.
CREATE OR REPLACE FUNCTION billing._outbox_event_seq_ready()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    -- %1$I the statement's name (one per shard: its oid), %2$I.%3$I the shard.
    c_prepare constant text := 'PREPARE %1$I(pg_catalog.text, pg_catalog.int8) AS '
        'SELECT pg_catalog.max(billing._outbox_order(e.aggregate_seq, e.id)) FROM %2$I.%3$I e '
        'WHERE e.status <> ''PUBLISHED'' AND e.aggregate_type = $1 AND e.aggregate_id = $2';
    v_name text := 'billing_outbox_seq_' || TG_RELID::text;
    v_kept text;
BEGIN
    v_kept := (SELECT p.statement FROM pg_catalog.pg_prepared_statements p WHERE p.name = v_name);
    IF v_kept IS DISTINCT FROM format(c_prepare, v_name, TG_TABLE_SCHEMA, TG_TABLE_NAME) THEN
        IF v_kept IS NOT NULL THEN
            EXECUTE format('DEALLOCATE %I', v_name);
        END IF;
        EXECUTE format(c_prepare, v_name, TG_TABLE_SCHEMA, TG_TABLE_NAME);
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION billing._outbox_event_seq_ready() IS
'Private trigger, on Citus only: before each INSERT statement on a shard of the outbox, makes sure this session''s statement billing_outbox_seq_<shard oid> is exactly the order key''s read of that shard (the aggregate''s unpublished events'' highest billing._outbox_order; prepared when missing, replaced when different), for the rows'' trigger _outbox_event_seq.
Returns NULL (statement-level BEFORE trigger).';

CREATE OR REPLACE FUNCTION billing._outbox_event_seq()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_last bigint;
BEGIN
    -- The statement _outbox_event_seq_ready checked at the start of this INSERT statement.
    EXECUTE format('EXECUTE %I(%L, %L)', 'billing_outbox_seq_' || TG_RELID::text, NEW.aggregate_type, NEW.aggregate_id)
       INTO v_last;
    -- The wall clock, so that events of every node are taken oldest first; raised above the
    -- aggregate's unpublished events, so that an aggregate's order never depends on clocks.
    NEW.aggregate_seq := greatest((extract(epoch FROM pg_catalog.clock_timestamp()) * 1000000)::bigint, v_last + 1);
    RETURN NEW;
END
$$;
COMMENT ON FUNCTION billing._outbox_event_seq() IS
'Private trigger, on Citus only: sets the new event''s aggregate_seq (the time in microseconds, raised above every unpublished event of its aggregate, read by the statement prepared once per session and shard that _outbox_event_seq_ready checks at the start of every INSERT statement), so the relay orders an aggregate''s events by commit whatever node took the id.
Returns the row (BEFORE INSERT, per row).';

DO $$
BEGIN
    IF billing._distributed('billing.outbox_event')
       AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger WHERE tgrelid = 'billing.outbox_event'::regclass
                                                          AND tgname = 'outbox_event_seq') THEN
        PERFORM pg_catalog.set_config('citus.enable_unsafe_triggers', 'on', true);
        CREATE TRIGGER outbox_event_seq BEFORE INSERT ON billing.outbox_event
            FOR EACH ROW EXECUTE FUNCTION billing._outbox_event_seq();
    END IF;
    IF billing._distributed('billing.outbox_event')
       AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger WHERE tgrelid = 'billing.outbox_event'::regclass
                                                          AND tgname = 'outbox_event_seq_ready') THEN
        PERFORM pg_catalog.set_config('citus.enable_unsafe_triggers', 'on', true);
        CREATE TRIGGER outbox_event_seq_ready BEFORE INSERT ON billing.outbox_event
            FOR EACH STATEMENT EXECUTE FUNCTION billing._outbox_event_seq_ready();
    END IF;
END
$$;
