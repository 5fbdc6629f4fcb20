-- citus/882_placement: on a Citus coordinator migrated with `billing db migrate --citus`, the
-- tables sit where billing._placement() says (docs/scaling.md). Run by `make test-citus` only.
BEGIN;
SELECT plan(14);

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
     WHERE (t.tgoldtable IS NOT NULL OR t.tgnewtable IS NOT NULL)
       AND (t.tgrelid, t.tgname, t.tgfoid) <> ('billing.outbox_event'::regclass, 'outbox_event_fan_out', 'billing._outbox_fan_out'::regproc)$$,
    'no trigger with a transition table on a distributed table (Citus cannot plan them) but the fan-out, whose statement names only the shard group''s own tables');

SELECT fk_ok('billing', 'invoice', ARRAY['customer_id', 'subscription_id'], 'billing', 'subscription', ARRAY['customer_id', 'id'],
             'the invoice''s subscription check is the composite foreign key on Citus');

-- The webhook fan-out on Citus, a statement trigger on the event's shard: an event's deliveries are
-- written in its shard group.
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

-- One statement writing several events to several shards (each shard's trigger once, for its rows):
-- each event queued for every ENABLED endpoint that wants its type, none for the others, with the
-- event's order key, in the event's shard group (issue 32, groups4: the statement trigger on shards).
INSERT INTO billing.customer (id) VALUES (4243), (4244), (4245);
INSERT INTO billing.webhook_endpoint (url, event_types, secret, created_at)
VALUES ('https://hooks.example/paid', ARRAY['InvoicePaid'], 'a-secret-of-sixteen-or-more', now());
INSERT INTO billing.webhook_endpoint (url, event_types, secret, created_at, status, disabled_at)
VALUES ('https://hooks.example/off', ARRAY['*'], 'a-secret-of-sixteen-or-more', now(), 'DISABLED', now());
INSERT INTO billing.outbox_event (event_id, aggregate_type, aggregate_id, event_type, payload, created_at, available_at, customer_id)
SELECT u, 'invoice', c * 10 + k, t, billing._cloud_event(u, t, 'invoice', c * 10 + k, now(), jsonb_build_object('customerId', c)),
       now(), now(), c
  FROM generate_series(4243, 4245) c, generate_series(1, 3) k,
       LATERAL (SELECT gen_random_uuid() AS u, CASE WHEN k = 2 THEN 'InvoicePaid' ELSE 'InvoiceCreated' END AS t) x;
SELECT set_eq($$
    SELECT d.outbox_id, w.url, d.event_id, d.event_type, d.aggregate_type, d.aggregate_id, d.customer_id, d.aggregate_seq,
           d.created_at, d.available_at, d.status
      FROM billing.webhook_delivery d JOIN billing.webhook_endpoint w ON w.id = d.endpoint_id
     WHERE d.customer_id BETWEEN 4243 AND 4245$$,
    $$SELECT e.id, w.url, e.event_id, e.event_type, e.aggregate_type, e.aggregate_id, e.customer_id, e.aggregate_seq,
             e.created_at, e.created_at AS available_at, 'PENDING'
        FROM billing.outbox_event e
        JOIN (VALUES ('https://hooks.example/t', NULL), ('https://hooks.example/paid', 'InvoicePaid')) w (url, only_type)
          ON w.only_type IS NULL OR w.only_type = e.event_type
       WHERE e.customer_id BETWEEN 4243 AND 4245$$,
    'one statement''s events over three shards: each queued for every enabled endpoint wanting its type, with its order key');
SELECT count(*) AS d4243 FROM billing.webhook_delivery WHERE customer_id = 4243 \gset
SELECT count(*) AS d4244 FROM billing.webhook_delivery WHERE customer_id = 4244 \gset
SELECT count(*) AS d4245 FROM billing.webhook_delivery WHERE customer_id = 4245 \gset
SELECT is((:d4243 + :d4244 + :d4245)::bigint, (SELECT count(*) FROM billing.webhook_delivery WHERE customer_id BETWEEN 4243 AND 4245),
          'each in its customer''s shard (found there by a query routed by the customer)');
SELECT is((SELECT count(*) FROM billing.webhook_delivery d WHERE d.customer_id BETWEEN 4243 AND 4245 AND d.aggregate_seq IS NULL),
          0::bigint, 'none without its event''s order key');

SELECT * FROM finish();
ROLLBACK;
