-- 10_util: pure helpers only: argument checks, calendar, proration, the UTC text form.
-- Nothing here writes; the other files build on these. Re-applied after every migration:
-- CREATE OR REPLACE only.

-- ---------------------------------------------------------------------------------------------
-- Argument checks. Every public function validates its own parameters through these, so one
-- rule has one wording (BL422). _check_now is THE check of a p_now parameter: every public
-- function taking p_now calls it first; a rule about the clock (not NULL, finite, ...) is added
-- there and nowhere else.
-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION billing._check_now(p_now timestamptz)
RETURNS timestamptz
LANGUAGE plpgsql STABLE
-- (no SET search_path: a private helper, run inside its definer caller's; a SET costs ~7 us a call, issue 32)
AS $$
DECLARE
    v_setting billing.database_setting;
BEGIN
    IF p_now IS NULL OR NOT isfinite(p_now) THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('p_now must be a finite instant, got %s', coalesce(p_now::text, 'NULL')),
            HINT = 'Pass the current time (or the simulated clock''s), or leave the parameter out for now().';
    END IF;
    -- Outside a simulation database p_now is the present: a caller cannot renew years ahead,
    -- or backdate a payment, by passing another instant.
    SELECT * INTO v_setting FROM billing.database_setting;
    IF NOT coalesce(v_setting.simulation, false)
       AND abs(extract(epoch FROM p_now - now())) > extract(epoch FROM coalesce(v_setting.max_clock_skew, interval '5 minutes')) THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('p_now %s is more than %s away from the database clock (%s)',
                             p_now, coalesce(v_setting.max_clock_skew, interval '5 minutes'), now()),
            HINT = 'Leave p_now out (now()), fix the caller''s clock, or run simulations on a database migrated with --simulation.';
    END IF;
    RETURN p_now;
END
$$;
COMMENT ON FUNCTION billing._check_now(timestamptz) IS
'Private: the one validation of a public function''s p_now (every public function taking p_now calls it).
Returns p_now; BL422 when it is NULL or infinite, or further than database_setting.max_clock_skew from now() outside a simulation database.';

CREATE OR REPLACE FUNCTION billing._check_between(p_what text, p_value bigint, p_min bigint, p_max bigint)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    IF p_value IS NULL OR p_value < p_min OR p_value > p_max THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = CASE WHEN p_max IS NULL
                           THEN format('%s must be at least %s, got %s', p_what, p_min, coalesce(p_value::text, 'NULL'))
                           ELSE format('%s must be between %s and %s, got %s', p_what, p_min, p_max,
                                       coalesce(p_value::text, 'NULL')) END;
    END IF;
END
$$;
COMMENT ON FUNCTION billing._check_between(text, bigint, bigint, bigint) IS
'Private: p_value (named p_what in the message) must be in [p_min, p_max] (no upper bound when p_max is NULL).
Returns nothing; BL422 otherwise, NULL included.';

CREATE OR REPLACE FUNCTION billing._check_text(p_what text, p_value text, p_max_length integer)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    IF p_value IS NULL OR btrim(p_value) = '' OR length(p_value) > p_max_length THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('%s of 1 to %s characters is required', p_what, p_max_length);
    END IF;
END
$$;
COMMENT ON FUNCTION billing._check_text(text, text, integer) IS
'Private: p_value must be non-blank text of at most p_max_length characters.
Returns nothing; BL422 otherwise.';

-- The arguments of every claim (claim_charges, claim_refunds and their forms per shard group,
-- lease_shard_groups, the relay's claim inside a group): one rule each, one wording. A worker name
-- is at most 200 characters: what billing.shard_worker and billing.shard_lease accept (their CHECK
-- constraints), so a name valid for one claim is valid for every other. A charge's or a refund's
-- lease (p_keyed) must end before the gateway forgets the key it is sent with; p_provider, when
-- given, is a provider name as the worker's BILLING_GATEWAY_PROVIDER spells it.
-- A worker's name (claims, shard leases): one rule for every function that takes one.
CREATE OR REPLACE FUNCTION billing._check_worker(p_worker text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM billing._check_text('a worker name', p_worker, 200);
END
$$;
COMMENT ON FUNCTION billing._check_worker(text) IS
'Private: a worker name is 1 to 200 characters (_check_text), for every claim and shard lease.
Returns nothing; BL422 otherwise.';

-- The arguments every claim takes, named worker or not (the clock, the batch size, the lease):
-- _check_claim below adds the worker's name, the key lifetime and the provider; the claims that
-- name no worker (claim_outbox_events, claim_webhook_deliveries, claim_refund_rechecks,
-- claim_notifications) call this one alone. p_max_batch: 10000, but the notifications' 1000.
CREATE OR REPLACE FUNCTION billing._check_claim_args(p_batch_size integer, p_lease interval, p_now timestamptz,
                                                     p_max_batch integer DEFAULT 10000)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM billing._check_now(p_now);
    PERFORM billing._check_between('batch size', p_batch_size, 1, p_max_batch);
    PERFORM billing._check_lease(p_lease);
END
$$;
COMMENT ON FUNCTION billing._check_claim_args(integer, interval, timestamptz, integer) IS
'Private: the arguments every claim takes: p_now (_check_now), a batch size of 1 to p_max_batch (10000 unless given), a lease (_check_lease), in that order.
Returns nothing; BL422 otherwise.';

CREATE OR REPLACE FUNCTION billing._check_claim(p_worker text, p_batch_size integer, p_lease interval, p_now timestamptz,
                                                p_keyed boolean DEFAULT false, p_provider text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_key_lifetime interval;
BEGIN
    PERFORM billing._check_now(p_now);
    PERFORM billing._check_worker(p_worker);
    PERFORM billing._check_claim_args(p_batch_size, p_lease, p_now);
    IF p_keyed THEN
        SELECT i.key_lifetime INTO v_key_lifetime FROM billing.installation i;
        IF p_lease >= v_key_lifetime THEN
            RAISE EXCEPTION USING ERRCODE = 'BL422',
                MESSAGE = format('the lease (%s) must be shorter than the gateway''s key lifetime (%s)', p_lease, v_key_lifetime),
                HINT = 'A call made near the end of a longer lease could reach the gateway after it forgot the key.';
        END IF;
    END IF;
    IF p_provider IS NOT NULL AND p_provider !~ '^[a-z][a-z0-9_]{1,31}$' THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('a provider name is 2 to 32 lower-case letters, digits or _, got %L', p_provider),
            HINT = 'Pass the worker''s BILLING_GATEWAY_PROVIDER (sim, stripe, ...).';
    END IF;
END
$$;
COMMENT ON FUNCTION billing._check_claim(text, integer, interval, timestamptz, boolean, text) IS
'Private: the arguments of a claim: p_now (_check_now), a worker name of 1 to 200 characters, a batch size of 1 to 10000 and a lease (_check_claim_args), shorter than the key lifetime when p_keyed, and a provider name when given.
Returns nothing; BL422 otherwise.';

CREATE OR REPLACE FUNCTION billing._check_one_of(p_what text, p_value text, p_allowed text[], p_hint text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    IF p_value IS NULL OR NOT (p_value = ANY (p_allowed)) THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = format('unknown %s %L', p_what, p_value), HINT = p_hint;
    END IF;
END
$$;
COMMENT ON FUNCTION billing._check_one_of(text, text, text[], text) IS
'Private: p_value must be one of p_allowed (an enumerated parameter such as a billing interval or a payment outcome).
Returns nothing; BL422 with p_hint otherwise.';

CREATE OR REPLACE FUNCTION billing._check_lease(p_lease interval)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    -- A lease parks work with one worker: an hour is far more than any call needs. A simulation
    -- database (its clock jumps hours at a time) may lease for up to a week.
    v_max interval := CASE WHEN billing._is_simulation() THEN interval '7 days' ELSE interval '1 hour' END;
BEGIN
    IF p_lease IS NULL OR p_lease <= interval '0' OR p_lease > v_max THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('the lease must be a positive interval of at most %s, got %s', v_max, coalesce(p_lease::text, 'NULL'));
    END IF;
END
$$;
COMMENT ON FUNCTION billing._check_lease(interval) IS
'Private: a claim''s lease must be a positive interval of at most 1 hour (7 days on a simulation database).
Returns nothing; BL422 otherwise.';

CREATE OR REPLACE FUNCTION billing._is_simulation()
RETURNS boolean
LANGUAGE sql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
    SELECT coalesce((SELECT s.simulation FROM billing.database_setting s), false)
$$;
COMMENT ON FUNCTION billing._is_simulation() IS
'Private body of is_simulation (callable from the owner''s functions without a grant).
Returns true on a database migrated with --simulation.';

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

CREATE OR REPLACE FUNCTION billing._billing_intervals()
RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT ARRAY['DAY', 'WEEK', 'MONTH', 'YEAR']
$$;
COMMENT ON FUNCTION billing._billing_intervals() IS
'Private: the billing intervals a plan may use (the plan table''s CHECK says the same).
Returns the array.';

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
    PERFORM billing._check_one_of('billing interval', p_billing_interval, billing._billing_intervals(),
                                  'Use DAY, WEEK, MONTH or YEAR.');
    PERFORM billing._check_between('interval count', p_interval_count, 1, NULL);
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
-- Text forms.
-- ---------------------------------------------------------------------------------------------
-- STABLE, not IMMUTABLE, like to_char itself: the planner inlines a SQL function only when its
-- body is no more volatile than it says, and an inlined call costs nothing (a called one ~20 µs,
-- four times per event: measured in bench/charge). The same holds for _invoice_data and _cloud_event.
CREATE OR REPLACE FUNCTION billing._utc_text(p_at timestamptz)
RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT pg_catalog.to_char(p_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
$$;
COMMENT ON FUNCTION billing._utc_text(timestamptz) IS
'Private: ISO 8601 UTC text with microseconds and a Z suffix.
Returns NULL for NULL.';

