-- 35_lifecycle: trials, coupons, pause and resume, uncancel, reactivation, seats, scheduled plan
-- changes and calendar billing (docs/lifecycle.md has the rules and the choices made).
-- Every mutation locks the subscription row first (then its invoices, then a coupon row), the
-- order of the renewal and payment paths, and bumps version. The money rules of docs/money.md hold
-- on every path: a credit comes only from a period billed (and is pending until it is paid), a
-- discount never takes an invoice below zero, and a pause credits only the unused, paid time.
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
SET search_path = billing, pg_catalog, pg_temp
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
LANGUAGE sql IMMUTABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
    SELECT CASE WHEN p_nominal_start >= p_start THEN p_price * p_quantity
                ELSE floor(p_price::numeric * p_quantity
                           * floor(extract(epoch FROM p_end) - extract(epoch FROM p_start))
                           / floor(extract(epoch FROM p_end) - extract(epoch FROM p_nominal_start)))::bigint END
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

-- ---------------------------------------------------------------------------------------------
-- Coupons: the discount of one period invoice.
-- ---------------------------------------------------------------------------------------------
-- A percentage is rounded down to the minor unit (the customer never gets more than the
-- percentage); a fixed amount is capped at the invoice (never below zero). Each period invoice
-- discounted uses one period of a once / repeating coupon, whatever the amount.
CREATE OR REPLACE FUNCTION billing._take_discount(
    p_sub billing.subscription, p_subtotal bigint, p_currency char(3), p_now timestamptz,
    OUT discount bigint, OUT coupon_code text)
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_red    billing.coupon_redemption;
    v_coupon billing.coupon;
BEGIN
    discount := 0;
    SELECT * INTO v_red FROM billing.coupon_redemption
     WHERE customer_id = p_sub.customer_id AND subscription_id = p_sub.id AND ended_at IS NULL
       FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    SELECT * INTO v_coupon FROM billing.coupon WHERE code = v_red.coupon_code;
    IF v_coupon.percent_off IS NOT NULL THEN
        discount := floor(p_subtotal * v_coupon.percent_off / 100)::bigint;
    ELSIF v_coupon.currency = p_currency THEN
        discount := least(v_coupon.amount_off, p_subtotal);
    END IF;
    coupon_code := v_coupon.code;
    UPDATE billing.coupon_redemption r
       SET periods_left = r.periods_left - 1,
           ended_at = CASE WHEN r.periods_left = 1 THEN p_now END
     WHERE r.customer_id = v_red.customer_id AND r.subscription_id = v_red.subscription_id
       AND r.coupon_code = v_red.coupon_code AND r.periods_left IS NOT NULL;
    IF v_red.periods_left = 1 THEN
        UPDATE billing.subscription SET coupon_code = NULL WHERE customer_id = p_sub.customer_id AND id = p_sub.id;
    END IF;
END
$$;
COMMENT ON FUNCTION billing._take_discount(billing.subscription, bigint, char, timestamptz) IS
'Private: the discount of the subscription''s active coupon on a period invoice of p_subtotal (percent rounded down, amount capped at p_subtotal), using one period of it (the last one clears subscription.coupon_code).
Returns the discount (0 without a coupon) and the coupon code.';

-- Redeems p_code on the locked subscription: checks, then counts the redemption once under the
-- coupon's row lock (a conditional UPDATE: concurrent redemptions of the last one serialise on it,
-- and the loser re-reads the counter). Replaces the subscription's active coupon, if another.
CREATE OR REPLACE FUNCTION billing._redeem_coupon(p_sub billing.subscription, p_code text, p_now timestamptz)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_coupon  billing.coupon;
    v_plan    billing.plan;
    v_red     billing.coupon_redemption;
    v_periods integer;
BEGIN
    PERFORM billing._check_text('a coupon code', p_code, 64);
    SELECT * INTO v_coupon FROM billing.coupon WHERE code = p_code;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = format('unknown coupon %L', p_code),
            HINT = 'Create the coupon with upsert_coupon first.';
    END IF;
    SELECT * INTO v_red FROM billing.coupon_redemption
     WHERE customer_id = p_sub.customer_id AND subscription_id = p_sub.id AND coupon_code = p_code;
    IF FOUND THEN
        IF v_red.ended_at IS NULL THEN
            RETURN false;  -- already the active coupon: nothing to do, nothing counted
        END IF;
        RAISE EXCEPTION USING ERRCODE = 'BL409',
            MESSAGE = format('coupon %s was already redeemed on subscription %s', p_code, p_sub.id),
            HINT = 'A coupon is redeemed at most once per subscription.';
    END IF;
    IF v_coupon.redeem_by IS NOT NULL AND p_now >= v_coupon.redeem_by THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('coupon %s could be redeemed until %s', p_code, v_coupon.redeem_by);
    END IF;
    SELECT * INTO v_plan FROM billing.plan WHERE id = p_sub.plan_id;
    IF v_coupon.plan_codes IS NOT NULL AND NOT (v_plan.code = ANY (v_coupon.plan_codes)) THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('coupon %s does not apply to plan %s', p_code, v_plan.code),
            HINT = format('It applies to %s.', array_to_string(v_coupon.plan_codes, ', '));
    END IF;
    IF v_coupon.currency IS NOT NULL AND v_coupon.currency <> v_plan.currency THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('coupon %s is an amount in %s but subscription %s is billed in %s',
                             p_code, v_coupon.currency, p_sub.id, v_plan.currency);
    END IF;

    UPDATE billing.coupon SET times_redeemed = times_redeemed + 1, updated_at = now()
     WHERE code = p_code AND (max_redemptions IS NULL OR times_redeemed < max_redemptions);
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'BL409',
            MESSAGE = format('coupon %s has been redeemed its %s times', p_code, v_coupon.max_redemptions);
    END IF;
    UPDATE billing.coupon_redemption SET ended_at = p_now
     WHERE customer_id = p_sub.customer_id AND subscription_id = p_sub.id AND ended_at IS NULL;
    -- The periods computed first: Citus deparses a simple CASE over parameters wrongly ("text = boolean").
    v_periods := CASE v_coupon.duration WHEN 'once' THEN 1 WHEN 'repeating' THEN v_coupon.duration_periods END;
    INSERT INTO billing.coupon_redemption (customer_id, subscription_id, coupon_code, periods_left, redeemed_at)
    VALUES (p_sub.customer_id, p_sub.id, p_code, v_periods, p_now);
    UPDATE billing.subscription SET coupon_code = p_code WHERE customer_id = p_sub.customer_id AND id = p_sub.id;
    RETURN true;
