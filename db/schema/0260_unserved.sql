-- 0260_unserved: unpaid is unpaid, whatever the reason (issue 26 #3, #12; docs/money.md section 4).
-- A cancellation now (or dunning's end) bills the time served of an unpaid invoice of the period and
-- takes off only the rest: the invoice's lines are reversed from the cancellation, a numbered credit
-- note (reason UNSERVED) says what it no longer claims, and invoice.unserved records its total. What
-- is charged is amount - least(unserved, amount); the rest of unserved (when credit had paid part
-- of the invoice) goes back to the balance (a RESTORED entry). The invoice's document is unchanged.
-- Forward-only.

ALTER TABLE billing.invoice
    ADD COLUMN unserved bigint NOT NULL DEFAULT 0,
    ADD CONSTRAINT invoice_unserved_within_total CHECK (unserved BETWEEN 0 AND subtotal + tax_amount);
COMMENT ON COLUMN billing.invoice.unserved IS 'What a cancellation (or dunning''s end) took off as time not served, tax included: the total of its UNSERVED credit note (0: none). Charged: amount - least(unserved, amount).';

ALTER TABLE billing.credit_note
    DROP CONSTRAINT credit_note_reason_known,
    ADD CONSTRAINT credit_note_reason_known CHECK (reason IN ('VOID', 'REFUND', 'UNSERVED'));
COMMENT ON COLUMN billing.credit_note.reason IS 'VOID (the whole invoice is canceled), REFUND (money given back) or UNSERVED (the time after a cancellation, never served).';
CREATE UNIQUE INDEX credit_note_one_unserved ON billing.credit_note (customer_id, invoice_id) WHERE reason = 'UNSERVED';
