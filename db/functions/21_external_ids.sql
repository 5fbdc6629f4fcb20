-- 21_external_ids: the caller's own ids of customers, plans and subscriptions (issue 28; migration
-- 0210, docs/import.md). Given by upsert_customer / upsert_plan / create_subscription (p_external_id)
-- or later by set_external_id; read back with resolve_external_id (our id, for any call that takes
-- one) and the get_*_by_external_id functions. Unique per kind: billing.external_ref for customers
-- and subscriptions (a reference table on Citus, where a customer's rows are spread over shards),
-- the plan's own unique column for plans. An external id, once given, never changes.
-- Re-applied after every migration: CREATE OR REPLACE only.

CREATE OR REPLACE FUNCTION billing._check_external_id(p_external_id text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    IF p_external_id IS NOT NULL AND (length(p_external_id) NOT BETWEEN 1 AND 255 OR btrim(p_external_id) <> p_external_id) THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('an external id is 1 to 255 characters without surrounding blanks, got %L', left(p_external_id, 300)),
            HINT = 'Pass your own id of the object as is (e.g. cus_..., sub_...), or NULL for none.';
    END IF;
END
$$;
COMMENT ON FUNCTION billing._check_external_id(text) IS
'Private: an external id is NULL (none) or 1..255 characters without leading or trailing blanks.
Returns nothing; BL422 otherwise.';

-- Gives the object its external id: the object's row must be locked (or new) so that two calls for
-- one object are in turn. Repeating the same pair is harmless.
CREATE OR REPLACE FUNCTION billing._claim_external_id(
    p_object_type text, p_external_id text, p_customer_id bigint, p_object_id bigint, p_now timestamptz)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_ref billing.external_ref;
BEGIN
    SELECT * INTO v_ref FROM billing.external_ref r
     WHERE r.object_type = p_object_type AND r.customer_id = p_customer_id AND r.object_id = p_object_id;
    IF FOUND THEN
        IF v_ref.external_id = p_external_id THEN
            RETURN false;
        END IF;
        RAISE EXCEPTION USING ERRCODE = 'BL409',
            MESSAGE = format('%s %s already has the external id %L, not %L', p_object_type, p_object_id, v_ref.external_id, p_external_id),
            HINT = 'An external id never changes once given.';
    END IF;
    INSERT INTO billing.external_ref (object_type, external_id, customer_id, object_id, created_at)
    VALUES (p_object_type, p_external_id, p_customer_id, p_object_id, p_now)
    ON CONFLICT ON CONSTRAINT external_ref_pkey DO NOTHING;
    IF NOT FOUND THEN
        -- (the message names the external id only: never the other object's id or its customer, which
        -- the caller, a customer session perhaps, may not see)
        RAISE EXCEPTION USING ERRCODE = 'BL409',
            MESSAGE = format('the external id %L is already in use by another %s', p_external_id, p_object_type),
            HINT = 'External ids are unique per kind: look the object up with resolve_external_id.';
    END IF;
    RETURN true;
END
$$;
COMMENT ON FUNCTION billing._claim_external_id(text, text, bigint, bigint, timestamptz) IS
'Private: records that p_external_id names the customer or subscription p_object_id (of p_customer_id); the object''s row is locked by the caller.
Returns true when recorded now, false when it already was; BL409 when the id names another object or the object has another id.';

-- The plan's external id (plans are a reference table: its unique column is the rule).
CREATE OR REPLACE FUNCTION billing._claim_plan_external_id(p_plan billing.plan, p_external_id text)
RETURNS billing.plan
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_plan  billing.plan := p_plan;
    v_other bigint;
BEGIN
    IF p_external_id IS NULL OR v_plan.external_id IS NOT DISTINCT FROM p_external_id THEN
        RETURN v_plan;
    END IF;
    IF v_plan.external_id IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'BL409',
            MESSAGE = format('plan %s already has the external id %L, not %L', v_plan.code, v_plan.external_id, p_external_id),
            HINT = 'An external id never changes once given.';
    END IF;
    SELECT p.id INTO v_other FROM billing.plan p WHERE p.external_id = p_external_id;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'BL409',
            MESSAGE = format('the external id %L already names plan %s', p_external_id, billing.plan_code(v_other)),
            HINT = 'External ids are unique per kind: look the plan up with get_plan_by_external_id.';
    END IF;
    UPDATE billing.plan SET external_id = p_external_id WHERE id = v_plan.id RETURNING * INTO v_plan;
    RETURN v_plan;
END
$$;
COMMENT ON FUNCTION billing._claim_plan_external_id(billing.plan, text) IS
'Private: gives the (locked) plan p_external_id when it has none; nothing when p_external_id is NULL or already its id.
Returns the plan row; BL409 when the id names another plan or the plan has another id.';

CREATE OR REPLACE FUNCTION billing.set_external_id(
    p_object_type text, p_id bigint, p_external_id text, p_now timestamptz DEFAULT now())
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_plan billing.plan;
    v_sub  billing.subscription;
BEGIN
    PERFORM billing._audit('set_external_id', jsonb_build_object('object_type', p_object_type, 'id', p_id, 'external_id', p_external_id, 'now', p_now));
    PERFORM billing._check_now(p_now);
    PERFORM billing._check_one_of('object type', p_object_type, ARRAY['customer', 'plan', 'subscription'],
                                  'Use customer, plan or subscription.');
    IF p_external_id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = 'an external id is required';
    END IF;
    PERFORM billing._check_external_id(p_external_id);
    IF p_object_type = 'plan' THEN
        SELECT * INTO v_plan FROM billing.plan WHERE id = p_id FOR UPDATE;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'BL404', MESSAGE = format('plan %s does not exist', coalesce(p_id::text, 'NULL'));
        END IF;
        PERFORM billing._claim_plan_external_id(v_plan, p_external_id);
    ELSIF p_object_type = 'customer' THEN
        PERFORM billing._lock_customer(p_id);
        IF billing._claim_external_id('customer', p_external_id, p_id, p_id, p_now) THEN
            UPDATE billing.customer SET external_id = p_external_id WHERE id = p_id;
        END IF;
    ELSE
        v_sub := billing._lock_subscription(p_id);
        IF billing._claim_external_id('subscription', p_external_id, v_sub.customer_id, v_sub.id, p_now) THEN
            UPDATE billing.subscription SET external_id = p_external_id WHERE customer_id = v_sub.customer_id AND id = v_sub.id;
        END IF;
    END IF;
    RETURN p_id;
END
$$;
COMMENT ON FUNCTION billing.set_external_id(text, bigint, text, timestamptz) IS
'Gives an existing customer, plan or subscription (p_object_type) the caller''s own id p_external_id, unique per kind; repeating the same pair is harmless; an external id never changes once given.
Returns p_id; BL404 when the object is absent, BL409 when the id names another object or the object has another id, BL422 for an unknown type or a malformed id.';

CREATE OR REPLACE FUNCTION billing.resolve_external_id(p_object_type text, p_external_id text)
RETURNS bigint
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_id bigint;
BEGIN
    PERFORM billing._check_one_of('object type', p_object_type, ARRAY['customer', 'plan', 'subscription'],
                                  'Use customer, plan or subscription.');
    IF p_object_type = 'plan' THEN
        SELECT p.id INTO v_id FROM billing.plan p WHERE p.external_id = p_external_id;
    ELSE
        SELECT r.object_id INTO v_id FROM billing.external_ref r
         WHERE r.object_type = p_object_type AND r.external_id = p_external_id;
    END IF;
    RETURN v_id;
END
$$;
COMMENT ON FUNCTION billing.resolve_external_id(text, text) IS
'Our id of the customer, plan or subscription whose external id is p_external_id: usable in any call that takes our id (e.g. cancel_subscription(billing.resolve_external_id(''subscription'', ''sub_1''), ...)).
Returns the id, or NULL when no object has that external id; BL422 for an unknown type.';

CREATE OR REPLACE FUNCTION billing.get_customer_by_external_id(p_external_id text)
RETURNS billing.customer
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_row billing.customer;
BEGIN
    SELECT c.* INTO v_row FROM billing.external_ref r JOIN billing.customer c ON c.id = r.customer_id
     WHERE r.object_type = 'customer' AND r.external_id = p_external_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'BL404', MESSAGE = format('no customer has the external id %L', p_external_id);
    END IF;
    RETURN v_row;
END
$$;
COMMENT ON FUNCTION billing.get_customer_by_external_id(text) IS
'Reads the customer whose external id is p_external_id.
Returns the row; BL404 when none has it.';

CREATE OR REPLACE FUNCTION billing.get_plan_by_external_id(p_external_id text)
RETURNS billing.plan
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_row billing.plan;
BEGIN
    SELECT * INTO v_row FROM billing.plan p WHERE p.external_id = p_external_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'BL404', MESSAGE = format('no plan has the external id %L', p_external_id);
    END IF;
    RETURN v_row;
END
$$;
COMMENT ON FUNCTION billing.get_plan_by_external_id(text) IS
'Reads the plan whose external id is p_external_id.
Returns the row; BL404 when none has it.';

CREATE OR REPLACE FUNCTION billing.get_subscription_by_external_id(p_external_id text)
RETURNS billing.subscription
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_ref billing.external_ref;
    v_row billing.subscription;
BEGIN
    SELECT * INTO v_ref FROM billing.external_ref r WHERE r.object_type = 'subscription' AND r.external_id = p_external_id;
    IF FOUND THEN
        -- Named by (customer_id, id): one shard on Citus.
        SELECT * INTO v_row FROM billing.subscription s WHERE s.customer_id = v_ref.customer_id AND s.id = v_ref.object_id;
    END IF;
    IF v_row.id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'BL404', MESSAGE = format('no subscription has the external id %L', p_external_id);
    END IF;
    RETURN v_row;
END
$$;
COMMENT ON FUNCTION billing.get_subscription_by_external_id(text) IS
'Reads the subscription whose external id is p_external_id.
Returns the row; BL404 when none has it.';