END
$$;
COMMENT ON FUNCTION billing._redeem_coupon(billing.subscription, text, timestamptz) IS
'Private: redeems coupon p_code on the locked subscription (counted once under the coupon''s lock), replacing its active coupon.
Returns false when it already is the active coupon; BL422 unknown, expired, other plan or currency; BL409 redeemed before on it or no redemptions left.';

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

-- ---------------------------------------------------------------------------------------------
-- Starting a billed period (first after a trial, after a pause, at a reactivation, at a change of
-- period length) and renewing one subscription.
-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION billing._start_period(
    p_sub billing.subscription, p_plan billing.plan, p_start timestamptz, p_kind text, p_now timestamptz,
    p_from_plan_id bigint DEFAULT NULL, p_from_price bigint DEFAULT NULL)
RETURNS billing.subscription
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_sub   billing.subscription;
    v_start timestamptz;
    v_first record;
    v_price bigint;
    v_list  bigint;
    v_disc  record;
BEGIN
    -- Invoices are unique per (subscription, period start, kind): a second period started at the
    -- very same instant (pause and resume at once) starts 1 us later.
    SELECT greatest(p_start, max(period_start) + interval '1 microsecond') INTO v_start
      FROM billing.invoice WHERE customer_id = p_sub.customer_id AND subscription_id = p_sub.id AND kind = p_kind AND period_start >= p_start;
    v_start := coalesce(v_start, p_start);
    v_first := billing._first_period(p_plan, p_sub.timezone, v_start);
    v_price := billing._price_at(p_plan, v_start);
    v_list := billing._period_charge(v_price, p_sub.quantity, v_start, v_first.period_end, v_first.nominal_start);
    v_disc := billing._take_discount(p_sub, v_list, p_plan.currency, p_now);
    UPDATE billing.subscription
       SET plan_id = p_plan.id,
           status = CASE WHEN status IN ('TRIALING', 'PAUSED', 'CANCELED') THEN 'ACTIVE' ELSE status END,
           canceled_at = NULL, cancel_reason = NULL,
           cancel_at_period_end = CASE WHEN status = 'CANCELED' THEN false ELSE cancel_at_period_end END,
           billing_anchor = v_first.anchor, period_number = v_first.period_number,
           current_period_start = v_start, current_period_end = v_first.period_end,
           period_price = v_list - v_disc.discount,
           trial_notice_at = NULL, paused_at = NULL, resume_at = NULL, scheduled_plan_id = NULL,
           version = version + 1, updated_at = p_now
     WHERE customer_id = p_sub.customer_id AND id = p_sub.id
    RETURNING * INTO v_sub;
    UPDATE billing.subscription SET lifecycle_pending = billing._needs_lifecycle(v_sub)
     WHERE customer_id = v_sub.customer_id AND id = v_sub.id
    RETURNING * INTO v_sub;
    PERFORM billing._new_invoice(v_sub, p_kind, v_start, v_first.period_end, v_list - v_disc.discount, p_plan, v_price,
                                 p_now, p_from_plan_id, p_from_price, v_disc.discount, v_disc.coupon_code);
    RETURN v_sub;
END
$$;
COMMENT ON FUNCTION billing._start_period(billing.subscription, billing.plan, timestamptz, text, timestamptz, bigint, bigint) IS
'Private: starts a new billed period of the locked subscription at p_start on p_plan (re-anchored; calendar plans end it on the billing day, prorated), ACTIVE unless PAST_DUE, with its invoice of kind p_kind (seats, coupon discount, credit).
Returns the subscription; the caller announces the change.';

-- One renewal of a locked subscription whose period has ended, through the per-row path: what the
-- renewal statement does (cancel if flagged, else bill the next period at the price in force when
-- it starts), plus a trial's end, a scheduled plan change and the coupon discount.
CREATE OR REPLACE FUNCTION billing._renew_one(p_sub billing.subscription, p_now timestamptz)
RETURNS billing.subscription
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_sub   billing.subscription := p_sub;
    v_plan  billing.plan;
    v_old   billing.plan;
    v_price bigint;
    v_list  bigint;
    v_end   timestamptz;
    v_disc  record;
BEGIN
    IF v_sub.cancel_at_period_end THEN
        UPDATE billing.subscription
           SET status = 'CANCELED', canceled_at = p_now, cancel_reason = 'PERIOD_END',
               version = version + 1, updated_at = p_now
         WHERE customer_id = v_sub.customer_id AND id = v_sub.id
        RETURNING * INTO v_sub;
        PERFORM billing._emit_event('subscription', v_sub.id, 'SubscriptionCanceled', billing._subscription_data(v_sub), p_now);
        PERFORM billing._void_open_invoices(v_sub.customer_id, ARRAY[v_sub.id], p_now);
        RETURN v_sub;
    END IF;
    SELECT * INTO v_old FROM billing.plan WHERE id = v_sub.plan_id;
    SELECT * INTO v_plan FROM billing.plan WHERE id = coalesce(v_sub.scheduled_plan_id, v_sub.plan_id);

    IF v_sub.status = 'TRIALING' THEN
        -- The trial ends: the first billed period starts at its end.
        v_sub := billing._start_period(v_sub, v_plan, v_sub.current_period_end, 'INITIAL', p_now);
    ELSIF (v_plan.billing_interval, v_plan.interval_count, v_plan.billing_day)
          IS DISTINCT FROM (v_old.billing_interval, v_old.interval_count, v_old.billing_day) THEN
        -- A scheduled change to another period length: the new calendar starts at the period end.
        v_sub := billing._start_period(v_sub, v_plan, v_sub.current_period_end, 'RENEWAL', p_now);
    ELSE
        v_price := billing._price_at(v_plan, v_sub.current_period_end);
        v_end := billing._period_end(v_sub.billing_anchor, v_plan.billing_interval, v_plan.interval_count,
                                     v_sub.period_number + 1, v_sub.timezone);
        v_list := v_price * v_sub.quantity;
        v_disc := billing._take_discount(v_sub, v_list, v_plan.currency, p_now);
        PERFORM billing._new_invoice(v_sub, 'RENEWAL', v_sub.current_period_end, v_end, v_list - v_disc.discount,
                                     v_plan, v_price, p_now, NULL, NULL, v_disc.discount, v_disc.coupon_code);
        UPDATE billing.subscription
           SET plan_id = v_plan.id, scheduled_plan_id = NULL,
               current_period_start = current_period_end, current_period_end = v_end,
               period_number = period_number + 1, period_price = v_list - v_disc.discount,
               version = version + 1, updated_at = p_now
         WHERE customer_id = v_sub.customer_id AND id = v_sub.id
        RETURNING * INTO v_sub;
        UPDATE billing.subscription SET lifecycle_pending = billing._needs_lifecycle(v_sub)
         WHERE customer_id = v_sub.customer_id AND id = v_sub.id
        RETURNING * INTO v_sub;
    END IF;
    PERFORM billing._emit_subscription_change(p_sub, v_sub, p_now);
    RETURN v_sub;
