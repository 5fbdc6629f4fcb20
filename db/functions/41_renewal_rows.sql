-- 41_renewal_rows: the renewal row by row: _renew_row (one subscription by its key), _renew_rows
-- (create_due_invoices on Citus) and renew_in_shard, the driver's claim and work inside one shard
-- group (docs/scaling.md, "Batch claims"), which runs 40_renewal.sql's statement on the group's
-- shards when it can.
-- Re-applied after every migration: CREATE OR REPLACE only.

-- ---------------------------------------------------------------------------------------------
-- The per-row renewal: create_due_invoices on Citus (below) and renew_in_shard (below).
-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION billing._renew_row(p_customer_id bigint, p_subscription_id bigint, p_now timestamptz)
RETURNS integer
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_sub     billing.subscription;
    v_handled integer := 0;
BEGIN
    -- Locked by (customer_id, id): one shard on Citus. Skipped when another session holds it; the
    -- conditions are checked again on the locked version, so a row renewed meanwhile is not due.
    SELECT * INTO v_sub FROM billing.subscription s
     WHERE s.customer_id = p_customer_id AND s.id = p_subscription_id
       AND (billing._due_renewal(s.status, s.current_period_end, p_now)
            OR billing._due_resume(s.status, s.resume_at, p_now)
            OR billing._due_trial_notice(s.status, s.trial_notice_at, p_now))
       FOR NO KEY UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    IF billing._due_trial_notice(v_sub.status, v_sub.trial_notice_at, p_now) THEN
        -- Bookkeeping, not a change of the subscription: version stays (as _renew_lifecycle).
        UPDATE billing.subscription s SET trial_notice_at = NULL
         WHERE s.customer_id = v_sub.customer_id AND s.id = v_sub.id;
        PERFORM billing._emit_event('subscription', v_sub.id, 'SubscriptionTrialWillEnd',
                                    billing._subscription_data(v_sub), p_now);
        v_sub.trial_notice_at := NULL;
        v_handled := 1;
    END IF;
    IF v_sub.status = 'PAUSED' THEN
        -- Resumed at the date set, however late the job runs (later periods follow as renewals).
        PERFORM billing._resume(v_sub, v_sub.resume_at, p_now);
        v_handled := v_handled + 1;
    ELSIF billing._due_renewal(v_sub.status, v_sub.current_period_end, p_now) THEN
        -- One period (or the cancellation at its end), as the renewal statement or
        -- _renew_lifecycle would: _renew_one is the per-row form of both.
        PERFORM billing._renew_one(v_sub, p_now);
        v_handled := v_handled + 1;
    END IF;
    RETURN v_handled;
END
$$;
COMMENT ON FUNCTION billing._renew_row(bigint, bigint, timestamptz) IS
'Private: what create_due_invoices does to one subscription named by (customer_id, id), under its row lock (FOR NO KEY UPDATE SKIP LOCKED, the due conditions checked on the locked version): SubscriptionTrialWillEnd when due, a resume at resume_at, or one renewal (or cancellation at period end) through _renew_one.
Returns how many of those it did (0: not due, or held by another session).';

CREATE OR REPLACE FUNCTION billing._renew_rows(p_batch_size integer, p_now timestamptz)
RETURNS integer
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_key     record;
    v_handled integer := 0;
BEGIN
    -- An unlocked read of the candidates (on Citus a multi-shard read, allowed without FOR
    -- UPDATE): the oldest due first, then worked on in customer order, so the credit balances
    -- they lock are taken in key order as the renewal statement takes them.
    FOR v_key IN
        SELECT c.customer_id, c.id
          FROM (SELECT s.customer_id, s.id
                  FROM billing.subscription s
                 WHERE billing._due_renewal(s.status, s.current_period_end, p_now)
                    OR billing._due_resume(s.status, s.resume_at, p_now)
                    OR billing._due_trial_notice(s.status, s.trial_notice_at, p_now)
                 ORDER BY least(CASE WHEN s.status = 'PAUSED' THEN s.resume_at ELSE s.current_period_end END,
                                s.trial_notice_at), s.id
                 LIMIT p_batch_size) c
         ORDER BY c.customer_id, c.id
    LOOP
        v_handled := v_handled + billing._renew_row(v_key.customer_id, v_key.id, p_now);
    END LOOP;
    RETURN v_handled;
END
$$;
COMMENT ON FUNCTION billing._renew_rows(integer, timestamptz) IS
'Private: create_due_invoices on Citus, where its statement cannot run: up to p_batch_size due subscriptions read without locks, then each renewed under its own row lock by _renew_row (skipping rows another session holds).
Returns how many it handled: 0 means nothing is due.';

