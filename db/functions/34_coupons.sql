-- 34_coupons: coupons (docs/lifecycle.md): the discount of one period invoice, a redemption, and
-- the API that defines a coupon and applies it to a subscription. The money rules of docs/money.md
-- hold: a discount never takes an invoice below zero.
-- Re-applied after every migration: CREATE OR REPLACE only.

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

-- A coupon's limit per customer (max_redemptions_per_customer, migration 0830): p_more redemptions
-- by p_customer_id are refused (BL409) when its redemptions of the coupon so far (coupon_redemption
-- rows, replaced and ended ones too: removing a coupon never gives a redemption back) and p_more
-- pass it. Under the customer's row lock (FOR NO KEY UPDATE, taken here and held to the end of the
-- transaction): two redemptions by one customer at once count one after the other, and the second
-- sees the first's row. One customer's shard on Citus.
CREATE OR REPLACE FUNCTION billing._check_customer_redemptions(p_customer_id bigint, p_coupon billing.coupon, p_more bigint)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_used bigint;
BEGIN
    PERFORM 1 FROM billing.customer WHERE id = p_customer_id FOR NO KEY UPDATE;
    SELECT count(*) INTO v_used FROM billing.coupon_redemption
     WHERE customer_id = p_customer_id AND coupon_code = p_coupon.code;
    IF v_used + p_more > p_coupon.max_redemptions_per_customer THEN
        RAISE EXCEPTION USING ERRCODE = 'BL409',
            MESSAGE = format('coupon %s may be redeemed %s time(s) by one customer: customer %s has redeemed it %s time(s)',
                             p_coupon.code, p_coupon.max_redemptions_per_customer, p_customer_id, v_used),
            HINT = 'A redemption replaced or ended still counts; raise the coupon''s max_redemptions_per_customer to allow more.';
    END IF;
END
$$;
COMMENT ON FUNCTION billing._check_customer_redemptions(bigint, billing.coupon, bigint) IS
'Private: locks customer p_customer_id''s row and refuses (BL409) p_more further redemptions of p_coupon past its max_redemptions_per_customer (the customer''s coupon_redemption rows of it, ended ones too).
Returns nothing.';

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
    IF v_coupon.archived_at IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = format('coupon %s is archived', p_code),
            HINT = 'An archived coupon takes no new redemption; the redemptions made continue.';
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

    IF v_coupon.max_redemptions_per_customer IS NOT NULL THEN
        PERFORM billing._check_customer_redemptions(p_sub.customer_id, v_coupon, 1);
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
Returns false when it already is the active coupon; BL422 unknown, archived, expired, other plan or currency; BL409 redeemed before on it, no redemptions left, or none left for this customer (max_redemptions_per_customer).';

-- ---------------------------------------------------------------------------------------------
-- The API: a coupon defined, a coupon applied to a subscription
-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION billing.upsert_coupon(
    p_code text, p_percent_off numeric, p_amount_off bigint, p_currency text, p_duration text,
    p_duration_periods integer DEFAULT NULL, p_max_redemptions integer DEFAULT NULL,
    p_redeem_by timestamptz DEFAULT NULL, p_plan_codes text[] DEFAULT NULL,
    p_max_redemptions_per_customer integer DEFAULT NULL)
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
    PERFORM billing._audit('upsert_coupon', jsonb_build_object('code', p_code, 'percent_off', p_percent_off, 'amount_off', p_amount_off, 'currency', p_currency, 'duration', p_duration, 'duration_periods', p_duration_periods, 'max_redemptions', p_max_redemptions, 'redeem_by', p_redeem_by, 'plan_codes', p_plan_codes, 'max_redemptions_per_customer', p_max_redemptions_per_customer));
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
    IF p_max_redemptions_per_customer IS NOT NULL THEN
        PERFORM billing._check_between(format('coupon %s: max redemptions per customer', p_code), p_max_redemptions_per_customer, 1, NULL);
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
                                     max_redemptions, redeem_by, plan_codes, max_redemptions_per_customer)
    VALUES (p_code, p_percent_off, p_amount_off, p_currency, p_duration, p_duration_periods,
            p_max_redemptions, p_redeem_by, p_plan_codes, p_max_redemptions_per_customer)
    ON CONFLICT ON CONSTRAINT coupon_pkey DO UPDATE
        SET percent_off = excluded.percent_off, amount_off = excluded.amount_off, currency = excluded.currency,
            duration = excluded.duration, duration_periods = excluded.duration_periods,
            max_redemptions = excluded.max_redemptions, redeem_by = excluded.redeem_by,
            plan_codes = excluded.plan_codes, max_redemptions_per_customer = excluded.max_redemptions_per_customer,
            updated_at = v_at
    RETURNING * INTO v_new;
    RETURN v_new;
END
$$;
COMMENT ON FUNCTION billing.upsert_coupon(text, numeric, bigint, text, text, integer, integer, timestamptz, text[], integer) IS
'Creates or updates coupon p_code: p_percent_off (0 < p <= 100, rounded down per invoice) or p_amount_off in p_currency; p_duration once, repeating (p_duration_periods invoices) or forever; optional max redemptions, redeem-by instant, plan codes and max redemptions per customer (p_max_redemptions_per_customer: its redemptions by one customer, replaced or ended ones too; a limit, it may change after redemptions). A redeemed coupon keeps its discount and duration.
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
Returns the subscription; BL404 absent; BL422 canceled, unknown, archived, expired, other plan or currency; BL409 redeemed on it before, no redemptions left, or none left for its customer (max_redemptions_per_customer).';

-- Archiving a coupon: no new redemption (a signup, apply_coupon); the redemptions made keep their
-- discount until they end. An import may name it (the redemption exists at the source). Idempotent.
CREATE OR REPLACE FUNCTION billing.archive_coupon(p_code text, p_now timestamptz DEFAULT now())
RETURNS billing.coupon
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_coupon billing.coupon;
BEGIN
    PERFORM billing._audit('archive_coupon', jsonb_build_object('code', p_code, 'now', p_now));
    PERFORM billing._check_now(p_now);
    UPDATE billing.coupon SET archived_at = coalesce(archived_at, p_now), updated_at = CASE WHEN archived_at IS NULL THEN p_now ELSE updated_at END
     WHERE code = p_code
    RETURNING * INTO v_coupon;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'BL404', MESSAGE = format('coupon %s does not exist', coalesce(quote_literal(p_code), 'NULL'));
    END IF;
    RETURN v_coupon;
END
$$;
COMMENT ON FUNCTION billing.archive_coupon(text, timestamptz) IS
'Archives coupon p_code from p_now: no new redemption; the subscriptions that redeemed it keep their discount until it ends. Archived already: unchanged (its first archived_at kept).
Returns the coupon; BL404 for an unknown coupon.';
