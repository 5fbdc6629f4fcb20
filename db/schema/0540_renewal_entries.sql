-- 0540_renewal_entries: fewer index entries and checks per renewal (issue 32, bench/renewal/profile.py).
-- A renewal wrote 22 index entries per invoice (the subscription's non-HOT update 6, the invoice 8,
-- its service line 2, its InvoiceCreated event 6): ~40% of the statement's CPU under `perf`, plus a
-- foreign-key check per invoice. Each change below removes work that no read or promise needs; the
-- readers of each dropped index were checked (docs/scaling.md, "What a renewal writes").
--
-- * invoice_plan_fkey, invoice_from_plan_fkey: the invoice's plan ids are copied from a subscription
--   (whose own subscription_plan_fkey checked them) or from a plan row read in the same call; no
--   function deletes a plan or changes its id and no job role may (only billing_owner holds DELETE
--   on billing.plan: pgTAP 404 pins both), so the per-row check (~4% of a renewal) proved nothing.
--   service_line.plan_id never had one, for the same reason.
-- * outbox_event_event_id_key UNIQUE (customer_id, event_id): every event id is gen_random_uuid()
--   in the writing statement (122 random bits); nothing reads through the pair (GET /v1/events/{id}
--   and the restore check look ids up alone, by outbox_event_event_id_idx, which stays). One random
--   b-tree entry per event, on every path that writes events.
-- * invoice_subscription_idx (subscription_id): every read of a subscription's invoices names its
--   customer and walks invoice_one_per_period (customer_id, subscription_id, ...) or the primary key;
--   list_invoices' subscription filter now names the subscription's customer too (77_api_lists).
-- * subscription_status_idx (status, id) becomes partial, WHERE status <> 'ACTIVE': the renewal's
--   update of an ACTIVE subscription (non-HOT: its period end is in the due index) no longer writes
--   an entry there. The list of ACTIVE subscriptions (most of them) walks subscription_id_idx and
--   checks the status on the way; the rarer statuses keep their own index.
ALTER TABLE billing.invoice DROP CONSTRAINT invoice_plan_fkey;
ALTER TABLE billing.invoice DROP CONSTRAINT invoice_from_plan_fkey;
ALTER TABLE billing.outbox_event DROP CONSTRAINT outbox_event_event_id_key;
DROP INDEX billing.invoice_subscription_idx;
DROP INDEX billing.subscription_status_idx;
CREATE INDEX subscription_status_idx ON billing.subscription (status, id) WHERE status <> 'ACTIVE';
