-- 0720_signup_statement_checks (issue 32, signups in bulk): two foreign keys checked once per row
-- become checks once per statement (db/functions/12_integrity.sql), as invoice_subscription_exists
-- did for the invoice (0002). A foreign key's check is an executor start and a FOR KEY SHARE lock of
-- the parent per row (for rows the same statement inserted too): these two cost 7-11 % of a signup
-- in bulk (bench/README.md, "Issue 32, sixth pass"). Their parents need no lock:
-- * subscription.plan_id -> plan.id: a plan is never deleted nor renumbered (no engine function does,
--   no role but the owner may: pgTAP 404, as for invoice_plan_fkey in 0540);
-- * subscription_request (customer_id, subscription_id) -> subscription (customer_id, id): a
--   subscription is never deleted (subscription_never_deleted) nor renumbered (pgTAP 404).
-- New and changed rows are still checked: subscription_plan_exists / subscription_plan_kept and
-- subscription_request_subscription_exists (statement triggers on INSERT, a row trigger on a change
-- of the key). On Citus the foreign keys stay (db/citus/10_adapt.sql puts them back: a transition
-- table cannot be planned next to a distributed table). Forward-only.
ALTER TABLE billing.subscription DROP CONSTRAINT IF EXISTS subscription_plan_fkey;
ALTER TABLE billing.subscription_request DROP CONSTRAINT IF EXISTS subscription_request_subscription_fkey;
