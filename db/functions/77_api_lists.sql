-- 77_api_lists: the reads of the HTTP API's /v1 lists (docs/http-api.md, "Lists"), and creating a
-- customer with its details in one call.
--
-- Every list is a page of a cursor walk: rows ordered by a unique key (id; code for coupons and tax
-- rates), newest (highest) first. p_starting_after gives the rows after that key in that order
-- (key < cursor), p_ending_before the rows before it (key > cursor), returned nearest the cursor
-- first (ascending; the caller reverses them). p_limit rows at most: the caller asks for one more
-- than it shows to know whether there are more. Each filter is one predicate, added only when
-- given, in a statement built for exactly those filters (EXECUTE ... USING: the values are never
-- spliced into the text), so each page is planned on the index of its filter (migration 0200) and
-- reads at most p_limit index entries past the cursor: never an offset.

DROP FUNCTION IF EXISTS billing._page(text, text, text[], boolean, boolean, integer);
DROP FUNCTION IF EXISTS billing._page(text, text, text[], boolean, boolean, integer, integer);
CREATE OR REPLACE FUNCTION billing._page(
    p_from text, p_key text, p_where text[], p_after boolean, p_before boolean, p_limit integer,
    p_walk integer DEFAULT NULL, p_max_limit integer DEFAULT 101)
RETURNS text
LANGUAGE plpgsql IMMUTABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_where  text[] := coalesce(p_where, '{}');
    v_cursor text;
    v_dir    text := CASE WHEN p_before THEN 'ASC' ELSE 'DESC' END;
BEGIN
    PERFORM billing._check_between('limit', p_limit, 1, p_max_limit);
    IF p_after AND p_before THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = 'starting_after and ending_before cannot be used together';
    END IF;
    -- $1 is always the cursor of starting_after, $2 that of ending_before.
    IF p_after THEN
        v_cursor := format('%s < $1', p_key);
    ELSIF p_before THEN
        v_cursor := format('%s > $2', p_key);
    END IF;
    IF p_walk IS NOT NULL AND cardinality(v_where) > 0 THEN
        -- A time range (a period's start, a creation time) cannot come out of its index in id
        -- order, and the planner, which assumes the range's rows spread evenly over the ids, may walk
        -- the id index through every newer row to reach a range in the middle of history (1.2 s at
        -- 1M subscriptions: bench/api_lists). The same holds for OPEN invoices, which invoice_status_idx
        -- leaves out (db/schema/0860): their own index is invoice_chargeable_idx (next_attempt_at).
        -- So: first a walk of at most p_walk (2,000) entries of the id
        -- index from the cursor (a range near the cursor, or a wide one, fills the page there); only
        -- when that walk neither filled the page nor reached the end, the range's own index (an
        -- index-only scan of its (time, id) entries) with the newest ids kept (top-N): a page then
        -- costs at most 2,000 entries plus the rows of the range, never a walk of the whole table.
        -- The walk is a subquery in the key's order, not a CTE: the page stops reading it at its last
        -- row (a walk as a CTE was sorted whole, 2,000 rows read for every page), and the walk's
        -- length is counted only when the page is short (OR evaluates its second subquery only then).
        RETURN format($q$
            WITH hit AS MATERIALIZED (
                     SELECT * FROM (SELECT * FROM %1$s%2$s ORDER BY %3$s %4$s LIMIT %8$s) w
                      WHERE %5$s ORDER BY %3$s %4$s LIMIT %6$s),
                 enough AS MATERIALIZED (
                     SELECT (SELECT count(*) FROM hit) = %6$s
                         OR (SELECT count(*) FROM (SELECT 1 FROM %1$s%2$s ORDER BY %3$s %4$s LIMIT %8$s) w) < %8$s AS ok)
            SELECT * FROM hit WHERE (SELECT ok FROM enough)
            UNION ALL
            (SELECT * FROM %1$s
              WHERE NOT (SELECT ok FROM enough)
                AND %3$s = ANY (ARRAY(SELECT r.%3$s FROM %1$s r WHERE %7$s ORDER BY r.%3$s + 0 %4$s LIMIT %6$s)))
            ORDER BY %3$s %4$s$q$,
            p_from, CASE WHEN v_cursor IS NOT NULL THEN ' WHERE ' || v_cursor ELSE '' END, p_key, v_dir,
            array_to_string(v_where, ' AND '), p_limit,
            array_to_string(v_where || v_cursor, ' AND '), p_walk);
    END IF;
    IF v_cursor IS NOT NULL THEN
        v_where := v_where || v_cursor;
    END IF;
    RETURN format('SELECT * FROM %s%s ORDER BY %s %s LIMIT %s', p_from,
                  CASE WHEN cardinality(v_where) > 0 THEN ' WHERE ' || array_to_string(v_where, ' AND ') ELSE '' END,
                  p_key, v_dir, p_limit);
