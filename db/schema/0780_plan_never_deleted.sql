-- 0780_plan_never_deleted (house7): a plan is never deleted, now refused by a trigger
-- (plan_never_deleted, db/functions/12_integrity.sql, made by the function files that run after
-- this one), as a subscription is (subscription_never_deleted). Subscriptions name their plan with
-- no foreign key on one PostgreSQL since 0720, invoices since 0540: on one PostgreSQL only
-- plan_price_plan_fkey stood in the way of a DELETE (a plan without a price row had nothing), and
-- the promise those migrations rest on was kept by the grants alone (no role but the owner may
-- delete a plan: pgTAP 404).
-- This file checks what the trigger keeps from now on: every subscription's plan exists. A database
-- where one was deleted since 0720 is refused here, naming the missing plans (put each back, same
-- id, then migrate again). Reads only (one anti-join of the subscriptions with the plans, an outer join: as Citus
-- runs it against the reference table too).
DO $$
DECLARE
    v_missing bigint[];
BEGIN
    SELECT array_agg(m.plan_id ORDER BY m.plan_id) INTO v_missing
      FROM (SELECT DISTINCT s.plan_id FROM billing.subscription s
              LEFT JOIN billing.plan p ON p.id = s.plan_id
             WHERE p.id IS NULL) m;
    IF v_missing IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = '23503',
            MESSAGE = format('subscriptions refer to plans %s, which were deleted', v_missing),
            HINT = 'put each plan back with its id (plans are never deleted: archive them), then migrate again',
            CONSTRAINT = 'plan_never_deleted', TABLE = 'subscription', SCHEMA = 'billing';
    END IF;
END
$$;
