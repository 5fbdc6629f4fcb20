-- 73_usage_cursor: what the usage rating (72_usage_rating) follows and when each subscription is
-- due (docs/usage.md "What is followed"): the customer's usage lock shared with the ingestion, the
-- cursors (billing.usage_cursor) made for every subscription on a plan with usage charges, where
-- each starts, its due_at moved by whatever moves a period, and the due scan.
-- Re-applied after every migration: CREATE OR REPLACE only.

-- The advisory lock that orders the ingestion (shared, per customer) and the rating (exclusive):
-- an event stored while its span is rated either is read by the rating or finds the cursor moved
-- past it and marks the span late.
CREATE OR REPLACE FUNCTION billing._usage_lock_key(p_customer_id bigint)
RETURNS integer
LANGUAGE sql IMMUTABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
    SELECT hashint8(p_customer_id)
$$;
COMMENT ON FUNCTION billing._usage_lock_key(bigint) IS
'Private: the second key of the customer''s usage advisory lock (the first is 29): shared by the ingestion, exclusive by the rating.
Returns the key.';

-- Where a subscription's rating starts (docs/usage.md "What is followed"): the start of the period
-- that was current when the first charge of its plan was made (p_since: that instant; NULL: p_now),
-- or its first period's start when it began later, never earlier: a charge added to a plan applies
-- from the period then current, not back to the subscription's first period. The period starts
-- known are its INITIAL, RENEWAL and PLAN_CHANGE invoices' and its current period's (an imported
-- period has no invoice: followed while current, upsert_plan_charge and import_subscriptions
-- follow at once). A canceled subscription whose service ended by then is followed as finished
-- (nothing of it is rated, but late events).
CREATE OR REPLACE FUNCTION billing._usage_start(p_sub billing.subscription, p_since timestamptz,
                                                OUT rated_until timestamptz, OUT finished boolean, OUT due_at timestamptz)
RETURNS record
LANGUAGE plpgsql STABLE  -- PL/pgSQL: Citus cannot plan a SQL function over its tables with parameters
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    SELECT CASE WHEN e.ended <= p_since THEN e.ended ELSE st.start_at END,
           coalesce(e.ended <= p_since, false)
      INTO rated_until, finished
      FROM (SELECT coalesce(max(x.b) FILTER (WHERE x.b <= p_since), min(x.b)) AS start_at
              FROM (SELECT i.period_start AS b FROM billing.invoice i
                     WHERE i.customer_id = p_sub.customer_id AND i.subscription_id = p_sub.id
                       AND i.kind IN ('INITIAL', 'RENEWAL', 'PLAN_CHANGE')
                    UNION ALL SELECT p_sub.current_period_start) x) st,
           (SELECT CASE WHEN p_sub.status = 'CANCELED'
                        THEN least(coalesce(p_sub.canceled_at, p_sub.current_period_end), p_sub.current_period_end) END AS ended) e;
    due_at := billing._usage_due_at(p_sub, rated_until, finished);
END
$$;
COMMENT ON FUNCTION billing._usage_start(billing.subscription, timestamptz) IS
'Private: where the usage rating of a subscription starts when it is first followed: the start of its period current at p_since (when its plan''s first charge was made), or its first period''s when later; a canceled one whose service ended by p_since: its end, finished.
Returns (rated_until, finished, due_at).';

-- The earliest instant a cursor's rating can be due (usage_cursor.due_at, before the grace): when
-- its subscription is rated up to its current period, that period's end (the renewal moves the
-- period there; anything else that moves it calls _usage_touch); else (a period or a service
-- ended and not rated) the instant rated up to, i.e. due now; NULL when finished (its late events
-- are found by usage_cursor_late_idx).
CREATE OR REPLACE FUNCTION billing._usage_due_at(p_sub billing.subscription, p_rated_until timestamptz, p_finished boolean)
RETURNS timestamptz
LANGUAGE sql IMMUTABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
    SELECT CASE WHEN p_finished THEN NULL
                WHEN p_sub.status <> 'CANCELED' AND p_rated_until >= p_sub.current_period_start THEN p_sub.current_period_end
                ELSE p_rated_until END
