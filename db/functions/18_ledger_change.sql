-- 18_ledger_change: the service ledger's sales (docs/money.md; the lines in force: 17_ledger): one
-- CHARGE line, the discount of a line (coupon eligibility and its months of service), the tax of a
-- line, and a change within the period (the unused part reversed, the rest sold on the new terms).
-- Re-applied after every migration: CREATE OR REPLACE only.

-- Writes one CHARGE line.
CREATE OR REPLACE FUNCTION billing._charge_line(
    p_sub billing.subscription, p_invoice_id bigint, p_plan billing.plan, p_quantity integer, p_unit_price bigint,
    p_start timestamptz, p_end timestamptz, p_gross bigint, p_discount bigint, p_coupon_code text,
    p_tax bigint, p_tax_inclusive boolean, p_depends_on bigint[], p_now timestamptz,
    p_basis_start timestamptz DEFAULT NULL, p_basis_gross bigint DEFAULT NULL, p_basis_net bigint DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    IF p_start >= p_end THEN
        RETURN;
    END IF;
    INSERT INTO billing.service_line (customer_id, subscription_id, invoice_id, kind, item, plan_id, quantity, unit_price,
                                      span_start, span_end, gross, discount, coupon_code, net, tax, tax_inclusive,
                                      currency, depends_on, basis_start, basis_gross, basis_net, created_at)
    VALUES (p_sub.customer_id, p_sub.id, p_invoice_id, 'CHARGE', 'PLAN', p_plan.id, p_quantity, p_unit_price,
            p_start, p_end, p_gross, coalesce(p_discount, 0), CASE WHEN coalesce(p_discount, 0) > 0 THEN p_coupon_code END,
            p_gross - coalesce(p_discount, 0), coalesce(p_tax, 0), coalesce(p_tax_inclusive, false), p_plan.currency,
            CASE WHEN p_invoice_id IS NULL THEN p_depends_on END, coalesce(p_basis_start, p_start),
            coalesce(p_basis_gross, p_gross), coalesce(p_basis_net, p_gross - coalesce(p_discount, 0)), p_now);
END
$$;
DROP FUNCTION IF EXISTS billing._charge_line(billing.subscription, bigint, billing.plan, integer, bigint, timestamptz, timestamptz, bigint, bigint, text, bigint, boolean, bigint[], timestamptz);
COMMENT ON FUNCTION billing._charge_line(billing.subscription, bigint, billing.plan, integer, bigint, timestamptz, timestamptz, bigint, bigint, text, bigint, boolean, bigint[], timestamptz, timestamptz, bigint, bigint) IS
'Private: writes one CHARGE line (p_quantity seats of p_plan at p_unit_price a full period, for [p_start, p_end): gross, discount, tax), billed by p_invoice_id or by a change''s credit depending on p_depends_on. Nothing for an empty span.
Returns nothing.';

-- The discount of one line [p_start, p_end) of gross p_gross (p_full: the gross of a whole period on
-- these terms, for an amount off) by the subscription's active coupon. Checked on every line: the
-- coupon's plans and currency (a restricted coupon discounts nothing on another plan), and its
-- duration in months of service: a repeating coupon lasts its months from the start of the first
-- period it discounted, and a line is discounted for its share of service inside them; once, the
-- first period line; forever, every line. A line of a change within a period (p_consume false) is
-- discounted only by a coupon already in use when the period began; it uses nothing of it. A period
-- line (p_consume true) starts a repeating coupon's months, uses up a once coupon, and ends a
-- repeating one whose months it reaches. Percentages round down; an amount off is capped at the line.
CREATE OR REPLACE FUNCTION billing._line_discount(
    p_sub billing.subscription, p_plan billing.plan, p_gross bigint, p_full bigint,
    p_start timestamptz, p_end timestamptz, p_consume boolean, p_now timestamptz,
    OUT discount bigint, OUT coupon_code text)
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_red    billing.coupon_redemption;
    v_coupon billing.coupon;
    v_until  timestamptz;
    v_covered_end timestamptz;
    v_base   numeric;
BEGIN
    discount := 0;
    IF p_gross <= 0 OR p_start >= p_end THEN
        RETURN;
    END IF;
    SELECT * INTO v_red FROM billing.coupon_redemption
     WHERE customer_id = p_sub.customer_id AND subscription_id = p_sub.id AND ended_at IS NULL
       FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    SELECT * INTO v_coupon FROM billing.coupon WHERE code = v_red.coupon_code;
    IF NOT p_consume AND (v_red.redeemed_at > p_sub.current_period_start OR v_coupon.duration = 'once') THEN
        -- Redeemed during this period: it discounts from the next period line (a once coupon not
        -- used yet likewise).
        RETURN;
    END IF;
    v_until := v_red.discount_until;
    IF v_coupon.duration = 'repeating' AND v_until IS NULL THEN
        IF NOT p_consume THEN
            RETURN;
        END IF;
        v_until := ((p_start AT TIME ZONE p_sub.timezone) + make_interval(months => v_coupon.duration_periods))
                   AT TIME ZONE p_sub.timezone;
        UPDATE billing.coupon_redemption r SET discount_until = v_until
         WHERE r.customer_id = v_red.customer_id AND r.subscription_id = v_red.subscription_id
           AND r.coupon_code = v_red.coupon_code;
    END IF;
    v_covered_end := CASE WHEN v_coupon.duration = 'repeating' THEN least(p_end, v_until) ELSE p_end END;

    IF (v_coupon.plan_codes IS NULL OR p_plan.code = ANY (v_coupon.plan_codes))
       AND (v_coupon.currency IS NULL OR v_coupon.currency = p_plan.currency)
       AND v_covered_end > p_start THEN
        IF v_coupon.percent_off IS NOT NULL THEN
            v_base := p_gross::numeric * v_coupon.percent_off / 100;
        ELSE
            v_base := least(p_gross::numeric, v_coupon.amount_off::numeric * p_gross / greatest(p_full, p_gross, 1));
        END IF;
        discount := least(p_gross, floor(v_base * floor(extract(epoch FROM v_covered_end) - extract(epoch FROM p_start))
                                         / greatest(floor(extract(epoch FROM p_end) - extract(epoch FROM p_start)), 1))::bigint);
        coupon_code := v_coupon.code;
    END IF;

    IF p_consume AND (v_coupon.duration = 'once' OR (v_coupon.duration = 'repeating' AND p_end >= v_until)) THEN
        UPDATE billing.coupon_redemption r
           SET ended_at = p_now, periods_left = CASE WHEN r.periods_left IS NOT NULL THEN 0 END
         WHERE r.customer_id = v_red.customer_id AND r.subscription_id = v_red.subscription_id
           AND r.coupon_code = v_red.coupon_code;
        UPDATE billing.subscription SET coupon_code = NULL WHERE customer_id = p_sub.customer_id AND id = p_sub.id;
    END IF;
END
$$;
COMMENT ON FUNCTION billing._line_discount(billing.subscription, billing.plan, bigint, bigint, timestamptz, timestamptz, boolean, timestamptz) IS
'Private: the discount of the subscription''s active coupon on one line [p_start, p_end) of gross p_gross (p_full: a whole period''s gross, for an amount off): 0 on a plan or currency the coupon does not cover; its share of service inside a repeating coupon''s months; p_consume (a period line) starts, uses up or ends the coupon, a change''s line uses nothing and is discounted only by a coupon in use since the period began.
Returns the discount and the coupon code (NULL when nothing was discounted).';

-- The tax of one line's net, by the customer's billing address (14_tax): the tax amount and whether
-- it is contained in the net.
CREATE OR REPLACE FUNCTION billing._line_tax(p_customer_id bigint, p_net bigint, OUT tax bigint, OUT inclusive boolean)
RETURNS record
LANGUAGE plpgsql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_tax record;
BEGIN
    v_tax := billing._invoice_tax_row(p_customer_id, p_net);
    tax := coalesce(v_tax.tax_amount, 0) + coalesce(v_tax.tax_included, 0);
    inclusive := coalesce(v_tax.tax_included, 0) > 0;
END
$$;
COMMENT ON FUNCTION billing._line_tax(bigint, bigint) IS
'Private: the tax on a line''s net for the customer''s billing address (exclusive or contained).
Returns (tax, inclusive).';

-- The tax a change's invoice bills on its lines (review7). A PRORATION invoice sells a CHARGE line and
-- gives back REVERSAL lines at their own tax (what was paid for them), but bills tax on the difference
-- at the customer's rate now. When the address changed since the reversed lines were sold (0% then,
-- 20% now), the CHARGE line at 20% of its whole net claims tax the invoice never billed, and a later
-- change or cancellation gave that back as credit: money from nothing. The exclusive CHARGE line
-- therefore carries what the invoice billed less what its reversals give back (never below 0), so
-- the invoice's lines add up to its tax and a reversal of them gives back what was paid. With one
-- rate throughout this moves the line by a rounding step at most. Inclusive lines are left alone (their
-- tax is inside the net: what is given back is the net either way).
CREATE OR REPLACE FUNCTION billing._fit_change_line_tax(p_customer_id bigint, p_invoice_id bigint)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_billed   bigint;
    v_reversed bigint;
    v_line     record;
