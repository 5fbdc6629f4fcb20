-- 30_subscriptions: signup and reading (one subscription at a time); cancellation and plan changes
-- are in 38_subscription_changes. Every mutation locks the subscription row first (then its
-- invoices), the same order as the renewal and payment paths, and bumps version.

-- ---------------------------------------------------------------------------------------------
-- API
-- ---------------------------------------------------------------------------------------------
DROP FUNCTION IF EXISTS billing.create_subscription(text, bigint, text, timestamptz);
DROP FUNCTION IF EXISTS billing.create_subscription(text, bigint, text, timestamptz, integer, text, integer);
CREATE OR REPLACE FUNCTION billing.create_subscription(
    p_idempotency_key text, p_customer_id bigint, p_plan_code text, p_now timestamptz DEFAULT now(),
    p_trial_days integer DEFAULT 0, p_coupon_code text DEFAULT NULL, p_quantity integer DEFAULT 1,
    p_external_id text DEFAULT NULL)
RETURNS billing.subscription
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_request billing.subscription_request;
    v_options jsonb;
    v_plan    billing.plan;
    v_tz      text;
    v_price   bigint;
    v_first   record;
    v_list    bigint;
    v_disc    record;
    v_trial_end timestamptz;
    v_notice  interval;
    v_sub     billing.subscription;
    v_fast    boolean;
    v_known   boolean;
    v_id      bigint;
    v_anchor  timestamptz;
    v_number  integer;
    v_end     timestamptz;
    v_tax     record;
