-- 0010_security: API keys, the audit log and the database's own settings (simulation mark,
-- allowed clock skew). Forward-only. Runs as billing_owner (the migration runner sets the role);
-- the roles themselves are created by the runner before it (docs/security.md).

-- Functions created later by the owner are not executable by everybody.
ALTER DEFAULT PRIVILEGES FOR ROLE billing_owner IN SCHEMA billing REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;

-- ---------------------------------------------------------------------------------------------
-- api_key: who may call the HTTP API. Only a hash of the secret is kept.
-- ---------------------------------------------------------------------------------------------
CREATE TABLE billing.api_key (
    id           text        NOT NULL CONSTRAINT api_key_pkey PRIMARY KEY,
    name         text        NOT NULL,
    key_hash     bytea       NOT NULL CONSTRAINT api_key_hash_key UNIQUE,
    scopes       text[]      NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    created_by   text        NOT NULL,
    revoked_at   timestamptz,
    last_used_at timestamptz,
    CONSTRAINT api_key_id_form CHECK (id ~ '^bk_[a-z0-9]{8,32}$'),
    CONSTRAINT api_key_name_not_blank CHECK (btrim(name) <> '' AND length(name) <= 200),
    CONSTRAINT api_key_hash_sha256 CHECK (length(key_hash) = 32),
    CONSTRAINT api_key_scopes_known CHECK (
        cardinality(scopes) > 0 AND scopes <@ ARRAY['subscriptions:read', 'subscriptions:write', 'admin']::text[])
);
COMMENT ON TABLE billing.api_key IS 'An HTTP API key: its public id, what it may do (scopes) and the SHA-256 of its secret; never the secret.';
COMMENT ON COLUMN billing.api_key.id IS 'Public key id (bk_ + lower-case letters and digits), the readable prefix of the key itself.';
COMMENT ON COLUMN billing.api_key.name IS 'What the key is for (free text of the operator who created it).';
COMMENT ON COLUMN billing.api_key.key_hash IS 'SHA-256 of the whole key as presented in Authorization: Bearer.';
COMMENT ON COLUMN billing.api_key.scopes IS 'subscriptions:read, subscriptions:write and/or admin (admin allows everything).';
COMMENT ON COLUMN billing.api_key.created_at IS 'When the key was created (wall clock).';
COMMENT ON COLUMN billing.api_key.created_by IS 'Who created it (the audit actor: CLI user or database role).';
COMMENT ON COLUMN billing.api_key.revoked_at IS 'When it was revoked; a revoked key authenticates nothing.';
COMMENT ON COLUMN billing.api_key.last_used_at IS 'Last successful authentication (wall clock, refreshed at most once a minute).';

-- ---------------------------------------------------------------------------------------------
-- audit_log: every mutation through the SQL API, written in the mutation's own transaction.
-- ---------------------------------------------------------------------------------------------
CREATE TABLE billing.audit_log (
    id        bigint GENERATED ALWAYS AS IDENTITY CONSTRAINT audit_log_pkey PRIMARY KEY,
    at        timestamptz NOT NULL DEFAULT now(),
    actor     text        NOT NULL,
    db_role   text        NOT NULL,
    function  text        NOT NULL,
    args      jsonb       NOT NULL,
    txid      xid8        NOT NULL DEFAULT pg_current_xact_id()
);
CREATE INDEX audit_log_at_idx ON billing.audit_log (at);
COMMENT ON TABLE billing.audit_log IS 'Who called which mutating function with which arguments, and when; same transaction as the change.';
COMMENT ON COLUMN billing.audit_log.id IS 'Order of writing.';
COMMENT ON COLUMN billing.audit_log.at IS 'Transaction start (wall clock); a simulated p_now is among the args.';
COMMENT ON COLUMN billing.audit_log.actor IS 'Who asked: api-key:<id>, cli:<user>, or the database role when the caller said nothing.';
COMMENT ON COLUMN billing.audit_log.db_role IS 'The database login (session_user) that ran the call; cannot be forged by the caller.';
COMMENT ON COLUMN billing.audit_log.function IS 'The SQL API function called.';
COMMENT ON COLUMN billing.audit_log.args IS 'Its arguments by name, secrets and large payloads left out.';
COMMENT ON COLUMN billing.audit_log.txid IS 'The writing transaction, to group the rows of one transaction.';

-- ---------------------------------------------------------------------------------------------
-- database_setting: one row. Only the owner changes the simulation mark (billing db migrate
-- --simulation); billing_admin changes the allowed clock skew through set_max_clock_skew.
-- ---------------------------------------------------------------------------------------------
CREATE TABLE billing.database_setting (
    singleton      boolean     NOT NULL DEFAULT true CONSTRAINT database_setting_pkey PRIMARY KEY,
    simulation     boolean     NOT NULL DEFAULT false,
    max_clock_skew interval    NOT NULL DEFAULT interval '5 minutes',
    updated_at     timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT database_setting_one_row CHECK (singleton),
    CONSTRAINT database_setting_skew_range CHECK (max_clock_skew > interval '0' AND max_clock_skew <= interval '1 day')
);
INSERT INTO billing.database_setting DEFAULT VALUES;
COMMENT ON TABLE billing.database_setting IS 'This database''s own settings (one row).';
COMMENT ON COLUMN billing.database_setting.singleton IS 'Always true: the table has one row.';
COMMENT ON COLUMN billing.database_setting.simulation IS 'A simulation database (demo, tests): any p_now is accepted and leases may be longer.';
COMMENT ON COLUMN billing.database_setting.max_clock_skew IS 'How far p_now may be from the database clock outside simulation (default 5 minutes).';
COMMENT ON COLUMN billing.database_setting.updated_at IS 'When the row last changed (wall clock).';