END
$$;
COMMENT ON FUNCTION billing._renew_one(billing.subscription, timestamptz) IS
'Private: renews (or cancels at period end) one locked subscription whose period has ended: a trial''s end starts the first billed period, a scheduled change applies, a coupon discounts.
Returns the subscription after it; announces what changed.';

-- The per-row part of create_due_invoices: trial notices, resumes at their date, and due renewals
-- that need _renew_one. Each query claims with SKIP LOCKED, like the renewal statement.
CREATE OR REPLACE FUNCTION billing._renew_lifecycle(p_batch_size integer, p_now timestamptz)
RETURNS integer
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_sub    billing.subscription;
    v_plan   billing.plan;
    v_count  integer := 0;
BEGIN
    IF billing._distributed('billing.customer') THEN
        RETURN billing._renew_lifecycle_rows(p_batch_size, p_now);
    END IF;
    FOR v_sub IN
        SELECT * FROM billing.subscription
         WHERE trial_notice_at <= p_now AND status = 'TRIALING'
         ORDER BY trial_notice_at, id LIMIT p_batch_size
           FOR NO KEY UPDATE SKIP LOCKED
    LOOP
        -- Bookkeeping, not a change of the subscription: version stays.
        UPDATE billing.subscription SET trial_notice_at = NULL WHERE customer_id = v_sub.customer_id AND id = v_sub.id;
        PERFORM billing._emit_event('subscription', v_sub.id, 'SubscriptionTrialWillEnd',
                                    billing._subscription_data(v_sub), p_now);
        v_count := v_count + 1;
    END LOOP;

    -- Resumes at their date and renewals through the per-row path: claimed together (each kind
    -- oldest first), then handled in customer order, so that the credit balances they lock are
    -- taken in key order, as the renewal statement takes them (no deadlock between the two).
    FOR v_sub IN
        WITH resuming AS MATERIALIZED (
            SELECT * FROM billing.subscription
             WHERE status = 'PAUSED' AND resume_at <= p_now
             ORDER BY resume_at, id LIMIT p_batch_size
               FOR NO KEY UPDATE SKIP LOCKED
        ), renewing AS MATERIALIZED (
            SELECT * FROM billing.subscription
             WHERE lifecycle_pending AND status IN ('TRIALING', 'ACTIVE', 'PAST_DUE') AND current_period_end <= p_now
             ORDER BY current_period_end, id LIMIT p_batch_size
               FOR NO KEY UPDATE SKIP LOCKED
        )
        SELECT c.* FROM (SELECT * FROM resuming UNION ALL SELECT * FROM renewing) c ORDER BY c.customer_id, c.id
    LOOP
        IF v_sub.status = 'PAUSED' THEN
            -- Resumed at the date set, however late the job runs (later periods follow as renewals).
            PERFORM billing._resume(v_sub, v_sub.resume_at, p_now);
        ELSE
            PERFORM billing._renew_one(v_sub, p_now);
        END IF;
        v_count := v_count + 1;
    END LOOP;
    RETURN v_count;
END
$$;
COMMENT ON FUNCTION billing._renew_lifecycle(integer, timestamptz) IS
'Private: create_due_invoices'' per-row path: SubscriptionTrialWillEnd when due, resumes at resume_at, and one renewal of each due subscription flagged lifecycle_pending (up to p_batch_size of each, SKIP LOCKED; handled in customer order).
Returns how many rows it handled.';

-- The same on Citus, where a claim cannot lock rows of several shards in one statement (convention 3
-- of docs/scaling.md): an unlocked read of the candidates' keys over every shard, then each row locked
-- by (customer_id, id) with SKIP LOCKED (one shard) and its condition checked again on the locked row,
-- then worked on in this transaction, as above. The scale path on Citus is the per-shard-group claim
-- (56_shard_claims), which calls the same per-row functions.
CREATE OR REPLACE FUNCTION billing._renew_lifecycle_rows(p_batch_size integer, p_now timestamptz)
RETURNS integer
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_keys   record;
    v_sub    billing.subscription;
    v_count  integer := 0;
    i        integer;
