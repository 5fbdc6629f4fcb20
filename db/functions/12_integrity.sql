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
'Private trigger: the foreign key invoice.subscription_id -> subscription.id, checked once per statement with one anti-join.
Returns NULL; raises foreign_key_violation (23503) naming invoice_subscription_exists.';

CREATE OR REPLACE FUNCTION billing._subscription_never_deleted()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = '23503',
        MESSAGE = 'subscriptions are never deleted: cancel them instead',
        CONSTRAINT = 'subscription_never_deleted', TABLE = 'subscription', SCHEMA = 'billing';
END
$$;
COMMENT ON FUNCTION billing._subscription_never_deleted() IS
'Private trigger: refuses DELETE on billing.subscription (invoices, attempts and events refer to it forever; TRUNCATE wipes all and stays allowed).
Returns nothing; raises foreign_key_violation (23503).';

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
    FOR EACH STATEMENT EXECUTE FUNCTION billing._subscription_never_deleted();
