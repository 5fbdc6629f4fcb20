-- 58_invoices: invoices as documents (docs/invoices.md): billing details and tax rates, the lines
-- of an invoice, finalization with a gapless legal number, immutability, credit notes for a
-- voided or refunded finalized invoice, and the document read by GET /invoices/{id}.
-- Re-applied after every migration: CREATE OR REPLACE only.
--
-- Finalization is a job step of its own (finalize_invoices, after create_due_invoices): the
-- renewal statement stays set-based and never waits on a numbering counter. An invoice is charged
-- as soon as it is created; it is numbered within seconds, and at the latest when a refund or a
-- void needs its number. A voided invoice that was never finalized is a draft discarded: no
-- number, no credit note.

-- ---------------------------------------------------------------------------------------------
-- Numbering: one counter row per series, taken under its row lock in the caller's transaction.
-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION billing._take_numbers(p_series text, p_count integer)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_first bigint;
BEGIN
    INSERT INTO billing.document_series (series) VALUES (p_series)
    ON CONFLICT ON CONSTRAINT document_series_pkey DO NOTHING;
    UPDATE billing.document_series SET next_number = next_number + p_count, updated_at = now()
     WHERE series = p_series
    RETURNING next_number - p_count INTO v_first;
    RETURN v_first;
END
$$;
COMMENT ON FUNCTION billing._take_numbers(text, integer) IS
'Private: takes p_count consecutive numbers of the series (its counter row stays locked until the transaction ends, so a rollback gives them back: no gap).
Returns the first number taken.';

CREATE OR REPLACE FUNCTION billing._document_number(p_series text, p_number bigint)
RETURNS text
LANGUAGE sql IMMUTABLE
AS $$
    SELECT p_series || '-' || pg_catalog.lpad(p_number::text, 6, '0')
$$;
COMMENT ON FUNCTION billing._document_number(text, bigint) IS
'Private: the printed number: <series>-<at least 6 digits> (2026-000123).
Returns the text.';

-- ---------------------------------------------------------------------------------------------
-- The lines of an invoice, from its terms. Written once at finalization; an invoice not yet
-- finalized shows the same lines as a preview.
-- ---------------------------------------------------------------------------------------------
-- PL/pgSQL: it reads the subscription (a distributed table on Citus) with a parameter.
CREATE OR REPLACE FUNCTION billing._invoice_lines(p_invoice billing.invoice, p_tax_status text)
RETURNS TABLE (line_no integer, kind text, description text, quantity integer, unit_amount bigint, amount bigint,
               tax_rate_code text, tax_rate_bp integer, tax_inclusive boolean,
               period_start timestamptz, period_end timestamptz)
LANGUAGE plpgsql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    -- Service dates are printed in the subscription's own zone (its calendar).
    v_tz text := coalesce((SELECT s.timezone FROM billing.subscription s
                            WHERE s.customer_id = p_invoice.customer_id AND s.id = p_invoice.subscription_id), 'UTC');
