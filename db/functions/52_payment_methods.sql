-- 52_payment_methods: the customer's payment methods at the provider (docs/providers.md).
-- A charge is sent with the customer's default method (claim_charges); with a real provider an
-- invoice whose customer has none usable waits (invoice.waiting_for), and so does one hard
-- declined. A new default method retries the customer's open invoices at once. A default card
-- that expires before the customer's next renewal is announced ahead (PaymentMethodExpiring).
-- Events of these functions have the customer as aggregate, written under its row lock.

CREATE OR REPLACE FUNCTION billing._payment_method_data(p_method billing.payment_method)
RETURNS jsonb
LANGUAGE sql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
    SELECT jsonb_build_object(
        'customerId', p_method.customer_id,
        'paymentMethodId', p_method.id,
        'provider', p_method.provider,
        'brand', p_method.brand,
        'last4', p_method.last4,
        'expMonth', p_method.exp_month,
        'expYear', p_method.exp_year,
        'isDefault', p_method.is_default,
        'status', p_method.status)
$$;
COMMENT ON FUNCTION billing._payment_method_data(billing.payment_method) IS
'Private: the "data" of payment method events (never the provider references).
Returns a jsonb object.';

CREATE OR REPLACE FUNCTION billing._lock_customer(p_customer_id bigint)
RETURNS billing.customer
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_customer billing.customer;
BEGIN
    SELECT * INTO v_customer FROM billing.customer WHERE id = p_customer_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'BL404',
            MESSAGE = format('customer %s does not exist', coalesce(p_customer_id::text, 'NULL')),
            HINT = 'Create the customer first (upsert_customer, or a subscription).';
    END IF;
    RETURN v_customer;
END
$$;
COMMENT ON FUNCTION billing._lock_customer(bigint) IS
'Private: locks the customer row FOR UPDATE (the customer aggregate''s events are written under it).
Returns it; BL404 when absent.';

CREATE OR REPLACE FUNCTION billing.set_payment_method(
    p_customer_id bigint, p_provider text, p_customer_ref text, p_payment_method_ref text,
    p_brand text, p_last4 text, p_exp_month integer, p_exp_year integer, p_now timestamptz DEFAULT now())
RETURNS billing.payment_method
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_method  billing.payment_method;
    v_retried bigint[];
