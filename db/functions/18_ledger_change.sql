-- 18_ledger_change: the service ledger's sales (docs/money.md; the lines in force: 17_ledger): one
-- CHARGE line, the discount of a line (coupon eligibility and its months of service), the tax of a
-- line, and a change within the period (the unused part reversed, the rest sold on the new terms).
-- Re-applied after every migration: CREATE OR REPLACE only.

-- Writes one CHARGE line.
DROP FUNCTION IF EXISTS billing._charge_line(billing.subscription, bigint, billing.plan, integer, bigint, timestamptz, timestamptz, bigint, bigint, text, bigint, boolean, bigint[], timestamptz, timestamptz, bigint, bigint);
CREATE OR REPLACE FUNCTION billing._charge_line(
    p_sub billing.subscription, p_invoice_id bigint, p_plan billing.plan, p_quantity integer, p_unit_price bigint,
    p_start timestamptz, p_end timestamptz, p_gross bigint, p_discount bigint, p_coupon_code text,
    p_tax bigint, p_tax_inclusive boolean, p_depends_on bigint[], p_now timestamptz,
    p_basis_start timestamptz DEFAULT NULL, p_basis_gross bigint DEFAULT NULL, p_basis_net bigint DEFAULT NULL,
    p_tax_lines jsonb DEFAULT NULL)
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
                                      currency, depends_on, basis_start, basis_gross, basis_net, tax_lines, created_at)
    VALUES (p_sub.customer_id, p_sub.id, p_invoice_id, 'CHARGE', 'PLAN', p_plan.id, p_quantity, p_unit_price,
            p_start, p_end, p_gross, coalesce(p_discount, 0), CASE WHEN coalesce(p_discount, 0) > 0 THEN p_coupon_code END,
            p_gross - coalesce(p_discount, 0), coalesce(p_tax, 0), coalesce(p_tax_inclusive, false), p_plan.currency,
            CASE WHEN p_invoice_id IS NULL THEN p_depends_on END, coalesce(p_basis_start, p_start),
            coalesce(p_basis_gross, p_gross), coalesce(p_basis_net, p_gross - coalesce(p_discount, 0)), p_tax_lines, p_now);
END
$$;
DROP FUNCTION IF EXISTS billing._charge_line(billing.subscription, bigint, billing.plan, integer, bigint, timestamptz, timestamptz, bigint, bigint, text, bigint, boolean, bigint[], timestamptz);
COMMENT ON FUNCTION billing._charge_line(billing.subscription, bigint, billing.plan, integer, bigint, timestamptz, timestamptz, bigint, bigint, text, bigint, boolean, bigint[], timestamptz, timestamptz, bigint, bigint, jsonb) IS
'Private: writes one CHARGE line (p_quantity seats of p_plan at p_unit_price a full period, for [p_start, p_end): gross, discount, tax; p_tax_lines: its tax by rate, a change''s line), billed by p_invoice_id or by a change''s credit depending on p_depends_on. Nothing for an empty span.
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

