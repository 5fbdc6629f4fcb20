-- 85_security: the audit log, API keys, the database's settings (simulation mark, clock skew)
-- and the expiry of idempotency keys. Who may call what: 90_grants.sql. docs/security.md.
-- Re-applied after every migration: CREATE OR REPLACE only.

-- ---------------------------------------------------------------------------------------------
-- Audit. Every mutating API function calls _audit first, in one line, so the row is written in
-- the mutation's own transaction (a rolled-back call leaves no row, a committed one always has
-- one). Who: billing._actor() (87_sessions.sql): the API key or session whose credential the caller
-- proves (billing.actor_proof: the hash of the key or token the request carried), else what the
-- caller says of itself (billing.actor: cli:<user>, gateway-webhook; never a key's name), else the
-- login role; db_role is always the login role, which a caller cannot forge.
-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION billing._audit(p_function text, p_args jsonb)
RETURNS void
LANGUAGE plpgsql VOLATILE
-- (no SET search_path: a private helper, run inside its definer caller's; a SET costs ~7 us a call, issue 32)
AS $$
BEGIN
    INSERT INTO billing.audit_log (actor, db_role, function, args, customer_id)
    VALUES (billing._actor(), session_user::text, p_function, coalesce(p_args, '{}'::jsonb),
            coalesce((p_args ->> 'customer_id')::bigint, 0));
END
$$;
COMMENT ON FUNCTION billing._audit(text, jsonb) IS
'Private: writes one audit_log row (actor from billing._actor(): a proven API key or session, else the caller''s own description that names no key, else the login role).
Returns nothing. Callers never pass secrets in p_args.';

CREATE OR REPLACE FUNCTION billing.read_audit(
    p_before_id bigint DEFAULT NULL, p_limit integer DEFAULT 100, p_actor text DEFAULT NULL, p_function text DEFAULT NULL)
RETURNS SETOF billing.audit_log
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM billing._check_between('limit', p_limit, 1, 1000);
    RETURN QUERY
    SELECT a.* FROM billing.audit_log a
     WHERE (p_before_id IS NULL OR a.id < p_before_id)
       AND (p_actor IS NULL OR a.actor = p_actor)
       AND (p_function IS NULL OR a.function = p_function)
     ORDER BY a.id DESC
     LIMIT p_limit;
END
$$;
COMMENT ON FUNCTION billing.read_audit(bigint, integer, text, text) IS
'The audit log, newest first: rows with id below p_before_id (all when NULL), optionally of one actor or function.
Returns at most p_limit rows (1..1000); BL422 for another limit.';

-- ---------------------------------------------------------------------------------------------
-- The database's settings.
-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION billing.is_simulation()
RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
    SELECT billing._is_simulation()
$$;
COMMENT ON FUNCTION billing.is_simulation() IS
'Whether this is a simulation database (billing db migrate --simulation): any p_now is accepted and leases may last up to 7 days.
Returns the mark; only the owner role can change it.';

CREATE OR REPLACE FUNCTION billing.set_max_clock_skew(p_max_clock_skew interval)
RETURNS interval
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM billing._audit('set_max_clock_skew', jsonb_build_object('max_clock_skew', p_max_clock_skew));
    IF p_max_clock_skew IS NULL OR p_max_clock_skew <= interval '0' OR p_max_clock_skew > interval '1 day' THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('the clock skew must be between 0 and 1 day, got %s', coalesce(p_max_clock_skew::text, 'NULL'));
    END IF;
    UPDATE billing.database_setting SET max_clock_skew = p_max_clock_skew, updated_at = now();
    RETURN p_max_clock_skew;
END
$$;
COMMENT ON FUNCTION billing.set_max_clock_skew(interval) IS
'How far p_now may be from the database clock outside simulation databases (default 5 minutes).
Returns the new value; BL422 outside (0, 1 day].';

-- ---------------------------------------------------------------------------------------------
-- API keys. The secret is made and hashed by the caller (billing api-key create); the database
-- sees only its SHA-256.
-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION billing._check_scopes(p_scopes text[])
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    IF p_scopes IS NULL OR cardinality(p_scopes) = 0 OR array_position(p_scopes, NULL) IS NOT NULL
       OR NOT p_scopes <@ ARRAY['subscriptions:read', 'subscriptions:write', 'refunds:write', 'customer-sessions:write',
                                'usage:write', 'customers:read', 'customers:write', 'catalog:write', 'reports:read',
                                'admin']::text[] THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('unknown or missing scopes %s', coalesce(p_scopes::text, 'NULL')),
            HINT = 'Use subscriptions:read, subscriptions:write, refunds:write, customer-sessions:write, usage:write, customers:read, customers:write, catalog:write, reports:read and/or admin.';
    END IF;
END
$$;
COMMENT ON FUNCTION billing._check_scopes(text[]) IS
'Private: at least one scope, each of subscriptions:read, subscriptions:write, refunds:write, customer-sessions:write, usage:write, customers:read, customers:write, catalog:write, reports:read, admin.
Returns nothing; BL422 otherwise.';

DROP FUNCTION IF EXISTS billing.create_api_key(text, text, bytea, text[]);
CREATE OR REPLACE FUNCTION billing.create_api_key(
    p_id text, p_name text, p_key_hash bytea, p_scopes text[], p_max_quantity integer DEFAULT NULL,
    p_max_trial_days integer DEFAULT NULL, p_max_refund bigint DEFAULT NULL, p_allow_no_proration boolean DEFAULT false)
RETURNS TABLE (id text, name text, scopes text[], created_at timestamptz, max_quantity integer, max_trial_days integer,
               max_refund bigint, allow_no_proration boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM billing._audit('create_api_key', jsonb_build_object('id', p_id, 'name', p_name, 'scopes', p_scopes)
        || jsonb_strip_nulls(jsonb_build_object('max_quantity', p_max_quantity, 'max_trial_days', p_max_trial_days,
               'max_refund', p_max_refund, 'allow_no_proration', CASE WHEN p_allow_no_proration THEN true END)));
    IF p_id IS NULL OR p_id !~ '^bk_[a-z0-9]{8,32}$' THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = 'a key id is bk_ and 8 to 32 lower-case letters or digits';
    END IF;
    PERFORM billing._check_text('a key name', p_name, 200);
    IF p_key_hash IS NULL OR length(p_key_hash) <> 32 THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = 'the key hash must be a SHA-256 (32 bytes)';
    END IF;
    PERFORM billing._check_scopes(p_scopes);
    IF p_max_quantity IS NOT NULL THEN
        PERFORM billing._check_between('max quantity', p_max_quantity, 1, 1000000);
    END IF;
    IF p_max_trial_days IS NOT NULL THEN
        PERFORM billing._check_between('max trial days', p_max_trial_days, 0, 730);
    END IF;
    IF p_max_refund IS NOT NULL THEN
        PERFORM billing._check_between('max refund', p_max_refund, 1, 9223372036854775807);
    END IF;
    BEGIN
        RETURN QUERY
        INSERT INTO billing.api_key (id, name, key_hash, scopes, created_by, max_quantity, max_trial_days, max_refund,
                                     allow_no_proration)
        VALUES (p_id, p_name, p_key_hash, p_scopes, billing._actor(), p_max_quantity, p_max_trial_days, p_max_refund,
                coalesce(p_allow_no_proration, false))
        RETURNING id, name, scopes, created_at, max_quantity, max_trial_days, max_refund, allow_no_proration;
    EXCEPTION WHEN unique_violation THEN
        RAISE EXCEPTION USING ERRCODE = 'BL409', MESSAGE = format('API key %s already exists', p_id),
            HINT = 'Generate a new key.';
    END;
END
$$;
COMMENT ON FUNCTION billing.create_api_key(text, text, bytea, text[], integer, integer, bigint, boolean) IS
'Stores a new API key by its id and the SHA-256 of its secret (made by the caller), with its scopes and its guardrails (docs/security.md, "Key guardrails": the most seats, the longest trial, the largest refund it may ask for, whether it may skip proration; NULL: no limit of its own).
Returns the key without its hash; BL409 when the id or hash exists, BL422 for a bad id, name, hash, scope or guardrail.';

CREATE OR REPLACE FUNCTION billing.list_api_keys()
RETURNS TABLE (id text, name text, scopes text[], created_at timestamptz, created_by text,
               revoked_at timestamptz, last_used_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
    SELECT k.id, k.name, k.scopes, k.created_at, k.created_by, k.revoked_at, k.last_used_at
      FROM billing.api_key k
     ORDER BY k.created_at, k.id
$$;
COMMENT ON FUNCTION billing.list_api_keys() IS
'Every API key, revoked ones included, without hashes.
Returns one row per key, oldest first.';

CREATE OR REPLACE FUNCTION billing.revoke_api_key(p_id text)
RETURNS TABLE (id text, revoked_at timestamptz)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM billing._audit('revoke_api_key', jsonb_build_object('id', p_id));
    -- Only a key not revoked yet changes (Citus allows no now() inside a COALESCE of an UPDATE).
    UPDATE billing.api_key k SET revoked_at = now() WHERE k.id = p_id AND k.revoked_at IS NULL;
    IF NOT EXISTS (SELECT 1 FROM billing.api_key k WHERE k.id = p_id) THEN
        RAISE EXCEPTION USING ERRCODE = 'BL404', MESSAGE = format('API key %s does not exist', coalesce(p_id, 'NULL'));
    END IF;
    RETURN QUERY SELECT k.id, k.revoked_at FROM billing.api_key k WHERE k.id = p_id;
END
$$;
COMMENT ON FUNCTION billing.revoke_api_key(text) IS
'Revokes a key at once (repeating keeps the first revocation time).
Returns the key id and when it was revoked; BL404 for an unknown id.';

DO $$
BEGIN
    -- its result gained the guardrails (issue 27): a new row type needs a new function
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_proc p WHERE p.oid = 'billing.authenticate_api_key(bytea)'::regprocedure
                  AND array_length(p.proallargtypes, 1) = 3) THEN
        DROP FUNCTION billing.authenticate_api_key(bytea);
    END IF;
EXCEPTION WHEN undefined_function THEN
    NULL;
END
$$;
CREATE OR REPLACE FUNCTION billing.authenticate_api_key(p_key_hash bytea)
RETURNS TABLE (key_id text, scopes text[], max_quantity integer, max_trial_days integer, max_refund bigint,
               allow_no_proration boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    -- last_used_at at most once a minute per key, never waiting for a concurrent request's lock.
    UPDATE billing.api_key k SET last_used_at = now()
     WHERE k.id = (SELECT u.id FROM billing.api_key u
                    WHERE u.key_hash = p_key_hash AND u.revoked_at IS NULL
                      AND (u.last_used_at IS NULL OR u.last_used_at < now() - interval '1 minute')
                      FOR UPDATE SKIP LOCKED);
    RETURN QUERY SELECT k.id, k.scopes, k.max_quantity, k.max_trial_days, k.max_refund, k.allow_no_proration
                   FROM billing.api_key k WHERE k.key_hash = p_key_hash AND k.revoked_at IS NULL;
END
$$;
COMMENT ON FUNCTION billing.authenticate_api_key(bytea) IS
'The key whose secret hashes to p_key_hash, unless revoked; refreshes its last_used_at (at most once a minute). Not audited: it changes nothing but that time.
Returns its id, scopes and guardrails, or no row.';

-- ---------------------------------------------------------------------------------------------
-- Idempotency keys of create_subscription expire: the worker deletes those older than a day.
-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION billing.expire_idempotency_keys(
    p_max_age interval DEFAULT interval '24 hours', p_batch_size integer DEFAULT 10000, p_now timestamptz DEFAULT now())
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_count     integer;
    v_customers bigint[];
    v_keys      text[];
BEGIN
    PERFORM billing._check_now(p_now);
    PERFORM billing._audit('expire_idempotency_keys',
                           jsonb_build_object('max_age', p_max_age, 'batch_size', p_batch_size, 'now', p_now));
    IF p_max_age IS NULL OR p_max_age < interval '1 hour' OR p_max_age > interval '30 days' THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = 'the maximum age must be between 1 hour and 30 days';
    END IF;
    PERFORM billing._check_between('batch size', p_batch_size, 1, 100000);
    IF billing._distributed('billing.subscription_request') THEN
        -- Citus plans no ctid across shards: by primary key (customer_id, idempotency_key), the
        -- age checked again on the row.
        SELECT array_agg(DISTINCT x.customer_id), array_agg(x.idempotency_key) INTO v_customers, v_keys
          FROM (SELECT r.customer_id, r.idempotency_key FROM billing.subscription_request r
                 WHERE r.created_at < p_now - p_max_age LIMIT p_batch_size) x;
        DELETE FROM billing.subscription_request r
         WHERE r.customer_id = ANY (coalesce(v_customers, '{}')) AND r.idempotency_key = ANY (coalesce(v_keys, '{}'))
           AND r.created_at < p_now - p_max_age;
        GET DIAGNOSTICS v_count = ROW_COUNT;
        RETURN v_count;
    END IF;
    DELETE FROM billing.subscription_request r
     WHERE r.ctid = ANY (ARRAY(SELECT x.ctid FROM billing.subscription_request x
                                WHERE x.created_at < p_now - p_max_age LIMIT p_batch_size));
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END
$$;
COMMENT ON FUNCTION billing.expire_idempotency_keys(interval, integer, timestamptz) IS
'Forgets create_subscription idempotency keys first used more than p_max_age before p_now (default 24 hours), at most p_batch_size per call; the key may then be used again.
Returns how many were deleted; BL422 for an age outside 1 hour..30 days.';