BEGIN
    PERFORM billing._audit('set_payment_method', jsonb_build_object('customer_id', p_customer_id, 'provider', p_provider, 'customer_ref', p_customer_ref, 'payment_method_ref', p_payment_method_ref, 'brand', p_brand, 'last4', p_last4, 'exp_month', p_exp_month, 'exp_year', p_exp_year, 'now', p_now));
    PERFORM billing._check_now(p_now);
    IF p_provider IS NULL OR p_provider !~ '^[a-z][a-z0-9_]{1,31}$' THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('a provider name is 2 to 32 lower-case letters, digits or _, got %L', p_provider),
            HINT = 'Use the provider the workers charge through (sim, stripe, ...).';
    END IF;
    PERFORM billing._check_text('a payment method reference', p_payment_method_ref, 255);
    IF p_customer_ref IS NOT NULL THEN
        PERFORM billing._check_text('a provider customer reference', p_customer_ref, 255);
    END IF;
    IF p_brand IS NOT NULL THEN
        PERFORM billing._check_text('a card brand', p_brand, 50);
    END IF;
    IF p_last4 IS NOT NULL AND p_last4 !~ '^[0-9]{4}$' THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = 'last4 is four digits';
    END IF;
    PERFORM billing._check_between('expiry month', p_exp_month, 1, 12);
    PERFORM billing._check_between('expiry year', p_exp_year, 2000, 2200);
    IF make_timestamptz(p_exp_year, p_exp_month, 1, 0, 0, 0, 'UTC') + interval '1 month' <= p_now THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('the card expired at the end of %s/%s', p_exp_month, p_exp_year),
            HINT = 'Ask the customer for a card that has not expired.';
    END IF;

    PERFORM billing._lock_customer(p_customer_id);
    -- The customer's open invoices that wait for a method, or wait in dunning with no call in
    -- flight (no attempt claimed for their current key), are retried at once. Locked before the
    -- methods: a hard decline being recorded holds its invoice, then retires its method.
    WITH retry AS (
        SELECT i.customer_id, i.id FROM billing.invoice i
         WHERE i.customer_id = p_customer_id AND i.status = 'OPEN'
           AND (i.waiting_for IS NOT NULL
                OR (i.attempt_count > 0 AND i.next_attempt_at > p_now
                    AND NOT EXISTS (SELECT 1 FROM billing.payment_attempt a
                                     WHERE a.customer_id = p_customer_id AND a.invoice_id = i.id
                                       AND a.attempt_number = i.try_count)))
         ORDER BY i.id
           FOR UPDATE
    ), moved AS (
        UPDATE billing.invoice i SET next_attempt_at = p_now, waiting_for = NULL
          FROM retry r WHERE i.customer_id = p_customer_id AND i.id = r.id
        RETURNING i.id
    )
    SELECT coalesce(array_agg(id ORDER BY id), '{}') INTO v_retried FROM moved;

    UPDATE billing.payment_method SET is_default = false, updated_at = p_now
     WHERE customer_id = p_customer_id AND is_default
       AND (provider, payment_method_ref) IS DISTINCT FROM (p_provider, p_payment_method_ref);
    INSERT INTO billing.payment_method AS m
           (customer_id, provider, customer_ref, payment_method_ref, brand, last4, exp_month, exp_year, is_default,
            status, created_at, updated_at)
    VALUES (p_customer_id, p_provider, p_customer_ref, p_payment_method_ref, p_brand, p_last4, p_exp_month,
            p_exp_year, true, 'ACTIVE', p_now, p_now)
    ON CONFLICT ON CONSTRAINT payment_method_one_per_ref DO UPDATE
        SET customer_ref = excluded.customer_ref, brand = excluded.brand, last4 = excluded.last4,
            exp_month = excluded.exp_month, exp_year = excluded.exp_year, is_default = true, status = 'ACTIVE',
            failure_reason = NULL, detached_at = NULL, updated_at = excluded.updated_at,
            expiry_announced_at = CASE WHEN (m.exp_month, m.exp_year) = (excluded.exp_month, excluded.exp_year)
                                       THEN m.expiry_announced_at END
    RETURNING * INTO v_method;

    PERFORM billing._emit_event('customer', p_customer_id, 'PaymentMethodUpdated',
        billing._payment_method_data(v_method) || jsonb_build_object('retriedInvoiceIds', to_jsonb(v_retried)), p_now);
    RETURN v_method;
END
$$;
COMMENT ON FUNCTION billing.set_payment_method(bigint, text, text, text, text, text, integer, integer, timestamptz) IS
'Records the customer''s payment method at a provider and makes it the default (a method already recorded with that reference is updated and re-activated); the customer''s open invoices waiting for a method or in dunning are retried at once. Event PaymentMethodUpdated.
Returns the method; BL404 for an unknown customer, BL422 for bad input or a card already expired at p_now.';

CREATE OR REPLACE FUNCTION billing.detach_payment_method(
    p_customer_id bigint, p_provider text, p_payment_method_ref text, p_now timestamptz DEFAULT now())
RETURNS billing.payment_method
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_method billing.payment_method;
BEGIN
    PERFORM billing._audit('detach_payment_method', jsonb_build_object('customer_id', p_customer_id, 'provider', p_provider, 'payment_method_ref', p_payment_method_ref, 'now', p_now));
    PERFORM billing._check_now(p_now);
    PERFORM billing._lock_customer(p_customer_id);
    SELECT * INTO v_method FROM billing.payment_method
     WHERE customer_id = p_customer_id AND provider = p_provider AND payment_method_ref = p_payment_method_ref
       FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'BL404',
            MESSAGE = format('customer %s has no payment method %L at %L', p_customer_id, p_payment_method_ref, p_provider);
    END IF;
    IF v_method.status = 'DETACHED' THEN
        RETURN v_method;  -- detached before: nothing changes
    END IF;
    UPDATE billing.payment_method
       SET status = 'DETACHED', is_default = false, detached_at = p_now, updated_at = p_now
     WHERE customer_id = p_customer_id AND id = v_method.id
    RETURNING * INTO v_method;
    PERFORM billing._emit_event('customer', p_customer_id, 'PaymentMethodUpdated',
        billing._payment_method_data(v_method) || jsonb_build_object('retriedInvoiceIds', '[]'::jsonb), p_now);
    RETURN v_method;
END
$$;
COMMENT ON FUNCTION billing.detach_payment_method(bigint, text, text, timestamptz) IS
'Detaches a payment method: never charged again (a call already in flight with it finishes). Event PaymentMethodUpdated; idempotent.
Returns the method; BL404 when the customer has no such method.';

