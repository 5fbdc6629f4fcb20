-- 20_plans_customers: the price list and the customers.
-- Re-applied after every migration: CREATE OR REPLACE only.

-- A customer id is a positive integer: every event's schema says so (customerId minimum 1), so a
-- customer 0 or below would make events that break their own schema (issue 28: the fuzzer found it).
CREATE OR REPLACE FUNCTION billing._check_customer_id(p_customer_id bigint)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    IF p_customer_id IS NULL OR p_customer_id < 1 THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('a customer id is a positive integer, not %s', coalesce(p_customer_id::text, 'NULL'));
    END IF;
END
$$;
COMMENT ON FUNCTION billing._check_customer_id(bigint) IS
'Private: refuses a customer id that is not a positive integer (events'' schemas: customerId minimum 1).
Returns nothing; BL422 for NULL, 0 or a negative id.';

-- A price change applies to periods starting at or after p_now (the period being served keeps
-- the price it was invoiced at); the history is kept in billing.plan_price.
DROP FUNCTION IF EXISTS billing.upsert_plan(text, bigint, text, text, integer);
DROP FUNCTION IF EXISTS billing.upsert_plan(text, bigint, text, text, integer, timestamptz);
DROP FUNCTION IF EXISTS billing.upsert_plan(text, bigint, text, text, integer, timestamptz, integer);
DROP FUNCTION IF EXISTS billing.upsert_plan(text, bigint, text, text, integer, timestamptz, integer, text);
-- p_self_serve (migration 0850): customers may sign up to it themselves (a customer session's
-- signup, checked by the HTTP API); NULL keeps what the plan says (false for a new plan), so a
-- price change that does not name it never withdraws a plan from sale or offers one.
CREATE OR REPLACE FUNCTION billing.upsert_plan(
    p_code text, p_price_amount bigint, p_currency text, p_billing_interval text, p_interval_count integer DEFAULT 1,
    p_now timestamptz DEFAULT now(), p_billing_day integer DEFAULT NULL, p_external_id text DEFAULT NULL,
    p_self_serve boolean DEFAULT NULL)
RETURNS billing.plan
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_old billing.plan;
    v_new billing.plan;
