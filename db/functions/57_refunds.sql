-- 57_refunds: money given back. A refund is a row with its own idempotency key
-- (<namespace>-ref-<id>), REQUESTED by a caller (refund_invoice) or by the engine's own rules
-- (RefundDue: a duplicate charge, a success on a closed invoice, a payment on a subscription
-- canceled before the invoice was declined). A worker claims it (claim_refunds, leased like a
-- charge), calls the provider outside any transaction and records the result
-- (record_refund_result): SUCCEEDED or FAILED are final; UNKNOWN retries the same key, never past
-- the key's lifetime at the provider (then a person settles it). The refunds of one charge never
-- exceed what it collected: every path checks it under the invoice's row lock.
--
-- Refunds and credit for unused time share one bound per subscription period (docs/money.md,
-- "Refunds and credit"): what the period's invoices billed, less their refunds (succeeded or in
-- flight), less the credit a plan change already gave back for the period. A plan change credits
-- unused time at the price the customer kept (_period_credit_base), never more than is left
-- (_grant_change_credit caps it); a refund of a period's charge never returns what went back as
-- credit (_refund_invoice).
--
-- This file: requesting and listing refunds, and the bound per period; the worker's side (claim,
-- record) is 58_refund_claims.sql.
-- Re-applied after every migration: CREATE OR REPLACE only.

CREATE OR REPLACE FUNCTION billing._refund_data(p_refund billing.refund)
RETURNS jsonb
LANGUAGE sql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
    SELECT jsonb_build_object(
        'refundId', p_refund.id,
        'invoiceId', p_refund.invoice_id,
        'customerId', p_refund.customer_id,
        'amount', p_refund.amount,
        'currency', p_refund.currency,
        'reason', p_refund.reason,
        'status', p_refund.status,
        'idempotencyKey', p_refund.idempotency_key,
        'provider', p_refund.provider,
        'providerReference', p_refund.provider_reference,
        'failureReason', p_refund.failure_reason,
        'requestedAt', billing._utc_text(p_refund.requested_at),
        'settledAt', billing._utc_text(p_refund.settled_at))
$$;
COMMENT ON FUNCTION billing._refund_data(billing.refund) IS
'Private: the "data" of refund events (subject invoice/<id>).
Returns a jsonb object.';

-- What is left to refund of a charge: its amount less the refunds not FAILED. Named by
-- (customer_id, id): one shard on Citus (PL/pgSQL: Citus plans a SQL function's statement with
-- parameters only when it reads one table by its distribution column).
DROP FUNCTION IF EXISTS billing._refundable(bigint);
CREATE OR REPLACE FUNCTION billing._refundable(p_customer_id bigint, p_attempt_id bigint)
RETURNS bigint
LANGUAGE plpgsql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    RETURN (SELECT a.amount - coalesce((SELECT sum(r.amount) FROM billing.refund r
                                         WHERE r.customer_id = p_customer_id AND r.attempt_id = a.id
                                           AND r.status <> 'FAILED'), 0)
              FROM billing.payment_attempt a
             WHERE a.customer_id = p_customer_id AND a.id = p_attempt_id AND a.outcome = 'SUCCEEDED');
END
$$;
COMMENT ON FUNCTION billing._refundable(bigint, bigint) IS
'Private: what may still be refunded of a successful charge of customer p_customer_id (its amount less its refunds requested or succeeded).
Returns the amount; NULL when the attempt did not succeed.';

-- Call holding the invoice's row lock (after its subscription's): two requests for the same
-- charge are decided one after the other.
CREATE OR REPLACE FUNCTION billing._refund_invoice(
    p_invoice billing.invoice, p_attempt_id bigint, p_amount bigint, p_reason text, p_actor text,
    p_idempotency_key text, p_now timestamptz)
RETURNS billing.refund
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_attempt    billing.payment_attempt;
    v_refundable bigint;
    v_refund     billing.refund;
    v_id         bigint;
    v_room       bigint;
    v_money      record;
    v_namespace  text;