BEGIN
    PERFORM billing._audit('create_subscription', jsonb_build_object('idempotency_key', p_idempotency_key, 'customer_id', p_customer_id, 'plan_code', p_plan_code, 'now', p_now, 'trial_days', p_trial_days, 'coupon_code', p_coupon_code, 'quantity', p_quantity, 'external_id', p_external_id));
    -- The plan code's lock, shared (_lock_plan_offered: an archive in flight is waited for, and one
    -- waits for this signup; adv11), in a statement before any that reads the plan (its snapshot then
    -- sees an archive committed meanwhile); beside the clock's check, not a statement of its own.
    PERFORM billing._check_now(p_now), billing._lock_plan_offered(p_plan_code);
    -- The checks' functions are called only to refuse (their wording): a call costs more than the test.
    IF p_idempotency_key IS NULL OR length(p_idempotency_key) > 255 OR btrim(p_idempotency_key) = '' THEN
        PERFORM billing._check_text('an idempotency key', p_idempotency_key, 255);
    END IF;
    IF p_customer_id IS NULL OR p_customer_id < 1 THEN
        PERFORM billing._check_customer_id(p_customer_id);
    END IF;
    IF p_trial_days IS NULL OR p_trial_days NOT BETWEEN 0 AND 730 THEN
        PERFORM billing._check_between('trial days', p_trial_days, 0, 730);
    END IF;
    IF p_quantity IS NULL OR p_quantity NOT BETWEEN 1 AND 1000000 THEN
        PERFORM billing._check_between('quantity', p_quantity, 1, 1000000);
    END IF;
    IF p_external_id IS NOT NULL THEN
        PERFORM billing._check_external_id(p_external_id);
    END IF;
    v_options := jsonb_build_object('trialDays', p_trial_days, 'couponCode', p_coupon_code, 'quantity', p_quantity);
    IF p_external_id IS NOT NULL THEN  -- (absent otherwise: keys stored before external ids compare equal)
        v_options := v_options || jsonb_build_object('externalId', p_external_id);
    END IF;

    <<attempt>>
    LOOP  -- at most twice: a concurrent first use of the same key makes us replay it
        -- The customer's own request under this key first: a request's key is unique per customer
        -- (subscription_request_pkey); two first uses of one key for two customers at once both
        -- succeed, and each one's retry must replay its own subscription, not be refused with the
        -- other's (a client told 409 for its own signup may sign up again: charged twice; review6)
        SELECT * INTO v_request FROM billing.subscription_request WHERE idempotency_key = p_idempotency_key
         ORDER BY customer_id = p_customer_id DESC LIMIT 1;
        IF FOUND THEN
            IF v_request.customer_id IS DISTINCT FROM p_customer_id OR v_request.plan_code IS DISTINCT FROM p_plan_code
               OR v_request.options IS DISTINCT FROM v_options THEN
                RAISE EXCEPTION USING ERRCODE = 'BL409',
                    MESSAGE = format('idempotency key %L was already used for customer %s and plan %s (%s)',
                                     p_idempotency_key, v_request.customer_id, v_request.plan_code, v_request.options),
                    HINT = 'Use a new idempotency key for a different request.';
            END IF;
            SELECT * INTO v_sub FROM billing.subscription
             WHERE customer_id = v_request.customer_id AND id = v_request.subscription_id;
            RETURN v_sub;
        END IF;

        SELECT * INTO v_plan FROM billing.plan WHERE code = p_plan_code;  -- (its code locked above)
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'BL422',
                MESSAGE = format('unknown plan %L', p_plan_code),
                HINT = 'Create the plan with upsert_plan first.';
        END IF;
        IF v_plan.archived_at IS NOT NULL THEN
            PERFORM billing._check_plan_offered(v_plan);
        END IF;

        -- The usual signup (no coupon, no credit in the plan's currency, one PostgreSQL): its request,
        -- subscription, INITIAL invoice, CHARGE line and events in one statement, as
        -- create_subscriptions (31_signups) writes them in bulk; the same rows and events as the
        -- general path below (310_signups compares them column by column). A key taken meanwhile
        -- replays (the next turn of the loop) or refuses, as below.
        IF v_fast IS NULL THEN
            -- The customer before the key on both paths (one lock order: two first uses of one key
            -- for one new customer wait on the customer, never on each other crosswise).
            INSERT INTO billing.customer (id) VALUES (p_customer_id)
            ON CONFLICT ON CONSTRAINT customer_pkey DO NOTHING
            RETURNING timezone INTO v_tz;
            v_known := NOT FOUND;
            IF v_known THEN
                SELECT c.timezone INTO v_tz FROM billing.customer c WHERE c.id = p_customer_id;
            END IF;
            v_fast := p_coupon_code IS NULL AND NOT billing._distributed('billing.subscription')
                      AND NOT (v_known AND EXISTS (SELECT 1 FROM billing.credit_balance b
                                                   WHERE b.customer_id = p_customer_id AND b.currency = v_plan.currency
                                                     AND b.balance > 0));
            -- An external id already taken: refused by the general path, before any invoice is made.
            IF p_external_id IS NOT NULL AND v_fast THEN
                v_fast := NOT EXISTS (SELECT 1 FROM billing.external_ref r
                                       WHERE r.object_type = 'subscription' AND r.external_id = p_external_id);
            END IF;
        END IF;
        IF v_fast THEN
            IF p_trial_days > 0 THEN  -- (as the trial below)
                v_trial_end := billing._period_end(p_now, 'DAY', p_trial_days, 1, v_tz);
                SELECT s.trial_will_end_notice INTO v_notice FROM billing.database_setting s;
                v_anchor := p_now;
                v_number := 1;
                v_end := v_trial_end;
                v_list := 0;
                SELECT 0::bigint AS tax_amount, 0::bigint AS tax_included, NULL::jsonb AS tax_detail INTO v_tax;
            ELSE
                v_first := billing._first_period(v_plan, v_tz, p_now);
                v_anchor := v_first.anchor;
                v_number := v_first.period_number;
                v_end := v_first.period_end;
                v_price := billing._price_at(v_plan, p_now);
                v_list := billing._period_charge(v_price, p_quantity, p_now, v_first.period_end, v_first.nominal_start);
                v_tax := billing._invoice_tax_row(p_customer_id, v_list);
            END IF;
            v_id := nextval('billing.subscription_id_seq'::regclass);
            WITH requested AS (
                INSERT INTO billing.subscription_request (idempotency_key, customer_id, plan_code, options, subscription_id)
                VALUES (p_idempotency_key, p_customer_id, p_plan_code, v_options, v_id)
                ON CONFLICT ON CONSTRAINT subscription_request_pkey DO NOTHING
                RETURNING 1
            ), sub AS (
                INSERT INTO billing.subscription (id, customer_id, plan_id, status, timezone, billing_anchor, period_number,
                                                  current_period_start, current_period_end, period_price, quantity,
                                                  trial_end, trial_notice_at, lifecycle_pending, updated_at, external_id)
                SELECT v_id, p_customer_id, v_plan.id, CASE WHEN p_trial_days > 0 THEN 'TRIALING' ELSE 'ACTIVE' END, v_tz,
                       v_anchor, v_number, p_now, v_end, v_list, p_quantity,
                       v_trial_end,
                       CASE WHEN p_trial_days > 0 THEN greatest(p_now, v_trial_end - coalesce(v_notice, interval '3 days')) END,
                       p_trial_days > 0, p_now, p_external_id
                  FROM requested
                RETURNING *
            ), invoiced AS (
                -- _new_invoice without credit or discount: the taxes on the list price, PAID when nothing is owed.
                INSERT INTO billing.invoice (subscription_id, customer_id, kind, period_start, period_end, subtotal, credit_applied,
                                             amount, currency, status, due_at, next_attempt_at, paid_at, created_at,
                                             plan_id, plan_price, billing_interval, interval_count, quantity, discount_amount,
                                             tax_amount, tax_included, tax_detail)
                SELECT s.id, s.customer_id, 'INITIAL', s.current_period_start, s.current_period_end, v_list, 0,
                       v_list + v_tax.tax_amount, v_plan.currency,
                       CASE WHEN v_list + v_tax.tax_amount = 0 THEN 'PAID' ELSE 'OPEN' END, p_now,
                       CASE WHEN v_list + v_tax.tax_amount = 0 THEN NULL ELSE p_now END,
                       CASE WHEN v_list + v_tax.tax_amount = 0 THEN p_now END, p_now,
                       v_plan.id, v_price, v_plan.billing_interval, v_plan.interval_count, s.quantity, 0,
                       v_tax.tax_amount, v_tax.tax_included, v_tax.tax_detail
                  FROM sub s
                 WHERE s.status = 'ACTIVE'
                RETURNING *
            ), lines AS (
                -- _charge_line's CHARGE line of the period.
                INSERT INTO billing.service_line (customer_id, subscription_id, invoice_id, kind, item, plan_id, quantity, unit_price,
                                                  span_start, span_end, gross, discount, coupon_code, net, tax, tax_inclusive,
                                                  currency, depends_on, basis_start, basis_gross, basis_net, created_at)
                SELECT i.customer_id, i.subscription_id, i.id, 'CHARGE', 'PLAN', i.plan_id, i.quantity, i.plan_price,
                       i.period_start, i.period_end, i.subtotal, 0, NULL, i.subtotal, i.tax_amount + i.tax_included,
                       i.tax_included > 0, i.currency, NULL, i.period_start, i.subtotal, i.subtotal, p_now
                  FROM invoiced i
                 WHERE i.period_start < i.period_end
            ), announced AS (
                -- SubscriptionCreated (_subscription_data of the row as inserted, written out), then
                -- InvoiceCreated (and InvoicePaid when nothing is owed): one INSERT, ids in that order.
                INSERT INTO billing.outbox_event (event_id, aggregate_type, aggregate_id, event_type, payload, created_at,
                                                  available_at, customer_id)
                SELECT e.event_id, e.aggregate_type, e.aggregate_id, e.event_type,
                       billing._cloud_event(e.event_id, e.event_type, e.aggregate_type, e.aggregate_id, p_now, e.data),
                       p_now, p_now, p_customer_id
                  FROM (SELECT gen_random_uuid() AS event_id, x.*
                          FROM (SELECT 0 AS seq, 'subscription' AS aggregate_type, s.id AS aggregate_id,
                                       'SubscriptionCreated' AS event_type, jsonb_build_object(  -- (keys in jsonb's order)
                                    'reason', s.cancel_reason, 'status', s.status, 'version', s.version,
                                    'pausedAt', billing._utc_text(s.paused_at), 'planCode', v_plan.code, 'quantity', s.quantity,
                                    'resumeAt', billing._utc_text(s.resume_at), 'trialEnd', billing._utc_text(s.trial_end),
                                    'canceledAt', billing._utc_text(s.canceled_at), 'couponCode', s.coupon_code,
                                    'customerId', s.customer_id, 'subscriptionId', s.id,
                                    'currentPeriodEnd', billing._utc_text(s.current_period_end),
                                    'cancelAtPeriodEnd', s.cancel_at_period_end, 'scheduledPlanCode', NULL,
                                    'currentPeriodStart', billing._utc_text(s.current_period_start)) AS data
                                  FROM sub s
                                UNION ALL
                                SELECT 1, 'invoice', i.id, 'InvoiceCreated', billing._invoice_data(i::billing.invoice)
                                  FROM invoiced i
                                UNION ALL
                                SELECT 2, 'invoice', i.id, 'InvoicePaid', billing._invoice_data(i::billing.invoice)
                                  FROM invoiced i
                                 WHERE i.status = 'PAID') x
                         ORDER BY x.seq) e
            )
            SELECT * INTO v_sub FROM sub;
            IF FOUND THEN
                IF p_external_id IS NOT NULL THEN
                    PERFORM billing._claim_external_id('subscription', p_external_id, p_customer_id, v_sub.id, p_now);
                END IF;
                RETURN v_sub;
            END IF;
            CONTINUE attempt;  -- the key was taken meanwhile: replay it (or refuse)
        END IF;

        INSERT INTO billing.subscription_request (idempotency_key, customer_id, plan_code, options)
        VALUES (p_idempotency_key, p_customer_id, p_plan_code, v_options)
        ON CONFLICT ON CONSTRAINT subscription_request_pkey DO NOTHING;
        EXIT attempt WHEN FOUND;
    END LOOP;

    INSERT INTO billing.customer (id) VALUES (p_customer_id)
    ON CONFLICT ON CONSTRAINT customer_pkey DO NOTHING;
    SELECT timezone INTO v_tz FROM billing.customer WHERE id = p_customer_id;

    IF p_trial_days > 0 THEN
        -- A trial: nothing billed until it ends (p_trial_days local days later); the first billed
        -- period starts then (_renew_one).
        v_trial_end := billing._period_end(p_now, 'DAY', p_trial_days, 1, v_tz);
        SELECT s.trial_will_end_notice INTO v_notice FROM billing.database_setting s;
        INSERT INTO billing.subscription (customer_id, plan_id, status, timezone, billing_anchor, period_number,
                                          current_period_start, current_period_end, period_price, quantity,
                                          trial_end, trial_notice_at, lifecycle_pending, updated_at, external_id)
        VALUES (p_customer_id, v_plan.id, 'TRIALING', v_tz, p_now, 1, p_now, v_trial_end, 0, p_quantity,
                v_trial_end, greatest(p_now, v_trial_end - coalesce(v_notice, interval '3 days')), true, p_now, p_external_id)
        RETURNING * INTO v_sub;
    ELSE
        v_first := billing._first_period(v_plan, v_tz, p_now);
        v_price := billing._price_at(v_plan, p_now);
        v_list := billing._period_charge(v_price, p_quantity, p_now, v_first.period_end, v_first.nominal_start);
        INSERT INTO billing.subscription (customer_id, plan_id, status, timezone, billing_anchor, period_number,
                                          current_period_start, current_period_end, period_price, quantity, updated_at,
                                          external_id)
        VALUES (p_customer_id, v_plan.id, 'ACTIVE', v_tz, v_first.anchor, v_first.period_number,
                p_now, v_first.period_end, v_list, p_quantity, p_now, p_external_id)
        RETURNING * INTO v_sub;
    END IF;

    UPDATE billing.subscription_request SET subscription_id = v_sub.id
     WHERE customer_id = p_customer_id AND idempotency_key = p_idempotency_key;
    IF p_external_id IS NOT NULL THEN
        PERFORM billing._claim_external_id('subscription', p_external_id, p_customer_id, v_sub.id, p_now);
    END IF;
    IF p_coupon_code IS NOT NULL THEN
        PERFORM billing._redeem_coupon(v_sub, p_coupon_code, p_now);
        SELECT * INTO v_sub FROM billing.subscription WHERE customer_id = v_sub.customer_id AND id = v_sub.id;
    END IF;
    -- billing._subscription_data(v_sub), written out with the plan's code at hand (no read, no call;
    -- 310_signups checks the events equal _subscription_data's).
    PERFORM billing._emit_event('subscription', v_sub.id, 'SubscriptionCreated', jsonb_build_object(
        'subscriptionId', v_sub.id, 'customerId', v_sub.customer_id, 'planCode', v_plan.code, 'status', v_sub.status,
        'currentPeriodStart', billing._utc_text(v_sub.current_period_start),
        'currentPeriodEnd', billing._utc_text(v_sub.current_period_end),
        'canceledAt', billing._utc_text(v_sub.canceled_at), 'reason', v_sub.cancel_reason,
        'cancelAtPeriodEnd', v_sub.cancel_at_period_end, 'version', v_sub.version, 'quantity', v_sub.quantity,
        'trialEnd', billing._utc_text(v_sub.trial_end), 'pausedAt', billing._utc_text(v_sub.paused_at),
        'resumeAt', billing._utc_text(v_sub.resume_at),
        'scheduledPlanCode', CASE WHEN v_sub.scheduled_plan_id IS NOT NULL THEN billing.plan_code(v_sub.scheduled_plan_id) END,
        'couponCode', v_sub.coupon_code), p_now);

    IF v_sub.status = 'ACTIVE' AND v_sub.coupon_code IS NULL THEN
        -- No coupon: no discount, and nothing for the per-row renewal path (lifecycle_pending stays
        -- false, as _needs_lifecycle says of an ACTIVE row without coupon or scheduled change); the
        -- row is final as inserted.
        PERFORM billing._new_invoice(v_sub, 'INITIAL', v_sub.current_period_start, v_sub.current_period_end,
                                     v_list, v_plan, v_price, p_now, NULL, NULL, 0, NULL);
    ELSIF v_sub.status = 'ACTIVE' THEN
        v_disc := billing._line_discount(v_sub, v_plan, v_list, v_list, v_sub.current_period_start,
                                         v_sub.current_period_end, true, p_now);
        UPDATE billing.subscription SET period_price = v_list - v_disc.discount WHERE customer_id = v_sub.customer_id AND id = v_sub.id
        RETURNING * INTO v_sub;
        UPDATE billing.subscription SET lifecycle_pending = billing._needs_lifecycle(v_sub) WHERE customer_id = v_sub.customer_id AND id = v_sub.id
        RETURNING * INTO v_sub;
        PERFORM billing._new_invoice(v_sub, 'INITIAL', v_sub.current_period_start, v_sub.current_period_end,
                                     v_list - v_disc.discount, v_plan, v_price, p_now, NULL, NULL,
                                     v_disc.discount, v_disc.coupon_code);
    END IF;
    RETURN v_sub;
END
$$;
COMMENT ON FUNCTION billing.create_subscription(text, bigint, text, timestamptz, integer, text, integer, text) IS
'New subscription of p_quantity seats: ACTIVE for [p_now, next boundary) with an OPEN INITIAL invoice due at p_now (calendar plans: the first period ends on the billing day, prorated), or TRIALING for p_trial_days local days with no invoice until the trial ends; p_coupon_code is redeemed at once (its first discount on the first invoice); p_external_id (optional) is the caller''s own id of it (21_external_ids). Unknown customers are created in UTC.
Returns the subscription (the same row when the key is replayed; created_at = now() tells a new one); BL409 for a key reused with other parameters, a coupon used up or an external id already naming another subscription, BL422 for a customer id below 1, an unknown or archived plan, a bad or archived coupon, trial days outside 0..730, quantity outside 1..1000000 or a malformed external id.';

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