BEGIN
    PERFORM billing._audit('upsert_plan', jsonb_build_object('code', p_code, 'price_amount', p_price_amount, 'currency', p_currency, 'billing_interval', p_billing_interval, 'interval_count', p_interval_count, 'now', p_now, 'billing_day', p_billing_day, 'external_id', p_external_id, 'self_serve', p_self_serve));
    PERFORM billing._check_now(p_now);
    PERFORM billing._check_text('a plan code', p_code, 100);
    PERFORM billing._check_external_id(p_external_id);
    IF p_price_amount IS NULL OR p_price_amount < 0 THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('plan %s: price must be a non-negative amount in the smallest currency unit, got %s',
                             p_code, coalesce(p_price_amount::text, 'NULL'));
    END IF;
    IF p_currency IS NULL OR p_currency !~ '^[A-Z]{3}$' THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('plan %s: currency must be a three-letter upper-case ISO 4217 code, got %L', p_code, p_currency);
    END IF;
    PERFORM billing._check_one_of(format('plan %s: billing interval', p_code), p_billing_interval,
                                  billing._billing_intervals(), 'Use DAY, WEEK, MONTH or YEAR.');
    PERFORM billing._check_between(format('plan %s: interval count', p_code), p_interval_count, 1, 1000);
    IF p_billing_day IS NOT NULL THEN
        PERFORM billing._check_between(format('plan %s: billing day', p_code), p_billing_day, 1, 31);
        IF p_billing_interval <> 'MONTH' THEN
            RAISE EXCEPTION USING ERRCODE = 'BL422',
                MESSAGE = format('plan %s: calendar billing (a billing day) needs a MONTH interval, got %s', p_code, p_billing_interval);
        END IF;
    END IF;

    SELECT * INTO v_old FROM billing.plan WHERE code = p_code FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO billing.plan AS p (code, price_amount, currency, billing_interval, interval_count, billing_day, self_serve)
        VALUES (p_code, p_price_amount, p_currency, p_billing_interval, p_interval_count, p_billing_day,
                coalesce(p_self_serve, false))
        ON CONFLICT ON CONSTRAINT plan_code_key DO NOTHING
        RETURNING * INTO v_new;
        IF v_new.id IS NULL THEN  -- created concurrently: update it as below
            SELECT * INTO v_old FROM billing.plan WHERE code = p_code FOR UPDATE;
        ELSE
            INSERT INTO billing.plan_price (plan_id, effective_from, price_amount) VALUES (v_new.id, '-infinity', p_price_amount);
            RETURN billing._claim_plan_external_id(v_new, p_external_id);
        END IF;
    END IF;

    IF (v_old.currency, v_old.billing_interval, v_old.interval_count, v_old.billing_day)
           IS DISTINCT FROM (p_currency::char(3), p_billing_interval, p_interval_count, p_billing_day::smallint)
       AND (EXISTS (SELECT 1 FROM billing.subscription s WHERE s.plan_id = v_old.id OR s.scheduled_plan_id = v_old.id)
            -- An unpaid upgrade from this plan may still revert to it (_revert_unpaid_change).
            OR EXISTS (SELECT 1 FROM billing.invoice i
                        WHERE i.from_plan_id = v_old.id AND i.kind = 'PRORATION' AND i.status IN ('OPEN', 'REVIEW'))) THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('plan %s has subscriptions (on it, scheduled to move to it, or an unpaid upgrade from it that may revert to it): only its price can change', p_code),
            HINT = 'Create a plan with a new code for another currency or period, and move subscriptions with change_plan.';
    END IF;
    IF v_old.price_amount <> p_price_amount AND p_now < coalesce(v_old.price_effective_from, '-infinity') THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('plan %s: its price already changed at %s; a new price cannot take effect earlier (%s)',
                             p_code, v_old.price_effective_from, p_now);
    END IF;

    UPDATE billing.plan p
       SET price_amount = p_price_amount,
           price_effective_from = CASE WHEN p.price_amount <> p_price_amount THEN p_now ELSE p.price_effective_from END,
           currency = p_currency,
           billing_interval = p_billing_interval,
           interval_count = p_interval_count,
           billing_day = p_billing_day,
           self_serve = coalesce(p_self_serve, p.self_serve),
           updated_at = now()
     WHERE p.id = v_old.id
       AND (p.price_amount, p.currency, p.billing_interval, p.interval_count, p.billing_day, p.self_serve)
           IS DISTINCT FROM (p_price_amount, p_currency::char(3), p_billing_interval, p_interval_count, p_billing_day::smallint,
                             coalesce(p_self_serve, p.self_serve))
    RETURNING * INTO v_new;
    IF v_new.id IS NULL THEN  -- unchanged
        RETURN billing._claim_plan_external_id(v_old, p_external_id);
    END IF;
    IF v_old.price_amount <> p_price_amount THEN
        INSERT INTO billing.plan_price AS pp (plan_id, effective_from, price_amount) VALUES (v_new.id, p_now, p_price_amount)
        ON CONFLICT ON CONSTRAINT plan_price_pkey DO UPDATE SET price_amount = excluded.price_amount;
    END IF;
    RETURN billing._claim_plan_external_id(v_new, p_external_id);
END
$$;
COMMENT ON FUNCTION billing.upsert_plan(text, bigint, text, text, integer, timestamptz, integer, text, boolean) IS
'Creates the plan p_code or updates it; a plan with subscriptions (on it, scheduled to move to it, or with an unpaid upgrade from it that may revert to it) may only change its price, which applies to periods starting at or after p_now (history in plan_price). p_billing_day (1..31, MONTH plans only): calendar billing, every period ends on that day of the month at local midnight, the first one prorated. p_external_id (optional): the caller''s own id of the plan, given once (21_external_ids). p_self_serve (optional): customers may sign up to it themselves (a customer session''s signup; NULL keeps the plan''s, false for a new plan).
Returns the plan row; BL422 for a negative price, bad currency, unknown interval, count out of 1..1000, billing day out of 1..31 or on another interval, a price change dated before the last one or a malformed external id; BL409 when the external id names another plan or the plan has another one.';

DROP FUNCTION IF EXISTS billing.upsert_customer(bigint, text);
CREATE OR REPLACE FUNCTION billing.upsert_customer(p_customer_id bigint, p_timezone text DEFAULT 'UTC', p_external_id text DEFAULT NULL)
RETURNS billing.customer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_row billing.customer;
    v_at  timestamptz := now();  -- a variable, not now(), in DO UPDATE (Citus wants no volatile call there)