CREATE OR REPLACE FUNCTION billing.list_payment_methods(p_customer_id bigint)
RETURNS SETOF billing.payment_method
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
    SELECT * FROM billing.payment_method WHERE customer_id = p_customer_id ORDER BY is_default DESC, id DESC
$$;
COMMENT ON FUNCTION billing.list_payment_methods(bigint) IS
'The customer''s payment methods, the default first, then the newest.
Returns the rows (none for an unknown customer).';

-- announce_expiring_payment_methods on Citus: its statement locks customers and methods of many
-- shards at once, which Citus refuses. The same work row by row: the methods due an announcement
-- are read unlocked (a read of every shard, in (customer, method) order, a page at a time); each
-- one's customer and method are locked by their keys SKIP LOCKED (one shard: rows another
-- transaction holds are skipped, as by the statement), the method is checked again under the lock
-- and announced exactly as the statement announces it, until p_batch_size were locked.
CREATE OR REPLACE FUNCTION billing._announce_expiring_rows(p_days integer, p_batch_size integer, p_now timestamptz)
RETURNS integer
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_page      record;
    v_due       record;
    v_method    billing.payment_method;
    v_locked    integer := 0;
    v_count     integer := 0;
    v_after_c   bigint := -1;
    v_after_id  bigint := -1;
    v_seen      integer;
BEGIN
    LOOP
        v_seen := 0;
        FOR v_page IN
            SELECT pm.customer_id, pm.id
              FROM billing.payment_method pm
              CROSS JOIN LATERAL (
                  SELECT min(s.current_period_end) AS renewal_at FROM billing.subscription s
                   WHERE s.customer_id = pm.customer_id AND s.status IN ('ACTIVE', 'PAST_DUE')
                     AND NOT s.cancel_at_period_end) r
             WHERE pm.is_default AND pm.expiry_announced_at IS NULL
               AND r.renewal_at IS NOT NULL AND r.renewal_at <= p_now + make_interval(days => p_days)
               AND make_timestamptz(pm.exp_year, pm.exp_month, 1, 0, 0, 0, 'UTC') + interval '1 month' <= r.renewal_at
               AND (pm.customer_id, pm.id) > (v_after_c, v_after_id)
             ORDER BY pm.customer_id, pm.id
             LIMIT p_batch_size - v_locked
        LOOP
            v_seen := v_seen + 1;
            v_after_c := v_page.customer_id;
            v_after_id := v_page.id;
            -- The statement's FOR UPDATE OF c, pm SKIP LOCKED, in the lock order of set_payment_method.
            PERFORM 1 FROM billing.customer c WHERE c.id = v_page.customer_id FOR UPDATE SKIP LOCKED;
            CONTINUE WHEN NOT FOUND;
            PERFORM 1 FROM billing.payment_method pm
             WHERE pm.customer_id = v_page.customer_id AND pm.id = v_page.id FOR UPDATE SKIP LOCKED;
            CONTINUE WHEN NOT FOUND;
            v_locked := v_locked + 1;
            -- Checked again under the lock (the method or the renewals may have changed meanwhile).
            SELECT r.renewal_at,
                   make_timestamptz(pm.exp_year, pm.exp_month, 1, 0, 0, 0, 'UTC') + interval '1 month' AS expires_at
              INTO v_due
              FROM billing.payment_method pm
              CROSS JOIN LATERAL (
                  SELECT min(s.current_period_end) AS renewal_at FROM billing.subscription s
                   WHERE s.customer_id = v_page.customer_id AND s.status IN ('ACTIVE', 'PAST_DUE')
                     AND NOT s.cancel_at_period_end) r
             WHERE pm.customer_id = v_page.customer_id AND pm.id = v_page.id
               AND pm.is_default AND pm.expiry_announced_at IS NULL
               AND r.renewal_at IS NOT NULL AND r.renewal_at <= p_now + make_interval(days => p_days)
               AND make_timestamptz(pm.exp_year, pm.exp_month, 1, 0, 0, 0, 'UTC') + interval '1 month' <= r.renewal_at;
            CONTINUE WHEN NOT FOUND;
            UPDATE billing.payment_method pm SET expiry_announced_at = p_now
             WHERE pm.customer_id = v_page.customer_id AND pm.id = v_page.id
            RETURNING pm.* INTO v_method;
            PERFORM billing._emit_event('customer', v_method.customer_id, 'PaymentMethodExpiring',
                billing._payment_method_data(v_method) || jsonb_build_object(
                    'expiresAt', billing._utc_text(v_due.expires_at),
                    'renewalAt', billing._utc_text(v_due.renewal_at)), p_now);
            v_count := v_count + 1;
        END LOOP;
        EXIT WHEN v_seen = 0 OR v_locked >= p_batch_size;
    END LOOP;
    RETURN v_count;
