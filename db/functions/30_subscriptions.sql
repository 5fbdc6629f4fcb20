-- 30_subscriptions: signup, reading, cancellation and plan changes (one subscription at a time).
-- Every mutation locks the subscription row first (then its invoices), the same order as the
-- renewal and payment paths, and bumps version.

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
CREATE OR REPLACE FUNCTION billing.create_subscription(
    p_idempotency_key text, p_customer_id bigint, p_plan_code text, p_now timestamptz DEFAULT now())
RETURNS billing.subscription
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_request billing.subscription_request;
    v_plan    billing.plan;
    v_tz      text;
    v_price   bigint;
    v_sub     billing.subscription;
BEGIN
    PERFORM billing._audit('create_subscription', jsonb_build_object('idempotency_key', p_idempotency_key, 'customer_id', p_customer_id, 'plan_code', p_plan_code, 'now', p_now));
    PERFORM billing._check_now(p_now);
    PERFORM billing._check_text('an idempotency key', p_idempotency_key, 255);
    IF p_customer_id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = 'customer id is required';
    END IF;

    <<attempt>>
    LOOP  -- at most twice: a concurrent first use of the same key makes us replay it
        SELECT * INTO v_request FROM billing.subscription_request WHERE idempotency_key = p_idempotency_key;
        IF FOUND THEN
            IF v_request.customer_id IS DISTINCT FROM p_customer_id OR v_request.plan_code IS DISTINCT FROM p_plan_code THEN
                RAISE EXCEPTION USING ERRCODE = 'BL409',
                    MESSAGE = format('idempotency key %L was already used for customer %s and plan %s',
                                     p_idempotency_key, v_request.customer_id, v_request.plan_code),
                    HINT = 'Use a new idempotency key for a different request.';
            END IF;
            SELECT * INTO v_sub FROM billing.subscription WHERE id = v_request.subscription_id;
            RETURN v_sub;
        END IF;

        SELECT * INTO v_plan FROM billing.plan WHERE code = p_plan_code;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'BL422',
                MESSAGE = format('unknown plan %L', p_plan_code),
                HINT = 'Create the plan with upsert_plan first.';
        END IF;

        INSERT INTO billing.subscription_request (idempotency_key, customer_id, plan_code)
        VALUES (p_idempotency_key, p_customer_id, p_plan_code)
        ON CONFLICT ON CONSTRAINT subscription_request_pkey DO NOTHING;
        EXIT attempt WHEN FOUND;
    END LOOP;

    INSERT INTO billing.customer (id) VALUES (p_customer_id)
    ON CONFLICT ON CONSTRAINT customer_pkey DO NOTHING;
    SELECT timezone INTO v_tz FROM billing.customer WHERE id = p_customer_id;

    v_price := billing._price_at(v_plan, p_now);
    INSERT INTO billing.subscription (customer_id, plan_id, status, timezone, billing_anchor, period_number,
                                      current_period_start, current_period_end, period_price, updated_at)
    VALUES (p_customer_id, v_plan.id, 'ACTIVE', v_tz, p_now, 1,
            p_now, billing._period_end(p_now, v_plan.billing_interval, v_plan.interval_count, 1, v_tz), v_price, p_now)
    RETURNING * INTO v_sub;

    UPDATE billing.subscription_request SET subscription_id = v_sub.id WHERE idempotency_key = p_idempotency_key;
    PERFORM billing._emit_event('subscription', v_sub.id, 'SubscriptionCreated', billing._subscription_data(v_sub), p_now);

    PERFORM billing._new_invoice(v_sub, 'INITIAL', v_sub.current_period_start, v_sub.current_period_end,
                                 v_price, v_plan, v_price, p_now);
    RETURN v_sub;
END
$$;
COMMENT ON FUNCTION billing.create_subscription(text, bigint, text, timestamptz) IS
'New ACTIVE subscription for [p_now, next boundary) with an OPEN INITIAL invoice due at p_now; unknown customers are created in UTC.
Returns the subscription (the same row when the key is replayed; created_at = now() tells a new one); BL409 for a key reused with other parameters, BL422 for an unknown plan.';

