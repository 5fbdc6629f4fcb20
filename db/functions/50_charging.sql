-- 50_charging: charge workers claim OPEN invoices, call the gateway outside any transaction,
-- then report the outcome here (or the gateway reports it by webhook). Results are
-- idempotent, may arrive late, twice or out of order, and a success always wins.

-- ---------------------------------------------------------------------------------------------
-- Private helpers
-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION billing._check_outcome(p_outcome text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM billing._check_one_of('payment outcome', p_outcome, ARRAY['SUCCEEDED', 'DECLINED', 'UNKNOWN', 'NOT_FOUND'],
                                  'Use SUCCEEDED, DECLINED, UNKNOWN or NOT_FOUND (the gateway has no charge for the key).');
END
$$;
COMMENT ON FUNCTION billing._check_outcome(text) IS
'Private: a payment outcome is SUCCEEDED, DECLINED, UNKNOWN or NOT_FOUND.
Returns nothing; BL422 otherwise.';

-- ---------------------------------------------------------------------------------------------
-- Dunning schedule with deterministic jitter.
-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION billing._dunning_next_attempt(p_failed_attempts integer, p_seed bigint, p_now timestamptz)
RETURNS timestamptz
LANGUAGE sql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
    SELECT p_now + d.delay
         -- Whole seconds: the CHECK on dunning_step allows 0 or at least 1 s (a sub-second jitter
         -- would divide by zero); the guard keeps a bad row from failing every decline anyway.
         + CASE WHEN d.max_jitter >= interval '1 second' THEN
               make_interval(secs => (
                   (hashtextextended(p_failed_attempts::text, p_seed) % floor(extract(epoch FROM d.max_jitter))::bigint
                    + floor(extract(epoch FROM d.max_jitter))::bigint)
                   % floor(extract(epoch FROM d.max_jitter))::bigint)::double precision)
           ELSE interval '0' END
    FROM billing.dunning_step d
    WHERE d.failed_attempts = p_failed_attempts
$$;
COMMENT ON FUNCTION billing._dunning_next_attempt(integer, bigint, timestamptz) IS
'Private body of dunning_next_attempt, without validation.
Returns NULL when the schedule has no step for p_failed_attempts.';

CREATE OR REPLACE FUNCTION billing.dunning_next_attempt(
    p_failed_attempts integer, p_seed bigint, p_now timestamptz DEFAULT now())
RETURNS timestamptz
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM billing._check_now(p_now);
    IF p_failed_attempts IS NULL OR p_failed_attempts < 1 THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('failed attempts must be at least 1, got %s', coalesce(p_failed_attempts::text, 'NULL')),
            HINT = 'Pass the number of declined tries so far, counting the one just declined.';
    END IF;
    RETURN billing._dunning_next_attempt(p_failed_attempts, coalesce(p_seed, 0), p_now);
END
$$;
COMMENT ON FUNCTION billing.dunning_next_attempt(integer, bigint, timestamptz) IS
'Next retry after p_failed_attempts declines: p_now + billing.dunning_step delay + jitter in [0, max_jitter) hashed from (p_seed, attempt).
Returns NULL when the schedule is exhausted (attempt 4 by default); BL422 below 1.';

-- ---------------------------------------------------------------------------------------------
-- Idempotency keys: <namespace>-inv-<invoice id>-try-<n>, the namespace drawn once per
-- installation (billing.installation), the key never sent past its lifetime at the gateway.
-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION billing.new_key_namespace()
RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_namespace text;
BEGIN
    PERFORM billing._audit('new_key_namespace', '{}'::jsonb);
    -- Drawn first: Citus takes no VOLATILE function in an UPDATE (installation is a reference table).
    v_namespace := substr(replace(gen_random_uuid()::text, '-', ''), 1, 12);
    UPDATE billing.installation SET key_namespace = v_namespace, updated_at = now()
    RETURNING key_namespace INTO v_namespace;
    RETURN v_namespace;
END
$$;
COMMENT ON FUNCTION billing.new_key_namespace() IS
'Draws a new idempotency-key namespace for this installation: run it after restoring a backup or cloning the database (a key already charged could otherwise be reused). Keys already claimed keep theirs.
Returns the new namespace.';

-- An invoice whose payment cannot be settled automatically: a person decides (record_payment_result).
CREATE OR REPLACE FUNCTION billing._to_review(p_invoice billing.invoice, p_reason text, p_now timestamptz)
RETURNS billing.invoice
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_invoice billing.invoice;
BEGIN
    UPDATE billing.invoice SET status = 'REVIEW', next_attempt_at = NULL, review_reason = p_reason, waiting_for = NULL
     WHERE customer_id = p_invoice.customer_id AND id = p_invoice.id AND status = 'OPEN'
    RETURNING * INTO v_invoice;
    IF FOUND THEN
        PERFORM billing._emit_event('invoice', v_invoice.id, 'InvoicePaymentReview',
            billing._invoice_data(v_invoice) || jsonb_build_object('reason', p_reason), p_now);
        RETURN v_invoice;
    END IF;
    RETURN p_invoice;
END
$$;
COMMENT ON FUNCTION billing._to_review(billing.invoice, text, timestamptz) IS
'Private: an OPEN invoice goes to REVIEW (never claimed again) with event InvoicePaymentReview.
Returns the invoice.';

-- ---------------------------------------------------------------------------------------------
-- Claims and results
-- ---------------------------------------------------------------------------------------------
DROP FUNCTION IF EXISTS billing.claim_charges(text, integer, interval, timestamptz);
-- The customer's payment method a new key is sent with: the default one of this provider, not
-- expired at p_now (a card works until the end of its expiry month, UTC).
CREATE OR REPLACE FUNCTION billing._usable_method(p_customer_id bigint, p_provider text, p_now timestamptz)
RETURNS billing.payment_method
LANGUAGE sql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
    SELECT pm.* FROM billing.payment_method pm
     WHERE pm.customer_id = p_customer_id AND pm.is_default AND pm.provider = p_provider
       AND make_timestamptz(pm.exp_year, pm.exp_month, 1, 0, 0, 0, 'UTC') + interval '1 month' > p_now
$$;
COMMENT ON FUNCTION billing._usable_method(bigint, text, timestamptz) IS
'Private: the customer''s default payment method at p_provider if it has not expired by p_now.
Returns the row, or NULL.';

DROP FUNCTION IF EXISTS billing.claim_charges(text, integer, interval, timestamptz, text);
CREATE OR REPLACE FUNCTION billing.claim_charges(
    p_worker text, p_batch_size integer DEFAULT 100, p_lease interval DEFAULT interval '5 minutes',
    p_now timestamptz DEFAULT now(), p_provider text DEFAULT 'sim')
RETURNS TABLE (invoice_id bigint, attempt_id bigint, idempotency_key text, customer_id bigint, amount bigint,
               currency text, lookup boolean, customer_ref text, payment_method_ref text)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
SET jit = off  -- a short OLTP statement: compiling it would cost more than running it
AS $$
#variable_conflict use_column
DECLARE
    v_cfg billing.installation;
BEGIN
    PERFORM billing._check_now(p_now);
    PERFORM billing._check_text('a worker name', p_worker, 255);
    PERFORM billing._check_between('batch size', p_batch_size, 1, 10000);
    PERFORM billing._check_lease(p_lease);
    IF p_provider IS NULL OR p_provider !~ '^[a-z][a-z0-9_]{1,31}$' THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('a provider name is 2 to 32 lower-case letters, digits or _, got %L', p_provider),
            HINT = 'Pass the worker''s BILLING_GATEWAY_PROVIDER (sim, stripe, ...).';
    END IF;
    SELECT * INTO v_cfg FROM billing.installation;
    IF p_lease >= v_cfg.key_lifetime THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('the lease (%s) must be shorter than the gateway''s key lifetime (%s)', p_lease, v_cfg.key_lifetime),
            HINT = 'A call made near the end of a longer lease could reach the gateway after it forgot the key.';
    END IF;
    -- Nothing due: the call changes nothing, so it leaves no audit row (idle workers ask every
    -- second). One probe of the index the claim reads.
    IF NOT EXISTS (SELECT 1 FROM billing.invoice i WHERE i.status = 'OPEN' AND i.next_attempt_at <= p_now) THEN
        RETURN;
    END IF;
    PERFORM billing._audit('claim_charges', jsonb_build_object('worker', p_worker, 'batch_size', p_batch_size, 'lease', p_lease, 'now', p_now, 'provider', p_provider));
    IF billing._distributed('billing.customer') THEN
        -- On Citus the statement below would lock rows of many shards at once (refused there): the
        -- same claim row by row, each invoice locked and worked on in its customer's shard.
        RETURN QUERY SELECT * FROM billing._claim_charges_rows(p_worker, p_batch_size, p_lease, p_now, p_provider);
        RETURN;
    END IF;

    RETURN QUERY
    WITH due AS MATERIALIZED (
        SELECT i.id, i.try_count, i.customer_id
          FROM billing.invoice i
         WHERE i.status = 'OPEN' AND i.next_attempt_at <= p_now
         ORDER BY i.next_attempt_at
         LIMIT p_batch_size
           FOR NO KEY UPDATE SKIP LOCKED
    ), keyed AS MATERIALIZED (
        -- A key already claimed keeps what it was sent with; a new key takes the customer's
        -- default usable method. With the simulator, a customer without a default is charged by
        -- customer id (method NULL); with a real provider such an invoice waits (below).
        SELECT d.id, a.key_expires_at, a.id AS attempt_id, m.id AS method_id, m.customer_ref, m.payment_method_ref,
               (a.id IS NULL AND m.id IS NULL AND (p_provider <> 'sim' OR dm.has_default)) AS needs_method,
               dm.has_default
          FROM due d
          LEFT JOIN billing.payment_attempt a ON a.invoice_id = d.id AND a.attempt_number = d.try_count
          LEFT JOIN LATERAL (SELECT u.* FROM billing._usable_method(d.customer_id, p_provider, p_now) u
                              WHERE a.id IS NULL AND u.id IS NOT NULL) m ON true
          CROSS JOIN LATERAL (SELECT EXISTS (SELECT 1 FROM billing.payment_method x
                                              WHERE x.customer_id = d.customer_id AND x.is_default
                                                AND x.provider = p_provider) AS has_default) dm
    ), expired AS (
        -- The key's lifetime is over and its fate is still unknown: never sent again; a person decides.
        UPDATE billing.invoice i
           SET status = 'REVIEW', next_attempt_at = NULL, review_reason = 'KEY_EXPIRED'
          FROM keyed k
         WHERE i.id = k.id AND k.key_expires_at <= p_now
        RETURNING i.*
    ), review_events AS (
        INSERT INTO billing.outbox_event (event_id, aggregate_type, aggregate_id, event_type, payload, created_at, available_at, customer_id)
        SELECT e.event_id, 'invoice', e.id, 'InvoicePaymentReview',
               billing._cloud_event(e.event_id, 'InvoicePaymentReview', 'invoice', e.id, p_now,
                                    billing._invoice_data(e.inv) || jsonb_build_object('reason', 'KEY_EXPIRED')),
               p_now, p_now, (e.inv).customer_id
          FROM (SELECT gen_random_uuid() AS event_id, x.id, x::billing.invoice AS inv FROM expired x ORDER BY x.id) e
    ), waiting AS (
        -- No usable payment method for a new key: the invoice waits for the customer (set_payment_method).
        UPDATE billing.invoice i
           SET next_attempt_at = NULL, waiting_for = 'PAYMENT_METHOD',
               give_up_at = coalesce(i.give_up_at, billing._waiting_give_up_at(i.customer_id, i.id, p_now))
          FROM keyed k
         WHERE i.id = k.id AND k.needs_method
        RETURNING i.id, i AS inv, k.has_default
    ), waiting_events AS (
        INSERT INTO billing.outbox_event (event_id, aggregate_type, aggregate_id, event_type, payload, created_at, available_at, customer_id)
        SELECT e.event_id, 'invoice', e.id, 'InvoicePaymentMethodRequired',
               billing._cloud_event(e.event_id, 'InvoicePaymentMethodRequired', 'invoice', e.id, p_now,
                                    billing._invoice_data(e.inv) || jsonb_build_object(
                                        'reason', CASE WHEN e.has_default THEN 'PAYMENT_METHOD_EXPIRED' ELSE 'NO_PAYMENT_METHOD' END,
                                        'declineCode', NULL, 'provider', p_provider)),
               p_now, p_now, (e.inv).customer_id
          FROM (SELECT gen_random_uuid() AS event_id, w.id, w.has_default, w.inv
                  FROM waiting w ORDER BY w.id) e
    ), claimed AS (
        -- The lease: a worker that dies before reporting gives the invoice back at p_now + p_lease.
        UPDATE billing.invoice i
           SET next_attempt_at = p_now + p_lease
          FROM keyed k
         WHERE i.id = k.id AND (k.key_expires_at IS NULL OR k.key_expires_at > p_now) AND NOT k.needs_method
        RETURNING i.id, i.try_count, i.customer_id, i.amount, i.currency, k.method_id, k.customer_ref, k.payment_method_ref
    ), attempt AS (
        -- One row per try: a re-claim (lease expired, or UNKNOWN) reuses its key and what it was
        -- sent with, whatever the namespace and the customer's default method are now.
        INSERT INTO billing.payment_attempt AS a
               (customer_id, invoice_id, attempt_number, idempotency_key, amount, currency, worker, first_claimed_at,
                last_claimed_at, key_expires_at, provider, payment_method_id, customer_ref, payment_method_ref)
        SELECT c.customer_id, c.id, c.try_count, v_cfg.key_namespace || '-inv-' || c.id || '-try-' || c.try_count, c.amount, c.currency,
               p_worker, p_now, p_now, p_now + v_cfg.key_lifetime, p_provider, c.method_id, c.customer_ref,
               c.payment_method_ref
          FROM claimed c
        ON CONFLICT ON CONSTRAINT payment_attempt_one_per_try DO UPDATE
            SET claim_count = a.claim_count + 1, worker = excluded.worker, last_claimed_at = excluded.last_claimed_at
        RETURNING a.id, a.invoice_id, a.idempotency_key, a.claim_count, a.key_expires_at, a.customer_ref,
                  a.payment_method_ref
    )
    SELECT c.id, a.id, a.idempotency_key, c.customer_id, c.amount, c.currency::text,
           -- A key sent before whose call could end within the lookup margin of its expiry: ask
           -- the gateway what became of it instead of sending it again.
           a.claim_count > 1 AND p_now + p_lease > a.key_expires_at - v_cfg.lookup_margin,
           a.customer_ref, a.payment_method_ref
      FROM claimed c
      JOIN attempt a ON a.invoice_id = c.id
     ORDER BY c.id;
END
$$;
COMMENT ON FUNCTION billing.claim_charges(text, integer, interval, timestamptz, text) IS
'Claims up to p_batch_size OPEN invoices due by p_now (SKIP LOCKED), records one payment_attempt per key and leases them until p_now + p_lease. An invoice whose key outlived the gateway''s key lifetime goes to REVIEW instead (InvoicePaymentReview); one whose customer has no usable payment method at p_provider waits (waiting_for PAYMENT_METHOD, InvoicePaymentMethodRequired), except with the simulator (sim) for a customer who never set a default method: charged by customer id.
Returns what to charge: key <namespace>-inv-<invoice id>-try-<n>, reused by a re-claim with the same method references; lookup = ask the gateway for the key''s status instead of sending it (near its expiry); BL422 for bad arguments or a lease not shorter than the key lifetime.';

-- claim_charges' work for one invoice named by (customer_id, id): what the statement of
-- claim_charges does to each row it claims, under the row's lock (FOR NO KEY UPDATE SKIP LOCKED,
-- OPEN and due checked on the locked version), every statement naming the row by (customer_id, id)
-- (one shard on Citus). Used by claim_charges' per-row path on Citus and by the per-shard-group
-- claims (56_shard_claims). The same outcomes: REVIEW when the key outlived its lifetime, a wait
-- for a payment method, or the lease with one attempt row per key (a re-claim reuses it).
DROP FUNCTION IF EXISTS billing._claim_charge_row(billing.invoice, text, interval, timestamptz, text);
CREATE OR REPLACE FUNCTION billing._claim_charge_row(
    p_customer_id bigint, p_invoice_id bigint, p_worker text, p_lease interval, p_now timestamptz, p_provider text,
    p_cfg billing.installation)