BEGIN
    SELECT array_agg(k.customer_id ORDER BY k.trial_notice_at, k.id) AS customers,
           array_agg(k.id ORDER BY k.trial_notice_at, k.id) AS ids INTO v_keys
      FROM (SELECT s.customer_id, s.id, s.trial_notice_at FROM billing.subscription s
             WHERE s.trial_notice_at <= p_now AND s.status = 'TRIALING'
             ORDER BY s.trial_notice_at, s.id LIMIT p_batch_size) k;
    FOR i IN 1..coalesce(cardinality(v_keys.ids), 0) LOOP
        SELECT * INTO v_sub FROM billing.subscription
         WHERE customer_id = v_keys.customers[i] AND id = v_keys.ids[i]
           AND trial_notice_at <= p_now AND status = 'TRIALING'
           FOR NO KEY UPDATE SKIP LOCKED;
        CONTINUE WHEN NOT FOUND;
        UPDATE billing.subscription SET trial_notice_at = NULL WHERE customer_id = v_sub.customer_id AND id = v_sub.id;
        PERFORM billing._emit_event('subscription', v_sub.id, 'SubscriptionTrialWillEnd',
                                    billing._subscription_data(v_sub), p_now);
        v_count := v_count + 1;
    END LOOP;

    -- Resumes and per-row renewals, each kind oldest first, handled in customer order.
    SELECT array_agg(k.customer_id ORDER BY k.customer_id, k.id) AS customers,
           array_agg(k.id ORDER BY k.customer_id, k.id) AS ids INTO v_keys
      FROM ((SELECT s.customer_id, s.id FROM billing.subscription s
              WHERE s.status = 'PAUSED' AND s.resume_at <= p_now
              ORDER BY s.resume_at, s.id LIMIT p_batch_size)
            UNION
            (SELECT s.customer_id, s.id FROM billing.subscription s
              WHERE s.lifecycle_pending AND s.status IN ('TRIALING', 'ACTIVE', 'PAST_DUE') AND s.current_period_end <= p_now
              ORDER BY s.current_period_end, s.id LIMIT p_batch_size)) k;
    FOR i IN 1..coalesce(cardinality(v_keys.ids), 0) LOOP
        SELECT * INTO v_sub FROM billing.subscription
         WHERE customer_id = v_keys.customers[i] AND id = v_keys.ids[i]
           AND ((status = 'PAUSED' AND resume_at <= p_now)
                OR (lifecycle_pending AND status IN ('TRIALING', 'ACTIVE', 'PAST_DUE') AND current_period_end <= p_now))
           FOR NO KEY UPDATE SKIP LOCKED;
        CONTINUE WHEN NOT FOUND;
        IF v_sub.status = 'PAUSED' THEN
            PERFORM billing._resume(v_sub, v_sub.resume_at, p_now);
        ELSE
            PERFORM billing._renew_one(v_sub, p_now);
        END IF;
        v_count := v_count + 1;
    END LOOP;
    RETURN v_count;
END
$$;
COMMENT ON FUNCTION billing._renew_lifecycle_rows(integer, timestamptz) IS
'Private: _renew_lifecycle on Citus: the candidates read unlocked over every shard, then each locked by (customer_id, id) SKIP LOCKED (one shard), its condition checked again, and handled as _renew_lifecycle does.
Returns how many rows it handled.';

-- Every automatic transition due by p_now that the renewal job has not processed yet is settled at
-- its own instant before a call changes anything: a scheduled resume first (its period starts at
-- resume_at, on the plan and seats in force then), then the renewals due (a trial's end, a change
-- scheduled for the period end, a renewal at the terms in force, a cancellation at period end). So
-- a call never chooses the terms of a period already begun, and any credit it makes is a share of
-- a period billed. Every lifecycle call (plan, seats, coupon, cancel, uncancel, pause, resume)
-- starts with it, as the renewal job would have run just before.
DROP FUNCTION IF EXISTS billing._end_due_trial(billing.subscription, timestamptz);
CREATE OR REPLACE FUNCTION billing._settle_due(p_sub billing.subscription, p_now timestamptz, p_refusal text DEFAULT NULL)
RETURNS billing.subscription
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_sub billing.subscription := p_sub;
BEGIN
    IF v_sub.status = 'PAUSED' AND v_sub.resume_at <= p_now THEN
        v_sub := billing._resume(v_sub, v_sub.resume_at, p_now);
    END IF;
    v_sub := billing._catch_up(v_sub, p_now);
    IF p_refusal IS NOT NULL AND v_sub.status = 'CANCELED' AND p_sub.status <> 'CANCELED' THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('subscription %s ended at %s %s; %s', v_sub.id,
                             CASE WHEN p_sub.status = 'TRIALING' THEN 'the end of its trial' ELSE 'its period end' END,
                             v_sub.current_period_end, p_refusal),
            HINT = 'Create a new subscription instead.';
    END IF;
    RETURN v_sub;
END
$$;
COMMENT ON FUNCTION billing._settle_due(billing.subscription, timestamptz, text) IS
'Private: settles what was due on the locked subscription by p_now and not yet processed, each at its own instant: a resume at resume_at, then renewals (trial end, scheduled change, cancellation at period end) through _catch_up.
Returns it; BL422 (message ending with p_refusal) when p_refusal is given and it ended meanwhile.';

CREATE OR REPLACE FUNCTION billing._resume(p_sub billing.subscription, p_at timestamptz, p_now timestamptz)
RETURNS billing.subscription
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_plan billing.plan;
    v_sub  billing.subscription;
BEGIN
    SELECT * INTO v_plan FROM billing.plan WHERE id = coalesce(p_sub.scheduled_plan_id, p_sub.plan_id);
    v_sub := billing._start_period(p_sub, v_plan, p_at, 'RENEWAL', p_now);
    PERFORM billing._emit_subscription_change(p_sub, v_sub, p_now);
    RETURN v_sub;
END
$$;
COMMENT ON FUNCTION billing._resume(billing.subscription, timestamptz, timestamptz) IS
'Private: a paused subscription resumes at p_at: a new period starts then (new anchor; a scheduled plan applies), billed at once.
Returns the subscription; SubscriptionUpdated and SubscriptionResumed announce it.';

-- ---------------------------------------------------------------------------------------------
-- API
-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION billing.upsert_coupon(
    p_code text, p_percent_off numeric, p_amount_off bigint, p_currency text, p_duration text,
    p_duration_periods integer DEFAULT NULL, p_max_redemptions integer DEFAULT NULL,
    p_redeem_by timestamptz DEFAULT NULL, p_plan_codes text[] DEFAULT NULL)
RETURNS billing.coupon
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_old     billing.coupon;
    v_new     billing.coupon;
    v_unknown text[];
    v_at      timestamptz := now();  -- a variable, not now(), in DO UPDATE (Citus wants no volatile call there)