END
$$;
COMMENT ON FUNCTION billing._page(text, text, text[], boolean, boolean, integer, integer, integer) IS
'Private: the statement of one page of a cursor list (p_from filtered by p_where, the cursor $1 after / $2 before on p_key, p_limit rows); p_walk: the filters hold a time range or OPEN invoices (a walk of at most p_walk entries of the key''s index first, else the range''s index, top-N). Also the console''s page of OPEN invoices (console_invoices, p_max_limit 500).
Returns the SQL text; BL422 for a limit outside 1..p_max_limit (101) or both cursors.';

-- -- customers ------------------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION billing.get_customer(p_customer_id bigint)
RETURNS SETOF billing.customer
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
    SELECT * FROM billing.customer WHERE id = p_customer_id
$$;
COMMENT ON FUNCTION billing.get_customer(bigint) IS
'Reads one customer.
Returns the row, or none for an unknown customer.';

DROP FUNCTION IF EXISTS billing.create_customer(bigint, text, text, text, text, text, text, text, text, text, text);
CREATE OR REPLACE FUNCTION billing.create_customer(
    p_customer_id bigint, p_timezone text, p_name text, p_email text, p_address text, p_city text,
    p_postal_code text, p_region text, p_country text, p_tax_id text, p_tax_status text DEFAULT 'TAXABLE',
    p_external_id text DEFAULT NULL)
RETURNS billing.customer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    IF p_customer_id IS NULL OR p_customer_id < 1 THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = 'a customer id is a positive integer';
    END IF;
    -- Two creations of one id at once: the second waits here, then finds the first.
    PERFORM pg_advisory_xact_lock(hashtextextended('billing.customer', p_customer_id));
    IF EXISTS (SELECT 1 FROM billing.customer WHERE id = p_customer_id) THEN
        RAISE EXCEPTION USING ERRCODE = 'BL409', MESSAGE = format('customer %s already exists', p_customer_id),
            HINT = 'Update it (set_customer_details) instead.';
    END IF;
    PERFORM billing.upsert_customer(p_customer_id, coalesce(p_timezone, 'UTC'), p_external_id);
    RETURN billing.set_customer_details(p_customer_id, p_name, p_email, p_address, p_city, p_postal_code, p_region,
                                        p_country, p_tax_id, coalesce(p_tax_status, 'TAXABLE'));
END
$$;
COMMENT ON FUNCTION billing.create_customer(bigint, text, text, text, text, text, text, text, text, text, text, text) IS
'Creates the customer p_customer_id with its time zone, billing details and optional external id (the checks of upsert_customer and set_customer_details).
Returns the customer; BL409 when it exists already or the external id is taken, BL422 for a bad id, time zone, detail or external id.';

CREATE OR REPLACE FUNCTION billing.list_customers(
    p_limit integer, p_starting_after bigint DEFAULT NULL, p_ending_before bigint DEFAULT NULL, p_email text DEFAULT NULL)
RETURNS SETOF billing.customer
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    RETURN QUERY EXECUTE billing._page('billing.customer', 'id',
        CASE WHEN p_email IS NOT NULL THEN ARRAY['email IS NOT NULL AND lower(email) = lower($3)'] END,
        p_starting_after IS NOT NULL, p_ending_before IS NOT NULL, p_limit)
        USING p_starting_after, p_ending_before, p_email;
END
$$;
COMMENT ON FUNCTION billing.list_customers(integer, bigint, bigint, text) IS
'A page of customers by id, newest first (cursor rules at the top of 77_api_lists.sql); p_email: only those with that email (case-insensitive).
Returns the rows; BL422 for a limit outside 1..101 or both cursors.';

-- -- the catalog -----------------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION billing.get_plan(p_code text)
RETURNS SETOF billing.plan
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
    SELECT * FROM billing.plan WHERE code = p_code