RETURNS TABLE (invoice_id bigint, attempt_id bigint, idempotency_key text, customer_id bigint, amount bigint,
               currency text, lookup boolean, customer_ref text, payment_method_ref text)
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_invoice     billing.invoice;
    v_attempt     billing.payment_attempt;
    v_method      billing.payment_method;
    v_has_default boolean;
    v_give_up     timestamptz;
BEGIN
    SELECT * INTO v_invoice FROM billing.invoice i
     WHERE i.customer_id = p_customer_id AND i.id = p_invoice_id AND i.status = 'OPEN' AND i.next_attempt_at <= p_now
       FOR NO KEY UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN;  -- another claimer holds it, or it was settled or leased meanwhile
    END IF;
    SELECT a.* INTO v_attempt FROM billing.payment_attempt a
     WHERE a.customer_id = v_invoice.customer_id AND a.invoice_id = v_invoice.id AND a.attempt_number = v_invoice.try_count;
    -- A key already claimed keeps what it was sent with; a new key takes the customer's default
    -- usable method. With the simulator, a customer without a default is charged by customer id
    -- (method NULL); with a real provider such an invoice waits (below).
    IF v_attempt.id IS NULL THEN
        v_method := billing._usable_method(v_invoice.customer_id, p_provider, p_now);
    END IF;
    v_has_default := EXISTS (SELECT 1 FROM billing.payment_method x
                              WHERE x.customer_id = v_invoice.customer_id AND x.is_default AND x.provider = p_provider);

    IF v_attempt.key_expires_at <= p_now THEN
        -- The key's lifetime is over and its fate is still unknown: never sent again; a person decides.
        UPDATE billing.invoice i
           SET status = 'REVIEW', next_attempt_at = NULL, review_reason = 'KEY_EXPIRED'
         WHERE i.customer_id = v_invoice.customer_id AND i.id = v_invoice.id
        RETURNING i.* INTO v_invoice;
        PERFORM billing._emit_event('invoice', v_invoice.id, 'InvoicePaymentReview',
            billing._invoice_data(v_invoice) || jsonb_build_object('reason', 'KEY_EXPIRED'), p_now);
        RETURN;
    END IF;
    IF v_attempt.id IS NULL AND v_method.id IS NULL AND (p_provider <> 'sim' OR v_has_default) THEN
        -- No usable payment method for a new key: the invoice waits for the customer (set_payment_method).
        -- (The instant computed first: Citus takes no function reading a table, nor a STABLE
        -- operator, inside an UPDATE's coalesce.)
        v_give_up := coalesce(v_invoice.give_up_at, billing._waiting_give_up_at(v_invoice.customer_id, v_invoice.id, p_now));
        UPDATE billing.invoice i
           SET next_attempt_at = NULL, waiting_for = 'PAYMENT_METHOD', give_up_at = v_give_up
         WHERE i.customer_id = v_invoice.customer_id AND i.id = v_invoice.id
        RETURNING i.* INTO v_invoice;
        PERFORM billing._emit_event('invoice', v_invoice.id, 'InvoicePaymentMethodRequired',
            billing._invoice_data(v_invoice) || jsonb_build_object(
                'reason', CASE WHEN v_has_default THEN 'PAYMENT_METHOD_EXPIRED' ELSE 'NO_PAYMENT_METHOD' END,
                'declineCode', NULL, 'provider', p_provider), p_now);
        RETURN;
    END IF;

    -- The lease: a worker that dies before reporting gives the invoice back at p_now + p_lease.
    UPDATE billing.invoice i SET next_attempt_at = p_now + p_lease
     WHERE i.customer_id = v_invoice.customer_id AND i.id = v_invoice.id
    RETURNING i.* INTO v_invoice;
    -- One row per try: a re-claim (lease expired, or UNKNOWN) reuses its key and what it was sent
    -- with, whatever the namespace and the customer's default method are now.
    INSERT INTO billing.payment_attempt AS a
           (customer_id, invoice_id, attempt_number, idempotency_key, amount, currency, worker, first_claimed_at,
            last_claimed_at, key_expires_at, provider, payment_method_id, customer_ref, payment_method_ref)
    VALUES (v_invoice.customer_id, v_invoice.id, v_invoice.try_count,
            p_cfg.key_namespace || '-inv-' || v_invoice.id || '-try-' || v_invoice.try_count, v_invoice.amount,
            v_invoice.currency, p_worker, p_now, p_now, p_now + p_cfg.key_lifetime, p_provider, v_method.id,
            v_method.customer_ref, v_method.payment_method_ref)
    ON CONFLICT ON CONSTRAINT payment_attempt_one_per_try DO UPDATE
        SET claim_count = a.claim_count + 1, worker = excluded.worker, last_claimed_at = excluded.last_claimed_at
    RETURNING a.* INTO v_attempt;
    RETURN QUERY
    SELECT v_invoice.id, v_attempt.id, v_attempt.idempotency_key, v_invoice.customer_id, v_invoice.amount,
           v_invoice.currency::text,
           -- A key sent before whose call could end within the lookup margin of its expiry: ask
           -- the gateway what became of it instead of sending it again.
           v_attempt.claim_count > 1 AND p_now + p_lease > v_attempt.key_expires_at - p_cfg.lookup_margin,
           v_attempt.customer_ref, v_attempt.payment_method_ref;
END
$$;
COMMENT ON FUNCTION billing._claim_charge_row(bigint, bigint, text, interval, timestamptz, text, billing.installation) IS
'Private: claim_charges'' work on one invoice named by (customer_id, id), under its row lock (SKIP LOCKED; OPEN and due checked on the locked version): REVIEW when its key outlived the key lifetime (InvoicePaymentReview), a wait for a payment method (InvoicePaymentMethodRequired), else the lease to p_now + p_lease with its payment_attempt (key <namespace>-inv-<id>-try-<n>, one per try; a re-claim counts). p_cfg: billing.installation.
Returns the row claim_charges returns for it, or none (review, waiting, or held by another claimer, settled or leased meanwhile).';

-- claim_charges on Citus: its statement locks due invoices of many shards at once, which Citus
-- refuses. The same claim row by row: the due invoices are read unlocked (a read of every shard,
-- oldest due first, a page at a time), each is locked by (customer_id, id) FOR NO KEY UPDATE SKIP
-- LOCKED (one shard: another claimer's rows are skipped, as by the statement) and worked on by
-- _claim_charge_row, until p_batch_size invoices were locked or none is left.
CREATE OR REPLACE FUNCTION billing._claim_charges_rows(
    p_worker text, p_batch_size integer, p_lease interval, p_now timestamptz, p_provider text)
RETURNS TABLE (invoice_id bigint, attempt_id bigint, idempotency_key text, customer_id bigint, amount bigint,
               currency text, lookup boolean, customer_ref text, payment_method_ref text)
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_cfg       billing.installation;
    v_page      record;
    v_locked    integer := 0;
    v_after     timestamptz := '-infinity';
    v_after_c   bigint := -1;
    v_after_id  bigint := -1;
    v_seen      integer;
    v_row       record;
    v_rows      jsonb := '[]';
BEGIN
    SELECT * INTO v_cfg FROM billing.installation;
    LOOP
        v_seen := 0;
        FOR v_page IN
            SELECT i.customer_id, i.id, i.next_attempt_at FROM billing.invoice i
             WHERE i.status = 'OPEN' AND i.next_attempt_at <= p_now
               AND (i.next_attempt_at, i.customer_id, i.id) > (v_after, v_after_c, v_after_id)
             ORDER BY i.next_attempt_at, i.customer_id, i.id
             LIMIT p_batch_size - v_locked
        LOOP
            v_seen := v_seen + 1;
            v_after := v_page.next_attempt_at;
            v_after_c := v_page.customer_id;
            v_after_id := v_page.id;
            -- Locked here to count it against the batch (the statement's LIMIT counts the rows it
            -- locks); _claim_charge_row takes the same lock again, held already.
            PERFORM 1 FROM billing.invoice i
             WHERE i.customer_id = v_page.customer_id AND i.id = v_page.id
               AND i.status = 'OPEN' AND i.next_attempt_at <= p_now
               FOR NO KEY UPDATE SKIP LOCKED;
            CONTINUE WHEN NOT FOUND;  -- another claimer holds it, or it moved on
            v_locked := v_locked + 1;
            FOR v_row IN SELECT * FROM billing._claim_charge_row(v_page.customer_id, v_page.id, p_worker, p_lease, p_now,
                                                                 p_provider, v_cfg) LOOP
                v_rows := v_rows || jsonb_build_array(to_jsonb(v_row));
            END LOOP;
        END LOOP;
        EXIT WHEN v_seen = 0 OR v_locked >= p_batch_size;
    END LOOP;
    RETURN QUERY
    SELECT r.invoice_id, r.attempt_id, r.idempotency_key, r.customer_id, r.amount, r.currency, r.lookup, r.customer_ref,
           r.payment_method_ref
      FROM jsonb_to_recordset(v_rows) AS r(invoice_id bigint, attempt_id bigint, idempotency_key text, customer_id bigint,
                                           amount bigint, currency text, lookup boolean, customer_ref text,
                                           payment_method_ref text)
     ORDER BY r.invoice_id;
END
$$;
COMMENT ON FUNCTION billing._claim_charges_rows(text, integer, interval, timestamptz, text) IS
'Private: claim_charges on Citus, row by row: the due OPEN invoices read unlocked oldest due first, each locked by (customer_id, id) SKIP LOCKED and claimed by _claim_charge_row, up to p_batch_size locked.
Returns claim_charges'' rows in invoice id order.';

-- An unpaid PRORATION invoice that will never be paid (its dunning failed, or it was voided): the
-- upgrade or seat increase it billed is reverted to the terms paid for, while it is still the
-- subscription's current change; a PAST_DUE subscription with nothing left OPEN is ACTIVE again.
-- Call it holding the subscription's and the invoice's row locks, the invoice already FAILED or VOID.
CREATE OR REPLACE FUNCTION billing._revert_unpaid_change(p_invoice billing.invoice, p_sub billing.subscription,
                                                         p_now timestamptz)
RETURNS billing.subscription
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_sub   billing.subscription := p_sub;
    v_after billing.subscription;
BEGIN
    IF p_invoice.kind = 'PRORATION' AND p_invoice.from_plan_id IS NOT NULL AND v_sub.status <> 'CANCELED'
       AND v_sub.plan_id = p_invoice.plan_id AND v_sub.current_period_end = p_invoice.period_end THEN
        UPDATE billing.subscription
           SET plan_id = p_invoice.from_plan_id, period_price = p_invoice.from_price,
               quantity = coalesce(p_invoice.from_quantity, quantity), version = version + 1, updated_at = p_now
         WHERE customer_id = v_sub.customer_id AND id = v_sub.id
        RETURNING * INTO v_after;
        PERFORM billing._emit_event('subscription', v_sub.id, 'SubscriptionPlanReverted',
            billing._subscription_data(v_after) || jsonb_build_object(
                'invoiceId', p_invoice.id, 'revertedPlanCode', billing.plan_code(p_invoice.plan_id)), p_now);
        PERFORM billing._emit_subscription_change(v_sub, v_after, p_now);
        v_sub := v_after;
    END IF;
    IF v_sub.status = 'PAST_DUE'
       AND NOT EXISTS (SELECT 1 FROM billing.invoice
                        WHERE customer_id = v_sub.customer_id AND subscription_id = v_sub.id AND status = 'OPEN') THEN
        UPDATE billing.subscription SET status = 'ACTIVE', version = version + 1, updated_at = p_now
         WHERE customer_id = v_sub.customer_id AND id = v_sub.id
        RETURNING * INTO v_after;
        PERFORM billing._emit_subscription_change(v_sub, v_after, p_now);
        v_sub := v_after;
    END IF;
    RETURN v_sub;
END
$$;
COMMENT ON FUNCTION billing._revert_unpaid_change(billing.invoice, billing.subscription, timestamptz) IS
'Private: for an unpaid PRORATION invoice now FAILED or VOID, reverts the upgrade or seat increase it billed (SubscriptionPlanReverted) while it is still current; then a PAST_DUE subscription with nothing left OPEN is ACTIVE again (SubscriptionRecovered).
Returns the subscription as left; call it holding the subscription''s and the invoice''s row locks.';

-- The end of dunning for an invoice just made FAILED (its schedule exhausted, or its wait for a
-- payment method over): InvoiceFailed; the credit it consumed goes back and the credit that waited
-- on it is reversed; a failed upgrade is reverted, a served period on a canceled subscription is
-- written off, and a live subscription is canceled (DUNNING_EXHAUSTED). Call it holding the
-- subscription's and the invoice's row locks.
CREATE OR REPLACE FUNCTION billing._dunning_exhausted(p_invoice billing.invoice, p_sub billing.subscription,
                                                      p_now timestamptz)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_invoice billing.invoice := p_invoice;
    v_sub     billing.subscription := p_sub;
BEGIN
    PERFORM billing._emit_event('invoice', v_invoice.id, 'InvoiceFailed', billing._invoice_data(v_invoice), p_now);

    -- Dunning exhausted: the invoice FAILED; the credit it consumed goes back and the credit that
    -- waited on it is reversed.
    PERFORM billing._restore_credit(v_invoice, p_now);
    PERFORM billing._settle_pending_credit(v_invoice, p_now);
    IF v_invoice.kind = 'PRORATION' AND v_invoice.from_plan_id IS NOT NULL THEN
        -- A failed upgrade: reverted; the subscription keeps the plan paid for to its period end.
        PERFORM billing._revert_unpaid_change(v_invoice, v_sub, p_now);
    ELSIF v_sub.status = 'CANCELED' THEN
        -- Canceled during dunning: the served period stayed owed until now; it is written off.
        PERFORM billing._emit_event('invoice', v_invoice.id, 'InvoiceWrittenOff',
            billing._invoice_data(v_invoice) || jsonb_build_object('reason', 'DUNNING_EXHAUSTED'), p_now);
    ELSE
        UPDATE billing.subscription
           SET status = 'CANCELED', canceled_at = p_now, cancel_reason = 'DUNNING_EXHAUSTED',
               version = version + 1, updated_at = p_now
         WHERE customer_id = v_sub.customer_id AND id = v_sub.id
        RETURNING * INTO v_sub;
        PERFORM billing._void_open_invoices(v_sub.customer_id, ARRAY[v_sub.id], p_now);
        PERFORM billing._emit_event('subscription', v_sub.id, 'SubscriptionCanceled',
                                    billing._subscription_data(v_sub), p_now);
    END IF;
END
$$;
COMMENT ON FUNCTION billing._dunning_exhausted(billing.invoice, billing.subscription, timestamptz) IS
'Private: the end of dunning of an invoice just made FAILED: InvoiceFailed, credit restored and pending credit reversed, then a failed upgrade reverted (SubscriptionPlanReverted), a served period of a canceled subscription written off (InvoiceWrittenOff) or the subscription canceled (DUNNING_EXHAUSTED, its other never-declined invoices voided).
Returns nothing; call it holding the subscription''s and the invoice''s row locks.';

-- ---------------------------------------------------------------------------------------------
-- Invoices waiting for a payment method: given up at the end of their dunning span.
-- ---------------------------------------------------------------------------------------------
-- When an invoice that begins to wait at p_now is given up: the dunning span (the sum of the
-- schedule's delays) after its first decline, or after p_now if it was never declined: the same
-- end as the dunning it would have had.
DROP FUNCTION IF EXISTS billing._waiting_give_up_at(bigint, timestamptz);
CREATE OR REPLACE FUNCTION billing._waiting_give_up_at(p_customer_id bigint, p_invoice_id bigint, p_now timestamptz)
RETURNS timestamptz
LANGUAGE plpgsql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    -- PL/pgSQL: Citus plans a SQL function's statement with parameters only when it reads one table
    -- by its distribution column.
    RETURN coalesce((SELECT min(a.result_at) FROM billing.payment_attempt a
                      WHERE a.customer_id = p_customer_id AND a.invoice_id = p_invoice_id AND a.outcome = 'DECLINED'),
                    p_now)
         + coalesce((SELECT sum(d.delay) FROM billing.dunning_step d), interval '0');
END
$$;
COMMENT ON FUNCTION billing._waiting_give_up_at(bigint, bigint, timestamptz) IS
'Private: when an invoice (of customer p_customer_id: one shard on Citus) beginning to wait for a payment method at p_now is given up: the sum of the dunning delays after its first decline (or after p_now if never declined).
Returns the instant.';

CREATE OR REPLACE FUNCTION billing.give_up_waiting_invoices(p_batch_size integer DEFAULT 500,
                                                            p_now timestamptz DEFAULT now())
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_customer_id bigint;
    v_id      bigint;
    v_sub_id  bigint;
    v_sub     billing.subscription;
    v_invoice billing.invoice;
    v_count   integer := 0;
BEGIN
    PERFORM billing._check_now(p_now);
    PERFORM billing._check_between('batch size', p_batch_size, 1, 10000);
    -- Nothing to give up: the call changes nothing, so it leaves no audit row (the worker asks
    -- every round of its renewal loop).
    IF NOT EXISTS (SELECT 1 FROM billing.invoice i WHERE i.waiting_for IS NOT NULL AND i.give_up_at <= p_now) THEN
        RETURN 0;
    END IF;
    PERFORM billing._audit('give_up_waiting_invoices', jsonb_build_object('batch_size', p_batch_size, 'now', p_now));
    -- The candidates are read unlocked (on Citus a read of every shard), then each is locked and
    -- worked on by (customer_id, id): one shard.
    FOR v_customer_id, v_id, v_sub_id IN
        SELECT i.customer_id, i.id, i.subscription_id FROM billing.invoice i
         WHERE i.waiting_for IS NOT NULL AND i.give_up_at <= p_now
         ORDER BY i.give_up_at, i.id
         LIMIT p_batch_size
    LOOP
        -- Lock order: subscription, invoice (as payments do); another job may have moved it on.
        SELECT * INTO v_sub FROM billing.subscription WHERE customer_id = v_customer_id AND id = v_sub_id FOR UPDATE;
        SELECT * INTO v_invoice FROM billing.invoice WHERE customer_id = v_customer_id AND id = v_id FOR UPDATE;
        CONTINUE WHEN v_invoice.status <> 'OPEN' OR v_invoice.waiting_for IS NULL OR v_invoice.give_up_at > p_now;
        UPDATE billing.invoice
           SET status = 'FAILED', waiting_for = NULL, next_attempt_at = NULL, closed_at = p_now
         WHERE customer_id = v_customer_id AND id = v_id
        RETURNING * INTO v_invoice;
        PERFORM billing._emit_event('invoice', v_invoice.id, 'InvoicePaymentFailed',
            billing._invoice_data(v_invoice) || jsonb_build_object(
                'failureReason', 'PAYMENT_METHOD_REQUIRED', 'nextAttemptAt', NULL, 'final', true,
                'hardDecline', false), p_now);
        PERFORM billing._dunning_exhausted(v_invoice, v_sub, p_now);
        v_count := v_count + 1;
    END LOOP;
    RETURN v_count;
END
$$;
COMMENT ON FUNCTION billing.give_up_waiting_invoices(integer, timestamptz) IS
'Gives up up to p_batch_size invoices that waited for a payment method until their give_up_at (the dunning span after their first decline, or after they began to wait): FAILED with InvoicePaymentFailed (failureReason PAYMENT_METHOD_REQUIRED, final) and InvoiceFailed, then as exhausted dunning (credit restored, an upgrade reverted, the period written off on a canceled subscription, or the subscription canceled). Run it periodically (the worker does).
Returns how many were given up; BL422 for bad arguments.';

-- The customer of a payment attempt named by its key alone (a gateway's answer or webhook knows
-- only the key): an unlocked read by the key's plain index (on Citus, of every shard's). The engine's
-- keys name one invoice (<namespace>-inv-<invoice id>-try-<n>), so one customer.
CREATE OR REPLACE FUNCTION billing._attempt_customer(p_idempotency_key text)
RETURNS bigint
LANGUAGE plpgsql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_customer_id bigint;
BEGIN
    SELECT a.customer_id INTO v_customer_id FROM billing.payment_attempt a
     WHERE a.idempotency_key = p_idempotency_key
     ORDER BY a.customer_id LIMIT 1;
    RETURN v_customer_id;
END
$$;
COMMENT ON FUNCTION billing._attempt_customer(text) IS
'Private: the customer of the payment attempt with this idempotency key (NULL when there is none). Callers then
name the attempt by (customer_id, idempotency_key), which goes to one shard on Citus.';

-- The state machine behind record_payment_result and apply_gateway_webhook.
DROP FUNCTION IF EXISTS billing._apply_payment_result(text, text, text, text, timestamptz);
CREATE OR REPLACE FUNCTION billing._apply_payment_result(
    p_idempotency_key text, p_outcome text, p_gateway_reference text, p_failure_reason text, p_now timestamptz,
    p_hard_decline boolean DEFAULT false)
RETURNS billing.invoice
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_attempt billing.payment_attempt;
    v_invoice billing.invoice;
    v_sub     billing.subscription;
    v_sub_id  bigint;
    v_failed  integer;
    v_next    timestamptz;
    v_margin  interval;
    v_after   billing.subscription;
    v_hard    boolean := p_outcome = 'DECLINED' AND coalesce(p_hard_decline, false);
    v_other   billing.payment_method;
    v_refund  billing.refund;
    v_customer_id bigint;
    v_give_up timestamptz;
BEGIN
    PERFORM billing._check_outcome(p_outcome);
    -- The key's customer first; then every row is named by (customer_id, ...): one shard on Citus.
    v_customer_id := billing._attempt_customer(p_idempotency_key);
    SELECT i.subscription_id INTO v_sub_id
      FROM billing.payment_attempt a JOIN billing.invoice i ON i.customer_id = a.customer_id AND i.id = a.invoice_id
     WHERE a.customer_id = v_customer_id AND a.idempotency_key = p_idempotency_key;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'BL404',
            MESSAGE = format('no payment attempt has idempotency key %L', p_idempotency_key),
            HINT = 'Report only keys returned by claim_charges.';
    END IF;

    -- Lock order: subscription, invoice, attempt (as cancel and renewal do).
    SELECT * INTO v_sub FROM billing.subscription WHERE customer_id = v_customer_id AND id = v_sub_id FOR UPDATE;
    SELECT a.* INTO v_attempt FROM billing.payment_attempt a
     WHERE a.customer_id = v_customer_id AND a.idempotency_key = p_idempotency_key;
    SELECT i.* INTO v_invoice FROM billing.invoice i WHERE i.customer_id = v_customer_id AND i.id = v_attempt.invoice_id
       FOR UPDATE;
    PERFORM 1 FROM billing.payment_attempt a WHERE a.customer_id = v_customer_id AND a.id = v_attempt.id FOR UPDATE;

    -- Never regress what this key already told us; a repeat of the same result changes nothing.
    IF v_attempt.outcome = 'SUCCEEDED'
       OR (v_attempt.outcome IN ('DECLINED', 'NOT_FOUND') AND p_outcome <> 'SUCCEEDED')
       OR (v_attempt.outcome = 'UNKNOWN' AND p_outcome = 'UNKNOWN' AND v_attempt.result_claim = v_attempt.claim_count) THEN
        RETURN v_invoice;
    END IF;
    UPDATE billing.payment_attempt
       SET outcome = p_outcome,
           gateway_reference = coalesce(p_gateway_reference, gateway_reference),
           failure_reason = CASE WHEN p_outcome = 'SUCCEEDED' THEN NULL ELSE coalesce(p_failure_reason, failure_reason) END,
           result_at = p_now,
           result_claim = claim_count,
           hard_decline = v_hard
     WHERE customer_id = v_customer_id AND id = v_attempt.id;

    IF p_outcome = 'SUCCEEDED' THEN
        IF v_invoice.status IN ('PAID', 'VOID', 'FAILED') THEN
            -- Money nobody owes: paid already through another key (the customer was charged
            -- twice), or a closed invoice (its credit went back, the period was voided or written
            -- off). The invoice stays as it is; the money is to be refunded.
            PERFORM billing._emit_event('invoice', v_invoice.id, 'RefundDue',
                billing._invoice_data(v_invoice) || jsonb_build_object(
                    'amount', v_attempt.amount, 'currency', v_attempt.currency,
                    'reason', CASE v_invoice.status WHEN 'PAID' THEN 'DUPLICATE_CHARGE' WHEN 'VOID' THEN 'INVOICE_VOID'
                                                    ELSE 'INVOICE_FAILED' END,
                    'idempotencyKey', v_attempt.idempotency_key, 'gatewayReference', p_gateway_reference), p_now);
            -- ... and given back: a refund row the worker executes through the provider.
            PERFORM billing._refund_invoice(v_invoice, v_attempt.id, v_attempt.amount,
                CASE v_invoice.status WHEN 'PAID' THEN 'DUPLICATE_CHARGE' WHEN 'VOID' THEN 'INVOICE_VOID'
                                      ELSE 'INVOICE_FAILED' END,
                'engine', NULL, p_now);
            RETURN v_invoice;
        END IF;
        UPDATE billing.invoice
           SET status = 'PAID', paid_at = p_now, paid_attempt_id = v_attempt.id,
               gateway_reference = p_gateway_reference, next_attempt_at = NULL, waiting_for = NULL
         WHERE customer_id = v_invoice.customer_id AND id = v_invoice.id
        RETURNING * INTO v_invoice;
        PERFORM billing._emit_event('invoice', v_invoice.id, 'InvoicePaid', billing._invoice_data(v_invoice), p_now);
        PERFORM billing._settle_pending_credit(v_invoice, p_now);
        IF v_sub.status = 'CANCELED' AND v_invoice.attempt_count = 0 THEN
            -- Canceled before this invoice was ever declined: nothing was owed (an invoice in
            -- dunning, kept collectible by the cancellation, is owed and simply collected). All of
            -- it is given back but what its period already gave back as credit for unused time
            -- (credit that waited on this invoice was just released).
            v_refund := billing._refund_invoice(v_invoice, v_attempt.id, v_attempt.amount, 'SUBSCRIPTION_CANCELED',
                                                'engine', NULL, p_now);
            IF v_refund.id IS NOT NULL THEN
                PERFORM billing._emit_event('invoice', v_invoice.id, 'RefundDue',
                    billing._invoice_data(v_invoice) || jsonb_build_object(
                        'amount', v_refund.amount, 'currency', v_attempt.currency, 'reason', 'SUBSCRIPTION_CANCELED',
                        'idempotencyKey', v_attempt.idempotency_key), p_now);
            END IF;
        ELSIF v_sub.status = 'PAST_DUE'
              AND NOT EXISTS (SELECT 1 FROM billing.invoice
                               WHERE customer_id = v_sub.customer_id AND subscription_id = v_sub.id AND status = 'OPEN'
                                 AND id <> v_invoice.id) THEN
            UPDATE billing.subscription SET status = 'ACTIVE', version = version + 1, updated_at = p_now
             WHERE customer_id = v_sub.customer_id AND id = v_sub.id
            RETURNING * INTO v_after;
            PERFORM billing._emit_subscription_change(v_sub, v_after, p_now);
        END IF;
        RETURN v_invoice;
    END IF;

    -- The other outcomes only count for the current try of an invoice still OPEN (or in REVIEW).
    IF v_invoice.status NOT IN ('OPEN', 'REVIEW') OR v_attempt.attempt_number <> v_invoice.try_count THEN
        RETURN v_invoice;
    END IF;

    IF p_outcome = 'UNKNOWN' THEN
        IF v_invoice.status = 'REVIEW' THEN
            RETURN v_invoice;
        END IF;
        -- Same key next time: the gateway answers the real result of this try without charging
        -- again. In 15 minutes, but never later than the start of the key's lookup margin, so
        -- that its status is asked before the gateway forgets it.
        SELECT lookup_margin INTO v_margin FROM billing.installation;
        UPDATE billing.invoice
           SET next_attempt_at = least(p_now + interval '15 minutes',
                                       greatest(p_now + interval '1 minute', v_attempt.key_expires_at - v_margin))
         WHERE customer_id = v_invoice.customer_id AND id = v_invoice.id
        RETURNING * INTO v_invoice;
        RETURN v_invoice;
    END IF;

    IF p_outcome = 'NOT_FOUND' THEN
        -- The gateway never saw this key: nothing was charged; a new key is safe, at once.
        UPDATE billing.invoice SET status = 'OPEN', try_count = try_count + 1, next_attempt_at = p_now
         WHERE customer_id = v_invoice.customer_id AND id = v_invoice.id
        RETURNING * INTO v_invoice;
        RETURN v_invoice;
    END IF;

    -- DECLINED
    v_failed := v_invoice.attempt_count + 1;
    IF v_hard THEN
        -- A hard decline (stolen or lost card, fraud, closed account, authentication required...):
        -- retrying the same method is pointless. The method is retired and the invoice waits for
        -- a new one (set_payment_method retries it at once); the schedule does not run meanwhile.
        IF v_attempt.payment_method_id IS NOT NULL THEN
            UPDATE billing.payment_method
               SET status = 'DECLINED', is_default = false, failure_reason = p_failure_reason, updated_at = p_now
             WHERE customer_id = v_invoice.customer_id AND id = v_attempt.payment_method_id AND status = 'ACTIVE';
        END IF;
        -- Another method became the default while this call was in flight: try it at once.
        v_other := billing._usable_method(v_invoice.customer_id, coalesce(v_attempt.provider, 'sim'), p_now);
        v_next := CASE WHEN v_other.id IS NOT NULL AND v_other.id IS DISTINCT FROM v_attempt.payment_method_id
                       THEN p_now END;
        -- (computed first: Citus takes no function reading a table in an UPDATE's SET)
        v_give_up := CASE WHEN v_next IS NULL
                          THEN coalesce(v_invoice.give_up_at,
                                        billing._waiting_give_up_at(v_invoice.customer_id, v_invoice.id, p_now))
                          ELSE v_invoice.give_up_at END;
        UPDATE billing.invoice
           SET attempt_count = v_failed,
               try_count = try_count + 1,
               last_failure_reason = p_failure_reason,
               status = 'OPEN',
               next_attempt_at = v_next,
               waiting_for = CASE WHEN v_next IS NULL THEN 'PAYMENT_METHOD' END,
               give_up_at = v_give_up
         WHERE customer_id = v_invoice.customer_id AND id = v_invoice.id
        RETURNING * INTO v_invoice;
        PERFORM billing._emit_event('invoice', v_invoice.id, 'InvoicePaymentFailed',
            billing._invoice_data(v_invoice) || jsonb_build_object(
                'failureReason', p_failure_reason, 'nextAttemptAt', billing._utc_text(v_next), 'final', false,
                'hardDecline', true),
            p_now);
        IF v_next IS NULL THEN
            PERFORM billing._emit_event('invoice', v_invoice.id, 'InvoicePaymentMethodRequired',
                billing._invoice_data(v_invoice) || jsonb_build_object(
                    'reason', 'HARD_DECLINE', 'declineCode', p_failure_reason,
                    'provider', coalesce(v_attempt.provider, 'sim')), p_now);
        END IF;
        IF v_sub.status = 'ACTIVE' THEN
            UPDATE billing.subscription SET status = 'PAST_DUE', version = version + 1, updated_at = p_now
             WHERE customer_id = v_sub.customer_id AND id = v_sub.id
            RETURNING * INTO v_after;
            PERFORM billing._emit_subscription_change(v_sub, v_after, p_now);
        END IF;
        RETURN v_invoice;
    END IF;
    v_next := billing._dunning_next_attempt(v_failed, v_invoice.id, p_now);
    UPDATE billing.invoice
       SET attempt_count = v_failed,
           try_count = try_count + 1,
           last_failure_reason = p_failure_reason,
           status = CASE WHEN v_next IS NULL THEN 'FAILED' ELSE 'OPEN' END,
           next_attempt_at = v_next,
           waiting_for = NULL,
           closed_at = CASE WHEN v_next IS NULL THEN p_now END
     WHERE customer_id = v_invoice.customer_id AND id = v_invoice.id
    RETURNING * INTO v_invoice;
    PERFORM billing._emit_event('invoice', v_invoice.id, 'InvoicePaymentFailed',
        billing._invoice_data(v_invoice) || jsonb_build_object(
            'failureReason', p_failure_reason, 'nextAttemptAt', billing._utc_text(v_next), 'final', v_next IS NULL,
            'hardDecline', false),
        p_now);

    IF v_next IS NOT NULL THEN
        IF v_sub.status = 'ACTIVE' THEN
            UPDATE billing.subscription SET status = 'PAST_DUE', version = version + 1, updated_at = p_now
             WHERE customer_id = v_sub.customer_id AND id = v_sub.id
            RETURNING * INTO v_after;
            PERFORM billing._emit_subscription_change(v_sub, v_after, p_now);
        END IF;
        RETURN v_invoice;
    END IF;
    PERFORM billing._dunning_exhausted(v_invoice, v_sub, p_now);
    RETURN v_invoice;
END
$$;
COMMENT ON FUNCTION billing._apply_payment_result(text, text, text, text, timestamptz, boolean) IS
'Private: applies one gateway outcome to the attempt, its invoice and its subscription, idempotently and without regressing state (p_hard_decline: the decline needs a new payment method).
Returns the invoice after the change; BL404 for an unknown key, BL422 for an unknown outcome.';

DROP FUNCTION IF EXISTS billing.record_payment_result(text, text, text, text, timestamptz);
CREATE OR REPLACE FUNCTION billing.record_payment_result(
    p_idempotency_key text, p_outcome text, p_gateway_reference text DEFAULT NULL,
    p_failure_reason text DEFAULT NULL, p_now timestamptz DEFAULT now(), p_hard_decline boolean DEFAULT false)
RETURNS billing.invoice
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM billing._audit('record_payment_result', jsonb_build_object('idempotency_key', p_idempotency_key, 'outcome', p_outcome, 'gateway_reference', p_gateway_reference, 'failure_reason', p_failure_reason, 'now', p_now, 'hard_decline', p_hard_decline));
    PERFORM billing._check_now(p_now);
    RETURN billing._apply_payment_result(p_idempotency_key, p_outcome, p_gateway_reference, p_failure_reason, p_now,
                                         p_hard_decline);
END
$$;
COMMENT ON FUNCTION billing.record_payment_result(text, text, text, text, timestamptz, boolean) IS
'Records a gateway outcome: SUCCEEDED pays an OPEN or REVIEW invoice (RefundDue and a refund row when the invoice is already PAID, VOID or FAILED), DECLINED follows dunning (p_hard_decline: the method is retired and the invoice waits for a new one), UNKNOWN retries with the same key (in 15 min, sooner near the key''s expiry), NOT_FOUND (the gateway never saw the key) retries at once with a new key.
Returns the invoice; idempotent; BL404 for an unknown key, BL422 for an unknown outcome.';

-- The disagreement, if any, between a successful webhook and the attempt it reports on.
CREATE OR REPLACE FUNCTION billing._webhook_mismatch(p_attempt billing.payment_attempt, p_customer_id bigint, p_payload jsonb)
RETURNS text
LANGUAGE sql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
    SELECT concat_ws('; ',
        CASE WHEN p_payload ? 'amount' AND (p_payload ->> 'amount') IS DISTINCT FROM p_attempt.amount::text
             THEN format('amount %s, attempt %s', p_payload ->> 'amount', p_attempt.amount) END,
        CASE WHEN p_payload ? 'currency' AND (p_payload ->> 'currency') IS DISTINCT FROM p_attempt.currency::text
             THEN format('currency %s, attempt %s', p_payload ->> 'currency', p_attempt.currency) END,
        CASE WHEN p_payload ? 'customerId' AND (p_payload ->> 'customerId') IS DISTINCT FROM p_customer_id::text
             THEN format('customer %s, invoice %s', p_payload ->> 'customerId', p_customer_id) END)
$$;
COMMENT ON FUNCTION billing._webhook_mismatch(billing.payment_attempt, bigint, jsonb) IS
'Private: how a webhook''s amount, currency and customerId (those present) differ from the attempt and its invoice.
Returns the differences as text, '''' when they agree.';

DROP FUNCTION IF EXISTS billing.apply_gateway_webhook(text, text, text, text, jsonb, timestamptz);
DROP FUNCTION IF EXISTS billing.apply_gateway_webhook(text, text, text, text, jsonb, timestamptz, boolean);
CREATE OR REPLACE FUNCTION billing.apply_gateway_webhook(
    p_event_id text, p_idempotency_key text, p_outcome text, p_gateway_reference text,
    p_payload jsonb, p_now timestamptz DEFAULT now(), p_hard_decline boolean DEFAULT false)
RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_attempt  billing.payment_attempt;
    v_invoice  billing.invoice;
    v_mismatch text := '';
    v_customer_id bigint;
BEGIN
    PERFORM billing._audit('apply_gateway_webhook', jsonb_build_object('event_id', p_event_id, 'idempotency_key', p_idempotency_key, 'outcome', p_outcome, 'gateway_reference', p_gateway_reference, 'now', p_now, 'hard_decline', p_hard_decline));
    PERFORM billing._check_now(p_now);
    IF p_event_id IS NULL OR btrim(p_event_id) = '' THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = 'a webhook event id is required';
    END IF;
    PERFORM billing._check_one_of('webhook outcome', p_outcome, ARRAY['SUCCEEDED', 'DECLINED', 'UNKNOWN'],
                                  'Use SUCCEEDED, DECLINED or UNKNOWN.');
    p_payload := coalesce(p_payload, '{}'::jsonb);
    -- its attempt's customer (NULL when the key names none); the key is unique per customer and
    -- names one attempt of the engine's (<namespace>-inv-<invoice>-try-<n>)
    v_customer_id := billing._attempt_customer(p_idempotency_key);
    IF p_outcome = 'SUCCEEDED' THEN
        SELECT a.* INTO v_attempt FROM billing.payment_attempt a
         WHERE a.customer_id = v_customer_id AND a.idempotency_key = p_idempotency_key;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'BL404',
                MESSAGE = format('no payment attempt has idempotency key %L', p_idempotency_key),
                HINT = 'Report only keys returned by claim_charges.';
        END IF;
        SELECT i.* INTO v_invoice FROM billing.invoice i WHERE i.customer_id = v_customer_id AND i.id = v_attempt.invoice_id;
        v_mismatch := billing._webhook_mismatch(v_attempt, v_invoice.customer_id, p_payload);
    END IF;
    INSERT INTO billing.gateway_webhook (event_id, idempotency_key, outcome, gateway_reference, payload, received_at,
                                         review_reason, customer_id)
    VALUES (p_event_id, p_idempotency_key, p_outcome, p_gateway_reference, p_payload, p_now, nullif(v_mismatch, ''),
            coalesce(v_customer_id, 0))  -- 0 when the key names no attempt
    ON CONFLICT ON CONSTRAINT gateway_webhook_pkey DO NOTHING;
    IF NOT FOUND THEN
        RETURN 'DUPLICATE';  -- delivered before
    END IF;
    IF v_mismatch <> '' THEN
        -- Not applied: a charge that is not the one we asked for (another installation's key,
        -- a gateway mix-up). Kept with its reason; a person looks at it.
        PERFORM 1 FROM billing.subscription
         WHERE customer_id = v_invoice.customer_id AND id = v_invoice.subscription_id FOR UPDATE;
        PERFORM billing._emit_event('invoice', v_invoice.id, 'PaymentReviewRequired',
            billing._invoice_data(v_invoice) || jsonb_build_object(
                'reason', 'WEBHOOK_MISMATCH', 'detail', v_mismatch, 'webhookEventId', p_event_id,
                'idempotencyKey', p_idempotency_key, 'gatewayReference', p_gateway_reference), p_now);
        RETURN 'REVIEW';
    END IF;
    PERFORM billing._apply_payment_result(
        p_idempotency_key, p_outcome, p_gateway_reference,
        coalesce(p_payload ->> 'declineCode', p_payload ->> 'failureReason', p_payload ->> 'failure_reason'), p_now,
        p_hard_decline);
    RETURN 'APPLIED';
END
$$;
COMMENT ON FUNCTION billing.apply_gateway_webhook(text, text, text, text, jsonb, timestamptz, boolean) IS
'Stores a gateway webhook once per p_event_id and applies it like record_payment_result (decline reason from payload declineCode, p_hard_decline as the provider classified it); a success whose amount, currency or customerId disagree with the attempt is kept unapplied with a review reason and event PaymentReviewRequired.
Returns APPLIED, DUPLICATE (delivered before) or REVIEW (kept, not applied); BL404 for an unknown key (nothing stored, the gateway retries).';
