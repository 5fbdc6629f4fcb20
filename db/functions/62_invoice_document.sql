-- 62_invoice_document: tax rates, customers' billing details and the invoice document read by
-- GET /invoices/{id} (docs/invoices.md).
-- Re-applied after every migration: CREATE OR REPLACE only.

-- ---------------------------------------------------------------------------------------------
-- Configuration: tax rates and customers' billing details
-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION billing.upsert_tax_rate(
    p_code text, p_country text, p_region text, p_name text, p_rate_bp integer, p_inclusive boolean,
    p_active boolean DEFAULT true)
RETURNS billing.tax_rate
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_row billing.tax_rate;
    v_at  timestamptz := now();  -- a variable, not now(), in DO UPDATE (Citus wants no volatile call there)
BEGIN
    PERFORM billing._audit('upsert_tax_rate', jsonb_build_object('code', p_code, 'country', p_country, 'region', p_region, 'name', p_name, 'rate_bp', p_rate_bp, 'inclusive', p_inclusive, 'active', p_active));
    IF p_code IS NULL OR p_code !~ '^[A-Za-z0-9_-]{1,64}$' THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = format('a tax rate code is 1 to 64 letters, digits, _ or -, got %L', p_code);
    END IF;
    IF p_country IS NULL OR p_country !~ '^[A-Z]{2}$' THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = format('country must be an ISO 3166-1 alpha-2 code (FR, US...), got %L', p_country);
    END IF;
    IF p_region IS NOT NULL AND p_region !~ '^[A-Z0-9]{1,3}$' THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = format('region must be an ISO 3166-2 subdivision code without the country (QC, CA...), got %L', p_region);
    END IF;
    PERFORM billing._check_text('a tax name', p_name, 100);
    PERFORM billing._check_between('rate in basis points', p_rate_bp, 0, 10000);
    IF p_inclusive IS NULL OR p_active IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = 'p_inclusive and p_active must be true or false';
    END IF;
    -- One kind per country (a mix of inclusive and exclusive rates on one address is refused).
    PERFORM pg_advisory_xact_lock(hashtext('billing.tax_rate:' || p_country));
    IF p_active AND EXISTS (SELECT 1 FROM billing.tax_rate r
                             WHERE r.country = p_country AND r.active AND r.inclusive <> p_inclusive AND r.code <> p_code) THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('the active rates of %s are %s: a rate of the other kind is refused', p_country,
                             CASE WHEN p_inclusive THEN 'exclusive' ELSE 'inclusive' END),
            HINT = 'Deactivate them first (p_active false), or use the same kind.';
    END IF;
    INSERT INTO billing.tax_rate AS t (code, country, region, name, rate_bp, inclusive, active)
    VALUES (p_code, p_country, p_region, p_name, p_rate_bp, p_inclusive, p_active)
    ON CONFLICT ON CONSTRAINT tax_rate_pkey DO UPDATE
        SET country = excluded.country, region = excluded.region, name = excluded.name, rate_bp = excluded.rate_bp,
            inclusive = excluded.inclusive, active = excluded.active, updated_at = v_at
    RETURNING * INTO v_row;
    RETURN v_row;
END
$$;
COMMENT ON FUNCTION billing.upsert_tax_rate(text, text, text, text, integer, boolean, boolean) IS
'Creates or updates the tax rate p_code: p_rate_bp basis points (0..10000) in p_country (ISO alpha-2), optionally only in p_region, inclusive (extracted from prices) or exclusive (added); applies to invoices created afterwards (existing invoices keep theirs). p_active false retires it.
Returns the rate; BL422 for a bad code, country, region, name or rate, or an active rate whose kind differs from the country''s other active rates.';

CREATE OR REPLACE FUNCTION billing.set_customer_details(
    p_customer_id bigint, p_name text, p_email text, p_address text, p_city text, p_postal_code text,
    p_region text, p_country text, p_tax_id text, p_tax_status text DEFAULT 'TAXABLE')
RETURNS billing.customer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_row billing.customer;
    v_at  timestamptz := now();  -- a variable, not now(), in DO UPDATE (Citus wants no volatile call there)
