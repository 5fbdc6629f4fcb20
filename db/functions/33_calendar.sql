-- 33_calendar: the calendar of the lifecycle (docs/lifecycle.md): a subscription's first period,
-- calendar billing days in the customer's zone, the charge of a period, and whether a subscription
-- needs the lifecycle's per-row renewal.
-- Re-applied after every migration: CREATE OR REPLACE only.

-- ---------------------------------------------------------------------------------------------
-- Calendar: the first period of a subscription starting at p_start.
-- ---------------------------------------------------------------------------------------------
-- Without a billing day the periods count from p_start (anchor = p_start, period 1 ends one
-- interval later). With one, every boundary is that day of the month at local midnight (clamped to
-- the month's last day), the first period runs from p_start to the first boundary after it and is
-- prorated against the full period that ends there (nominal_start). The anchor is a boundary in a
-- month long enough for the billing day (so _period_end's clamping never shortens later months),
-- period_number periods before the first boundary.
CREATE OR REPLACE FUNCTION billing._first_period(
    p_plan billing.plan, p_timezone text, p_start timestamptz,
    OUT anchor timestamptz, OUT period_number integer, OUT period_end timestamptz, OUT nominal_start timestamptz)
LANGUAGE plpgsql STABLE
-- (no SET search_path: a private helper, run inside its definer caller's; a SET costs ~7 us a call, issue 32)
AS $$
DECLARE
    v_month date := date_trunc('month', p_start AT TIME ZONE p_timezone)::date;
    v_back  date;
    v_k     integer;
BEGIN
    IF p_plan.billing_day IS NULL THEN
        anchor := p_start;
        period_number := 1;
        period_end := billing._period_end(p_start, p_plan.billing_interval, p_plan.interval_count, 1, p_timezone);
        nominal_start := p_start;
        RETURN;
    END IF;
    -- The first boundary strictly after p_start: this month's billing day or the next month's.
    IF billing._billing_day_at(v_month, p_plan.billing_day, p_timezone) <= p_start THEN
        v_month := (v_month + interval '1 month')::date;
    END IF;
    period_end := billing._billing_day_at(v_month, p_plan.billing_day, p_timezone);
    FOR v_k IN 1..12 LOOP
        v_back := (v_month - make_interval(months => v_k * p_plan.interval_count))::date;
        IF extract(day FROM (v_back + interval '1 month - 1 day'))::integer >= p_plan.billing_day THEN
            anchor := ((v_back + (p_plan.billing_day - 1))::timestamp) AT TIME ZONE p_timezone;
            period_number := v_k;
            EXIT;
        END IF;
    END LOOP;
    nominal_start := billing._period_end(anchor, 'MONTH', p_plan.interval_count, period_number - 1, p_timezone);
END
$$;
COMMENT ON FUNCTION billing._first_period(billing.plan, text, timestamptz) IS
'Private: the first billed period of p_plan starting at p_start in p_timezone: its anchor and number (period_end = _period_end(anchor, ..., period_number)), its end, and the start of the full period it is part of (= p_start unless calendar billing shortens it).
Returns the four values.';

CREATE OR REPLACE FUNCTION billing._billing_day_at(p_month date, p_billing_day integer, p_timezone text)
RETURNS timestamptz
LANGUAGE sql IMMUTABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
    SELECT ((p_month + (least(p_billing_day,
                              extract(day FROM (p_month + interval '1 month - 1 day'))::integer) - 1))::timestamp)
           AT TIME ZONE p_timezone
$$;
COMMENT ON FUNCTION billing._billing_day_at(date, integer, text) IS
'Private: local midnight of day p_billing_day (clamped to the month''s last day) of the month starting at p_month, in p_timezone.
Returns the instant.';

-- What a period [p_start, p_end) costs at p_price per seat: the whole price times the seats, or for a
-- period shortened by calendar billing its share of the full period [p_nominal_start, p_end), in
-- whole seconds, rounded down (the proration formula's rounding).
CREATE OR REPLACE FUNCTION billing._period_charge(
    p_price bigint, p_quantity integer, p_start timestamptz, p_end timestamptz, p_nominal_start timestamptz)
RETURNS bigint
LANGUAGE plpgsql IMMUTABLE
-- (no SET search_path: a private helper, run inside its definer caller's; a SET costs ~7 us a call, issue 32)
AS $$
-- (PL/pgSQL for its cached plan: a SQL function with SET is never inlined and was parsed and planned
-- again on every call from PL/pgSQL, ~70 us of a signup; see _subscription_data)
BEGIN
    RETURN CASE WHEN p_nominal_start >= p_start THEN p_price * p_quantity
                ELSE floor(p_price::numeric * p_quantity
                           * floor(extract(epoch FROM p_end) - extract(epoch FROM p_start))
                           / floor(extract(epoch FROM p_end) - extract(epoch FROM p_nominal_start)))::bigint END;
END
$$;
COMMENT ON FUNCTION billing._period_charge(bigint, integer, timestamptz, timestamptz, timestamptz) IS
'Private: price x quantity for a full period; for a first calendar period its share of the full period (whole seconds, rounded down).
Returns the amount in minor units.';

-- The start of the full period the subscription's current period belongs to (its own start unless
-- it is a first calendar period).
CREATE OR REPLACE FUNCTION billing._nominal_start(p_sub billing.subscription, p_plan billing.plan)
RETURNS timestamptz
LANGUAGE sql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
    SELECT least(p_sub.current_period_start,
                 billing._period_end(p_sub.billing_anchor, p_plan.billing_interval, p_plan.interval_count,
                                     p_sub.period_number - 1, p_sub.timezone))
$$;
COMMENT ON FUNCTION billing._nominal_start(billing.subscription, billing.plan) IS
'Private: start of the full period containing the subscription''s current period.
Returns an instant at or before current_period_start.';

-- Whether the subscription's next renewal needs the per-row path.
CREATE OR REPLACE FUNCTION billing._needs_lifecycle(p_sub billing.subscription)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
    SELECT p_sub.status = 'TRIALING' OR p_sub.scheduled_plan_id IS NOT NULL OR p_sub.coupon_code IS NOT NULL
$$;
COMMENT ON FUNCTION billing._needs_lifecycle(billing.subscription) IS
'Private: true when the next renewal must go through _renew_one (a trial, a scheduled change or an active coupon).
Returns the flag to store in lifecycle_pending.';