BEGIN
    PERFORM billing._audit('upsert_customer', jsonb_build_object('customer_id', p_customer_id, 'timezone', p_timezone, 'external_id', p_external_id));
    PERFORM billing._check_customer_id(p_customer_id);
    PERFORM billing._check_timezone(p_timezone);
    PERFORM billing._check_external_id(p_external_id);
    INSERT INTO billing.customer AS c (id, timezone) VALUES (p_customer_id, p_timezone)
    ON CONFLICT ON CONSTRAINT customer_pkey DO UPDATE
        SET timezone = excluded.timezone, updated_at = v_at
        WHERE c.timezone IS DISTINCT FROM excluded.timezone
    RETURNING * INTO v_row;
    IF v_row.id IS NULL THEN
        SELECT * INTO v_row FROM billing.customer WHERE id = p_customer_id;
    END IF;
    IF p_external_id IS NOT NULL AND v_row.external_id IS DISTINCT FROM p_external_id THEN
        v_row := billing._lock_customer(p_customer_id);
        IF billing._claim_external_id('customer', p_external_id, p_customer_id, p_customer_id, v_at) THEN
            UPDATE billing.customer SET external_id = p_external_id WHERE id = p_customer_id RETURNING * INTO v_row;
        END IF;
    END IF;
    RETURN v_row;
END
$$;
COMMENT ON FUNCTION billing.upsert_customer(bigint, text, text) IS
'Creates or updates a customer; the time zone applies to subscriptions created afterwards (existing calendars never move). p_external_id (optional): the caller''s own id of the customer, given once (21_external_ids).
Returns the customer row; BL422 for a customer id that is not a positive integer, when p_timezone is not in pg_timezone_names or the external id is malformed; BL409 when the external id names another customer or the customer has another one.';

CREATE OR REPLACE FUNCTION billing.plan_code(p_plan_id bigint)
RETURNS text
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
    SELECT p.code FROM billing.plan p WHERE p.id = p_plan_id
$$;
COMMENT ON FUNCTION billing.plan_code(bigint) IS
'The business code of a plan, for answering a subscription row (which holds plan_id) without table access.
Returns NULL for an unknown id.';

-- The plan a write by code found, or BL404 (archive_plan, set_plan_self_serve).
CREATE OR REPLACE FUNCTION billing._found_plan(p_plan billing.plan, p_code text)
RETURNS billing.plan
LANGUAGE plpgsql IMMUTABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    IF p_plan.id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'BL404', MESSAGE = format('plan %s does not exist', coalesce(quote_literal(p_code), 'NULL'));
    END IF;
    RETURN p_plan;
END
$$;
COMMENT ON FUNCTION billing._found_plan(billing.plan, text) IS
'Private: p_plan, the row a write of plan p_code returned.
Returns it; BL404 when none was found (NULL row).';

-- Archiving: a plan no longer offered. No new subscription (create_subscription, a signup in bulk)
-- and no plan change to it; the subscriptions on it (and a change to it already scheduled) continue
-- and renew at its prices; its price may still change (upsert_plan). An import brings subscriptions
-- that exist at the source, so it may name an archived plan. Idempotent: archived again, unchanged.
CREATE OR REPLACE FUNCTION billing.archive_plan(p_code text, p_now timestamptz DEFAULT now())
RETURNS billing.plan
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_plan billing.plan;
BEGIN
    PERFORM billing._audit('archive_plan', jsonb_build_object('code', p_code, 'now', p_now));
    PERFORM billing._check_now(p_now);
    UPDATE billing.plan SET archived_at = coalesce(archived_at, p_now), updated_at = CASE WHEN archived_at IS NULL THEN p_now ELSE updated_at END
     WHERE code = p_code
    RETURNING * INTO v_plan;
    -- Then waits for the signups and plan changes to it in flight (each holds the plan code's lock
    -- shared from before it read the plan: _lock_plan_offered); one that comes after this waits for
    -- this transaction and then reads the plan archived (adv11: a signup in flight at the archive
    -- made a subscription on the archived plan). The row first, then the lock: a customer session's
    -- signup holds the row FOR SHARE (lock_self_serve_plans) before its own shared lock.
    PERFORM pg_catalog.pg_advisory_xact_lock(2850, pg_catalog.hashtext(p_code));
    RETURN billing._found_plan(v_plan, p_code);
END
$$;
COMMENT ON FUNCTION billing.archive_plan(text, timestamptz) IS
'Archives the plan p_code from p_now: no new subscription or plan change to it; the subscriptions on it (and changes to it already scheduled) continue and renew. Archived already: unchanged (its first archived_at kept).
Returns the plan; BL404 for an unknown plan.';