-- The tax of a change's invoice, line by line (house8, migration 0840). A PRORATION invoice sells a
-- CHARGE line on the new terms and gives back REVERSAL lines of the unused part of the lines in force.
-- Each line is taxed at its own rate: the new line at the customer's rates today, a reversal at the
-- rates and jurisdiction the line it reverses was sold at (its share of that line's tax). The invoice
-- carries one tax entry per (rate, jurisdiction) with its base, and its tax is the sum of its lines'.
-- (Before, it taxed the difference at the rate of the day: after a move or a change of rate since the
-- reversed lines were sold, (new rate - old rate) x the reversed net too little or too much; review7's
-- _fit_change_line_tax then bent the new line's tax to fit.) A tax entry:
-- {code, name, rateBp, inclusive, country, region, base, amount}.

-- p_entries (a line's tax by rate) re-cut to a tax of p_tax on a base of p_base: each entry its
-- proportion of p_tax, rounded toward zero, the rest on the largest (the amounts add up to p_tax).
CREATE OR REPLACE FUNCTION billing._split_tax_lines(p_entries jsonb, p_tax bigint, p_base bigint)
RETURNS jsonb
LANGUAGE sql IMMUTABLE
AS $$
    WITH e AS (
        SELECT x.entry, x.ord, (x.entry->>'amount')::numeric AS a
          FROM pg_catalog.jsonb_array_elements(coalesce(p_entries, '[]'::jsonb)) WITH ORDINALITY x(entry, ord)
    ), t AS (
        SELECT sum(e.a) AS total FROM e
    ), s AS (
        SELECT e.entry, e.ord,
               CASE WHEN t.total = 0 THEN 0 ELSE trunc(p_tax * e.a / t.total) END::bigint AS amount,
               row_number() OVER (ORDER BY abs(e.a) DESC, e.ord) AS rank
          FROM e, t
    ), r AS (
        SELECT s.*, p_tax - sum(s.amount) OVER () AS rest FROM s
    )
    SELECT coalesce(pg_catalog.jsonb_agg(r.entry || pg_catalog.jsonb_build_object(
                        'base', p_base, 'amount', r.amount + CASE WHEN r.rank = 1 THEN r.rest ELSE 0 END)
                    ORDER BY r.ord), '[]'::jsonb)
      FROM r
$$;
COMMENT ON FUNCTION billing._split_tax_lines(jsonb, bigint, bigint) IS
'Private: tax entries re-cut to a tax of p_tax on a base of p_base, each its proportion (rounded toward zero, the rest on the largest): the amounts add up to p_tax.
Returns the entries.';

-- The tax entries of a detail computed by _tax_of for a base (the rates of one address): its lines
-- with the address and the base.
CREATE OR REPLACE FUNCTION billing._tax_lines_of(p_detail jsonb, p_base bigint)
RETURNS jsonb
LANGUAGE sql IMMUTABLE
AS $$
    SELECT coalesce(pg_catalog.jsonb_agg(x.entry || pg_catalog.jsonb_build_object(
                        'country', p_detail->'country', 'region', p_detail->'region', 'base', p_base) ORDER BY x.ord),
                    '[]'::jsonb)
      FROM pg_catalog.jsonb_array_elements(coalesce(p_detail->'lines', '[]'::jsonb)) WITH ORDINALITY x(entry, ord)
$$;
COMMENT ON FUNCTION billing._tax_lines_of(jsonb, bigint) IS
'Private: the entries of a tax detail (_tax_of) with its address (country, region) and base p_base.
Returns the entries.';

-- A line's tax by rate as it was sold, adding up to its tax: its own entries (a change's line), else
-- those of the line it reverses (a reversal written before 0840: its share), else its invoice's tax
-- detail in proportion (a period invoice sells one line; a change's invoice written before 0840 taxed
-- the difference at the rate its new line was sold at), else one entry "Tax as sold" at the rate its
-- tax comes to (a change that ended in credit before 0840: no invoice recorded the rate).
CREATE OR REPLACE FUNCTION billing._line_tax_lines(p_line billing.service_line)
RETURNS jsonb
LANGUAGE plpgsql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_detail   jsonb;
    v_reversed billing.service_line;
BEGIN
    IF p_line.tax_lines IS NOT NULL THEN
        RETURN p_line.tax_lines;
    END IF;
    IF p_line.tax = 0 THEN
        RETURN '[]'::jsonb;
    END IF;
    IF p_line.reverses_id IS NOT NULL THEN
        SELECT * INTO v_reversed FROM billing.service_line l
         WHERE l.customer_id = p_line.customer_id AND l.id = p_line.reverses_id;
        IF FOUND THEN
            RETURN billing._split_tax_lines(billing._line_tax_lines(v_reversed), p_line.tax, p_line.net);
        END IF;
    END IF;
    IF p_line.invoice_id IS NOT NULL THEN
        SELECT i.tax_detail INTO v_detail FROM billing.invoice i
         WHERE i.customer_id = p_line.customer_id AND i.id = p_line.invoice_id;
        IF EXISTS (SELECT 1 FROM jsonb_array_elements(coalesce(v_detail->'lines', '[]'::jsonb)) e
                    WHERE (e->>'amount')::bigint <> 0) THEN
            RETURN billing._split_tax_lines(billing._tax_lines_of(v_detail, p_line.net), p_line.tax, p_line.net);
        END IF;
    END IF;
    RETURN jsonb_build_array(jsonb_build_object(
        'code', NULL, 'name', 'Tax as sold', 'inclusive', p_line.tax_inclusive, 'country', NULL, 'region', NULL,
        'rateBp', CASE WHEN p_line.net - CASE WHEN p_line.tax_inclusive THEN p_line.tax ELSE 0 END = 0 THEN 0
                       ELSE round(p_line.tax * 10000.0 / (p_line.net - CASE WHEN p_line.tax_inclusive THEN p_line.tax ELSE 0 END))::integer END,
        'base', p_line.net, 'amount', p_line.tax));
END
$$;
COMMENT ON FUNCTION billing._line_tax_lines(billing.service_line) IS
'Private: a line''s tax by rate as sold, adding up to its tax: its tax_lines, else its share of the entries of the line it reverses, else its invoice''s tax detail in proportion, else one entry "Tax as sold" at the rate its tax comes to.
Returns the entries.';

-- The invoice's tax from its lines' entries: one entry per (rate, jurisdiction) with its base and
-- amount (summed over the lines), the tax on top and the tax contained. p_treatment, p_country,
-- p_region: the address the new line is taxed for (what _tax_stale compares at finalization).
CREATE OR REPLACE FUNCTION billing._tax_of_lines(p_entries jsonb, p_treatment text, p_country text, p_region text,
                                                 OUT tax_amount bigint, OUT tax_included bigint, OUT tax_detail jsonb)
LANGUAGE sql IMMUTABLE
AS $$
    WITH e AS (
        SELECT x->>'code' AS code, x->>'name' AS name, (x->>'rateBp')::integer AS rate_bp,
               (x->>'inclusive')::boolean AS inclusive, x->>'country' AS country, x->>'region' AS region,
               (x->>'base')::bigint AS base, (x->>'amount')::bigint AS amount
          FROM pg_catalog.jsonb_array_elements(coalesce(p_entries, '[]'::jsonb)) x
    ), g AS (
        SELECT e.code, e.name, e.rate_bp, e.inclusive, e.country, e.region, sum(e.base)::bigint AS base,
               sum(e.amount)::bigint AS amount
          FROM e GROUP BY e.code, e.name, e.rate_bp, e.inclusive, e.country, e.region
    )
    SELECT coalesce(sum(g.amount) FILTER (WHERE NOT g.inclusive), 0)::bigint,
           coalesce(sum(g.amount) FILTER (WHERE g.inclusive), 0)::bigint,
           CASE WHEN p_treatment IS NOT NULL OR count(g.*) > 0 THEN pg_catalog.jsonb_build_object(
               'treatment', p_treatment, 'country', p_country, 'region', p_region, 'byLine', true,
               'lines', coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
                            'code', g.code, 'name', g.name, 'rateBp', g.rate_bp, 'inclusive', g.inclusive,
                            'country', g.country, 'region', g.region, 'base', g.base, 'amount', g.amount)
                            ORDER BY (g.country IS NOT DISTINCT FROM p_country AND g.region IS NOT DISTINCT FROM p_region) DESC,
                                     g.country, g.region NULLS FIRST, g.code, g.rate_bp)
                            FILTER (WHERE g.code IS NOT NULL OR g.amount <> 0), '[]'::jsonb)) END
      FROM g
