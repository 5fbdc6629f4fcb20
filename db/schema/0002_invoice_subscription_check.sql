-- 0002_invoice_subscription_check: invoice.subscription_id is checked per statement, not per row.
-- The row-level foreign key ran one RI query per inserted invoice; on the renewal statement
-- (thousands of invoices at once) it took about 70% of the time (bench/renewal). The same rule
-- is now enforced by a statement-level trigger that checks all new invoices with one anti-join
-- (db/functions/40_renewal.sql), which is sound because subscriptions are never deleted: a
-- second trigger refuses DELETE on billing.subscription.
ALTER TABLE billing.invoice DROP CONSTRAINT invoice_subscription_fkey;
