-- 78_witness: what the demo's invariants read (billing.demo.invariants, documents, runner): plain
-- reads of the tables as they are, by public function, so that the driver's SQL stays in db.py and
-- the demo needs no table access. They apply no rule of the engine (no _due_*, no _tax_*, no money
-- helper): each is the table read that the check used to run itself, so the checks stay an
-- independent witness of what the engine wrote. Read-only; granted to billing_readonly
-- (90_grants.sql). Whole-table reads: for a check after a run, not a scrape. Re-applied after every
-- migration: CREATE OR REPLACE only. Joins go by customer_id (co-located on Citus).

-- witness_charged_twice: the invoices with more than one SUCCEEDED payment attempt (none, when the
-- promise holds). Returns (invoice_id, n), by invoice.
CREATE OR REPLACE FUNCTION billing.witness_charged_twice()
RETURNS TABLE (invoice_id bigint, n bigint)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT a.invoice_id, count(*) FROM billing.payment_attempt a
     WHERE a.outcome = 'SUCCEEDED' GROUP BY a.invoice_id HAVING count(*) > 1 ORDER BY a.invoice_id;
END
$$;

-- witness_invoices: every invoice with what it charges: its amount less what a cancellation took off
-- as not served (docs/money.md, "Unpaid is unpaid"), and whether the engine refunded a charge's
-- excess over that (a SUBSCRIPTION_CANCELED refund). Returns (id, status, amount, currency,
-- customer_id, excess_refunded), by id.
CREATE OR REPLACE FUNCTION billing.witness_invoices()
RETURNS TABLE (id bigint, status text, amount bigint, currency text, customer_id bigint, excess_refunded boolean)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT i.id, i.status, i.amount - least(i.unserved, i.amount), i.currency::text, i.customer_id,
           EXISTS (SELECT 1 FROM billing.refund r WHERE r.customer_id = i.customer_id AND r.invoice_id = i.id
                     AND r.reason = 'SUBSCRIPTION_CANCELED')
      FROM billing.invoice i ORDER BY i.id;
END
$$;

-- witness_periods: per subscription, its calendar (time zone, anchor, plan interval), its state, and
-- its INITIAL and RENEWAL invoices' kinds and periods in period order (arrays of one NULL when it
-- has none). Returns one row per subscription, by id.
CREATE OR REPLACE FUNCTION billing.witness_periods()
RETURNS TABLE (id bigint, status text, timezone text, billing_anchor timestamptz,
               current_period_start timestamptz, current_period_end timestamptz, trial_end timestamptz,
               canceled_at timestamptz, cancel_reason text, billing_interval text, interval_count integer,
               kinds text[], starts timestamptz[], ends timestamptz[])
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT s.id, s.status, s.timezone, s.billing_anchor, s.current_period_start, s.current_period_end,
           s.trial_end, s.canceled_at, s.cancel_reason, p.billing_interval, p.interval_count,
           array_agg(i.kind ORDER BY i.period_start),
           array_agg(i.period_start ORDER BY i.period_start),
           array_agg(i.period_end ORDER BY i.period_start)
      FROM billing.subscription s
      JOIN billing.plan p ON p.id = s.plan_id
      LEFT JOIN billing.invoice i ON i.customer_id = s.customer_id AND i.subscription_id = s.id
                                 AND i.kind IN ('INITIAL', 'RENEWAL')
     GROUP BY s.customer_id, s.id, p.billing_interval, p.interval_count
     ORDER BY s.id;
END
$$;

