-- 61_credit_notes: a finalized invoice's document never changes (triggers), and the credit notes
-- of a voided or refunded finalized invoice (docs/invoices.md).
-- Re-applied after every migration: CREATE OR REPLACE only.

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

-- The UNSERVED credit note of an unpaid invoice cut at a cancellation (19_ledger_cuts, _bill_served): the
-- net of its lines not served (p_net, positive) as one line, and the invoice's exclusive tax on it
-- per rate, rounded down. The invoice is finalized first if it was not yet. One per invoice.
CREATE OR REPLACE FUNCTION billing._unserved_credit_note(p_invoice billing.invoice, p_net bigint, p_now timestamptz)
RETURNS billing.credit_note
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_series text := 'CN-' || to_char(p_now AT TIME ZONE 'UTC', 'YYYY');
    v_id     bigint;
    v_tax    bigint;
    v_note   billing.credit_note;
BEGIN
    SELECT * INTO v_note FROM billing.credit_note
     WHERE customer_id = p_invoice.customer_id AND invoice_id = p_invoice.id AND reason = 'UNSERVED';
    IF FOUND OR p_net <= 0 THEN
        RETURN v_note;
    END IF;
    SELECT coalesce(sum(floor(p_net::numeric * l.amount / greatest(p_invoice.subtotal, 1))), 0)::bigint INTO v_tax
      FROM billing.invoice_line l
     WHERE l.customer_id = p_invoice.customer_id AND l.invoice_id = p_invoice.id
       AND l.kind = 'TAX' AND NOT l.tax_inclusive AND l.tax_rate_code IS NOT NULL;
    v_id := nextval(pg_get_serial_sequence('billing.credit_note', 'id'));
    INSERT INTO billing.credit_note (customer_id, id, invoice_id, number, reason, refund_id, subtotal, tax_amount,
                                     total, currency, issued_at)
    VALUES (p_invoice.customer_id, v_id, p_invoice.id,
            billing._document_number(v_series, billing._take_numbers(v_series, 1)), 'UNSERVED', NULL,
            p_net, v_tax, p_net + v_tax, p_invoice.currency, p_now)
    RETURNING * INTO v_note;
    INSERT INTO billing.credit_note_line (customer_id, credit_note_id, line_no, kind, description, amount,
                                          tax_rate_code, tax_rate_bp, tax_inclusive)
    SELECT p_invoice.customer_id, v_id, 1, 'PLAN',
           format('Time not served after the cancellation on %s (invoice %s)',
                  to_char(p_now AT TIME ZONE 'UTC', 'YYYY-MM-DD'), p_invoice.number), p_net, NULL, NULL, NULL
    UNION ALL
    SELECT l.customer_id, v_id, 1 + row_number() OVER (ORDER BY l.line_no), 'TAX', l.description,
           floor(p_net::numeric * l.amount / greatest(p_invoice.subtotal, 1))::bigint, l.tax_rate_code, l.tax_rate_bp,
           l.tax_inclusive
      FROM billing.invoice_line l
     WHERE l.customer_id = p_invoice.customer_id AND l.invoice_id = p_invoice.id AND l.kind = 'TAX'
       AND l.tax_rate_code IS NOT NULL AND NOT l.tax_inclusive;
    PERFORM billing._emit_event('invoice', p_invoice.id, 'CreditNoteIssued', jsonb_build_object(
        'creditNoteId', v_note.id, 'number', v_note.number, 'invoiceId', p_invoice.id,
        'invoiceNumber', p_invoice.number, 'customerId', p_invoice.customer_id, 'reason', 'UNSERVED',
        'refundId', NULL, 'subtotal', v_note.subtotal, 'taxAmount', v_note.tax_amount, 'total', v_note.total,
        'currency', v_note.currency, 'issuedAt', billing._utc_text(p_now)), p_now);
    RETURN v_note;
END
$$;
COMMENT ON FUNCTION billing._unserved_credit_note(billing.invoice, bigint, timestamptz) IS
'Private: the numbered UNSERVED credit note (series CN-<UTC year>) of a finalized, locked invoice cut at a cancellation: p_net (the net of its lines not served) and its exclusive tax per rate, rounded down. Once per invoice. Event CreditNoteIssued.
Returns the credit note (NULL when p_net <= 0).';