-- claim_renewals_in_shard (a claim without the work) was never called by the driver: removed.
DROP FUNCTION IF EXISTS billing.claim_renewals_in_shard(text, integer, integer, timestamptz);

-- ---------------------------------------------------------------------------------------------
-- Claim and work in one call, inside one shard group: what the driver's workers call on the node
-- that holds the group (docs/scaling.md, "Batch claims"). The claim locks the group's due rows on
-- its own shard (SKIP LOCKED, so two claimers take disjoint rows); each claimed row is then worked
-- on by the per-row functions, whose statements name it by (customer_id, id): on Citus a
-- single-shard statement, executed locally on this node. All in the caller's one transaction.
-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION billing.renew_in_shard(
    p_worker text, p_shard_group integer, p_batch_size integer DEFAULT 500, p_now timestamptz DEFAULT now())
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
SET jit = off
AS $$
DECLARE
    v_customers bigint[];
    v_ids       bigint[];
    v_handled   integer := 0;
BEGIN
    PERFORM billing._check_now(p_now);
    PERFORM billing._check_between('batch size', p_batch_size, 1, 10000);
    PERFORM billing._check_shard_lease(p_worker, p_shard_group, p_now);
    -- create_due_invoices inside the group, in the same two steps. First the per-row path: trial
    -- notices, resumes at their date and the renewals flagged lifecycle_pending (a trial ends, a
    -- coupon, a scheduled change), up to a batch of each, oldest first, locked on the group's shard
    -- (SKIP LOCKED) and worked on in customer order (credit balances locked in key order).
    EXECUTE format($q$
        WITH notice AS MATERIALIZED (
            SELECT s.customer_id, s.id FROM %1$s s
             WHERE billing._due_trial_notice(s.status, s.trial_notice_at, $1)
             ORDER BY s.trial_notice_at, s.id LIMIT $2
               FOR NO KEY UPDATE SKIP LOCKED
        ), resuming AS MATERIALIZED (
            SELECT s.customer_id, s.id FROM %1$s s
             WHERE billing._due_resume(s.status, s.resume_at, $1)
             ORDER BY s.resume_at, s.id LIMIT $2
               FOR NO KEY UPDATE SKIP LOCKED
        ), renewing AS MATERIALIZED (
            SELECT s.customer_id, s.id FROM %1$s s
             WHERE billing._due_lifecycle(s.status, s.current_period_end, s.lifecycle_pending, $1)
             ORDER BY s.current_period_end, s.id LIMIT $2
               FOR NO KEY UPDATE SKIP LOCKED
        ), claimed AS (
            SELECT * FROM notice UNION SELECT * FROM resuming UNION SELECT * FROM renewing
        )
        SELECT array_agg(c.customer_id ORDER BY c.customer_id, c.id), array_agg(c.id ORDER BY c.customer_id, c.id)
          FROM claimed c$q$, billing._shard_table('billing.subscription', p_shard_group))
       INTO v_customers, v_ids USING p_now, p_batch_size;
    FOR i IN 1 .. coalesce(array_length(v_ids, 1), 0) LOOP
        v_handled := v_handled + billing._renew_row(v_customers[i], v_ids[i], p_now);
    END LOOP;
    -- Then the renewal statement on the group's own shards (the other due rows), as
    -- create_due_invoices runs it on the tables (_renew_set: retried, then the cancellations' voids).
    v_handled := v_handled + billing._renew_set(p_shard_group, p_batch_size, p_now);
    -- An audit row only when something was done (idle workers ask every second, per group).
    IF v_handled > 0 THEN
        PERFORM billing._audit('renew_in_shard', jsonb_build_object('worker', p_worker, 'shard_group', p_shard_group, 'batch_size', p_batch_size, 'now', p_now));
    END IF;
    RETURN v_handled;
END
$$;
COMMENT ON FUNCTION billing.renew_in_shard(text, integer, integer, timestamptz) IS
'create_due_invoices inside one leased shard group, in this transaction: trial notices, resumes and the renewals that need the per-row path (lifecycle_pending), claimed on the group''s shard (up to p_batch_size of each, oldest first, skipping rows another claimer holds) and handled by _renew_row; then up to p_batch_size other due subscriptions renewed by the renewal statement run set-based on the group''s own shards (_renew_batch_in_shard: invoices, credit, tax, period advance, cancellation at period end, events). Call it on the node holding the group (lease_shard_groups names it).
Returns how many it handled (0: nothing due in the group; call again to catch up missed periods); BL409 when the worker does not hold the group''s lease or the group is on another node, BL404 for an unknown group, BL422 for a bad batch size.';
