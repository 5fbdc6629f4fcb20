-- 883_distributable: which declared-distributed tables `billing db migrate --citus` can distribute
-- now (billing._distributable, 88_placement.sql; run by db/citus/distribute.sql). Citus refuses a
-- foreign key between a distributed table and one kept on the coordinator, so a table tied to one
-- that stays there waits, transitively; a key to a reference table holds nothing back. A pure
-- function: the same on one PostgreSQL and on Citus.
BEGIN;
SELECT plan(4);

-- plan (reference), customer, subscription, invoice (distributed), outbox_event (pending)
CREATE TEMP VIEW p AS SELECT ARRAY['plan', 'customer', 'subscription', 'invoice', 'outbox_event'] AS tables,
                             ARRAY['reference', 'distributed', 'distributed', 'distributed', 'pending'] AS placements;

SELECT results_eq(
    $$SELECT table_name, reason FROM p, billing._distributable(p.tables, p.placements,
        ARRAY['subscription', 'subscription', 'invoice'], ARRAY['customer', 'plan', 'subscription'])$$,
    $$VALUES ('customer', NULL::text), ('subscription', NULL), ('invoice', NULL)$$,
    'everything distributed, in the declared order, when nothing pending is tied to it');

SELECT results_eq(
    $$SELECT table_name FROM p, billing._distributable(p.tables, p.placements,
        ARRAY['subscription', 'invoice', 'outbox_event'], ARRAY['customer', 'subscription', 'invoice'])
       WHERE reason IS NOT NULL$$,
    $$VALUES ('customer'), ('subscription'), ('invoice')$$,
    'a foreign key to a pending table holds the whole chain back');

SELECT is(
    (SELECT reason FROM p, billing._distributable(p.tables, p.placements,
        ARRAY['subscription', 'invoice', 'outbox_event'], ARRAY['customer', 'subscription', 'invoice'])
      WHERE table_name = 'invoice'),
    'a foreign key ties it to outbox_event, which stays on the coordinator',
    'the held table says which table keeps it back');

SELECT is_empty(
    $$SELECT table_name FROM p, billing._distributable(p.tables, p.placements,
        ARRAY['invoice', 'subscription'], ARRAY['plan', 'plan']) WHERE reason IS NOT NULL$$,
    'reference tables never hold anything back');

SELECT * FROM finish();
ROLLBACK;
