-- 0760_signup_customer_check (issue 32, signups): subscription.customer_id -> customer.id and
-- subscription.scheduled_plan_id -> plan.id checked once per statement instead of once per row, as
-- 0720 did for the plan and the request's subscription.
-- The foreign key's check was an executor start and a FOR KEY SHARE lock of the customer per row
-- (the customers the same batch had just inserted too); the scheduled plan's, NULL in every new row,
-- still queued a trigger event per row (bench/README.md, "Issue 32, seventh pass"). The parents need
-- no lock: a plan is never deleted nor renumbered (0720), a customer is now never deleted nor renumbered
-- (customer_never_deleted, customer_id_fixed: db/functions/12_integrity.sql). New subscriptions and
-- a changed key are still checked (subscription_plan_exists / subscription_plan_kept, which check
-- every parent). On Citus the foreign keys stay (db/citus/10_adapt.sql puts them back; an
-- existing Citus database revalidates them once, at this migration). Forward-only.
ALTER TABLE billing.subscription DROP CONSTRAINT IF EXISTS subscription_customer_fkey;
ALTER TABLE billing.subscription DROP CONSTRAINT IF EXISTS subscription_scheduled_plan_fkey;
