-- 0840_change_tax_by_line (house8): a change's PRORATION invoice taxes each of its lines at its own
-- rate (docs/money.md, "a change reverses the unused part"). Before, it taxed the difference (new line
-- less reversals) at the rate of the day: after a move of the billing address or a change of a rate
-- since the reversed lines were sold, it billed (new rate - old rate) x the reversed net too little or
-- too much. Now the reversals give back each reversed line's own tax, at the rate and jurisdiction it
-- was sold at, the new line is taxed at today's rate, and the invoice carries one tax entry per (rate,
-- jurisdiction) with its base; its tax is the sum of its lines' taxes.
--
-- * service_line.tax_lines: a line's tax by rate, as sold ([{code, name, rateBp, inclusive, country,
--   region, base, amount}], the amounts adding up to its tax). Written for the lines a change writes
--   (its new CHARGE line, its REVERSAL lines: the reversed line's entries, their share); NULL for the
--   others, whose invoice's tax detail is theirs (a period invoice sells one line; the renewal and the
--   signups write no more than before). Nullable without a default: no rewrite.
-- * A change's invoice may carry a negative tax (it gives back more tax than the new line bears: the
--   customer moved from a taxed address, or the rate fell, then upgraded): invoice_tax_not_negative
--   holds for the other kinds only, a document's TAX line may be negative, and so may a credit note's
--   tax (its total stays positive). The invoice's total stays >= 0 (invoice_credit_within_total):
--   a change whose difference, tax included, is not positive ends in credit.
-- Lines written before keep the tax they have (docs/money.md says what an upgraded database does with
-- them). Each constraint is looser than the one it replaces: every row satisfies it; added NOT VALID
-- and validated at once (a read of each table, under the migration's lock).
ALTER TABLE billing.service_line ADD COLUMN tax_lines jsonb;
COMMENT ON COLUMN billing.service_line.tax_lines IS 'Its tax by rate as sold: [{code, name, rateBp, inclusive, country, region, base, amount}] adding up to tax. Written for a change''s lines (the new CHARGE line at today''s rates, a REVERSAL line at the reversed line''s); NULL: the tax detail of its invoice (a period invoice''s one line) in proportion, or of the line it reverses.';

ALTER TABLE billing.invoice DROP CONSTRAINT invoice_tax_not_negative,
    ADD CONSTRAINT invoice_tax_not_negative
        CHECK (kind = 'PRORATION' OR (tax_amount >= 0 AND tax_included BETWEEN 0 AND subtotal)) NOT VALID;
ALTER TABLE billing.invoice VALIDATE CONSTRAINT invoice_tax_not_negative;
COMMENT ON CONSTRAINT invoice_tax_not_negative ON billing.invoice IS 'Tax on top and contained tax are not negative, the contained within the subtotal; a change''s PRORATION invoice excepted (its reversals give back the tax their lines were sold at: 0840).';

ALTER TABLE billing.invoice_line DROP CONSTRAINT invoice_line_sign,
    ADD CONSTRAINT invoice_line_sign
        CHECK ((kind IN ('DISCOUNT', 'CREDIT') AND amount <= 0) OR kind = 'TAX'
               OR (kind NOT IN ('DISCOUNT', 'CREDIT', 'TAX') AND amount >= 0)) NOT VALID;
ALTER TABLE billing.invoice_line VALIDATE CONSTRAINT invoice_line_sign;

ALTER TABLE billing.credit_note DROP CONSTRAINT credit_note_amounts,
    ADD CONSTRAINT credit_note_amounts CHECK (total > 0 AND total = subtotal + tax_amount) NOT VALID;
ALTER TABLE billing.credit_note VALIDATE CONSTRAINT credit_note_amounts;
