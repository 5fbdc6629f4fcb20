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
    PERFORM billing._check_one_of('payment outcome', p_outcome, ARRAY['SUCCEEDED', 'DECLINED', 'UNKNOWN'],
                                  'Use SUCCEEDED, DECLINED or UNKNOWN.');
END
$$;
COMMENT ON FUNCTION billing._check_outcome(text) IS
'Private: a payment outcome is SUCCEEDED, DECLINED or UNKNOWN.
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
         + CASE WHEN d.max_jitter > interval '0' THEN
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
-- Claims and results
-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION billing.claim_charges(
    p_worker text, p_batch_size integer DEFAULT 100, p_lease interval DEFAULT interval '5 minutes',
    p_now timestamptz DEFAULT now())
RETURNS TABLE (invoice_id bigint, attempt_id bigint, idempotency_key text, customer_id bigint, amount bigint, currency text)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
SET jit = off  -- a short OLTP statement: compiling it would cost more than running it
AS $$
#variable_conflict use_column
BEGIN
    PERFORM billing._audit('claim_charges', jsonb_build_object('worker', p_worker, 'batch_size', p_batch_size, 'lease', p_lease, 'now', p_now));
    PERFORM billing._check_now(p_now);
    PERFORM billing._check_text('a worker name', p_worker, 255);
    PERFORM billing._check_between('batch size', p_batch_size, 1, 10000);
    PERFORM billing._check_lease(p_lease);

    RETURN QUERY
    WITH due AS MATERIALIZED (
        SELECT i.id
          FROM billing.invoice i
         WHERE i.status = 'OPEN' AND i.next_attempt_at <= p_now
         ORDER BY i.next_attempt_at
         LIMIT p_batch_size
           FOR NO KEY UPDATE SKIP LOCKED
    ), claimed AS (
        -- The lease: a worker that dies before reporting gives the invoice back at p_now + p_lease.
        UPDATE billing.invoice i
           SET next_attempt_at = p_now + p_lease
          FROM due
         WHERE i.id = due.id
        RETURNING i.id, i.attempt_count, i.customer_id, i.amount, i.currency
    ), attempt AS (
        -- One row per key: a re-claim (lease expired, or UNKNOWN) reuses the key and its row.
        INSERT INTO billing.payment_attempt AS a
               (invoice_id, attempt_number, idempotency_key, amount, currency, worker, first_claimed_at, last_claimed_at)
        SELECT c.id, c.attempt_count, 'inv-' || c.id || '-try-' || c.attempt_count, c.amount, c.currency,
               p_worker, p_now, p_now
          FROM claimed c
        ON CONFLICT ON CONSTRAINT payment_attempt_idempotency_key_key DO UPDATE
            SET claim_count = a.claim_count + 1, worker = excluded.worker, last_claimed_at = excluded.last_claimed_at
        RETURNING a.id, a.invoice_id, a.idempotency_key
    )
    SELECT c.id, a.id, a.idempotency_key, c.customer_id, c.amount, c.currency::text
      FROM claimed c
      JOIN attempt a ON a.invoice_id = c.id
     ORDER BY c.id;
END
$$;
COMMENT ON FUNCTION billing.claim_charges(text, integer, interval, timestamptz) IS
'Claims up to p_batch_size OPEN invoices due by p_now (SKIP LOCKED), records one payment_attempt per key and leases them until p_now + p_lease.
Returns what to charge: key inv-<invoice id>-try-<attempt_count>, reused by a re-claim; BL422 for bad arguments.';

-- The state machine behind record_payment_result and apply_gateway_webhook.
CREATE OR REPLACE FUNCTION billing._apply_payment_result(
    p_idempotency_key text, p_outcome text, p_gateway_reference text, p_failure_reason text, p_now timestamptz)
RETURNS billing.invoice
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_attempt billing.payment_attempt;
    v_invoice billing.invoice;
    v_sub     billing.subscription;
    v_after   billing.subscription;
    v_sub_id  bigint;
    v_failed  integer;
    v_next    timestamptz;
