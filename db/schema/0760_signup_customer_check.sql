-- 0760_signup_customer_check (issue 32, signups): subscription.customer_id -> customer.id checked once
-- per statement instead of once per row, as 0720 did for the plan and the request's subscription.
-- The foreign key's check was an executor start and a FOR KEY SHARE lock of the customer per row
-- (the customers the same batch had just inserted too): 5-7 % of a signup (bench/README.md, "Issue
-- 32, seventh pass"). The parent needs no lock: a customer is now never deleted nor renumbered
-- (customer_never_deleted, customer_id_fixed: db/functions/12_integrity.sql). New subscriptions and
-- a changed customer_id are still checked (subscription_plan_exists / subscription_plan_kept, which
-- check both parents). On Citus the foreign key stays (db/citus/10_adapt.sql puts it back; an
-- existing Citus database revalidates it once, at this migration). Forward-only.
ALTER TABLE billing.subscription DROP CONSTRAINT IF EXISTS subscription_customer_fkey;
