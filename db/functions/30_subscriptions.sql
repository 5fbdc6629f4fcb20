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
    PERFORM billing._check_now(p_now);
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
        SELECT * INTO v_request FROM billing.subscription_request WHERE idempotency_key = p_idempotency_key;
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

        SELECT * INTO v_plan FROM billing.plan WHERE code = p_plan_code;
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
