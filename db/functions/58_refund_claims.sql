-- 58_refund_claims: the refund worker's side (docs/providers.md): claim_refunds (and, beside it,
-- refund_claims_in_shard inside one shard group), then record_refund_result: SUCCEEDED or FAILED are
-- final; UNKNOWN retries the same key, never past the key's lifetime at the provider.
-- Re-applied after every migration: CREATE OR REPLACE only.

DROP FUNCTION IF EXISTS billing.claim_refunds(text, integer, interval, timestamptz);
CREATE OR REPLACE FUNCTION billing.claim_refunds(
    p_worker text, p_batch_size integer DEFAULT 50, p_lease interval DEFAULT interval '5 minutes',
    p_now timestamptz DEFAULT now())
RETURNS TABLE (refund_id bigint, customer_id bigint, invoice_id bigint, idempotency_key text, provider text,
               charge_reference text, charge_key text, amount bigint, currency text, lookup boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    v_cfg billing.installation;
BEGIN
    PERFORM billing._check_claim(p_worker, p_batch_size, p_lease, p_now, true);
    SELECT * INTO v_cfg FROM billing.installation;
    -- Nothing due: the call changes nothing, so it leaves no audit row (idle workers ask every second).
    IF NOT EXISTS (SELECT 1 FROM billing.refund r WHERE r.status = 'REQUESTED' AND r.next_attempt_at <= p_now) THEN
        RETURN;
    END IF;
    PERFORM billing._audit('claim_refunds', jsonb_build_object('worker', p_worker, 'batch_size', p_batch_size, 'lease', p_lease, 'now', p_now));
    IF billing._distributed('billing.customer') THEN
        -- On Citus the statement below would lock rows of many shards at once (refused there): the
        -- same claim row by row, each refund locked and worked on in its customer's shard.
        RETURN QUERY SELECT * FROM billing._claim_refunds_rows(p_worker, p_batch_size, p_lease, p_now);
        RETURN;
    END IF;
    RETURN QUERY
    WITH due AS MATERIALIZED (
        SELECT r.customer_id, r.id, r.key_expires_at, r.review_reason, r.claim_count
          FROM billing.refund r
         WHERE r.status = 'REQUESTED' AND r.next_attempt_at <= p_now
         ORDER BY r.next_attempt_at, r.id
         LIMIT p_batch_size
           FOR NO KEY UPDATE SKIP LOCKED
    ), claimed AS (
        -- Sent before, fate unknown, and the provider may have forgotten the key (or will before
        -- this call ends): never sent again (it could refund twice), only looked up. Past the key's
        -- lifetime it is in review (RefundReview once) and looked up every hour until the
        -- provider answers; NOT_FOUND then gives it a new key (record_refund_result).
        UPDATE billing.refund r
           SET review_reason = CASE WHEN d.key_expires_at <= p_now THEN 'KEY_EXPIRED' ELSE r.review_reason END,
               next_attempt_at = p_now + CASE WHEN d.key_expires_at <= p_now THEN greatest(p_lease, interval '1 hour')
                                              ELSE p_lease END,
               claim_count = r.claim_count + 1,
               first_claimed_at = coalesce(r.first_claimed_at, p_now),
               key_expires_at = coalesce(r.key_expires_at, p_now + v_cfg.key_lifetime)
          FROM due d
         WHERE r.customer_id = d.customer_id AND r.id = d.id
        RETURNING r.*, r AS ref, d.review_reason IS NULL AND d.key_expires_at <= p_now AS newly_expired,
                  coalesce(d.key_expires_at <= p_now
                           OR (d.claim_count >= 1 AND p_now + p_lease > d.key_expires_at - v_cfg.lookup_margin),
                           false) AS lookup
    ), review_events AS (
        INSERT INTO billing.outbox_event (event_id, aggregate_type, aggregate_id, event_type, payload, created_at, available_at, customer_id)
        SELECT e.event_id, 'invoice', e.invoice_id, 'RefundReview',
               billing._cloud_event(e.event_id, 'RefundReview', 'invoice', e.invoice_id, p_now,
                                    billing._refund_data(e.ref) || jsonb_build_object('reviewReason', 'KEY_EXPIRED')),
               p_now, p_now, (e.ref).customer_id
          FROM (SELECT gen_random_uuid() AS event_id, x.invoice_id, x.ref
                  FROM claimed x WHERE x.newly_expired ORDER BY x.id) e
    )
    SELECT c.id, c.customer_id, c.invoice_id, c.idempotency_key, c.provider, c.charge_reference, a.idempotency_key,
           c.amount, c.currency::text, c.lookup
      FROM claimed c
      JOIN billing.payment_attempt a ON a.id = c.attempt_id
     ORDER BY c.id;
END
$$;
COMMENT ON FUNCTION billing.claim_refunds(text, integer, interval, timestamptz) IS
'Claims up to p_batch_size REQUESTED refunds due by p_now (SKIP LOCKED) and leases them until p_now + p_lease. A refund sent before whose key ends within the lookup margin is handed out for a look-up only (lookup); one whose key outlived the key lifetime is in review (RefundReview, once) and handed out for a look-up every hour.
Returns what to send or look up: the refund''s key (the same on every re-claim), the charge (provider reference and key), amount, currency and lookup; BL422 for bad arguments.';

-- claim_refunds on Citus: its statement locks due refunds of many shards at once, which Citus
-- refuses. The same claim row by row: the due refunds are read unlocked (a read of every shard,
-- oldest due first, a page at a time), each is locked by (customer_id, id) FOR NO KEY UPDATE SKIP
-- LOCKED (one shard: another claimer's rows are skipped, as by the statement) and leased exactly as
-- the statement leases it, until p_batch_size refunds were locked or none is left.
CREATE OR REPLACE FUNCTION billing._claim_refund_row(
    p_customer_id bigint, p_refund_id bigint, p_lease interval, p_now timestamptz, p_cfg billing.installation)
RETURNS TABLE (refund_id bigint, customer_id bigint, invoice_id bigint, idempotency_key text, provider text,
               charge_reference text, charge_key text, amount bigint, currency text, lookup boolean)
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_before billing.refund;
    v_ref    billing.refund;
    v_key    text;
    v_next   timestamptz;
    v_expires timestamptz;
BEGIN
    -- claim_refunds' statement for one refund, every statement by (customer_id, id).
    SELECT * INTO v_before FROM billing.refund r
     WHERE r.customer_id = p_customer_id AND r.id = p_refund_id AND r.status = 'REQUESTED' AND r.next_attempt_at <= p_now
       FOR NO KEY UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    -- Sent before, fate unknown, and the provider may have forgotten the key (or will before this
    -- call ends): only looked up, never sent again; past the key's lifetime in review (RefundReview
    -- once), looked up every hour.
    -- (the new values computed from the locked row first: Citus takes no STABLE function,
    -- timestamptz + interval, inside a CASE or coalesce of an UPDATE)
    v_next := p_now + CASE WHEN v_before.key_expires_at <= p_now THEN greatest(p_lease, interval '1 hour') ELSE p_lease END;
    v_expires := coalesce(v_before.key_expires_at, p_now + p_cfg.key_lifetime);
    UPDATE billing.refund r
       SET review_reason = CASE WHEN v_before.key_expires_at <= p_now THEN 'KEY_EXPIRED' ELSE v_before.review_reason END,
           next_attempt_at = v_next,
           claim_count = r.claim_count + 1,
           first_claimed_at = coalesce(v_before.first_claimed_at, p_now),
           key_expires_at = v_expires
     WHERE r.customer_id = v_before.customer_id AND r.id = v_before.id
    RETURNING * INTO v_ref;
    IF v_before.review_reason IS NULL AND v_before.key_expires_at <= p_now THEN
        PERFORM billing._emit_event('invoice', v_ref.invoice_id, 'RefundReview',
                                    billing._refund_data(v_ref) || jsonb_build_object('reviewReason', 'KEY_EXPIRED'), p_now);
    END IF;
    SELECT a.idempotency_key INTO v_key FROM billing.payment_attempt a
     WHERE a.customer_id = v_ref.customer_id AND a.id = v_ref.attempt_id;
    RETURN QUERY SELECT v_ref.id, v_ref.customer_id, v_ref.invoice_id, v_ref.idempotency_key, v_ref.provider,
                        v_ref.charge_reference, v_key, v_ref.amount, v_ref.currency::text,
                        coalesce(v_before.key_expires_at <= p_now
                                 OR (v_before.claim_count >= 1 AND p_now + p_lease > v_before.key_expires_at - p_cfg.lookup_margin),
                                 false);
END
$$;
COMMENT ON FUNCTION billing._claim_refund_row(bigint, bigint, interval, timestamptz, billing.installation) IS
'Private: claim_refunds'' work on one refund named by (customer_id, id), under its row lock (SKIP LOCKED; REQUESTED and due checked on the locked version): leased until p_now + p_lease (an hour for a key past its lifetime, in review with RefundReview once), its key kept.
Returns the row claim_refunds returns for it, or none.';

CREATE OR REPLACE FUNCTION billing._claim_refunds_rows(
    p_worker text, p_batch_size integer, p_lease interval, p_now timestamptz)
RETURNS TABLE (refund_id bigint, customer_id bigint, invoice_id bigint, idempotency_key text, provider text,
               charge_reference text, charge_key text, amount bigint, currency text, lookup boolean)
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_cfg       billing.installation;
    v_page      record;
    v_row       jsonb;
    v_locked    integer := 0;
    v_after     timestamptz := '-infinity';
    v_after_id  bigint := -1;
    v_after_c   bigint := -1;
    v_seen      integer;
    v_rows      jsonb := '[]';
BEGIN
    SELECT * INTO v_cfg FROM billing.installation;
    LOOP
        v_seen := 0;
        FOR v_page IN
            SELECT r.customer_id, r.id, r.next_attempt_at FROM billing.refund r
             WHERE r.status = 'REQUESTED' AND r.next_attempt_at <= p_now
               AND (r.next_attempt_at, r.id, r.customer_id) > (v_after, v_after_id, v_after_c)
             ORDER BY r.next_attempt_at, r.id, r.customer_id
             LIMIT p_batch_size - v_locked
        LOOP
            v_seen := v_seen + 1;
            v_after := v_page.next_attempt_at;
            v_after_id := v_page.id;
            v_after_c := v_page.customer_id;
            -- Locked by its key SKIP LOCKED and leased, as claim_refunds' statement does: none when
            -- another claimer holds it, or it moved on.
            v_row := (SELECT to_jsonb(c) FROM billing._claim_refund_row(v_page.customer_id, v_page.id, p_lease, p_now,
                                                                       v_cfg) c);
            CONTINUE WHEN v_row IS NULL;
            v_locked := v_locked + 1;
            v_rows := v_rows || jsonb_build_array(v_row);
        END LOOP;
        EXIT WHEN v_seen = 0 OR v_locked >= p_batch_size;
    END LOOP;
    RETURN QUERY
    SELECT r.refund_id, r.customer_id, r.invoice_id, r.idempotency_key, r.provider, r.charge_reference, r.charge_key,
           r.amount, r.currency, r.lookup
      FROM jsonb_to_recordset(v_rows) AS r(refund_id bigint, customer_id bigint, invoice_id bigint, idempotency_key text,
                                           provider text, charge_reference text, charge_key text, amount bigint,
                                           currency text, lookup boolean)
     ORDER BY r.refund_id;
END
$$;
COMMENT ON FUNCTION billing._claim_refunds_rows(text, integer, interval, timestamptz) IS
'Private: claim_refunds on Citus, row by row: the due REQUESTED refunds read unlocked oldest due first, each locked by (customer_id, id) SKIP LOCKED and leased as claim_refunds'' statement leases it (_claim_refund_row: RefundReview once past the key''s lifetime), up to p_batch_size locked.
Returns claim_refunds'' rows in refund id order.';

CREATE OR REPLACE FUNCTION billing.refund_claims_in_shard(
    p_worker text, p_shard_group integer, p_batch_size integer DEFAULT 50, p_lease interval DEFAULT interval '5 minutes',
    p_now timestamptz DEFAULT now())
RETURNS TABLE (refund_id bigint, customer_id bigint, invoice_id bigint, idempotency_key text, provider text,
               charge_reference text, charge_key text, amount bigint, currency text, lookup boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    v_cfg       billing.installation;
    v_customers bigint[];
    v_ids       bigint[];
BEGIN
    PERFORM billing._check_claim(p_worker, p_batch_size, p_lease, p_now, true);
    SELECT * INTO v_cfg FROM billing.installation;
    PERFORM billing._check_shard_lease(p_worker, p_shard_group, p_now);
    -- claim_refunds' due refunds, in this group: oldest first, locked (SKIP LOCKED) until the
    -- transaction ends, then each leased as claim_refunds leases it.
    EXECUTE format($q$
        WITH due AS MATERIALIZED (
            SELECT r.customer_id, r.id, r.next_attempt_at FROM %s r
             WHERE r.status = 'REQUESTED' AND r.next_attempt_at <= $1
             ORDER BY r.next_attempt_at, r.id LIMIT $2
               FOR NO KEY UPDATE SKIP LOCKED
        )
        SELECT array_agg(d.customer_id ORDER BY d.id), array_agg(d.id ORDER BY d.id) FROM due d$q$,
        billing._shard_table('billing.refund', p_shard_group))
       INTO v_customers, v_ids USING p_now, p_batch_size;
    IF v_ids IS NULL THEN
        RETURN;  -- nothing due: no audit row
    END IF;
    PERFORM billing._audit('refund_claims_in_shard', jsonb_build_object('worker', p_worker, 'shard_group', p_shard_group, 'batch_size', p_batch_size, 'lease', p_lease, 'now', p_now));
    FOR i IN 1 .. array_length(v_ids, 1) LOOP
        RETURN QUERY SELECT * FROM billing._claim_refund_row(v_customers[i], v_ids[i], p_lease, p_now, v_cfg);
    END LOOP;
END
$$;
COMMENT ON FUNCTION billing.refund_claims_in_shard(text, integer, integer, interval, timestamptz) IS
'claim_refunds inside one leased shard group: claims up to p_batch_size REQUESTED refunds of the group due by p_now (oldest first, SKIP LOCKED) and leases each as claim_refunds does (_claim_refund_row: same key, look-up only near or past its lifetime, RefundReview once past it). Call it on the node holding the group.
Returns what claim_refunds returns, in refund id order; BL409 when the worker does not hold the group''s lease or the group is on another node, BL404 for an unknown group, BL422 for bad arguments.';

-- The customer of a refund named by its key alone (the provider's answer knows only the key): an
-- unlocked read by the key's plain index (on Citus, of every shard's). The engine's refund keys name
-- one refund (<namespace>-ref-<refund id>[-try-<n>]), so one customer.
CREATE OR REPLACE FUNCTION billing._refund_customer(p_idempotency_key text)
RETURNS bigint
LANGUAGE plpgsql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_customer_id bigint;
BEGIN
    SELECT r.customer_id INTO v_customer_id FROM billing.refund r
     WHERE r.idempotency_key = p_idempotency_key
     ORDER BY r.customer_id LIMIT 1;
    RETURN v_customer_id;
END
$$;
COMMENT ON FUNCTION billing._refund_customer(text) IS
'Private: the customer of the refund with this idempotency key (NULL when there is none). Callers then name the
refund by (customer_id, idempotency_key), which goes to one shard on Citus.';

CREATE OR REPLACE FUNCTION billing.record_refund_result(
    p_idempotency_key text, p_outcome text, p_provider_reference text DEFAULT NULL,
    p_failure_reason text DEFAULT NULL, p_now timestamptz DEFAULT now())
RETURNS billing.refund
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_refund  billing.refund;
    v_invoice billing.invoice;
    v_margin  interval;
    v_namespace text;
    v_customer_id bigint;
    v_next    timestamptz;
BEGIN
    PERFORM billing._audit('record_refund_result', jsonb_build_object('idempotency_key', p_idempotency_key, 'outcome', p_outcome, 'provider_reference', p_provider_reference, 'failure_reason', p_failure_reason, 'now', p_now));
    PERFORM billing._check_now(p_now);
    PERFORM billing._check_one_of('refund outcome', p_outcome, ARRAY['SUCCEEDED', 'FAILED', 'UNKNOWN', 'NOT_FOUND'],
                                  'Use SUCCEEDED, FAILED, UNKNOWN or NOT_FOUND.');
    -- The key's customer first; then every row is named by (customer_id, ...): one shard on Citus.
    v_customer_id := billing._refund_customer(p_idempotency_key);
    SELECT * INTO v_refund FROM billing.refund WHERE customer_id = v_customer_id AND idempotency_key = p_idempotency_key;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'BL404',
            MESSAGE = format('no refund has idempotency key %L', p_idempotency_key),
            HINT = 'Report only keys returned by claim_refunds.';
    END IF;
    -- Lock order: subscription, invoice, refund.
    SELECT * INTO v_invoice FROM billing.invoice WHERE customer_id = v_customer_id AND id = v_refund.invoice_id;
    PERFORM 1 FROM billing.subscription
     WHERE customer_id = v_customer_id AND id = v_invoice.subscription_id FOR UPDATE;
    SELECT * INTO v_invoice FROM billing.invoice WHERE customer_id = v_customer_id AND id = v_refund.invoice_id FOR UPDATE;
    SELECT * INTO v_refund FROM billing.refund
     WHERE customer_id = v_refund.customer_id AND id = v_refund.id FOR UPDATE;

    IF v_refund.status = 'SUCCEEDED' AND p_outcome = 'FAILED' THEN
        -- The provider reports the refund failed after all (Stripe: a refund the bank returned):
        -- the money stayed with us. Said by the worker's look-up at the provider (an event alone
        -- only asks for that look-up: apply_refund_webhook, claim_refund_rechecks) or by a person.
        UPDATE billing.refund SET status = 'FAILED', outcome = 'FAILED', settled_at = p_now, recheck_at = NULL,
               provider_reference = coalesce(p_provider_reference, provider_reference), failure_reason = p_failure_reason
         WHERE customer_id = v_refund.customer_id AND id = v_refund.id
        RETURNING * INTO v_refund;
        IF v_invoice.paid_attempt_id = v_refund.attempt_id THEN
            UPDATE billing.invoice SET amount_refunded = amount_refunded - v_refund.amount
             WHERE customer_id = v_invoice.customer_id AND id = v_invoice.id;
        END IF;
        PERFORM billing._emit_event('invoice', v_invoice.id, 'RefundFailed', billing._refund_data(v_refund), p_now);
        RETURN v_refund;
    END IF;
    IF v_refund.status <> 'REQUESTED' THEN
        -- Final already: a repeat changes nothing; a contradiction is logged by the caller. A
        -- look-up that finds a refund an event said failed SUCCEEDED ends the recheck.
        IF v_refund.recheck_at IS NOT NULL AND v_refund.status = 'SUCCEEDED' AND p_outcome = 'SUCCEEDED' THEN
            UPDATE billing.refund SET recheck_at = NULL
             WHERE customer_id = v_refund.customer_id AND id = v_refund.id
            RETURNING * INTO v_refund;
        END IF;
        RETURN v_refund;
    END IF;
    IF p_outcome = 'NOT_FOUND' THEN
        -- The provider never saw this key (a look-up said so): nothing was refunded, and the key
        -- is never sent again. A new key, sent at once.
        SELECT key_namespace INTO v_namespace FROM billing.installation;
        UPDATE billing.refund r
           SET try_count = r.try_count + 1,
               idempotency_key = v_namespace || '-ref-' || r.id || '-try-' || (r.try_count + 1),
               outcome = 'NOT_FOUND', failure_reason = p_failure_reason, review_reason = NULL, next_attempt_at = p_now,
               claim_count = 0, first_claimed_at = NULL, key_expires_at = NULL
         WHERE r.customer_id = v_refund.customer_id AND r.id = v_refund.id
        RETURNING r.* INTO v_refund;
        RETURN v_refund;
    END IF;
    IF p_outcome = 'UNKNOWN' THEN
        -- The same key again later (the provider answers the first call's result), but never
        -- past the key's lifetime: claim_refunds sets it aside then.
        SELECT lookup_margin INTO v_margin FROM billing.installation;
        -- (computed from the locked row first: Citus takes no STABLE function, timestamptz +
        -- interval, inside a CASE or coalesce of an UPDATE)
        v_next := CASE WHEN v_refund.review_reason IS NOT NULL THEN v_refund.next_attempt_at
                       ELSE least(p_now + interval '15 minutes',
                                  greatest(p_now + interval '1 minute',
                                           coalesce(v_refund.key_expires_at, p_now + interval '15 minutes') - v_margin)) END;
        UPDATE billing.refund
           SET outcome = 'UNKNOWN', failure_reason = p_failure_reason, next_attempt_at = v_next
         WHERE customer_id = v_refund.customer_id AND id = v_refund.id
        RETURNING * INTO v_refund;
        RETURN v_refund;
    END IF;
    UPDATE billing.refund
       SET status = p_outcome, outcome = p_outcome, next_attempt_at = NULL, settled_at = p_now, review_reason = NULL,
           provider_reference = coalesce(p_provider_reference, provider_reference),
           failure_reason = CASE WHEN p_outcome = 'FAILED' THEN p_failure_reason END
     WHERE customer_id = v_refund.customer_id AND id = v_refund.id
    RETURNING * INTO v_refund;
    IF p_outcome = 'SUCCEEDED' AND v_invoice.paid_attempt_id = v_refund.attempt_id THEN
        UPDATE billing.invoice SET amount_refunded = amount_refunded + v_refund.amount
         WHERE customer_id = v_invoice.customer_id AND id = v_invoice.id;
        -- The numbered credit note of the money given back (58_invoices).
        PERFORM billing._refund_credit_note(v_invoice.id, v_refund, p_now);
    END IF;
    PERFORM billing._emit_event('invoice', v_invoice.id,
        CASE p_outcome WHEN 'SUCCEEDED' THEN 'RefundSucceeded' ELSE 'RefundFailed' END,
        billing._refund_data(v_refund), p_now);
    RETURN v_refund;
END
$$;
COMMENT ON FUNCTION billing.record_refund_result(text, text, text, text, timestamptz) IS
'Records the provider''s answer to a refund: SUCCEEDED (the invoice''s amount_refunded grows when it refunds the paying charge; RefundSucceeded) and FAILED (RefundFailed; the amount may be asked again) are final, except that FAILED after SUCCEEDED (the provider reports it failed after all) makes it FAILED and takes it off amount_refunded; UNKNOWN retries the same key later, within its lifetime; NOT_FOUND (a look-up found nothing: the provider never saw the key) gives it a new key, sent at once. Idempotent: a refund already settled is returned unchanged.
Returns the refund; BL404 for an unknown key, BL422 for an unknown outcome.';
