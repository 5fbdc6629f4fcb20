-- db/citus/distribute: where `billing db migrate --citus` places the tables (docs/scaling.md), in the
-- migration's transaction, after the migrations and before the function files (88_placement.sql
-- excepted, applied just before: billing._placement() and billing._distributable()). Run by
-- billing.citus.distribute, one statement at a time; idempotent (it runs after every migration):
-- what is already placed is left alone. What it did is recorded in pg_temp.citus_placed
-- (kind: reference, distributed, held (why: the reason) or local), which billing.citus reads back.
--
-- Why before the function files: a table a foreign key ties to a reference table becomes a Citus
-- local table, which Citus makes by renaming the table to its shard's name, and a function created
-- before would keep the renamed row type (billing.subscription_102010) and refuse the next CREATE
-- OR REPLACE.

-- DDL and data of several tables in one transaction: one connection per node.
SET LOCAL citus.multi_shard_modify_mode TO 'sequential';
-- The engine's triggers are kept on Citus (docs/scaling.md, "Triggers"): each fires on the shard its
-- row is in, on the node that holds it.
SET LOCAL citus.enable_unsafe_triggers TO on;
CREATE TEMP TABLE IF NOT EXISTS citus_placed (kind text, name text, why text);
TRUNCATE citus_placed;

DO $$
DECLARE
    v_tables text[];
    v_placements text[];
    v_columns text[];
    v_from text[];
    v_to text[];
    v_ready text[] := '{}';
    v_todo text[];
    v_saved record;
    v_fk record;
    r record;
BEGIN
    SELECT array_agg(p.table_name ORDER BY p.n), array_agg(p.placement ORDER BY p.n),
           array_agg(p.distribution_column ORDER BY p.n)
      INTO v_tables, v_placements, v_columns
      FROM billing._placement() WITH ORDINALITY AS p(table_name, placement, distribution_column, reason, n);
    SELECT array_agg(a.relname::text ORDER BY k.oid),
           array_agg(CASE WHEN b.relnamespace = 'billing'::regnamespace THEN b.relname::text
                          ELSE k.confrelid::regclass::text END ORDER BY k.oid)
      INTO v_from, v_to
      FROM pg_catalog.pg_constraint k
      JOIN pg_catalog.pg_class a ON a.oid = k.conrelid
      JOIN pg_catalog.pg_class b ON b.oid = k.confrelid
     WHERE k.contype = 'f' AND k.connamespace = 'billing'::regnamespace;
    FOR r IN SELECT * FROM billing._distributable(v_tables, v_placements, v_from, v_to) LOOP
        IF r.reason IS NULL THEN
            v_ready := v_ready || r.table_name;
        ELSE
            INSERT INTO citus_placed VALUES ('held', r.table_name, r.reason);
            RAISE LOG 'billing.% stays on the coordinator for now: %', r.table_name, r.reason;
        END IF;
    END LOOP;
    -- The ready tables not distributed yet.
    SELECT coalesce(array_agg(t ORDER BY n), '{}') INTO v_todo
      FROM unnest(v_ready) WITH ORDINALITY AS u(t, n)
     WHERE NOT EXISTS (SELECT 1 FROM pg_dist_partition d
                        WHERE d.logicalrelid = pg_catalog.to_regclass('billing.' || u.t) AND d.partmethod = 'h');
    -- Citus refuses a foreign key between a table it keeps on the coordinator (a plain or Citus
    -- local table) and a distributed one, either way, so while the tables are distributed one by
    -- one the keys between them cannot stay: the foreign keys of the tables to distribute are
    -- dropped and made again, the same, once all of them are distributed (a key between two
    -- colocated tables on customer_id is then checked inside each shard group, a key to a
    -- reference table on every node).
    CREATE TEMP TABLE IF NOT EXISTS citus_saved_fk (table_name text, name text, definition text);
    TRUNCATE citus_saved_fk;
    IF v_todo <> '{}' THEN
        INSERT INTO citus_saved_fk
        SELECT k.conrelid::regclass::text, k.conname, pg_catalog.pg_get_constraintdef(k.oid)
          FROM pg_catalog.pg_constraint k
         WHERE k.contype = 'f' AND k.connamespace = 'billing'::regnamespace
           AND (k.conrelid = ANY (SELECT pg_catalog.to_regclass('billing.' || t) FROM unnest(v_todo) t)
                OR k.confrelid = ANY (SELECT pg_catalog.to_regclass('billing.' || t) FROM unnest(v_todo) t))
         ORDER BY 1, 2;
    END IF;
    FOR v_fk IN SELECT * FROM citus_saved_fk ORDER BY table_name, name LOOP
        EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', v_fk.table_name, v_fk.name);
    END LOOP;
    -- (the reference tables before the distributed ones, after the keys went: a table a foreign key
    -- ties to a reference table becomes a Citus local table, which Citus cannot distribute
    -- afterwards when it has an identity column)
    FOR i IN 1 .. coalesce(array_length(v_tables, 1), 0) LOOP
        CONTINUE WHEN v_placements[i] <> 'reference';
        IF NOT EXISTS (SELECT 1 FROM pg_dist_partition d
                        WHERE d.logicalrelid = pg_catalog.to_regclass('billing.' || v_tables[i])
                          AND d.partmethod <> 'h' AND d.repmodel = 't') THEN
            RAISE LOG 'reference table billing.%', v_tables[i];
            PERFORM create_reference_table(pg_catalog.to_regclass('billing.' || v_tables[i]));
        END IF;
        INSERT INTO citus_placed VALUES ('reference', v_tables[i], NULL);
    END LOOP;
    -- billing.customer first: the others are colocated with it.
    FOR r IN SELECT u.t, u.n FROM unnest(v_ready) WITH ORDINALITY AS u(t, n) ORDER BY u.t <> 'customer', u.n LOOP
        IF r.t = ANY (v_todo) THEN
            RAISE LOG 'distributing billing.% by %', r.t, v_columns[array_position(v_tables, r.t)];
            PERFORM create_distributed_table(pg_catalog.to_regclass('billing.' || r.t),
                                             v_columns[array_position(v_tables, r.t)],
                                             colocate_with => CASE WHEN r.t = 'customer' THEN 'none'
                                                                   ELSE 'billing.customer' END);
        END IF;
        INSERT INTO citus_placed VALUES ('distributed', r.t, NULL);
    END LOOP;
    FOR v_fk IN SELECT * FROM citus_saved_fk ORDER BY table_name, name LOOP
        EXECUTE format('ALTER TABLE %s ADD CONSTRAINT %I %s', v_fk.table_name, v_fk.name, v_fk.definition);
    END LOOP;
    -- What stays on the coordinator: every table neither distributed nor a reference table.
    INSERT INTO citus_placed
    SELECT 'local', c.relname, NULL
      FROM pg_catalog.pg_class c
     WHERE c.relnamespace = 'billing'::regnamespace AND c.relkind IN ('r', 'p')
       AND NOT EXISTS (SELECT 1 FROM pg_dist_partition p
                        WHERE p.logicalrelid = c.oid AND (p.partmethod = 'h' OR p.repmodel = 't'))
     ORDER BY 1;
END
$$;
