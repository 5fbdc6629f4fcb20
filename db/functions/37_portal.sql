-- 37_portal (issue 30): the customer portal's SQL API (docs/customers.md, "The portal"). Every
-- function names its customer: a session (opened by a single-use portal link) is bound to one
-- customer, and every read or action here looks its rows up under that customer's id, so another
-- customer's subscription or invoice is "not found" (BL404), never shown or changed. The actions
-- are the operator's own functions (cancel at period end, uncancel, change_plan prorated) with
-- the customer's limits: no cancellation now, no refund, no change without proration, only the
-- plan changes the operator offers (billing.plan_change_option). Re-applied after every
-- migration: CREATE OR REPLACE only. Granted in 90_grants.sql (billing_api; the options to
-- billing_admin).

CREATE OR REPLACE FUNCTION billing.portal_open_session(
    p_customer_id bigint, p_link_hash bytea, p_session_hash bytea, p_ttl interval DEFAULT interval '1 hour',
    p_now timestamptz DEFAULT now())
RETURNS TABLE (customer_id bigint, locale text, expires_at timestamptz)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM billing._check_now(p_now);
    IF p_session_hash IS NULL OR octet_length(p_session_hash) <> 32 THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = 'a portal session is kept as the 32-byte SHA-256 of its token';
    END IF;
    IF p_ttl IS NULL OR p_ttl < interval '5 minutes' OR p_ttl > interval '12 hours' THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = 'a portal session lasts between 5 minutes and 12 hours';
    END IF;
    -- The link, once (BL404 for unknown, used, expired and revoked alike); audited there.
    PERFORM billing.use_portal_link(p_customer_id, p_link_hash, p_now);
    -- Forget this customer's sessions that ended more than a day ago.
    DELETE FROM billing.portal_session s
     WHERE s.customer_id = p_customer_id AND coalesce(s.closed_at, s.expires_at) < p_now - interval '1 day';
    RETURN QUERY
    WITH opened AS (
        INSERT INTO billing.portal_session (customer_id, token_hash, created_at, expires_at)
        VALUES (p_customer_id, p_session_hash, p_now, p_now + p_ttl)
        RETURNING customer_id, expires_at)
    SELECT o.customer_id, c.locale, o.expires_at
      FROM opened o JOIN billing.customer c ON c.id = o.customer_id;
END
$$;
COMMENT ON FUNCTION billing.portal_open_session(bigint, bytea, bytea, interval, timestamptz) IS
'Uses the portal link (its SHA-256 p_link_hash) once and opens a portal session for its customer until p_now + p_ttl (5 minutes..12 hours); only the SHA-256 of the session token is stored.
Returns the customer, its language and the expiry; BL404 when the link is unknown, used, expired or revoked (one answer), BL422 for a bad hash or ttl.';

CREATE OR REPLACE FUNCTION billing.portal_session(p_customer_id bigint, p_session_hash bytea, p_now timestamptz DEFAULT now())
RETURNS TABLE (customer_id bigint, locale text, expires_at timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM billing._check_now(p_now);
    -- plpgsql, not sql: Citus plans a parameterized SQL function's join of two distributed tables
    -- poorly ("could not create distributed plan"); here each query is planned with its values.
    RETURN QUERY
    SELECT s.customer_id, c.locale, s.expires_at
      FROM billing.portal_session s
      JOIN billing.customer c ON c.id = s.customer_id
     WHERE s.customer_id = p_customer_id AND c.id = p_customer_id AND s.token_hash = p_session_hash
       AND s.closed_at IS NULL AND s.expires_at > p_now;
END
$$;
COMMENT ON FUNCTION billing.portal_session(bigint, bytea, timestamptz) IS
'The check of a portal session cookie: the open, unexpired session of customer p_customer_id whose token hashes to p_session_hash.
Returns the customer, its language and the expiry; or no row.';

CREATE OR REPLACE FUNCTION billing.portal_close_session(p_customer_id bigint, p_session_hash bytea, p_now timestamptz DEFAULT now())
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM billing._audit('portal_close_session', jsonb_build_object('customer_id', p_customer_id, 'now', p_now));
    PERFORM billing._check_now(p_now);
    UPDATE billing.portal_session s SET closed_at = p_now
     WHERE s.customer_id = p_customer_id AND s.token_hash = p_session_hash AND s.closed_at IS NULL;
    RETURN FOUND;
END
$$;
COMMENT ON FUNCTION billing.portal_close_session(bigint, bytea, timestamptz) IS
'Logs a portal session out (its token is useless from then on); repeating is harmless.
Returns whether an open session was closed.';

-- The customer's subscription, locked, or BL404 (also for another customer's id: the same answer).
CREATE OR REPLACE FUNCTION billing._portal_subscription(p_customer_id bigint, p_subscription_id bigint)
RETURNS bigint
LANGUAGE plpgsql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM 1 FROM billing.subscription s WHERE s.customer_id = p_customer_id AND s.id = p_subscription_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'BL404',
            MESSAGE = format('subscription %s does not exist', coalesce(p_subscription_id::text, 'NULL'));
    END IF;
    RETURN p_subscription_id;