BEGIN
    SELECT * INTO v_attempt FROM billing.payment_attempt
     WHERE customer_id = p_invoice.customer_id AND id = p_attempt_id AND invoice_id = p_invoice.id;
    v_refundable := billing._refundable(p_invoice.customer_id, p_attempt_id);
    IF v_refundable IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('invoice %s has no successful charge to refund', p_invoice.id),
            HINT = 'Only money collected can be refunded (credit is not cash).';
    END IF;
    IF p_invoice.status = 'PAID' AND p_invoice.paid_attempt_id = p_attempt_id THEN
        -- The charge that paid a period: what a plan change already gave back for the period as
        -- credit is not refunded again.
        v_money := billing._period_money(p_invoice.customer_id, p_invoice.subscription_id,
                                         billing._invoice_period_start(p_invoice), p_invoice.period_end);
        -- What the period kept, whatever becomes of the invoices still owed: what of it was paid, less
        -- its refunds and the credit granted, less the pending credit beyond what is owed (paid, they
        -- release it; unpaid, it is reversed). An invoice still owed is no money to give back.
        v_room := greatest(v_money.paid - v_money.refunded - (v_money.credited - v_money.pending)
                           - greatest(v_money.pending - (v_money.billed - v_money.paid), 0), 0)
                  -- A charge sent before a cancellation took the time not served off the invoice
                  -- collected more than it bills now (issue 26 #3): that much more was kept.
                  + greatest(v_attempt.amount - (p_invoice.amount - least(p_invoice.unserved, p_invoice.amount)), 0);
        IF v_room < v_refundable THEN
            IF p_reason = 'REQUESTED' AND p_amount IS NOT NULL AND p_amount BETWEEN 1 AND v_refundable
               AND p_amount > v_room THEN
                RAISE EXCEPTION USING ERRCODE = 'BL422',
                    MESSAGE = format('a refund of invoice %s is at most %s: of its period''s %s paid, %s was refunded or is being refunded and %s went back as credit for unused time; got %s',
                                     p_invoice.id, v_room, v_money.paid, v_money.refunded, v_money.credited, p_amount),
                    HINT = 'Money already returned as credit is not refunded again.';
            END IF;
            v_refundable := v_room;
            IF p_reason <> 'REQUESTED' THEN
                -- The engine's own refund of the charge: all of it but what went back as credit.
                IF v_room <= 0 THEN
                    RETURN NULL;
                END IF;
                p_amount := least(p_amount, v_room);
            END IF;
        END IF;
    END IF;
    IF p_amount IS NULL OR p_amount < 1 OR p_amount > v_refundable THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('a refund of invoice %s is between 1 and %s (collected %s, already refunded or being refunded %s), got %s',
                             p_invoice.id, v_refundable, v_attempt.amount, v_attempt.amount - v_refundable,
                             coalesce(p_amount::text, 'NULL')),
            HINT = 'The refunds of a charge never exceed what it collected.';
    END IF;
    v_id := nextval(pg_get_serial_sequence('billing.refund', 'id'));
    SELECT key_namespace INTO v_namespace FROM billing.installation;
    INSERT INTO billing.refund (customer_id, id, invoice_id, attempt_id, amount, currency, reason, status,
                                idempotency_key, request_key, provider, charge_reference, requested_by, requested_at,
                                next_attempt_at)
    VALUES (p_invoice.customer_id, v_id, p_invoice.id, v_attempt.id, p_amount, v_attempt.currency, p_reason, 'REQUESTED',
            v_namespace || '-ref-' || v_id, p_idempotency_key, coalesce(v_attempt.provider, 'sim'),
            v_attempt.gateway_reference, p_actor, p_now, p_now)
    RETURNING * INTO v_refund;
    PERFORM billing._emit_event('invoice', p_invoice.id, 'RefundRequested', billing._refund_data(v_refund), p_now);
    RETURN v_refund;
END
$$;
COMMENT ON FUNCTION billing._refund_invoice(billing.invoice, bigint, bigint, text, text, text, timestamptz) IS
'Private: a REQUESTED refund of p_amount against a successful charge of the (locked) invoice, key <namespace>-ref-<id>, event RefundRequested. The charge that paid the invoice is refunded at most what its period kept (billed, less refunds and credit given back for unused time): the engine''s own refunds (p_reason other than REQUESTED) are cut to it, or not made at all when nothing is left.
Returns the refund (NULL for an engine refund with nothing left); BL422 when the charge did not succeed or the amount exceeds what is left to refund.';

CREATE OR REPLACE FUNCTION billing.refund_invoice(
    p_invoice_id bigint, p_amount bigint, p_idempotency_key text DEFAULT NULL, p_now timestamptz DEFAULT now())
RETURNS billing.refund
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_invoice billing.invoice;
    v_refund  billing.refund;
BEGIN
    PERFORM billing._audit('refund_invoice', jsonb_build_object('invoice_id', p_invoice_id, 'amount', p_amount, 'idempotency_key', p_idempotency_key, 'now', p_now));
    PERFORM billing._check_now(p_now);
    IF p_idempotency_key IS NOT NULL THEN
        PERFORM billing._check_text('a refund request key', p_idempotency_key, 255);
    END IF;
    -- Lock order: subscription, invoice (as payments do); BL404 when there is no such invoice.
    v_invoice := billing._lock_invoice(p_invoice_id);
    IF p_idempotency_key IS NOT NULL THEN
        SELECT * INTO v_refund FROM billing.refund WHERE request_key = p_idempotency_key;
        IF FOUND THEN
            IF v_refund.invoice_id <> p_invoice_id OR v_refund.amount IS DISTINCT FROM p_amount THEN
                RAISE EXCEPTION USING ERRCODE = 'BL409',
                    MESSAGE = format('the request key %L was used for another refund (invoice %s, amount %s)',
                                     p_idempotency_key, v_refund.invoice_id, v_refund.amount),
                    HINT = 'Use a new Idempotency-Key for a new refund.';
            END IF;
            RETURN v_refund;  -- the same request again: the same refund
        END IF;
    END IF;
    IF v_invoice.status <> 'PAID' OR v_invoice.paid_attempt_id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('invoice %s is %s%s: only a PAID invoice charged through the gateway can be refunded',
                             p_invoice_id, v_invoice.status,
                             CASE WHEN v_invoice.status = 'PAID' THEN ' by credit alone' ELSE '' END),
            HINT = 'The engine refunds by itself what was collected on a VOID or FAILED invoice.';
    END IF;
    RETURN billing._refund_invoice(v_invoice, v_invoice.paid_attempt_id, p_amount, 'REQUESTED',
        billing._actor(),
        p_idempotency_key, p_now);
END
$$;
COMMENT ON FUNCTION billing.refund_invoice(bigint, bigint, text, timestamptz) IS
'Asks for a refund of p_amount (partial or whole) of a PAID invoice''s charge; the worker executes it through the provider. p_idempotency_key makes the request idempotent (the same key answers the same refund). Event RefundRequested.
Returns the refund; BL404 for an unknown invoice, BL409 for a request key reused with other arguments, BL422 for an invoice not PAID by a charge or an amount above what is left to refund.';

-- PL/pgSQL: the invoice's customer first, then its refunds in its shard (on Citus a SQL function
-- reading every shard with a parameter cannot be planned).
CREATE OR REPLACE FUNCTION billing.list_refunds(p_invoice_id bigint)
RETURNS SETOF billing.refund
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_customer_id bigint := billing._invoice_customer(p_invoice_id);
BEGIN
    RETURN QUERY
    SELECT * FROM billing.refund WHERE customer_id = v_customer_id AND invoice_id = p_invoice_id ORDER BY id;
