-- 75_reports: figures for the board (docs/reports.md): MRR and ARR per currency at any instant,
-- MRR movements per month, logo and revenue churn (voluntary versus dunning), dunning recovery,
-- revenue recognized per month next to cash collected. Read-only (billing_readonly may run them);
-- never summed across currencies; months are UTC calendar months.
-- Re-applied after every migration: CREATE OR REPLACE only.
--
-- One function per figure, used by the reports, the console (86_console) and the demo alike:
-- MRR by billing._mrr_points (each subscription's MRR at given instants), revenue recognized by
-- billing._revenue_recognized (per currency over a window). docs/reports.md states their rules:
-- MRR is net of discounts, seats and included tax, normalized to a month (_mrr_factor: a week is
-- 52/12 of a month, a day 365/12), 0 while paused or once canceled, a change counted from its
-- instant, a reverted upgrade never; revenue is each invoice owed net of tax straight line over
-- its span, less the unused time a change gave back as credit (credit recognized once), less the
-- net of refunds.

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

-- MRR: one function (_mrr_points) for every figure: report_mrr, the movements and churn, the
-- console's MRR now and its trend, the demo (through report_mrr).
CREATE OR REPLACE FUNCTION billing._mrr_points(p_points timestamptz[])
RETURNS TABLE (at timestamptz, subscription_id bigint, customer_id bigint, currency text, mrr numeric)
LANGUAGE plpgsql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    -- PL/pgSQL (a SQL function reading a distributed table with a parameter cannot be planned on
    -- Citus); invoices and subscriptions joined on (customer_id, id): each part runs in each shard.
    RETURN QUERY
    WITH pts AS MATERIALIZED (
        SELECT DISTINCT x AS at FROM unnest(p_points) x WHERE x IS NOT NULL
    ), latest AS (
        -- Inclusive tax is not MRR: the share net of it of each subscription's latest invoice (one
        -- of its current period: only those are read).
        SELECT DISTINCT ON (i.customer_id, i.subscription_id) i.customer_id, i.subscription_id,
               CASE WHEN i.subtotal > 0 THEN (i.subtotal - i.tax_included)::numeric / i.subtotal END AS net_share
          FROM billing.subscription s
          JOIN billing.invoice i ON i.customer_id = s.customer_id AND i.subscription_id = s.id
         WHERE i.status <> 'VOID' AND i.period_end > s.current_period_start
         ORDER BY i.customer_id, i.subscription_id, i.period_start DESC, i.id DESC
    ), subs AS (
        -- Where the subscription row itself says what is sold at t: from its last write (updated_at
        -- is the p_now of the call that made it; a change to another interval starts the new
        -- period at that instant or a microsecond later), and after its current period's end while
        -- it is not renewed yet (live_from). Nothing changed its terms since, so they were in force
        -- at t.
        SELECT s.customer_id, s.id, s.status, s.paused_at, s.canceled_at, s.cancel_at_period_end,
               s.current_period_end, s.period_price, s.plan_id,
               CASE WHEN s.status IN ('ACTIVE', 'PAST_DUE', 'PAUSED')
                    THEN least(s.updated_at, s.current_period_end) END AS live_from
          FROM billing.subscription s
    ), live AS (
        SELECT p.at, s.id AS subscription_id, s.customer_id, pl.currency::text AS currency,
               -- Paused (t is after its last write, so after the pause) or ended at its period end: 0.
               CASE WHEN s.status = 'PAUSED' OR (s.cancel_at_period_end AND p.at >= s.current_period_end) THEN 0::numeric
                    ELSE s.period_price * billing._mrr_factor(pl.billing_interval, pl.interval_count)
                         * coalesce(sh.net_share, 1) END AS mrr
          FROM pts p
          JOIN subs s ON p.at >= s.live_from
          JOIN billing.plan pl ON pl.id = s.plan_id
          LEFT JOIN latest sh ON sh.customer_id = s.customer_id AND sh.subscription_id = s.id
         WHERE s.canceled_at IS NULL OR s.canceled_at > p.at
    ), cover AS (
        -- Otherwise the invoice whose billed span covers t (the latest starting: a change's
        -- PRORATION or PLAN_CHANGE invoice starts at the change). A VOID invoice was never owed and
        -- a FAILED PRORATION invoice is an upgrade that was reverted: neither was sold.
        -- (Each invoice joined to the instants its span covers first: a pass over the invoices.)
        SELECT DISTINCT ON (p.at, i.customer_id, i.subscription_id)
               p.at, i.subscription_id, i.customer_id, i.currency::text AS currency,
               CASE WHEN i.subtotal + i.discount_amount = 0 THEN 0::numeric
                    ELSE i.plan_price::numeric * i.quantity * (i.subtotal - i.tax_included)
                         * billing._mrr_factor(i.billing_interval, i.interval_count) / (i.subtotal + i.discount_amount) END AS mrr
          FROM pts p
          JOIN billing.invoice i ON i.period_start <= p.at AND p.at < i.period_end
          JOIN subs s ON s.customer_id = i.customer_id AND s.id = i.subscription_id
         WHERE NOT coalesce(p.at >= s.live_from, false)
           AND i.status <> 'VOID' AND NOT (i.kind = 'PRORATION' AND i.status = 'FAILED')
           AND (s.canceled_at IS NULL OR s.canceled_at > p.at)
           AND NOT (s.status = 'PAUSED' AND s.paused_at <= p.at)
         ORDER BY p.at, i.customer_id, i.subscription_id, i.period_start DESC, i.id DESC
    )
    SELECT l.at, l.subscription_id, l.customer_id, l.currency, l.mrr FROM live l
    UNION ALL
    SELECT c.at, c.subscription_id, c.customer_id, c.currency, c.mrr FROM cover c;