$$;
COMMENT ON FUNCTION billing.get_plan(text) IS
'Reads one plan by its code.
Returns the row, or none for an unknown code.';

DROP FUNCTION IF EXISTS billing.list_plans(integer, bigint, bigint);
CREATE OR REPLACE FUNCTION billing.list_plans(
    p_limit integer, p_starting_after bigint DEFAULT NULL, p_ending_before bigint DEFAULT NULL,
    p_archived boolean DEFAULT NULL)
RETURNS SETOF billing.plan
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    -- archived true / false: one of the two partial indexes of migration 0290, in id order.
    RETURN QUERY EXECUTE billing._page('billing.plan', 'id',
        CASE p_archived WHEN true THEN ARRAY['archived_at IS NOT NULL'] WHEN false THEN ARRAY['archived_at IS NULL'] END,
        p_starting_after IS NOT NULL, p_ending_before IS NOT NULL, p_limit)
        USING p_starting_after, p_ending_before;
END
$$;
COMMENT ON FUNCTION billing.list_plans(integer, bigint, bigint, boolean) IS
'A page of plans by id, newest first (cursor rules at the top of 77_api_lists.sql); p_archived true: only archived plans, false: only offered ones, NULL: all.
Returns the rows; BL422 for a limit outside 1..101 or both cursors.';

DROP FUNCTION IF EXISTS billing.list_coupons(integer, text, text);
CREATE OR REPLACE FUNCTION billing.list_coupons(
    p_limit integer, p_starting_after text DEFAULT NULL, p_ending_before text DEFAULT NULL,
    p_archived boolean DEFAULT NULL)
RETURNS SETOF billing.coupon
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    RETURN QUERY EXECUTE billing._page('billing.coupon', 'code',
        CASE p_archived WHEN true THEN ARRAY['archived_at IS NOT NULL'] WHEN false THEN ARRAY['archived_at IS NULL'] END,
        p_starting_after IS NOT NULL, p_ending_before IS NOT NULL, p_limit)
        USING p_starting_after, p_ending_before;
END
$$;
COMMENT ON FUNCTION billing.list_coupons(integer, text, text, boolean) IS
'A page of coupons by code, descending (cursor rules at the top of 77_api_lists.sql); p_archived true: only archived coupons, false: only redeemable ones, NULL: all.
Returns the rows; BL422 for a limit outside 1..101 or both cursors.';

CREATE OR REPLACE FUNCTION billing.list_tax_rates(
    p_limit integer, p_starting_after text DEFAULT NULL, p_ending_before text DEFAULT NULL)
RETURNS SETOF billing.tax_rate
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    RETURN QUERY EXECUTE billing._page('billing.tax_rate', 'code', NULL, p_starting_after IS NOT NULL,
                                       p_ending_before IS NOT NULL, p_limit)
        USING p_starting_after, p_ending_before;
END
$$;
COMMENT ON FUNCTION billing.list_tax_rates(integer, text, text) IS
'A page of tax rates by code, descending (cursor rules at the top of 77_api_lists.sql).
Returns the rows; BL422 for a limit outside 1..101 or both cursors.';

-- -- subscriptions and money ---------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION billing.list_subscriptions(
    p_limit integer, p_starting_after bigint DEFAULT NULL, p_ending_before bigint DEFAULT NULL,
    p_customer_id bigint DEFAULT NULL, p_status text DEFAULT NULL, p_plan_code text DEFAULT NULL,
    p_created_from timestamptz DEFAULT NULL, p_created_to timestamptz DEFAULT NULL)
RETURNS SETOF billing.subscription
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_where text[] := '{}';
BEGIN
    IF p_customer_id IS NOT NULL THEN v_where := v_where || 'customer_id = $3'::text; END IF;
    IF p_status IS NOT NULL THEN v_where := v_where || 'status = $4'::text; END IF;
    IF p_plan_code IS NOT NULL THEN
        v_where := v_where || 'plan_id = (SELECT p.id FROM billing.plan p WHERE p.code = $5)'::text;
    END IF;
    IF p_created_from IS NOT NULL THEN v_where := v_where || 'created_at >= $6'::text; END IF;
    IF p_created_to IS NOT NULL THEN v_where := v_where || 'created_at < $7'::text; END IF;
    RETURN QUERY EXECUTE billing._page('billing.subscription', 'id', v_where, p_starting_after IS NOT NULL,
                                       p_ending_before IS NOT NULL, p_limit,
                                       CASE WHEN (p_created_from IS NOT NULL OR p_created_to IS NOT NULL)
                                            AND NOT billing._distributed('billing.subscription') THEN 2000 END)
        USING p_starting_after, p_ending_before, p_customer_id, p_status, p_plan_code, p_created_from, p_created_to;
