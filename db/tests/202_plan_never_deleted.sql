-- 202_plan_never_deleted: a plan is never deleted (trigger plan_never_deleted, 12_integrity.sql,
-- migration 0780), whatever refers to it: before, on one PostgreSQL only plan_price_plan_fkey stood in
-- the way (a plan without a price row could go, and its subscriptions kept a dangling plan_id: their
-- foreign key became a statement check in 0720). On Citus the plan is a reference table: the trigger
-- fires on its placements, each node's.
BEGIN;
SELECT plan(6);

SELECT billing._distributed('billing.customer') AS r202_citus \gset
\if :r202_citus
SELECT is((SELECT array_agg(DISTINCT result) FROM run_command_on_placements('billing.plan',
              $$SELECT count(*) FROM pg_catalog.pg_trigger WHERE tgrelid = '%s'::regclass AND tgname LIKE 'plan\_never\_deleted%%'$$)),
          '{1}'::text[], 'every placement of the plan (a reference table) carries the trigger');
\else
SELECT pass('one PostgreSQL: no placements');
\endif

-- As the owner of the schema (as 200): on Citus a transaction may not read as one user the shards
-- another user wrote in it.
SET LOCAL ROLE billing_owner;
SELECT has_trigger('billing', 'plan', 'plan_never_deleted', 'billing.plan has plan_never_deleted');

SELECT billing.upsert_plan('R202_PRICED', 1000, 'USD', 'MONTH', 1, '2026-01-01Z');
SELECT billing.create_subscription('r202-a', 202001, 'R202_PRICED', '2026-02-01Z');
INSERT INTO billing.plan (code, price_amount, currency, billing_interval) VALUES ('R202_BARE', 500, 'USD', 'MONTH');

SELECT throws_ok($$DELETE FROM billing.plan WHERE code = 'R202_PRICED'$$, '23503',
                 'plans are never deleted: archive them instead (billing.archive_plan)',
                 'a plan with prices and a subscription is not deleted');
SELECT throws_ok($$DELETE FROM billing.plan WHERE code = 'R202_BARE'$$, '23503',
                 'plans are never deleted: archive them instead (billing.archive_plan)',
                 'a plan nothing refers to is not deleted either (no foreign key stood in the way)');
SELECT throws_ok($$DELETE FROM billing.plan WHERE code = 'R202_NONE'$$, '23503', NULL,
                 'a DELETE matching no plan is refused too (a statement trigger)');
SELECT is((SELECT count(*) FROM billing.plan WHERE code IN ('R202_PRICED', 'R202_BARE')), 2::bigint, 'both plans are there');

SELECT * FROM finish();
ROLLBACK;