-- witness_restarts: where a subscription's calendar started again, as its events say: the period a
-- resume (SubscriptionResumed) or a reactivation (SubscriptionUpdated from CANCELED) began.
-- Returns (subscription_id, period_start).
CREATE OR REPLACE FUNCTION billing.witness_restarts()
RETURNS TABLE (subscription_id bigint, period_start timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    RETURN QUERY
    SELECT o.aggregate_id, (o.payload -> 'data' ->> 'currentPeriodStart')::timestamptz
      FROM billing.outbox_event o
     WHERE o.aggregate_type = 'subscription'
       AND (o.event_type = 'SubscriptionResumed'
            OR (o.event_type = 'SubscriptionUpdated'
                AND o.payload -> 'data' -> 'changes' -> 'status' ->> 'before' = 'CANCELED'));
END
$$;

-- witness_states: the ids whose state an event must announce: ('invoice', id) of every PAID invoice
-- and ('subscription', id) of every CANCELED subscription. Returns (aggregate, id). (The outbox left
-- behind is outbox_stats's.)
CREATE OR REPLACE FUNCTION billing.witness_states()
RETURNS TABLE (aggregate text, id bigint)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    RETURN QUERY SELECT 'invoice'::text, i.id FROM billing.invoice i WHERE i.status = 'PAID';
    RETURN QUERY SELECT 'subscription'::text, s.id FROM billing.subscription s WHERE s.status = 'CANCELED';
END
$$;

-- witness_cash: per currency, the cash the PAID invoices kept: the charge that paid each (an invoice
-- a cancellation cut is paid what it still bills, or more by a charge sent before, whose excess is
-- refunded; one paid by credit brought none) less what was refunded of it. Returns (currency, cash).
CREATE OR REPLACE FUNCTION billing.witness_cash()
RETURNS TABLE (currency text, cash numeric)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT i.currency::text, sum(coalesce(a.amount, 0) - i.amount_refunded)
      FROM billing.invoice i
      LEFT JOIN billing.payment_attempt a ON a.customer_id = i.customer_id AND a.id = i.paid_attempt_id
     WHERE i.status = 'PAID' GROUP BY 1 ORDER BY 1;
END
$$;

-- witness_refunds: every refund's idempotency key (the one sent to the gateway) and status.
-- Returns (idempotency_key, status), by id.
CREATE OR REPLACE FUNCTION billing.witness_refunds()
RETURNS TABLE (idempotency_key text, status text)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY SELECT r.idempotency_key, r.status FROM billing.refund r ORDER BY r.id;
END
$$;

-- witness_sample_invoices: the first finalized invoice (lowest id) of each kind worth rendering:
-- 'exclusive_vat_coupon' (PAID, exclusive tax and a discount), 'tax_included_jpy', 'reverse_charge'
-- (PAID), 'proration' (taxed), 'refunded' (a REFUND credit note), 'voided' (a VOID credit note),
-- 'usage' (a PAID USAGE invoice: usage rated in arrears, docs/usage.md); a
-- kind the database has none of has no row. Returns (sample, invoice_id).
CREATE OR REPLACE FUNCTION billing.witness_sample_invoices()
RETURNS TABLE (sample text, invoice_id bigint)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT k.sample, k.invoice_id FROM (VALUES
        ('exclusive_vat_coupon', (SELECT min(i.id) FROM billing.invoice i WHERE i.number IS NOT NULL
                                     AND i.tax_amount > 0 AND i.discount_amount > 0 AND i.status = 'PAID')),
        ('tax_included_jpy', (SELECT min(i.id) FROM billing.invoice i WHERE i.number IS NOT NULL
                                 AND i.tax_included > 0 AND i.currency = 'JPY')),
        ('reverse_charge', (SELECT min(i.id) FROM billing.invoice i WHERE i.number IS NOT NULL
                               AND i.tax_detail ->> 'treatment' = 'REVERSE_CHARGE' AND i.status = 'PAID')),
        ('proration', (SELECT min(i.id) FROM billing.invoice i WHERE i.number IS NOT NULL
                          AND i.kind = 'PRORATION' AND i.tax_amount > 0)),
        ('refunded', (SELECT min(n.invoice_id) FROM billing.credit_note n JOIN billing.invoice i
                         ON i.customer_id = n.customer_id AND i.id = n.invoice_id
                      WHERE i.number IS NOT NULL AND n.reason = 'REFUND')),
        ('voided', (SELECT min(n.invoice_id) FROM billing.credit_note n JOIN billing.invoice i
                       ON i.customer_id = n.customer_id AND i.id = n.invoice_id
                    WHERE i.number IS NOT NULL AND n.reason = 'VOID')),
        ('usage', (SELECT min(i.id) FROM billing.invoice i WHERE i.number IS NOT NULL
                      AND i.kind = 'USAGE' AND i.status = 'PAID'))
    ) AS k(sample, invoice_id)
     WHERE k.invoice_id IS NOT NULL;
END
$$;

COMMENT ON FUNCTION billing.witness_charged_twice() IS
'The invoices with more than one SUCCEEDED payment attempt (none when the promise holds): (invoice_id, n).
Whole-table read for the demo''s invariants.';
COMMENT ON FUNCTION billing.witness_invoices() IS
'Every invoice: id, status, what it charges (amount less the unserved part a cancellation took off), currency, customer, whether a cancellation''s excess was refunded.
Whole-table read for the demo''s invariants.';
COMMENT ON FUNCTION billing.witness_periods() IS
'Per subscription: its calendar and state, and its INITIAL and RENEWAL invoices'' kinds and periods in order.
Whole-table read for the demo''s invariants.';
COMMENT ON FUNCTION billing.witness_restarts() IS
'Where a subscription''s calendar started again (a resume, a reactivation), from its events: (subscription_id, period_start).
Whole-table read for the demo''s invariants.';
COMMENT ON FUNCTION billing.witness_states() IS
'The ids of the PAID invoices and CANCELED subscriptions: (aggregate, id).
Whole-table read for the demo''s invariants.';
COMMENT ON FUNCTION billing.witness_cash() IS
'Per currency, the cash the PAID invoices kept: the charge that paid each less its refunds.
Whole-table read for the demo''s invariants.';
COMMENT ON FUNCTION billing.witness_refunds() IS
'Every refund''s idempotency key and status, by id.
Whole-table read for the demo''s invariants.';
COMMENT ON FUNCTION billing.witness_sample_invoices() IS
'The first finalized invoice of each kind worth rendering (sample, invoice_id).
Whole-table read for the demo''s sample invoices.';
