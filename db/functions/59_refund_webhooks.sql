-- 59_refund_webhooks: a provider's refund events, bound to the refund they name (issue 27, finding 1).
-- A signed event is genuine, but it may be about another refund that carries our key in its
-- metadata (keys are predictable and published in RefundRequested): it is applied only when the
-- provider's refund id (once we know it), the amount, the currency and the charge are ours, and
-- when every one of them is present. Otherwise it is kept for a person (RefundReviewRequired).
-- A refund reported FAILED after it SUCCEEDED is never taken on an event's word: the worker looks
-- it up at the provider (claim_refund_rechecks), and only that answer is recorded.
-- Re-applied after every migration: CREATE OR REPLACE only. Granted in 90_grants.sql.

-- What, if anything, makes a refund event disagree with the refund: text, '' when it agrees.
CREATE OR REPLACE FUNCTION billing._refund_event_mismatch(
    p_refund billing.refund, p_refund_id text, p_amount bigint, p_currency text, p_charge text)
RETURNS text
LANGUAGE sql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
    SELECT concat_ws('; ',
        CASE WHEN p_refund.provider_reference IS NOT NULL AND p_refund_id IS DISTINCT FROM p_refund.provider_reference
             THEN format('refund %s, ours %s', p_refund_id, p_refund.provider_reference) END,
        CASE WHEN p_amount IS DISTINCT FROM p_refund.amount
             THEN format('amount %s, ours %s', p_amount, p_refund.amount) END,
        CASE WHEN p_currency IS DISTINCT FROM btrim(p_refund.currency)
             THEN format('currency %s, ours %s', p_currency, btrim(p_refund.currency)) END,
        CASE WHEN p_charge IS DISTINCT FROM p_refund.charge_reference
             THEN format('charge %s, ours %s', p_charge, coalesce(p_refund.charge_reference, 'none')) END)