BEGIN
    PERFORM billing._check_outcome(p_outcome);
    SELECT i.subscription_id INTO v_sub_id
      FROM billing.payment_attempt a JOIN billing.invoice i ON i.id = a.invoice_id
     WHERE a.idempotency_key = p_idempotency_key;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'BL404',
            MESSAGE = format('no payment attempt has idempotency key %L', p_idempotency_key),
            HINT = 'Report only keys returned by claim_charges.';
    END IF;

    -- Lock order: subscription, invoice, attempt (as cancel and renewal do).
    v_sub := billing._lock_subscription(v_sub_id);
    SELECT a.* INTO v_attempt FROM billing.payment_attempt a WHERE a.idempotency_key = p_idempotency_key;
    SELECT i.* INTO v_invoice FROM billing.invoice i WHERE i.id = v_attempt.invoice_id FOR UPDATE;
    PERFORM 1 FROM billing.payment_attempt a WHERE a.id = v_attempt.id FOR UPDATE;

    -- Never regress what this key already told us; a repeat of the same result changes nothing.
    IF v_attempt.outcome = 'SUCCEEDED'
       OR (v_attempt.outcome = 'DECLINED' AND p_outcome <> 'SUCCEEDED')
       OR (v_attempt.outcome = 'UNKNOWN' AND p_outcome = 'UNKNOWN' AND v_attempt.result_claim = v_attempt.claim_count) THEN
        RETURN v_invoice;
    END IF;
    UPDATE billing.payment_attempt
       SET outcome = p_outcome,
           gateway_reference = coalesce(p_gateway_reference, gateway_reference),
           failure_reason = CASE WHEN p_outcome = 'SUCCEEDED' THEN NULL ELSE coalesce(p_failure_reason, failure_reason) END,
           result_at = p_now,
           result_claim = claim_count
     WHERE id = v_attempt.id;

    IF p_outcome = 'SUCCEEDED' THEN
        IF v_invoice.status = 'PAID' THEN
            -- Paid already through another key: the customer was charged twice.
            PERFORM billing._emit_event('invoice', v_invoice.id, 'RefundDue',
                billing._invoice_data(v_invoice) || jsonb_build_object(
                    'amount', v_attempt.amount, 'currency', v_attempt.currency, 'reason', 'DUPLICATE_CHARGE',
                    'idempotencyKey', v_attempt.idempotency_key, 'gatewayReference', p_gateway_reference), p_now);
            RETURN v_invoice;
        END IF;
        UPDATE billing.invoice
           SET status = 'PAID', paid_at = p_now, paid_attempt_id = v_attempt.id,
               gateway_reference = p_gateway_reference, next_attempt_at = NULL
         WHERE id = v_invoice.id
        RETURNING * INTO v_invoice;
        PERFORM billing._emit_event('invoice', v_invoice.id, 'InvoicePaid', billing._invoice_data(v_invoice), p_now);
        IF v_sub.status = 'CANCELED' THEN
            PERFORM billing._emit_event('invoice', v_invoice.id, 'RefundDue',
                billing._invoice_data(v_invoice) || jsonb_build_object(
                    'amount', v_attempt.amount, 'currency', v_attempt.currency, 'reason', 'SUBSCRIPTION_CANCELED',
                    'idempotencyKey', v_attempt.idempotency_key), p_now);
        ELSIF v_sub.status = 'PAST_DUE'
              AND NOT EXISTS (SELECT 1 FROM billing.invoice
                               WHERE subscription_id = v_sub.id AND status = 'OPEN' AND id <> v_invoice.id) THEN
            UPDATE billing.subscription SET status = 'ACTIVE', version = version + 1, updated_at = p_now
             WHERE id = v_sub.id
            RETURNING * INTO v_after;
            PERFORM billing._emit_subscription_change(v_sub, v_after, p_now);
        END IF;
        RETURN v_invoice;
    END IF;

    -- DECLINED or UNKNOWN only count for the current try of an invoice still OPEN.
    IF v_invoice.status <> 'OPEN' OR v_attempt.attempt_number <> v_invoice.attempt_count THEN
        RETURN v_invoice;
    END IF;

    IF p_outcome = 'UNKNOWN' THEN
        -- Same key next time: the gateway answers the real result of this try without charging again.
        UPDATE billing.invoice SET next_attempt_at = p_now + interval '15 minutes'
         WHERE id = v_invoice.id
        RETURNING * INTO v_invoice;
        RETURN v_invoice;
    END IF;

    -- DECLINED
    v_failed := v_invoice.attempt_count + 1;
    v_next := billing._dunning_next_attempt(v_failed, v_invoice.id, p_now);
    UPDATE billing.invoice
       SET attempt_count = v_failed,
           last_failure_reason = p_failure_reason,
           status = CASE WHEN v_next IS NULL THEN 'FAILED' ELSE 'OPEN' END,
           next_attempt_at = v_next,
           closed_at = CASE WHEN v_next IS NULL THEN p_now END
     WHERE id = v_invoice.id
    RETURNING * INTO v_invoice;
    PERFORM billing._emit_event('invoice', v_invoice.id, 'InvoicePaymentFailed',
        billing._invoice_data(v_invoice) || jsonb_build_object(
            'failureReason', p_failure_reason, 'nextAttemptAt', billing._utc_text(v_next), 'final', v_next IS NULL),
        p_now);
    IF v_next IS NULL THEN
        PERFORM billing._emit_event('invoice', v_invoice.id, 'InvoiceFailed', billing._invoice_data(v_invoice), p_now);
    END IF;

    IF v_next IS NULL THEN
        UPDATE billing.subscription
           SET status = 'CANCELED', canceled_at = p_now, cancel_reason = 'DUNNING_EXHAUSTED',
               version = version + 1, updated_at = p_now
         WHERE id = v_sub.id AND status <> 'CANCELED'
        RETURNING * INTO v_sub;
        IF FOUND THEN
            PERFORM billing._void_open_invoices(ARRAY[v_sub.id], p_now);
            PERFORM billing._emit_event('subscription', v_sub.id, 'SubscriptionCanceled',
                                        billing._subscription_data(v_sub), p_now);
        END IF;
    ELSIF v_sub.status = 'ACTIVE' THEN
        UPDATE billing.subscription SET status = 'PAST_DUE', version = version + 1, updated_at = p_now
         WHERE id = v_sub.id
        RETURNING * INTO v_after;
        PERFORM billing._emit_subscription_change(v_sub, v_after, p_now);
    END IF;
    RETURN v_invoice;