END
$$;
COMMENT ON FUNCTION billing._announce_expiring_rows(integer, integer, timestamptz) IS
'Private: announce_expiring_payment_methods on Citus, row by row: the methods due an announcement read unlocked in (customer, method) order, each customer and method locked SKIP LOCKED, checked again and announced (PaymentMethodExpiring) as the statement does, up to p_batch_size locked.
Returns how many were announced.';

CREATE OR REPLACE FUNCTION billing.announce_expiring_payment_methods(
    p_days integer DEFAULT 7, p_batch_size integer DEFAULT 500, p_now timestamptz DEFAULT now())
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
SET jit = off
AS $$
DECLARE
    v_count integer;
BEGIN
    PERFORM billing._audit('announce_expiring_payment_methods', jsonb_build_object('days', p_days, 'batch_size', p_batch_size, 'now', p_now));
    PERFORM billing._check_now(p_now);
    PERFORM billing._check_between('days of notice', p_days, 0, 366);
    PERFORM billing._check_between('batch size', p_batch_size, 1, 10000);
    IF billing._distributed('billing.customer') THEN
        -- On Citus the statement below would lock rows of many shards at once (refused there): the
        -- same announcements row by row, each method locked in its customer's shard.
        RETURN billing._announce_expiring_rows(p_days, p_batch_size, p_now);
    END IF;
    WITH due AS MATERIALIZED (
        -- A default card not announced yet that expires before a live subscription's renewal
        -- falling within the next p_days.
        SELECT pm.customer_id, pm.id, r.renewal_at,
               make_timestamptz(pm.exp_year, pm.exp_month, 1, 0, 0, 0, 'UTC') + interval '1 month' AS expires_at
          FROM billing.payment_method pm
          JOIN billing.customer c ON c.id = pm.customer_id
          CROSS JOIN LATERAL (
              SELECT min(s.current_period_end) AS renewal_at FROM billing.subscription s
               WHERE s.customer_id = pm.customer_id AND s.status IN ('ACTIVE', 'PAST_DUE')
                 AND NOT s.cancel_at_period_end) r
         WHERE pm.is_default AND pm.expiry_announced_at IS NULL
           AND r.renewal_at IS NOT NULL AND r.renewal_at <= p_now + make_interval(days => p_days)
           AND make_timestamptz(pm.exp_year, pm.exp_month, 1, 0, 0, 0, 'UTC') + interval '1 month' <= r.renewal_at
         ORDER BY pm.customer_id, pm.id
         LIMIT p_batch_size
           FOR UPDATE OF c, pm SKIP LOCKED
    ), marked AS (
        UPDATE billing.payment_method pm SET expiry_announced_at = p_now
          FROM due d WHERE pm.customer_id = d.customer_id AND pm.id = d.id
        RETURNING pm, d.renewal_at, d.expires_at
    ), announced AS (
        INSERT INTO billing.outbox_event (event_id, aggregate_type, aggregate_id, event_type, payload, created_at, available_at, customer_id)
        SELECT e.event_id, 'customer', (e.pm).customer_id, 'PaymentMethodExpiring',
               billing._cloud_event(e.event_id, 'PaymentMethodExpiring', 'customer', (e.pm).customer_id, p_now,
                                    billing._payment_method_data(e.pm) || jsonb_build_object(
                                        'expiresAt', billing._utc_text(e.expires_at),
                                        'renewalAt', billing._utc_text(e.renewal_at))),
               p_now, p_now, (e.pm).customer_id
          FROM (SELECT gen_random_uuid() AS event_id, m.* FROM marked m ORDER BY (m.pm).customer_id, (m.pm).id) e
        RETURNING 1
    )
    SELECT count(*) INTO v_count FROM announced;
    RETURN v_count;
END
$$;
COMMENT ON FUNCTION billing.announce_expiring_payment_methods(integer, integer, timestamptz) IS
'Announces (PaymentMethodExpiring, once per method and expiry) each default card that expires before its customer''s next renewal when that renewal is at most p_days away; run it periodically (the worker does).
Returns how many were announced; BL422 for bad arguments.';