END
$$;
COMMENT ON FUNCTION billing.list_refunds(bigint) IS
'The refunds of an invoice, oldest first.
Returns the rows (none for an unknown invoice).';

-- ---------------------------------------------------------------------------------------------
-- Refunds and credit for unused time: one bound per subscription period.
-- ---------------------------------------------------------------------------------------------

-- The start of the subscription period an invoice bills: its own start, except for a PRORATION
-- invoice (the rest of a period from a change), whose period began with the latest other invoice
-- of the subscription ending at the same instant.
CREATE OR REPLACE FUNCTION billing._invoice_period_start(p_invoice billing.invoice)
RETURNS timestamptz
LANGUAGE plpgsql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    RETURN CASE WHEN p_invoice.kind <> 'PRORATION' THEN p_invoice.period_start
                ELSE coalesce((SELECT max(i.period_start) FROM billing.invoice i
                                WHERE i.customer_id = p_invoice.customer_id
                                  AND i.subscription_id = p_invoice.subscription_id AND i.kind <> 'PRORATION'
                                  AND i.period_end = p_invoice.period_end AND i.period_start <= p_invoice.period_start),
                              p_invoice.period_start) END;
END
$$;
COMMENT ON FUNCTION billing._invoice_period_start(billing.invoice) IS
'Private: the start of the subscription period p_invoice bills (for a PRORATION invoice, the start of the period it prorates).
Returns the instant.';

