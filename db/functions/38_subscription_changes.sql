-- 38_subscription_changes: cancellation and plan changes (one subscription at a time), split from
-- 30_subscriptions (signup and reading). Every mutation locks the subscription row first (then its
-- invoices), the same order as the renewal and payment paths, and bumps version.

-- ---------------------------------------------------------------------------------------------
-- Private helpers
-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION billing._check_version(p_sub billing.subscription, p_expected_version bigint)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    IF p_expected_version IS NOT NULL AND p_expected_version <> p_sub.version THEN
        RAISE EXCEPTION USING ERRCODE = 'BL409',
            MESSAGE = format('subscription %s is at version %s, not %s', p_sub.id, p_sub.version, p_expected_version),
            HINT = 'Read the subscription again and retry with its current version.';
    END IF;
END
$$;
COMMENT ON FUNCTION billing._check_version(billing.subscription, bigint) IS
'Private: optimistic lock check.
Returns nothing; BL409 when p_expected_version is given and differs from the row''s version.';

-- ---------------------------------------------------------------------------------------------
-- API
-- ---------------------------------------------------------------------------------------------
DROP FUNCTION IF EXISTS billing.cancel_subscription(bigint, boolean, timestamptz, bigint);
CREATE OR REPLACE FUNCTION billing.cancel_subscription(
    p_subscription_id bigint, p_at_period_end boolean, p_now timestamptz DEFAULT now(),
    p_expected_version bigint DEFAULT NULL, p_proration text DEFAULT 'none')
RETURNS billing.subscription
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_sub    billing.subscription;
    v_before billing.subscription;
