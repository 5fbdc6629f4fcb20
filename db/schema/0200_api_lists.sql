-- The HTTP API under /v1 (issue 28): the scopes of the new routes, and the indexes its cursor lists
-- walk (docs/http-api.md, "Lists"). Every list orders by a unique key (id, or code for the catalog),
-- newest first, and pages with a cursor on that key; each filter has an index that starts with it
-- and ends with that key, so a page reads at most limit + 1 index entries, never an offset.
ALTER TABLE billing.api_key DROP CONSTRAINT api_key_scopes_known,
    ADD CONSTRAINT api_key_scopes_known CHECK (
        cardinality(scopes) > 0
        AND scopes <@ ARRAY['subscriptions:read', 'subscriptions:write', 'refunds:write', 'customer-sessions:write',
                            'usage:write', 'customers:read', 'customers:write', 'catalog:write', 'reports:read',
                            'admin']::text[]);
COMMENT ON COLUMN billing.api_key.scopes IS 'subscriptions:read, subscriptions:write, refunds:write, customer-sessions:write, usage:write, customers:read, customers:write, catalog:write, reports:read and/or admin (admin allows everything).';

-- customers: search by email (case-insensitive, exact), newest first
CREATE INDEX customer_email_idx ON billing.customer (lower(email), id) WHERE email IS NOT NULL;
-- subscriptions: by status, by plan, by creation time (by customer: the primary key (customer_id, id))
CREATE INDEX subscription_status_idx ON billing.subscription (status, id);
CREATE INDEX subscription_plan_idx ON billing.subscription (plan_id, id);
CREATE INDEX subscription_created_idx ON billing.subscription (created_at, id);
-- invoices: by status, by period start (by customer: the primary key; the whole list: invoice_id_idx)
CREATE INDEX invoice_status_idx ON billing.invoice (status, id);
CREATE INDEX invoice_period_idx ON billing.invoice (period_start, id);
-- credit notes and refunds: the whole list by id (by customer: the primary keys; by invoice: their invoice indexes)
CREATE INDEX credit_note_id_idx ON billing.credit_note (id);
CREATE INDEX refund_id_idx ON billing.refund (id);
