-- db/citus/10_adapt: what `billing db migrate --citus` changes after the function files, in the
-- migration's transaction, on a Citus coordinator (docs/scaling.md). Loaded by billing.citus.adapt,
-- one statement at a time; every statement is idempotent (it runs after every migration). What it
-- did is recorded in pg_temp.citus_adapted (kind, name), which billing.citus.adapt reads back.
SET LOCAL citus.enable_unsafe_triggers TO on;
SET LOCAL citus.multi_shard_modify_mode TO 'sequential';
CREATE TEMP TABLE IF NOT EXISTS citus_adapted (kind text, name text);
TRUNCATE citus_adapted;

-- Triggers with a transition table (REFERENCING NEW TABLE) cannot be planned next to a distributed
-- table ("unrecognized RTE kind: 7"); each one the function files made is replaced:
-- * invoice_subscription_exists (12_integrity.sql) by the composite foreign key it stands for,
--   checked inside the shard group;
-- * outbox_event_notify (65_outbox_relay.sql) by nothing: the relay polls on Citus.
-- outbox_event_fan_out (66_webhooks.sql) stays: on a shard its statement names only the shard
-- group's own tables (until issue 32, groups4, it was replaced here by a row trigger, one distributed
-- INSERT per event; the function file's CREATE OR REPLACE TRIGGER puts the statement trigger back).
-- plan_never_deleted (12_integrity.sql, migration 0780) stays as it is: a statement trigger without a
-- transition table on the plan, a reference table. Made by the function file on the Citus table (with
-- citus.enable_unsafe_triggers on, as for every trigger of the migration), Citus puts it on each node's
-- placement, and a DELETE is refused on the first it reaches (pgTAP 202 checks every placement has it).
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t WHERE t.tgrelid = 'billing.invoice'::regclass
                  AND t.tgname = 'invoice_subscription_exists' AND t.tgnewtable IS NOT NULL) THEN
        DROP TRIGGER invoice_subscription_exists ON billing.invoice;
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_constraint WHERE conname = 'invoice_subscription_fkey') THEN
            ALTER TABLE billing.invoice ADD CONSTRAINT invoice_subscription_fkey FOREIGN KEY (customer_id, subscription_id)
                REFERENCES billing.subscription (customer_id, id);
        END IF;
        INSERT INTO citus_adapted VALUES ('trigger', 'invoice_subscription_exists');
    END IF;
END
$$;
-- * subscription_plan_exists / _kept and subscription_request_subscription_exists / _kept
--   (12_integrity.sql, migrations 0720 and 0760) by the foreign keys they stand for: the plan's, the
--   scheduled plan's and the customer's (0760), and the request's subscription's.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t WHERE t.tgrelid = 'billing.subscription'::regclass
                  AND t.tgname = 'subscription_plan_exists') THEN
        DROP TRIGGER subscription_plan_exists ON billing.subscription;
        DROP TRIGGER IF EXISTS subscription_plan_kept ON billing.subscription;
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_constraint WHERE conname = 'subscription_plan_fkey') THEN
            ALTER TABLE billing.subscription ADD CONSTRAINT subscription_plan_fkey FOREIGN KEY (plan_id)
                REFERENCES billing.plan (id);
        END IF;
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_constraint WHERE conname = 'subscription_scheduled_plan_fkey') THEN
            ALTER TABLE billing.subscription ADD CONSTRAINT subscription_scheduled_plan_fkey FOREIGN KEY (scheduled_plan_id)
                REFERENCES billing.plan (id);
        END IF;
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_constraint WHERE conname = 'subscription_customer_fkey') THEN
            ALTER TABLE billing.subscription ADD CONSTRAINT subscription_customer_fkey FOREIGN KEY (customer_id)
                REFERENCES billing.customer (id);
        END IF;
        INSERT INTO citus_adapted VALUES ('trigger', 'subscription_plan_exists');
    END IF;
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t WHERE t.tgrelid = 'billing.subscription_request'::regclass
                  AND t.tgname = 'subscription_request_subscription_exists') THEN
        DROP TRIGGER subscription_request_subscription_exists ON billing.subscription_request;
        DROP TRIGGER IF EXISTS subscription_request_subscription_kept ON billing.subscription_request;
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_constraint WHERE conname = 'subscription_request_subscription_fkey') THEN
            ALTER TABLE billing.subscription_request ADD CONSTRAINT subscription_request_subscription_fkey
                FOREIGN KEY (customer_id, subscription_id) REFERENCES billing.subscription (customer_id, id);
        END IF;
        INSERT INTO citus_adapted VALUES ('trigger', 'subscription_request_subscription_exists');
    END IF;
