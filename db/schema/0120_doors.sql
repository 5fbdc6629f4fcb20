-- 0120_doors (issue 27): refund results bound to their refund, API keys with guardrails, customer
-- sessions, and the customer search through an index. docs/security.md.

-- ---------------------------------------------------------------------------------------------
-- Refunds: a provider's event saying a SUCCEEDED refund failed after all is never believed on its
-- own word: recheck_at asks the worker to look the refund up at the provider (claim_refund_rechecks).
-- ---------------------------------------------------------------------------------------------
ALTER TABLE billing.refund ADD COLUMN recheck_at timestamptz;
CREATE INDEX refund_recheck_idx ON billing.refund (recheck_at) WHERE recheck_at IS NOT NULL;
COMMENT ON COLUMN billing.refund.recheck_at IS 'Set when a provider event reported this SUCCEEDED refund failed: the worker looks it up at the provider from then on (its answer, not the event, decides); NULL otherwise.';

-- ---------------------------------------------------------------------------------------------
-- API keys: optional guardrails set at creation (NULL: none), and the scope of the server keys
-- that open customer sessions.
-- ---------------------------------------------------------------------------------------------
ALTER TABLE billing.api_key
    ADD COLUMN max_quantity       integer,
    ADD COLUMN max_trial_days     integer,
    ADD COLUMN max_refund         bigint,
    ADD COLUMN allow_no_proration boolean NOT NULL DEFAULT false,
    ADD CONSTRAINT api_key_max_quantity_positive CHECK (max_quantity IS NULL OR max_quantity BETWEEN 1 AND 1000000),
    ADD CONSTRAINT api_key_max_trial_days_range CHECK (max_trial_days IS NULL OR max_trial_days BETWEEN 0 AND 730),
    ADD CONSTRAINT api_key_max_refund_positive CHECK (max_refund IS NULL OR max_refund > 0),
    DROP CONSTRAINT api_key_scopes_known,
    ADD CONSTRAINT api_key_scopes_known CHECK (
        cardinality(scopes) > 0
        AND scopes <@ ARRAY['subscriptions:read', 'subscriptions:write', 'refunds:write', 'customer-sessions:write',
                            'admin']::text[]);
COMMENT ON COLUMN billing.api_key.scopes IS 'subscriptions:read, subscriptions:write, refunds:write, customer-sessions:write and/or admin (admin allows everything).';
COMMENT ON COLUMN billing.api_key.max_quantity IS 'Guardrail: the most seats a subscription this key creates or changes may have (NULL: no limit of its own).';
COMMENT ON COLUMN billing.api_key.max_trial_days IS 'Guardrail: the longest trial this key may give (NULL: no limit of its own).';
COMMENT ON COLUMN billing.api_key.max_refund IS 'Guardrail: the largest refund (minor units) this key may ask for in one request (NULL: no limit of its own).';
COMMENT ON COLUMN billing.api_key.allow_no_proration IS 'Whether this key may change a plan with prorate: false (without it, only an admin key may).';

-- ---------------------------------------------------------------------------------------------
-- Customer sessions: a short-lived token for a front-end that acts for one customer only. The
-- token is cs_<customer id>_<secret>; only its SHA-256 is kept, under the customer's key.
-- ---------------------------------------------------------------------------------------------
CREATE TABLE billing.customer_session (
    customer_id bigint      NOT NULL CONSTRAINT customer_session_customer_fkey REFERENCES billing.customer (id),
    token_hash  bytea       NOT NULL,
    key_id      text        NOT NULL,
    created_at  timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    revoked_at  timestamptz,
    CONSTRAINT customer_session_pkey PRIMARY KEY (customer_id, token_hash),
    CONSTRAINT customer_session_token_sha256 CHECK (length(token_hash) = 32),
    CONSTRAINT customer_session_key_id_form CHECK (key_id ~ '^bk_[a-z0-9]{8,32}$'),
    CONSTRAINT customer_session_short_lived CHECK (expires_at > created_at AND expires_at <= created_at + interval '1 hour')
);
CREATE INDEX customer_session_expires_idx ON billing.customer_session (expires_at);
COMMENT ON TABLE billing.customer_session IS 'A short-lived token that reads and acts on one customer only (a customer portal, a checkout page): the SHA-256 of cs_<customer id>_<secret>, never the token.';
COMMENT ON COLUMN billing.customer_session.customer_id IS 'The one customer the token may read and act on.';
COMMENT ON COLUMN billing.customer_session.token_hash IS 'SHA-256 of the whole token as presented in Authorization: Bearer.';
COMMENT ON COLUMN billing.customer_session.key_id IS 'The server API key that opened it (its revocation ends the session; the key''s guardrails apply).';
COMMENT ON COLUMN billing.customer_session.created_at IS 'When it was opened (wall clock).';
COMMENT ON COLUMN billing.customer_session.expires_at IS 'It ends then (at most an hour after it was opened).';
COMMENT ON COLUMN billing.customer_session.revoked_at IS 'When it was ended early; NULL while valid.';
REVOKE ALL ON billing.customer_session FROM PUBLIC;

-- ---------------------------------------------------------------------------------------------
-- The console's customer search: a substring of the name or email through trigram indexes, never
-- a scan of every customer (issue 27, finding 2). pg_trgm is a trusted extension: a database
-- owner's CREATE privilege is enough. It goes to a schema of its own so that its functions are
-- not among the SQL API's (schema billing); an existing pg_trgm elsewhere is used where it is.
-- ---------------------------------------------------------------------------------------------
DO $$
DECLARE
    v_schema text;
BEGIN
    SELECT n.nspname INTO v_schema
      FROM pg_catalog.pg_extension e JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace
     WHERE e.extname = 'pg_trgm';
    IF v_schema IS NULL THEN
        CREATE SCHEMA IF NOT EXISTS billing_ext;
        CREATE EXTENSION pg_trgm WITH SCHEMA billing_ext;
        -- The owner's functions maintain the trigram indexes (on Citus also where a shard moves to).
        GRANT USAGE ON SCHEMA billing_ext TO billing_owner;
        v_schema := 'billing_ext';
    END IF;
    EXECUTE format('CREATE INDEX customer_name_trgm_idx ON billing.customer USING gin (lower(name) %I.gin_trgm_ops)', v_schema);
    EXECUTE format('CREATE INDEX customer_email_trgm_idx ON billing.customer USING gin (lower(email) %I.gin_trgm_ops)', v_schema);
END
$$;
