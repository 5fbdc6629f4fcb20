-- 50_charging: charge workers claim OPEN invoices, call the gateway outside any transaction,
-- then report the outcome here (or the gateway reports it by webhook). Results are
-- idempotent, may arrive late, twice or out of order, and a success always wins.
--
-- This file: the helpers, the dunning schedule, the key namespace, the end of dunning and the
-- invoices waiting for a payment method; the claims are 51_charge_claims.sql, the results
-- 53_payment_results.sql.
-- Re-applied after every migration: CREATE OR REPLACE only.

-- ---------------------------------------------------------------------------------------------
-- Private helpers
-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION billing._check_outcome(p_outcome text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM billing._check_one_of('payment outcome', p_outcome, ARRAY['SUCCEEDED', 'DECLINED', 'UNKNOWN', 'NOT_FOUND', 'CONFLICT'],
                                  'Use SUCCEEDED, DECLINED, UNKNOWN, NOT_FOUND (the gateway has no charge for the key) or CONFLICT (it holds a charge of other parameters).');
END
$$;
COMMENT ON FUNCTION billing._check_outcome(text) IS
'Private: a payment outcome is SUCCEEDED, DECLINED, UNKNOWN, NOT_FOUND or CONFLICT.
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
    -- The service ledger (17_ledger): the lines it had reversed are in force again; those a later
    -- change had ended stay ended.
    IF p_invoice.kind = 'PRORATION' THEN
        PERFORM billing._end_restored_lines(p_invoice, p_now);
    END IF;
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
    IF v_sub.status = 'PAUSED' AND v_sub.resume_at <= p_now THEN
        -- Paused with a resume date passed (the job had not run yet): it resumed then, as every call
        -- settles it first (docs/lifecycle.md, "Due but not yet processed"), at the terms in force
        -- then; what follows (a revert, the end) applies after. (Found by the widened money
        -- adversary: an invoice waiting for a payment method, given up while its subscription was
        -- paused past its resume date, ended it, or reverted its seats, without the resume.)
        v_sub := billing._settle_due(v_sub, p_now);
    END IF;
    IF v_invoice.kind = 'PRORATION' AND v_invoice.from_plan_id IS NOT NULL THEN
        -- A failed upgrade: reverted; the subscription keeps the plan paid for to its period end.
        PERFORM billing._revert_unpaid_change(v_invoice, v_sub, p_now);
    ELSIF v_sub.status = 'CANCELED' THEN
        -- Canceled during dunning: the served period stayed owed until now; it is written off.
        PERFORM billing._emit_event('invoice', v_invoice.id, 'InvoiceWrittenOff',
            billing._invoice_data(v_invoice) || jsonb_build_object('reason', 'DUNNING_EXHAUSTED'), p_now);
    ELSIF v_invoice.period_start < v_sub.current_period_start
          AND EXISTS (SELECT 1 FROM billing.invoice c
                       WHERE c.customer_id = v_sub.customer_id AND c.subscription_id = v_sub.id
                         AND c.kind <> 'PRORATION' AND c.status = 'PAID'
                         AND c.period_start = v_sub.current_period_start) THEN
        -- Dunning acts on its own period only: an earlier period's invoice is written off; the
        -- current period, paid, is left alone (a PAST_DUE subscription with nothing else OPEN is
        -- ACTIVE again).
        PERFORM billing._emit_event('invoice', v_invoice.id, 'InvoiceWrittenOff',
            billing._invoice_data(v_invoice) || jsonb_build_object('reason', 'DUNNING_EXHAUSTED'), p_now);
        PERFORM billing._revert_unpaid_change(v_invoice, v_sub, p_now);
    ELSE
        UPDATE billing.subscription
           SET status = 'CANCELED', canceled_at = p_now, cancel_reason = 'DUNNING_EXHAUSTED',
               version = version + 1, updated_at = p_now
         WHERE customer_id = v_sub.customer_id AND id = v_sub.id
        RETURNING * INTO v_sub;
        PERFORM billing._usage_touch(v_sub.customer_id, v_sub.id, p_now);  -- its usage is rated to here (72_usage_rating)
        -- Its other unpaid invoices bill the time served; only the rest is taken off (17_ledger).
        PERFORM billing._bill_served(v_sub, greatest(p_now, v_sub.current_period_start), p_now);
        PERFORM billing._emit_event('subscription', v_sub.id, 'SubscriptionCanceled',
                                    billing._subscription_data(v_sub), p_now);
    END IF;
END
$$;
COMMENT ON FUNCTION billing._dunning_exhausted(billing.invoice, billing.subscription, timestamptz) IS
'Private: the end of dunning of an invoice just made FAILED: InvoiceFailed, credit restored and pending credit reversed, then a failed upgrade reverted (SubscriptionPlanReverted), a served period of a canceled subscription, or an earlier period than the subscription''s current one when that one is paid, written off (InvoiceWrittenOff; the subscription left alone, ACTIVE again when nothing else is OPEN), or the subscription canceled (DUNNING_EXHAUSTED; its other unpaid invoices bill the time served, the rest taken off: _bill_served).
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