END
$$;
COMMENT ON FUNCTION billing._mrr_points(timestamptz[]) IS
'Private: each subscription''s MRR at each instant of p_points (docs/reports.md, "MRR"): what was sold for that instant, net of discount, seats and included tax, normalized to a month (_mrr_factor); 0 paused or canceled.
Returns one row per instant and subscription with something sold then.';

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
    RETURN QUERY
    SELECT m.currency, count(*) FILTER (WHERE m.mrr > 0), count(DISTINCT m.customer_id) FILTER (WHERE m.mrr > 0),
           round(sum(m.mrr), 2), round(sum(m.mrr) * 12, 2)
      FROM billing._mrr_at(p_at) m
     GROUP BY m.currency
    HAVING sum(m.mrr) > 0
     ORDER BY m.currency;
END
$$;
COMMENT ON FUNCTION billing.report_mrr(timestamptz) IS
'Monthly and annual recurring revenue per currency at p_at (docs/reports.md): each subscription''s billed recurring price net of discount and included tax, normalized to a month (yearly / 12, weekly x 52 / 12); ARR = 12 x MRR. Amounts in minor units, 2 decimals.
Returns one row per currency with MRR; BL422 for a NULL or infinite p_at.';

CREATE OR REPLACE FUNCTION billing.report_mrr_movements(p_from date, p_to date)
RETURNS TABLE (month date, currency text, starting_mrr numeric, new_mrr numeric, expansion_mrr numeric,
               contraction_mrr numeric, churned_mrr numeric, ending_mrr numeric)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH per_sub AS (SELECT * FROM billing._mrr_month_ends(p_from, p_to))
    SELECT p.month, p.currency,
           round(sum(p.s), 2),
           round(coalesce(sum(p.e) FILTER (WHERE p.s = 0 AND p.e > 0), 0), 2),
           round(coalesce(sum(p.e - p.s) FILTER (WHERE p.s > 0 AND p.e > p.s), 0), 2),
           round(coalesce(sum(p.s - p.e) FILTER (WHERE p.e > 0 AND p.e < p.s), 0), 2),
           round(coalesce(sum(p.s) FILTER (WHERE p.s > 0 AND p.e = 0), 0), 2),
           round(sum(p.e), 2)
      FROM per_sub p
     GROUP BY p.month, p.currency
    HAVING sum(p.s) > 0 OR sum(p.e) > 0
     ORDER BY p.month, p.currency;
