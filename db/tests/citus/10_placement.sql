-- citus/10_placement: on a Citus coordinator migrated with `billing db migrate --citus`, the
-- tables sit where billing._placement() says (docs/scaling.md). Run by `make test-citus` only.
BEGIN;
SELECT plan(6);

SELECT ok((SELECT count(*) FROM citus_get_active_worker_nodes()) >= 2, 'the coordinator has its workers');

SELECT is_empty($$
    SELECT p.table_name FROM billing._placement() p
     WHERE p.placement = 'reference'
       AND NOT EXISTS (SELECT 1 FROM pg_dist_partition d
                        WHERE d.logicalrelid = ('billing.' || p.table_name)::regclass AND d.repmodel = 't')$$,
    'every table declared reference is a Citus reference table');

SELECT is_empty($$
    SELECT d.logicalrelid::text FROM pg_dist_partition d
      JOIN billing._placement() p ON ('billing.' || p.table_name)::regclass = d.logicalrelid
     WHERE d.repmodel = 't' AND p.placement <> 'reference'$$,
    'no customer-owned table is copied to every node');

SELECT is_empty($$
    SELECT d.logicalrelid::text FROM pg_dist_partition d
      JOIN billing._placement() p ON ('billing.' || p.table_name)::regclass = d.logicalrelid
     WHERE d.partmethod = 'h'
       AND (p.placement <> 'distributed' OR column_to_column_name(d.logicalrelid, d.partkey) <> p.distribution_column)$$,
    'a distributed table is one declared so, by its declared column');

SELECT is_empty($$
    SELECT d.logicalrelid::text FROM pg_dist_partition d
     WHERE d.partmethod = 'h' AND d.colocationid <> (SELECT colocationid FROM pg_dist_partition
                                                       WHERE logicalrelid = 'billing.customer'::regclass)$$,
    'every distributed table is colocated with billing.customer');

SELECT ok((SELECT rolcanlogin FROM pg_catalog.pg_roles WHERE rolname = 'billing_owner'),
          'billing_owner may log in (Citus connects to the workers as the function owner)');

SELECT * FROM finish();
ROLLBACK;
