-- External ids (issue 28): customers, plans and subscriptions carry the caller's own id, unique per
-- kind, usable wherever ours is through the lookup functions of db/functions/21_external_ids.sql
-- (docs/import.md).
--
-- On Citus a customer's rows are distributed by customer_id, and Citus enforces a unique index only
-- inside one shard: a unique index on subscription.external_id alone is impossible there. So the
-- uniqueness and the lookup live in billing.external_ref, one row per (kind, external id), a
-- reference table (a copy on every node: a lookup is local wherever the call runs, and a write is
-- one distributed transaction, as a coupon's redemption count is). The column on each row is its
-- copy for reading (answers, lists), written by the same statements as its external_ref row.
-- Plans are a reference table already: the unique column is enough there.

CREATE TABLE billing.external_ref (
    object_type text        NOT NULL,
    external_id text        NOT NULL,
    customer_id bigint      NOT NULL,
    object_id   bigint      NOT NULL,
    created_at  timestamptz NOT NULL,
    CONSTRAINT external_ref_pkey PRIMARY KEY (object_type, external_id),
    CONSTRAINT external_ref_object_key UNIQUE (object_type, customer_id, object_id),
    CONSTRAINT external_ref_object_type_known CHECK (object_type IN ('customer', 'subscription')),
    CONSTRAINT external_ref_external_id_form CHECK (btrim(external_id) = external_id AND length(external_id) BETWEEN 1 AND 255),
    CONSTRAINT external_ref_customer_is_object CHECK (object_type <> 'customer' OR object_id = customer_id)
);
COMMENT ON TABLE billing.external_ref IS 'The caller''s own id of a customer or subscription (unique per kind) and the row it names; a reference table on Citus.';
COMMENT ON COLUMN billing.external_ref.object_type IS 'customer or subscription.';
COMMENT ON COLUMN billing.external_ref.external_id IS 'The caller''s id (1..255 characters, no surrounding blanks), e.g. a Stripe id cus_... or sub_....';
COMMENT ON COLUMN billing.external_ref.customer_id IS 'The customer the object belongs to (the customer itself for a customer).';
COMMENT ON COLUMN billing.external_ref.object_id IS 'Our id of the object (customer.id or subscription.id).';
COMMENT ON COLUMN billing.external_ref.created_at IS 'When the external id was given (p_now of the call).';

ALTER TABLE billing.customer ADD COLUMN external_id text;
COMMENT ON COLUMN billing.customer.external_id IS 'The caller''s own id of the customer (unique: billing.external_ref), or NULL.';
ALTER TABLE billing.subscription ADD COLUMN external_id text;
COMMENT ON COLUMN billing.subscription.external_id IS 'The caller''s own id of the subscription (unique: billing.external_ref), or NULL.';

ALTER TABLE billing.plan ADD COLUMN external_id text;
-- migration-check: allow plan is a small configuration table (one row per price)
ALTER TABLE billing.plan ADD CONSTRAINT plan_external_id_key UNIQUE (external_id),
    ADD CONSTRAINT plan_external_id_form CHECK (external_id IS NULL OR (btrim(external_id) = external_id AND length(external_id) BETWEEN 1 AND 255));
COMMENT ON COLUMN billing.plan.external_id IS 'The caller''s own id of the plan (unique), e.g. a Stripe price id price_..., or NULL.';
