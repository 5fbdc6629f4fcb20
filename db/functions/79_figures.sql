-- 79_figures: the run's figures over the whole database, for the demo's report (billing.demo.figures)
-- and dashboards: counts and sums by hour, by status, by currency. Read-only; granted to
-- billing_readonly (90_grants.sql). Re-applied after every migration: CREATE OR REPLACE only.
-- Whole-table reads: meant for a report after a run or an occasional dashboard, not a scrape.
-- Hours are truncated in UTC whatever the session's TimeZone. Joins go by customer_id (co-located on
-- Citus).

-- figures_by_hour: per UTC hour, what fell due and what was charged.
-- Returns (figure, hour, key, n): figure 'due' (key: the invoice kind; a renewal counts at its
-- period start, anything else when it fell due) and 'attempts' (key FIRST or RETRY; an attempt
-- counts in the hour of its first claim, a claim at an hour's end instant in the hour it ends).
CREATE OR REPLACE FUNCTION billing.figures_by_hour()
RETURNS TABLE (figure text, hour timestamptz, key text, n bigint)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    RETURN QUERY
    SELECT 'due'::text, date_trunc('hour', CASE WHEN i.kind = 'RENEWAL' THEN i.period_start ELSE i.due_at END, 'UTC'),
           i.kind::text, count(*)
      FROM billing.invoice i WHERE i.subtotal > 0 GROUP BY 2, 3;
    RETURN QUERY
    SELECT 'attempts'::text, date_trunc('hour', a.first_claimed_at - interval '1 microsecond', 'UTC'),
           CASE WHEN a.attempt_number > 0 THEN 'RETRY' ELSE 'FIRST' END, count(*)
      FROM billing.payment_attempt a GROUP BY 2, 3;
END
$$;

-- figures_counts: how many of each, by figure. Returns (figure, key, key2, n):
--   outcomes (key: the attempt's outcome, NULL in flight), tries (key: the attempt number),
--   invoices (kind, status), subscriptions (status, cancel reason or ''), plans (billing interval),
--   funnel (the invoices whose first attempt was declined: status, the number of the attempt that
--   paid, NULL when credit paid it), events (event type), and single counts (key and key2 NULL):
--   charged (invoices with an attempt), webhooks, trials, redemptions, discounted, seats, paused,
--   finalized, unfinalized, void_notes, refund_notes, taxed, tax_included, prorations, credits.
CREATE OR REPLACE FUNCTION billing.figures_counts()
RETURNS TABLE (figure text, key text, key2 text, n bigint)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    RETURN QUERY
    SELECT 'outcomes'::text, a.outcome::text, NULL::text, count(*) FROM billing.payment_attempt a GROUP BY 2;
    RETURN QUERY
    SELECT 'tries'::text, a.attempt_number::text, NULL::text, count(*) FROM billing.payment_attempt a GROUP BY 2;
    RETURN QUERY
    SELECT 'invoices'::text, i.kind::text, i.status::text, count(*) FROM billing.invoice i GROUP BY 2, 3;
    RETURN QUERY
    SELECT 'subscriptions'::text, s.status::text, coalesce(s.cancel_reason, '')::text, count(*)
      FROM billing.subscription s GROUP BY 2, 3;
    RETURN QUERY
    SELECT 'plans'::text, p.billing_interval::text, NULL::text, count(*)
      FROM billing.subscription s JOIN billing.plan p ON p.id = s.plan_id GROUP BY 2;
    RETURN QUERY
    SELECT 'funnel'::text, i.status::text, pa.attempt_number::text, count(*)
      FROM billing.invoice i
      LEFT JOIN billing.payment_attempt pa ON pa.customer_id = i.customer_id AND pa.id = i.paid_attempt_id
     WHERE EXISTS (SELECT 1 FROM billing.payment_attempt a
                    WHERE a.customer_id = i.customer_id AND a.invoice_id = i.id AND a.attempt_number = 0
                      AND a.outcome = 'DECLINED')
     GROUP BY 2, 3;
    RETURN QUERY
    SELECT 'events'::text, o.event_type::text, NULL::text, count(*) FROM billing.outbox_event o GROUP BY 2;
    RETURN QUERY
    SELECT c.figure, NULL::text, NULL::text, c.n FROM (VALUES
        ('charged', (SELECT count(DISTINCT a.invoice_id) FROM billing.payment_attempt a)),
        ('webhooks', (SELECT count(*) FROM billing.gateway_webhook)),
        ('trials', (SELECT count(*) FROM billing.subscription s WHERE s.trial_end IS NOT NULL)),
        ('redemptions', (SELECT count(*) FROM billing.coupon_redemption)),
        ('discounted', (SELECT count(*) FROM billing.invoice i WHERE i.discount_amount > 0)),
        ('seats', (SELECT count(*) FROM billing.subscription s WHERE s.quantity > 1)),
        ('paused', (SELECT count(*) FROM billing.subscription s WHERE s.status = 'PAUSED')),
        ('finalized', (SELECT count(*) FROM billing.invoice i WHERE i.number IS NOT NULL)),
        ('unfinalized', (SELECT count(*) FROM billing.invoice i WHERE i.number IS NULL AND i.status <> 'VOID')),
        ('void_notes', (SELECT count(*) FROM billing.credit_note c WHERE c.reason = 'VOID')),
        ('refund_notes', (SELECT count(*) FROM billing.credit_note c WHERE c.reason = 'REFUND')),
        ('taxed', (SELECT count(*) FROM billing.invoice i WHERE i.tax_amount > 0)),
        ('tax_included', (SELECT count(*) FROM billing.invoice i WHERE i.tax_included > 0)),
        ('prorations', (SELECT count(*) FROM billing.invoice i WHERE i.kind = 'PRORATION')),
        ('credits', (SELECT count(*) FROM billing.credit_entry c WHERE c.reason = 'PRORATION'))
    ) AS c(figure, n);
END
$$;

-- figures_revenue: the money, per currency, in minor units (numeric: a sum of bigints).
-- Returns (currency, collected, paid (how many invoices), failed, open, void, credit_applied,
-- proration (collected on PRORATION invoices), credit_granted (proration credit granted)).
CREATE OR REPLACE FUNCTION billing.figures_revenue()
RETURNS TABLE (currency text, collected numeric, paid bigint, failed numeric, open numeric, void numeric,
               credit_applied numeric, proration numeric, credit_granted numeric)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH money AS (
        SELECT i.currency::text AS currency,
               sum(i.amount) FILTER (WHERE i.status = 'PAID') AS collected,
               count(*) FILTER (WHERE i.status = 'PAID') AS paid,
               sum(i.amount) FILTER (WHERE i.status = 'FAILED') AS failed,
               sum(i.amount) FILTER (WHERE i.status = 'OPEN') AS open,
               sum(i.amount) FILTER (WHERE i.status = 'VOID') AS void,
               sum(i.credit_applied) AS credit_applied,
               sum(i.amount) FILTER (WHERE i.status = 'PAID' AND i.kind = 'PRORATION') AS proration
          FROM billing.invoice i GROUP BY 1
    ), credit AS (
        SELECT c.currency::text AS currency, sum(c.amount) AS granted
          FROM billing.credit_entry c WHERE c.reason = 'PRORATION' GROUP BY 1
    )
    SELECT m.currency, m.collected, m.paid, m.failed, m.open, m.void, m.credit_applied, m.proration, cr.granted
      FROM money m LEFT JOIN credit cr ON cr.currency = m.currency
     ORDER BY m.currency;
END
$$;

COMMENT ON FUNCTION billing.figures_by_hour() IS
'Per UTC hour, what fell due (by invoice kind) and which charge attempts were first claimed (FIRST or RETRY).
Whole-table read for the demo''s report and occasional dashboards; rows (figure, hour, key, n).';
COMMENT ON FUNCTION billing.figures_counts() IS
'The run''s counts over the whole database: subscriptions, invoices, attempts, refunds and events by status or kind.
Whole-table read for the demo''s report and occasional dashboards.';
COMMENT ON FUNCTION billing.figures_revenue() IS
'Per currency, in minor units (never summed across currencies): collected, PAID count, failed, open, void, credit applied, proration, credit granted.
Whole-table read for the demo''s report and occasional dashboards.';
