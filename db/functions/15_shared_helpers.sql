-- 15_shared_helpers: private helpers shared by 30_subscriptions/38_subscription_changes, 40_renewal and 50_charging:
-- the subscription lock, the "data" of invoice and subscription events, invoice creation with the
-- customer's credit, the credit ledger and the voiding of OPEN invoices.
-- Re-applied after every migration: CREATE OR REPLACE only.

-- Finding a customer's row by its id alone. Every customer-owned table is keyed (customer_id, id) and,
-- on Citus, distributed by customer_id (docs/scaling.md): a statement that names a row by id alone is a
-- query over every shard, and one that locks it (FOR UPDATE) is refused there. So a function that is
-- given only an id first reads the row's customer (an unlocked read by the id's own index; on Citus a
-- read of every shard's index), then names the row by (customer_id, id) in every statement that follows:
-- each of those goes to the one shard group of the customer.
CREATE OR REPLACE FUNCTION billing._subscription_customer(p_subscription_id bigint)
RETURNS bigint
LANGUAGE plpgsql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_customer_id bigint;
BEGIN
    SELECT s.customer_id INTO v_customer_id FROM billing.subscription s WHERE s.id = p_subscription_id;
    RETURN v_customer_id;
END
$$;
COMMENT ON FUNCTION billing._subscription_customer(bigint) IS
'Private: the customer of a subscription named by id alone (NULL when there is none). Callers then name
the row by (customer_id, id), which goes to one shard on Citus.';

CREATE OR REPLACE FUNCTION billing._invoice_customer(p_invoice_id bigint)
RETURNS bigint
LANGUAGE plpgsql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_customer_id bigint;
BEGIN
    SELECT i.customer_id INTO v_customer_id FROM billing.invoice i WHERE i.id = p_invoice_id;
    RETURN v_customer_id;
END
$$;
COMMENT ON FUNCTION billing._invoice_customer(bigint) IS
'Private: the customer of an invoice named by id alone (NULL when there is none). Callers then name the
row by (customer_id, id), which goes to one shard on Citus.';

CREATE OR REPLACE FUNCTION billing._lock_subscription(p_subscription_id bigint)
RETURNS billing.subscription
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_sub billing.subscription;
    v_customer_id bigint := billing._subscription_customer(p_subscription_id);
BEGIN
    SELECT * INTO v_sub FROM billing.subscription
     WHERE customer_id = v_customer_id AND id = p_subscription_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'BL404',
            MESSAGE = format('subscription %s does not exist', coalesce(p_subscription_id::text, 'NULL'));
    END IF;
    RETURN v_sub;
END
$$;
COMMENT ON FUNCTION billing._lock_subscription(bigint) IS
'Private: locks the subscription row FOR UPDATE.
Returns it; BL404 when absent.';

