-- 10_util: pure building blocks: calendar, proration, dunning schedule, CloudEvents envelope.
-- Re-applied after every migration: CREATE OR REPLACE only.

-- ---------------------------------------------------------------------------------------------
-- Calendar. The private SQL function has no SET clause and no SECURITY DEFINER so that the
-- planner inlines it into create_due_invoices' single statement (no call per row).
-- Boundary n is anchor_local + n * interval, never chained from the previous boundary, so a
-- Jan 31 anchor gives Feb 28/29, Mar 31, Apr 30 (PostgreSQL clamps a month end, and each
-- boundary is computed from the anchor, so the clamp never accumulates). Adding to the local
-- timestamp keeps the local time of day across DST. A local time that does not exist (spring
-- forward) moves forward by the gap; one that exists twice (fall back) is the later instant.
-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION billing._period_end(
    p_anchor timestamptz, p_billing_interval text, p_interval_count integer, p_periods integer, p_timezone text)
RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT ((p_anchor AT TIME ZONE p_timezone) + CASE p_billing_interval
                WHEN 'MONTH' THEN pg_catalog.make_interval(months => p_interval_count * p_periods)
                WHEN 'YEAR'  THEN pg_catalog.make_interval(years => p_interval_count * p_periods)
                WHEN 'WEEK'  THEN pg_catalog.make_interval(weeks => p_interval_count * p_periods)
                WHEN 'DAY'   THEN pg_catalog.make_interval(days => p_interval_count * p_periods)
            END) AT TIME ZONE p_timezone
$$;
COMMENT ON FUNCTION billing._period_end(timestamptz, text, integer, integer, text) IS
'Private, inlinable: boundary number p_periods from p_anchor in p_timezone, without validation.
Returns NULL for an unknown interval; callers validate (see period_end).';

