-- 75_reports: figures for the board (docs/reports.md): MRR and ARR per currency at any instant,
-- MRR movements per month, logo and revenue churn (voluntary versus dunning), dunning recovery,
-- revenue recognized per month next to cash collected. Read-only (billing_readonly may run them);
-- never summed across currencies; months are UTC calendar months.
-- Re-applied after every migration: CREATE OR REPLACE only.
--
-- One function per figure, used by the reports, the console (86_console) and the demo alike:
-- MRR by billing._mrr_points (each subscription's MRR at given instants), revenue recognized by
-- billing._revenue_recognized (per currency over a window). Both read the service ledger
-- (billing.service_line, 17_ledger) for what was sold; docs/reports.md states their rules: MRR is
-- what the PLAN lines in force sell for the instant, net of discounts, seats and included tax,
-- normalized to a month (_mrr_factor: a week is 52/12 of a month, a day 365/12), usage never, 0
-- while paused or once canceled, a change counted from its instant, a reverted upgrade never;
-- revenue is every line in force net of its contained tax straight line over its span (a
-- reversal takes the unused time off: credit recognized once), less the net of refunds.

CREATE OR REPLACE FUNCTION billing._mrr_factor(p_billing_interval text, p_interval_count integer)
RETURNS numeric
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE p_billing_interval
               WHEN 'MONTH' THEN 12::numeric
               WHEN 'YEAR'  THEN 1::numeric
               WHEN 'WEEK'  THEN 52::numeric
               WHEN 'DAY'   THEN 365::numeric
           END / (12 * p_interval_count)
$$;
COMMENT ON FUNCTION billing._mrr_factor(text, integer) IS
'Private: months per period as the reports normalize (MONTH 1/n, YEAR 1/(12 n), WEEK 52/(12 n), DAY 365/(12 n)).
Returns the factor.';

CREATE OR REPLACE FUNCTION billing._mrr_term(p_basis_net bigint, p_net bigint, p_tax bigint, p_tax_inclusive boolean,
                                             p_billing_interval text, p_interval_count integer)
RETURNS numeric
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE WHEN p_tax_inclusive AND p_net > 0 THEN p_basis_net::numeric * (p_net - p_tax) / p_net
                ELSE p_basis_net::numeric END
           * billing._mrr_factor(p_billing_interval, p_interval_count)
$$;
COMMENT ON FUNCTION billing._mrr_term(bigint, bigint, bigint, boolean, text, integer) IS
'Private: one PLAN line''s MRR: the net of its whole period (basis_net) without the tax it contains, normalized to a month (_mrr_factor). The one expression of _mrr_points (the full recomputation) and _mrr_segments_of (the kept aggregate), so both add the very same numerics.
Returns the exact numeric.';

-- MRR: one function (_mrr_points) for every figure: report_mrr, the movements and churn, the
-- console's MRR now and its trend, the demo (through report_mrr). It reads the service ledger
-- (17_ledger, docs/money.md section 0) alone for what was sold: at an instant t, a subscription's
-- MRR is the sum over its PLAN lines in force covering t and not ended by a reversal in force by t
-- of the whole period each line is a share of (basis_net: seats, the coupon's discount, without the
-- tax it contains), normalized to a month by its plan's interval (_mrr_factor). A change counts from
-- its instant (its reversal ends the old line, its line sells the new terms), a pause reverses the
-- rest of the period (0), a reverted (FAILED) upgrade's lines were never in force. Usage (USAGE
-- lines, billed in arrears for what was consumed) is not recurring: not MRR. A canceled
-- subscription has none from its cancellation (a cancellation with p_proration none reverses
-- nothing); one live past its current period's end and not renewed yet (the worker's lag) is
-- counted at its terms of that period's last instant.
CREATE OR REPLACE FUNCTION billing._mrr_points(p_points timestamptz[])
RETURNS TABLE (at timestamptz, subscription_id bigint, customer_id bigint, currency text, mrr numeric)
LANGUAGE plpgsql STABLE
SET search_path = billing, pg_catalog, pg_temp
SET work_mem = '64MB'
AS $$
#variable_conflict use_column
BEGIN
    -- PL/pgSQL (a SQL function reading a distributed table with a parameter cannot be planned on
    -- Citus); lines, invoices and subscriptions joined on (customer_id, ...): each part runs in
    -- each shard. One pass over the lines covering the instants, hash joins (work_mem for them).
    RETURN QUERY
    WITH pts AS MATERIALIZED (
        SELECT DISTINCT x AS at FROM unnest(p_points) x WHERE x IS NOT NULL
    ), lagging AS MATERIALIZED (
        -- Live past the end of its current period, not renewed yet: its terms at that period's last
        -- instant (what the renewal will sell again).
        SELECT p.at, s.customer_id, s.id AS subscription_id, s.current_period_end - interval '1 microsecond' AS seen
          FROM pts p
          JOIN billing.subscription s ON s.current_period_end <= p.at
         WHERE s.status IN ('ACTIVE', 'PAST_DUE') AND NOT s.cancel_at_period_end AND s.canceled_at IS NULL
    ), covering AS (
        -- The PLAN CHARGE lines covering the instant (seen: the instant, or a lagging
        -- subscription's last instant of its period).
        SELECT p.at, p.at AS seen, l.customer_id, l.subscription_id, l.id, l.invoice_id, l.depends_on, l.plan_id,
               l.currency, l.basis_net, l.net, l.tax, l.tax_inclusive
          FROM pts p
          JOIN billing.service_line l ON l.span_start <= p.at AND p.at < l.span_end
          LEFT JOIN billing.invoice i ON i.customer_id = l.customer_id AND i.id = l.invoice_id
         WHERE l.item = 'PLAN' AND l.kind = 'CHARGE' AND (l.invoice_id IS NULL OR i.status IN ('PAID', 'OPEN', 'REVIEW'))
        UNION ALL
        SELECT g.at, g.seen, l.customer_id, l.subscription_id, l.id, l.invoice_id, l.depends_on, l.plan_id,
               l.currency, l.basis_net, l.net, l.tax, l.tax_inclusive
          FROM lagging g
          JOIN billing.service_line l ON l.customer_id = g.customer_id AND l.subscription_id = g.subscription_id
           AND l.span_end > g.seen AND l.span_start <= g.seen
          LEFT JOIN billing.invoice i ON i.customer_id = l.customer_id AND i.id = l.invoice_id
         WHERE l.item = 'PLAN' AND l.kind = 'CHARGE' AND (l.invoice_id IS NULL OR i.status IN ('PAID', 'OPEN', 'REVIEW'))
    ), fallen AS (
        -- Lines that depend on an invoice voided or failed (a change that ended in credit, its
        -- period's unpaid invoice gone). (A join on = ANY: Citus plans no unnest of a column.)
        SELECT DISTINCT l.customer_id, l.id
          FROM billing.service_line l
          JOIN billing.invoice i ON i.customer_id = l.customer_id AND i.id = ANY (l.depends_on)
         WHERE l.depends_on IS NOT NULL AND i.status IN ('VOID', 'FAILED')
    ), ended AS (
        -- When a reversal in force ended each reversed line (the earliest; a reversal covers
        -- [t, end) of its line).
        SELECT r.customer_id, r.reverses_id AS id, min(r.span_start) AS ended_at
          FROM billing.service_line r
          LEFT JOIN billing.invoice ri ON ri.customer_id = r.customer_id AND ri.id = r.invoice_id
          LEFT JOIN fallen f ON f.customer_id = r.customer_id AND f.id = r.id
         WHERE r.reverses_id IS NOT NULL AND r.item = 'PLAN'
           AND (r.invoice_id IS NULL OR ri.status IN ('PAID', 'OPEN', 'REVIEW')) AND f.id IS NULL
         GROUP BY r.customer_id, r.reverses_id
    ), stopped AS MATERIALIZED (
        -- Canceled or paused: no MRR from then.
        SELECT s.customer_id, s.id, s.canceled_at, CASE WHEN s.status = 'PAUSED' THEN s.paused_at END AS paused_at
          FROM billing.subscription s
         WHERE s.canceled_at IS NOT NULL OR s.status = 'PAUSED'
    )
    -- In force (billing._line_in_force, set-based): its invoice PAID, OPEN or REVIEW (or none),
    -- nothing it depends on voided or failed; not ended by then; not canceled or paused by then.
    SELECT c.at, c.subscription_id, c.customer_id, c.currency::text,
           sum(billing._mrr_term(c.basis_net, c.net, c.tax, c.tax_inclusive, pl.billing_interval, pl.interval_count))
      FROM covering c
      JOIN billing.plan pl ON pl.id = c.plan_id
      LEFT JOIN ended e ON e.customer_id = c.customer_id AND e.id = c.id
      LEFT JOIN fallen f ON f.customer_id = c.customer_id AND f.id = c.id
      LEFT JOIN stopped s ON s.customer_id = c.customer_id AND s.id = c.subscription_id
     WHERE f.id IS NULL
       AND (e.ended_at IS NULL OR e.ended_at > c.seen)
       AND (s.canceled_at IS NULL OR s.canceled_at > c.at)
       AND (s.paused_at IS NULL OR s.paused_at > c.at)
     GROUP BY c.at, c.subscription_id, c.customer_id, c.currency;
END
$$;
COMMENT ON FUNCTION billing._mrr_points(timestamptz[]) IS
'Private: each subscription''s MRR at each instant of p_points (docs/reports.md, "MRR"), from the service ledger: its PLAN lines in force covering the instant and not reversed by then, each the net of its whole period (seats, discount, without contained tax) normalized to a month (_mrr_factor); usage is not MRR; 0 paused or canceled; live past its period''s end and not renewed: that period''s terms.
Returns one row per instant and subscription with a line sold then.';

CREATE OR REPLACE FUNCTION billing._mrr_at(p_at timestamptz)
RETURNS TABLE (subscription_id bigint, customer_id bigint, currency text, mrr numeric)
LANGUAGE plpgsql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY SELECT m.subscription_id, m.customer_id, m.currency, m.mrr FROM billing._mrr_points(ARRAY[p_at]) m;
END
$$;
COMMENT ON FUNCTION billing._mrr_at(timestamptz) IS
'Private: each subscription''s MRR at p_at (_mrr_points at one instant).
Returns one row per subscription with something sold at p_at.';

CREATE OR REPLACE FUNCTION billing._report_months(p_from date, p_to date)
RETURNS TABLE (month date, starts timestamptz, ends timestamptz)
LANGUAGE plpgsql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    IF p_from IS NULL OR p_to IS NULL OR p_to < p_from THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('a report needs p_from <= p_to, got %s and %s', coalesce(p_from::text, 'NULL'), coalesce(p_to::text, 'NULL'));
    END IF;
    IF p_to - p_from > 3700 THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = 'a report covers at most ten years';
    END IF;
    RETURN QUERY
    SELECT m::date, (m AT TIME ZONE 'UTC'), ((m + interval '1 month') AT TIME ZONE 'UTC')
      FROM generate_series(date_trunc('month', p_from::timestamp), date_trunc('month', p_to::timestamp), interval '1 month') m;
END
$$;
COMMENT ON FUNCTION billing._report_months(date, date) IS
'Private: the UTC calendar months from p_from''s to p_to''s (inclusive), with their start and end instants.
Returns one row per month; BL422 when p_to < p_from or the span exceeds ten years.';

CREATE OR REPLACE FUNCTION billing._mrr_month_ends(p_from date, p_to date)
RETURNS TABLE (month date, currency text, customer_id bigint, subscription_id bigint, s numeric, e numeric)
LANGUAGE sql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
    WITH months AS (SELECT * FROM billing._report_months(p_from, p_to)),
    a AS (SELECT mo.month, x.* FROM months mo CROSS JOIN LATERAL billing._mrr_at(mo.starts) x),
    b AS (SELECT mo.month, x.* FROM months mo CROSS JOIN LATERAL billing._mrr_at(mo.ends) x)
    SELECT coalesce(a.month, b.month), coalesce(a.currency, b.currency), coalesce(a.customer_id, b.customer_id),
           coalesce(a.subscription_id, b.subscription_id), coalesce(a.mrr, 0), coalesce(b.mrr, 0)
      FROM a FULL JOIN b ON b.month = a.month AND b.subscription_id = a.subscription_id
$$;
COMMENT ON FUNCTION billing._mrr_month_ends(date, date) IS
'Private: each subscription''s MRR at the start (s) and end (e) of every UTC month from p_from''s to p_to''s, 0 where none.
Returns one row per month and subscription with MRR at either end; BL422 for a bad span.';

-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION billing.report_mrr(p_at timestamptz)
RETURNS TABLE (currency text, subscriptions bigint, customers bigint, mrr numeric, arr numeric)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    IF p_at IS NULL OR NOT isfinite(p_at) THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = 'p_at must be a finite instant';
    END IF;
    -- billing._mrr_totals: _mrr_points' figures summed, read from the kept aggregate (76_mrr_aggregate).
    RETURN QUERY
    SELECT t.currency, t.subscriptions, t.customers, round(t.mrr, 2), round(t.mrr * 12, 2)
      FROM billing._mrr_totals(ARRAY[p_at]) t
     WHERE t.mrr > 0
     ORDER BY t.currency;
END
$$;
COMMENT ON FUNCTION billing.report_mrr(timestamptz) IS
'Monthly and annual recurring revenue per currency at p_at (docs/reports.md): each subscription''s billed recurring price net of discount and included tax, normalized to a month (yearly / 12, weekly x 52 / 12); ARR = 12 x MRR. Read from the MRR kept by the engine''s writes (billing._mrr_totals), equal to the full recomputation. Amounts in minor units, 2 decimals.
Returns one row per currency with MRR; BL422 for a NULL or infinite p_at.';

CREATE OR REPLACE FUNCTION billing.report_mrr_movements(p_from date, p_to date)
RETURNS TABLE (month date, currency text, starting_mrr numeric, new_mrr numeric, expansion_mrr numeric,
               contraction_mrr numeric, churned_mrr numeric, ending_mrr numeric)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    -- billing._mrr_movements: read from the kept aggregate (76_mrr_aggregate), or recomputed.
    RETURN QUERY
    SELECT m.month, m.currency, round(m.starting_mrr, 2), round(m.new_mrr, 2), round(m.expansion_mrr, 2),
           round(m.contraction_mrr, 2), round(m.churned_mrr, 2), round(m.ending_mrr, 2)
      FROM billing._mrr_movements(p_from, p_to) m
     ORDER BY m.month, m.currency;
END
$$;
COMMENT ON FUNCTION billing.report_mrr_movements(date, date) IS
'MRR movements per UTC month (p_from''s month to p_to''s) and currency, comparing each subscription''s MRR at the month''s start and end: new (0 to some), expansion (up), contraction (down, positive figure), churned (some to 0); ending = starting + new + expansion - contraction - churned. Read from the MRR kept by the engine''s writes (billing._mrr_movements), equal to the full recomputation. Minor units, 2 decimals.
Returns one row per month and currency with MRR; BL422 for a bad span.';

CREATE OR REPLACE FUNCTION billing.report_churn(p_from date, p_to date)
RETURNS TABLE (month date, currency text, customers_start bigint, customers_churned bigint, churned_voluntary bigint,
               churned_dunning bigint, logo_churn_rate numeric, starting_mrr numeric, churned_mrr numeric,
               revenue_churn_rate numeric, net_revenue_churn_rate numeric, dunning_settled bigint,
               dunning_recovered bigint, dunning_recovery_rate numeric)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH months AS (SELECT * FROM billing._report_months(p_from, p_to)),
    per_sub AS (SELECT * FROM billing._mrr_month_ends(p_from, p_to)),
    per_customer AS (
        SELECT p.month, p.currency, p.customer_id, sum(p.s) AS s, sum(p.e) AS e
          FROM per_sub p GROUP BY 1, 2, 3
    ), last_cancel AS (
        -- Each customer's last cancellation per month and currency (a join, not a correlated
        -- subquery: Citus runs it in each shard).
        SELECT DISTINCT ON (s.customer_id, pl.currency, mo.month)
               mo.month, pl.currency::text AS currency, s.customer_id,
               s.cancel_reason = 'DUNNING_EXHAUSTED' AS by_dunning
          FROM billing.subscription s
          JOIN billing.plan pl ON pl.id = s.plan_id
          JOIN months mo ON s.canceled_at >= mo.starts AND s.canceled_at < mo.ends
         ORDER BY s.customer_id, pl.currency, mo.month, s.canceled_at DESC, s.id DESC
    ), churned AS (
        -- Why a customer left: dunning when the last of its subscriptions in that currency
        -- canceled during the month was canceled by dunning exhaustion; otherwise voluntary.
        SELECT c.month, c.currency, c.customer_id, coalesce(lc.by_dunning, false) AS by_dunning
          FROM per_customer c
          LEFT JOIN last_cancel lc ON lc.month = c.month AND lc.currency = c.currency AND lc.customer_id = c.customer_id
         WHERE c.s > 0 AND c.e = 0
    ), mrr AS (
        SELECT p.month, p.currency, sum(p.s) AS s,
               coalesce(sum(p.s) FILTER (WHERE p.s > 0 AND p.e = 0), 0) AS churned,
               coalesce(sum(p.s - p.e) FILTER (WHERE p.e > 0 AND p.e < p.s), 0) AS contraction,
               coalesce(sum(p.e - p.s) FILTER (WHERE p.s > 0 AND p.e > p.s), 0) AS expansion
          FROM per_sub p GROUP BY 1, 2
    ), logos AS (
        SELECT c.month, c.currency, count(*) FILTER (WHERE c.s > 0) AS n_start,
               count(*) FILTER (WHERE c.s > 0 AND c.e = 0) AS n_churned
          FROM per_customer c GROUP BY 1, 2
    ), reasons AS (
        SELECT ch.month, ch.currency, count(*) FILTER (WHERE NOT ch.by_dunning) AS voluntary,
               count(*) FILTER (WHERE ch.by_dunning) AS dunning
          FROM churned ch GROUP BY 1, 2
    ), dunning AS (
        -- Invoices that entered dunning (declined at least once) and were settled this month:
        -- recovered when PAID, lost when written off (FAILED).
        SELECT mo.month, i.currency::text AS currency, count(*) AS settled,
               count(*) FILTER (WHERE i.status = 'PAID') AS recovered
          FROM months mo
          JOIN billing.invoice i
            ON i.attempt_count >= 1
           AND ((i.status = 'PAID' AND i.paid_at >= mo.starts AND i.paid_at < mo.ends)
             OR (i.status = 'FAILED' AND i.closed_at >= mo.starts AND i.closed_at < mo.ends))
         GROUP BY 1, 2
    ), keys AS (
        SELECT m.month, m.currency FROM mrr m UNION SELECT d.month, d.currency FROM dunning d
    )
    SELECT k.month, k.currency, coalesce(l.n_start, 0), coalesce(l.n_churned, 0),
           coalesce(r.voluntary, 0), coalesce(r.dunning, 0),
           CASE WHEN l.n_start > 0 THEN round(l.n_churned::numeric / l.n_start, 4) END,
           round(coalesce(m.s, 0), 2), round(coalesce(m.churned, 0), 2),
           CASE WHEN m.s > 0 THEN round(m.churned / m.s, 4) END,
           CASE WHEN m.s > 0 THEN round((m.churned + m.contraction - m.expansion) / m.s, 4) END,
           coalesce(d.settled, 0), coalesce(d.recovered, 0),
           CASE WHEN d.settled > 0 THEN round(d.recovered::numeric / d.settled, 4) END
      FROM keys k
      LEFT JOIN mrr m ON m.month = k.month AND m.currency = k.currency
      LEFT JOIN logos l ON l.month = k.month AND l.currency = k.currency
      LEFT JOIN reasons r ON r.month = k.month AND r.currency = k.currency
      LEFT JOIN dunning d ON d.month = k.month AND d.currency = k.currency
     WHERE coalesce(m.s, 0) > 0 OR coalesce(d.settled, 0) > 0
     ORDER BY k.month, k.currency;
END
$$;
COMMENT ON FUNCTION billing.report_churn(date, date) IS
'Churn per UTC month and currency: logo churn (customers with MRR at the month''s start and none at its end, split voluntary / dunning by the reason of their last cancellation in the month; rate = churned / customers at start), revenue churn (churned MRR / starting MRR) and net revenue churn ((churned + contraction - expansion) / starting MRR), and dunning recovery (invoices declined at least once settled in the month: PAID = recovered, FAILED = lost). Rates to 4 decimals, NULL without a base.
Returns one row per month and currency; BL422 for a bad span.';

CREATE OR REPLACE FUNCTION billing._straight_line(p_net numeric, p_start timestamptz, p_end timestamptz, p_at timestamptz)
RETURNS numeric
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT floor(p_net * least(s.span, greatest(0, (extract(epoch FROM p_at) - extract(epoch FROM p_start)) * 1000000)) / s.span)
      FROM (SELECT (extract(epoch FROM p_end) - extract(epoch FROM p_start)) * 1000000 AS span) s
$$;
COMMENT ON FUNCTION billing._straight_line(numeric, timestamptz, timestamptz, timestamptz) IS
'Private: the part of p_net recognized straight line over [p_start, p_end) by p_at, to the microsecond, floored (p_end > p_start).
Returns floor(p_net x elapsed / span).';

-- Revenue recognized: one function (_revenue_recognized) for every figure. It reads the service
-- ledger (17_ledger) for what was sold: every line in force (CHARGE and REVERSAL, plan and usage)
-- is recognized straight line over its span at its net without the tax it contains, so a change's
-- reversal takes the unused time off from the change to the period's end whatever the credit later
-- pays (credit recognized once: the invoice it pays sells its own lines), a cancellation's
-- reversal of an unpaid invoice's unserved time (UNSERVED) likewise, and a reversal of a line no
-- longer in force (its invoice voided or failed) counts nothing. A refund of the charge that paid
-- an invoice gives its net back when it succeeds, unless it is the engine's refund of a
-- cancellation (SUBSCRIPTION_CANCELED: the time it pays back is reversed by lines already).
CREATE OR REPLACE FUNCTION billing._revenue_recognized(p_from timestamptz, p_to timestamptz)
RETURNS TABLE (currency text, recognized bigint)
LANGUAGE plpgsql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    IF p_from IS NULL OR p_to IS NULL OR NOT isfinite(p_from) OR NOT isfinite(p_to) OR p_to < p_from THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('revenue needs finite instants p_from <= p_to, got %s and %s',
                             coalesce(p_from::text, 'NULL'), coalesce(p_to::text, 'NULL'));
    END IF;
    RETURN QUERY
    WITH lines AS (
        -- The lines whose span meets the window (a reversal's line is read whole: it may start
        -- before the window).
        SELECT l.customer_id, l.id, l.kind, l.reverses_id, l.invoice_id, l.depends_on, l.currency,
               l.net, l.tax, l.tax_inclusive, l.span_start, l.span_end
          FROM billing.service_line l
         WHERE l.span_end > p_from AND l.span_start < p_to
    ), fallen AS (
        -- Lines that depend on an invoice voided or failed (a join on = ANY: Citus plans no unnest
        -- of a column).
        SELECT DISTINCT l.customer_id, l.id
          FROM billing.service_line l
          JOIN billing.invoice i ON i.customer_id = l.customer_id AND i.id = ANY (l.depends_on)
         WHERE l.depends_on IS NOT NULL AND i.status IN ('VOID', 'FAILED')
    ), items AS (
        -- The lines of an invoice owed (PAID, OPEN, REVIEW) count together: they are its subtotal
        -- less what a cancellation took off. A change's lines without an invoice (its credit)
        -- count while in force (billing._line_in_force, set-based), a reversal only while its
        -- line is (credit for time whose invoice failed or was voided is reversed with it).
        SELECT c.currency::text AS currency,
               (c.net - CASE WHEN c.tax_inclusive THEN c.tax ELSE 0 END)::numeric AS net,
               c.span_start AS starts, c.span_end AS ends
          FROM lines c
          LEFT JOIN billing.invoice i ON i.customer_id = c.customer_id AND i.id = c.invoice_id
          LEFT JOIN fallen f ON f.customer_id = c.customer_id AND f.id = c.id
          LEFT JOIN billing.service_line o ON o.customer_id = c.customer_id AND o.id = c.reverses_id
          LEFT JOIN billing.invoice oi ON oi.customer_id = o.customer_id AND oi.id = o.invoice_id
          LEFT JOIN fallen fo ON fo.customer_id = o.customer_id AND fo.id = o.id
         WHERE CASE WHEN c.invoice_id IS NOT NULL THEN i.status IN ('PAID', 'OPEN', 'REVIEW')
                    ELSE f.id IS NULL
                         AND (c.reverses_id IS NULL
                              OR ((o.invoice_id IS NULL OR oi.status IN ('PAID', 'OPEN', 'REVIEW')) AND fo.id IS NULL)) END
        UNION ALL
        -- The tax an invoice contains is its document's (rounded on the invoice, not per line): the
        -- difference with its lines' contained tax, over its period, so that an invoice's lines
        -- are recognized at exactly its subtotal less its contained tax (less an UNSERVED note's).
        SELECT i.currency::text,
               (coalesce(t.line_tax, 0) - (i.tax_included - n.note_tax))::numeric,
               i.period_start, i.period_end
          FROM billing.invoice i
          JOIN (SELECT l.customer_id, l.invoice_id, sum(l.tax) FILTER (WHERE l.tax_inclusive) AS line_tax
                  FROM billing.service_line l WHERE l.invoice_id IS NOT NULL
                 GROUP BY l.customer_id, l.invoice_id) t ON t.customer_id = i.customer_id AND t.invoice_id = i.id
          LEFT JOIN (SELECT cn.customer_id, cn.invoice_id, sum(cn.subtotal) AS subtotal
                       FROM billing.credit_note cn WHERE cn.reason = 'UNSERVED'
                      GROUP BY cn.customer_id, cn.invoice_id) u ON u.customer_id = i.customer_id AND u.invoice_id = i.id
          CROSS JOIN LATERAL (SELECT CASE WHEN i.subtotal > 0 AND u.subtotal IS NOT NULL
                                          THEN floor(u.subtotal::numeric * i.tax_included / i.subtotal)::bigint
                                          ELSE 0 END AS note_tax) n
         WHERE i.status IN ('PAID', 'OPEN', 'REVIEW') AND i.period_end > p_from AND i.period_start < p_to
           AND coalesce(t.line_tax, 0) <> i.tax_included - n.note_tax
        UNION ALL
        -- A refund of the charge that paid an invoice gives its net back when it succeeds (tax
        -- refunded pro rata is not revenue).
        SELECT r.currency::text,
               -(r.amount - CASE WHEN i.subtotal + i.tax_amount > 0
                                 THEN floor(r.amount::numeric * (i.tax_amount + i.tax_included) / (i.subtotal + i.tax_amount))
                                 ELSE 0 END),
               r.settled_at, r.settled_at
          FROM billing.refund r
          JOIN billing.invoice i ON i.customer_id = r.customer_id AND i.id = r.invoice_id
         WHERE r.status = 'SUCCEEDED' AND r.reason <> 'SUBSCRIPTION_CANCELED' AND i.status = 'PAID'
           AND r.attempt_id = i.paid_attempt_id
           AND r.settled_at >= p_from AND r.settled_at < p_to
    )
    -- Straight line over each span, to the microsecond: what elapsed by p_to less what elapsed by
    -- p_from, each floored, so consecutive windows add up to each item exactly. An item without a
    -- span (a refund) counts whole at its instant.
    SELECT x.currency,
           sum(CASE WHEN x.ends <= x.starts
                    THEN CASE WHEN x.starts >= p_from AND x.starts < p_to THEN x.net ELSE 0 END
                    ELSE billing._straight_line(x.net, x.starts, x.ends, p_to)
                         - billing._straight_line(x.net, x.starts, x.ends, p_from) END)::bigint
      FROM items x
     GROUP BY x.currency
     ORDER BY x.currency;
END
$$;
COMMENT ON FUNCTION billing._revenue_recognized(timestamptz, timestamptz) IS
'Private: revenue recognized in [p_from, p_to) per currency (docs/reports.md, "Revenue"), from the service ledger: every line in force (a reversal only while its line is), net of the tax it contains, straight line over its span (a change''s or a cancellation''s reversal takes the unused time off: credit recognized once); less the net of refunds of the charge that paid an invoice succeeded in the window (not the engine''s refunds of a cancellation, whose time the lines reverse). Consecutive windows add up exactly.
Returns one row per currency with anything in the window; BL422 for a bad window.';

CREATE OR REPLACE FUNCTION billing.report_revenue(p_from date, p_to date)
RETURNS TABLE (month date, currency text, recognized bigint, invoiced bigint, tax bigint, cash_collected bigint,
               refunded bigint, net_cash bigint)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH months AS (SELECT * FROM billing._report_months(p_from, p_to)),
    recognized AS (
        -- billing._revenue_recognized per month: the months of one item add up to it exactly.
        SELECT mo.month, r.currency, r.recognized AS amount
          FROM months mo CROSS JOIN LATERAL billing._revenue_recognized(mo.starts, mo.ends) r
    ), invoiced AS (
        SELECT mo.month, i.currency::text AS currency, sum(i.subtotal - i.tax_included)::bigint AS net,
               sum(i.tax_amount + i.tax_included)::bigint AS tax
          FROM months mo JOIN billing.invoice i ON i.created_at >= mo.starts AND i.created_at < mo.ends
         WHERE i.status <> 'VOID'
         GROUP BY 1, 2
    ), cash AS (
        SELECT mo.month, a.currency::text AS currency, sum(a.amount)::bigint AS amount
          FROM months mo JOIN billing.payment_attempt a
            ON a.outcome = 'SUCCEEDED' AND a.result_at >= mo.starts AND a.result_at < mo.ends
         GROUP BY 1, 2
    ), refunds AS (
        SELECT mo.month, r.currency::text AS currency, sum(r.amount)::bigint AS amount
          FROM months mo JOIN billing.refund r
            ON r.status = 'SUCCEEDED' AND r.settled_at >= mo.starts AND r.settled_at < mo.ends
         GROUP BY 1, 2
    ), keys AS (
        SELECT x.month, x.currency FROM recognized x UNION SELECT x.month, x.currency FROM invoiced x
        UNION SELECT x.month, x.currency FROM cash x UNION SELECT x.month, x.currency FROM refunds x
    )
    SELECT k.month, k.currency, coalesce(rc.amount, 0), coalesce(iv.net, 0), coalesce(iv.tax, 0),
           coalesce(c.amount, 0), coalesce(rf.amount, 0), coalesce(c.amount, 0) - coalesce(rf.amount, 0)
      FROM keys k
      LEFT JOIN recognized rc ON rc.month = k.month AND rc.currency = k.currency
      LEFT JOIN invoiced iv ON iv.month = k.month AND iv.currency = k.currency
      LEFT JOIN cash c ON c.month = k.month AND c.currency = k.currency
      LEFT JOIN refunds rf ON rf.month = k.month AND rf.currency = k.currency
     ORDER BY k.month, k.currency;
END
$$;
COMMENT ON FUNCTION billing.report_revenue(date, date) IS
'Revenue per UTC month and currency: recognized (billing._revenue_recognized: each invoice owed, net of tax, straight line over its span, less the credit a change gave back over the unused time, less the net of refunds; VOID and FAILED invoices excluded), invoiced (net of tax, by creation) and its tax, cash collected (successful charges, tax included), refunded (successful refunds) and net cash. Minor units.
Returns one row per month and currency with any figure; BL422 for a bad span.';