BEGIN
    RETURN QUERY
    WITH zone AS (
        SELECT v_tz AS tz
    ), charge AS (
        SELECT CASE WHEN p_invoice.kind = 'PRORATION' THEN 'PRORATION' ELSE 'PLAN' END AS kind,
               CASE WHEN p_invoice.kind = 'PRORATION'
                    THEN format('Plan change to %s (%s seat%s), prorated from %s to %s', p.code, p_invoice.quantity,
                                CASE WHEN p_invoice.quantity = 1 THEN '' ELSE 's' END,
                                to_char(p_invoice.period_start AT TIME ZONE z.tz, 'YYYY-MM-DD'),
                                to_char(p_invoice.period_end AT TIME ZONE z.tz, 'YYYY-MM-DD'))
                    ELSE format('%s (%s seat%s), %s to %s%s', p.code, p_invoice.quantity,
                                CASE WHEN p_invoice.quantity = 1 THEN '' ELSE 's' END,
                                to_char(p_invoice.period_start AT TIME ZONE z.tz, 'YYYY-MM-DD'),
                                to_char(p_invoice.period_end AT TIME ZONE z.tz, 'YYYY-MM-DD'),
                                CASE WHEN p_invoice.subtotal + p_invoice.discount_amount
                                          <> p_invoice.plan_price * p_invoice.quantity THEN ', prorated' ELSE '' END)
               END AS description
          FROM billing.plan p, zone z WHERE p.id = p_invoice.plan_id
    ), taxes AS (
        SELECT t.ord, t.line->>'code' AS code, t.line->>'name' AS name, (t.line->>'rateBp')::integer AS rate_bp,
               (t.line->>'inclusive')::boolean AS inclusive, (t.line->>'amount')::bigint AS amount
          FROM jsonb_array_elements(coalesce(p_invoice.tax_detail->'lines', '[]'::jsonb)) WITH ORDINALITY t(line, ord)
    ), treatment AS (
        SELECT coalesce(p_invoice.tax_detail->>'treatment', p_tax_status, 'TAXABLE') AS status
    ), all_lines AS (
        SELECT 1 AS ord, c.kind, c.description, p_invoice.quantity, p_invoice.plan_price AS unit_amount,
               p_invoice.subtotal + p_invoice.discount_amount AS amount,
               NULL::text AS code, NULL::integer AS bp, NULL::boolean AS incl,
               p_invoice.period_start AS ps, p_invoice.period_end AS pe
          FROM charge c
        UNION ALL
        SELECT 2, 'DISCOUNT', format('Coupon %s', p_invoice.coupon_code), NULL, NULL, -p_invoice.discount_amount,
               NULL, NULL, NULL, NULL, NULL
         WHERE p_invoice.discount_amount > 0
        UNION ALL
        SELECT 3 + t.ord, 'TAX',
               format('%s %s%%%s', t.name, trim(trailing '.' FROM trim(trailing '0' FROM to_char(t.rate_bp / 100.0, 'FM990.00'))),
                      CASE WHEN t.inclusive THEN ' (included)' ELSE '' END),
               NULL, NULL, t.amount, t.code, t.rate_bp, t.inclusive, NULL, NULL
          FROM taxes t
        UNION ALL
        -- Every invoice has a tax line: an exempt, reverse-charge or untaxed one says so at 0.
        SELECT 3, 'TAX',
               CASE tr.status WHEN 'EXEMPT' THEN 'Tax exempt'
                              WHEN 'REVERSE_CHARGE' THEN 'Reverse charge: tax to be accounted for by the recipient'
                              ELSE 'No tax' END,
               NULL, NULL, 0, NULL, 0, false, NULL, NULL
          FROM treatment tr
         WHERE NOT EXISTS (SELECT 1 FROM taxes)
        UNION ALL
        SELECT 1000, 'CREDIT', 'Customer credit applied', NULL, NULL, -p_invoice.credit_applied,
               NULL, NULL, NULL, NULL, NULL
         WHERE p_invoice.credit_applied > 0
    )
    SELECT (row_number() OVER (ORDER BY a.ord))::integer, a.kind, a.description, a.quantity, a.unit_amount, a.amount,
           a.code, a.bp, a.incl, a.ps, a.pe
      FROM all_lines a
     ORDER BY a.ord;
END
$$;
COMMENT ON FUNCTION billing._invoice_lines(billing.invoice, text) IS
'Private: the document lines of an invoice from its terms (service dates in the subscription''s zone): PLAN (or PRORATION) = subtotal + discount, DISCOUNT, one TAX line per rate applied (or one at 0 saying exempt / reverse charge / no tax), CREDIT.
Returns the lines in order.';

-- ---------------------------------------------------------------------------------------------
-- Finalization
-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION billing._bill_to(p_customer_id bigint)
RETURNS jsonb
LANGUAGE plpgsql STABLE  -- PL/pgSQL: it reads the customer (a distributed table on Citus) with a parameter
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    RETURN (SELECT jsonb_strip_nulls(jsonb_build_object(
                'customerId', c.id, 'name', c.name, 'email', c.email, 'address', c.address, 'city', c.city,
                'postalCode', c.postal_code, 'region', c.region, 'country', c.country, 'taxId', c.tax_id,
                'taxStatus', c.tax_status))
              FROM billing.customer c WHERE c.id = p_customer_id);
END
$$;
COMMENT ON FUNCTION billing._bill_to(bigint) IS
'Private: the customer''s billing details as printed on a document.
Returns a jsonb object.';

