-- 75_reports: figures for the board (docs/reports.md): MRR and ARR per currency at any instant,
-- MRR movements per month, logo and revenue churn (voluntary versus dunning), dunning recovery,
-- revenue recognized per month next to cash collected. Read-only (billing_readonly may run them);
-- never summed across currencies; months are UTC calendar months.
-- Re-applied after every migration: CREATE OR REPLACE only.
--
-- A subscription's MRR at instant t comes from its history, not its current row: the non-VOID
-- invoice whose billed span covers t (the latest starting one when several do, e.g. a plan change),
-- unless the subscription was canceled at or before t; a live subscription (ACTIVE or PAST_DUE,
-- not canceling at period end) whose current period ended at or before t and is not renewed yet
-- keeps the terms of its last invoice (t ahead of the renewal job, or in the future). Its value is the recurring price of that
-- invoice's terms, net of its coupon discount and of included tax, normalized to a month:
--   plan_price x quantity x (subtotal - tax_included) / (subtotal + discount_amount) x factor
-- with factor 1/n for n months, 1/(12 n) for n years, 52/(12 n) for n weeks, 365/(12 n) for n days.
-- Trials (no invoice) and paused spans after the last billed period count 0.

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

CREATE OR REPLACE FUNCTION billing._mrr_at(p_at timestamptz)
RETURNS TABLE (subscription_id bigint, customer_id bigint, currency text, mrr numeric)
LANGUAGE plpgsql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    -- PL/pgSQL (a SQL function reading a distributed table with a parameter cannot be planned on
    -- Citus); an invoice and its subscription joined on (customer_id, id) and each subscription's
    -- invoice chosen per (customer_id, subscription_id): on Citus every part runs in each shard.
    RETURN QUERY
    WITH cover AS (
        SELECT DISTINCT ON (i.customer_id, i.subscription_id) i.*
          FROM billing.invoice i
          JOIN billing.subscription s ON s.customer_id = i.customer_id AND s.id = i.subscription_id
         WHERE i.status <> 'VOID' AND i.period_start <= p_at AND p_at < i.period_end
           AND (s.canceled_at IS NULL OR s.canceled_at > p_at)
         ORDER BY i.customer_id, i.subscription_id, i.period_start DESC, i.id DESC
    ), ongoing AS (
        -- Live subscriptions whose renewal for p_at is not billed yet (p_at is ahead of the
        -- renewal job, or in the future): their last terms go on. (No invoice covers p_at: the
        -- cover's condition, asked of the subscription's own invoices.)
        SELECT DISTINCT ON (i.customer_id, i.subscription_id) i.*
          FROM billing.subscription s
          JOIN billing.invoice i ON i.customer_id = s.customer_id AND i.subscription_id = s.id
         WHERE s.status IN ('ACTIVE', 'PAST_DUE') AND NOT s.cancel_at_period_end
           AND s.current_period_end <= p_at AND i.status <> 'VOID' AND i.period_end <= p_at
           AND NOT ((s.canceled_at IS NULL OR s.canceled_at > p_at)
                    AND EXISTS (SELECT 1 FROM billing.invoice c
                                 WHERE c.customer_id = s.customer_id AND c.subscription_id = s.id
                                   AND c.status <> 'VOID' AND c.period_start <= p_at AND p_at < c.period_end))
         ORDER BY i.customer_id, i.subscription_id, i.period_end DESC, i.id DESC
    )
    SELECT i.subscription_id, i.customer_id, i.currency::text,
           CASE WHEN i.subtotal + i.discount_amount = 0 THEN 0::numeric
                ELSE i.plan_price::numeric * i.quantity * (i.subtotal - i.tax_included)
                     * billing._mrr_factor(i.billing_interval, i.interval_count) / (i.subtotal + i.discount_amount) END
      FROM (SELECT * FROM cover UNION ALL SELECT * FROM ongoing) i;
END
$$;
COMMENT ON FUNCTION billing._mrr_at(timestamptz) IS
'Private: each subscription''s MRR at p_at from the invoice covering it (see the file''s header).
Returns one row per subscription with an invoice covering p_at.';

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

CREATE OR REPLACE FUNCTION billing.report_revenue(p_from date, p_to date)
RETURNS TABLE (month date, currency text, recognized bigint, invoiced bigint, tax bigint, cash_collected bigint,
               refunded bigint, net_cash bigint)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_first timestamptz;
    v_last  timestamptz;
BEGIN
    SELECT min(starts), max(ends) INTO v_first, v_last FROM billing._report_months(p_from, p_to);
    RETURN QUERY
    WITH months AS (SELECT * FROM billing._report_months(p_from, p_to)),
    billed AS (
        -- Net of tax; VOID (never owed) and FAILED (written off) invoices are not revenue.
        SELECT i.id, i.currency::text AS currency, i.subtotal - i.tax_included AS net, i.period_start, i.period_end,
               ((extract(epoch FROM i.period_end) - extract(epoch FROM i.period_start)) * 1000000)::numeric AS span
          FROM billing.invoice i
         WHERE i.status NOT IN ('VOID', 'FAILED') AND i.period_end > v_first AND i.period_start < v_last
    ), recognized AS (
        -- Straight line over the billed span, to the microsecond; each month gets
        -- floor(net x elapsed at its end / span) - floor(net x elapsed at its start / span), so
        -- the months of one invoice add up to its net exactly.
        SELECT mo.month, b.currency,
               sum(floor(b.net * least(b.span, greatest(0, (extract(epoch FROM mo.ends) - extract(epoch FROM b.period_start)) * 1000000)) / b.span)
                 - floor(b.net * least(b.span, greatest(0, (extract(epoch FROM mo.starts) - extract(epoch FROM b.period_start)) * 1000000)) / b.span))::bigint AS amount
          FROM months mo JOIN billed b ON b.period_start < mo.ends AND b.period_end > mo.starts
         GROUP BY 1, 2
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
'Revenue per UTC month and currency: recognized (each invoice''s amount net of tax spread straight-line over its billed span; VOID and FAILED invoices excluded), invoiced (net of tax, by creation) and its tax, cash collected (successful charges, tax included), refunded (successful refunds) and net cash. Minor units.
Returns one row per month and currency with any figure; BL422 for a bad span.';