$$;
COMMENT ON FUNCTION billing._refund_event_mismatch(billing.refund, text, bigint, text, text) IS
'Private: how a provider''s refund event (its refund id, amount, currency, charge) differs from our refund; the refund id is compared once we know it.
Returns the differences as text, '''' when they agree.';

CREATE OR REPLACE FUNCTION billing.apply_refund_webhook(
    p_event_id text, p_idempotency_key text, p_outcome text, p_refund_id text, p_amount bigint,
    p_currency text, p_charge text, p_failure_reason text DEFAULT NULL, p_now timestamptz DEFAULT now())
RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_refund  billing.refund;
    v_invoice billing.invoice;
    v_customer_id bigint;
    v_missing text;
    v_detail  text;
    v_reason  text;
BEGIN
    PERFORM billing._audit('apply_refund_webhook', jsonb_build_object('event_id', p_event_id, 'idempotency_key', p_idempotency_key, 'outcome', p_outcome, 'refund_id', p_refund_id, 'amount', p_amount, 'currency', p_currency, 'charge', p_charge, 'failure_reason', p_failure_reason, 'now', p_now));
    PERFORM billing._check_now(p_now);
    IF p_event_id IS NULL OR btrim(p_event_id) = '' THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = 'a webhook event id is required';
    END IF;
    PERFORM billing._check_one_of('refund outcome', p_outcome, ARRAY['SUCCEEDED', 'FAILED'], 'Use SUCCEEDED or FAILED.');
    v_customer_id := billing._refund_customer(p_idempotency_key);
    SELECT * INTO v_refund FROM billing.refund WHERE customer_id = v_customer_id AND idempotency_key = p_idempotency_key;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'BL404',
            MESSAGE = format('no refund has idempotency key %L', p_idempotency_key);
    END IF;
    -- Lock order: subscription, invoice, refund (as record_refund_result).
    SELECT * INTO v_invoice FROM billing.invoice WHERE customer_id = v_customer_id AND id = v_refund.invoice_id;
    PERFORM 1 FROM billing.subscription
     WHERE customer_id = v_customer_id AND id = v_invoice.subscription_id FOR UPDATE;
    SELECT * INTO v_invoice FROM billing.invoice WHERE customer_id = v_customer_id AND id = v_refund.invoice_id FOR UPDATE;
    SELECT * INTO v_refund FROM billing.refund WHERE customer_id = v_customer_id AND id = v_refund.id FOR UPDATE;

    v_missing := concat_ws(', ',
        CASE WHEN nullif(btrim(p_refund_id), '') IS NULL THEN 'refund id' END,
        CASE WHEN p_amount IS NULL THEN 'amount' END,
        CASE WHEN nullif(btrim(p_currency), '') IS NULL THEN 'currency' END,
        CASE WHEN nullif(btrim(p_charge), '') IS NULL THEN 'charge' END);
    IF v_missing <> '' THEN
        v_reason := 'WEBHOOK_INCOMPLETE';
        v_detail := 'missing: ' || v_missing;
    ELSE
        v_detail := billing._refund_event_mismatch(v_refund, p_refund_id, p_amount, p_currency, p_charge);
        v_reason := CASE WHEN v_detail <> '' THEN 'WEBHOOK_MISMATCH' END;
    END IF;
    IF v_reason IS NOT NULL THEN
        -- Not ours, or not all of it said: kept for a person, once per event.
        IF NOT EXISTS (SELECT 1 FROM billing.outbox_event e
                        WHERE e.aggregate_type = 'invoice' AND e.aggregate_id = v_invoice.id
                          AND e.event_type = 'RefundReviewRequired'
                          AND e.payload -> 'data' ->> 'webhookEventId' = p_event_id) THEN
            PERFORM billing._emit_event('invoice', v_invoice.id, 'RefundReviewRequired',
                billing._refund_data(v_refund) || jsonb_build_object(
                    'reviewReason', v_reason, 'detail', v_detail, 'webhookEventId', p_event_id,
                    'eventRefundId', p_refund_id), p_now);
        END IF;
        RETURN 'REVIEW';
    END IF;
    IF v_refund.status = 'SUCCEEDED' AND p_outcome = 'FAILED' THEN
        -- The bank may have sent it back, or the event may lie: the worker asks the provider.
        IF v_refund.recheck_at IS NULL THEN
            UPDATE billing.refund SET recheck_at = p_now
             WHERE customer_id = v_refund.customer_id AND id = v_refund.id
            RETURNING * INTO v_refund;
            PERFORM billing._emit_event('invoice', v_invoice.id, 'RefundReviewRequired',
                billing._refund_data(v_refund) || jsonb_build_object(
                    'reviewReason', 'FAILED_AFTER_SUCCEEDED', 'detail', coalesce(p_failure_reason, 'failed'),
                    'webhookEventId', p_event_id, 'eventRefundId', p_refund_id), p_now);
        END IF;
        RETURN 'RECHECK';
    END IF;
    IF v_refund.status <> 'REQUESTED' THEN
        RETURN 'DUPLICATE';  -- settled already, by the worker or an earlier event
    END IF;
    PERFORM billing.record_refund_result(p_idempotency_key, p_outcome, p_refund_id, p_failure_reason, p_now);
    RETURN 'APPLIED';
END
$$;
COMMENT ON FUNCTION billing.apply_refund_webhook(text, text, text, text, bigint, text, text, text, timestamptz) IS
'Applies a verified provider refund event (p_outcome SUCCEEDED or FAILED) to the refund its key names, only when its refund id (once known), amount, currency and charge are all given and match: a REQUESTED refund is settled as record_refund_result settles it. A mismatch or a missing field: RefundReviewRequired (once per event), nothing applied. FAILED after SUCCEEDED: never applied; the refund is marked for the worker to look up at the provider (claim_refund_rechecks), RefundReviewRequired once.
Returns APPLIED, DUPLICATE (settled already), REVIEW or RECHECK; BL404 for an unknown key, BL422 for a missing event id or another outcome.';

-- The SUCCEEDED refunds an event said failed, for the worker to look up (on the worker's own
-- connection, no lock held across the provider's call): each leased by moving recheck_at on.
CREATE OR REPLACE FUNCTION billing.claim_refund_rechecks(
    p_batch_size integer DEFAULT 50, p_lease interval DEFAULT interval '5 minutes', p_now timestamptz DEFAULT now())
RETURNS TABLE (refund_id bigint, customer_id bigint, invoice_id bigint, idempotency_key text, provider text,
               charge_reference text, charge_key text, amount bigint, currency text, lookup boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_due record;
    v_ref billing.refund;
    v_key text;
BEGIN
    PERFORM billing._check_claim_args(p_batch_size, p_lease, p_now);
    IF NOT EXISTS (SELECT 1 FROM billing.refund r WHERE r.recheck_at <= p_now) THEN
        RETURN;  -- nothing due: no audit row (the worker asks every second)
    END IF;
    PERFORM billing._audit('claim_refund_rechecks', jsonb_build_object('batch_size', p_batch_size, 'lease', p_lease, 'now', p_now));
    -- Read unlocked, then each leased by its (customer_id, id): one shard each on Citus.
    FOR v_due IN
        SELECT r.customer_id, r.id FROM billing.refund r
         WHERE r.recheck_at <= p_now ORDER BY r.recheck_at LIMIT p_batch_size
    LOOP
        UPDATE billing.refund r SET recheck_at = p_now + p_lease
         WHERE r.customer_id = v_due.customer_id AND r.id = v_due.id AND r.recheck_at <= p_now
        RETURNING * INTO v_ref;
        CONTINUE WHEN NOT FOUND;
        SELECT a.idempotency_key INTO v_key FROM billing.payment_attempt a
         WHERE a.customer_id = v_ref.customer_id AND a.id = v_ref.attempt_id;
        RETURN QUERY SELECT v_ref.id, v_ref.customer_id, v_ref.invoice_id, v_ref.idempotency_key, v_ref.provider,
                            v_ref.charge_reference, v_key, v_ref.amount, v_ref.currency::text, true;
    END LOOP;
END
$$;
COMMENT ON FUNCTION billing.claim_refund_rechecks(integer, interval, timestamptz) IS
'Claims up to p_batch_size refunds an event reported failed after they succeeded (recheck_at due), each leased until p_now + p_lease: the worker looks each up at the provider and records the answer with record_refund_result (FAILED: it becomes FAILED and leaves amount_refunded; SUCCEEDED: the recheck ends).
Returns claim_refunds'' columns, lookup always true.';
