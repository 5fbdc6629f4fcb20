-- 0050_console: sessions of the operator console (`billing serve`, /console; docs/console.md).
-- Forward-only. A session is opened by logging in with an API key (admin or subscriptions:read);
-- the browser holds a random token in an HttpOnly cookie, the database only its SHA-256. Each
-- request reads the session joined with its key, so revoking the key ends its sessions at once.
-- Sessions are the operator's, not a customer's: no customer_id.

CREATE TABLE billing.console_session (
    token_hash bytea       NOT NULL CONSTRAINT console_session_pkey PRIMARY KEY,
    key_id     text        NOT NULL CONSTRAINT console_session_key_fkey REFERENCES billing.api_key (id),
    created_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL,
    closed_at  timestamptz,
    CONSTRAINT console_session_token_sha256 CHECK (length(token_hash) = 32),
    CONSTRAINT console_session_expires_after_creation CHECK (expires_at > created_at)
);
CREATE INDEX console_session_expires_idx ON billing.console_session (expires_at);
COMMENT ON TABLE billing.console_session IS 'A logged-in browser of the operator console: the SHA-256 of its cookie token and the API key it logged in with.';
COMMENT ON COLUMN billing.console_session.token_hash IS 'SHA-256 of the session token held in the browser''s HttpOnly cookie; never the token.';
COMMENT ON COLUMN billing.console_session.key_id IS 'The API key the operator logged in with: its scopes decide what the session may do, its revocation ends the session.';
COMMENT ON COLUMN billing.console_session.created_at IS 'Login time (wall clock).';
COMMENT ON COLUMN billing.console_session.expires_at IS 'The session ends then, whatever happens (wall clock).';
COMMENT ON COLUMN billing.console_session.closed_at IS 'When the operator logged out; NULL while open.';