-- What one period of a subscription billed, and gave back. billed (paid: of it, what is PAID): the invoices of the period
-- (the one that opened it and the PRORATION ones within it) PAID or still owed (OPEN, REVIEW),
-- credit applied included (credit is value the customer had). Each ends with the period; a change to
-- a shorter interval opens a new period inside the old one's span (its PLAN_CHANGE invoice and the
-- renewals after it end earlier, or, when it ends with the old one, it and its PRORATION invoices
-- start at or after it): theirs, not the old period's. refunded: the refunds, succeeded or
-- in flight (REQUESTED, in review too), of the charges that paid them (a duplicate charge is not
-- the period's money). credited: the credit plan changes gave back for the period's unused time,
-- granted or pending (not reversed).
DROP FUNCTION IF EXISTS billing._period_money(bigint, bigint, timestamptz, timestamptz);
CREATE OR REPLACE FUNCTION billing._period_money(
    p_customer_id bigint, p_subscription_id bigint, p_period_start timestamptz, p_period_end timestamptz,
    OUT billed bigint, OUT refunded bigint, OUT credited bigint, OUT paid bigint, OUT pending bigint)
RETURNS record
LANGUAGE plpgsql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    WITH inv AS (
        -- Tax included: what the customer paid for the period is its total (#2 of issue 26).
        -- Less what a cancellation took off as not served (its UNSERVED credit note).
        SELECT i.customer_id, i.id, i.subtotal + i.tax_amount - i.unserved AS subtotal, i.status, i.paid_attempt_id FROM billing.invoice i
         WHERE i.customer_id = p_customer_id AND i.subscription_id = p_subscription_id
           AND i.status IN ('PAID', 'OPEN', 'REVIEW')
           AND i.period_end = p_period_end AND i.period_start >= p_period_start
           AND i.period_start < coalesce((SELECT min(n.period_start) FROM billing.invoice n
                                           WHERE n.customer_id = p_customer_id AND n.subscription_id = p_subscription_id
                                             AND n.kind <> 'PRORATION' AND n.period_end = p_period_end
                                             AND n.period_start > p_period_start), p_period_end)
    )
    SELECT (SELECT coalesce(sum(subtotal), 0)::bigint FROM inv),
           (SELECT coalesce(sum(subtotal), 0)::bigint FROM inv WHERE inv.status = 'PAID'),
           (SELECT coalesce(sum(r.amount), 0)::bigint FROM inv JOIN billing.refund r
                ON r.customer_id = inv.customer_id AND r.invoice_id = inv.id AND r.attempt_id = inv.paid_attempt_id
             WHERE inv.status = 'PAID' AND r.status <> 'FAILED'),
           (SELECT coalesce(sum(c.amount), 0)::bigint FROM billing.credit_pending c
             WHERE c.customer_id = p_customer_id AND c.subscription_id = p_subscription_id
               AND c.period_start = p_period_start AND c.period_end = p_period_end AND c.status <> 'REVERSED')
         + (SELECT coalesce(sum(e.amount), 0)::bigint FROM billing.credit_entry e
             WHERE e.customer_id = p_customer_id AND e.subscription_id = p_subscription_id AND e.reason = 'PRORATION'
               AND e.period_start = p_period_start AND e.period_end = p_period_end),
           (SELECT coalesce(sum(c.amount), 0)::bigint FROM billing.credit_pending c
             WHERE c.customer_id = p_customer_id AND c.subscription_id = p_subscription_id
               AND c.period_start = p_period_start AND c.period_end = p_period_end AND c.status = 'PENDING')
      INTO billed, paid, refunded, credited, pending;
END
$$;
COMMENT ON FUNCTION billing._period_money(bigint, bigint, timestamptz, timestamptz) IS
'Private: for the period [p_period_start, p_period_end) of a subscription, what its invoices billed (PAID, OPEN or REVIEW), what of their paying charges was refunded or is being refunded, the credit plan changes gave back for its unused time (granted or pending), what of the billing is PAID and what of the credit is still pending (on invoices owed).
Returns (billed, refunded, credited, paid, pending).';

-- The full-period price that credit for the unused rest of the subscription's current period is
-- computed from: p_price (what the period was invoiced at) in the proportion the customer kept of
-- what the period billed (a period half refunded credits half as much; wholly refunded, nothing).
CREATE OR REPLACE FUNCTION billing._period_credit_base(p_sub billing.subscription, p_price bigint)
RETURNS bigint
LANGUAGE plpgsql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_money record;
BEGIN
    v_money := billing._period_money(p_sub.customer_id, p_sub.id, p_sub.current_period_start, p_sub.current_period_end);
    IF v_money.refunded <= 0 OR v_money.billed <= 0 THEN
        RETURN p_price;
    END IF;
    RETURN floor(p_price::numeric * greatest(v_money.billed - v_money.refunded, 0) / v_money.billed)::bigint;
END
$$;
COMMENT ON FUNCTION billing._period_credit_base(billing.subscription, bigint) IS
'Private: the price credit for unused time of the current period is computed from: p_price times the share of the period''s billing not refunded (succeeded or in flight).
Returns the amount (p_price when nothing was refunded).';

-- What credit may still be given back for the subscription's current period: what it billed,
-- less its refunds and the credit already given back for it. Every change credit is capped by it
-- (_grant_change_credit).
CREATE OR REPLACE FUNCTION billing._period_credit_room(p_sub billing.subscription)
RETURNS bigint
LANGUAGE plpgsql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_money record;
BEGIN
    v_money := billing._period_money(p_sub.customer_id, p_sub.id, p_sub.current_period_start, p_sub.current_period_end);
    RETURN greatest(v_money.billed - v_money.refunded - v_money.credited, 0);
END
$$;
COMMENT ON FUNCTION billing._period_credit_room(billing.subscription) IS
'Private: the most credit that may still be given back for the current period of p_sub (billed, less refunds succeeded or in flight, less change credit already given for it).
Returns the amount, never below zero.';