BEGIN
    SELECT i.tax_amount INTO v_billed FROM billing.invoice i WHERE i.customer_id = p_customer_id AND i.id = p_invoice_id;
    SELECT coalesce(sum(CASE WHEN l.tax_inclusive THEN 0 ELSE l.tax END), 0) INTO v_reversed
      FROM billing.service_line l
     WHERE l.customer_id = p_customer_id AND l.invoice_id = p_invoice_id AND l.kind = 'REVERSAL';
    SELECT l.id, l.tax INTO v_line FROM billing.service_line l
     WHERE l.customer_id = p_customer_id AND l.invoice_id = p_invoice_id AND l.kind = 'CHARGE' AND NOT l.tax_inclusive;
    IF v_billed IS NULL OR v_line.id IS NULL
       OR NOT EXISTS (SELECT 1 FROM billing.service_line l WHERE l.customer_id = p_customer_id
                         AND l.invoice_id = p_invoice_id AND l.kind = 'REVERSAL') THEN
        RETURN;
    END IF;
    IF v_line.tax <> greatest(v_billed - v_reversed, 0) THEN
        UPDATE billing.service_line l SET tax = greatest(v_billed - v_reversed, 0)
         WHERE l.customer_id = p_customer_id AND l.id = v_line.id;
    END IF;
