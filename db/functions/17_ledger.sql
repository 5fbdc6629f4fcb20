-- 17_ledger: the service ledger (billing.service_line, docs/money.md): what every invoice sells, and
-- what a change gives back. Every money rule that needs "what was sold, for which time, at what net
-- price" reads it: here, which lines are in force and their unused part from an instant (proration,
-- change credit, pause), and its reversal; 18_ledger_change writes the lines of a sale and of a
-- change (the discount and the tax of a line); 19_ledger_cuts what a cancellation or an undone
-- change takes off.
-- Re-applied after every migration: CREATE OR REPLACE only.

-- Whether a line is in force: its invoice (if any) is PAID, OPEN or REVIEW, and none of the unpaid
-- invoices a credit-ending change depended on was voided or failed. Read by (customer_id, ...): one
-- shard on Citus.
CREATE OR REPLACE FUNCTION billing._line_in_force(p_line billing.service_line)
RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    IF p_line.invoice_id IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM billing.invoice i
                        WHERE i.customer_id = p_line.customer_id AND i.id = p_line.invoice_id
                          AND i.status IN ('PAID', 'OPEN', 'REVIEW')) THEN
        RETURN false;
    END IF;
    IF p_line.depends_on IS NOT NULL
       AND EXISTS (SELECT 1 FROM billing.invoice i
                    WHERE i.customer_id = p_line.customer_id AND i.id = ANY (p_line.depends_on)
                      AND i.status IN ('VOID', 'FAILED')) THEN
        RETURN false;
    END IF;
    RETURN true;
END
$$;
COMMENT ON FUNCTION billing._line_in_force(billing.service_line) IS
'Private: whether a service line is in force (its invoice PAID, OPEN or REVIEW if it has one; none of the invoices it depends on VOID or FAILED).
Returns the flag.';

DROP VIEW IF EXISTS billing.service_line_in_force;

-- The unpaid invoices (OPEN, REVIEW) of the subscription that bill its current period: what credit
-- and the lines of a change made in it depend on. An unpaid invoice of another period (an older
-- upgrade in dunning) is not this period's money.
CREATE OR REPLACE FUNCTION billing._period_unpaid(p_sub billing.subscription)
RETURNS bigint[]
LANGUAGE plpgsql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    RETURN (SELECT array_agg(i.id ORDER BY i.id) FROM billing.invoice i
             WHERE i.customer_id = p_sub.customer_id AND i.subscription_id = p_sub.id
               AND i.status IN ('OPEN', 'REVIEW')
               AND i.period_end > p_sub.current_period_start AND i.period_start < p_sub.current_period_end);
END
$$;
COMMENT ON FUNCTION billing._period_unpaid(billing.subscription) IS
'Private: the unpaid invoices (OPEN, REVIEW) of p_sub whose period overlaps its current period.
Returns their ids in order, NULL when none.';

