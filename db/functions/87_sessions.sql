-- 87_sessions (issue 27): who the audit log names, customer sessions, and failed authentications.
-- Re-applied after every migration: CREATE OR REPLACE only. Granted in 90_grants.sql. docs/security.md.

-- ---------------------------------------------------------------------------------------------
-- The audit actor, decided here from what the caller proves, not from what it says. The HTTP API
-- and the console set the transaction-local billing.actor_proof to the SHA-256 of the credential
-- the request carried: key:<hex> (an API key), console:<hex> (a console session token) or
-- customer:<customer id>:<hex> (a customer session token), portal:<customer id>:<hex> (a portal
-- session cookie). Only a credential that is valid now
-- names an API key. Without a proof, billing.actor is a description the caller gives of itself
-- (cli:<user>, gateway-webhook), kept as it is, except that it may not name an API key or a
-- customer session: those names come from a proof only. db_role (the login) is recorded beside it.
-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION billing._actor()
RETURNS text
LANGUAGE plpgsql STABLE
-- (no SET search_path: a private helper, run inside its definer caller's; a SET costs ~7 us a call, issue 32)
AS $$
DECLARE
    v_proof text := nullif(current_setting('billing.actor_proof', true), '');
    v_claim text := nullif(left(current_setting('billing.actor', true), 200), '');
    v_found text;
    v_parts text[];
BEGIN
    IF v_proof IS NOT NULL THEN
        IF v_proof ~ '^key:[0-9a-f]{64}$' THEN
            SELECT 'api-key:' || k.id INTO v_found FROM billing.api_key k
             WHERE k.key_hash = decode(substr(v_proof, 5), 'hex') AND k.revoked_at IS NULL;
        ELSIF v_proof ~ '^console:[0-9a-f]{64}$' THEN
            SELECT 'api-key:' || s.key_id INTO v_found
              FROM billing.console_session s JOIN billing.api_key k ON k.id = s.key_id
             WHERE s.token_hash = decode(substr(v_proof, 9), 'hex') AND s.closed_at IS NULL
               AND s.expires_at > pg_catalog.now() AND k.revoked_at IS NULL;
        ELSIF v_proof ~ '^customer:[0-9]{1,18}:[0-9a-f]{64}$' THEN
            v_parts := regexp_match(v_proof, '^customer:([0-9]+):([0-9a-f]{64})$');
            SELECT 'customer-session:' || s.customer_id || ' (api-key:' || s.key_id || ')' INTO v_found
              FROM billing.customer_session s JOIN billing.api_key k ON k.id = s.key_id
             WHERE s.customer_id = v_parts[1]::bigint AND s.token_hash = decode(v_parts[2], 'hex')
               AND s.revoked_at IS NULL AND k.revoked_at IS NULL;  -- its expiry: checked by the caller at its p_now
        ELSIF v_proof ~ '^portal:[0-9]{1,18}:[0-9a-f]{64}$' THEN
            -- a customer portal session (37_portal): the customer alone, no key behind it
            v_parts := regexp_match(v_proof, '^portal:([0-9]+):([0-9a-f]{64})$');
            SELECT 'portal-session:' || s.customer_id INTO v_found
              FROM billing.portal_session s
             WHERE s.customer_id = v_parts[1]::bigint AND s.token_hash = decode(v_parts[2], 'hex')
               AND s.closed_at IS NULL;  -- its expiry: checked by the caller at its p_now
        END IF;
        RETURN coalesce(v_found, session_user::text || ' (credential not valid)');
    END IF;
    IF v_claim IS NULL THEN
        RETURN session_user::text;
    END IF;
    IF v_claim ~* '^\s*(api-key|customer-session|portal-session)' THEN
        RETURN session_user::text || ' (claimed ' || v_claim || ' without proof)';
    END IF;
    RETURN v_claim;
END
$$;
COMMENT ON FUNCTION billing._actor() IS
'Private: the audit actor of this transaction: api-key:<id>, customer-session:<customer> (api-key:<id>) or portal-session:<customer> when billing.actor_proof holds the hash of a credential valid now; else billing.actor (a description the caller gives, never naming a key or a customer session) or the login.
Returns the actor text.';

-- ---------------------------------------------------------------------------------------------
-- Customer sessions: a server key (scope customer-sessions:write, checked by the API; the key is
-- proven by billing.actor_proof) opens a token for one customer, for at most an hour.
-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION billing.open_customer_session(
    p_customer_id bigint, p_token_hash bytea, p_ttl interval DEFAULT interval '15 minutes', p_now timestamptz DEFAULT now())
RETURNS TABLE (customer_id bigint, key_id text, expires_at timestamptz)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_actor text;
    v_key_id text;
BEGIN
    PERFORM billing._audit('open_customer_session', jsonb_build_object('customer_id', p_customer_id, 'ttl', p_ttl, 'now', p_now));
    PERFORM billing._check_now(p_now);
    IF p_token_hash IS NULL OR length(p_token_hash) <> 32 THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = 'the session token hash must be a SHA-256 (32 bytes)';
    END IF;
    IF p_ttl IS NULL OR p_ttl < interval '1 minute' OR p_ttl > interval '1 hour' THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = 'a customer session lasts between 1 minute and 1 hour';
    END IF;
    v_actor := billing._actor();
    IF v_actor !~ '^api-key:bk_[a-z0-9]+$' THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = 'a customer session is opened by an API key (billing.actor_proof = key:<sha-256 of the key>)';
    END IF;
    v_key_id := substr(v_actor, 9);
    PERFORM 1 FROM billing.customer c WHERE c.id = p_customer_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'BL404', MESSAGE = format('customer %s does not exist', p_customer_id);
    END IF;
    -- Forget this customer's sessions that ended more than a day ago.
    DELETE FROM billing.customer_session s
     WHERE s.customer_id = p_customer_id AND s.expires_at < p_now - interval '1 day';
    RETURN QUERY
    INSERT INTO billing.customer_session (customer_id, token_hash, key_id, created_at, expires_at)
    VALUES (p_customer_id, p_token_hash, v_key_id, p_now, p_now + p_ttl)
    RETURNING customer_id, key_id, expires_at;
END
$$;
COMMENT ON FUNCTION billing.open_customer_session(bigint, bytea, interval, timestamptz) IS
'Opens a session that may read and act on customer p_customer_id only, until p_now + p_ttl (1 minute..1 hour); only the SHA-256 of the token is stored. The opening key is the one proven by billing.actor_proof (key:<hex>), never a name the caller gives.
Returns the customer, the key id and the expiry; BL404 for an unknown customer, BL422 without a proven key, for a bad hash or ttl.';

DROP FUNCTION IF EXISTS billing.customer_session(bigint, bytea, timestamptz);
CREATE OR REPLACE FUNCTION billing.customer_session(
    p_customer_id bigint, p_token_hash bytea, p_now timestamptz DEFAULT now())
RETURNS TABLE (customer_id bigint, key_id text, scopes text[], expires_at timestamptz, max_quantity integer,
               max_trial_days integer, max_refund bigint, allow_no_proration boolean)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
    SELECT billing._check_now(p_now);
    SELECT s.customer_id, s.key_id, k.scopes, s.expires_at, k.max_quantity, k.max_trial_days, k.max_refund,
           k.allow_no_proration
      FROM billing.customer_session s
      JOIN billing.api_key k ON k.id = s.key_id
     WHERE s.customer_id = p_customer_id AND s.token_hash = p_token_hash
       AND s.revoked_at IS NULL AND s.expires_at > p_now AND k.revoked_at IS NULL
$$;
COMMENT ON FUNCTION billing.customer_session(bigint, bytea, timestamptz) IS
'The check of a customer session token: the session of customer p_customer_id whose token hashes to p_token_hash, not revoked, not expired at p_now, its key not revoked.
Returns the customer, the opening key, its scopes and guardrails, the expiry; or no row.';

CREATE OR REPLACE FUNCTION billing.close_customer_session(
    p_customer_id bigint, p_token_hash bytea, p_now timestamptz DEFAULT now())
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM billing._audit('close_customer_session', jsonb_build_object('customer_id', p_customer_id, 'now', p_now));
    PERFORM billing._check_now(p_now);
    UPDATE billing.customer_session s SET revoked_at = p_now
     WHERE s.customer_id = p_customer_id AND s.token_hash = p_token_hash AND s.revoked_at IS NULL;
    RETURN FOUND;
END
$$;
COMMENT ON FUNCTION billing.close_customer_session(bigint, bytea, timestamptz) IS
'Ends a customer session early (the token is useless from then on).
Returns whether an open session was ended.';

-- ---------------------------------------------------------------------------------------------
-- A failed authentication (issue 27, finding 7): audited when it names a key id that exists (a
-- wrong secret for a real key is someone trying it), with the address and the route; never the
-- secret. Unknown ids write nothing (the API logs and counts them; the table is not a log).
-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION billing.record_auth_failure(
    p_key_id text, p_address text, p_route text, p_now timestamptz DEFAULT now())
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM billing._check_now(p_now);
    IF p_key_id IS NULL OR NOT EXISTS (SELECT 1 FROM billing.api_key k WHERE k.id = p_key_id) THEN
        RETURN false;
    END IF;
    PERFORM billing._audit('authentication_failed', jsonb_build_object(
        'key_id', p_key_id, 'address', left(p_address, 64), 'route', left(p_route, 200), 'now', p_now));
    RETURN true;
END
$$;
COMMENT ON FUNCTION billing.record_auth_failure(text, text, text, timestamptz) IS
'Audits a failed authentication that named the existing API key p_key_id with a wrong secret (function authentication_failed; the address and route, never the secret).
Returns whether a row was written (false: no such key).';