END
$$;
COMMENT ON FUNCTION billing._fit_change_line_tax(bigint, bigint) IS
'Private: on an invoice that sells a CHARGE line beside REVERSAL lines (a change''s PRORATION invoice), the exclusive CHARGE line''s tax set to what the invoice bills less what its reversals give back (never below 0): its lines add up to the tax it billed.
Returns nothing.';

-- A change within the current period at p_at, read from the lines: the unused part of the lines in
-- force is reversed at their own net, discount and tax; the rest of the period is sold on the new
-- terms (p_sub carries the new seats; p_full: the gross of the whole period on them, its share
-- taken; the coupon if it covers p_plan). When the new line costs more than what is given back, the
-- difference is an OPEN PRORATION invoice billing both (recording the terms replaced, so that a
-- failed one is reverted); else the difference, tax included and from what the customer kept of
-- the period (refunds lower it), is credit, pending with the lines on the period's unpaid invoices.
CREATE OR REPLACE FUNCTION billing._prorate_change(
    p_sub billing.subscription, p_plan billing.plan, p_unit bigint, p_full bigint, p_at timestamptz,
    p_now timestamptz, p_from_plan_id bigint, p_from_price bigint, p_from_quantity integer)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_end     timestamptz := p_sub.current_period_end;
    v_unused  record;
    v_gross   bigint;
    v_disc    record;
    v_net     bigint;
    v_tax     record;
    v_amount  bigint;
    v_start   timestamptz;
    v_invoice billing.invoice;
    v_depends bigint[];
    v_credit  bigint;
    v_full_disc record;
