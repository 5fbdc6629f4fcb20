-- 0041_period_credit: credit for unused time is tied to the period it pays back (docs/money.md,
-- "Refunds and credit"). The credit a plan change grants for the unused rest of a period, and the
-- refunds of that period's invoices, together never exceed what the customer was billed for it;
-- to know how much a period already gave back as credit, each change credit records its period.
-- * credit_pending.period_start / period_end: the period whose unused time the pending credit pays
--   back (NULL for credit granted before this migration).
-- * credit_entry.period_start / period_end: likewise for a PRORATION entry granted at once (an
--   entry released from credit_pending leaves them NULL: the pending row counts).

ALTER TABLE billing.credit_pending ADD COLUMN period_start timestamptz, ADD COLUMN period_end timestamptz,
    ADD CONSTRAINT credit_pending_period_whole CHECK ((period_start IS NULL) = (period_end IS NULL));
COMMENT ON COLUMN billing.credit_pending.period_start IS 'Start of the subscription period whose unused time it pays back (NULL: granted before periods were recorded).';
COMMENT ON COLUMN billing.credit_pending.period_end IS 'End of that period.';

ALTER TABLE billing.credit_entry ADD COLUMN period_start timestamptz, ADD COLUMN period_end timestamptz,
    ADD CONSTRAINT credit_entry_period_whole CHECK ((period_start IS NULL) = (period_end IS NULL)),
    ADD CONSTRAINT credit_entry_period_is_change_credit CHECK (period_start IS NULL OR reason = 'PRORATION');
COMMENT ON COLUMN billing.credit_entry.period_start IS 'For a PRORATION entry granted at once: start of the period whose unused time it pays back (NULL otherwise, and for credit released from credit_pending, which records it).';
COMMENT ON COLUMN billing.credit_entry.period_end IS 'End of that period.';
