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

ALTER TABLE billing.payment_attempt ADD COLUMN customer_id bigint;
UPDATE billing.payment_attempt a SET customer_id = i.customer_id FROM billing.invoice i WHERE i.id = a.invoice_id;
ALTER TABLE billing.payment_attempt ALTER COLUMN customer_id SET NOT NULL;
COMMENT ON COLUMN billing.payment_attempt.customer_id IS 'The invoice''s customer (the distribution key on Citus).';

-- The foreign keys on the old single-column keys go first.
ALTER TABLE billing.subscription_request DROP CONSTRAINT subscription_request_subscription_fkey;
ALTER TABLE billing.credit_entry DROP CONSTRAINT credit_entry_subscription_fkey,
                                 DROP CONSTRAINT credit_entry_invoice_fkey;
ALTER TABLE billing.credit_pending DROP CONSTRAINT credit_pending_subscription_fkey;
ALTER TABLE billing.payment_attempt DROP CONSTRAINT payment_attempt_invoice_fkey;
ALTER TABLE billing.invoice DROP CONSTRAINT invoice_paid_attempt_fkey;
ALTER TABLE billing.refund DROP CONSTRAINT refund_invoice_fkey,
                           DROP CONSTRAINT refund_attempt_fkey;

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
ALTER TABLE billing.subscription_request ADD CONSTRAINT subscription_request_subscription_fkey
    FOREIGN KEY (customer_id, subscription_id) REFERENCES billing.subscription (customer_id, id);
ALTER TABLE billing.credit_entry
    ADD CONSTRAINT credit_entry_subscription_fkey
        FOREIGN KEY (customer_id, subscription_id) REFERENCES billing.subscription (customer_id, id),
    ADD CONSTRAINT credit_entry_invoice_fkey
        FOREIGN KEY (customer_id, invoice_id) REFERENCES billing.invoice (customer_id, id);
ALTER TABLE billing.credit_pending ADD CONSTRAINT credit_pending_subscription_fkey
    FOREIGN KEY (customer_id, subscription_id) REFERENCES billing.subscription (customer_id, id);
ALTER TABLE billing.payment_attempt ADD CONSTRAINT payment_attempt_invoice_fkey
    FOREIGN KEY (customer_id, invoice_id) REFERENCES billing.invoice (customer_id, id);
ALTER TABLE billing.invoice ADD CONSTRAINT invoice_paid_attempt_fkey
    FOREIGN KEY (customer_id, paid_attempt_id) REFERENCES billing.payment_attempt (customer_id, id);
ALTER TABLE billing.refund
    ADD CONSTRAINT refund_invoice_fkey FOREIGN KEY (customer_id, invoice_id) REFERENCES billing.invoice (customer_id, id),
    ADD CONSTRAINT refund_attempt_fkey FOREIGN KEY (customer_id, attempt_id) REFERENCES billing.payment_attempt (customer_id, id);
