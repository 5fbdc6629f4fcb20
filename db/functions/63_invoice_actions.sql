-- 63_invoice_actions: an operator's actions on one invoice (the console's Invoices page, the HTTP
-- API's /invoices/{id}/retry and /invoices/{id}/void): charge it again now, or void it.
-- Re-applied after every migration: CREATE OR REPLACE only. docs/sql-api.md documents both.
--
-- Neither may lose track of money: a charge whose fate is not known yet (claimed and not answered,
-- or answered UNKNOWN) is never voided under it, and a retry only moves the next attempt of an
-- OPEN invoice earlier -- the charge worker claims it with the key of its current try, so a
-- retry never charges twice (docs/gateway.md).

-- The current try of an invoice whose charge has gone out and whose result is not known:
-- 'IN_FLIGHT' (claimed, no answer for this claim yet), 'UNKNOWN' (answered UNKNOWN), or NULL.
-- (PL/pgSQL: Citus plans a SQL function's statement with parameters only in its simplest forms.)
CREATE OR REPLACE FUNCTION billing._charge_in_doubt(p_invoice billing.invoice)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    RETURN (SELECT CASE WHEN a.outcome IS NULL OR a.result_claim IS DISTINCT FROM a.claim_count THEN 'IN_FLIGHT'
                        WHEN a.outcome = 'UNKNOWN' THEN 'UNKNOWN' END
              FROM billing.payment_attempt a
             WHERE a.customer_id = p_invoice.customer_id AND a.invoice_id = p_invoice.id
               AND a.attempt_number = p_invoice.try_count AND (a.outcome IS NULL OR a.outcome = 'UNKNOWN'));
END
$$;
COMMENT ON FUNCTION billing._charge_in_doubt(billing.invoice) IS
'Private: whether the current try of the invoice went to the gateway without a known result: IN_FLIGHT (claimed, this claim not answered), UNKNOWN (answered UNKNOWN), else NULL.
Returns that text or NULL.';

-- Locks the invoice's subscription, then the invoice (the lock order of payments and refunds).
CREATE OR REPLACE FUNCTION billing._lock_invoice(p_invoice_id bigint)
RETURNS billing.invoice
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_invoice billing.invoice;
    v_customer_id bigint := billing._invoice_customer(p_invoice_id);
BEGIN
    SELECT * INTO v_invoice FROM billing.invoice WHERE customer_id = v_customer_id AND id = p_invoice_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'BL404',
            MESSAGE = format('invoice %s does not exist', coalesce(p_invoice_id::text, 'NULL'));
    END IF;
    PERFORM 1 FROM billing.subscription
     WHERE customer_id = v_customer_id AND id = v_invoice.subscription_id FOR UPDATE;
    SELECT * INTO v_invoice FROM billing.invoice WHERE customer_id = v_customer_id AND id = p_invoice_id FOR UPDATE;
    RETURN v_invoice;
END
$$;
COMMENT ON FUNCTION billing._lock_invoice(bigint) IS
'Private: locks the invoice''s subscription, then the invoice, FOR UPDATE.
Returns the invoice; BL404 when absent.';

CREATE OR REPLACE FUNCTION billing.retry_invoice(p_invoice_id bigint, p_now timestamptz DEFAULT now())
RETURNS billing.invoice
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_invoice billing.invoice;
BEGIN
    PERFORM billing._audit('retry_invoice', jsonb_build_object('invoice_id', p_invoice_id, 'now', p_now));
    PERFORM billing._check_now(p_now);
    v_invoice := billing._lock_invoice(p_invoice_id);
    IF v_invoice.status <> 'OPEN' THEN
        RAISE EXCEPTION USING ERRCODE = 'BL409',
            MESSAGE = format('invoice %s is %s: only an OPEN invoice is charged again', v_invoice.id, v_invoice.status),
            HINT = CASE v_invoice.status
                       WHEN 'REVIEW' THEN 'Its last charge''s fate is unknown: settle it with record_payment_result.'
                       WHEN 'PAID' THEN 'It is paid; refund_invoice gives money back.'
                       ELSE 'It is closed: nothing is owed on it any more.' END;
    END IF;
    IF v_invoice.waiting_for IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'BL409',
            MESSAGE = format('invoice %s waits for a usable payment method of customer %s', v_invoice.id,
                             v_invoice.customer_id),
            HINT = 'set_payment_method charges it at once.';
    END IF;
    IF v_invoice.next_attempt_at <= p_now THEN
        RETURN v_invoice;  -- due already: the next claim takes it
    END IF;
    IF billing._charge_in_doubt(v_invoice) = 'IN_FLIGHT' THEN
        RAISE EXCEPTION USING ERRCODE = 'BL409',
            MESSAGE = format('a charge of invoice %s is in flight until %s', v_invoice.id,
                             billing._utc_text(v_invoice.next_attempt_at)),
            HINT = 'Wait for its result (a worker that died gives it back at the end of its lease).';
    END IF;
    UPDATE billing.invoice SET next_attempt_at = p_now
     WHERE customer_id = v_invoice.customer_id AND id = v_invoice.id
    RETURNING * INTO v_invoice;
    RETURN v_invoice;
END
$$;
COMMENT ON FUNCTION billing.retry_invoice(bigint, timestamptz) IS
'Charges an OPEN invoice (in dunning, or whose last answer was UNKNOWN) at the next claim: its next attempt moves to p_now, with the key of its current try (no second charge). Already due: unchanged. Nothing else changes (the dunning count goes on from where it is).
Returns the invoice; BL404 for an unknown invoice, BL409 for one PAID, VOID, FAILED or in REVIEW, one waiting for a payment method, or one whose charge is in flight.';

CREATE OR REPLACE FUNCTION billing.void_invoice(p_invoice_id bigint, p_reason text, p_now timestamptz DEFAULT now())
RETURNS billing.invoice
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_invoice billing.invoice;
    v_sub     billing.subscription;
    v_doubt   text;
BEGIN
    PERFORM billing._audit('void_invoice', jsonb_build_object('invoice_id', p_invoice_id, 'reason', p_reason, 'now', p_now));
    PERFORM billing._check_now(p_now);
    PERFORM billing._check_text('a reason', p_reason, 500);
    v_invoice := billing._lock_invoice(p_invoice_id);
    SELECT * INTO v_sub FROM billing.subscription
     WHERE customer_id = v_invoice.customer_id AND id = v_invoice.subscription_id;
    IF v_invoice.status = 'VOID' THEN
        RETURN v_invoice;  -- voided already (by this call, a cancellation or the engine): nothing more
    END IF;
    IF v_invoice.status <> 'OPEN' THEN
        RAISE EXCEPTION USING ERRCODE = 'BL409',
            MESSAGE = format('invoice %s is %s: only an unpaid OPEN invoice is voided', v_invoice.id, v_invoice.status),
            HINT = CASE v_invoice.status
                       WHEN 'PAID' THEN 'It is paid: refund_invoice gives the money back.'
                       WHEN 'REVIEW' THEN 'Its last charge''s fate is unknown: settle it with record_payment_result first.'
                       ELSE 'It was written off when its dunning ended: nothing is owed on it any more.' END;
    END IF;
    v_doubt := billing._charge_in_doubt(v_invoice);
    IF v_doubt IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'BL409',
            MESSAGE = format('invoice %s has a charge whose result is not known (%s): it is not voided under it',
                             v_invoice.id, lower(replace(v_doubt, '_', ' '))),
            HINT = CASE v_doubt WHEN 'UNKNOWN' THEN 'retry_invoice asks the gateway again now; void it once the answer is in.'
                                ELSE 'Wait for its result (a worker that died gives it back at the end of its lease).' END;
    END IF;

    -- VOID: never claimed again; the credit it consumed goes back, the credit that waited on it
    -- being paid is reversed (as for any VOID invoice).
    UPDATE billing.invoice
       SET status = 'VOID', next_attempt_at = NULL, waiting_for = NULL, closed_at = p_now
     WHERE customer_id = v_invoice.customer_id AND id = v_invoice.id
    RETURNING * INTO v_invoice;
    -- Its VOID credit note when it was finalized (on Citus the trigger cannot issue it from a shard).
    PERFORM billing._void_credit_note(v_invoice, p_now);
    PERFORM billing._emit_event('invoice', v_invoice.id, 'InvoiceVoided',
        billing._invoice_data(v_invoice) || jsonb_build_object('reason', p_reason), p_now);
    PERFORM billing._restore_credit(v_invoice, p_now);
    PERFORM billing._settle_pending_credit(v_invoice, p_now);

    -- The subscription, as when the dunning of this invoice fails, except that it is not canceled:
    -- an unpaid upgrade (or seats added) is reverted to the terms paid for, and a PAST_DUE
    -- subscription with nothing left OPEN is ACTIVE again.
    PERFORM billing._revert_unpaid_change(v_invoice, v_sub, p_now);
    RETURN v_invoice;
END
$$;
COMMENT ON FUNCTION billing.void_invoice(bigint, text, timestamptz) IS
'Voids an unpaid OPEN invoice (in dunning or not, waiting for a payment method or not): VOID, never charged again, InvoiceVoided with p_reason; the credit it consumed goes back, the pending credit that waited on it is reversed. Its subscription is not canceled: an unpaid upgrade or seat increase (PRORATION) is reverted (SubscriptionPlanReverted), and a PAST_DUE subscription with nothing left OPEN is ACTIVE again (SubscriptionRecovered). VOID already: unchanged.
Returns the invoice; BL404 for an unknown invoice, BL409 for one PAID, FAILED or in REVIEW, or whose charge''s result is not known (in flight or UNKNOWN), BL422 for a blank or long reason.';
