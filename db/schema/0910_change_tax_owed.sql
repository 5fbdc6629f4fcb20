-- 0910_change_tax_owed (money10): a change whose net falls but whose tax rises more (a move to a
-- taxed address, then a small downgrade) bills what it owes. Before, such a change billed nothing and
-- granted no credit (docs/money.md's "Limit:" of house8): the customer kept the tax its new line bears
-- over what its reversals give back, less the fall of its net. Now its PRORATION invoice carries the
-- lines as they are: a negative subtotal (the new line's net less the reversed nets) and the tax of its
-- lines on top, its total (what it bills) positive. A change whose difference tax included is not
-- positive still ends in credit.
--
-- * invoice_subtotal_not_negative: a PRORATION invoice's subtotal may be negative when its total
--   (subtotal + tax on top) is positive; every other invoice's stays >= 0.
-- * invoice_line_sign: a document's PRORATION line (the change's net, subtotal + discount) may be
--   negative, as its TAX lines already may (0840).
-- Each constraint is looser than the one it replaces: every row satisfies it; added NOT VALID and
-- validated at once (a read of each table, under the migration's lock).
-- (One subcommand per ALTER: Citus refuses ADD CONSTRAINT beside another subcommand on a distributed
-- table, and an upgrade of a Citus database runs this on distributed tables. Split after main applied
-- it in one piece: both forms are accepted, billing.migrate.REWRITTEN.)
ALTER TABLE billing.invoice DROP CONSTRAINT invoice_subtotal_not_negative;
ALTER TABLE billing.invoice ADD CONSTRAINT invoice_subtotal_not_negative
        CHECK (subtotal >= 0 OR (kind = 'PRORATION' AND subtotal + tax_amount > 0)) NOT VALID;
ALTER TABLE billing.invoice VALIDATE CONSTRAINT invoice_subtotal_not_negative;
COMMENT ON CONSTRAINT invoice_subtotal_not_negative ON billing.invoice IS 'The subtotal is not negative; a change''s PRORATION invoice excepted when its total is positive (its net fell but its tax rose more: 0910).';

ALTER TABLE billing.invoice_line DROP CONSTRAINT invoice_line_sign;
ALTER TABLE billing.invoice_line ADD CONSTRAINT invoice_line_sign
        CHECK ((kind IN ('DISCOUNT', 'CREDIT') AND amount <= 0) OR kind IN ('TAX', 'PRORATION')
               OR (kind NOT IN ('DISCOUNT', 'CREDIT', 'TAX', 'PRORATION') AND amount >= 0)) NOT VALID;
ALTER TABLE billing.invoice_line VALIDATE CONSTRAINT invoice_line_sign;
