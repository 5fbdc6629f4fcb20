-- 14_tax: the taxes of a new invoice, chosen by the customer's billing address (docs/invoices.md).
-- One SQL function, inlined into the renewal statement (set-based) and called by _new_invoice, so
-- both paths compute the same figures. Re-applied after every migration: CREATE OR REPLACE only.
--
-- Rounding, per tax line (one line per rate), half away from zero, on the taxable amount (the
-- charge after its discount, before customer credit):
--   exclusive rate r:  round(base * r / 10000), added to the total;
--   inclusive rates:   round(base * r / (10000 + sum of the address's rates)), contained in base.
-- All active rates of one country are of the same kind (upsert_tax_rate refuses a mix).

CREATE OR REPLACE FUNCTION billing._invoice_tax(p_customer_id bigint, p_base bigint, p_enabled boolean DEFAULT true)
RETURNS TABLE (tax_amount bigint, tax_included bigint, tax_detail jsonb)
LANGUAGE sql STABLE  -- inlinable into the renewal statement: no SET clause, every name qualified
AS $$
    SELECT coalesce(sum(x.amount) FILTER (WHERE NOT x.inclusive), 0)::bigint,
           coalesce(sum(x.amount) FILTER (WHERE x.inclusive), 0)::bigint,
           pg_catalog.jsonb_build_object(
               'treatment', c.tax_status,
               'lines', coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
                            'code', x.code, 'name', x.name, 'rateBp', x.rate_bp, 'inclusive', x.inclusive,
                            'amount', x.amount) ORDER BY x.region NULLS FIRST, x.code) FILTER (WHERE x.code IS NOT NULL),
                            '[]'::jsonb))
      FROM billing.customer c
      LEFT JOIN LATERAL (
          SELECT r.code, r.name, r.rate_bp, r.inclusive, r.region,
                 pg_catalog.round(p_base::numeric * r.rate_bp
                                  / CASE WHEN r.inclusive THEN 10000 + sum(r.rate_bp) OVER () ELSE 10000 END)::bigint AS amount
            FROM billing.tax_rate r
           WHERE r.active AND r.country = c.country AND (r.region IS NULL OR r.region = c.region)
             AND c.tax_status = 'TAXABLE'
      ) x ON true
     WHERE c.id = p_customer_id AND p_enabled
     GROUP BY c.id, c.tax_status
$$;
COMMENT ON FUNCTION billing._invoice_tax(bigint, bigint, boolean) IS
'Private: the taxes on p_base (minor units, after discount) for the customer''s billing address and tax status: exclusive tax (added), inclusive tax (contained) and the detail stored on the invoice ({treatment, lines: [{code, name, rateBp, inclusive, amount}]}); one line per rate rounded half away from zero. No row when p_enabled is false (the renewal passes whether any rate exists).
Returns at most one row.';