END
$$;
COMMENT ON FUNCTION billing._apply_payment_result(text, text, text, text, timestamptz) IS
'Private: applies one gateway outcome to the attempt, its invoice and its subscription, idempotently and without regressing state.
Returns the invoice after the change; BL404 for an unknown key, BL422 for an unknown outcome.';

CREATE OR REPLACE FUNCTION billing.record_payment_result(
    p_idempotency_key text, p_outcome text, p_gateway_reference text DEFAULT NULL,
    p_failure_reason text DEFAULT NULL, p_now timestamptz DEFAULT now())
RETURNS billing.invoice
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM billing._audit('record_payment_result', jsonb_build_object('idempotency_key', p_idempotency_key, 'outcome', p_outcome, 'gateway_reference', p_gateway_reference, 'failure_reason', p_failure_reason, 'now', p_now));
    PERFORM billing._check_now(p_now);
    RETURN billing._apply_payment_result(p_idempotency_key, p_outcome, p_gateway_reference, p_failure_reason, p_now);
END
$$;
COMMENT ON FUNCTION billing.record_payment_result(text, text, text, text, timestamptz) IS
'Records a gateway outcome: SUCCEEDED pays (always wins, RefundDue if canceled), DECLINED follows dunning, UNKNOWN retries in 15 min with the same key.
Returns the invoice; idempotent; BL404 for an unknown key, BL422 for an unknown outcome.';

CREATE OR REPLACE FUNCTION billing.apply_gateway_webhook(
    p_event_id text, p_idempotency_key text, p_outcome text, p_gateway_reference text,
    p_payload jsonb, p_now timestamptz DEFAULT now())
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM billing._audit('apply_gateway_webhook', jsonb_build_object('event_id', p_event_id, 'idempotency_key', p_idempotency_key, 'outcome', p_outcome, 'gateway_reference', p_gateway_reference, 'now', p_now));
    PERFORM billing._check_now(p_now);
    IF p_event_id IS NULL OR btrim(p_event_id) = '' THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = 'a webhook event id is required';
    END IF;
    PERFORM billing._check_outcome(p_outcome);
    INSERT INTO billing.gateway_webhook (event_id, idempotency_key, outcome, gateway_reference, payload, received_at)
    VALUES (p_event_id, p_idempotency_key, p_outcome, p_gateway_reference, coalesce(p_payload, '{}'::jsonb), p_now)
    ON CONFLICT ON CONSTRAINT gateway_webhook_pkey DO NOTHING;
    IF NOT FOUND THEN
        RETURN false;  -- delivered before
    END IF;
    PERFORM billing._apply_payment_result(
        p_idempotency_key, p_outcome, p_gateway_reference,
        coalesce(p_payload ->> 'declineCode', p_payload ->> 'failureReason', p_payload ->> 'failure_reason'), p_now);
    RETURN true;
END
$$;
COMMENT ON FUNCTION billing.apply_gateway_webhook(text, text, text, text, jsonb, timestamptz) IS
'Stores a gateway webhook once per p_event_id and applies it like record_payment_result (decline reason from payload declineCode).
Returns true when applied, false for a duplicate delivery; BL404 for an unknown key (nothing stored, the gateway retries).';
