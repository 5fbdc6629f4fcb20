-- 14_tax: the taxes of a new invoice, chosen by the customer's billing address (docs/invoices.md).
-- Two forms of one computation: _invoice_tax_sql, the set-based text the renewal statement joins
-- (once per tax class of its batch: address, tax status, amount),
-- and _tax_of, the rates of one address, which the per-row path (_new_invoice) calls through
-- _invoice_tax_row in PL/pgSQL (Citus cannot plan a SQL function over its tables with parameters).
-- 600_invoices checks that renewals (the statement on one PostgreSQL) and new invoices (per row) agree.
-- Re-applied after every migration: CREATE OR REPLACE only.
--
-- Rounding, per tax line (one line per rate), half away from zero, on the taxable amount (the
-- charge after its discount, before customer credit):
--   exclusive rate r:  round(base * r / 10000), added to the total;
--   inclusive rates:   round(base * r / (10000 + sum of the address's rates)), contained in base.
-- All active rates of one country are of the same kind (upsert_tax_rate refuses a mix).

CREATE OR REPLACE FUNCTION billing._tax_of(p_country char(2), p_region text, p_tax_status text, p_base bigint)
RETURNS TABLE (tax_amount bigint, tax_included bigint, tax_detail jsonb)
LANGUAGE sql STABLE  -- reads the tax rates only (a reference table); called in a target list, not inlined
AS $$
    SELECT coalesce(sum(x.amount) FILTER (WHERE NOT x.inclusive), 0)::bigint,
           coalesce(sum(x.amount) FILTER (WHERE x.inclusive), 0)::bigint,
           pg_catalog.jsonb_build_object(
               'treatment', p_tax_status, 'country', p_country, 'region', p_region,
               'lines', coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
                            'code', x.code, 'name', x.name, 'rateBp', x.rate_bp, 'inclusive', x.inclusive,
                            'amount', x.amount) ORDER BY x.region NULLS FIRST, x.code),
                            '[]'::jsonb))
      FROM (SELECT r.code, r.name, r.rate_bp, r.inclusive, r.region,
                   pg_catalog.round(p_base::numeric * r.rate_bp
                                    / CASE WHEN r.inclusive THEN 10000 + sum(r.rate_bp) OVER () ELSE 10000 END)::bigint AS amount
              FROM billing.tax_rate r
             WHERE r.active AND r.country = p_country AND (r.region IS NULL OR r.region = p_region)
               AND p_tax_status = 'TAXABLE') x
$$;
COMMENT ON FUNCTION billing._tax_of(char, text, text, bigint) IS
'Private: the taxes on p_base (minor units, after discount) for a billing address (country, region) and tax status: exclusive tax (added), inclusive tax (contained) and the detail stored on the invoice ({treatment, country, region: the address it was computed for, lines: [{code, name, rateBp, inclusive, amount}]}); one line per rate rounded half away from zero.
Returns one row.';

-- Set-based: the text the renewal statement joins (40_renewal.sql's _renew_statement, on the tables
-- or on one shard group's shards: the rate table is a parameter), the same figures as _tax_of for
-- one tax class (address, tax status, taxable amount) given as expressions. The statement computes
-- it once per class of its batch (a batch of one plan's renewals in a few countries is a handful of
-- classes, not one computation per invoice: bench/renewal) and joins the classes back to its rows.
-- Always one row. It replaces the per-customer form (a join of the customer row per invoice).
DROP FUNCTION IF EXISTS billing._invoice_tax(bigint, bigint, boolean);
DROP FUNCTION IF EXISTS billing._invoice_tax_sql(text, text, text, text, text);
CREATE OR REPLACE FUNCTION billing._invoice_tax_sql(p_tax_rate text, p_country text, p_region text, p_tax_status text,
                                                    p_base text)
RETURNS text
LANGUAGE sql IMMUTABLE
AS $$
    SELECT pg_catalog.format($q$
    SELECT coalesce(sum(x.amount) FILTER (WHERE NOT x.inclusive), 0)::bigint AS tax_amount,
           coalesce(sum(x.amount) FILTER (WHERE x.inclusive), 0)::bigint AS tax_included,
           pg_catalog.jsonb_build_object(
               'treatment', %4$s, 'country', %2$s, 'region', %3$s,
               'lines', coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
                            'code', x.code, 'name', x.name, 'rateBp', x.rate_bp, 'inclusive', x.inclusive,
                            'amount', x.amount) ORDER BY x.region NULLS FIRST, x.code),
                            '[]'::jsonb)) AS tax_detail
      FROM (SELECT r.code, r.name, r.rate_bp, r.inclusive, r.region,
                   pg_catalog.round((%5$s)::numeric * r.rate_bp
                                    / CASE WHEN r.inclusive THEN 10000 + sum(r.rate_bp) OVER () ELSE 10000 END)::bigint AS amount
              FROM %1$s r
             WHERE r.active AND r.country = %2$s AND (r.region IS NULL OR r.region = %3$s)
               AND %4$s = 'TAXABLE') x$q$, p_tax_rate, p_country, p_region, p_tax_status, p_base)
$$;
COMMENT ON FUNCTION billing._invoice_tax_sql(text, text, text, text, text) IS
'Private, set-based: the text of a query giving the taxes on p_base (an expression) for the address p_country, p_region and tax status p_tax_status (expressions), with the rates of table p_tax_rate, as _tax_of computes them.
Returns the query text (one row: tax_amount, tax_included, tax_detail).';

-- Per-row: the customer read by its key (one shard on Citus), then the rates.
CREATE OR REPLACE FUNCTION billing._invoice_tax_row(p_customer_id bigint, p_base bigint,
                                                    OUT tax_amount bigint, OUT tax_included bigint, OUT tax_detail jsonb)
LANGUAGE plpgsql STABLE
-- (no SET search_path: a private helper, run inside its definer caller's; a SET costs ~7 us a call, issue 32)
AS $$
DECLARE
    v_customer billing.customer;
BEGIN
    tax_amount := 0;
    tax_included := 0;
    IF NOT EXISTS (SELECT 1 FROM billing.tax_rate r WHERE r.active) THEN
        RETURN;  -- no rate anywhere: no tax, no detail (as the renewal statement)
    END IF;
    SELECT * INTO v_customer FROM billing.customer c WHERE c.id = p_customer_id;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    -- Called in a target list, not inlined in FROM: Citus refuses a query into which a SQL function
    -- over one of its tables (the rates are a reference table) was inlined.
    SELECT (x.t).tax_amount, (x.t).tax_included, (x.t).tax_detail INTO tax_amount, tax_included, tax_detail
      FROM (SELECT billing._tax_of(v_customer.country, v_customer.region, v_customer.tax_status, p_base) AS t) x;
END
$$;
COMMENT ON FUNCTION billing._invoice_tax_row(bigint, bigint) IS
'Private, per row (PL/pgSQL: runs on Citus): the taxes on p_base for the customer''s billing address and tax status (_tax_of); 0, 0 and no detail while no rate is active.
Returns exclusive tax, inclusive tax and the detail.';
