-- 80_usage_witness: what the demo's usage invariants read (billing.demo.usage, issue 29): plain reads
-- of the usage tables as they are, by public function (the driver's SQL stays in db.py, the demo
-- needs no table access), as 78_witness does for the other checks. No rule of the engine (no
-- usage_between, no _usage_amount, no due condition): the checks compare these rows with the request
-- stream's own record and the tiers computed in Python, so they stay an independent witness of what
-- the ingestion and the rating wrote. Read-only; granted to billing_readonly (90_grants.sql).
-- Whole-table reads: for a check after a run, not a scrape. Re-applied after every migration:
-- CREATE OR REPLACE only. Joins go by customer_id (co-located on Citus).

-- witness_usage_events: every stored usage event of one CloudEvents type, its key and its time.
-- Returns (customer_id, source, event_id, event_time), in key order.
CREATE OR REPLACE FUNCTION billing.witness_usage_events(p_event_type text)
RETURNS TABLE (customer_id bigint, source text, event_id text, event_time timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT e.customer_id, e.source, e.event_id, e.event_time FROM billing.usage_event e
     WHERE e.event_type = p_event_type ORDER BY e.customer_id, e.source, e.event_id;
END
$$;

-- witness_usage_counts: per customer with an exactly-once key or a rollup of the meter, its keys
-- (usage_dedup, every type) and the events the meter's hourly rollups count (usage_rollup).
-- Returns (customer_id, keys, counted), by customer.
CREATE OR REPLACE FUNCTION billing.witness_usage_counts(p_meter_code text)
RETURNS TABLE (customer_id bigint, keys bigint, counted bigint)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT coalesce(k.customer_id, r.customer_id), coalesce(k.n, 0), coalesce(r.n, 0)::bigint
      FROM (SELECT d.customer_id, count(*) AS n FROM billing.usage_dedup d GROUP BY d.customer_id) k
      FULL JOIN (SELECT u.customer_id, sum(u.events) AS n FROM billing.usage_rollup u
                  WHERE u.meter_code = p_meter_code GROUP BY u.customer_id) r ON r.customer_id = k.customer_id
     ORDER BY 1;
END
$$;

-- witness_usage_ratings: every rating of one meter (usage_rating), with the service line and the
-- invoice it billed on (NULL when it billed nothing). Returns (customer_id, subscription_id,
-- span_start, span_end, quantity, amount, billed, id, line_gross, line_item, invoice_id,
-- invoice_kind, invoice_status, currency), by subscription, span and rating.
CREATE OR REPLACE FUNCTION billing.witness_usage_ratings(p_meter_code text)
RETURNS TABLE (customer_id bigint, subscription_id bigint, span_start timestamptz, span_end timestamptz,
               quantity numeric, amount bigint, billed bigint, id bigint, line_gross bigint, line_item text,
               invoice_id bigint, invoice_kind text, invoice_status text, currency text)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT r.customer_id, r.subscription_id, r.span_start, r.span_end, r.quantity, r.amount, r.billed, r.id,
           l.gross, l.item, r.invoice_id, i.kind, i.status, p.currency::text
      FROM billing.usage_rating r
      JOIN billing.plan p ON p.id = r.plan_id
      LEFT JOIN billing.service_line l ON l.customer_id = r.customer_id AND l.id = r.line_id
      LEFT JOIN billing.invoice i ON i.customer_id = r.customer_id AND i.id = r.invoice_id
     WHERE r.meter_code = p_meter_code
     ORDER BY r.customer_id, r.subscription_id, r.span_start, r.id;
END
$$;

COMMENT ON FUNCTION billing.witness_usage_events(text) IS
'Every stored usage event of one CloudEvents type: (customer_id, source, event_id, event_time).
Whole-table read for the demo''s usage invariants.';
COMMENT ON FUNCTION billing.witness_usage_counts(text) IS
'Per customer: its exactly-once keys and the events the meter''s hourly rollups count (customer_id, keys, counted).
Whole-table read for the demo''s usage invariants.';
COMMENT ON FUNCTION billing.witness_usage_ratings(text) IS
'Every rating of one meter with the line and invoice it billed on (customer_id, subscription_id, span_start, span_end, quantity, amount, billed, id, line_gross, line_item, invoice_id, invoice_kind, invoice_status, currency).
Whole-table read for the demo''s usage invariants.';