BEGIN
    PERFORM billing._audit('set_customer_details', jsonb_build_object('customer_id', p_customer_id, 'name', p_name, 'email', p_email, 'country', p_country, 'region', p_region, 'tax_status', p_tax_status));
    PERFORM billing._check_customer_id(p_customer_id);
    PERFORM billing._check_one_of('tax status', p_tax_status, ARRAY['TAXABLE', 'EXEMPT', 'REVERSE_CHARGE'],
                                  'Use TAXABLE, EXEMPT or REVERSE_CHARGE.');
    IF p_email IS NOT NULL AND (p_email !~ '^[^@\s]+@[^@\s]+$' OR length(p_email) > 254) THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = format('email %L is not an address', left(p_email, 100));
    END IF;
    IF p_country IS NOT NULL AND p_country !~ '^[A-Z]{2}$' THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = format('country must be an ISO 3166-1 alpha-2 code, got %L', left(p_country, 10));
    END IF;
    IF p_region IS NOT NULL AND p_region !~ '^[A-Z0-9]{1,3}$' THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = format('region must be a subdivision code without the country, got %L', left(p_region, 10));
    END IF;
    IF p_tax_status = 'REVERSE_CHARGE' AND p_tax_id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = 'a reverse-charge customer needs a tax id';
    END IF;
    IF length(p_name) > 200 OR length(p_address) > 500 OR length(p_city) > 100 OR length(p_postal_code) > 20
       OR length(p_tax_id) > 50 OR btrim(p_name) = '' OR btrim(p_tax_id) = '' THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = 'name (1..200), address (..500), city (..100), postal code (..20) or tax id (1..50) out of bounds';
    END IF;
    INSERT INTO billing.customer AS c (id, name, email, address, city, postal_code, region, country, tax_id, tax_status)
    VALUES (p_customer_id, p_name, p_email, p_address, p_city, p_postal_code, p_region, p_country, p_tax_id, p_tax_status)
    ON CONFLICT ON CONSTRAINT customer_pkey DO UPDATE
        SET name = excluded.name, email = excluded.email, address = excluded.address, city = excluded.city,
            postal_code = excluded.postal_code, region = excluded.region, country = excluded.country,
            tax_id = excluded.tax_id, tax_status = excluded.tax_status, updated_at = v_at
    RETURNING * INTO v_row;
    RETURN v_row;
END
$$;
COMMENT ON FUNCTION billing.set_customer_details(bigint, text, text, text, text, text, text, text, text, text) IS
'Sets a customer''s billing details (created in UTC if unknown): name, email, address, city, postal code, region, country (ISO alpha-2; with the region it selects the tax rates), tax id and tax status (TAXABLE, EXEMPT, REVERSE_CHARGE). Applies to invoices created afterwards; finalized invoices keep the details they were issued with.
Returns the customer; BL422 for a bad email, country, region, status, lengths, or a reverse-charge customer without a tax id.';

-- ---------------------------------------------------------------------------------------------
-- The document
-- ---------------------------------------------------------------------------------------------
-- An invoice's tax breakdown: one entry per (rate, jurisdiction) with its base and amount. A change's
-- invoice records its entries line by line (house8: the new line at today's rates, the reversals at
-- the rates their lines were sold at, negative); another invoice's taxes are on its subtotal, at its
-- detail's address.
CREATE OR REPLACE FUNCTION billing._invoice_taxes(p_invoice billing.invoice)
RETURNS jsonb
LANGUAGE sql IMMUTABLE
AS $$
    SELECT coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
               'code', e->'code', 'name', e->'name', 'rateBp', e->'rateBp', 'inclusive', e->'inclusive',
               'country', CASE WHEN e ? 'country' THEN e->'country' ELSE p_invoice.tax_detail->'country' END,
               'region', CASE WHEN e ? 'region' THEN e->'region' ELSE p_invoice.tax_detail->'region' END,
               'base', coalesce(e->'base', pg_catalog.to_jsonb(p_invoice.subtotal)), 'amount', e->'amount') ORDER BY x.ord),
           '[]'::jsonb)
      FROM pg_catalog.jsonb_array_elements(coalesce(p_invoice.tax_detail->'lines', '[]'::jsonb)) WITH ORDINALITY x(e, ord)
$$;
COMMENT ON FUNCTION billing._invoice_taxes(billing.invoice) IS
'Private: an invoice''s tax breakdown, one entry per (rate, jurisdiction): {code, name, rateBp, inclusive, country, region, base, amount} (a change''s invoice: its lines'' entries, reversals negative; another: on its subtotal).
Returns the entries.';