END
$$;
COMMENT ON FUNCTION billing.list_subscriptions(integer, bigint, bigint, bigint, text, text, timestamptz, timestamptz) IS
'A page of subscriptions by id, newest first (cursor rules at the top of 77_api_lists.sql), of one customer, status, plan code and/or created in [p_created_from, p_created_to).
Returns the rows; BL422 for a limit outside 1..101 or both cursors.';

CREATE OR REPLACE FUNCTION billing.list_invoices(
    p_limit integer, p_starting_after bigint DEFAULT NULL, p_ending_before bigint DEFAULT NULL,
    p_customer_id bigint DEFAULT NULL, p_status text DEFAULT NULL, p_period_from timestamptz DEFAULT NULL,
    p_period_to timestamptz DEFAULT NULL, p_subscription_id bigint DEFAULT NULL)
RETURNS SETOF billing.invoice
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_where text[] := '{}';
BEGIN
    IF p_customer_id IS NOT NULL THEN v_where := v_where || 'customer_id = $3'::text; END IF;
    -- OPEN is not in invoice_status_idx (db/schema/0860): its page takes the walk below (the id
    -- index from the cursor, at most 2,000 entries, else the OPEN rows through invoice_chargeable_idx,
    -- newest kept); another status names its literal bound too, so that the partial index is provably
    -- the status's own.
    IF p_status = 'OPEN' THEN v_where := v_where || 'status = ''OPEN'''::text;
    ELSIF p_status IS NOT NULL THEN v_where := v_where || 'status = $4'::text || 'status <> ''OPEN'''::text;
    END IF;
    IF p_period_from IS NOT NULL THEN v_where := v_where || 'period_start >= $5'::text; END IF;
    IF p_period_to IS NOT NULL THEN v_where := v_where || 'period_start < $6'::text; END IF;
    -- A subscription's invoices: through its customer (the primary key or invoice_one_per_period;
    -- there is no index on subscription_id alone: db/schema/0540).
    IF p_subscription_id IS NOT NULL THEN
        v_where := v_where || 'customer_id = (SELECT s.customer_id FROM billing.subscription s WHERE s.id = $7)'::text
                           || 'subscription_id = $7'::text;
    END IF;
    RETURN QUERY EXECUTE billing._page('billing.invoice', 'id', v_where, p_starting_after IS NOT NULL,
                                       p_ending_before IS NOT NULL, p_limit,
                                       CASE WHEN (p_period_from IS NOT NULL OR p_period_to IS NOT NULL
                                                  OR (p_status = 'OPEN' AND p_customer_id IS NULL AND p_subscription_id IS NULL))
                                            AND NOT billing._distributed('billing.invoice') THEN 2000 END)
        USING p_starting_after, p_ending_before, p_customer_id, p_status, p_period_from, p_period_to, p_subscription_id;
END
$$;
COMMENT ON FUNCTION billing.list_invoices(integer, bigint, bigint, bigint, text, timestamptz, timestamptz, bigint) IS
'A page of invoices by id, newest first (cursor rules at the top of 77_api_lists.sql), of one customer, status, subscription and/or period starting in [p_period_from, p_period_to).
Returns the rows; BL422 for a limit outside 1..101 or both cursors.';

CREATE OR REPLACE FUNCTION billing.list_credit_notes(
    p_limit integer, p_starting_after bigint DEFAULT NULL, p_ending_before bigint DEFAULT NULL,
    p_customer_id bigint DEFAULT NULL, p_invoice_id bigint DEFAULT NULL)
RETURNS SETOF billing.credit_note
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_where text[] := '{}';
BEGIN
    IF p_customer_id IS NOT NULL THEN v_where := v_where || 'customer_id = $3'::text; END IF;
    IF p_invoice_id IS NOT NULL THEN v_where := v_where || 'invoice_id = $4'::text; END IF;
    RETURN QUERY EXECUTE billing._page('billing.credit_note', 'id', v_where, p_starting_after IS NOT NULL,
                                       p_ending_before IS NOT NULL, p_limit)
        USING p_starting_after, p_ending_before, p_customer_id, p_invoice_id;