-- Finalizes the given invoices (locked by the caller, not finalized, not VOID) in id order.
CREATE OR REPLACE FUNCTION billing._finalize(p_ids bigint[], p_now timestamptz)
RETURNS integer
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_series  text := to_char(p_now AT TIME ZONE 'UTC', 'YYYY');
    v_first   bigint;
    v_count   integer := coalesce(cardinality(p_ids), 0);
    v_invoice billing.invoice;
    v_done    integer := 0;
BEGIN
    IF v_count = 0 THEN
        RETURN 0;
    END IF;
    v_first := billing._take_numbers(v_series, v_count);
    IF billing._distributed('billing.customer') THEN
        -- Citus: one invoice at a time by (customer_id, id) (this statement would span shards); the
        -- rows (locked by the caller) read first, then finalized.
        FOREACH v_invoice IN ARRAY ARRAY(SELECT i FROM billing.invoice i WHERE i.id = ANY (p_ids) ORDER BY i.id) LOOP
            PERFORM billing._finalize_one(v_invoice, p_now, billing._document_number(v_series, v_first + v_done));
            v_done := v_done + 1;
        END LOOP;
        RETURN v_done;
    END IF;
    WITH numbered AS (
        SELECT i.id, v_first + row_number() OVER (ORDER BY i.id) - 1 AS n
          FROM billing.invoice i WHERE i.id = ANY (p_ids)
    ), done AS (
        UPDATE billing.invoice i
           SET number = billing._document_number(v_series, n.n), finalized_at = p_now,
               bill_to = billing._bill_to(i.customer_id)
          FROM numbered n
         WHERE i.id = n.id
        RETURNING i.*
    )
    INSERT INTO billing.invoice_line (customer_id, invoice_id, line_no, kind, description, quantity, unit_amount, amount,
                                      tax_rate_code, tax_rate_bp, tax_inclusive, period_start, period_end)
    SELECT d.customer_id, d.id, l.line_no, l.kind, l.description, l.quantity, l.unit_amount, l.amount,
           l.tax_rate_code, l.tax_rate_bp, l.tax_inclusive, l.period_start, l.period_end
      FROM done d
     CROSS JOIN LATERAL billing._invoice_lines(d::billing.invoice, d.bill_to->>'taxStatus') l;

    -- The lines must add up to the invoice's figures (a bug here must not print a wrong document).
    PERFORM 1 FROM billing.invoice i
      LEFT JOIN billing._invoice_totals(p_ids) t ON t.invoice_id = i.id
     WHERE i.id = ANY (p_ids)
       AND (t.invoice_id IS NULL OR t.subtotal <> i.subtotal OR t.tax_amount <> i.tax_amount
            OR t.tax_included <> i.tax_included OR t.amount_due <> i.amount);
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'XX000', MESSAGE = 'invoice lines do not add up to the invoice totals';
    END IF;
    RETURN v_count;
END
$$;
COMMENT ON FUNCTION billing._finalize(bigint[], timestamptz) IS
'Private: numbers the given locked invoices (gapless, series = UTC year of p_now, in id order), snapshots the bill-to details and writes their lines; checks the lines add up to the invoice figures.
Returns how many were finalized.';