END
$$;
COMMENT ON FUNCTION billing.report_mrr_movements(date, date) IS
'MRR movements per UTC month (p_from''s month to p_to''s) and currency, comparing each subscription''s MRR at the month''s start and end: new (0 to some), expansion (up), contraction (down, positive figure), churned (some to 0); ending = starting + new + expansion - contraction - churned. Minor units, 2 decimals.
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

-- Revenue recognized: one function (_revenue_recognized) for every figure.
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
    WITH items AS (
        -- What was sold, net of tax, over its span: every invoice owed (not VOID, never owed; not
        -- FAILED, written off).
        SELECT i.currency::text AS currency, (i.subtotal - i.tax_included)::numeric AS net,
               i.period_start AS starts, i.period_end AS ends
          FROM billing.invoice i
         WHERE i.status NOT IN ('VOID', 'FAILED') AND i.period_end > p_from AND i.period_start < p_to
        UNION ALL
        -- The unused time a change gave back as credit, from the change to the end of its period:
        -- that time is not sold, whatever invoice the credit later pays (which is sold in full).
        -- On the balance at once (credit_entry with its period) or pending on unpaid invoices
        -- (credit_pending, PENDING or RELEASED; a released one's balance entry carries no period,
        -- so it is counted here once). Reversed credit (its invoices failed or were voided) was
        -- never given.
        SELECT e.currency::text, -e.amount::numeric, e.created_at, greatest(e.period_end, e.created_at)
          FROM billing.credit_entry e
         WHERE e.reason = 'PRORATION' AND e.period_start IS NOT NULL
           AND greatest(e.period_end, e.created_at) >= p_from AND e.created_at < p_to
        UNION ALL
        SELECT c.currency::text, -c.amount::numeric, c.created_at, greatest(c.period_end, c.created_at)
          FROM billing.credit_pending c
         WHERE c.status IN ('PENDING', 'RELEASED')
           AND greatest(c.period_end, c.created_at) >= p_from AND c.created_at < p_to
        UNION ALL
        -- What a cancellation took off an unpaid invoice counted above as time not served (its
        -- UNSERVED credit note, net of the tax it contains), from the cancellation to the invoice's
        -- end: that time was not sold (docs/money.md, "Unpaid is unpaid").
        SELECT n.currency::text,
               -(n.subtotal - CASE WHEN i.subtotal > 0 THEN floor(n.subtotal::numeric * i.tax_included / i.subtotal) ELSE 0 END),
               n.issued_at, greatest(i.period_end, n.issued_at)
          FROM billing.credit_note n
          JOIN billing.invoice i ON i.customer_id = n.customer_id AND i.id = n.invoice_id
         WHERE n.reason = 'UNSERVED' AND i.status NOT IN ('VOID', 'FAILED')
           AND greatest(i.period_end, n.issued_at) >= p_from AND n.issued_at < p_to
        UNION ALL
        -- A refund of a charge that paid an invoice counted above gives its net back when it
        -- succeeds (tax refunded pro rata is not revenue).
        SELECT r.currency::text,
               -(r.amount - CASE WHEN i.subtotal + i.tax_amount > 0
                                 THEN floor(r.amount::numeric * (i.tax_amount + i.tax_included) / (i.subtotal + i.tax_amount))
                                 ELSE 0 END),
               r.settled_at, r.settled_at
          FROM billing.refund r
          JOIN billing.invoice i ON i.customer_id = r.customer_id AND i.id = r.invoice_id
         WHERE r.status = 'SUCCEEDED' AND i.status NOT IN ('VOID', 'FAILED')
           AND r.settled_at >= p_from AND r.settled_at < p_to
    )
    -- Straight line over each span, to the microsecond: what elapsed by p_to less what elapsed by
    -- p_from, each floored, so consecutive windows add up to each item exactly. An item without a
    -- span (a refund, a change at its period's end) counts whole at its instant.
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
'Private: revenue recognized in [p_from, p_to) per currency (docs/reports.md, "Revenue"): each invoice owed, net of tax, straight line over its span; less the change credit over the unused time it gave back (credit recognized once); less what a cancellation took off an unpaid invoice as not served (UNSERVED credit note net of its contained tax, from the cancellation to the invoice''s end); less the net of refunds succeeded in the window. Consecutive windows add up exactly.
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