END
$$;
COMMENT ON FUNCTION billing.list_credit_notes(integer, bigint, bigint, bigint, bigint) IS
'A page of credit notes by id, newest first (cursor rules at the top of 77_api_lists.sql), of one customer and/or invoice.
Returns the rows; BL422 for a limit outside 1..101 or both cursors.';

CREATE OR REPLACE FUNCTION billing.list_refunds(
    p_limit integer, p_starting_after bigint, p_ending_before bigint, p_customer_id bigint DEFAULT NULL,
    p_invoice_id bigint DEFAULT NULL)
RETURNS SETOF billing.refund
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_where text[] := '{}';
BEGIN
    IF p_customer_id IS NOT NULL THEN v_where := v_where || 'customer_id = $3'::text; END IF;
    IF p_invoice_id IS NOT NULL THEN v_where := v_where || 'invoice_id = $4'::text; END IF;
    RETURN QUERY EXECUTE billing._page('billing.refund', 'id', v_where, p_starting_after IS NOT NULL,
                                       p_ending_before IS NOT NULL, p_limit)
        USING p_starting_after, p_ending_before, p_customer_id, p_invoice_id;
END
$$;
COMMENT ON FUNCTION billing.list_refunds(integer, bigint, bigint, bigint, bigint) IS
'A page of refunds by id, newest first (cursor rules at the top of 77_api_lists.sql), of one customer and/or invoice.
Returns the rows; BL422 for a limit outside 1..101 or both cursors.';

-- -- events --------------------------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION billing.list_events(
    p_limit integer, p_starting_after bigint DEFAULT NULL, p_ending_before bigint DEFAULT NULL,
    p_type text DEFAULT NULL, p_from timestamptz DEFAULT NULL, p_to timestamptz DEFAULT NULL,
    p_customer_id bigint DEFAULT NULL)
RETURNS TABLE (id bigint, event_id uuid, event_type text, aggregate_type text, aggregate_id bigint,
               customer_id bigint, created_at timestamptz, payload jsonb)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_where text[] := '{}';
BEGIN
    -- The outbox is the relay's hot path: no index of its own for these lists. By customer: its
    -- primary key (customer_id, id); otherwise the walk down outbox_event_id_idx, the type and time
    -- filters checked on the way (docs/http-api.md, "Lists", says what that costs).
    IF p_type IS NOT NULL THEN v_where := v_where || 'event_type = $3'::text; END IF;
    IF p_from IS NOT NULL THEN v_where := v_where || 'created_at >= $4'::text; END IF;
    IF p_to IS NOT NULL THEN v_where := v_where || 'created_at < $5'::text; END IF;
    IF p_customer_id IS NOT NULL THEN v_where := v_where || 'customer_id = $6'::text; END IF;
    RETURN QUERY EXECUTE billing._page(
        '(SELECT id, event_id, event_type, aggregate_type, aggregate_id, customer_id, created_at, payload::jsonb AS payload '
        'FROM billing.outbox_event) e', 'id', v_where, p_starting_after IS NOT NULL, p_ending_before IS NOT NULL, p_limit)
        USING p_starting_after, p_ending_before, p_type, p_from, p_to, p_customer_id;
END
$$;
COMMENT ON FUNCTION billing.list_events(integer, bigint, bigint, text, timestamptz, timestamptz, bigint) IS
'A page of the events still kept in the outbox by id, newest first (cursor rules at the top of 77_api_lists.sql), of one type, customer and/or created in [p_from, p_to).
Returns the events (the CloudEvents payload as published); BL422 for a limit outside 1..101 or both cursors.';

CREATE OR REPLACE FUNCTION billing.get_event(p_event_id uuid)
RETURNS TABLE (id bigint, event_id uuid, event_type text, aggregate_type text, aggregate_id bigint,
               customer_id bigint, created_at timestamptz, payload jsonb)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
    SELECT e.id, e.event_id, e.event_type, e.aggregate_type, e.aggregate_id, e.customer_id, e.created_at, e.payload::jsonb
      FROM billing.outbox_event e WHERE e.event_id = p_event_id
$$;
COMMENT ON FUNCTION billing.get_event(uuid) IS
'Reads one event still kept in the outbox by its event id.
Returns the event, or none.';
