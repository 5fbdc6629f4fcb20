-- 12_integrity: triggers that keep invoice and subscription rows consistent where a plain
-- constraint cannot (see migration 0002). Re-applied after every migration: CREATE OR REPLACE only.

-- ---------------------------------------------------------------------------------------------
-- Referential integrity of invoice.subscription_id, per statement (see migration 0002).
-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION billing._invoice_subscription_exists()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_missing bigint;
BEGIN
    -- The renewal statement's own invoices (migration 0920): their subscriptions are the rows that
    -- statement locked; its transaction's mark exists only while it runs, and only the owner writes it.
    IF EXISTS (SELECT 1 FROM billing.renewal_statement_mark m
                WHERE m.xact = pg_catalog.pg_current_xact_id_if_assigned()) THEN
        RETURN NULL;
    END IF;
    SELECT n.subscription_id INTO v_missing
      FROM new_invoices n
     WHERE NOT EXISTS (SELECT 1 FROM billing.subscription s WHERE s.id = n.subscription_id)
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = '23503',
            MESSAGE = format('invoice refers to subscription %s, which does not exist', v_missing),
            CONSTRAINT = 'invoice_subscription_exists', TABLE = 'invoice', SCHEMA = 'billing';
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION billing._invoice_subscription_exists() IS
'Private trigger: the foreign key invoice.subscription_id -> subscription.id, checked once per statement with one anti-join (skipped for the renewal statement of _renew_batch, whose invoices take their subscriptions from rows it locked: its transaction''s row in renewal_statement_mark, migration 0920).
Returns NULL; raises foreign_key_violation (23503) naming invoice_subscription_exists.';

-- A row that is never deleted (nor renumbered): one trigger function for the subscription, the
-- customer and the plan (house8 folded three of one shape). Its arguments: the message (a format
-- string: %s is OLD.id on a row trigger, an UPDATE that changes a key; a statement trigger on DELETE
-- has no row). The constraint named is the trigger's own name, the table the trigger's table.
CREATE OR REPLACE FUNCTION billing._never_deleted()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = '23503',
        MESSAGE = CASE WHEN TG_LEVEL = 'ROW' THEN format(TG_ARGV[0], OLD.id) ELSE TG_ARGV[0] END,
        CONSTRAINT = TG_NAME, TABLE = TG_TABLE_NAME, SCHEMA = TG_TABLE_SCHEMA;
END
$$;
COMMENT ON FUNCTION billing._never_deleted() IS
'Private trigger: refuses a DELETE (statement trigger) or a change of a row''s id (row trigger) on a table whose rows are referred to forever (subscription_never_deleted, customer_never_deleted, customer_id_fixed, plan_never_deleted; TRUNCATE wipes all and stays allowed). TG_ARGV[0]: the message (%s: the row''s id).
Returns nothing; raises foreign_key_violation (23503) naming the trigger.';

CREATE OR REPLACE TRIGGER invoice_subscription_exists
    AFTER INSERT ON billing.invoice
    REFERENCING NEW TABLE AS new_invoices
    FOR EACH STATEMENT EXECUTE FUNCTION billing._invoice_subscription_exists();

CREATE OR REPLACE FUNCTION billing._invoice_subscription_fixed()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = '23503',
        MESSAGE = format('invoice %s: subscription_id never changes', OLD.id),
        CONSTRAINT = 'invoice_subscription_fixed', TABLE = 'invoice', SCHEMA = 'billing';
END
$$;
COMMENT ON FUNCTION billing._invoice_subscription_fixed() IS
'Private trigger: an invoice never moves to another subscription (so the insert-time check is enough).
Returns nothing; raises foreign_key_violation (23503).';

CREATE OR REPLACE TRIGGER invoice_subscription_fixed
    BEFORE UPDATE OF subscription_id ON billing.invoice
    FOR EACH ROW WHEN (OLD.subscription_id IS DISTINCT FROM NEW.subscription_id)
    EXECUTE FUNCTION billing._invoice_subscription_fixed();