CREATE OR REPLACE FUNCTION billing._check_timezone(p_timezone text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    -- billing.timezone_name caches pg_timezone_names (a scan of every zone file); a name the
    -- system tzdata gained after the migration is still found by the slow path.
    IF p_timezone IS NULL
       OR (NOT EXISTS (SELECT 1 FROM billing.timezone_name WHERE name = p_timezone)
           AND NOT EXISTS (SELECT 1 FROM pg_timezone_names WHERE name = p_timezone)) THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('unknown time zone %L', p_timezone),
            HINT = 'Use an IANA zone name listed in pg_timezone_names, such as UTC or America/Sao_Paulo.';
    END IF;
END
$$;
COMMENT ON FUNCTION billing._check_timezone(text) IS
'Private: raises BL422 unless p_timezone is a name in pg_timezone_names.
Returns nothing.';

CREATE OR REPLACE FUNCTION billing.period_end(
    p_anchor timestamptz, p_billing_interval text, p_interval_count integer, p_periods integer, p_timezone text)
RETURNS timestamptz
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    IF p_anchor IS NULL OR p_periods IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = 'p_anchor and p_periods are required';
    END IF;
    IF p_billing_interval IS NULL OR p_billing_interval NOT IN ('DAY', 'WEEK', 'MONTH', 'YEAR') THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('unknown billing interval %L', p_billing_interval),
            HINT = 'Use DAY, WEEK, MONTH or YEAR.';
    END IF;
    IF p_interval_count IS NULL OR p_interval_count < 1 THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('interval count must be at least 1, got %s', coalesce(p_interval_count::text, 'NULL'));
    END IF;
    PERFORM billing._check_timezone(p_timezone);
    RETURN billing._period_end(p_anchor, p_billing_interval, p_interval_count, p_periods, p_timezone);
END
$$;
COMMENT ON FUNCTION billing.period_end(timestamptz, text, integer, integer, text) IS
'Boundary number p_periods counted from p_anchor in p_timezone: month ends clamp without drift, local time kept across DST.
Returns the boundary instant; BL422 for an unknown interval, count below 1 or unknown time zone.';

-- ---------------------------------------------------------------------------------------------
-- Proration: the seed's formula, exact integer arithmetic (numeric, floor like Math.floorDiv).
-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION billing.proration_amount(
    p_old_price bigint, p_new_price bigint,
    p_period_start timestamptz, p_period_end timestamptz, p_change_at timestamptz)
RETURNS bigint
LANGUAGE plpgsql IMMUTABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_total     numeric;
    v_remaining numeric;
BEGIN
    IF p_old_price IS NULL OR p_new_price IS NULL OR p_old_price < 0 OR p_new_price < 0 THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('prices must be non-negative, got %s and %s', p_old_price, p_new_price);
    END IF;
    v_total := floor(extract(epoch FROM p_period_end) - extract(epoch FROM p_period_start));
    v_remaining := floor(extract(epoch FROM p_period_end) - extract(epoch FROM p_change_at));
    IF v_total IS NULL OR v_total <= 0 THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('period [%s, %s) is empty', p_period_start, p_period_end),
            HINT = 'The period end must be at least one second after its start.';
    END IF;
    IF v_remaining IS NULL OR p_change_at < p_period_start OR p_change_at > p_period_end THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('change instant %s is outside the period [%s, %s]', p_change_at, p_period_start, p_period_end);
    END IF;
    RETURN (floor(p_new_price * v_remaining / v_total) - floor(p_old_price * v_remaining / v_total))::bigint;
END
$$;
COMMENT ON FUNCTION billing.proration_amount(bigint, bigint, timestamptz, timestamptz, timestamptz) IS
'Seed formula: floor(new*remaining/total) - floor(old*remaining/total), durations in whole seconds.
Returns the signed amount (positive: to charge, negative: credit); BL422 for a bad period or instant.';

-- ---------------------------------------------------------------------------------------------
-- Dunning schedule with deterministic jitter.
-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION billing._dunning_next_attempt(p_failed_attempts integer, p_seed bigint, p_now timestamptz)
RETURNS timestamptz
LANGUAGE sql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
    SELECT p_now + d.delay
         + CASE WHEN d.max_jitter > interval '0' THEN
               make_interval(secs => (
                   (hashtextextended(p_failed_attempts::text, p_seed) % floor(extract(epoch FROM d.max_jitter))::bigint
                    + floor(extract(epoch FROM d.max_jitter))::bigint)
                   % floor(extract(epoch FROM d.max_jitter))::bigint)::double precision)
           ELSE interval '0' END
    FROM billing.dunning_step d
    WHERE d.failed_attempts = p_failed_attempts
$$;
COMMENT ON FUNCTION billing._dunning_next_attempt(integer, bigint, timestamptz) IS
'Private body of dunning_next_attempt, without validation.
Returns NULL when the schedule has no step for p_failed_attempts.';

CREATE OR REPLACE FUNCTION billing.dunning_next_attempt(
    p_failed_attempts integer, p_seed bigint, p_now timestamptz DEFAULT now())
RETURNS timestamptz
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    IF p_failed_attempts IS NULL OR p_failed_attempts < 1 THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('failed attempts must be at least 1, got %s', coalesce(p_failed_attempts::text, 'NULL')),
            HINT = 'Pass the number of declined tries so far, counting the one just declined.';
    END IF;
    RETURN billing._dunning_next_attempt(p_failed_attempts, coalesce(p_seed, 0), p_now);
END
$$;
COMMENT ON FUNCTION billing.dunning_next_attempt(integer, bigint, timestamptz) IS
'Next retry after p_failed_attempts declines: p_now + billing.dunning_step delay + jitter in [0, max_jitter) hashed from (p_seed, attempt).
Returns NULL when the schedule is exhausted (attempt 4 by default); BL422 below 1.';

-- ---------------------------------------------------------------------------------------------
-- CloudEvents 1.0 envelope.
-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION billing._utc_text(p_at timestamptz)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT pg_catalog.to_char(p_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
$$;
COMMENT ON FUNCTION billing._utc_text(timestamptz) IS
'Private: ISO 8601 UTC text with microseconds and a Z suffix.
Returns NULL for NULL.';

CREATE OR REPLACE FUNCTION billing._cloud_event(
    p_event_id uuid, p_event_type text, p_aggregate_type text, p_aggregate_id bigint, p_time timestamptz, p_data jsonb)
RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT pg_catalog.jsonb_build_object(
        'specversion', '1.0',
        'id', p_event_id::text,
        'source', 'billing',
        'type', p_event_type,
        'subject', p_aggregate_type || '/' || p_aggregate_id::text,
        'time', billing._utc_text(p_time),
        'datacontenttype', 'application/json',
        'data', p_data)
$$;
COMMENT ON FUNCTION billing._cloud_event(uuid, text, text, bigint, timestamptz, jsonb) IS
'Private: the CloudEvents 1.0 envelope stored in outbox_event.payload (subject = <aggregate type>/<id>).
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
    INSERT INTO billing.outbox_event (event_id, aggregate_type, aggregate_id, event_type, payload, created_at, available_at)
    VALUES (v_event_id, p_aggregate_type, p_aggregate_id, p_event_type,
            billing._cloud_event(v_event_id, p_event_type, p_aggregate_type, p_aggregate_id, p_now, p_data),
            p_now, p_now)
    RETURNING id INTO v_id;
    RETURN v_id;
END
$$;
COMMENT ON FUNCTION billing._emit_event(text, bigint, text, jsonb, timestamptz) IS
'Private: writes one event to the outbox; call it while holding the aggregate''s row lock so ids follow commit order.
Returns the outbox_event id.';

-- ---------------------------------------------------------------------------------------------
-- Referential integrity of invoice.subscription_id, per statement (see migration 0002).
-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION billing._invoice_subscription_exists()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_missing bigint;
BEGIN
    SELECT n.subscription_id INTO v_missing
      FROM new_invoices n
     WHERE NOT EXISTS (SELECT 1 FROM billing.subscription s WHERE s.id = n.subscription_id)
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = '23503',
            MESSAGE = format('invoice refers to subscription %s, which does not exist', v_missing),
            CONSTRAINT = 'invoice_subscription_exists', TABLE = 'invoice', SCHEMA = 'billing';
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION billing._invoice_subscription_exists() IS
'Private trigger: the foreign key invoice.subscription_id -> subscription.id, checked once per statement with one anti-join.
Returns NULL; raises foreign_key_violation (23503) naming invoice_subscription_exists.';

CREATE OR REPLACE FUNCTION billing._subscription_never_deleted()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = '23503',
        MESSAGE = 'subscriptions are never deleted: cancel them instead',
        CONSTRAINT = 'subscription_never_deleted', TABLE = 'subscription', SCHEMA = 'billing';
END
$$;
COMMENT ON FUNCTION billing._subscription_never_deleted() IS
'Private trigger: refuses DELETE on billing.subscription (invoices, attempts and events refer to it forever; TRUNCATE wipes all and stays allowed).
Returns nothing; raises foreign_key_violation (23503).';

CREATE OR REPLACE TRIGGER invoice_subscription_exists
    AFTER INSERT ON billing.invoice
    REFERENCING NEW TABLE AS new_invoices
    FOR EACH STATEMENT EXECUTE FUNCTION billing._invoice_subscription_exists();

CREATE OR REPLACE FUNCTION billing._invoice_subscription_fixed()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = '23503',
        MESSAGE = format('invoice %s: subscription_id never changes', OLD.id),
        CONSTRAINT = 'invoice_subscription_fixed', TABLE = 'invoice', SCHEMA = 'billing';
END
$$;
COMMENT ON FUNCTION billing._invoice_subscription_fixed() IS
'Private trigger: an invoice never moves to another subscription (so the insert-time check is enough).
Returns nothing; raises foreign_key_violation (23503).';

CREATE OR REPLACE TRIGGER invoice_subscription_fixed
    BEFORE UPDATE OF subscription_id ON billing.invoice
    FOR EACH ROW WHEN (OLD.subscription_id IS DISTINCT FROM NEW.subscription_id)
    EXECUTE FUNCTION billing._invoice_subscription_fixed();

-- TRUNCATE (an operator wiping a test database, as the model test does) stays possible.
CREATE OR REPLACE TRIGGER subscription_never_deleted
    BEFORE DELETE ON billing.subscription
    FOR EACH STATEMENT EXECUTE FUNCTION billing._subscription_never_deleted();