$$;
COMMENT ON FUNCTION billing._tax_of_lines(jsonb, text, text, text) IS
'Private: an invoice''s taxes from its lines'' tax entries: one entry per (rate, jurisdiction) with its base and amount, summed; the tax on top, the tax contained, and the detail ({treatment, country, region: the address of the new line, byLine: true, lines}).
Returns one row.';

-- The tax entries of a change's reversals at p_at: for each line in force, its own entries, its
-- share (negative) for the unused part.
CREATE OR REPLACE FUNCTION billing._reversal_tax_lines(p_sub billing.subscription, p_at timestamptz)
RETURNS jsonb
LANGUAGE plpgsql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_entries jsonb := '[]'::jsonb;
    v_u       record;
    v_line    billing.service_line;
BEGIN
    FOR v_u IN SELECT * FROM billing._unused_lines(p_sub, p_at) LOOP
        CONTINUE WHEN v_u.span_start >= v_u.span_end;
        SELECT * INTO v_line FROM billing.service_line l WHERE l.customer_id = p_sub.customer_id AND l.id = v_u.line_id;
        v_entries := v_entries || billing._split_tax_lines(billing._line_tax_lines(v_line), -v_u.tax, -v_u.net);
    END LOOP;
    RETURN v_entries;
END
$$;
COMMENT ON FUNCTION billing._reversal_tax_lines(billing.subscription, timestamptz) IS
'Private: the tax entries a change at p_at gives back: for each line in force, its share of the line''s own entries for the unused part (negative).
Returns the entries.';