$$;
COMMENT ON FUNCTION billing._usage_due_at(billing.subscription, timestamptz, boolean) IS
'Private: the earliest instant the usage rating of a subscription rated up to p_rated_until can be due (usage_cursor.due_at): its current period''s end when rated up to its current period, else p_rated_until; NULL when finished.
Returns the instant.';

-- What moves a subscription's period or ends its service otherwise than the renewal at its period's
-- end (a plan change, a cancellation, dunning''s end, a period started by a resume, a trial''s end
-- or a reactivation) brings its cursor's due_at down to that instant: the rating's due scan finds
-- it from then on (usage_cursor_due_idx). No cursor, or a finished one: nothing.
CREATE OR REPLACE FUNCTION billing._usage_touch(p_customer_id bigint, p_subscription_id bigint, p_now timestamptz)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    UPDATE billing.usage_cursor u SET due_at = p_now
     WHERE u.customer_id = p_customer_id AND u.subscription_id = p_subscription_id
       AND NOT u.finished AND u.due_at > p_now;
END
$$;
COMMENT ON FUNCTION billing._usage_touch(bigint, bigint, timestamptz) IS
'Private: brings the usage cursor''s due_at of a subscription down to p_now (its period moved or its service ended then), so the rating''s due scan looks at it; none or finished: nothing.
Returns nothing.';

-- A reactivation (reactivate_subscription: a subscription canceled by dunning, live again) reopens
-- a cursor the rating had finished (rated to the cancellation): rated_until stays at the
-- cancellation, so the next rating rates the time from there to the new period's start (usage
-- between the cancellation and the reactivation is billed, as when the reactivation comes before
-- the rating reached the cancellation: one rule whichever came first), then each new period as
-- any live subscription's. Late events marked meanwhile stay marked. Not finished, or no cursor:
-- nothing (_usage_touch, called by _start_period, brought its due_at down already).
CREATE OR REPLACE FUNCTION billing._usage_reopen(p_sub billing.subscription, p_now timestamptz)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    UPDATE billing.usage_cursor u
       SET finished = false, due_at = billing._usage_due_at(p_sub, u.rated_until, false), updated_at = p_now
     WHERE u.customer_id = p_sub.customer_id AND u.subscription_id = p_sub.id AND u.finished;
END
$$;
COMMENT ON FUNCTION billing._usage_reopen(billing.subscription, timestamptz) IS
'Private: a reactivated subscription (p_sub, live again) whose usage cursor was finished (rated to its cancellation) is followed again from there: due at once (its time from the cancellation to the new period is rated next, then every period).
Returns nothing.';

