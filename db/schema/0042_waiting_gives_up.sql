-- 0042_waiting_gives_up: an invoice waiting for a payment method does not wait forever
-- (docs/providers.md). invoice.give_up_at is set the first time it waits: the end of its dunning
-- span (the sum of the dunning schedule's delays) counted from its first decline, or from when it
-- began to wait if it was never declined; it is kept if the invoice waits again. At that instant
-- give_up_waiting_invoices ends it as exhausted dunning does (FAILED, and the subscription
-- canceled, its upgrade reverted or the period written off).

ALTER TABLE billing.invoice ADD COLUMN give_up_at timestamptz;
COMMENT ON COLUMN billing.invoice.give_up_at IS 'When an invoice waiting for a payment method is given up (FAILED, as when dunning is exhausted): the dunning span after its first decline, or after it began to wait; set the first time it waits.';
CREATE INDEX invoice_waiting_give_up_idx ON billing.invoice (give_up_at) WHERE waiting_for IS NOT NULL;

-- Invoices already waiting: counted from their first decline, or from when they were due.
UPDATE billing.invoice i
   SET give_up_at = coalesce((SELECT min(a.result_at) FROM billing.payment_attempt a
                               WHERE a.invoice_id = i.id AND a.outcome = 'DECLINED'), i.due_at)
                    + coalesce((SELECT sum(d.delay) FROM billing.dunning_step d), interval '0')
 WHERE i.waiting_for IS NOT NULL;