BEGIN
    PERFORM billing._audit('upsert_coupon', jsonb_build_object('code', p_code, 'percent_off', p_percent_off, 'amount_off', p_amount_off, 'currency', p_currency, 'duration', p_duration, 'duration_periods', p_duration_periods, 'max_redemptions', p_max_redemptions, 'redeem_by', p_redeem_by, 'plan_codes', p_plan_codes));
    IF p_code IS NULL OR p_code !~ '^[A-Za-z0-9_-]{1,64}$' THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('a coupon code is 1 to 64 letters, digits, _ or -, got %L', p_code);
    END IF;
    IF (p_percent_off IS NULL) = (p_amount_off IS NULL) THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('coupon %s: give exactly one of a percentage and an amount off', p_code);
    END IF;
    IF p_percent_off IS NOT NULL AND (p_percent_off <= 0 OR p_percent_off > 100 OR p_percent_off <> round(p_percent_off, 2)) THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('coupon %s: the percentage must be above 0 and at most 100 (two decimals), got %s', p_code, p_percent_off);
    END IF;
    IF p_amount_off IS NOT NULL AND p_amount_off <= 0 THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('coupon %s: the amount off must be positive, got %s', p_code, p_amount_off);
    END IF;
    IF (p_amount_off IS NULL) <> (p_currency IS NULL) OR (p_currency IS NOT NULL AND p_currency !~ '^[A-Z]{3}$') THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('coupon %s: an amount off needs its ISO 4217 currency (and a percentage none), got %L', p_code, p_currency);
    END IF;
    PERFORM billing._check_one_of(format('coupon %s: duration', p_code), p_duration, ARRAY['once', 'repeating', 'forever'],
                                  'Use once, repeating (with p_duration_periods) or forever.');
    IF (p_duration = 'repeating') <> (p_duration_periods IS NOT NULL) THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('coupon %s: p_duration_periods is required for repeating and only for it', p_code);
    END IF;
    IF p_duration_periods IS NOT NULL THEN
        PERFORM billing._check_between(format('coupon %s: duration periods', p_code), p_duration_periods, 1, 120);
    END IF;
    IF p_max_redemptions IS NOT NULL THEN
        PERFORM billing._check_between(format('coupon %s: max redemptions', p_code), p_max_redemptions, 1, NULL);
    END IF;
    IF p_redeem_by IS NOT NULL AND NOT isfinite(p_redeem_by) THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = format('coupon %s: redeem-by must be a finite instant', p_code);
    END IF;
    IF p_plan_codes IS NOT NULL THEN
        IF cardinality(p_plan_codes) = 0 OR array_position(p_plan_codes, NULL) IS NOT NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'BL422',
                MESSAGE = format('coupon %s: the plan codes must be a non-empty list (or NULL for every plan)', p_code);
        END IF;
        SELECT array_agg(c ORDER BY c) INTO v_unknown FROM unnest(p_plan_codes) c
         WHERE NOT EXISTS (SELECT 1 FROM billing.plan p WHERE p.code = c);
        IF v_unknown IS NOT NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'BL422',
                MESSAGE = format('coupon %s: unknown plan(s) %s', p_code, array_to_string(v_unknown, ', '));
        END IF;
        IF p_currency IS NOT NULL AND EXISTS (SELECT 1 FROM billing.plan p WHERE p.code = ANY (p_plan_codes)
                                                                           AND p.currency <> p_currency) THEN
            RAISE EXCEPTION USING ERRCODE = 'BL422',
                MESSAGE = format('coupon %s: an amount in %s cannot apply to plans billed in another currency', p_code, p_currency);
        END IF;
    END IF;

    SELECT * INTO v_old FROM billing.coupon WHERE code = p_code FOR UPDATE;
    IF FOUND AND v_old.times_redeemed > 0
       AND (v_old.percent_off, v_old.amount_off, v_old.currency, v_old.duration, v_old.duration_periods)
           IS DISTINCT FROM (p_percent_off, p_amount_off, p_currency::char(3), p_duration, p_duration_periods) THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('coupon %s has been redeemed: its discount and duration cannot change', p_code),
            HINT = 'Create a coupon with a new code; the limits (max redemptions, redeem-by, plans) may still change.';
    END IF;
    IF FOUND AND p_max_redemptions IS NOT NULL AND p_max_redemptions < v_old.times_redeemed THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('coupon %s has been redeemed %s times: the maximum cannot be %s',
                             p_code, v_old.times_redeemed, p_max_redemptions);
    END IF;
    INSERT INTO billing.coupon AS c (code, percent_off, amount_off, currency, duration, duration_periods,
                                     max_redemptions, redeem_by, plan_codes)
    VALUES (p_code, p_percent_off, p_amount_off, p_currency, p_duration, p_duration_periods,
            p_max_redemptions, p_redeem_by, p_plan_codes)
    ON CONFLICT ON CONSTRAINT coupon_pkey DO UPDATE
        SET percent_off = excluded.percent_off, amount_off = excluded.amount_off, currency = excluded.currency,
            duration = excluded.duration, duration_periods = excluded.duration_periods,
            max_redemptions = excluded.max_redemptions, redeem_by = excluded.redeem_by,
            plan_codes = excluded.plan_codes, updated_at = v_at
    RETURNING * INTO v_new;
    RETURN v_new;
END
$$;
COMMENT ON FUNCTION billing.upsert_coupon(text, numeric, bigint, text, text, integer, integer, timestamptz, text[]) IS
'Creates or updates coupon p_code: p_percent_off (0 < p <= 100, rounded down per invoice) or p_amount_off in p_currency; p_duration once, repeating (p_duration_periods invoices) or forever; optional max redemptions, redeem-by instant and plan codes. A redeemed coupon keeps its discount and duration.
Returns the coupon; BL422 for any invalid or contradictory argument, an unknown plan, or a change of a redeemed coupon''s terms.';

CREATE OR REPLACE FUNCTION billing.apply_coupon(p_subscription_id bigint, p_code text, p_now timestamptz DEFAULT now())
RETURNS billing.subscription
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_sub    billing.subscription;
    v_before billing.subscription;