-- The tax entries of the lines an invoice bills (a change's invoice), the CHARGE line p_charge_id's
-- replaced by p_charge_entries (its tax at the customer's address now, when it is retaxed before
-- finalization).
CREATE OR REPLACE FUNCTION billing._invoice_tax_lines(p_customer_id bigint, p_invoice_id bigint, p_charge_id bigint,
                                                      p_charge_entries jsonb)
RETURNS jsonb
LANGUAGE plpgsql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_entries jsonb := '[]'::jsonb;
    v_line    billing.service_line;
BEGIN
    FOR v_line IN SELECT * FROM billing.service_line l
                   WHERE l.customer_id = p_customer_id AND l.invoice_id = p_invoice_id ORDER BY l.id LOOP
        v_entries := v_entries || CASE WHEN v_line.id = p_charge_id THEN coalesce(p_charge_entries, '[]'::jsonb)
                                       ELSE billing._line_tax_lines(v_line) END;
    END LOOP;
    RETURN v_entries;
END
$$;
COMMENT ON FUNCTION billing._invoice_tax_lines(bigint, bigint, bigint, jsonb) IS
'Private: the tax entries of the lines invoice p_invoice_id bills, the CHARGE line p_charge_id''s replaced by p_charge_entries.
Returns the entries.';
DROP FUNCTION IF EXISTS billing._fit_change_line_tax(bigint, bigint);

-- A change within the current period at p_at, read from the lines: the unused part of the lines in
-- force is reversed at their own net, discount and tax; the rest of the period is sold on the new
-- terms (p_sub carries the new seats; p_full: the gross of the whole period on them, its share
-- taken; the coupon if it covers p_plan), taxed today. When the new line costs more than what is
-- given back (net, and tax included: each line at its own tax), the difference is an OPEN PRORATION
-- invoice billing both (recording the terms replaced, so that a
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
    v_now_tax record;
    v_tax     bigint;
    v_incl    boolean;
    v_entries jsonb;
    v_change  record;
    v_bill    boolean := false;
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
    PERFORM billing._retax_unfinalized(p_sub, p_at, p_now);  -- (the lines reversed below at their tax of now)
    v_unused := billing._unused_total(p_sub, p_at);
    v_gross := billing._share(p_full, p_sub.current_period_start, v_end, p_at, v_end);
    v_disc := billing._line_discount(p_sub, p_plan, v_gross, p_full, p_at, v_end, false, p_now);
    v_net := v_gross - v_disc.discount;
    -- The new line at the customer's rates today, with its entries by rate (house8: the invoice's tax
    -- is its lines').
    v_now_tax := billing._invoice_tax_row(p_sub.customer_id, v_net);
    v_tax := coalesce(v_now_tax.tax_amount, 0) + coalesce(v_now_tax.tax_included, 0);
    v_incl := coalesce(v_now_tax.tax_included, 0) > 0;
    v_entries := billing._tax_lines_of(v_now_tax.tax_detail, v_net);
    v_amount := v_net - v_unused.net;
    -- The whole period on the new terms: what a later change reverses from (the period's price).
    v_full_disc := billing._line_discount(p_sub, p_plan, p_full, p_full, p_sub.current_period_start, v_end, false, p_now);
    -- Each line at its own tax: the reversals give back what their lines were sold at, the new line is
    -- taxed today. A difference tax included that is positive is billed, whatever the sign of its net
    -- (money10, migration 0910: a net that falls under a tax that rises more, a move to a taxed address
    -- then a small downgrade, bills its tax owed on a PRORATION invoice of negative subtotal); one not
    -- positive ends in credit (below).
    v_change := billing._tax_of_lines(billing._reversal_tax_lines(p_sub, p_at) || v_entries,
                                      v_now_tax.tax_detail->>'treatment', v_now_tax.tax_detail->>'country',
                                      v_now_tax.tax_detail->>'region');
    v_bill := v_amount + v_change.tax_amount > 0;
    IF v_bill THEN
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
                                          p_from_plan_id, p_from_price, 0, NULL, p_from_quantity,
                                          jsonb_build_object('tax_amount', v_change.tax_amount,
                                                             'tax_included', v_change.tax_included,
                                                             'tax_detail', v_change.tax_detail));
        PERFORM billing._reverse_unused(p_sub, p_at, v_invoice.id, NULL, p_now);
        PERFORM billing._charge_line(p_sub, v_invoice.id, p_plan, p_sub.quantity, p_unit, p_at, v_end, v_gross,
                                     v_disc.discount, v_disc.coupon_code, v_tax, v_incl, NULL, p_now,
                                     p_sub.current_period_start, p_full, p_full - v_full_disc.discount, v_entries);
        RETURN v_amount;
    END IF;
    v_depends := billing._period_unpaid(p_sub);
    v_credit := billing._period_credit_base(p_sub, v_unused.net + v_unused.tax_exclusive)
                - (v_net + CASE WHEN v_incl THEN 0 ELSE v_tax END);
    PERFORM billing._reverse_unused(p_sub, p_at, NULL, v_depends, p_now);
    PERFORM billing._charge_line(p_sub, NULL, p_plan, p_sub.quantity, p_unit, p_at, v_end, v_gross,
                                 v_disc.discount, v_disc.coupon_code, v_tax, v_incl, v_depends, p_now,
                                 p_sub.current_period_start, p_full, p_full - v_full_disc.discount, v_entries);
    IF v_credit > 0 THEN
        PERFORM billing._grant_change_credit(p_sub, p_plan.currency, v_credit, p_now);
    END IF;
    RETURN v_amount;
END
$$;
COMMENT ON FUNCTION billing._prorate_change(billing.subscription, billing.plan, bigint, bigint, timestamptz, timestamptz, bigint, bigint, integer) IS
'Private: a change within the current period at p_at, from the lines: REVERSAL lines for the unused part of the lines in force, a CHARGE line for the rest on the new terms (p_sub''s seats, p_plan, p_full for a whole period, the coupon if it covers the plan); an OPEN PRORATION invoice billing both when the difference tax included is positive (its subtotal negative when the net falls but the tax rises more: 0910), else the difference (tax included, from what the customer kept) as credit through _grant_change_credit.
Returns the signed difference (positive: invoiced).';
