-- 30_subscriptions: signup, reading, cancellation and plan changes (one subscription at a time).
-- Every mutation locks the subscription row first (then its invoices), the same order as the
-- renewal and payment paths, and bumps version.

-- ---------------------------------------------------------------------------------------------
-- Private helpers
-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION billing._lock_subscription(p_subscription_id bigint)
RETURNS billing.subscription
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_sub billing.subscription;
BEGIN
    SELECT * INTO v_sub FROM billing.subscription WHERE id = p_subscription_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'BL404',
            MESSAGE = format('subscription %s does not exist', coalesce(p_subscription_id::text, 'NULL'));
    END IF;
    RETURN v_sub;
END
$$;
COMMENT ON FUNCTION billing._lock_subscription(bigint) IS
'Private: locks the subscription row FOR UPDATE.
Returns it; BL404 when absent.';

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

CREATE OR REPLACE FUNCTION billing._invoice_data(p_invoice billing.invoice)
RETURNS jsonb
LANGUAGE sql IMMUTABLE
AS $$
    SELECT pg_catalog.jsonb_build_object(
        'invoiceId', p_invoice.id,
        'subscriptionId', p_invoice.subscription_id,
        'customerId', p_invoice.customer_id,
        'kind', p_invoice.kind,
        'status', p_invoice.status,
        'periodStart', billing._utc_text(p_invoice.period_start),
        'periodEnd', billing._utc_text(p_invoice.period_end),
        'subtotal', p_invoice.subtotal,
        'creditApplied', p_invoice.credit_applied,
        'amount', p_invoice.amount,
        'currency', p_invoice.currency,
        'attemptCount', p_invoice.attempt_count,
        'paidAt', billing._utc_text(p_invoice.paid_at),
        'gatewayReference', p_invoice.gateway_reference)
$$;
COMMENT ON FUNCTION billing._invoice_data(billing.invoice) IS
'Private: the "data" of invoice events (amounts as integers in the smallest unit, instants in UTC).
Returns a jsonb object.';

CREATE OR REPLACE FUNCTION billing._subscription_data(p_sub billing.subscription)
RETURNS jsonb
LANGUAGE sql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
    SELECT jsonb_build_object(
        'subscriptionId', p_sub.id,
        'customerId', p_sub.customer_id,
        'planCode', (SELECT code FROM billing.plan WHERE id = p_sub.plan_id),
        'status', p_sub.status,
        'currentPeriodStart', billing._utc_text(p_sub.current_period_start),
        'currentPeriodEnd', billing._utc_text(p_sub.current_period_end),
        'canceledAt', billing._utc_text(p_sub.canceled_at),
        'reason', p_sub.cancel_reason,
        'version', p_sub.version)
$$;
COMMENT ON FUNCTION billing._subscription_data(billing.subscription) IS
'Private: the "data" of subscription events.
Returns a jsonb object.';

CREATE OR REPLACE FUNCTION billing._grant_credit(
    p_customer_id bigint, p_currency char(3), p_amount bigint, p_reason text,
    p_subscription_id bigint, p_invoice_id bigint, p_now timestamptz)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    IF p_amount <= 0 THEN
        RETURN;
    END IF;
    INSERT INTO billing.credit_entry (customer_id, currency, amount, reason, subscription_id, invoice_id, created_at)
    VALUES (p_customer_id, p_currency, p_amount, p_reason, p_subscription_id, p_invoice_id, p_now);
    INSERT INTO billing.credit_balance AS b (customer_id, currency, balance, updated_at)
    VALUES (p_customer_id, p_currency, p_amount, p_now)
    ON CONFLICT ON CONSTRAINT credit_balance_pkey DO UPDATE
        SET balance = b.balance + excluded.balance, updated_at = excluded.updated_at;
END
$$;
COMMENT ON FUNCTION billing._grant_credit(bigint, char, bigint, text, bigint, bigint, timestamptz) IS
'Private: adds p_amount of credit to the ledger and the balance (nothing when p_amount <= 0).
Returns nothing.';

-- Inserts one invoice, consuming the customer's credit first; an invoice the credit covers
-- entirely is PAID at once, announced, and never charged.
CREATE OR REPLACE FUNCTION billing._new_invoice(
    p_sub billing.subscription, p_kind text, p_period_start timestamptz, p_period_end timestamptz,
    p_subtotal bigint, p_currency char(3), p_now timestamptz)
RETURNS billing.invoice
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_balance bigint;
    v_applied bigint := 0;
    v_invoice billing.invoice;