BEGIN
    PERFORM billing._audit('apply_coupon', jsonb_build_object('subscription_id', p_subscription_id, 'code', p_code, 'now', p_now));
    PERFORM billing._check_now(p_now);
    v_sub := billing._lock_subscription(p_subscription_id);
    IF v_sub.status = 'CANCELED' THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('subscription %s is canceled; no coupon applies to it', v_sub.id);
    END IF;
    -- What was due is settled first: the coupon discounts the period invoices after the call, never
    -- one of a period already begun (a renewal due, a trial's end, a resume due).
    v_sub := billing._settle_due(v_sub, p_now, 'no coupon applies to it');
    v_before := v_sub;
    IF NOT billing._redeem_coupon(v_sub, p_code, p_now) THEN
        RETURN v_sub;
    END IF;
    UPDATE billing.subscription SET lifecycle_pending = true, version = version + 1, updated_at = p_now
     WHERE customer_id = v_sub.customer_id AND id = v_sub.id
    RETURNING * INTO v_sub;
    PERFORM billing._emit_subscription_change(v_before, v_sub, p_now);
    RETURN v_sub;
END
$$;
COMMENT ON FUNCTION billing.apply_coupon(bigint, text, timestamptz) IS
'First settles what was due on it and not yet processed by the renewal job (a passed resume date, a trial''s end, renewals, a cancellation at period end), each at its own instant. Redeems coupon p_code on the subscription from its next period invoice (replacing its active coupon); SubscriptionUpdated (couponCode). Applying the active coupon again changes nothing.
Returns the subscription; BL404 absent; BL422 canceled, unknown, expired, other plan or currency; BL409 redeemed on it before, or no redemptions left.';

CREATE OR REPLACE FUNCTION billing.pause_subscription(
    p_subscription_id bigint, p_resume_at timestamptz DEFAULT NULL, p_now timestamptz DEFAULT now())
RETURNS billing.subscription
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_sub    billing.subscription;
    v_before billing.subscription;
    v_plan   billing.plan;
    v_at     timestamptz;
    v_credit bigint;
    v_unserved bigint[];
    v_unpaid   boolean;
BEGIN
    PERFORM billing._audit('pause_subscription', jsonb_build_object('subscription_id', p_subscription_id, 'resume_at', p_resume_at, 'now', p_now));
    PERFORM billing._check_now(p_now);
    IF p_resume_at IS NOT NULL AND (NOT isfinite(p_resume_at) OR p_resume_at <= p_now) THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('the resume date %s must be after now (%s)', p_resume_at, p_now),
            HINT = 'Leave it out to pause until resume_subscription is called.';
    END IF;
    v_sub := billing._lock_subscription(p_subscription_id);
    -- What was due is settled first, at its own instant: a resume date already passed resumed it
    -- then (so a pause now credits only the rest of the period billed from it, and the time since
    -- is not made free by moving the date); a trial ended is converted and renewals due are billed
    -- before the pause, which then starts within the current period.
    v_sub := billing._settle_due(v_sub, p_now);
    IF v_sub.status = 'PAUSED' THEN
        IF v_sub.resume_at IS NOT DISTINCT FROM p_resume_at THEN
            RETURN v_sub;
        END IF;
        v_before := v_sub;
        UPDATE billing.subscription SET resume_at = p_resume_at, version = version + 1, updated_at = p_now
         WHERE customer_id = v_sub.customer_id AND id = v_sub.id
        RETURNING * INTO v_sub;
        PERFORM billing._emit_subscription_change(v_before, v_sub, p_now);
        RETURN v_sub;
    END IF;
    IF v_sub.status <> 'ACTIVE' OR v_sub.cancel_at_period_end THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('subscription %s is %s%s: only an ACTIVE subscription can be paused', v_sub.id, v_sub.status,
                             CASE WHEN v_sub.cancel_at_period_end THEN ' and cancels at period end' ELSE '' END),
            HINT = CASE v_sub.status WHEN 'TRIALING' THEN 'Cancel the trial instead.'
                                     WHEN 'PAST_DUE' THEN 'Pay the invoice in dunning first.'
                                     WHEN 'CANCELED' THEN 'Create a new subscription instead.'
                                     ELSE 'Uncancel it first.' END;
    END IF;
    -- The unused rest of the period, at the price it was billed at, is credited (pending until the
    -- period is paid; reversed if it never is).
    SELECT * INTO v_plan FROM billing.plan WHERE id = v_sub.plan_id;
    v_at := greatest(p_now, v_sub.current_period_start);
    IF v_at = v_sub.current_period_start THEN
        -- Paused at the very start of its period: none of it was served. When none of its invoices
        -- was paid or ever sent to the gateway (all OPEN, no payment attempt), they bill nothing owed:
        -- they are voided, as a cancellation voids them, and nothing is credited (nothing was paid).
        -- Otherwise the customer would owe the whole period to get it back as credit, and a resume
        -- at that instant would bill the same time again at once (a one-day INITIAL and a month,
        -- both billed from the signup).
        SELECT array_agg(i.id ORDER BY i.id),
               bool_and(i.status = 'OPEN' AND i.attempt_count = 0
                        AND NOT EXISTS (SELECT 1 FROM billing.payment_attempt a
                                         WHERE a.customer_id = i.customer_id AND a.invoice_id = i.id))
          INTO v_unserved, v_unpaid
          FROM billing.invoice i
         WHERE i.customer_id = v_sub.customer_id AND i.subscription_id = v_sub.id AND i.status <> 'VOID'
           AND i.period_start >= v_sub.current_period_start AND i.period_end = v_sub.current_period_end;
    END IF;
    IF v_unpaid THEN
        PERFORM billing._void_invoices(v_sub.customer_id, v_unserved, p_now);
    ELSE
        -- From what the customer kept of the period (refunds lower it), capped by _grant_change_credit.
        v_credit := -billing.proration_amount(billing._period_credit_base(v_sub, v_sub.period_price), 0,
                                              v_sub.current_period_start, v_sub.current_period_end, v_at);
        PERFORM billing._grant_change_credit(v_sub, v_plan.currency, v_credit, p_now);
    END IF;
    v_before := v_sub;
    UPDATE billing.subscription
       SET status = 'PAUSED', paused_at = p_now, resume_at = p_resume_at, version = version + 1, updated_at = p_now
     WHERE customer_id = v_sub.customer_id AND id = v_sub.id
    RETURNING * INTO v_sub;
    PERFORM billing._emit_subscription_change(v_before, v_sub, p_now);
    RETURN v_sub;
END
$$;
COMMENT ON FUNCTION billing.pause_subscription(bigint, timestamptz, timestamptz) IS
'First settles what was due on it and not yet processed by the renewal job (a passed resume date, a trial''s end, renewals, a cancellation at period end), each at its own instant. Pauses an ACTIVE subscription now: nothing is billed while PAUSED; the unused rest of the current period is credited at the price it was billed at (pending until paid; paused at the very start of its period whose invoices were neither paid nor ever charged, they are voided instead); resumes by itself at p_resume_at if given (a PAUSED one only gets its resume date changed). SubscriptionUpdated + SubscriptionPaused.
Returns the subscription; BL404 absent; BL422 for a resume date not after p_now, or a subscription TRIALING, PAST_DUE, CANCELED or cancelling at period end.';

CREATE OR REPLACE FUNCTION billing.resume_subscription(p_subscription_id bigint, p_now timestamptz DEFAULT now())
RETURNS billing.subscription
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_sub billing.subscription;
BEGIN
    PERFORM billing._audit('resume_subscription', jsonb_build_object('subscription_id', p_subscription_id, 'now', p_now));
    PERFORM billing._check_now(p_now);
    v_sub := billing._lock_subscription(p_subscription_id);
    IF v_sub.status = 'CANCELED' THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('subscription %s is canceled; it cannot resume', v_sub.id),
            HINT = 'reactivate_subscription brings back one canceled by dunning; otherwise create a new subscription.';
    END IF;
    IF v_sub.status <> 'PAUSED' THEN
        RETURN v_sub;  -- not paused: nothing to do
    END IF;
    -- A resume date already passed (the job not yet run): it resumed then, not now (the time since
    -- is served and billed); later periods due are renewed.
    IF v_sub.resume_at <= p_now THEN
        RETURN billing._settle_due(v_sub, p_now);
    END IF;
    RETURN billing._resume(v_sub, p_now, p_now);
END
$$;
COMMENT ON FUNCTION billing.resume_subscription(bigint, timestamptz) IS
'First settles what was due and not yet processed (a resume date already passed: it resumed then, and later periods are renewed). Resumes a PAUSED subscription now: a new period starts at p_now (new anchor; calendar plans end it on the billing day, prorated), billed at once; a scheduled plan change applies. SubscriptionUpdated + SubscriptionResumed. Not paused: unchanged.
Returns the subscription; BL404 absent, BL422 canceled.';

CREATE OR REPLACE FUNCTION billing.uncancel_subscription(p_subscription_id bigint, p_now timestamptz DEFAULT now())
RETURNS billing.subscription
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_sub    billing.subscription;
    v_before billing.subscription;
BEGIN
    PERFORM billing._audit('uncancel_subscription', jsonb_build_object('subscription_id', p_subscription_id, 'now', p_now));
    PERFORM billing._check_now(p_now);
    v_sub := billing._lock_subscription(p_subscription_id);
    -- What was due is settled first: a period end already passed (the renewal job not yet run) has
    -- ended it, too late to withdraw.
    v_sub := billing._settle_due(v_sub, p_now);
    IF v_sub.status = 'CANCELED' THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('subscription %s is canceled (%s); there is no pending cancellation to withdraw',
                             v_sub.id, v_sub.cancel_reason),
            HINT = 'reactivate_subscription brings back one canceled by dunning; otherwise create a new subscription.';
    END IF;
    IF NOT v_sub.cancel_at_period_end THEN
        RETURN v_sub;
    END IF;
    v_before := v_sub;
    UPDATE billing.subscription SET cancel_at_period_end = false, version = version + 1, updated_at = p_now
     WHERE customer_id = v_sub.customer_id AND id = v_sub.id
    RETURNING * INTO v_sub;
    PERFORM billing._emit_subscription_change(v_before, v_sub, p_now);
    RETURN v_sub;
END
$$;
COMMENT ON FUNCTION billing.uncancel_subscription(bigint, timestamptz) IS
'First settles what was due on it and not yet processed by the renewal job (a passed resume date, a trial''s end, renewals, a cancellation at period end), each at its own instant. Withdraws a pending cancellation at period end (SubscriptionUpdated: cancelAtPeriodEnd true -> false); nothing pending: unchanged.
Returns the subscription; BL404 absent, BL422 when it is canceled already (its period end passed included).';

CREATE OR REPLACE FUNCTION billing.reactivate_subscription(p_subscription_id bigint, p_now timestamptz DEFAULT now())
RETURNS billing.subscription
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_sub    billing.subscription;
    v_before billing.subscription;
    v_plan   billing.plan;
    v_unpaid bigint[];
BEGIN
    PERFORM billing._audit('reactivate_subscription', jsonb_build_object('subscription_id', p_subscription_id, 'now', p_now));
    PERFORM billing._check_now(p_now);
    v_sub := billing._lock_subscription(p_subscription_id);
    IF v_sub.status <> 'CANCELED' THEN
        RETURN v_sub;  -- live already: nothing to do
    END IF;
    IF v_sub.cancel_reason IS DISTINCT FROM 'DUNNING_EXHAUSTED' THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('subscription %s was canceled (%s), not by dunning', v_sub.id, v_sub.cancel_reason),
            HINT = 'Only a subscription canceled by dunning is reactivated; create a new subscription instead.';
    END IF;
    IF p_now < v_sub.canceled_at THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('p_now %s is before the cancellation %s', p_now, v_sub.canceled_at);
    END IF;
    -- The customer must owe nothing on it any more: an invoice still in dunning (OPEN) or in
    -- REVIEW is paid first. (The written-off one is FAILED: docs/lifecycle.md.)
    SELECT array_agg(id ORDER BY id) INTO v_unpaid FROM billing.invoice
     WHERE customer_id = v_sub.customer_id AND subscription_id = v_sub.id AND status IN ('OPEN', 'REVIEW');
    IF v_unpaid IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'BL409',
            MESSAGE = format('subscription %s still has unpaid invoices %s', v_sub.id, v_unpaid),
            HINT = 'They are paid (or settled) first.';
    END IF;
    -- A customer who pays with stored payment methods (docs/providers.md) must have added one since
    -- the cancellation: the one dunning wore out is not tried again. One charged without stored
    -- methods (the simulator's customers) needs only to owe nothing.
    IF EXISTS (SELECT 1 FROM billing.payment_method m WHERE m.customer_id = v_sub.customer_id)
       AND NOT EXISTS (SELECT 1 FROM billing.payment_method m
                        WHERE m.customer_id = v_sub.customer_id AND m.status = 'ACTIVE'
                          AND m.created_at > v_sub.canceled_at) THEN
        RAISE EXCEPTION USING ERRCODE = 'BL409',
            MESSAGE = format('subscription %s was canceled by dunning at %s and no payment method was added since',
                             v_sub.id, v_sub.canceled_at),
            HINT = 'Add a payment method (set_payment_method) first.';
    END IF;
    SELECT * INTO v_plan FROM billing.plan WHERE id = v_sub.plan_id;
    v_before := v_sub;
    v_sub := billing._start_period(v_sub, v_plan, p_now, 'RENEWAL', p_now);
    PERFORM billing._emit_subscription_change(v_before, v_sub, p_now);
    RETURN v_sub;
END
$$;
COMMENT ON FUNCTION billing.reactivate_subscription(bigint, timestamptz) IS
'Brings back a subscription canceled by dunning (DUNNING_EXHAUSTED) once nothing of it is unpaid and, for a customer with stored payment methods, a new one was added since the cancellation: ACTIVE, a new period from p_now on its plan (new anchor), billed at once (SubscriptionUpdated status CANCELED -> ACTIVE). A live subscription: unchanged.
Returns the subscription; BL404 absent, BL422 canceled otherwise than by dunning or p_now before the cancellation, BL409 while an invoice of it is OPEN or in REVIEW, or without a payment method added since.';

CREATE OR REPLACE FUNCTION billing.set_quantity(p_subscription_id bigint, p_quantity integer, p_now timestamptz DEFAULT now())
RETURNS billing.subscription
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_sub      billing.subscription;
    v_before   billing.subscription;
    v_plan     billing.plan;
    v_at       timestamptz;
    v_unit     bigint;
    v_delta    bigint;
    v_new_pp   bigint;
    v_amount   bigint;
    v_start    timestamptz;
BEGIN
    PERFORM billing._audit('set_quantity', jsonb_build_object('subscription_id', p_subscription_id, 'quantity', p_quantity, 'now', p_now));
    PERFORM billing._check_now(p_now);
    PERFORM billing._check_between('quantity', p_quantity, 1, 1000000);
    v_sub := billing._lock_subscription(p_subscription_id);
    IF v_sub.status = 'CANCELED' THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('subscription %s is canceled; its seats cannot change', v_sub.id);
    END IF;
    IF v_sub.quantity = p_quantity THEN
        RETURN v_sub;
    END IF;
    -- What was due is settled first (a resume, a trial's end, renewals at the seats in force then).
    v_sub := billing._settle_due(v_sub, p_now, 'its seats cannot change');
    v_before := v_sub;
    IF v_sub.status IN ('TRIALING', 'PAUSED') THEN
        -- Nothing is being billed: the seats count from the next billed period.
        UPDATE billing.subscription SET quantity = p_quantity, version = version + 1, updated_at = p_now
         WHERE customer_id = v_sub.customer_id AND id = v_sub.id
        RETURNING * INTO v_sub;
        PERFORM billing._emit_subscription_change(v_before, v_sub, p_now);
        RETURN v_sub;
    END IF;

    v_before := v_sub;
    -- Like a plan change: the period's price moves by the seats added or removed (at the unit price
    -- of the period, its share for a first calendar period), and the rest of the period is
    -- prorated against the price it was billed at. Removed seats never credit more than billed.
    SELECT * INTO v_plan FROM billing.plan WHERE id = v_sub.plan_id;
    v_at := greatest(p_now, v_sub.current_period_start);
    v_unit := billing._price_at(v_plan, v_sub.current_period_start);
    v_delta := billing._period_charge(v_unit, abs(p_quantity - v_sub.quantity), v_sub.current_period_start,
                                      v_sub.current_period_end, billing._nominal_start(v_sub, v_plan));
    v_new_pp := greatest(0, v_sub.period_price + sign(p_quantity - v_sub.quantity)::bigint * v_delta);
    v_amount := billing.proration_amount(v_sub.period_price, v_new_pp, v_sub.current_period_start,
                                         v_sub.current_period_end, v_at);
    IF v_amount > 0 THEN
        SELECT greatest(v_at, max(period_start) + interval '1 microsecond') INTO v_start
          FROM billing.invoice
         WHERE customer_id = v_sub.customer_id AND subscription_id = v_sub.id AND kind = 'PRORATION' AND period_start >= v_at;
        v_start := coalesce(v_start, v_at);
        UPDATE billing.subscription SET quantity = p_quantity WHERE customer_id = v_sub.customer_id AND id = v_sub.id RETURNING * INTO v_sub;
        IF v_start < v_sub.current_period_end THEN
            PERFORM billing._new_invoice(v_sub, 'PRORATION', v_start, v_sub.current_period_end, v_amount,
                                         v_plan, v_unit, p_now, v_plan.id, v_before.period_price, 0, NULL,
                                         v_before.quantity);
        END IF;
    ELSIF v_amount < 0 THEN
        -- Seats removed: credit from what the customer kept of the period (refunds lower it),
        -- capped by _grant_change_credit at what the period has not given back.
        v_amount := billing.proration_amount(billing._period_credit_base(v_sub, v_sub.period_price), v_new_pp,
                                             v_sub.current_period_start, v_sub.current_period_end, v_at);
        PERFORM billing._grant_change_credit(v_sub, v_plan.currency, -v_amount, p_now);
    END IF;
    UPDATE billing.subscription
       SET quantity = p_quantity, period_price = v_new_pp, version = version + 1, updated_at = p_now
     WHERE customer_id = v_sub.customer_id AND id = v_sub.id
    RETURNING * INTO v_sub;
    PERFORM billing._emit_subscription_change(v_before, v_sub, p_now);
    RETURN v_sub;
END
$$;
COMMENT ON FUNCTION billing.set_quantity(bigint, integer, timestamptz) IS
'First settles what was due on it and not yet processed by the renewal job (a passed resume date, a trial''s end, renewals, a cancellation at period end), each at its own instant. Sets the seats: every later period is billed price x quantity; the current one is prorated like a plan change (an OPEN PRORATION invoice for seats added, credit, pending until paid, for seats removed). TRIALING or PAUSED: no proration. SubscriptionUpdated (quantity).
Returns the subscription; BL404 absent, BL422 canceled or quantity outside 1..1000000.';

CREATE OR REPLACE FUNCTION billing.set_trial_will_end_notice(p_notice interval)
RETURNS interval
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM billing._audit('set_trial_will_end_notice', jsonb_build_object('notice', p_notice));
    IF p_notice IS NULL OR p_notice < interval '0' OR p_notice > interval '30 days' THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('the trial notice must be between 0 and 30 days, got %s', coalesce(p_notice::text, 'NULL'));
    END IF;
    UPDATE billing.database_setting SET trial_will_end_notice = p_notice, updated_at = now();
    RETURN p_notice;
END
$$;
COMMENT ON FUNCTION billing.set_trial_will_end_notice(interval) IS
'How long before a trial ends SubscriptionTrialWillEnd is announced (default 3 days), for trials started afterwards.
Returns the new value; BL422 outside [0, 30 days].';