-- Self-serve (migration 0850; money10): whether customers may sign up to a plan themselves. The
-- switch is a write of the plan row, so a customer session's signup reads it under FOR SHARE in its
-- own transaction (lock_self_serve_plans) and a switch-off waits for signups in flight, each of
-- which, in turn, waits for a switch-off in flight and then sees it.
CREATE OR REPLACE FUNCTION billing.set_plan_self_serve(p_code text, p_self_serve boolean, p_now timestamptz DEFAULT now())
RETURNS billing.plan
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_plan billing.plan;
BEGIN
    PERFORM billing._audit('set_plan_self_serve', jsonb_build_object('code', p_code, 'self_serve', p_self_serve, 'now', p_now));
    PERFORM billing._check_now(p_now);
    IF p_self_serve IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = format('plan %s: self_serve must be true or false, got NULL', p_code);
    END IF;
    UPDATE billing.plan SET self_serve = p_self_serve,
                            updated_at = CASE WHEN self_serve IS DISTINCT FROM p_self_serve THEN p_now ELSE updated_at END
     WHERE code = p_code
    RETURNING * INTO v_plan;
    RETURN billing._found_plan(v_plan, p_code);
END
$$;
COMMENT ON FUNCTION billing.set_plan_self_serve(text, boolean, timestamptz) IS
'Says whether customers may sign up to plan p_code themselves (a customer session''s signup); nothing else of the plan changes. Waits for the customer sessions'' signups in flight to it (lock_self_serve_plans); idempotent.
Returns the plan; BL404 for an unknown plan, BL422 for a NULL p_self_serve.';

CREATE OR REPLACE FUNCTION billing.lock_self_serve_plans(p_codes text[])
RETURNS text[]
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    -- FOR SHARE in id order: a switch-off (an UPDATE of the row) waits for the caller's transaction,
    -- and one in flight is waited for and re-read (READ COMMITTED re-checks self_serve on the new row).
    -- (PL/pgSQL: its body is read when called, so function files apply to a database migrated only
    -- up to before 0850 too, as test_migrate builds them.)
    RETURN (SELECT coalesce(array_agg(l.code ORDER BY l.code), '{}')
              FROM (SELECT p.code FROM billing.plan p
                     WHERE p.code = ANY (p_codes) AND p.self_serve
                     ORDER BY p.id
                       FOR SHARE) l);
END
$$;
COMMENT ON FUNCTION billing.lock_self_serve_plans(text[]) IS
'The codes among p_codes of the plans customers may sign up to themselves (plan.self_serve), each locked FOR SHARE until the caller''s transaction ends: a customer session''s signup calls it in the transaction that signs up, so a plan switched off (set_plan_self_serve, upsert_plan) at that instant is either waited for and refused, or switched off after the signup.
Returns the codes (unknown and not self-serve ones left out).';

-- The lock a signup or a plan change takes on the plan code it names before it reads the plan
-- (shared; archive_plan takes it exclusive after its update): an archive waits for the signups in
-- flight to the plan, and a signup arriving during an archive waits for it, then reads the plan
-- archived and is refused (adv11). An advisory lock (the lock manager's memory, no write of the plan's
-- row, which FOR SHARE would make on every signup; not measured beside the baseline); on Citus it is
-- the coordinator's, so a signup delegated to a worker (create_subscription called alone) is not
-- covered (docs/sql-api.md).
CREATE OR REPLACE FUNCTION billing._lock_plan_offered(p_code text)
RETURNS void
LANGUAGE sql VOLATILE
AS $$
    SELECT pg_catalog.pg_advisory_xact_lock_shared(2850, pg_catalog.hashtext(p_code))
$$;
COMMENT ON FUNCTION billing._lock_plan_offered(text) IS
'Private: the plan code p_code''s lock, shared, until the transaction ends: archive_plan waits for it (it takes it exclusive), and it waits for an archive in flight. Take it before reading the plan.
Returns nothing.';

CREATE OR REPLACE FUNCTION billing._check_plan_offered(p_plan billing.plan)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    IF p_plan.archived_at IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = format('plan %s is archived', p_plan.code),
            HINT = 'An archived plan takes no new subscription; its subscriptions continue. Choose an offered plan.';
    END IF;
END
$$;
COMMENT ON FUNCTION billing._check_plan_offered(billing.plan) IS
'Private: refuses an archived plan for a new subscription or a plan change.
Returns nothing; BL422 when archived.';