CREATE OR REPLACE FUNCTION billing.get_subscription(p_subscription_id bigint)
RETURNS billing.subscription
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_sub billing.subscription;
BEGIN
    SELECT * INTO v_sub FROM billing.subscription WHERE id = p_subscription_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'BL404',
            MESSAGE = format('subscription %s does not exist', coalesce(p_subscription_id::text, 'NULL'));
    END IF;
    RETURN v_sub;
END
$$;
COMMENT ON FUNCTION billing.get_subscription(bigint) IS
'Reads one subscription.
Returns the row; BL404 when absent.';

CREATE OR REPLACE FUNCTION billing.cancel_subscription(
    p_subscription_id bigint, p_at_period_end boolean, p_now timestamptz DEFAULT now(),
    p_expected_version bigint DEFAULT NULL)
RETURNS billing.subscription
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_sub    billing.subscription;
    v_before billing.subscription;
BEGIN
    PERFORM billing._audit('cancel_subscription', jsonb_build_object('subscription_id', p_subscription_id, 'at_period_end', p_at_period_end, 'now', p_now, 'expected_version', p_expected_version));
    PERFORM billing._check_now(p_now);
    IF p_at_period_end IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = 'p_at_period_end must be true or false';
    END IF;
    v_sub := billing._lock_subscription(p_subscription_id);
    IF v_sub.status = 'CANCELED' THEN
        RETURN v_sub;  -- already final: repeating a cancel is harmless
    END IF;
    PERFORM billing._check_version(v_sub, p_expected_version);

    IF p_at_period_end THEN
        IF v_sub.cancel_at_period_end THEN
            RETURN v_sub;
        END IF;
        v_before := v_sub;
        UPDATE billing.subscription
           SET cancel_at_period_end = true, version = version + 1, updated_at = p_now
         WHERE id = v_sub.id
        RETURNING * INTO v_sub;
        PERFORM billing._emit_subscription_change(v_before, v_sub, p_now);
        RETURN v_sub;
    END IF;

    UPDATE billing.subscription
       SET status = 'CANCELED', canceled_at = p_now, cancel_reason = 'REQUESTED',
           version = version + 1, updated_at = p_now
     WHERE id = v_sub.id
    RETURNING * INTO v_sub;
    PERFORM billing._void_open_invoices(ARRAY[v_sub.id], p_now);
    PERFORM billing._emit_event('subscription', v_sub.id, 'SubscriptionCanceled', billing._subscription_data(v_sub), p_now);
    RETURN v_sub;
END
$$;
COMMENT ON FUNCTION billing.cancel_subscription(bigint, boolean, timestamptz, bigint) IS
'Cancels now (CANCELED, event SubscriptionCanceled; OPEN invoices never declined become VOID, those in dunning stay OPEN and collectible) or flags it to cancel at period end; repeating is harmless.
Returns the subscription; BL404 when absent, BL409 when p_expected_version is stale.';

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
    v_sub   billing.subscription := p_sub;
    v_plan  billing.plan;
    v_price bigint;
    v_end   timestamptz;
BEGIN
    WHILE v_sub.status <> 'CANCELED' AND v_sub.current_period_end <= p_now LOOP
        IF v_sub.cancel_at_period_end THEN
            UPDATE billing.subscription
               SET status = 'CANCELED', canceled_at = p_now, cancel_reason = 'PERIOD_END',
                   version = version + 1, updated_at = p_now
             WHERE id = v_sub.id
            RETURNING * INTO v_sub;
            PERFORM billing._emit_event('subscription', v_sub.id, 'SubscriptionCanceled', billing._subscription_data(v_sub), p_now);
            PERFORM billing._void_open_invoices(ARRAY[v_sub.id], p_now);
            EXIT;
        END IF;
        SELECT * INTO v_plan FROM billing.plan WHERE id = v_sub.plan_id;
        v_price := billing._price_at(v_plan, v_sub.current_period_end);
        v_end := billing._period_end(v_sub.billing_anchor, v_plan.billing_interval, v_plan.interval_count,
                                     v_sub.period_number + 1, v_sub.timezone);
        PERFORM billing._new_invoice(v_sub, 'RENEWAL', v_sub.current_period_end, v_end, v_price, v_plan, v_price, p_now);
        UPDATE billing.subscription
           SET current_period_start = current_period_end, current_period_end = v_end, period_number = period_number + 1,
               period_price = v_price, version = version + 1, updated_at = p_now
         WHERE id = v_sub.id
        RETURNING * INTO v_sub;
    END LOOP;
    RETURN v_sub;