CREATE OR REPLACE FUNCTION billing.get_invoice_document(p_invoice_id bigint)
RETURNS jsonb
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_invoice billing.invoice;
    v_lines   jsonb;
    v_status  text;
    v_bill_to jsonb;
    v_tz      text;
    v_notes   jsonb;
BEGIN
    -- Every read of a customer's rows on its own, then the document built from the values: on Citus a
    -- function called inside a query of one shard is sent to the worker with it.
    SELECT * INTO v_invoice FROM billing.invoice WHERE id = p_invoice_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'BL404',
            MESSAGE = format('invoice %s does not exist', coalesce(p_invoice_id::text, 'NULL'));
    END IF;
    IF v_invoice.number IS NOT NULL THEN
        SELECT jsonb_agg(to_jsonb(l) - 'customer_id' - 'invoice_id' ORDER BY l.line_no) INTO v_lines
          FROM billing.invoice_line l WHERE l.customer_id = v_invoice.customer_id AND l.invoice_id = v_invoice.id;
    ELSE
        SELECT c.tax_status INTO v_status FROM billing.customer c WHERE c.id = v_invoice.customer_id;
        SELECT jsonb_agg(to_jsonb(l) ORDER BY l.line_no) INTO v_lines FROM billing._invoice_lines(v_invoice, v_status) l;
    END IF;
    v_bill_to := coalesce(v_invoice.bill_to, billing._bill_to(v_invoice.customer_id));
    SELECT s.timezone INTO v_tz FROM billing.subscription s
     WHERE s.customer_id = v_invoice.customer_id AND s.id = v_invoice.subscription_id;
    SELECT jsonb_agg(jsonb_build_object(
               'id', n.id, 'number', n.number, 'reason', n.reason, 'refundId', n.refund_id,
               'subtotal', n.subtotal, 'taxAmount', n.tax_amount, 'total', n.total,
               'issuedAt', billing._utc_text(n.issued_at),
               'lines', (SELECT jsonb_agg(to_jsonb(cl) - 'customer_id' - 'credit_note_id' ORDER BY cl.line_no)
                           FROM billing.credit_note_line cl
                          WHERE cl.customer_id = n.customer_id AND cl.credit_note_id = n.id))
           ORDER BY n.id) INTO v_notes
      FROM billing.credit_note n
     WHERE n.customer_id = v_invoice.customer_id AND n.invoice_id = v_invoice.id;
    RETURN jsonb_build_object(
        'id', v_invoice.id, 'number', v_invoice.number, 'finalizedAt', billing._utc_text(v_invoice.finalized_at),
        'status', v_invoice.status, 'kind', v_invoice.kind, 'customerId', v_invoice.customer_id,
        'subscriptionId', v_invoice.subscription_id, 'currency', v_invoice.currency,
        'periodStart', billing._utc_text(v_invoice.period_start), 'periodEnd', billing._utc_text(v_invoice.period_end),
        'issuedAt', billing._utc_text(coalesce(v_invoice.finalized_at, v_invoice.created_at)),
        'dueAt', billing._utc_text(v_invoice.due_at), 'paidAt', billing._utc_text(v_invoice.paid_at),
        'timezone', v_tz,
        'billTo', v_bill_to,
        'subtotal', v_invoice.subtotal, 'taxAmount', v_invoice.tax_amount, 'taxIncluded', v_invoice.tax_included,
        'total', v_invoice.subtotal + v_invoice.tax_amount, 'creditApplied', v_invoice.credit_applied,
        'amountDue', v_invoice.amount - least(v_invoice.unserved, v_invoice.amount), 'amountRefunded', v_invoice.amount_refunded,
        'lines', coalesce(v_lines, '[]'::jsonb),
        'taxes', billing._invoice_taxes(v_invoice),
        'creditNotes', coalesce(v_notes, '[]'::jsonb));
END
$$;
COMMENT ON FUNCTION billing.get_invoice_document(bigint) IS
'The invoice as a document: number (NULL until finalized), status, bill-to details, amounts (subtotal, exclusive and included tax, total, credit applied, amount due, refunded), its tax breakdown (taxes: one entry per rate and jurisdiction with its base), its lines (written at finalization; a preview before) and its credit notes with their lines.
Returns a jsonb object; BL404 for an unknown invoice.';
