-- 53_payment_results: the outcome of a charge, reported by the charge worker
-- (record_payment_result) or by the gateway (apply_gateway_webhook). Results are idempotent, may
-- arrive late, twice or out of order, and a success always wins.
-- Re-applied after every migration: CREATE OR REPLACE only.

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
    -- Authentication required is never hard: the card is good, the customer must act (below).
    v_hard    boolean := p_outcome = 'DECLINED' AND coalesce(p_hard_decline, false)
                         AND p_failure_reason IS DISTINCT FROM 'authentication_required';
    v_window  interval;
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
       SET outcome = CASE WHEN p_outcome = 'CONFLICT' THEN 'UNKNOWN' ELSE p_outcome END,  -- its fate is another charge's (a searched CASE: Citus deparses a simple one with a parameter wrongly)
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
        IF v_sub.status = 'CANCELED'
           AND v_attempt.amount > v_invoice.amount - least(v_invoice.unserved, v_invoice.amount) THEN
            -- A charge sent before a cancellation took the time not served off its invoice (issue 26
            -- #3): the time served is owed and collected, the rest of the charge given back (less
            -- what its period already gave back as credit for unused time).
            v_refund := billing._refund_invoice(v_invoice, v_attempt.id,
                                                v_attempt.amount - (v_invoice.amount - least(v_invoice.unserved, v_invoice.amount)),
                                                'SUBSCRIPTION_CANCELED', 'engine', NULL, p_now);
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

    IF p_outcome = 'CONFLICT' THEN
        -- The gateway holds a successful charge of other parameters under this key (a failover
        -- lost the writes that made it, or a backup was restored): money moved that the books do
        -- not show. Never sent again; a person decides (docs/operations.md).
        RETURN billing._to_review(v_invoice, 'KEY_CONFLICT', p_now);
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
    IF p_failure_reason = 'authentication_required' AND v_invoice.action_required_until IS NULL THEN
        -- Not a decline (docs/customers.md): the customer is asked to authenticate the payment
        -- (InvoiceActionRequired; an email with the portal's payment page), the dunning schedule
        -- waits the action window, once per invoice, and does not count this try. A success later
        -- reported for this attempt's key, by the provider's webhook or the portal, pays the
        -- invoice once (a success after a decline of the same key is applied, above).
        SELECT action_window INTO v_window FROM billing.installation;
        UPDATE billing.invoice
           SET try_count = try_count + 1, last_failure_reason = p_failure_reason, status = 'OPEN',
               next_attempt_at = p_now + v_window, action_required_until = p_now + v_window
         WHERE customer_id = v_invoice.customer_id AND id = v_invoice.id
        RETURNING * INTO v_invoice;
        PERFORM billing._emit_event('invoice', v_invoice.id, 'InvoiceActionRequired',
            billing._invoice_data(v_invoice) || jsonb_build_object(
                'actionExpiresAt', billing._utc_text(v_invoice.action_required_until),
                'paymentReference', coalesce(p_gateway_reference, v_attempt.gateway_reference),
                'provider', coalesce(v_attempt.provider, 'sim')), p_now);
        IF v_sub.status = 'ACTIVE' THEN
            UPDATE billing.subscription SET status = 'PAST_DUE', version = version + 1, updated_at = p_now
             WHERE customer_id = v_sub.customer_id AND id = v_sub.id
            RETURNING * INTO v_after;
            PERFORM billing._emit_subscription_change(v_sub, v_after, p_now);
        END IF;
        RETURN v_invoice;
    END IF;
    -- (authenticated too late, or asked again after the window: an ordinary soft decline)
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
'Records a gateway outcome: SUCCEEDED pays an OPEN or REVIEW invoice (RefundDue and a refund row when the invoice is already PAID, VOID or FAILED), DECLINED follows dunning (p_hard_decline: the method is retired and the invoice waits for a new one), UNKNOWN retries with the same key (in 15 min, sooner near the key''s expiry), NOT_FOUND (the gateway never saw the key) retries at once with a new key, CONFLICT (the gateway holds a successful charge of other parameters under the key) sends the invoice to REVIEW (KEY_CONFLICT, InvoicePaymentReview), the attempt''s outcome UNKNOWN.
Returns the invoice; idempotent; BL404 for an unknown key, BL422 for an unknown outcome.';

-- The disagreement, if any, between a successful webhook and the attempt it reports on.
CREATE OR REPLACE FUNCTION billing._webhook_mismatch(p_attempt billing.payment_attempt, p_customer_id bigint, p_payload jsonb)
RETURNS text
LANGUAGE sql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
    SELECT concat_ws('; ',
        CASE WHEN NOT coalesce(p_payload ? 'amount', false) THEN 'amount missing'
             WHEN (p_payload ->> 'amount') IS DISTINCT FROM p_attempt.amount::text
             THEN format('amount %s, attempt %s', p_payload ->> 'amount', p_attempt.amount) END,
        CASE WHEN NOT coalesce(p_payload ? 'currency', false) THEN 'currency missing'
             WHEN (p_payload ->> 'currency') IS DISTINCT FROM p_attempt.currency::text
             THEN format('currency %s, attempt %s', p_payload ->> 'currency', p_attempt.currency) END,
        CASE WHEN NOT coalesce(p_payload ? 'customerId', false) THEN 'customerId missing'
             WHEN (p_payload ->> 'customerId') IS DISTINCT FROM p_customer_id::text
             THEN format('customer %s, invoice %s', p_payload ->> 'customerId', p_customer_id) END)
$$;
COMMENT ON FUNCTION billing._webhook_mismatch(billing.payment_attempt, bigint, jsonb) IS
'Private: how a webhook''s amount, currency and customerId differ from the attempt and its invoice; each of them is required (issue 27: a success that does not say what it paid is never applied).
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