BEGIN
    IF p_at >= v_end THEN
        RETURN 0;
    END IF;
    v_unused := billing._unused_total(p_sub, p_at);
    v_gross := billing._share(p_full, p_sub.current_period_start, v_end, p_at, v_end);
    v_disc := billing._line_discount(p_sub, p_plan, v_gross, p_full, p_at, v_end, false, p_now);
    v_net := v_gross - v_disc.discount;
    v_tax := billing._line_tax(p_sub.customer_id, v_net);
    v_amount := v_net - v_unused.net;
    -- The whole period on the new terms: what a later change reverses from (the period's price).
    v_full_disc := billing._line_discount(p_sub, p_plan, p_full, p_full, p_sub.current_period_start, v_end, false, p_now);
    IF v_amount > 0 THEN
        -- Several changes may happen within one period, each its own PRORATION invoice keyed by the
        -- change instant; two changes at the very same instant move the second by 1 us.
        SELECT greatest(p_at, max(i.period_start) + interval '1 microsecond') INTO v_start
          FROM billing.invoice i
         WHERE i.customer_id = p_sub.customer_id AND i.subscription_id = p_sub.id AND i.kind = 'PRORATION'
           AND i.period_start >= p_at;
        v_start := coalesce(v_start, p_at);
        IF v_start >= v_end THEN
            RETURN 0;
        END IF;
        v_invoice := billing._new_invoice(p_sub, 'PRORATION', v_start, v_end, v_amount, p_plan, p_unit, p_now,
                                          p_from_plan_id, p_from_price, 0, NULL, p_from_quantity);
        PERFORM billing._reverse_unused(p_sub, p_at, v_invoice.id, NULL, p_now);
        PERFORM billing._charge_line(p_sub, v_invoice.id, p_plan, p_sub.quantity, p_unit, p_at, v_end, v_gross,
                                     v_disc.discount, v_disc.coupon_code, v_tax.tax, v_tax.inclusive, NULL, p_now,
                                     p_sub.current_period_start, p_full, p_full - v_full_disc.discount);
        PERFORM billing._fit_change_line_tax(p_sub.customer_id, v_invoice.id);
        RETURN v_amount;
    END IF;
    v_depends := billing._period_unpaid(p_sub);
    v_credit := billing._period_credit_base(p_sub, v_unused.net + v_unused.tax_exclusive)
                - (v_net + CASE WHEN v_tax.inclusive THEN 0 ELSE v_tax.tax END);
    PERFORM billing._reverse_unused(p_sub, p_at, NULL, v_depends, p_now);
    PERFORM billing._charge_line(p_sub, NULL, p_plan, p_sub.quantity, p_unit, p_at, v_end, v_gross,
                                 v_disc.discount, v_disc.coupon_code, v_tax.tax, v_tax.inclusive, v_depends, p_now,
                                 p_sub.current_period_start, p_full, p_full - v_full_disc.discount);
    IF v_credit > 0 THEN
        PERFORM billing._grant_change_credit(p_sub, p_plan.currency, v_credit, p_now);
    END IF;
    RETURN v_amount;
END
$$;
COMMENT ON FUNCTION billing._prorate_change(billing.subscription, billing.plan, bigint, bigint, timestamptz, timestamptz, bigint, bigint, integer) IS
'Private: a change within the current period at p_at, from the lines: REVERSAL lines for the unused part of the lines in force, a CHARGE line for the rest on the new terms (p_sub''s seats, p_plan, p_full for a whole period, the coupon if it covers the plan); an OPEN PRORATION invoice billing both when the new line costs more, else the difference (tax included, from what the customer kept) as credit through _grant_change_credit.
Returns the signed difference (positive: invoiced).';
