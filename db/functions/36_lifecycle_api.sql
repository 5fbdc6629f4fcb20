-- 36_lifecycle_api: the lifecycle's API (docs/lifecycle.md): pause and resume, uncancel,
-- reactivation, seats, the trial notice. Every mutation locks the subscription row first (then its
-- invoices), the order of the renewal and payment paths, and bumps version; a pause credits only
-- the unused, paid time (docs/money.md).
-- Re-applied after every migration: CREATE OR REPLACE only.

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
    v_unused   record;
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
        -- The unused part of the lines in force is reversed (16_ledger) at their own net and tax and
        -- credited from what the customer kept of the period (refunds lower it), capped by
        -- _grant_change_credit; pending, like the reversal lines, on the period's unpaid invoices.
        PERFORM billing._retax_unfinalized(v_sub, v_at, p_now);
        v_unused := billing._unused_total(v_sub, v_at);
        PERFORM billing._reverse_unused(v_sub, v_at, NULL, billing._period_unpaid(v_sub), p_now);
        v_credit := billing._period_credit_base(v_sub, v_unused.net + v_unused.tax_exclusive);
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
    PERFORM billing._usage_reopen(v_sub, p_now);  -- a cursor rated to the cancellation is followed again (73_usage_cursor)
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
    -- Read from the lines (16_ledger): the unused part of the lines in force is reversed at their own
    -- net, discount and tax, and the rest of the period is sold at the new seats (with the coupon,
    -- if it covers this plan): an OPEN PRORATION invoice when that costs more, else credit (pending
    -- until the period is paid, capped at what it has not given back).
    SELECT * INTO v_plan FROM billing.plan WHERE id = v_sub.plan_id;
    v_at := greatest(p_now, v_sub.current_period_start);
    v_unit := billing._price_at(v_plan, v_sub.current_period_start);
    v_delta := billing._period_charge(v_unit, p_quantity, v_sub.current_period_start,
                                      v_sub.current_period_end, billing._nominal_start(v_sub, v_plan));
    v_new_pp := v_delta - (billing._line_discount(v_sub, v_plan, v_delta, v_delta, v_sub.current_period_start,
                                                  v_sub.current_period_end, false, p_now)).discount;
    v_start := v_at;  -- (kept for the declarations)
    v_amount := 0;
    v_sub.quantity := p_quantity;
    PERFORM billing._prorate_change(v_sub, v_plan, v_unit, v_delta, v_at, p_now, v_plan.id, v_before.period_price,
                                    v_before.quantity);
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
