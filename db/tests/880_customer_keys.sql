-- 880_customer_keys: what belongs to a customer is keyed by customer (migration 0080, docs/scaling.md).
-- The catalog is checked against billing._placement(), so a table added without a placement, or a
-- distributed table whose keys lack customer_id, fails here before it fails on a Citus cluster.
BEGIN;
SELECT plan(12);

SELECT is_empty($$
    SELECT c.relname::text FROM pg_catalog.pg_class c
     WHERE c.relnamespace = 'billing'::regnamespace AND c.relkind IN ('r', 'p')
    EXCEPT SELECT table_name FROM billing._placement()$$,
    'every table of schema billing has a placement (db/functions/88_placement.sql)');

-- A distributed table: its distribution column in its primary key and in every unique constraint
-- or unique index (Citus enforces uniqueness inside one shard only).
SELECT is_empty($$
    SELECT p.table_name || '.' || i.indexrelid::regclass
      FROM billing._placement() p
      JOIN pg_catalog.pg_index i ON i.indrelid = ('billing.' || p.table_name)::regclass AND i.indisunique
      JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attname = p.distribution_column
     WHERE p.placement = 'distributed' AND NOT a.attnum = ANY (i.indkey::int2[])$$,
    'a distributed table''s unique keys include its distribution column (else: placement pending, with the reason)');

SELECT is_empty($$
    SELECT p.table_name FROM billing._placement() p
     WHERE p.placement = 'distributed'
       AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_constraint k
                        WHERE k.conrelid = ('billing.' || p.table_name)::regclass AND k.contype = 'p')$$,
    'a distributed table has a primary key');

-- Foreign keys between customer-owned tables (distributed or pending) carry customer_id on both sides.
SELECT is_empty($$
    SELECT k.conrelid::regclass || '.' || k.conname
      FROM pg_catalog.pg_constraint k
      JOIN pg_catalog.pg_attribute ac ON ac.attrelid = k.conrelid AND ac.attname = 'customer_id'
      JOIN pg_catalog.pg_attribute ar ON ar.attrelid = k.confrelid AND ar.attname = 'customer_id'
     WHERE k.contype = 'f' AND k.connamespace = 'billing'::regnamespace
       AND NOT (ac.attnum = ANY (k.conkey) AND ar.attnum = ANY (k.confkey))$$,
    'every foreign key between customer-owned tables includes customer_id');

-- A reference table refers to no customer-owned table (Citus forbids it: a copy on every node
-- cannot point into one shard).
SELECT is_empty($$
    SELECT k.conrelid::regclass || '.' || k.conname
      FROM pg_catalog.pg_constraint k
      JOIN billing._placement() p ON ('billing.' || p.table_name)::regclass = k.conrelid AND p.placement = 'reference'
      JOIN billing._placement() q ON ('billing.' || q.table_name)::regclass = k.confrelid AND q.placement <> 'reference'
     WHERE k.contype = 'f'$$,
    'no reference table refers to a customer-owned table');

SELECT is_empty($$
    SELECT table_name FROM billing._placement() WHERE placement NOT IN ('reference', 'distributed', 'pending', 'coordinator')
       OR coalesce(btrim(reason), '') = ''
       OR (placement IN ('distributed', 'pending')) <> (distribution_column IS NOT NULL)$$,
    'every placement is known, says why, and names a distribution column exactly when customer-owned');

-- The re-keyed primary keys, one by one (migration 0080).
SELECT col_is_pk('billing', 'subscription', ARRAY['customer_id', 'id'], 'subscription: primary key (customer_id, id)');
SELECT col_is_pk('billing', 'invoice', ARRAY['customer_id', 'id'], 'invoice: primary key (customer_id, id)');
SELECT col_is_pk('billing', 'payment_attempt', ARRAY['customer_id', 'id'], 'payment_attempt: primary key (customer_id, id)');
-- ... and the rest (migration 0082): nothing a customer owns is left pending.
SELECT col_is_pk('billing', 'outbox_event', ARRAY['customer_id', 'id'], 'outbox_event: primary key (customer_id, id)');
SELECT col_is_pk('billing', 'subscription_request', ARRAY['customer_id', 'idempotency_key'],
                 'subscription_request: primary key (customer_id, idempotency_key)');
SELECT is_empty($$SELECT table_name FROM billing._placement() WHERE placement = 'pending'$$,
                'no customer-owned table is pending: every one is distributed by customer on Citus');

SELECT * FROM finish();
ROLLBACK;
