-- citus/882_placement: on a Citus coordinator migrated with `billing db migrate --citus`, the
-- tables sit where billing._placement() says (docs/scaling.md). Run by `make test-citus` only.
BEGIN;
SELECT plan(11);

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

-- Increment 3 (migration 0082): nothing a customer owns stays on the coordinator.
SELECT is_empty($$
    SELECT p.table_name FROM billing._placement() p
     WHERE p.placement IN ('distributed', 'pending')
       AND NOT EXISTS (SELECT 1 FROM pg_dist_partition d
                        WHERE d.logicalrelid = ('billing.' || p.table_name)::regclass AND d.partmethod = 'h')$$,
    'every customer-owned table is distributed by customer');

SELECT is_empty($$
    SELECT p.oid::regprocedure::text FROM pg_catalog.pg_proc p
     WHERE p.pronamespace = 'billing'::regnamespace AND p.prosecdef AND 'p_customer_id' = ANY (p.proargnames)
       AND NOT EXISTS (SELECT 1 FROM pg_dist_object d
                        WHERE d.classid = 'pg_catalog.pg_proc'::regclass AND d.objid = p.oid
                          AND p.proargnames[d.distribution_argument_index + 1] = 'p_customer_id'
                          AND d.colocationid = (SELECT colocationid FROM pg_dist_partition
                                                 WHERE logicalrelid = 'billing.customer'::regclass))$$,
    'every SQL API function taking p_customer_id is a distributed function by it, colocated with billing.customer');

SELECT is_empty($$
    SELECT t.tgrelid::regclass || '.' || t.tgname FROM pg_catalog.pg_trigger t
      JOIN pg_dist_partition d ON d.logicalrelid = t.tgrelid AND d.partmethod = 'h'
     WHERE t.tgoldtable IS NOT NULL OR t.tgnewtable IS NOT NULL$$,
    'no trigger with a transition table on a distributed table (Citus cannot plan them)');

SELECT fk_ok('billing', 'invoice', ARRAY['customer_id', 'subscription_id'], 'billing', 'subscription', ARRAY['customer_id', 'id'],
             'the invoice''s subscription check is the composite foreign key on Citus');

-- The webhook fan-out, a row trigger on Citus: an event's deliveries are written in its shard group.
INSERT INTO billing.customer (id) VALUES (4242);
INSERT INTO billing.webhook_endpoint (url, event_types, secret, created_at)
VALUES ('https://hooks.example/t', ARRAY['*'], 'a-secret-of-sixteen-or-more', now());
INSERT INTO billing.outbox_event (event_id, aggregate_type, aggregate_id, event_type, payload, created_at, available_at, customer_id)
SELECT u, 'customer', 4242, 'PaymentMethodExpiring',
       billing._cloud_event(u, 'PaymentMethodExpiring', 'customer', 4242, now(), '{"customerId": 4242}'), now(), now(), 4242
  FROM gen_random_uuid() u;
SELECT results_eq($$
    SELECT d.customer_id, s.nodeport FROM billing.webhook_delivery d
      JOIN citus_shards s ON s.shardid = get_shard_id_for_distribution_column('billing.webhook_delivery', d.customer_id)$$,
    $$SELECT 4242::bigint, s.nodeport FROM citus_shards s
       WHERE s.shardid = get_shard_id_for_distribution_column('billing.outbox_event', 4242)$$,
    'a new event is queued for the endpoint, on the node holding the event''s customer');

SELECT * FROM finish();
ROLLBACK;
