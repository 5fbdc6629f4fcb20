-- 0080_customer_keys: what belongs to a customer is keyed by customer (docs/scaling.md).
--
-- On Citus the engine is distributed by customer_id: a table's rows are spread over shards by the
-- hash of its customer_id, and Citus only enforces a primary key, a unique constraint or a foreign
-- key that includes that column (it is then checked inside one shard). So every customer-owned
-- table carries customer_id in its primary key, and every foreign key between two of them carries
-- it too: a subscription, its invoices, their payment attempts, credit and refunds stay together.
-- The same schema runs on a single PostgreSQL, where the composite keys say no less than the old
-- ones (ids are unique by their identity; a row's customer is its parent's, now checked as well).
--
-- Rows are looked up by id alone too (an attempt by its invoice, an invoice by id): each id keeps
-- a plain index. payment_attempt gains customer_id (its invoice's).
--
-- The foreign keys to the re-keyed tables are found in the catalog, not listed: every key that
-- points at subscription, invoice, payment_attempt or credit_entry by id alone, whichever
-- migration made it, is dropped and made again on (customer_id, <its column>) under its own name.

ALTER TABLE billing.payment_attempt ADD COLUMN customer_id bigint;
UPDATE billing.payment_attempt a SET customer_id = i.customer_id FROM billing.invoice i WHERE i.id = a.invoice_id;
ALTER TABLE billing.payment_attempt ALTER COLUMN customer_id SET NOT NULL;
COMMENT ON COLUMN billing.payment_attempt.customer_id IS 'The invoice''s customer (the distribution key on Citus).';

CREATE TEMPORARY TABLE rekeyed_fk ON COMMIT DROP AS
SELECT k.conname, k.conrelid::regclass AS child, k.confrelid::regclass AS parent, a.attname AS column_name,
       k.confupdtype, k.confdeltype
  FROM pg_catalog.pg_constraint k
  JOIN pg_catalog.pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = k.conkey[1]
 WHERE k.contype = 'f' AND k.connamespace = 'billing'::regnamespace
   AND k.confrelid IN ('billing.subscription'::regclass, 'billing.invoice'::regclass,
                       'billing.payment_attempt'::regclass, 'billing.credit_entry'::regclass)
   AND cardinality(k.confkey) = 1;

DO $$
DECLARE
    v_fk record;
BEGIN
    FOR v_fk IN SELECT * FROM rekeyed_fk LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute
                        WHERE attrelid = v_fk.child AND attname = 'customer_id' AND NOT attisdropped) THEN
            RAISE EXCEPTION '%.%: a table referring to % must carry customer_id (docs/scaling.md)',
                v_fk.child, v_fk.conname, v_fk.parent;
        END IF;
        EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', v_fk.child, v_fk.conname);
    END LOOP;
END
$$;

-- Primary keys (customer_id, id), and a plain index on id for the lookups by id.
ALTER TABLE billing.subscription DROP CONSTRAINT subscription_pkey,
    ADD CONSTRAINT subscription_pkey PRIMARY KEY (customer_id, id);
CREATE INDEX subscription_id_idx ON billing.subscription (id);

ALTER TABLE billing.invoice DROP CONSTRAINT invoice_pkey,
    ADD CONSTRAINT invoice_pkey PRIMARY KEY (customer_id, id),
    DROP CONSTRAINT invoice_one_per_period,
    ADD CONSTRAINT invoice_one_per_period UNIQUE (customer_id, subscription_id, period_start, kind);
CREATE INDEX invoice_id_idx ON billing.invoice (id);
CREATE INDEX invoice_subscription_idx ON billing.invoice (subscription_id);

ALTER TABLE billing.payment_attempt DROP CONSTRAINT payment_attempt_pkey,
    ADD CONSTRAINT payment_attempt_pkey PRIMARY KEY (customer_id, id),
    DROP CONSTRAINT payment_attempt_one_per_try,
    ADD CONSTRAINT payment_attempt_one_per_try UNIQUE (customer_id, invoice_id, attempt_number);
CREATE INDEX payment_attempt_id_idx ON billing.payment_attempt (id);
CREATE INDEX payment_attempt_invoice_idx ON billing.payment_attempt (invoice_id, attempt_number);

ALTER TABLE billing.credit_entry DROP CONSTRAINT credit_entry_pkey,
    ADD CONSTRAINT credit_entry_pkey PRIMARY KEY (customer_id, id);

-- The foreign keys again, with customer_id: a child's customer is its parent's.
DO $$
DECLARE
    v_fk record;
BEGIN
    FOR v_fk IN SELECT * FROM rekeyed_fk ORDER BY child::text, conname LOOP
        EXECUTE format('ALTER TABLE %s ADD CONSTRAINT %I FOREIGN KEY (customer_id, %I) REFERENCES %s (customer_id, id)%s%s',
                       v_fk.child, v_fk.conname, v_fk.column_name, v_fk.parent,
                       CASE v_fk.confupdtype WHEN 'c' THEN ' ON UPDATE CASCADE' WHEN 'r' THEN ' ON UPDATE RESTRICT'
                                             WHEN 'n' THEN ' ON UPDATE SET NULL' ELSE '' END,
                       CASE v_fk.confdeltype WHEN 'c' THEN ' ON DELETE CASCADE' WHEN 'r' THEN ' ON DELETE RESTRICT'
                                             WHEN 'n' THEN ' ON DELETE SET NULL' ELSE '' END);
    END LOOP;
END
$$;