END
$$;
COMMENT ON FUNCTION billing._catch_up(billing.subscription, timestamptz) IS
'Private: renews the locked subscription period by period (each at the terms in force when it starts) until its period contains p_now, or cancels it at period end if flagged.
Returns the subscription as it is then.';

CREATE OR REPLACE FUNCTION billing.change_plan(
    p_subscription_id bigint, p_plan_code text, p_now timestamptz DEFAULT now(),
    p_expected_version bigint DEFAULT NULL)
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
    v_change_at timestamptz;
    v_amount    bigint;
    v_start     timestamptz;
    v_end       timestamptz;
    v_before    billing.subscription;
BEGIN
    PERFORM billing._audit('change_plan', jsonb_build_object('subscription_id', p_subscription_id, 'plan_code', p_plan_code, 'now', p_now, 'expected_version', p_expected_version));
    PERFORM billing._check_now(p_now);
    v_sub := billing._lock_subscription(p_subscription_id);
    IF v_sub.status = 'CANCELED' THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('subscription %s is canceled; its plan cannot change', v_sub.id),
            HINT = 'Create a new subscription instead.';
    END IF;
    PERFORM billing._check_version(v_sub, p_expected_version);

    SELECT * INTO v_new FROM billing.plan WHERE code = p_plan_code;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = format('unknown plan %L', p_plan_code),
            HINT = 'Create the plan with upsert_plan first.';
    END IF;
    SELECT * INTO v_old FROM billing.plan WHERE id = v_sub.plan_id;
    IF v_new.currency <> v_old.currency THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('plan %s is billed in %s but subscription %s is billed in %s',
                             v_new.code, v_new.currency, v_sub.id, v_old.currency),
            HINT = 'Choose a plan in the same currency, or cancel and subscribe again.';
    END IF;
    IF v_new.id = v_old.id THEN
        RETURN v_sub;  -- nothing to change
    END IF;

    -- Periods already due are billed at the plan they were due under, before the change.
    v_sub := billing._catch_up(v_sub, p_now);
    IF v_sub.status = 'CANCELED' THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('subscription %s ended at its period end %s; its plan cannot change', v_sub.id,
                             v_sub.current_period_end),
            HINT = 'Create a new subscription instead.';
    END IF;
    -- Decided on the row as locked: a renewal that committed while we waited has moved the period
    -- on, and the change then applies from that period's start.
    v_change_at := greatest(p_now, v_sub.current_period_start);

    -- An unpaid plan change of this period, never declined, is superseded: it is voided and the new
    -- change starts from the terms it had replaced (those the customer paid for). One in dunning
    -- bills upgraded time already served: it stays owed, and the change starts from its terms.
    v_from := v_old;
    v_from_price := v_sub.period_price;
    SELECT * INTO v_superseded FROM billing.invoice
     WHERE subscription_id = v_sub.id AND kind = 'PRORATION' AND status = 'OPEN' AND from_plan_id IS NOT NULL
       AND attempt_count = 0 AND period_end = v_sub.current_period_end
     ORDER BY id DESC LIMIT 1
       FOR UPDATE;
    IF FOUND THEN
        UPDATE billing.invoice SET status = 'VOID', next_attempt_at = NULL, closed_at = p_now, waiting_for = NULL
         WHERE id = v_superseded.id
        RETURNING * INTO v_superseded;
        PERFORM billing._emit_event('invoice', v_superseded.id, 'InvoiceVoided', billing._invoice_data(v_superseded), p_now);
        PERFORM billing._restore_credit(v_superseded, p_now);
        PERFORM billing._settle_pending_credit(v_superseded, p_now);
        SELECT * INTO v_from FROM billing.plan WHERE id = v_superseded.from_plan_id;
        v_from_price := v_superseded.from_price;
    END IF;

    IF (v_new.billing_interval, v_new.interval_count) = (v_from.billing_interval, v_from.interval_count) THEN
        -- Same period length: the rest of this period at the new plan's price for it, against the
        -- price this period was invoiced at.
        v_new_price := billing._price_at(v_new, v_sub.current_period_start);
        IF v_new.id = v_from.id THEN
            v_amount := 0;  -- back to the plan paid for
            v_new_price := v_from_price;
        ELSE
            v_amount := billing.proration_amount(v_from_price, v_new_price, v_sub.current_period_start,
                                                 v_sub.current_period_end, v_change_at);
        END IF;
        IF v_amount > 0 THEN
            -- Several changes may happen within one period, each its own PRORATION invoice keyed by
            -- the change instant; two changes at the very same instant move the second by 1 us.
            SELECT greatest(v_change_at, max(period_start) + interval '1 microsecond') INTO v_start
              FROM billing.invoice
             WHERE subscription_id = v_sub.id AND kind = 'PRORATION' AND period_start >= v_change_at;
            v_start := coalesce(v_start, v_change_at);
            IF v_start < v_sub.current_period_end THEN
                PERFORM billing._new_invoice(v_sub, 'PRORATION', v_start, v_sub.current_period_end, v_amount,
                                             v_new, v_new_price, p_now, v_from.id, v_from_price);
            END IF;
        ELSIF v_amount < 0 THEN
            -- Credit for the unused rest, from what the customer kept of the period (refunds
            -- lower it), capped by _grant_change_credit at what the period has not given back.
            v_amount := billing.proration_amount(billing._period_credit_base(v_sub, v_from_price), v_new_price,
                                                 v_sub.current_period_start, v_sub.current_period_end, v_change_at);
            PERFORM billing._grant_change_credit(v_sub, v_new.currency, -v_amount, p_now);
        END IF;
        v_before := v_sub;
        UPDATE billing.subscription
           SET plan_id = v_new.id, period_price = v_new_price, version = version + 1, updated_at = p_now
         WHERE id = v_sub.id
        RETURNING * INTO v_sub;
        PERFORM billing._emit_subscription_change(v_before, v_sub, p_now);
        RETURN v_sub;
    END IF;

    -- Another period length: a new period starts now at the new plan's price, and the unused rest
    -- of the current period (at the price it was invoiced at) is credited against it.
    SELECT greatest(v_change_at, max(period_start) + interval '1 microsecond') INTO v_start
      FROM billing.invoice
     WHERE subscription_id = v_sub.id AND kind = 'PLAN_CHANGE' AND period_start >= v_change_at;
    v_start := coalesce(v_start, v_change_at);
    v_amount := -billing.proration_amount(billing._period_credit_base(v_sub, v_from_price), 0,
                                          v_sub.current_period_start, v_sub.current_period_end,
                                          least(v_start, v_sub.current_period_end));
    v_new_price := billing._price_at(v_new, v_start);
    v_end := billing._period_end(v_start, v_new.billing_interval, v_new.interval_count, 1, v_sub.timezone);
    PERFORM billing._grant_change_credit(v_sub, v_new.currency, v_amount, p_now);
    v_before := v_sub;
    UPDATE billing.subscription
       SET plan_id = v_new.id, billing_anchor = v_start, period_number = 1,
           current_period_start = v_start, current_period_end = v_end, period_price = v_new_price,
           version = version + 1, updated_at = p_now
     WHERE id = v_sub.id
    RETURNING * INTO v_sub;
    PERFORM billing._emit_subscription_change(v_before, v_sub, p_now);
    PERFORM billing._new_invoice(v_sub, 'PLAN_CHANGE', v_start, v_end, v_new_price, v_new, v_new_price, p_now,
                                 v_from.id, v_from_price);
    RETURN v_sub;
END
$$;
COMMENT ON FUNCTION billing.change_plan(bigint, text, timestamptz, bigint) IS
'Switches the plan now (after billing any overdue period at its own terms). Same period length: the rest of the period is prorated against the price it was invoiced at (an OPEN PRORATION invoice, or credit that waits until the period is paid). Another length: a new period starts now (a PLAN_CHANGE invoice) and the unused rest of the current one is credited. An unpaid earlier change of the period, never declined, is superseded (voided).
Returns the subscription; BL404 absent, BL409 stale version, BL422 unknown plan, other currency or canceled subscription.';