BEGIN
    SELECT balance INTO v_balance FROM billing.credit_balance
     WHERE customer_id = p_sub.customer_id AND currency = p_currency AND balance > 0
       FOR UPDATE;
    IF FOUND THEN
        v_applied := least(v_balance, p_subtotal);
        UPDATE billing.credit_balance SET balance = balance - v_applied, updated_at = p_now
         WHERE customer_id = p_sub.customer_id AND currency = p_currency;
    END IF;

    INSERT INTO billing.invoice (subscription_id, customer_id, kind, period_start, period_end, subtotal, credit_applied,
                                 amount, currency, status, due_at, next_attempt_at, paid_at, created_at)
    VALUES (p_sub.id, p_sub.customer_id, p_kind, p_period_start, p_period_end, p_subtotal, v_applied,
            p_subtotal - v_applied, p_currency,
            CASE WHEN p_subtotal - v_applied = 0 THEN 'PAID' ELSE 'OPEN' END, p_now,
            CASE WHEN p_subtotal - v_applied = 0 THEN NULL ELSE p_now END,
            CASE WHEN p_subtotal - v_applied = 0 THEN p_now END, p_now)
    RETURNING * INTO v_invoice;

    IF v_applied > 0 THEN
        INSERT INTO billing.credit_entry (customer_id, currency, amount, reason, subscription_id, invoice_id, created_at)
        VALUES (p_sub.customer_id, p_currency, -v_applied, 'APPLIED', p_sub.id, v_invoice.id, p_now);
    END IF;
    IF v_invoice.status = 'PAID' THEN
        PERFORM billing._emit_event('invoice', v_invoice.id, 'InvoicePaid', billing._invoice_data(v_invoice), p_now);
    END IF;
    RETURN v_invoice;
END
$$;
COMMENT ON FUNCTION billing._new_invoice(billing.subscription, text, timestamptz, timestamptz, bigint, char, timestamptz) IS
'Private: inserts one invoice due at p_now after consuming the customer''s credit (PAID and announced when credit covers it).
Returns the invoice.';

-- Voids the OPEN invoices of the given (locked) subscriptions and gives back the credit they had
-- consumed. Set-based: used by cancel_subscription, dunning exhaustion and the renewal job.
CREATE OR REPLACE FUNCTION billing._void_open_invoices(p_subscription_ids bigint[], p_now timestamptz)
RETURNS integer
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_count integer;
BEGIN
    IF p_subscription_ids IS NULL OR cardinality(p_subscription_ids) = 0 THEN
        RETURN 0;
    END IF;
    WITH voided AS (
        UPDATE billing.invoice
           SET status = 'VOID', next_attempt_at = NULL, closed_at = p_now
         WHERE subscription_id = ANY (p_subscription_ids) AND status = 'OPEN'
        RETURNING id, subscription_id, customer_id, currency, credit_applied
    ), ledger AS (
        INSERT INTO billing.credit_entry (customer_id, currency, amount, reason, subscription_id, invoice_id, created_at)
        SELECT customer_id, currency, credit_applied, 'RESTORED', subscription_id, id, p_now
          FROM voided WHERE credit_applied > 0
    ), balance AS (
        INSERT INTO billing.credit_balance AS b (customer_id, currency, balance, updated_at)
        SELECT customer_id, currency, sum(credit_applied), p_now
          FROM voided WHERE credit_applied > 0
         GROUP BY customer_id, currency
        ON CONFLICT ON CONSTRAINT credit_balance_pkey DO UPDATE
            SET balance = b.balance + excluded.balance, updated_at = excluded.updated_at
    )
    SELECT count(*) INTO v_count FROM voided;
    RETURN v_count;
END
$$;
COMMENT ON FUNCTION billing._void_open_invoices(bigint[], timestamptz) IS
'Private: OPEN invoices of the given subscriptions become VOID; credit they consumed goes back to the customer.
Returns how many invoices were voided.';

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
    IF p_idempotency_key IS NULL OR btrim(p_idempotency_key) = '' OR length(p_idempotency_key) > 255 THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = 'an idempotency key of 1 to 255 characters is required';
    END IF;
    IF p_customer_id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = 'customer id is required';
    END IF;
    IF p_now IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = 'p_now must not be NULL';
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
    v_sub billing.subscription;
BEGIN
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
        UPDATE billing.subscription
           SET cancel_at_period_end = true, version = version + 1, updated_at = p_now
         WHERE id = v_sub.id
        RETURNING * INTO v_sub;
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
BEGIN
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
    UPDATE billing.subscription
       SET plan_id = v_new.id,
           billing_anchor = CASE WHEN v_reanchor THEN current_period_end ELSE billing_anchor END,
           period_number = CASE WHEN v_reanchor THEN 0 ELSE period_number END,
           version = version + 1,
           updated_at = p_now
     WHERE id = v_sub.id
    RETURNING * INTO v_sub;
    RETURN v_sub;
END
$$;
COMMENT ON FUNCTION billing.change_plan(bigint, text, timestamptz, bigint) IS
'Switches the plan now: positive proration becomes an OPEN PRORATION invoice due now, negative a customer credit; next renewal bills the new plan.
Returns the subscription; BL404 absent, BL409 stale version, BL422 unknown plan, other currency or canceled subscription.';