BEGIN
    PERFORM billing._audit('cancel_subscription', jsonb_build_object('subscription_id', p_subscription_id, 'at_period_end', p_at_period_end, 'now', p_now, 'expected_version', p_expected_version, 'proration', p_proration));
    PERFORM billing._check_now(p_now);
    PERFORM billing._check_one_of('proration', p_proration, ARRAY['none', 'credit', 'refund'],
                                  'Use none (nothing given back), credit or refund (the unused paid time).');
    IF p_at_period_end AND p_proration <> 'none' THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = 'a cancellation at period end leaves no unused time: p_proration is none',
            HINT = 'p_proration credit or refund is for a cancellation now.';
    END IF;
    IF p_at_period_end IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = 'p_at_period_end must be true or false';
    END IF;
    v_sub := billing._lock_subscription(p_subscription_id);
    IF v_sub.status = 'CANCELED' THEN
        RETURN v_sub;  -- already final: repeating a cancel is harmless
    END IF;
    PERFORM billing._check_version(v_sub, p_expected_version);
    -- What was due and not yet processed is settled first, at its own instant: a cancellation at
    -- period end decided after a period began ends that period, not the one before (which would
    -- leave the time since unbilled); one whose period end passed has ended it already.
    v_sub := billing._settle_due(v_sub, p_now);
    IF v_sub.status = 'CANCELED' THEN
        RETURN v_sub;
    END IF;

    IF p_at_period_end THEN
        IF v_sub.cancel_at_period_end THEN
            RETURN v_sub;
        END IF;
        IF v_sub.status = 'PAUSED' THEN
            RAISE EXCEPTION USING ERRCODE = 'BL422',
                MESSAGE = format('subscription %s is paused: it has no period end to cancel at', v_sub.id),
                HINT = 'Cancel it now, or resume it first.';
        END IF;
        v_before := v_sub;
        UPDATE billing.subscription
           SET cancel_at_period_end = true, version = version + 1, updated_at = p_now
         WHERE customer_id = v_sub.customer_id AND id = v_sub.id
        RETURNING * INTO v_sub;
        PERFORM billing._emit_subscription_change(v_before, v_sub, p_now);
        RETURN v_sub;
    END IF;

    -- The unused paid time, as p_proration says (17_ledger), read before the invoices never declined
    -- are voided (their lines then bill nothing) and the subscription ends.
    v_before := v_sub;
    UPDATE billing.subscription
       SET status = 'CANCELED', canceled_at = p_now, cancel_reason = 'REQUESTED',
           version = version + 1, updated_at = p_now
     WHERE customer_id = v_sub.customer_id AND id = v_sub.id
    RETURNING * INTO v_sub;
    PERFORM billing._usage_touch(v_sub.customer_id, v_sub.id, p_now);  -- its usage is rated to here (72_usage_rating)
    -- Unpaid is unpaid (issue 26 #3, #12): the unpaid invoices bill the time served, the rest is
    -- taken off with a credit note (17_ledger); then the unused paid time as p_proration says.
    PERFORM billing._bill_served(v_sub, greatest(p_now, v_before.current_period_start), p_now);
    PERFORM billing._cancel_unused(v_before, greatest(p_now, v_before.current_period_start), p_proration, p_now);
    PERFORM billing._emit_event('subscription', v_sub.id, 'SubscriptionCanceled', billing._subscription_data(v_sub), p_now);
    RETURN v_sub;
END
$$;
COMMENT ON FUNCTION billing.cancel_subscription(bigint, boolean, timestamptz, bigint, text) IS
'First settles what was due on it and not yet processed by the renewal job (a passed resume date, a trial''s end, renewals, a cancellation at period end), each at its own instant. Cancels now (CANCELED, event SubscriptionCanceled; its unpaid invoices bill the time served and only the rest is taken off, with an UNSERVED credit note (one none of whose time was served, never declined, is voided); the unused paid time per p_proration: none, credit to the balance, or refund of the charges that paid it, capped at what the period kept) or flags it to cancel at period end; repeating is harmless.
Returns the subscription; BL404 when absent, BL409 when p_expected_version is stale, BL422 at period end for a PAUSED one, for an unknown p_proration or one other than none at period end.';

-- Renews a locked subscription, one period at a time, until its current period contains p_now,
-- at the terms in force when each period starts (its plan, and that plan's price then), or cancels
-- it at its period end if so flagged: what create_due_invoices would have done, for one row. A plan
-- change calls it first, so that periods already due are never billed at the new plan.
CREATE OR REPLACE FUNCTION billing._catch_up(p_sub billing.subscription, p_now timestamptz)
RETURNS billing.subscription
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_sub billing.subscription := p_sub;
BEGIN
    WHILE billing._due_renewal(v_sub.status, v_sub.current_period_end, p_now) LOOP
        v_sub := billing._renew_one(v_sub, p_now);
    END LOOP;
    RETURN v_sub;
END
$$;
COMMENT ON FUNCTION billing._catch_up(billing.subscription, timestamptz) IS
'Private: renews the locked subscription period by period (each at the terms in force when it starts, through _renew_one: trial end, scheduled change, coupon) until its period contains p_now, or cancels it at period end if flagged.
Returns the subscription as it is then.';

DROP FUNCTION IF EXISTS billing.change_plan(bigint, text, timestamptz, bigint);
CREATE OR REPLACE FUNCTION billing.change_plan(
    p_subscription_id bigint, p_plan_code text, p_now timestamptz DEFAULT now(),
    p_expected_version bigint DEFAULT NULL, p_when text DEFAULT 'now', p_prorate boolean DEFAULT true)
RETURNS billing.subscription
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_sub       billing.subscription;
    v_old       billing.plan;
    v_new       billing.plan;
    v_from      billing.plan;
    v_superseded billing.invoice;
    v_from_price bigint;
    v_new_price bigint;
    v_unit      bigint;
    v_change_at timestamptz;
    v_amount    bigint;
    v_start     timestamptz;
    v_before    billing.subscription;
    v_unused    record;
BEGIN
    PERFORM billing._audit('change_plan', jsonb_build_object('subscription_id', p_subscription_id, 'plan_code', p_plan_code, 'now', p_now, 'expected_version', p_expected_version, 'when', p_when, 'prorate', p_prorate));
    PERFORM billing._check_now(p_now);
    PERFORM billing._check_one_of('change time', p_when, ARRAY['now', 'period_end'], 'Use now or period_end.');
    IF p_prorate IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = 'p_prorate must be true or false';
    END IF;
    IF p_when = 'period_end' AND NOT p_prorate THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = 'a change at period end is never prorated: leave p_prorate true',
            HINT = 'p_prorate false is for a change now.';
    END IF;
    v_sub := billing._lock_subscription(p_subscription_id);
    IF v_sub.status = 'CANCELED' THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('subscription %s is canceled; its plan cannot change', v_sub.id),
            HINT = 'Create a new subscription instead.';
    END IF;
    PERFORM billing._check_version(v_sub, p_expected_version);
    -- What was due and not yet processed (a resume, a trial's end, renewals) is settled first, at its
    -- own instant: a change never chooses the terms of a period already begun.
    v_sub := billing._settle_due(v_sub, p_now, 'its plan cannot change');

    PERFORM billing._lock_plan_offered(p_plan_code);  -- (an archive in flight waited for; it waits for this)
    SELECT * INTO v_new FROM billing.plan WHERE code = p_plan_code;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = format('unknown plan %L', p_plan_code),
            HINT = 'Create the plan with upsert_plan first.';
    END IF;
    SELECT * INTO v_old FROM billing.plan WHERE id = v_sub.plan_id;
    IF v_new.id <> v_old.id THEN  -- back to the current plan (withdrawing a scheduled change) is always allowed
        PERFORM billing._check_plan_offered(v_new);
    END IF;
    IF v_new.currency <> v_old.currency THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('plan %s is billed in %s but subscription %s is billed in %s',
                             v_new.code, v_new.currency, v_sub.id, v_old.currency),
            HINT = 'Choose a plan in the same currency, or cancel and subscribe again.';
    END IF;

    IF v_new.id = v_old.id THEN
        -- Back to the current plan: withdraws a scheduled change, if any; nothing else to do.
        IF v_sub.scheduled_plan_id IS NULL THEN
            RETURN v_sub;
        END IF;
        v_before := v_sub;
        UPDATE billing.subscription SET scheduled_plan_id = NULL, version = version + 1, updated_at = p_now
         WHERE customer_id = v_sub.customer_id AND id = v_sub.id
        RETURNING * INTO v_sub;
        UPDATE billing.subscription SET lifecycle_pending = billing._needs_lifecycle(v_sub) WHERE customer_id = v_sub.customer_id AND id = v_sub.id
        RETURNING * INTO v_sub;
        PERFORM billing._emit_subscription_change(v_before, v_sub, p_now);
        RETURN v_sub;
    END IF;
    -- Usage rated in arrears (72_usage_rating): a subscription leaving or joining a plan with usage
    -- charges is followed by the rating from now on (its time on each plan rated at that plan's).
    IF EXISTS (SELECT 1 FROM billing.plan_charge c WHERE c.plan_id IN (v_old.id, v_new.id)) THEN
        PERFORM billing._usage_follow(v_sub.customer_id, v_sub.id, p_now);
    END IF;

    IF p_when = 'period_end' THEN
        -- Takes effect at the renewal (or at the trial's end, or when a pause ends): the new
        -- plan bills the next period, nothing is prorated, nothing credited.
        IF v_sub.scheduled_plan_id IS NOT DISTINCT FROM v_new.id THEN
            RETURN v_sub;
        END IF;
        v_before := v_sub;
        UPDATE billing.subscription
           SET scheduled_plan_id = v_new.id, lifecycle_pending = true, version = version + 1, updated_at = p_now
         WHERE customer_id = v_sub.customer_id AND id = v_sub.id
        RETURNING * INTO v_sub;
        PERFORM billing._emit_subscription_change(v_before, v_sub, p_now);
        RETURN v_sub;
    END IF;

    IF v_sub.status IN ('TRIALING', 'PAUSED') THEN
        -- Nothing is being billed: the plan switches, its price counts from the next billed period.
        v_before := v_sub;
        UPDATE billing.subscription
           SET plan_id = v_new.id, scheduled_plan_id = NULL, version = version + 1, updated_at = p_now
         WHERE customer_id = v_sub.customer_id AND id = v_sub.id
        RETURNING * INTO v_sub;
        UPDATE billing.subscription SET lifecycle_pending = billing._needs_lifecycle(v_sub) WHERE customer_id = v_sub.customer_id AND id = v_sub.id
        RETURNING * INTO v_sub;
        PERFORM billing._emit_subscription_change(v_before, v_sub, p_now);
        RETURN v_sub;
    END IF;

    -- (Periods already due were billed above, by _settle_due, at the plan they were due under.)
    -- A change now replaces a change scheduled for the period end.
    IF v_sub.scheduled_plan_id IS NOT NULL THEN
        UPDATE billing.subscription SET scheduled_plan_id = NULL WHERE customer_id = v_sub.customer_id AND id = v_sub.id RETURNING * INTO v_sub;
        UPDATE billing.subscription SET lifecycle_pending = billing._needs_lifecycle(v_sub) WHERE customer_id = v_sub.customer_id AND id = v_sub.id
        RETURNING * INTO v_sub;
    END IF;
    SELECT * INTO v_old FROM billing.plan WHERE id = v_sub.plan_id;
    IF v_new.id = v_old.id THEN
        -- Catching up applied a scheduled change to this very plan.
        RETURN v_sub;
    END IF;
    -- Decided on the row as locked: a renewal that committed while we waited has moved the period
    -- on, and the change then applies from that period's start.
    v_change_at := greatest(p_now, v_sub.current_period_start);

    -- Unpaid is unpaid: an earlier change of this period still unpaid (waiting for a payment
    -- method, in its first attempt or in dunning) is never voided by this one: it bills the time it
    -- served, and this change reverses the unused part of the lines in force, its lines included.
    v_from := v_old;
    v_from_price := v_sub.period_price;

    IF (v_new.billing_interval, v_new.interval_count, v_new.billing_day)
       IS NOT DISTINCT FROM (v_from.billing_interval, v_from.interval_count, v_from.billing_day) THEN
        -- Same period length, read from the lines (16_ledger): the unused part of the lines in force
        -- is reversed at their own net, discount and tax, and the rest of the period is sold on the
        -- new plan (times the seats; its share of a first calendar period; the coupon if it covers
        -- the plan): an OPEN PRORATION invoice when that costs more, else credit. Without proration
        -- the plan switches and the period keeps the lines and price billed.
        v_unit := billing._price_at(v_new, v_sub.current_period_start);
        v_new_price := billing._period_charge(v_unit, v_sub.quantity, v_sub.current_period_start,
                                              v_sub.current_period_end, billing._nominal_start(v_sub, v_old));
        IF NOT p_prorate THEN
            v_new_price := v_sub.period_price;
        ELSE
            PERFORM billing._prorate_change(v_sub, v_new, v_unit, v_new_price, v_change_at, p_now, v_old.id,
                                            v_sub.period_price, v_sub.quantity);
            v_new_price := v_new_price - (billing._line_discount(v_sub, v_new, v_new_price, v_new_price,
                                                                 v_sub.current_period_start, v_sub.current_period_end,
                                                                 false, p_now)).discount;
        END IF;
        v_before := v_sub;
        UPDATE billing.subscription
           SET plan_id = v_new.id, period_price = v_new_price, version = version + 1, updated_at = p_now
         WHERE customer_id = v_sub.customer_id AND id = v_sub.id
        RETURNING * INTO v_sub;
        PERFORM billing._emit_subscription_change(v_before, v_sub, p_now);
        RETURN v_sub;
    END IF;

    -- Another period length: a new period starts now at the new plan's price (calendar plans: to
    -- the billing day, prorated), and the unused rest of the current period (at the price it was
    -- invoiced at) is credited against it; without proration nothing is credited.
    SELECT greatest(v_change_at, max(period_start) + interval '1 microsecond') INTO v_start
      FROM billing.invoice
     WHERE customer_id = v_sub.customer_id AND subscription_id = v_sub.id AND kind = 'PLAN_CHANGE' AND period_start >= v_change_at;
    v_start := coalesce(v_start, v_change_at);
    IF p_prorate THEN
        -- The unused part of the lines in force is reversed (16_ledger) and credited from what the
        -- customer kept of the period, tax included.
        v_change_at := least(v_start, v_sub.current_period_end);
        PERFORM billing._retax_unfinalized(v_sub, v_change_at, p_now);
        v_unused := billing._unused_total(v_sub, v_change_at);
        PERFORM billing._reverse_unused(v_sub, v_change_at, NULL, billing._period_unpaid(v_sub), p_now);
        PERFORM billing._grant_change_credit(v_sub, v_new.currency,
                                             billing._period_credit_base(v_sub, v_unused.net + v_unused.tax_exclusive), p_now);
    ELSE
        -- Without proration the rest of the old period ends unused and nothing is given back: its
        -- lines are reversed at 0 (the time is not sold twice).
        PERFORM billing._reverse_unused(v_sub, least(v_start, v_sub.current_period_end), NULL,
                                        billing._period_unpaid(v_sub), p_now, true);
    END IF;
    v_before := v_sub;
    v_sub := billing._start_period(v_sub, v_new, v_start, 'PLAN_CHANGE', p_now, v_from.id, v_from_price);
    PERFORM billing._emit_subscription_change(v_before, v_sub, p_now);
    RETURN v_sub;
END
$$;
COMMENT ON FUNCTION billing.change_plan(bigint, text, timestamptz, bigint, text, boolean) IS
'First settles what was due on it and not yet processed by the renewal job (a passed resume date, a trial''s end, renewals, a cancellation at period end), each at its own instant. Switches the plan now (after billing any overdue period at its own terms) or, p_when = period_end, at the next renewal (no proration, no credit; changing to the current plan withdraws it). Now, same period length: the rest of the period is prorated against the price it was invoiced at, times the seats (an OPEN PRORATION invoice, or credit that waits until the period is paid); p_prorate false switches without invoice or credit. Another length: a new period starts now (a PLAN_CHANGE invoice) and the unused rest of the current one is credited (unless p_prorate is false). An unpaid earlier change of the period, never declined, is superseded (voided). TRIALING or PAUSED: the plan switches without proration.
Returns the subscription; BL404 absent, BL409 stale version, BL422 unknown or archived plan (the current one is always allowed) or change time, other currency, canceled subscription, or p_prorate false at period end.';