END
$$;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t WHERE t.tgrelid = 'billing.outbox_event'::regclass
                  AND t.tgname = 'outbox_event_notify' AND t.tgnewtable IS NOT NULL) THEN
        DROP TRIGGER outbox_event_notify ON billing.outbox_event;
        INSERT INTO citus_adapted VALUES ('trigger', 'outbox_event_notify');
    END IF;
END
$$;

-- (outbox_event_pending_unkeyed_idx, the Citus-only index of the PENDING events without an order
-- key, is gone: outbox_event_pending_idx is on the outbox's order itself, keyed or not: db/schema/0380)
DROP INDEX IF EXISTS billing.outbox_event_pending_unkeyed_idx;

-- A coupon's redemption counts on the coupon (a reference table: one row, every node's copy) after
-- the call has read its customer's rows: Citus refuses a reference-table write after a parallel read
-- of a distributed table in one transaction ("cannot modify table coupon because there was a
-- parallel operation on a distributed table"), so these calls run their shard reads over one
-- connection per node. Re-applied after every migration (the function files reset it).
ALTER FUNCTION billing.create_subscription(text, bigint, text, timestamptz, integer, text, integer, text)
    SET citus.multi_shard_modify_mode = 'sequential';
-- (the same for the external ids' reference table, billing.external_ref: 21_external_ids.sql)
ALTER FUNCTION billing.upsert_customer(bigint, text, text) SET citus.multi_shard_modify_mode = 'sequential';
ALTER FUNCTION billing.set_external_id(text, bigint, text, timestamptz) SET citus.multi_shard_modify_mode = 'sequential';
ALTER FUNCTION billing.apply_coupon(bigint, text, timestamptz) SET citus.multi_shard_modify_mode = 'sequential';
-- (signups in bulk: on Citus each row is create_subscription's, after the batch's reads)
ALTER FUNCTION billing.create_subscriptions(jsonb, timestamptz) SET citus.multi_shard_modify_mode = 'sequential';
-- The generic plans of the upcoming invoice and usage_between (74_usage_preview, 71_usage) are a
-- single PostgreSQL's: on Citus their statements keep the default plan cache mode (Citus prunes a
-- distributed statement's shards by its parameters in a custom plan).
ALTER FUNCTION billing.upcoming_invoice(bigint, timestamptz) RESET plan_cache_mode;
ALTER FUNCTION billing.usage_between(bigint, timestamptz, timestamptz) RESET plan_cache_mode;

-- The batch claims' shard groups (db/schema/0083): one lease row per group of billing.customer's
-- shards, 1..n in hash order, in place of the single PostgreSQL's group 0.
INSERT INTO billing.shard_lease (shard_group)
SELECT g.shard_group FROM billing._shard_groups() g
    ON CONFLICT ON CONSTRAINT shard_lease_pkey DO NOTHING;
DELETE FROM billing.shard_lease l WHERE NOT EXISTS (SELECT 1 FROM billing._shard_groups() g WHERE g.shard_group = l.shard_group);

-- Every SQL API function that takes p_customer_id becomes a distributed function colocated with
-- billing.customer: a call is sent to the node holding the customer and runs there.
DO $$
DECLARE
    v_fn record;
BEGIN
    FOR v_fn IN
        SELECT p.oid::regprocedure::text AS signature, (d.objid IS NOT NULL) AS done
          FROM pg_catalog.pg_proc p
          LEFT JOIN pg_dist_object d ON d.classid = 'pg_catalog.pg_proc'::regclass AND d.objid = p.oid
                                    AND d.distribution_argument_index IS NOT NULL
         WHERE p.pronamespace = 'billing'::regnamespace AND p.prosecdef AND p.prokind = 'f'
           AND 'p_customer_id' = ANY (p.proargnames)
         ORDER BY 1
    LOOP
        IF NOT v_fn.done THEN
            PERFORM create_distributed_function(v_fn.signature::regprocedure, 'p_customer_id', colocate_with => 'billing.customer');
        END IF;
        INSERT INTO citus_adapted VALUES ('function', v_fn.signature);
    END LOOP;
END
$$;

-- rate_usage's set-based step per shard group (_rate_usage_group, 89_usage_rating_shards): a call is
-- sent to the node holding its anchor customer, even inside the caller's transaction
-- (force_delegation; the function reads and writes only its group's shards and this node's copies).
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_dist_object d
                    WHERE d.classid = 'pg_catalog.pg_proc'::regclass
                      AND d.objid = 'billing._rate_usage_group(bigint, integer, bigint[], bigint[], timestamptz, interval)'::regprocedure
                      AND d.distribution_argument_index IS NOT NULL) THEN
        PERFORM create_distributed_function('billing._rate_usage_group(bigint, integer, bigint[], bigint[], timestamptz, interval)'::regprocedure,
                                            'p_anchor', colocate_with => 'billing.customer', force_delegation => true);
    END IF;
    INSERT INTO citus_adapted VALUES ('function', 'billing._rate_usage_group(bigint,integer,bigint[],bigint[],timestamp with time zone,interval)');
END
$$;

-- The console overview's counters (billing.overview_count, 70_stats.sql): their triggers read a
-- transition table and write a table of the coordinator, neither of which a shard can do; on Citus
-- they are dropped, the counts forgotten, and the overview counts the rows (86_console.sql).
DO $$
DECLARE
    v_trigger record;
BEGIN
    FOR v_trigger IN
        SELECT t.tgname, t.tgrelid::regclass AS rel FROM pg_catalog.pg_trigger t
         WHERE t.tgrelid IN ('billing.subscription'::regclass, 'billing.invoice'::regclass)
           AND t.tgname LIKE '%\_overview\_count\_%'
    LOOP
        EXECUTE format('DROP TRIGGER %I ON %s', v_trigger.tgname, v_trigger.rel);
        INSERT INTO citus_adapted VALUES ('trigger', v_trigger.tgname);
    END LOOP;
    IF to_regclass('billing.overview_count') IS NOT NULL THEN
        DELETE FROM billing.overview_count;
    END IF;
END
$$;

-- The MRR kept by the engine's writes (billing.mrr_*, 76_mrr_aggregate.sql): same reason; dropped,
-- forgotten, and the reports recompute from the lines (billing._mrr_kept() is then false).
DO $$
DECLARE
    v_trigger record;
BEGIN
    FOR v_trigger IN
        SELECT t.tgname, t.tgrelid::regclass AS rel FROM pg_catalog.pg_trigger t
         WHERE t.tgrelid IN ('billing.subscription'::regclass, 'billing.invoice'::regclass, 'billing.service_line'::regclass,
                             'billing.plan'::regclass)
           AND t.tgname LIKE '%\_mrr\_%'
    LOOP
        EXECUTE format('DROP TRIGGER %I ON %s', v_trigger.tgname, v_trigger.rel);
        INSERT INTO citus_adapted VALUES ('trigger', v_trigger.tgname);
    END LOOP;
    IF to_regclass('billing.mrr_dirty') IS NOT NULL THEN
        DELETE FROM billing.mrr_segment;
        DELETE FROM billing.mrr_delta;
        DELETE FROM billing.mrr_movement;
        DELETE FROM billing.mrr_dirty;
    END IF;
END
$$;