END
$$;
COMMENT ON FUNCTION billing._portal_subscription(bigint, bigint) IS
'Private: p_subscription_id if it is a subscription of customer p_customer_id.
Returns the id; BL404 otherwise (an id of another customer gets the same answer as one that does not exist).';

CREATE OR REPLACE FUNCTION billing._portal_options(p_plan_id bigint)
RETURNS jsonb
LANGUAGE sql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
    SELECT coalesce(jsonb_agg(jsonb_build_object('plan_code', p.code, 'price_amount', p.price_amount,
                                                 'currency', p.currency, 'billing_interval', p.billing_interval,
                                                 'interval_count', p.interval_count, 'change_at', o.change_at)
                              ORDER BY p.price_amount, p.code), '[]'::jsonb)
      FROM billing.plan_change_option o JOIN billing.plan p ON p.id = o.to_plan_id
     WHERE o.plan_id = p_plan_id
$$;
COMMENT ON FUNCTION billing._portal_options(bigint) IS
'Private: the plans a subscription of plan p_plan_id may move to on the portal, cheapest first.
Returns a JSON array of {plan_code, price_amount, currency, billing_interval, interval_count, change_at}.';

CREATE OR REPLACE FUNCTION billing.portal_home(p_customer_id bigint, p_now timestamptz DEFAULT now())
RETURNS jsonb
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_customer jsonb;
    v_subs     jsonb;
    v_invoices jsonb;
    v_methods  jsonb;
