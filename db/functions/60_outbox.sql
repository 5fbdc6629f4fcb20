-- 60_outbox: the transactional outbox: its writer (_emit_event), its NOTIFY trigger and the relay's side.
-- Ordering: events of one aggregate are written under that aggregate's row lock, so their ids
-- follow commit order. claim_outbox_events never hands out an event while an earlier PENDING
-- event of the same aggregate is not part of the same claim (leased elsewhere, backing off, or
-- skipped as locked), so even several relays publish one aggregate's events in order, provided
-- each relay publishes a claimed batch in id order and stops at the first failure of an
-- aggregate. The driver also runs a single active relay (advisory lock), which makes this moot
-- in practice. A DEAD event no longer holds back later events of its aggregate.

-- ---------------------------------------------------------------------------------------------
-- The writer: every event is a CloudEvents 1.0 envelope inserted in the transaction of the change
-- it announces (the renewal statement inserts its rare events itself, with the same envelope).
-- ---------------------------------------------------------------------------------------------
-- The catalogue's versions: a type's `data` schema is docs/events/<type>.v<version>.json, named
-- in the envelope's `dataschema` (its $id). A breaking change of a type's data bumps its version
-- here; adding a type needs a schema file, not a line here (version 1).
CREATE OR REPLACE FUNCTION billing._event_version(p_event_type text)
RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT 1
$$;
COMMENT ON FUNCTION billing._event_version(text) IS
'Private: the version of an event type''s data schema (every type is at version 1 so far).
Returns the version number.';

CREATE OR REPLACE FUNCTION billing._cloud_event(
    p_event_id uuid, p_event_type text, p_aggregate_type text, p_aggregate_id bigint, p_time timestamptz, p_data jsonb)
RETURNS jsonb
LANGUAGE sql STABLE PARALLEL SAFE  -- inlinable (see billing._utc_text)
AS $$
    SELECT pg_catalog.jsonb_build_object(
        'specversion', '1.0',
        'id', p_event_id::text,
        'source', 'billing',
        'type', p_event_type,
        'subject', p_aggregate_type || '/' || p_aggregate_id::text,
        'time', billing._utc_text(p_time),
        'datacontenttype', 'application/json',
        'dataschema', 'urn:billing:events:' || p_event_type || ':v' || billing._event_version(p_event_type),
        'data', p_data)
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

-- The head-of-line check stays a per-candidate probe of outbox_event_aggregate_unpublished_idx,
-- the only index its predicate can use (db/schema/0021: another index made it O(batch^2) under
-- misleading statistics); OFFSET 0 keeps the planner from pulling it up into a hash anti-join over
-- every PENDING row;
-- and the lease update goes through the primary key, so a claim costs O(batch), not O(table),
-- with or without statistics (measured in bench/relay: a 5,000-row claim 550 ms -> ~150 ms).
-- The candidates are read by a plain index scan of outbox_event_pending_idx in id order, never a
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
    PERFORM billing._check_now(p_now);
    PERFORM billing._check_between('batch size', p_batch_size, 1, 10000);
    PERFORM billing._check_lease(p_lease);

    WITH candidate AS MATERIALIZED (
        SELECT e.id, e.aggregate_type, e.aggregate_id
          FROM billing.outbox_event e
         WHERE e.status = 'PENDING'
           AND e.available_at <= p_now
           AND (e.lease_until IS NULL OR e.lease_until <= p_now)
         ORDER BY e.id
         LIMIT p_batch_size
           FOR UPDATE SKIP LOCKED
    )
    SELECT array_agg(c.id ORDER BY c.id) INTO v_ids
      FROM candidate c
     WHERE NOT EXISTS (
               SELECT 1
                 FROM billing.outbox_event earlier
                WHERE earlier.status <> 'PUBLISHED' AND earlier.status <> 'DEAD'  -- = PENDING, see above
                  AND earlier.aggregate_type = c.aggregate_type
                  AND earlier.aggregate_id = c.aggregate_id
                  AND earlier.id < c.id
                  AND earlier.id NOT IN (SELECT id FROM candidate)
               OFFSET 0);

    RETURN QUERY
    WITH leased AS (
        UPDATE billing.outbox_event e
           SET lease_until = p_now + p_lease
         WHERE e.id = ANY (v_ids)
        RETURNING e.*
    )
    SELECT * FROM leased ORDER BY leased.id;
END
$$;
COMMENT ON FUNCTION billing.claim_outbox_events(integer, interval, timestamptz) IS
'Claims up to p_batch_size PENDING events that are due and not leased, in id order (SKIP LOCKED), leasing them until p_now + p_lease.
Returns the claimed rows (publish them in id order); an event waits while an earlier PENDING event of its aggregate is held elsewhere.';

CREATE OR REPLACE FUNCTION billing.mark_outbox_published(p_ids bigint[], p_now timestamptz DEFAULT now())
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_count integer;
BEGIN
    PERFORM billing._audit('mark_outbox_published', jsonb_build_object('ids', p_ids, 'now', p_now));
    PERFORM billing._check_now(p_now);
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
BEGIN
    PERFORM billing._audit('mark_outbox_failed', jsonb_build_object('id', p_id, 'error', left(p_error, 200), 'now', p_now));
    PERFORM billing._check_now(p_now);
    SELECT * INTO v_event FROM billing.outbox_event WHERE id = p_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'BL404', MESSAGE = format('outbox event %s does not exist', coalesce(p_id::text, 'NULL'));
    END IF;
    IF v_event.status <> 'PENDING' THEN
        RETURN;  -- published meanwhile (at least once is enough) or already dead
    END IF;
    UPDATE billing.outbox_event
       SET attempts = attempts + 1,
           last_error = left(coalesce(p_error, 'unknown error'), 2000),
           lease_until = NULL,
           status = CASE WHEN attempts + 1 >= c_max_attempts THEN 'DEAD' ELSE 'PENDING' END,
           -- 5 s, 10 s, 20 s ... capped at 15 minutes
           available_at = p_now + least(interval '5 seconds' * power(2, attempts), interval '15 minutes')
     WHERE id = p_id;
END
$$;
COMMENT ON FUNCTION billing.mark_outbox_failed(bigint, text, timestamptz) IS
'Records a failed publish: retried after an exponential backoff (5 s doubling, capped at 15 min), DEAD after 10 failures (kept).
Returns nothing; BL404 for an unknown id.';