-- A share of an amount for the part [p_from, p_to) of a span [p_start, p_end), whole seconds,
-- rounded toward zero (the proration formula's rounding: never more than the line).
CREATE OR REPLACE FUNCTION billing._share(p_amount bigint, p_start timestamptz, p_end timestamptz,
                                          p_from timestamptz, p_to timestamptz)
RETURNS bigint
LANGUAGE sql IMMUTABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
    SELECT CASE WHEN p_to <= p_from THEN 0::bigint
                WHEN p_from <= p_start AND p_to >= p_end THEN p_amount
                ELSE trunc(p_amount::numeric
                           * floor(extract(epoch FROM least(p_to, p_end)) - extract(epoch FROM greatest(p_from, p_start)))
                           / greatest(floor(extract(epoch FROM p_end) - extract(epoch FROM p_start)), 1))::bigint END
$$;
COMMENT ON FUNCTION billing._share(bigint, timestamptz, timestamptz, timestamptz, timestamptz) IS
'Private: p_amount times the share of [p_start, p_end) that [p_from, p_to) covers, in whole seconds, rounded toward zero.
Returns the amount.';

-- The unused part from p_at of every CHARGE line in force of the subscription that is not reversed
-- by a line in force: at the line's own gross, discount, net and tax.
CREATE OR REPLACE FUNCTION billing._unused_lines(p_sub billing.subscription, p_at timestamptz)
RETURNS TABLE (line_id bigint, span_start timestamptz, span_end timestamptz,
               gross bigint, discount bigint, net bigint, tax bigint, tax_inclusive boolean)
LANGUAGE plpgsql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_line billing.service_line;
    v_rev  billing.service_line;
    v_reversed boolean;
    v_net  bigint;
    v_gross bigint;
BEGIN
    FOR v_line IN
        SELECT * FROM billing.service_line l
         WHERE l.customer_id = p_sub.customer_id AND l.subscription_id = p_sub.id
           AND l.kind = 'CHARGE' AND l.item = 'PLAN' AND l.span_end > p_at
         ORDER BY l.id
    LOOP
        CONTINUE WHEN NOT billing._line_in_force(v_line);
        -- Its reversals read first, then checked: on Citus a call inside a query of one shard would be
        -- sent to the worker with it.
        v_reversed := false;
        FOR v_rev IN SELECT * FROM billing.service_line r
                      WHERE r.customer_id = v_line.customer_id AND r.reverses_id = v_line.id LOOP
            IF billing._line_in_force(v_rev) THEN
                v_reversed := true;
                EXIT;
            END IF;
        END LOOP;
        CONTINUE WHEN v_reversed;
        line_id := v_line.id;
        span_start := greatest(p_at, v_line.span_start);
        span_end := v_line.span_end;
        -- From the whole period the line is a share of (the proration formula on the period's own
        -- price: floor(price x remaining / period)), never more than the line itself.
        v_gross := least(v_line.gross, billing._share(v_line.basis_gross, v_line.basis_start, v_line.span_end, p_at, v_line.span_end));
        v_net := least(v_line.net, v_gross,
                       billing._share(v_line.basis_net, v_line.basis_start, v_line.span_end, p_at, v_line.span_end));
        gross := v_gross;
        net := v_net;
        discount := v_gross - v_net;
        tax := billing._share(v_line.tax, v_line.span_start, v_line.span_end, p_at, v_line.span_end);
        tax_inclusive := v_line.tax_inclusive;
        RETURN NEXT;
    END LOOP;
END
$$;
COMMENT ON FUNCTION billing._unused_lines(billing.subscription, timestamptz) IS
'Private: for each CHARGE line in force of p_sub still serving after p_at and not reversed, its unused part [greatest(p_at, start), end) pro rata at its own gross, net and tax.
Returns one row per line.';

-- Before a change, a pause or a cancellation reverses lines at p_at: each unpaid invoice of the
-- subscription serving past p_at that is not finalized yet, never sent to the gateway and whose tax
-- was computed for another address or tax status than the customer's now, is retaxed first, as its
-- finalization would (_refresh_tax: bill-to and tax of one instant). A reversal gives back a line's
-- tax as it stands, and once a line is reversed its invoice's figures stand (money10); so the tax of
-- an invoice not finalized follows the customer's address until the first of its finalization and
-- the first reversal of one of its lines (adv11: a customer who signed up at a 20% address, moved to
-- an untaxed one before the first charge and then changed plan paid the 20% on the time served
-- before the change, kept at finalization; the other way, moved to the taxed address, paid none).
-- Each invoice locked by (customer_id, id): one shard on Citus.
CREATE OR REPLACE FUNCTION billing._retax_unfinalized(p_sub billing.subscription, p_at timestamptz, p_now timestamptz)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_ids     bigint[];
    v_id      bigint;
    v_invoice billing.invoice;
BEGIN
    v_ids := ARRAY(SELECT i.id FROM billing.invoice i
                     JOIN billing.customer c ON c.id = i.customer_id
                    WHERE i.customer_id = p_sub.customer_id AND i.subscription_id = p_sub.id
                      AND i.status = 'OPEN' AND i.number IS NULL AND i.period_end > p_at
                      AND billing._tax_stale(i.tax_detail, c.tax_status, c.country::text, c.region)
                    ORDER BY i.id);
    FOREACH v_id IN ARRAY v_ids LOOP
        SELECT * INTO v_invoice FROM billing.invoice i
         WHERE i.customer_id = p_sub.customer_id AND i.id = v_id AND i.status = 'OPEN' AND i.number IS NULL
           FOR UPDATE;
        IF FOUND THEN
            PERFORM billing._refresh_tax(v_invoice, p_now);
        END IF;
    END LOOP;
END
$$;
COMMENT ON FUNCTION billing._retax_unfinalized(billing.subscription, timestamptz, timestamptz) IS
'Private: before lines of p_sub are reversed at p_at, each of its OPEN invoices serving past p_at not finalized yet whose tax is of another address or tax status than the customer''s now is retaxed as its finalization would (_refresh_tax; one sent to the gateway or with a line reversed already keeps its figures).
Returns nothing.';

-- Reverses the unused part from p_at of the lines in force (REVERSAL lines, billed by p_invoice_id
-- or, NULL, by the credit of the change; the credit waits on the period's unpaid invoices, the
-- reversal itself on nothing: p_depends_on is not recorded on it). p_free: the time ends without
-- anything given back (a change of period length without proration): the reversal is worth 0.
DROP FUNCTION IF EXISTS billing._reverse_unused(billing.subscription, timestamptz, bigint, bigint[], timestamptz);
CREATE OR REPLACE FUNCTION billing._reverse_unused(p_sub billing.subscription, p_at timestamptz, p_invoice_id bigint,
                                                   p_depends_on bigint[], p_now timestamptz, p_free boolean DEFAULT false)
RETURNS integer
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_u    record;
    v_line billing.service_line;
    v_n    integer := 0;
BEGIN
    FOR v_u IN SELECT * FROM billing._unused_lines(p_sub, p_at) LOOP
        CONTINUE WHEN v_u.span_start >= v_u.span_end;
        SELECT * INTO v_line FROM billing.service_line WHERE customer_id = p_sub.customer_id AND id = v_u.line_id;
        INSERT INTO billing.service_line (customer_id, subscription_id, invoice_id, kind, item, plan_id, quantity, unit_price,
                                          span_start, span_end, gross, discount, coupon_code, net, tax, tax_inclusive,
                                          currency, reverses_id, depends_on, basis_start, basis_gross, basis_net, tax_lines,
                                          created_at)
        VALUES (p_sub.customer_id, p_sub.id, p_invoice_id, 'REVERSAL', v_line.item, v_line.plan_id, v_line.quantity,
                v_line.unit_price, v_u.span_start, v_u.span_end,
                CASE WHEN p_free THEN 0 ELSE -v_u.gross END, CASE WHEN p_free THEN 0 ELSE -v_u.discount END,
                v_line.coupon_code, CASE WHEN p_free THEN 0 ELSE -v_u.net END, CASE WHEN p_free THEN 0 ELSE -v_u.tax END,
                v_line.tax_inclusive, v_line.currency, v_line.id,
                -- A reversal depends on nothing but its line: the time ends whether or not the credit
                -- for it is released (the adversary found the old line selling again beside the new
                -- period when another unpaid invoice of the period failed).
                NULL, v_u.span_start,
                CASE WHEN p_free THEN 0 ELSE -v_u.gross END, CASE WHEN p_free THEN 0 ELSE -v_u.net END,
                -- Its tax by rate: the reversed line's entries as sold, its share (house8).
                CASE WHEN p_free THEN '[]'::jsonb
                     ELSE billing._split_tax_lines(billing._line_tax_lines(v_line), -v_u.tax, -v_u.net) END, p_now);
        v_n := v_n + 1;
    END LOOP;
    RETURN v_n;
END
$$;
COMMENT ON FUNCTION billing._reverse_unused(billing.subscription, timestamptz, bigint, bigint[], timestamptz, boolean) IS
'Private: writes a REVERSAL line for the unused part from p_at of each line in force of p_sub (billed by p_invoice_id, or by the change''s credit depending on p_depends_on; worth 0 with p_free).
Returns how many lines it wrote.';

-- What the unused part from p_at of the lines in force comes to: net, and the exclusive tax on it.
CREATE OR REPLACE FUNCTION billing._unused_total(p_sub billing.subscription, p_at timestamptz,
                                                 OUT net bigint, OUT tax_exclusive bigint)
RETURNS record
LANGUAGE plpgsql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    SELECT coalesce(sum(u.net), 0)::bigint, coalesce(sum(u.tax) FILTER (WHERE NOT u.tax_inclusive), 0)::bigint
      INTO net, tax_exclusive
      FROM billing._unused_lines(p_sub, p_at) u;
END
$$;
COMMENT ON FUNCTION billing._unused_total(billing.subscription, timestamptz) IS
'Private: the net and exclusive tax of the unused part from p_at of p_sub''s lines in force.
Returns (net, tax_exclusive).';