BEGIN
    PERFORM billing._check_now(p_now);
    SELECT jsonb_build_object('id', c.id, 'name', c.name, 'email', c.email, 'locale', c.locale, 'timezone', c.timezone)
      INTO v_customer FROM billing.customer c WHERE c.id = p_customer_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'BL404', MESSAGE = format('customer %s does not exist', coalesce(p_customer_id::text, 'NULL'));
    END IF;
    SELECT coalesce(jsonb_agg(jsonb_build_object(
               'id', s.id, 'status', s.status, 'plan_id', s.plan_id, 'plan_code', p.code, 'price_amount', p.price_amount,
               'currency', p.currency, 'billing_interval', p.billing_interval, 'interval_count', p.interval_count,
               'quantity', s.quantity, 'current_period_start', s.current_period_start,
               'current_period_end', s.current_period_end, 'trial_end', s.trial_end,
               'cancel_at_period_end', s.cancel_at_period_end, 'canceled_at', s.canceled_at,
               'scheduled_plan_code', sp.code, 'version', s.version) ORDER BY s.id), '[]'::jsonb)
      INTO v_subs
      FROM billing.subscription s
      JOIN billing.plan p ON p.id = s.plan_id
      LEFT JOIN billing.plan sp ON sp.id = s.scheduled_plan_id
     WHERE s.customer_id = p_customer_id;
    -- The options per subscription, read apart (plans are reference data: a join in the query above
    -- would still be one shard's, this keeps it simple on both layouts).
    SELECT coalesce(jsonb_agg(e.sub || jsonb_build_object('options',
               CASE WHEN e.sub->>'status' IN ('ACTIVE', 'TRIALING', 'PAST_DUE') AND NOT (e.sub->>'cancel_at_period_end')::boolean
                    THEN billing._portal_options((e.sub->>'plan_id')::bigint) ELSE '[]'::jsonb END)
               ORDER BY (e.sub->>'id')::bigint), '[]'::jsonb)
      INTO v_subs FROM jsonb_array_elements(v_subs) e(sub);
    SELECT coalesce(jsonb_agg(jsonb_build_object(
               'id', i.id, 'number', i.number, 'status', i.status, 'kind', i.kind, 'amount', i.amount,
               'currency', i.currency, 'period_start', i.period_start, 'period_end', i.period_end,
               'created_at', i.created_at, 'paid_at', i.paid_at, 'subscription_id', i.subscription_id,
               'action_required_until', i.action_required_until,
               'has_document', i.number IS NOT NULL) ORDER BY i.created_at DESC, i.id DESC), '[]'::jsonb)
      INTO v_invoices
      FROM (SELECT * FROM billing.invoice i WHERE i.customer_id = p_customer_id
             ORDER BY i.created_at DESC, i.id DESC LIMIT 100) i;
    SELECT coalesce(jsonb_agg(jsonb_build_object(
               'id', m.id, 'provider', m.provider, 'customer_ref', m.customer_ref, 'brand', m.brand, 'last4', m.last4, 'exp_month', m.exp_month,
               'exp_year', m.exp_year, 'is_default', m.is_default, 'status', m.status) ORDER BY m.id), '[]'::jsonb)
      INTO v_methods
      FROM billing.payment_method m
     WHERE m.customer_id = p_customer_id AND m.detached_at IS NULL;
    RETURN jsonb_build_object('customer', v_customer, 'subscriptions', v_subs, 'invoices', v_invoices,
                              'payment_methods', v_methods);
END
$$;
COMMENT ON FUNCTION billing.portal_home(bigint, timestamptz) IS
'What the portal shows a customer: their details, subscriptions (with the plan changes offered to each), latest 100 invoices and payment methods, all read under p_customer_id only.
Returns one JSON document; BL404 for an unknown customer.';

CREATE OR REPLACE FUNCTION billing.portal_invoice_document(p_customer_id bigint, p_invoice_id bigint)
RETURNS jsonb
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM 1 FROM billing.invoice i WHERE i.customer_id = p_customer_id AND i.id = p_invoice_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'BL404', MESSAGE = format('invoice %s does not exist', coalesce(p_invoice_id::text, 'NULL'));
    END IF;
    RETURN billing.get_invoice_document(p_invoice_id);
END
$$;
COMMENT ON FUNCTION billing.portal_invoice_document(bigint, bigint) IS
'The document of an invoice of customer p_customer_id (get_invoice_document).
Returns the JSON document; BL404 for an invoice that is not this customer''s.';

CREATE OR REPLACE FUNCTION billing.portal_cancel(p_customer_id bigint, p_subscription_id bigint, p_now timestamptz DEFAULT now())
RETURNS billing.subscription
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM billing._check_now(p_now);
    -- At period end only: the period the customer paid for runs out, nothing is given back.
    RETURN billing.cancel_subscription(billing._portal_subscription(p_customer_id, p_subscription_id), true, p_now);
END
$$;
COMMENT ON FUNCTION billing.portal_cancel(bigint, bigint, timestamptz) IS
'The customer cancels their subscription at its period end (never now, nothing refunded); repeating is harmless.
Returns the subscription; BL404 when it is not this customer''s, BL422 when paused (cancel_subscription''s rules).';

CREATE OR REPLACE FUNCTION billing.portal_uncancel(p_customer_id bigint, p_subscription_id bigint, p_now timestamptz DEFAULT now())
RETURNS billing.subscription
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM billing._check_now(p_now);
    -- uncancel_subscription settles what was due first: past the period end it is canceled, too late.
    RETURN billing.uncancel_subscription(billing._portal_subscription(p_customer_id, p_subscription_id), p_now);
END
$$;
COMMENT ON FUNCTION billing.portal_uncancel(bigint, bigint, timestamptz) IS
'The customer withdraws their pending cancellation at period end; nothing pending: unchanged.
Returns the subscription; BL404 when it is not this customer''s, BL422 when already canceled (its period end passed included).';

CREATE OR REPLACE FUNCTION billing.portal_change_plan(
    p_customer_id bigint, p_subscription_id bigint, p_plan_code text, p_now timestamptz DEFAULT now())
RETURNS billing.subscription
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_sub    billing.subscription;
    v_to     billing.plan;
    v_option billing.plan_change_option;
BEGIN
    PERFORM billing._audit('portal_change_plan', jsonb_build_object('customer_id', p_customer_id,
        'subscription_id', p_subscription_id, 'plan_code', p_plan_code, 'now', p_now));
    PERFORM billing._check_now(p_now);
    PERFORM billing._portal_subscription(p_customer_id, p_subscription_id);
    v_sub := billing._lock_subscription(p_subscription_id);
    -- What was due is settled first (change_plan would do it next): a change scheduled for a period end
    -- that passed is in force, and the options offered are its plan's, not the plan it replaced (review7).
    v_sub := billing._settle_due(v_sub, p_now, 'its plan cannot change');
    SELECT * INTO v_to FROM billing.plan p WHERE p.code = p_plan_code;
    -- Repeating a change is harmless: already on that plan, or already moving to it at period end.
    IF FOUND AND (v_sub.plan_id = v_to.id AND v_sub.scheduled_plan_id IS NULL OR v_sub.scheduled_plan_id = v_to.id) THEN
        RETURN v_sub;
    END IF;
    SELECT o.* INTO v_option FROM billing.plan_change_option o WHERE o.plan_id = v_sub.plan_id AND o.to_plan_id = v_to.id;
    IF v_to.id IS NULL OR v_option.plan_id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('plan %L is not offered to subscription %s', p_plan_code, p_subscription_id),
            HINT = 'The operator lists the changes a customer may make (set_plan_change_options).';
    END IF;
    -- Always prorated (change_plan's default): a change now bills the difference for the rest of the period.
    RETURN billing.change_plan(v_sub.id, v_to.code, p_now, NULL, v_option.change_at, true);
END
$$;
COMMENT ON FUNCTION billing.portal_change_plan(bigint, bigint, text, timestamptz) IS
'The customer moves their subscription to plan p_plan_code, when the operator offers that change from its plan (now, prorated, or at period end, as the option says); repeating is harmless.
Returns the subscription; BL404 when it is not this customer''s, BL422 for a plan not offered or change_plan''s refusals.';

CREATE OR REPLACE FUNCTION billing.set_plan_change_options(p_plan_code text, p_options jsonb)
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_from billing.plan;
    v_item jsonb;
    v_to   billing.plan;
    v_at   text;
    v_count integer := 0;
BEGIN
    PERFORM billing._audit('set_plan_change_options', jsonb_build_object('plan_code', p_plan_code, 'options', p_options));
    SELECT * INTO v_from FROM billing.plan p WHERE p.code = p_plan_code;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'BL404', MESSAGE = format('unknown plan %L', p_plan_code);
    END IF;
    IF p_options IS NULL OR jsonb_typeof(p_options) <> 'array' THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = 'p_options is a JSON array of {"plan": code, "when": "now" | "period_end"}';
    END IF;
    DELETE FROM billing.plan_change_option o WHERE o.plan_id = v_from.id;
    FOR v_item IN SELECT e FROM jsonb_array_elements(p_options) e LOOP
        SELECT * INTO v_to FROM billing.plan p WHERE p.code = v_item->>'plan';
        IF NOT FOUND OR v_to.id = v_from.id THEN
            RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = format('option %s: not another known plan', v_item);
        END IF;
        IF v_to.currency <> v_from.currency THEN
            RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = format('option %s: plans of another currency cannot be offered', v_item);
        END IF;
        v_at := coalesce(v_item->>'when', 'now');
        PERFORM billing._check_one_of('option''s when', v_at, ARRAY['now', 'period_end'], 'Use now or period_end.');
        INSERT INTO billing.plan_change_option (plan_id, to_plan_id, change_at) VALUES (v_from.id, v_to.id, v_at)
        ON CONFLICT (plan_id, to_plan_id) DO UPDATE SET change_at = EXCLUDED.change_at;
        v_count := v_count + 1;
    END LOOP;
    RETURN v_count;
END
$$;
COMMENT ON FUNCTION billing.set_plan_change_options(text, jsonb) IS
'Replaces the plan changes customers may make on the portal from plan p_plan_code: [{"plan": code, "when": "now" | "period_end"}] (an empty array offers none); same currency only.
Returns how many options the plan now has; BL404 unknown plan, BL422 for a bad option.';