-- TRUNCATE (an operator wiping a test database, as the model test does) stays possible.
CREATE OR REPLACE TRIGGER subscription_never_deleted
    BEFORE DELETE ON billing.subscription
    FOR EACH STATEMENT EXECUTE FUNCTION billing._never_deleted('subscriptions are never deleted: cancel them instead');

-- ---------------------------------------------------------------------------------------------
-- subscription.plan_id -> plan.id, subscription.scheduled_plan_id -> plan.id and
-- subscription.customer_id -> customer.id (0760), and
-- subscription_request -> subscription, per statement (0720): the foreign keys' checks were an
-- executor start and a parent lock per row. The parents need no lock: a plan is never deleted nor
-- renumbered, a customer never deleted nor renumbered (customer_never_deleted, customer_id_fixed
-- below), a subscription never deleted nor renumbered (pgTAP 404). One trigger checks both of a
-- subscription's parents (one call a statement: a signup through create_subscription is a statement
-- of one row). On Citus the foreign keys stay (db/citus/10_adapt.sql drops these triggers, adds them
-- back; the customer guards stay).
-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION billing._subscription_plan_exists()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_plan     bigint;
    v_customer bigint;
BEGIN
    IF TG_LEVEL = 'ROW' THEN  -- (an UPDATE that changed plan_id, scheduled_plan_id or customer_id)
        IF NOT EXISTS (SELECT 1 FROM billing.plan p WHERE p.id = NEW.plan_id) THEN
            v_plan := NEW.plan_id;
        ELSIF NEW.scheduled_plan_id IS NOT NULL
              AND NOT EXISTS (SELECT 1 FROM billing.plan p WHERE p.id = NEW.scheduled_plan_id) THEN
            v_plan := NEW.scheduled_plan_id;
        ELSIF NOT EXISTS (SELECT 1 FROM billing.customer c WHERE c.id = NEW.customer_id) THEN
            v_customer := NEW.customer_id;
        END IF;
    ELSE
        -- The parents in one statement: an anti-join each, an index probe a row (NOT EXISTS under an
        -- OR was planned as a hashed subplan over every customer: 50 ms a batch of 5,000 at 115,000).
        SELECT x.plan_id, x.customer_id INTO v_plan, v_customer
          FROM (SELECT n.plan_id, NULL::bigint AS customer_id FROM new_rows n
                 WHERE NOT EXISTS (SELECT 1 FROM billing.plan p WHERE p.id = n.plan_id)
                UNION ALL
                SELECT n.scheduled_plan_id, NULL FROM new_rows n
                 WHERE n.scheduled_plan_id IS NOT NULL
                   AND NOT EXISTS (SELECT 1 FROM billing.plan p WHERE p.id = n.scheduled_plan_id)
                UNION ALL
                SELECT NULL, n.customer_id FROM new_rows n
                 WHERE NOT EXISTS (SELECT 1 FROM billing.customer c WHERE c.id = n.customer_id)) x
         LIMIT 1;
    END IF;
    IF v_plan IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = '23503',
            MESSAGE = format('subscription refers to plan %s, which does not exist', v_plan),
            CONSTRAINT = 'subscription_plan_exists', TABLE = 'subscription', SCHEMA = 'billing';
    ELSIF v_customer IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = '23503',
            MESSAGE = format('subscription refers to customer %s, which does not exist', v_customer),
            CONSTRAINT = 'subscription_customer_exists', TABLE = 'subscription', SCHEMA = 'billing';
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION billing._subscription_plan_exists() IS
'Private trigger: the foreign keys subscription.plan_id -> plan.id and (0760) subscription.scheduled_plan_id -> plan.id and subscription.customer_id -> customer.id, checked once per INSERT statement with one anti-join each (and per row when an UPDATE changes one of them).
Returns NULL; raises foreign_key_violation (23503) naming subscription_plan_exists or subscription_customer_exists.';