-- The renewal statement (40_renewal.sql) writes the same object as a JSON text for its invoice events:
-- a key changed here must be changed there too (401_renewal_conformance compares them byte for byte).
CREATE OR REPLACE FUNCTION billing._invoice_data(p_invoice billing.invoice)
RETURNS jsonb
LANGUAGE sql STABLE  -- inlinable (see _utc_text)
-- The keys in jsonb's own order (shorter first, then bytewise): jsonb_build_object sorts its keys,
-- and a sorted input is recognised in one pass (bench/renewal: the event's share of the renewal).
-- The object is the same whatever the order written here.
AS $$
    SELECT pg_catalog.jsonb_build_object(
        'kind', p_invoice.kind,
        'amount', p_invoice.amount,
        'paidAt', billing._utc_text(p_invoice.paid_at),
        'status', p_invoice.status,
        'currency', p_invoice.currency,
        'quantity', p_invoice.quantity,
        'subtotal', p_invoice.subtotal,
        'invoiceId', p_invoice.id,
        'periodEnd', billing._utc_text(p_invoice.period_end),
        'couponCode', p_invoice.coupon_code,
        'customerId', p_invoice.customer_id,
        'periodStart', billing._utc_text(p_invoice.period_start),
        'attemptCount', p_invoice.attempt_count,
        'creditApplied', p_invoice.credit_applied,
        'discountAmount', p_invoice.discount_amount,
        'subscriptionId', p_invoice.subscription_id,
        'gatewayReference', p_invoice.gateway_reference)
$$;
COMMENT ON FUNCTION billing._invoice_data(billing.invoice) IS
'Private: the "data" of invoice events (amounts as integers in the smallest unit, instants in UTC).
Returns a jsonb object.';

CREATE OR REPLACE FUNCTION billing._subscription_data(p_sub billing.subscription)
RETURNS jsonb
LANGUAGE plpgsql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
-- plpgsql, not sql: a SQL function with SET is never inlined and is planned again on every call
-- from a PL/pgSQL statement (1.2 ms against 0.1 ms measured); PL/pgSQL keeps its plans.
BEGIN
    RETURN jsonb_build_object(
        'subscriptionId', p_sub.id,
        'customerId', p_sub.customer_id,
        'planCode', (SELECT code FROM billing.plan WHERE id = p_sub.plan_id),
        'status', p_sub.status,
        'currentPeriodStart', billing._utc_text(p_sub.current_period_start),
        'currentPeriodEnd', billing._utc_text(p_sub.current_period_end),
        'canceledAt', billing._utc_text(p_sub.canceled_at),
        'reason', p_sub.cancel_reason,
        'cancelAtPeriodEnd', p_sub.cancel_at_period_end,
        'version', p_sub.version,
        'quantity', p_sub.quantity,
        'trialEnd', billing._utc_text(p_sub.trial_end),
        'pausedAt', billing._utc_text(p_sub.paused_at),
        'resumeAt', billing._utc_text(p_sub.resume_at),
        'scheduledPlanCode', (SELECT code FROM billing.plan WHERE id = p_sub.scheduled_plan_id),
        'couponCode', p_sub.coupon_code);
END
$$;
COMMENT ON FUNCTION billing._subscription_data(billing.subscription) IS
'Private: the "data" of subscription events.
Returns a jsonb object.';

-- Every change of a subscription's plan, status, cancel-at-period-end flag, seats, scheduled plan,
-- resume date or coupon (cancellation excepted: SubscriptionCanceled) is announced by
-- SubscriptionUpdated with each changed field before and after, then, for the dunning transitions,
-- by SubscriptionPastDue / SubscriptionRecovered, and for a pause or resume by SubscriptionPaused /
-- SubscriptionResumed.
CREATE OR REPLACE FUNCTION billing._emit_subscription_change(
    p_before billing.subscription, p_after billing.subscription, p_now timestamptz)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_before  jsonb := billing._subscription_data(p_before);
    v_after   jsonb := billing._subscription_data(p_after);
    v_changes jsonb;
BEGIN
    SELECT jsonb_object_agg(f, jsonb_build_object('before', v_before -> f, 'after', v_after -> f))
      INTO v_changes
      FROM unnest(ARRAY['planCode', 'status', 'cancelAtPeriodEnd', 'quantity', 'scheduledPlanCode', 'resumeAt',
                        'couponCode']) AS f
     WHERE v_before -> f IS DISTINCT FROM v_after -> f;
    IF v_changes IS NULL THEN
        RETURN;
    END IF;
    PERFORM billing._emit_event('subscription', p_after.id, 'SubscriptionUpdated',
                                v_after || jsonb_build_object('changes', v_changes), p_now);
    IF p_before.status = 'ACTIVE' AND p_after.status = 'PAST_DUE' THEN
        PERFORM billing._emit_event('subscription', p_after.id, 'SubscriptionPastDue', v_after, p_now);
    ELSIF p_before.status = 'PAST_DUE' AND p_after.status = 'ACTIVE' THEN
        PERFORM billing._emit_event('subscription', p_after.id, 'SubscriptionRecovered', v_after, p_now);
    ELSIF p_before.status <> 'PAUSED' AND p_after.status = 'PAUSED' THEN
        PERFORM billing._emit_event('subscription', p_after.id, 'SubscriptionPaused', v_after, p_now);
    ELSIF p_before.status = 'PAUSED' AND p_after.status <> 'PAUSED' THEN
        PERFORM billing._emit_event('subscription', p_after.id, 'SubscriptionResumed', v_after, p_now);
    END IF;
END
$$;
COMMENT ON FUNCTION billing._emit_subscription_change(billing.subscription, billing.subscription, timestamptz) IS
'Private: SubscriptionUpdated (changed fields before and after), plus SubscriptionPastDue / SubscriptionRecovered / SubscriptionPaused / SubscriptionResumed on those transitions; nothing when nothing announced changed.
Returns nothing; call it holding the subscription''s row lock.';

CREATE OR REPLACE FUNCTION billing._grant_credit(
    p_customer_id bigint, p_currency char(3), p_amount bigint, p_reason text,
    p_subscription_id bigint, p_invoice_id bigint, p_now timestamptz)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    IF p_amount <= 0 THEN
        RETURN;
    END IF;
    INSERT INTO billing.credit_entry (customer_id, currency, amount, reason, subscription_id, invoice_id, created_at)
    VALUES (p_customer_id, p_currency, p_amount, p_reason, p_subscription_id, p_invoice_id, p_now);
    INSERT INTO billing.credit_balance AS b (customer_id, currency, balance, updated_at)
    VALUES (p_customer_id, p_currency, p_amount, p_now)
    ON CONFLICT ON CONSTRAINT credit_balance_pkey DO UPDATE
        SET balance = b.balance + excluded.balance, updated_at = excluded.updated_at;
END
$$;
COMMENT ON FUNCTION billing._grant_credit(bigint, char, bigint, text, bigint, bigint, timestamptz) IS
'Private: adds p_amount of credit to the ledger and the balance (nothing when p_amount <= 0).
Returns nothing.';

-- Inserts one invoice with its terms, consuming the customer's credit first; an invoice the
-- credit covers entirely is PAID at once, announced, and never charged.
DROP FUNCTION IF EXISTS billing._new_invoice(billing.subscription, text, timestamptz, timestamptz, bigint, char, timestamptz);
DROP FUNCTION IF EXISTS billing._new_invoice(billing.subscription, text, timestamptz, timestamptz, bigint, billing.plan,
                                             bigint, timestamptz, bigint, bigint);
DROP FUNCTION IF EXISTS billing._new_invoice(billing.subscription, text, timestamptz, timestamptz, bigint, billing.plan,
                                             bigint, timestamptz, bigint, bigint, bigint, text, integer);
CREATE OR REPLACE FUNCTION billing._new_invoice(
    p_sub billing.subscription, p_kind text, p_period_start timestamptz, p_period_end timestamptz,
    p_subtotal bigint, p_plan billing.plan, p_plan_price bigint, p_now timestamptz,
    p_from_plan_id bigint DEFAULT NULL, p_from_price bigint DEFAULT NULL,
    p_discount bigint DEFAULT 0, p_coupon_code text DEFAULT NULL, p_from_quantity integer DEFAULT NULL,
    p_tax jsonb DEFAULT NULL)
RETURNS billing.invoice
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_balance bigint;
    v_applied bigint := 0;
    v_invoice billing.invoice;
    v_tax     record;
    v_total   bigint;
BEGIN
    -- Taxes by the customer's billing address (14_tax), or p_tax's (a change's invoice: its lines'
    -- taxes, 18_ledger_change); credit pays the total, tax included.
    IF p_tax IS NULL THEN
        v_tax := billing._invoice_tax_row(p_sub.customer_id, p_subtotal);
    ELSE
        SELECT (p_tax->>'tax_amount')::bigint AS tax_amount, (p_tax->>'tax_included')::bigint AS tax_included,
               p_tax->'tax_detail' AS tax_detail INTO v_tax;
        v_tax.tax_detail := CASE WHEN jsonb_typeof(v_tax.tax_detail) = 'object' THEN v_tax.tax_detail END;
    END IF;
    v_total := p_subtotal + v_tax.tax_amount;
    SELECT balance INTO v_balance FROM billing.credit_balance
     WHERE customer_id = p_sub.customer_id AND currency = p_plan.currency AND balance > 0
       FOR UPDATE;
    IF FOUND THEN
        v_applied := least(v_balance, v_total);
        UPDATE billing.credit_balance SET balance = balance - v_applied, updated_at = p_now
         WHERE customer_id = p_sub.customer_id AND currency = p_plan.currency;
    END IF;

    INSERT INTO billing.invoice (subscription_id, customer_id, kind, period_start, period_end, subtotal, credit_applied,
                                 amount, currency, status, due_at, next_attempt_at, paid_at, created_at,
                                 plan_id, plan_price, billing_interval, interval_count, from_plan_id, from_price,
                                 quantity, discount_amount, coupon_code, from_quantity,
                                 tax_amount, tax_included, tax_detail)
    VALUES (p_sub.id, p_sub.customer_id, p_kind, p_period_start, p_period_end, p_subtotal, v_applied,
            v_total - v_applied, p_plan.currency,
            CASE WHEN v_total - v_applied = 0 THEN 'PAID' ELSE 'OPEN' END, p_now,
            CASE WHEN v_total - v_applied = 0 THEN NULL ELSE p_now END,
            CASE WHEN v_total - v_applied = 0 THEN p_now END, p_now,
            p_plan.id, p_plan_price, p_plan.billing_interval, p_plan.interval_count, p_from_plan_id, p_from_price,
            p_sub.quantity, coalesce(p_discount, 0), p_coupon_code, p_from_quantity,
            v_tax.tax_amount, v_tax.tax_included, v_tax.tax_detail)
    RETURNING * INTO v_invoice;

    -- The service ledger (16_ledger): a period invoice sells its period in one CHARGE line; the
    -- lines of a PRORATION invoice (what it reverses, what it sells) are written by the change.
    -- (A USAGE invoice's lines are written by the rating, 72_usage_rating.)
    IF p_kind NOT IN ('PRORATION', 'USAGE') THEN
        PERFORM billing._charge_line(p_sub, v_invoice.id, p_plan, p_sub.quantity, p_plan_price, p_period_start, p_period_end,
                                     p_subtotal + coalesce(p_discount, 0), p_discount, p_coupon_code,
                                     v_tax.tax_amount + v_tax.tax_included, v_tax.tax_included > 0, NULL, p_now);
    END IF;

    IF v_applied > 0 THEN
        INSERT INTO billing.credit_entry (customer_id, currency, amount, reason, subscription_id, invoice_id, created_at)
        VALUES (p_sub.customer_id, p_plan.currency, -v_applied, 'APPLIED', p_sub.id, v_invoice.id, p_now);
    END IF;
    PERFORM billing._emit_event('invoice', v_invoice.id, 'InvoiceCreated', billing._invoice_data(v_invoice), p_now);
    IF v_invoice.status = 'PAID' THEN
        PERFORM billing._emit_event('invoice', v_invoice.id, 'InvoicePaid', billing._invoice_data(v_invoice), p_now);
    END IF;
    RETURN v_invoice;
END
$$;
COMMENT ON FUNCTION billing._new_invoice(billing.subscription, text, timestamptz, timestamptz, bigint, billing.plan, bigint, timestamptz, bigint, bigint, bigint, text, integer, jsonb) IS
'Private: inserts one invoice due at p_now with its terms (plan, price, seats, coupon discount already taken off p_subtotal; for PRORATION the replaced terms; p_tax: {tax_amount, tax_included, tax_detail} given, a change''s lines'' taxes, else the address''s on p_subtotal) after consuming the customer''s credit (PAID and announced when credit covers it).
Returns the invoice.';

-- The price of a plan for a period starting at p_at (billing.plan_price; the usual case, a period
-- starting after the current price took effect, reads no history).
CREATE OR REPLACE FUNCTION billing._price_at(p_plan billing.plan, p_at timestamptz)
RETURNS bigint
LANGUAGE plpgsql STABLE
-- (no SET search_path: a private helper, run inside its definer caller's; a SET costs ~7 us a call, issue 32)
AS $$
-- (plpgsql for its cached plan: see _subscription_data)
BEGIN
    RETURN CASE WHEN p_plan.price_effective_from IS NULL OR p_at >= p_plan.price_effective_from THEN p_plan.price_amount
                ELSE (SELECT pp.price_amount FROM billing.plan_price pp
                       WHERE pp.plan_id = p_plan.id AND pp.effective_from <= p_at
                       ORDER BY pp.effective_from DESC LIMIT 1) END;
END
$$;
COMMENT ON FUNCTION billing._price_at(billing.plan, timestamptz) IS
'Private: the price of p_plan for a period starting at p_at (the price in force then).
Returns the amount.';

-- Credit granted by a plan change for the unused rest of the subscription's current period (the
-- period p_sub is in): never more than the period kept (billed, less refunds succeeded or in
-- flight, less the credit already given back for it: _period_credit_room, 57_refunds.sql); then
-- straight to the balance when every invoice of the subscription is settled, else pending on the
-- unpaid ones (released when they are all PAID, reversed when one is voided or fails). The
-- period is recorded with it, so that its refunds know what went back as credit.
CREATE OR REPLACE FUNCTION billing._grant_change_credit(p_sub billing.subscription, p_currency char(3), p_amount bigint,
                                                        p_now timestamptz)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_unpaid bigint[];
    v_amount bigint;
BEGIN
    IF p_amount <= 0 THEN
        RETURN;
    END IF;
    v_amount := least(p_amount, billing._period_credit_room(p_sub));
    IF v_amount <= 0 THEN
        RETURN;
    END IF;
    -- It waits only on the unpaid invoices of the period it comes from (an older upgrade in dunning
    -- is not this period's money).
    v_unpaid := billing._period_unpaid(p_sub);
    IF v_unpaid IS NULL THEN
        INSERT INTO billing.credit_entry (customer_id, currency, amount, reason, subscription_id, invoice_id, created_at,
                                          period_start, period_end)
        VALUES (p_sub.customer_id, p_currency, v_amount, 'PRORATION', p_sub.id, NULL, p_now,
                p_sub.current_period_start, p_sub.current_period_end);
        INSERT INTO billing.credit_balance AS b (customer_id, currency, balance, updated_at)
        VALUES (p_sub.customer_id, p_currency, v_amount, p_now)
        ON CONFLICT ON CONSTRAINT credit_balance_pkey DO UPDATE
            SET balance = b.balance + excluded.balance, updated_at = excluded.updated_at;
    ELSE
        INSERT INTO billing.credit_pending (customer_id, currency, amount, subscription_id, depends_on, created_at,
                                            period_start, period_end)
        VALUES (p_sub.customer_id, p_currency, v_amount, p_sub.id, v_unpaid, p_now,
                p_sub.current_period_start, p_sub.current_period_end);
    END IF;
END
$$;
COMMENT ON FUNCTION billing._grant_change_credit(billing.subscription, char, bigint, timestamptz) IS
'Private: credit of a plan change for unused time of p_sub''s current period, capped at what the period kept and has not given back yet (_period_credit_room); to the balance at once when no invoice of the subscription is unpaid, else pending on the unpaid ones; the period is recorded with it.
Returns nothing.';

-- Called when an invoice reaches PAID, VOID or FAILED: settles the pending credit that waited on it.
CREATE OR REPLACE FUNCTION billing._settle_pending_credit(p_invoice billing.invoice, p_now timestamptz)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_credit billing.credit_pending;
    v_money  record;
    v_amount bigint;
BEGIN
    IF p_invoice.status IN ('VOID', 'FAILED') THEN
        UPDATE billing.credit_pending SET status = 'REVERSED', settled_at = p_now
         WHERE customer_id = p_invoice.customer_id AND status = 'PENDING' AND p_invoice.id = ANY (depends_on);
    ELSIF p_invoice.status = 'PAID' THEN
        FOR v_credit IN
            UPDATE billing.credit_pending c SET status = 'RELEASED', settled_at = p_now
             WHERE c.customer_id = p_invoice.customer_id AND c.status = 'PENDING' AND p_invoice.id = ANY (c.depends_on)
               AND NOT EXISTS (SELECT 1 FROM billing.invoice i
                                WHERE i.customer_id = c.customer_id AND i.id = ANY (c.depends_on) AND i.status <> 'PAID')
            RETURNING c.*
        LOOP
            -- Released within what its period still has to give back now (review7): a cancellation may
            -- since have taken the invoices it waited on off as not served (an invoice cut to nothing is
            -- settled PAID with nothing paid), and credit for time nobody paid for is money from nothing.
            -- (_period_money counts this credit among the period's; it is taken out again here.)
            v_amount := v_credit.amount;
            IF v_credit.subscription_id IS NOT NULL AND v_credit.period_start IS NOT NULL AND v_credit.period_end IS NOT NULL THEN
                v_money := billing._period_money(v_credit.customer_id, v_credit.subscription_id,
                                                 v_credit.period_start, v_credit.period_end);
                v_amount := least(v_amount, greatest(v_money.billed - v_money.refunded
                                                     - (v_money.credited - v_credit.amount), 0));
            END IF;
            IF v_amount < v_credit.amount THEN  -- the row says what was given: nothing (REVERSED), or less
                UPDATE billing.credit_pending c
                   SET status = CASE WHEN v_amount > 0 THEN 'RELEASED' ELSE 'REVERSED' END,
                       amount = CASE WHEN v_amount > 0 THEN v_amount ELSE c.amount END
                 WHERE c.customer_id = v_credit.customer_id AND c.id = v_credit.id;
            END IF;
            IF v_amount > 0 THEN
                PERFORM billing._grant_credit(v_credit.customer_id, v_credit.currency, v_amount, 'PRORATION',
                                              v_credit.subscription_id, NULL, p_now);
            END IF;
        END LOOP;
    END IF;
END
$$;
COMMENT ON FUNCTION billing._settle_pending_credit(billing.invoice, timestamptz) IS
'Private: p_invoice just became PAID (pending credit whose invoices are now all PAID is released, within what its period still has to give back: billed less refunded less its other credit) or VOID/FAILED (pending credit depending on it is reversed).
Returns nothing.';

-- Gives back the credit a closed (VOID or FAILED) invoice had consumed.
CREATE OR REPLACE FUNCTION billing._restore_credit(p_invoice billing.invoice, p_now timestamptz)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    IF p_invoice.credit_applied > 0 THEN
        PERFORM billing._grant_credit(p_invoice.customer_id, p_invoice.currency, p_invoice.credit_applied, 'RESTORED',
                                      p_invoice.subscription_id, p_invoice.id, p_now);
    END IF;
END
$$;
COMMENT ON FUNCTION billing._restore_credit(billing.invoice, timestamptz) IS
'Private: the credit a VOID or FAILED invoice consumed goes back to the customer (a RESTORED entry).
Returns nothing.';

-- (_void_open_invoices, which voided every OPEN invoice never declined of a subscription, is gone:
-- unpaid is unpaid, a cancellation bills the time served (19_ledger_cuts, _bill_served); issue 26.)
DROP FUNCTION IF EXISTS billing._void_open_invoices(bigint[], timestamptz);
DROP FUNCTION IF EXISTS billing._void_open_invoices(bigint, bigint[], timestamptz);
DROP FUNCTION IF EXISTS billing._void_open_invoices(bigint, bigint[], timestamptz, timestamptz);

-- Voids the given invoices of one customer that are still OPEN and were never declined (each locked
-- by key in id order, then as the statement above: VOID, its credit note if finalized, InvoiceVoided,
-- the pending credit that waited on it reversed, the credit it consumed given back).
CREATE OR REPLACE FUNCTION billing._void_invoices(p_customer_id bigint, p_invoice_ids bigint[], p_now timestamptz)
RETURNS integer
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_ids     bigint[];
    v_id      bigint;
    v_invoice billing.invoice;
BEGIN
    SELECT array_agg(i.id ORDER BY i.id) INTO v_ids
      FROM (SELECT i.id FROM billing.invoice i
             WHERE i.customer_id = p_customer_id AND i.id = ANY (p_invoice_ids)
               AND i.status = 'OPEN' AND i.attempt_count = 0
             ORDER BY i.id
               FOR UPDATE) i;
    FOREACH v_id IN ARRAY coalesce(v_ids, '{}') LOOP
        UPDATE billing.invoice
           SET status = 'VOID', next_attempt_at = NULL, closed_at = p_now, waiting_for = NULL
         WHERE customer_id = p_customer_id AND id = v_id
        RETURNING * INTO v_invoice;
        PERFORM billing._void_credit_note(v_invoice, p_now);
        PERFORM billing._emit_event('invoice', v_invoice.id, 'InvoiceVoided', billing._invoice_data(v_invoice), p_now);
        PERFORM billing._settle_pending_credit(v_invoice, p_now);
        PERFORM billing._restore_credit(v_invoice, p_now);
    END LOOP;
    RETURN coalesce(cardinality(v_ids), 0);
END
$$;
COMMENT ON FUNCTION billing._void_invoices(bigint, bigint[], timestamptz) IS
'Private: the given invoices of one customer still OPEN and never declined become VOID, by (customer_id, id) in id order (InvoiceVoided each, credit note if finalized); the credit they consumed goes back, pending credit depending on them is reversed.
Returns how many invoices were voided.';