-- A subscription starts to be followed by the rating (its cursor, from _usage_start) when its plan
-- has usage charges. Called by change_plan before a change (old or new plan charged: from the
-- period the old plan's first charge was made in, else the current one), and on Citus by
-- _usage_follow_plans for each subscription. Idempotent.
CREATE OR REPLACE FUNCTION billing._usage_follow(p_customer_id bigint, p_subscription_id bigint, p_now timestamptz)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_sub   billing.subscription;
    v_since timestamptz;
    v_start record;
BEGIN
    IF EXISTS (SELECT 1 FROM billing.usage_cursor u WHERE u.customer_id = p_customer_id AND u.subscription_id = p_subscription_id) THEN
        -- (change_plan calls it before a change: the change may move the period)
        PERFORM billing._usage_touch(p_customer_id, p_subscription_id, p_now);
        RETURN;
    END IF;
    SELECT * INTO v_sub FROM billing.subscription s WHERE s.customer_id = p_customer_id AND s.id = p_subscription_id;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    SELECT coalesce(min(c.created_at), p_now) INTO v_since FROM billing.plan_charge c WHERE c.plan_id = v_sub.plan_id;
    -- (the subscription read first, then passed: on Citus a function over a distributed row inside
    -- a query of one shard would be sent to its worker)
    v_start := billing._usage_start(v_sub, least(v_since, p_now));
    INSERT INTO billing.usage_cursor (customer_id, subscription_id, rated_until, finished, due_at, updated_at)
    VALUES (p_customer_id, p_subscription_id, v_start.rated_until, v_start.finished, least(v_start.due_at, p_now), p_now)
    ON CONFLICT ON CONSTRAINT usage_cursor_pkey DO NOTHING;
END
$$;
COMMENT ON FUNCTION billing._usage_follow(bigint, bigint, timestamptz) IS
'Private: makes the usage cursor of a subscription if it has none, from _usage_start (the period current when its plan''s first charge was made, else the current one).
Returns nothing.';

-- The subscriptions the rating follows: every subscription on a plan with usage charges (p_plan_id:
-- on that plan only; NULL: every charged plan) gets its cursor (as _usage_follow, set-based; a
-- change away from such a plan keeps its cursor). Called by every rate_usage, and by
-- upsert_plan_charge and import_subscriptions so that the period current then is the first rated.
CREATE OR REPLACE FUNCTION billing._usage_follow_plans(p_plan_id bigint, p_now timestamptz)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_sub record;
BEGIN
    IF billing._distributed('billing.customer') THEN
        -- on Citus one subscription at a time (each a query of its own shard group)
        FOR v_sub IN
            SELECT s.customer_id, s.id FROM billing.subscription s
             WHERE s.plan_id IN (SELECT c.plan_id FROM billing.plan_charge c WHERE p_plan_id IS NULL OR c.plan_id = p_plan_id)
               AND NOT EXISTS (SELECT 1 FROM billing.usage_cursor u WHERE u.customer_id = s.customer_id AND u.subscription_id = s.id)
             ORDER BY s.customer_id, s.id
        LOOP
            PERFORM billing._usage_follow(v_sub.customer_id, v_sub.id, p_now);
        END LOOP;
        RETURN;
    END IF;
    INSERT INTO billing.usage_cursor (customer_id, subscription_id, rated_until, finished, due_at, updated_at)
    SELECT s.customer_id, s.id, (st.x).rated_until, (st.x).finished, (st.x).due_at, p_now
      FROM billing.subscription s
      JOIN (SELECT c.plan_id, min(c.created_at) AS since FROM billing.plan_charge c
             WHERE p_plan_id IS NULL OR c.plan_id = p_plan_id GROUP BY c.plan_id) c ON c.plan_id = s.plan_id
     CROSS JOIN LATERAL (SELECT billing._usage_start(s, least(c.since, p_now)) AS x) st
     WHERE NOT EXISTS (SELECT 1 FROM billing.usage_cursor u WHERE u.customer_id = s.customer_id AND u.subscription_id = s.id)
     ORDER BY s.customer_id, s.id
     -- The cursor's foreign key locks each subscription FOR KEY SHARE, which waits for a FOR UPDATE
     -- holder (_lock_subscription: a payment result, a change, a cancellation). Held here first and
     -- skipped when held elsewhere (followed at the next call, from the same start): waiting for
     -- them, in key order, while holding the subscriptions and cursors before, deadlocked with a
     -- transaction locking two of them in another order (found by the demo: a rating's follow
     -- against the charge workers).
       FOR KEY SHARE OF s SKIP LOCKED
    ON CONFLICT ON CONSTRAINT usage_cursor_pkey DO NOTHING;
END
$$;
COMMENT ON FUNCTION billing._usage_follow_plans(bigint, timestamptz) IS
'Private: makes the usage cursor (from _usage_start) of every subscription on a plan with usage charges (p_plan_id: that plan only) that has none: one statement, or one subscription at a time on Citus.
Returns nothing.';

CREATE OR REPLACE FUNCTION billing._usage_follow_all(p_now timestamptz)
RETURNS void
LANGUAGE sql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$ SELECT billing._usage_follow_plans(NULL, p_now) $$;
COMMENT ON FUNCTION billing._usage_follow_all(timestamptz) IS
'Private: _usage_follow_plans for every charged plan.
Returns nothing.';

-- The subscriptions whose rating is due at p_now, at most p_batch_size: a live one whose period
-- ended p_grace ago and is not rated, a canceled one whose service ended p_grace ago and is not
-- rated to its end, a canceled one rated to its end with late events. Read through the cursors'
-- due_at (usage_cursor_due_idx: only the cursors whose earliest due instant is behind the grace,
-- in that order) and the finished ones with late events (usage_cursor_late_idx), never every
-- cursor. On one PostgreSQL their subscriptions are locked (FOR NO KEY UPDATE SKIP LOCKED): rating
-- workers running at once each take subscriptions no other holds, and a rating locks a
-- subscription before its cursor, as every path that changes a subscription then touches its
-- cursor (_usage_touch): no lock order between them can deadlock. On Citus (no row locks in a query
-- over several shards) in key order, unlocked: the rating takes each customer's usage lock, tried.
CREATE OR REPLACE FUNCTION billing._usage_due(p_batch_size integer, p_now timestamptz, p_grace interval)
RETURNS TABLE (customer_id bigint, subscription_id bigint)
LANGUAGE plpgsql VOLATILE  -- PL/pgSQL: Citus cannot plan a SQL function over its tables with parameters
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_found bigint;
BEGIN
    IF billing._distributed('billing.customer') THEN
        RETURN QUERY
        SELECT u.customer_id, u.subscription_id FROM billing.usage_cursor u
          JOIN billing.subscription s ON s.customer_id = u.customer_id AND s.id = u.subscription_id
         WHERE (NOT u.finished AND u.due_at <= p_now - p_grace
                AND ((s.status <> 'CANCELED' AND u.rated_until < s.current_period_start AND s.current_period_start + p_grace <= p_now)
                     OR (s.status = 'CANCELED'
                         AND least(coalesce(s.canceled_at, s.current_period_end), s.current_period_end) + p_grace <= p_now)))
            OR (u.finished AND u.late_since IS NOT NULL AND s.status = 'CANCELED')
         ORDER BY u.customer_id, u.subscription_id
         LIMIT p_batch_size;
        RETURN;
    END IF;
    RETURN QUERY
    SELECT u.customer_id, u.subscription_id FROM billing.usage_cursor u
      JOIN billing.subscription s ON s.customer_id = u.customer_id AND s.id = u.subscription_id
     WHERE NOT u.finished AND u.due_at <= p_now - p_grace
       AND ((s.status <> 'CANCELED' AND u.rated_until < s.current_period_start AND s.current_period_start + p_grace <= p_now)
            OR (s.status = 'CANCELED'
                AND least(coalesce(s.canceled_at, s.current_period_end), s.current_period_end) + p_grace <= p_now))
     ORDER BY u.due_at
     LIMIT p_batch_size
       FOR NO KEY UPDATE OF s SKIP LOCKED;
    GET DIAGNOSTICS v_found = ROW_COUNT;
    IF v_found < p_batch_size THEN
        RETURN QUERY
        SELECT u.customer_id, u.subscription_id FROM billing.usage_cursor u
          JOIN billing.subscription s ON s.customer_id = u.customer_id AND s.id = u.subscription_id
         WHERE u.finished AND u.late_since IS NOT NULL AND s.status = 'CANCELED'
         ORDER BY u.customer_id, u.subscription_id
         LIMIT p_batch_size - v_found
           FOR NO KEY UPDATE OF s SKIP LOCKED;
    END IF;
END
$$;
COMMENT ON FUNCTION billing._usage_due(integer, timestamptz, interval) IS
'Private: the subscriptions whose usage rating is due at p_now (a period or a canceled service ended p_grace ago and not rated; a finished one with late events), read through the cursors'' due_at; on one PostgreSQL their subscriptions locked, skipping those another rating (or any change) holds.
Returns up to p_batch_size (customer_id, subscription_id).';