CREATE OR REPLACE TRIGGER subscription_plan_exists
    AFTER INSERT ON billing.subscription
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION billing._subscription_plan_exists();
CREATE OR REPLACE TRIGGER subscription_plan_kept
    AFTER UPDATE OF plan_id, scheduled_plan_id, customer_id ON billing.subscription
    FOR EACH ROW WHEN (OLD.plan_id IS DISTINCT FROM NEW.plan_id OR OLD.scheduled_plan_id IS DISTINCT FROM NEW.scheduled_plan_id
                       OR OLD.customer_id IS DISTINCT FROM NEW.customer_id)
    EXECUTE FUNCTION billing._subscription_plan_exists();

-- A customer is never deleted nor renumbered (0760): subscriptions refer to it without a foreign
-- key's lock (above). TRUNCATE (an operator wiping a test database) stays possible.
CREATE OR REPLACE TRIGGER customer_never_deleted
    BEFORE DELETE ON billing.customer
    FOR EACH STATEMENT EXECUTE FUNCTION billing._never_deleted(
        'customers are never deleted: their subscriptions, invoices and events refer to them');
CREATE OR REPLACE TRIGGER customer_id_fixed
    BEFORE UPDATE OF id ON billing.customer
    FOR EACH ROW WHEN (OLD.id IS DISTINCT FROM NEW.id)
    EXECUTE FUNCTION billing._never_deleted('customer %s: its id never changes');

CREATE OR REPLACE FUNCTION billing._subscription_request_subscription_exists()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_missing bigint;
BEGIN
    -- (a request without its subscription yet, subscription_id NULL, refers to nothing: MATCH SIMPLE)
    SELECT n.subscription_id INTO v_missing
      FROM new_rows n
     WHERE n.subscription_id IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM billing.subscription s WHERE s.customer_id = n.customer_id AND s.id = n.subscription_id)
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = '23503',
            MESSAGE = format('subscription request refers to subscription %s, which does not exist for its customer', v_missing),
            CONSTRAINT = 'subscription_request_subscription_exists', TABLE = 'subscription_request', SCHEMA = 'billing';
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION billing._subscription_request_subscription_exists() IS
'Private trigger: the foreign key subscription_request (customer_id, subscription_id) -> subscription (customer_id, id), checked once per INSERT or UPDATE statement with one anti-join.
Returns NULL; raises foreign_key_violation (23503) naming subscription_request_subscription_exists.';

CREATE OR REPLACE TRIGGER subscription_request_subscription_exists
    AFTER INSERT ON billing.subscription_request
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION billing._subscription_request_subscription_exists();
CREATE OR REPLACE TRIGGER subscription_request_subscription_kept
    AFTER UPDATE ON billing.subscription_request
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION billing._subscription_request_subscription_exists();

-- ---------------------------------------------------------------------------------------------
-- A plan is never deleted (migration 0780): subscriptions (whose foreign key became a statement
-- check in 0720), invoices (no foreign key since 0540) and the MRR refer to it forever; a plan no
-- longer offered is archived (archive_plan). Before this, on one PostgreSQL only plan_price_plan_fkey
-- stood in the way. TRUNCATE (an operator wiping a test database) stays possible. On Citus the plan
-- is a reference table: the trigger fires on each of its placements (db/citus/10_adapt.sql checks).
-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE TRIGGER plan_never_deleted
    BEFORE DELETE ON billing.plan
    FOR EACH STATEMENT EXECUTE FUNCTION billing._never_deleted(
        'plans are never deleted: archive them instead (billing.archive_plan)');

-- The three functions _never_deleted replaced (house8), once no trigger runs them (the triggers above
-- were moved to it by their CREATE OR REPLACE): a database built before keeps none of them.
DROP FUNCTION IF EXISTS billing._subscription_never_deleted();
DROP FUNCTION IF EXISTS billing._customer_never_deleted();
DROP FUNCTION IF EXISTS billing._plan_never_deleted();
