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

    INSERT INTO billing.subscription (customer_id, plan_id, status, timezone, billing_anchor, period_number,
                                      current_period_start, current_period_end, updated_at)
    VALUES (p_customer_id, v_plan.id, 'ACTIVE', v_tz, p_now, 1,
            p_now, billing._period_end(p_now, v_plan.billing_interval, v_plan.interval_count, 1, v_tz), p_now)
    RETURNING * INTO v_sub;

    UPDATE billing.subscription_request SET subscription_id = v_sub.id WHERE idempotency_key = p_idempotency_key;
    PERFORM billing._emit_event('subscription', v_sub.id, 'SubscriptionCreated', billing._subscription_data(v_sub), p_now);

    PERFORM billing._new_invoice(v_sub, 'INITIAL', v_sub.current_period_start, v_sub.current_period_end,
                                 v_plan.price_amount, v_plan.currency, p_now);
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
'Cancels now (CANCELED, OPEN invoices VOID, event SubscriptionCanceled) or flags it to cancel at period end; repeating is harmless.
Returns the subscription; BL404 when absent, BL409 when p_expected_version is stale.';

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
    v_change_at timestamptz;
    v_amount    bigint;
    v_start     timestamptz;
    v_reanchor  boolean;
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
    IF p_now < v_sub.current_period_start THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('change instant %s is before the current period start %s', p_now, v_sub.current_period_start);
    END IF;

    -- An overdue subscription (renewal not yet run) has nothing left of its period to prorate.
    v_change_at := least(p_now, v_sub.current_period_end);
    v_amount := billing.proration_amount(v_old.price_amount, v_new.price_amount,
                                         v_sub.current_period_start, v_sub.current_period_end, v_change_at);

    IF v_amount > 0 THEN
        -- Several changes may happen within one period, each its own PRORATION invoice keyed by
        -- the change instant; two changes at the very same instant move the second by 1 us.
        SELECT greatest(v_change_at, max(period_start) + interval '1 microsecond') INTO v_start
          FROM billing.invoice
         WHERE subscription_id = v_sub.id AND kind = 'PRORATION' AND period_start >= v_change_at;
        v_start := coalesce(v_start, v_change_at);
        IF v_start < v_sub.current_period_end THEN
            PERFORM billing._new_invoice(v_sub, 'PRORATION', v_start, v_sub.current_period_end,
                                         v_amount, v_new.currency, p_now);
        END IF;
    ELSIF v_amount < 0 THEN
        PERFORM billing._grant_credit(v_sub.customer_id, v_new.currency, -v_amount, 'PRORATION', v_sub.id, NULL, p_now);
    END IF;

    -- A different period length restarts the calendar at the end of the current period.
    v_reanchor := (v_new.billing_interval, v_new.interval_count) IS DISTINCT FROM (v_old.billing_interval, v_old.interval_count);
    v_before := v_sub;
    UPDATE billing.subscription
       SET plan_id = v_new.id,
           billing_anchor = CASE WHEN v_reanchor THEN current_period_end ELSE billing_anchor END,
           period_number = CASE WHEN v_reanchor THEN 0 ELSE period_number END,
           version = version + 1,
           updated_at = p_now
     WHERE id = v_sub.id
    RETURNING * INTO v_sub;
    PERFORM billing._emit_subscription_change(v_before, v_sub, p_now);
    RETURN v_sub;
END
$$;
COMMENT ON FUNCTION billing.change_plan(bigint, text, timestamptz, bigint) IS
'Switches the plan now: positive proration becomes an OPEN PRORATION invoice due now, negative a customer credit; next renewal bills the new plan.
Returns the subscription; BL404 absent, BL409 stale version, BL422 unknown plan, other currency or canceled subscription.';
