-- 35_lifecycle: trials, coupons, pause and resume, uncancel, reactivation, seats, scheduled plan
-- changes and calendar billing (docs/lifecycle.md has the rules and the choices made).
-- Every mutation locks the subscription row first (then its invoices, then a coupon row), the
-- order of the renewal and payment paths, and bumps version. The money rules of docs/money.md hold
-- on every path: a credit comes only from a period billed (and is pending until it is paid), a
-- discount never takes an invoice below zero, and a pause credits only the unused, paid time.
-- Re-applied after every migration: CREATE OR REPLACE only.
--
-- This file: starting a billed period and the lifecycle's renewal of one subscription (trials,
-- pauses, scheduled changes); the calendar is 33_calendar.sql, coupons 34_coupons.sql, the API
-- (pause, resume, uncancel, reactivate, seats) 36_lifecycle_api.sql.

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
    v_disc := billing._line_discount(p_sub, p_plan, v_list, v_list, v_start, v_first.period_end, true, p_now);
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
    PERFORM billing._usage_touch(v_sub.customer_id, v_sub.id, p_now);  -- a period starts: usage rated to here (72_usage_rating)
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
        -- Its unpaid invoices bill time served (the whole period): they stay owed (issue 26 #3).
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
        v_disc := billing._line_discount(v_sub, v_plan, v_list, v_list, v_sub.current_period_end, v_end, true, p_now);
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

-- The per-row part of create_due_invoices on a single PostgreSQL: trial notices, resumes at their
-- date, and due renewals that need _renew_one. Each query claims with SKIP LOCKED, like the renewal
-- statement. (On Citus create_due_invoices takes _renew_rows and renew_in_shard its own claims.)
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
    FOR v_sub IN
        SELECT * FROM billing.subscription
         WHERE billing._due_trial_notice(status, trial_notice_at, p_now)
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
             WHERE billing._due_resume(status, resume_at, p_now)
             ORDER BY resume_at, id LIMIT p_batch_size
               FOR NO KEY UPDATE SKIP LOCKED
        ), renewing AS MATERIALIZED (
            SELECT * FROM billing.subscription
             WHERE billing._due_lifecycle(status, current_period_end, lifecycle_pending, p_now)
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

-- _renew_lifecycle_rows (its form on Citus) could never run: create_due_invoices takes _renew_rows
-- there first, and renew_in_shard claims per group. Removed.
DROP FUNCTION IF EXISTS billing._renew_lifecycle_rows(integer, timestamptz);

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