-- One invoice, by (customer_id, id): the per-row paths (finalize_invoice, a refund's credit note) and
-- the batch on Citus. Without p_number it takes the next number of the series (the caller holds the
-- invoice's row lock: invoice first, then the series' counter, as everywhere).
CREATE OR REPLACE FUNCTION billing._finalize_one(p_invoice billing.invoice, p_now timestamptz, p_number text DEFAULT NULL)
RETURNS billing.invoice
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_series  text := to_char(p_now AT TIME ZONE 'UTC', 'YYYY');
    v_number  text := coalesce(p_number, billing._document_number(v_series, billing._take_numbers(v_series, 1)));
    v_bill_to jsonb := billing._bill_to(p_invoice.customer_id);
    v_invoice billing.invoice;
    v_totals  record;
BEGIN
    UPDATE billing.invoice SET number = v_number, finalized_at = p_now, bill_to = v_bill_to
     WHERE customer_id = p_invoice.customer_id AND id = p_invoice.id
    RETURNING * INTO v_invoice;
    INSERT INTO billing.invoice_line (customer_id, invoice_id, line_no, kind, description, quantity, unit_amount, amount,
                                      tax_rate_code, tax_rate_bp, tax_inclusive, period_start, period_end)
    SELECT v_invoice.customer_id, v_invoice.id, l.line_no, l.kind, l.description, l.quantity, l.unit_amount, l.amount,
           l.tax_rate_code, l.tax_rate_bp, l.tax_inclusive, l.period_start, l.period_end
      FROM billing._invoice_lines(v_invoice, v_bill_to->>'taxStatus') l;
    -- The lines must add up to the invoice's figures (a bug here must not print a wrong document).
    SELECT * INTO v_totals FROM billing._invoice_totals(v_invoice.customer_id, ARRAY[v_invoice.id]);
    IF v_totals.invoice_id IS NULL OR v_totals.subtotal <> v_invoice.subtotal OR v_totals.tax_amount <> v_invoice.tax_amount
       OR v_totals.tax_included <> v_invoice.tax_included OR v_totals.amount_due <> v_invoice.amount THEN
        RAISE EXCEPTION USING ERRCODE = 'XX000', MESSAGE = 'invoice lines do not add up to the invoice totals';
    END IF;
    RETURN v_invoice;
END
$$;
COMMENT ON FUNCTION billing._finalize_one(billing.invoice, timestamptz, text) IS
'Private: finalizes one locked invoice by (customer_id, id): its number (p_number, or the next of the series of p_now''s UTC year), bill-to snapshot and lines; checks the lines add up to its figures.
Returns the invoice finalized.';

CREATE OR REPLACE FUNCTION billing.finalize_invoices(p_batch_size integer DEFAULT 500, p_now timestamptz DEFAULT now())
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_ids     bigint[];
    v_keys    record;
    v_invoice billing.invoice;
    v_locked  billing.invoice[] := '{}';
    v_series  text := to_char(p_now AT TIME ZONE 'UTC', 'YYYY');
    v_first   bigint;
    i         integer;
BEGIN
    PERFORM billing._check_now(p_now);
    PERFORM billing._check_between('batch size', p_batch_size, 1, 100000);
    -- The series' counter first (waiting): one finalizer at a time per series, whose invoices
    -- are then picked in id order, skipping those another transaction holds (a charge, a void).
    PERFORM billing._take_numbers(v_series, 0);
    IF billing._distributed('billing.customer') THEN
        -- Citus (convention 3 of docs/scaling.md): the candidates read unlocked over every shard, then
        -- each locked by (customer_id, id), SKIP LOCKED, its condition checked again on the locked row.
        SELECT array_agg(x.customer_id ORDER BY x.id) AS customers, array_agg(x.id ORDER BY x.id) AS ids INTO v_keys
          FROM (SELECT i.customer_id, i.id FROM billing.invoice i
                 WHERE i.number IS NULL AND i.status <> 'VOID'
                 ORDER BY i.id LIMIT p_batch_size) x;
        FOR i IN 1..coalesce(cardinality(v_keys.ids), 0) LOOP
            SELECT * INTO v_invoice FROM billing.invoice
             WHERE customer_id = v_keys.customers[i] AND id = v_keys.ids[i] AND number IS NULL AND status <> 'VOID'
               FOR UPDATE SKIP LOCKED;
            IF FOUND THEN
                v_locked := v_locked || v_invoice;
            END IF;
        END LOOP;
        IF cardinality(v_locked) = 0 THEN
            RETURN 0;
        END IF;
        v_first := billing._take_numbers(v_series, cardinality(v_locked));
        FOR i IN 1..cardinality(v_locked) LOOP
            PERFORM billing._finalize_one(v_locked[i], p_now, billing._document_number(v_series, v_first + i - 1));
        END LOOP;
        RETURN cardinality(v_locked);
    END IF;
    SELECT array_agg(id ORDER BY id) INTO v_ids
      FROM (SELECT i.id FROM billing.invoice i
             WHERE i.number IS NULL AND i.status <> 'VOID'
             ORDER BY i.id
             LIMIT p_batch_size
               FOR UPDATE SKIP LOCKED) x;
    RETURN billing._finalize(v_ids, p_now);
END
$$;
COMMENT ON FUNCTION billing.finalize_invoices(integer, timestamptz) IS
'Finalizes up to p_batch_size invoices not yet finalized (any status but VOID), oldest first: each gets its legal number <year>-<6 digits> from the gapless series of p_now''s UTC year, its bill-to details and its lines; its document never changes afterwards. Run by the renewal job after create_due_invoices.
Returns how many were finalized: 0 means none is waiting.';

CREATE OR REPLACE FUNCTION billing.finalize_invoice(p_invoice_id bigint, p_now timestamptz DEFAULT now())
RETURNS billing.invoice
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_invoice billing.invoice;
    v_customer_id bigint;
BEGIN
    PERFORM billing._check_now(p_now);
    v_customer_id := billing._invoice_customer(p_invoice_id);
    -- Lock order: the invoice, then the series' counter (in _finalize_one), as the refund and void
    -- paths do; finalize_invoices takes the counter first but never waits for an invoice (SKIP
    -- LOCKED), so no cycle can form.
    SELECT * INTO v_invoice FROM billing.invoice WHERE customer_id = v_customer_id AND id = p_invoice_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'BL404',
            MESSAGE = format('invoice %s does not exist', coalesce(p_invoice_id::text, 'NULL'));
    END IF;
    IF v_invoice.number IS NOT NULL THEN
        RETURN v_invoice;
    END IF;
    IF v_invoice.status = 'VOID' THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('invoice %s was voided before it was finalized: it is never numbered', p_invoice_id);
    END IF;
    RETURN billing._finalize_one(v_invoice, p_now);
END
$$;
COMMENT ON FUNCTION billing.finalize_invoice(bigint, timestamptz) IS
'Finalizes one invoice now (as finalize_invoices does); idempotent: a finalized invoice is returned unchanged.
Returns the invoice; BL404 for an unknown id, BL422 for an invoice voided before it was finalized.';

DROP VIEW IF EXISTS billing.invoice_totals;
-- PL/pgSQL (the lines are a distributed table on Citus); with p_customer_id, the lines of one customer
-- only (one shard group on Citus).
CREATE OR REPLACE FUNCTION billing._invoice_totals(p_customer_id bigint, p_invoice_ids bigint[])
RETURNS TABLE (invoice_id bigint, subtotal bigint, tax_amount bigint, tax_included bigint, total bigint,
               credit_applied bigint, amount_due bigint)
LANGUAGE plpgsql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    -- One query text for both forms: the customer's filter is a constant fragment (no input in it).
    RETURN QUERY EXECUTE format($q$
    SELECT l.invoice_id,
           sum(l.amount) FILTER (WHERE l.kind IN ('PLAN', 'PRORATION', 'DISCOUNT'))::bigint,
           coalesce(sum(l.amount) FILTER (WHERE l.kind = 'TAX' AND NOT l.tax_inclusive), 0)::bigint,
           coalesce(sum(l.amount) FILTER (WHERE l.kind = 'TAX' AND l.tax_inclusive), 0)::bigint,
           (sum(l.amount) FILTER (WHERE l.kind IN ('PLAN', 'PRORATION', 'DISCOUNT'))
            + coalesce(sum(l.amount) FILTER (WHERE l.kind = 'TAX' AND NOT l.tax_inclusive), 0))::bigint,
           coalesce(-sum(l.amount) FILTER (WHERE l.kind = 'CREDIT'), 0)::bigint,
           (sum(l.amount) FILTER (WHERE l.kind <> 'TAX' OR NOT l.tax_inclusive))::bigint
      FROM billing.invoice_line l
     WHERE %s l.invoice_id = ANY ($1)
     GROUP BY l.invoice_id$q$, CASE WHEN p_customer_id IS NULL THEN '' ELSE 'l.customer_id = $2 AND' END)
    USING p_invoice_ids, p_customer_id;
END
$$;
COMMENT ON FUNCTION billing._invoice_totals(bigint, bigint[]) IS
'Private: totals of finalized invoices computed from their lines: subtotal (charges and discounts), exclusive tax, inclusive tax, total, credit applied and amount due; of one customer''s invoices when p_customer_id is given.
Returns one row per invoice that has lines.';

CREATE OR REPLACE FUNCTION billing._invoice_totals(p_invoice_ids bigint[])
RETURNS TABLE (invoice_id bigint, subtotal bigint, tax_amount bigint, tax_included bigint, total bigint,
               credit_applied bigint, amount_due bigint)
LANGUAGE plpgsql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    RETURN QUERY SELECT * FROM billing._invoice_totals(NULL, p_invoice_ids);
END
$$;
COMMENT ON FUNCTION billing._invoice_totals(bigint[]) IS
'Private: _invoice_totals of the given invoices, whatever their customers.
Returns one row per invoice that has lines.';

-- ---------------------------------------------------------------------------------------------
-- Immutability: a finalized invoice's document never changes; lines and credit notes are
-- written once. Payment state (status, attempts, paid_at, refunds) still moves.
-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION billing._document_immutable()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'BL409',
        MESSAGE = format('%s: a finalized document never changes (%s refused)', TG_TABLE_NAME,
                         CASE WHEN TG_TABLE_NAME = 'invoice' THEN 'invoice ' || (to_jsonb(OLD)->>'id') || ' ' || TG_OP
                              ELSE TG_OP END),
        HINT = 'Void or refund it: a credit note is issued.';
END
$$;
COMMENT ON FUNCTION billing._document_immutable() IS
'Private trigger: refuses a change of a finalized invoice''s document fields, and any UPDATE or DELETE of invoice lines, credit notes and their lines.
Returns nothing; raises BL409.';

CREATE OR REPLACE TRIGGER invoice_document_immutable
    BEFORE UPDATE ON billing.invoice
    FOR EACH ROW WHEN (OLD.number IS NOT NULL AND (
        NEW.number, NEW.finalized_at, NEW.bill_to, NEW.customer_id, NEW.kind, NEW.period_start, NEW.period_end,
        NEW.subtotal, NEW.tax_amount, NEW.tax_included, NEW.tax_detail, NEW.credit_applied, NEW.amount, NEW.currency,
        NEW.plan_id, NEW.plan_price, NEW.quantity, NEW.discount_amount, NEW.coupon_code, NEW.created_at)
      IS DISTINCT FROM (
        OLD.number, OLD.finalized_at, OLD.bill_to, OLD.customer_id, OLD.kind, OLD.period_start, OLD.period_end,
        OLD.subtotal, OLD.tax_amount, OLD.tax_included, OLD.tax_detail, OLD.credit_applied, OLD.amount, OLD.currency,
        OLD.plan_id, OLD.plan_price, OLD.quantity, OLD.discount_amount, OLD.coupon_code, OLD.created_at))
    EXECUTE FUNCTION billing._document_immutable();

CREATE OR REPLACE TRIGGER invoice_finalized_never_deleted
    BEFORE DELETE ON billing.invoice
    FOR EACH ROW WHEN (OLD.number IS NOT NULL)
    EXECUTE FUNCTION billing._document_immutable();

CREATE OR REPLACE TRIGGER invoice_line_immutable
    BEFORE UPDATE OR DELETE ON billing.invoice_line
    FOR EACH ROW EXECUTE FUNCTION billing._document_immutable();
CREATE OR REPLACE TRIGGER credit_note_immutable
    BEFORE UPDATE OR DELETE ON billing.credit_note
    FOR EACH ROW EXECUTE FUNCTION billing._document_immutable();
CREATE OR REPLACE TRIGGER credit_note_line_immutable
    BEFORE UPDATE OR DELETE ON billing.credit_note_line
    FOR EACH ROW EXECUTE FUNCTION billing._document_immutable();

-- ---------------------------------------------------------------------------------------------
-- Credit notes
-- ---------------------------------------------------------------------------------------------
-- p_invoice is finalized and locked. VOID: the whole invoice (its charge, discount and tax lines
-- reversed). REFUND: p_refund's amount (cash, tax included) split into its tax share per rate
-- (rounded down, so the refunds of an invoice never credit more tax than it charged) and the rest.
CREATE OR REPLACE FUNCTION billing._issue_credit_note(
    p_invoice billing.invoice, p_reason text, p_refund billing.refund, p_now timestamptz)
RETURNS billing.credit_note
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_series text := 'CN-' || to_char(p_now AT TIME ZONE 'UTC', 'YYYY');
    v_total  bigint := p_invoice.subtotal + p_invoice.tax_amount;
    v_id     bigint;
    v_note   billing.credit_note;
    v_tax    bigint;
    v_amount bigint;
BEGIN
    IF p_reason = 'VOID' THEN
        SELECT * INTO v_note FROM billing.credit_note
         WHERE customer_id = p_invoice.customer_id AND invoice_id = p_invoice.id AND reason = 'VOID';
        IF FOUND OR v_total = 0 THEN
            RETURN v_note;  -- already issued, or nothing was claimed
        END IF;
        v_amount := v_total;
        v_tax := p_invoice.tax_amount;
    ELSE
        SELECT * INTO v_note FROM billing.credit_note
         WHERE customer_id = p_invoice.customer_id AND refund_id = p_refund.id;
        IF FOUND THEN
            RETURN v_note;
        END IF;
        v_amount := p_refund.amount;
        SELECT coalesce(sum(floor(v_amount::numeric * l.amount / v_total)), 0) INTO v_tax
          FROM billing.invoice_line l
         WHERE l.customer_id = p_invoice.customer_id AND l.invoice_id = p_invoice.id
           AND l.kind = 'TAX' AND NOT l.tax_inclusive;
    END IF;

    v_id := nextval(pg_get_serial_sequence('billing.credit_note', 'id'));
    INSERT INTO billing.credit_note (customer_id, id, invoice_id, number, reason, refund_id, subtotal, tax_amount,
                                     total, currency, issued_at)
    VALUES (p_invoice.customer_id, v_id, p_invoice.id,
            billing._document_number(v_series, billing._take_numbers(v_series, 1)), p_reason, p_refund.id,
            v_amount - v_tax, v_tax, v_amount, p_invoice.currency, p_now)
    RETURNING * INTO v_note;

    IF p_reason = 'VOID' THEN
        INSERT INTO billing.credit_note_line (customer_id, credit_note_id, line_no, kind, description, amount,
                                              tax_rate_code, tax_rate_bp, tax_inclusive)
        SELECT l.customer_id, v_id, row_number() OVER (ORDER BY l.line_no), l.kind, l.description, l.amount,
               l.tax_rate_code, l.tax_rate_bp, l.tax_inclusive
          FROM billing.invoice_line l
         WHERE l.customer_id = p_invoice.customer_id AND l.invoice_id = p_invoice.id AND l.kind <> 'CREDIT'
           AND NOT (l.kind = 'TAX' AND l.amount = 0 AND l.tax_rate_code IS NULL);
    ELSE
        INSERT INTO billing.credit_note_line (customer_id, credit_note_id, line_no, kind, description, amount,
                                              tax_rate_code, tax_rate_bp, tax_inclusive)
        SELECT p_invoice.customer_id, v_id, 1, 'REFUND', format('Refund of invoice %s', p_invoice.number),
               v_amount - v_tax, NULL, NULL, NULL
        UNION ALL
        SELECT l.customer_id, v_id, 1 + row_number() OVER (ORDER BY l.line_no), 'TAX', l.description,
               floor(v_amount::numeric * l.amount / v_total)::bigint, l.tax_rate_code, l.tax_rate_bp, l.tax_inclusive
          FROM billing.invoice_line l
         WHERE l.customer_id = p_invoice.customer_id AND l.invoice_id = p_invoice.id AND l.kind = 'TAX'
           AND l.tax_rate_code IS NOT NULL;
    END IF;
    PERFORM billing._emit_event('invoice', p_invoice.id, 'CreditNoteIssued', jsonb_build_object(
        'creditNoteId', v_note.id, 'number', v_note.number, 'invoiceId', p_invoice.id,
        'invoiceNumber', p_invoice.number, 'customerId', p_invoice.customer_id, 'reason', p_reason,
        'refundId', p_refund.id, 'subtotal', v_note.subtotal, 'taxAmount', v_note.tax_amount, 'total', v_note.total,
        'currency', v_note.currency, 'issuedAt', billing._utc_text(p_now)), p_now);
    RETURN v_note;
END
$$;
COMMENT ON FUNCTION billing._issue_credit_note(billing.invoice, text, billing.refund, timestamptz) IS
'Private: issues the numbered credit note (series CN-<UTC year>) of a finalized, locked invoice: VOID reverses its charge, discount and tax lines; REFUND credits a succeeded refund, its exclusive tax share per rate rounded down. Idempotent per invoice (VOID) and per refund. Event CreditNoteIssued.
Returns the credit note (NULL for a void of an invoice of total 0).';

CREATE OR REPLACE FUNCTION billing._invoice_voided()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    IF TG_TABLE_NAME <> 'invoice' THEN
        -- On a Citus shard (billing.invoice_<shard id>): a trigger there may not write the numbering
        -- series (a reference table: every node's copy), so the path that voids calls
        -- _void_credit_note itself, in the function's transaction.
        RETURN NULL;
    END IF;
    PERFORM billing._issue_credit_note(NEW, 'VOID', NULL, coalesce(NEW.closed_at, now()));
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION billing._invoice_voided() IS
'Private trigger: a finalized invoice that becomes VOID (by whatever path) gets its VOID credit note (on a single PostgreSQL; on a Citus shard the paths call _void_credit_note).
Returns NULL.';

-- The VOID credit note of an invoice just voided, for the paths that void (on Citus the trigger above
-- cannot): a finalized VOID invoice gets it once; otherwise nothing (idempotent: on a single
-- PostgreSQL the trigger issued it already).
CREATE OR REPLACE FUNCTION billing._void_credit_note(p_invoice billing.invoice, p_now timestamptz)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    IF p_invoice.status = 'VOID' AND p_invoice.number IS NOT NULL THEN
        PERFORM billing._issue_credit_note(p_invoice, 'VOID', NULL, coalesce(p_invoice.closed_at, p_now));
    END IF;
END
$$;
COMMENT ON FUNCTION billing._void_credit_note(billing.invoice, timestamptz) IS
'Private: issues the VOID credit note of a finalized invoice just voided, unless issued already (call it after every UPDATE to VOID: on Citus the trigger invoice_voided_credit_note cannot).
Returns nothing.';

CREATE OR REPLACE TRIGGER invoice_voided_credit_note
    AFTER UPDATE OF status ON billing.invoice
    FOR EACH ROW WHEN (NEW.status = 'VOID' AND OLD.status <> 'VOID' AND NEW.number IS NOT NULL)
    EXECUTE FUNCTION billing._invoice_voided();

-- A refund that succeeded against the charge that paid an invoice: its credit note (the invoice
-- finalized first when the finalizer has not reached it yet). Called by record_refund_result
-- holding the invoice's row lock.
CREATE OR REPLACE FUNCTION billing._refund_credit_note(p_invoice_id bigint, p_refund billing.refund, p_now timestamptz)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_invoice billing.invoice;
BEGIN
    SELECT * INTO v_invoice FROM billing.invoice WHERE customer_id = p_refund.customer_id AND id = p_invoice_id;
    IF v_invoice.number IS NULL THEN
        v_invoice := billing._finalize_one(v_invoice, p_now);
    END IF;
    PERFORM billing._issue_credit_note(v_invoice, 'REFUND', p_refund, p_now);
END
$$;
COMMENT ON FUNCTION billing._refund_credit_note(bigint, billing.refund, timestamptz) IS
'Private: the credit note of a succeeded refund of a (locked) invoice, finalizing the invoice first if needed.
Returns nothing.';

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
    IF p_customer_id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = 'customer id is required';
    END IF;
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
        'amountDue', v_invoice.amount, 'amountRefunded', v_invoice.amount_refunded,
        'lines', coalesce(v_lines, '[]'::jsonb),
        'creditNotes', coalesce(v_notes, '[]'::jsonb));
END
$$;
COMMENT ON FUNCTION billing.get_invoice_document(bigint) IS
'The invoice as a document: number (NULL until finalized), status, bill-to details, amounts (subtotal, exclusive and included tax, total, credit applied, amount due, refunded), its lines (written at finalization; a preview before) and its credit notes with their lines.
Returns a jsonb object; BL404 for an unknown invoice.';
