-- 86_console: what the operator console (`billing serve`, /console; docs/console.md) reads, its
-- sessions, and the one action of its own (replay an event). Every other action of the console is
-- an existing function of the SQL API, called by the console with the operator's key as actor.
-- Here: its sessions, what it may offer, MRR, the overview page and the replay; the pages of
-- customers, subscriptions, invoices and events: 84_console_records.
-- Re-applied after every migration: CREATE OR REPLACE only. Granted to billing_console (90_grants).
-- The reads return jsonb documents shaped for one page each, so a page is one call.

-- ---------------------------------------------------------------------------------------------
-- Sessions. The console authenticates the key itself with authenticate_api_key (the API's own
-- check), then opens a session for the key id it got back. Times are wall-clock.
-- ---------------------------------------------------------------------------------------------
DROP FUNCTION IF EXISTS billing.console_open_session(bytea, text, interval, timestamptz);
CREATE OR REPLACE FUNCTION billing.console_open_session(
    p_token_hash bytea, p_key_hash bytea, p_ttl interval, p_now timestamptz DEFAULT now())
RETURNS TABLE (key_id text, scopes text[], expires_at timestamptz)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_key billing.api_key;
    v_proof text := current_setting('billing.actor_proof', true);
BEGIN
    PERFORM billing._check_now(p_now);
    IF p_token_hash IS NULL OR length(p_token_hash) <> 32 THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = 'the session token hash must be a SHA-256 (32 bytes)';
    END IF;
    IF p_ttl IS NULL OR p_ttl < interval '1 minute' OR p_ttl > interval '7 days' THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = 'a console session lasts between 1 minute and 7 days';
    END IF;
    -- The key itself (its SHA-256), never its public id: a session is opened only by whoever
    -- holds the secret (issue 27, finding 6).
    SELECT * INTO v_key FROM billing.api_key k WHERE k.key_hash = p_key_hash AND k.revoked_at IS NULL;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'BL404', MESSAGE = 'unknown or revoked API key';
    END IF;
    IF NOT v_key.scopes && ARRAY['admin', 'subscriptions:read']::text[] THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = 'the console needs a key with the admin or subscriptions:read scope';
    END IF;
    -- audited as the key just proven (and the caller's own proof, if any, put back)
    PERFORM set_config('billing.actor_proof', 'key:' || encode(p_key_hash, 'hex'), true);
    PERFORM billing._audit('console_open_session', jsonb_build_object('key_id', v_key.id, 'ttl', p_ttl, 'now', p_now));
    PERFORM set_config('billing.actor_proof', coalesce(v_proof, ''), true);
    -- Forget sessions that ended more than a day ago (a few at a time; the index keeps it cheap).
    DELETE FROM billing.console_session s
     WHERE s.token_hash = ANY (ARRAY(SELECT o.token_hash FROM billing.console_session o
                                      WHERE o.expires_at < p_now - interval '1 day' LIMIT 100));
    RETURN QUERY
    INSERT INTO billing.console_session (token_hash, key_id, created_at, expires_at)
    VALUES (p_token_hash, v_key.id, p_now, p_now + p_ttl)
    RETURNING key_id, v_key.scopes, expires_at;
END
$$;
COMMENT ON FUNCTION billing.console_open_session(bytea, bytea, interval, timestamptz) IS
'Opens a console session for the API key whose SHA-256 is p_key_hash (the key itself, checked here: its public id is not enough) until p_now + p_ttl; only the SHA-256 of the browser''s token is stored; audited as that key.
Returns the key id, its scopes and the expiry; BL404 for an unknown or revoked key, BL422 for a key without admin or subscriptions:read, a bad hash or a ttl outside 1 minute..7 days.';

CREATE OR REPLACE FUNCTION billing.console_session(p_token_hash bytea, p_now timestamptz DEFAULT now())
RETURNS TABLE (key_id text, scopes text[], expires_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
    SELECT billing._check_now(p_now);
    SELECT s.key_id, k.scopes, s.expires_at
      FROM billing.console_session s
      JOIN billing.api_key k ON k.id = s.key_id
     WHERE s.token_hash = p_token_hash
       AND s.closed_at IS NULL AND s.expires_at > p_now
       AND k.revoked_at IS NULL
$$;
COMMENT ON FUNCTION billing.console_session(bytea, timestamptz) IS
'The open session whose token hashes to p_token_hash: not logged out, not expired at p_now, its key not revoked.
Returns its key id, the key''s current scopes and the expiry, or no row.';

CREATE OR REPLACE FUNCTION billing.console_close_session(p_token_hash bytea, p_now timestamptz DEFAULT now())
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM billing._audit('console_close_session', jsonb_build_object('now', p_now));
    PERFORM billing._check_now(p_now);
    UPDATE billing.console_session SET closed_at = p_now WHERE token_hash = p_token_hash AND closed_at IS NULL;
    RETURN FOUND;
END
$$;
COMMENT ON FUNCTION billing.console_close_session(bytea, timestamptz) IS
'Logs a console session out (the token is useless from then on).
Returns whether an open session was closed.';

-- ---------------------------------------------------------------------------------------------
-- What the console may offer: the named functions that exist and that the login may execute,
-- with their input arguments, so an action appears the day its function lands.
-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION billing.console_functions(p_names text[])
RETURNS TABLE (name text, arg_names text[], arg_types text[], required integer)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
    SELECT p.proname::text,
           coalesce(p.proargnames[1:p.pronargs], ARRAY[]::text[]),
           ARRAY(SELECT format_type(t, NULL) FROM unnest(p.proargtypes::oid[]) t),
           p.pronargs - p.pronargdefaults
      FROM pg_catalog.pg_proc p
     WHERE p.pronamespace = 'billing'::regnamespace
       AND p.proname = ANY (p_names)
       AND p.prokind = 'f'
       AND pg_catalog.has_function_privilege(session_user, p.oid, 'EXECUTE')
     ORDER BY p.proname, p.pronargs DESC
$$;
COMMENT ON FUNCTION billing.console_functions(text[]) IS
'Of the given function names, those that exist in schema billing and that the login (session_user) may execute, with their input argument names and types and how many arguments have no default (every overload, the longest first).
Returns one row per function; reads only the catalog.';

-- ---------------------------------------------------------------------------------------------
-- Monthly recurring revenue: the reports' one figure (billing._mrr_points, 75_reports.sql), per
-- currency, never summed across currencies. (The console once computed its own, by plan prices and a
-- mean month: its helpers are gone.)
-- ---------------------------------------------------------------------------------------------
DROP FUNCTION IF EXISTS billing._monthly_factor(text, integer);
DROP FUNCTION IF EXISTS billing._span_monthly_factor(timestamptz, timestamptz);

CREATE OR REPLACE FUNCTION billing.console_mrr(p_now timestamptz DEFAULT now(), p_days integer DEFAULT 30)
RETURNS TABLE (currency text, at timestamptz, mrr bigint)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_first  timestamptz;
    v_points timestamptz[];
BEGIN
    PERFORM billing._check_now(p_now);
    PERFORM billing._check_between('days', p_days, 1, 366);
    v_first := p_now - make_interval(days => p_days);
    -- The report's figure (billing._mrr_totals: _mrr_points' summed, kept by the engine's writes,
    -- 76_mrr_aggregate.sql; docs/reports.md) at p_now and at the end of each of
    -- the p_days days before (point k at v_first + k days), per currency, rounded to the minor unit.
    SELECT array_agg(v_first + make_interval(days => k) ORDER BY k) || p_now INTO v_points
      FROM generate_series(0, p_days - 1) k;
    RETURN QUERY
    WITH per_point AS (
        SELECT t.currency, t.at, t.mrr FROM billing._mrr_totals(v_points) t
    ), currencies AS (
        SELECT DISTINCT pp.currency FROM per_point pp WHERE pp.mrr <> 0
    )
    SELECT c.currency, g.at, round(coalesce(pp.mrr, 0))::bigint
      FROM currencies c
     CROSS JOIN unnest(v_points) g(at)
      LEFT JOIN per_point pp ON pp.currency = c.currency AND pp.at = g.at
     ORDER BY 1, 2;
END
$$;
COMMENT ON FUNCTION billing.console_mrr(timestamptz, integer) IS
'Monthly recurring revenue per currency, the reports'' figure (billing._mrr_points: net of discounts, seats and included tax, 0 paused, a change counted from its instant, a reverted upgrade never): at p_now and at the end of each of the last p_days days (1..366).
Returns (currency, at, mrr in minor units), ordered; never summed across currencies.';

-- ---------------------------------------------------------------------------------------------
-- The overview page: one document, refreshed every few seconds.
--
-- Its counts come from billing.overview_count (kept by the engine's own writes: migration 0310,
-- 70_stats.sql) where it is kept, so the page costs the same at 5,000,000 subscriptions as at 50
-- (bench/scale); on Citus, where it is not, from the rows. The rest reads ranges of partial indexes
-- bounded by time: renewals still due today and overdue (subscription_due_idx), charges due now
-- (invoice_chargeable_idx), the gateway's last hour, the outbox. Both ways give the same figures
-- (db/tests/861_console_counts.sql compares them after every kind of write):
--   renewals.renewed_today   RENEWAL invoices due on p_now's UTC day
--   dunning                  the invoices due on the 30 UTC days ending with p_now's ('since': the first)
-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION billing._console_overview(p_now timestamptz, p_count_rows boolean)
RETURNS jsonb
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_day_start timestamptz := date_trunc('day', p_now, 'UTC');
    -- the last instant of p_now's UTC day (a renewal due at the next midnight is tomorrow's)
    v_day_end   timestamptz := date_trunc('day', p_now, 'UTC') + interval '1 day' - interval '1 microsecond';
    v_today     date := (p_now AT TIME ZONE 'UTC')::date;
    v_since     date := (p_now AT TIME ZONE 'UTC')::date - 29;
    v_subs      jsonb;
    v_renewed   bigint;
    v_open      bigint;
    v_funnel    jsonb;
BEGIN
    IF p_count_rows THEN
        SELECT jsonb_build_object(
                   'active', count(*) FILTER (WHERE s.status = 'ACTIVE'),
                   'past_due', count(*) FILTER (WHERE s.status = 'PAST_DUE'),
                   'canceled', count(*) FILTER (WHERE s.status = 'CANCELED'),
                   'canceling', count(*) FILTER (WHERE s.status <> 'CANCELED' AND s.cancel_at_period_end))
          INTO v_subs FROM billing.subscription s;
        SELECT count(*) INTO v_renewed FROM billing.invoice i
         WHERE i.kind = 'RENEWAL' AND i.due_at >= v_day_start AND i.due_at < v_day_start + interval '1 day';
        SELECT count(*) INTO v_open FROM billing.invoice i WHERE i.status = 'OPEN';
        SELECT jsonb_build_object(
                   'since', v_since::timestamp AT TIME ZONE 'UTC',
                   'invoices', count(*),
                   'paid_first_try', count(*) FILTER (WHERE i.status = 'PAID' AND i.attempt_count = 0),
                   'declined', count(*) FILTER (WHERE i.attempt_count > 0),
                   'in_dunning', count(*) FILTER (WHERE i.status = 'OPEN' AND i.attempt_count > 0),
                   'recovered', count(*) FILTER (WHERE i.status = 'PAID' AND i.attempt_count > 0),
                   'failed', count(*) FILTER (WHERE i.status = 'FAILED'),
                   'voided', count(*) FILTER (WHERE i.status = 'VOID' AND i.attempt_count > 0))
          INTO v_funnel FROM billing.invoice i
         WHERE i.due_at >= v_since::timestamp AT TIME ZONE 'UTC' AND i.due_at < v_day_start + interval '1 day';
    ELSE
        -- The deltas summed per key in one read (folded first when there are many).
        PERFORM billing._overview_count_fold()
           WHERE (SELECT count(*) FROM billing.overview_count) > 2000;
        WITH c AS (
            SELECT c.subject, c.status, c.flag, c.kind, c.due_day, sum(c.n) AS n
              FROM billing.overview_count c GROUP BY 1, 2, 3, 4, 5
        ), s AS (SELECT * FROM c WHERE c.subject = 'subscription'),
           f AS (SELECT * FROM c WHERE c.subject = 'invoice' AND c.due_day BETWEEN v_since AND v_today)
        SELECT (SELECT jsonb_build_object(
                    'active', coalesce(sum(s.n) FILTER (WHERE s.status = 'ACTIVE'), 0),
                    'past_due', coalesce(sum(s.n) FILTER (WHERE s.status = 'PAST_DUE'), 0),
                    'canceled', coalesce(sum(s.n) FILTER (WHERE s.status = 'CANCELED'), 0),
                    'canceling', coalesce(sum(s.n) FILTER (WHERE s.status <> 'CANCELED' AND s.flag), 0)) FROM s),
               (SELECT coalesce(sum(c.n), 0) FROM c
                 WHERE c.subject = 'invoice' AND c.kind = 'RENEWAL' AND c.due_day = v_today),
               (SELECT coalesce(sum(c.n), 0) FROM c WHERE c.subject = 'invoice' AND c.status = 'OPEN'),
               (SELECT jsonb_build_object(
                    'since', v_since::timestamp AT TIME ZONE 'UTC',
                    'invoices', coalesce(sum(f.n), 0),
                    'paid_first_try', coalesce(sum(f.n) FILTER (WHERE f.status = 'PAID' AND NOT f.flag), 0),
                    'declined', coalesce(sum(f.n) FILTER (WHERE f.flag), 0),
                    'in_dunning', coalesce(sum(f.n) FILTER (WHERE f.status = 'OPEN' AND f.flag), 0),
                    'recovered', coalesce(sum(f.n) FILTER (WHERE f.status = 'PAID' AND f.flag), 0),
                    'failed', coalesce(sum(f.n) FILTER (WHERE f.status = 'FAILED'), 0),
                    'voided', coalesce(sum(f.n) FILTER (WHERE f.status = 'VOID' AND f.flag), 0)) FROM f)
          INTO v_subs, v_renewed, v_open, v_funnel;
    END IF;
    RETURN jsonb_build_object(
        'now', p_now,
        'subscriptions', v_subs,
        -- "Due" is the renewal's own condition (32_due.sql, _due_renewal: a trial's end included),
        -- counted in two parts so each reads one partial index: ACTIVE and PAST_DUE on
        -- subscription_due_idx (index only), TRIALING (always lifecycle_pending) on
        -- subscription_lifecycle_due_idx.
        'renewals', jsonb_build_object(
            'renewed_today', v_renewed,
            'due_rest_of_today', (SELECT count(*) FROM billing.subscription s
                                   WHERE billing._due_renewal(s.status, s.current_period_end, v_day_end)
                                     AND s.current_period_end > p_now
                                     AND s.status IN ('ACTIVE', 'PAST_DUE'))
                                 + (SELECT count(*) FROM billing.subscription s
                                     WHERE billing._due_renewal(s.status, s.current_period_end, v_day_end)
                                       AND s.current_period_end > p_now
                                       AND s.status = 'TRIALING' AND s.lifecycle_pending),
            'overdue', (SELECT count(*) FROM billing.subscription s
                         WHERE billing._due_renewal(s.status, s.current_period_end, p_now)
                           AND s.status IN ('ACTIVE', 'PAST_DUE'))
                       + (SELECT count(*) FROM billing.subscription s
                           WHERE billing._due_renewal(s.status, s.current_period_end, p_now)
                             AND s.status = 'TRIALING' AND s.lifecycle_pending)),
        -- OPEN invoices due now and without a next attempt: two ranges of invoice_chargeable_idx;
        -- the ones scheduled later are the rest of the OPEN ones (the retries of every dunning).
        'charges', (SELECT jsonb_build_object(
                        'due_now', q.due_now,
                        'scheduled', v_open - q.due_now - q.unscheduled,
                        'open', v_open)
                      FROM (SELECT (SELECT count(*) FROM billing.invoice i
                                     WHERE i.status = 'OPEN' AND i.next_attempt_at <= p_now) AS due_now,
                                   (SELECT count(*) FROM billing.invoice i
                                     WHERE i.status = 'OPEN' AND i.next_attempt_at IS NULL) AS unscheduled) q),
        'gateway', (SELECT jsonb_build_object(
                        'claims_last_minute', count(*) FILTER (WHERE a.last_claimed_at > p_now - interval '1 minute'),
                        'claims_last_hour', count(*),
                        'results_last_hour', count(*) FILTER (WHERE a.result_at IS NOT NULL),
                        'declined_last_hour', count(*) FILTER (WHERE a.outcome = 'DECLINED'))
                      FROM billing.payment_attempt a
                     WHERE a.last_claimed_at > p_now - interval '1 hour' AND a.last_claimed_at <= p_now),
        'dunning', v_funnel,
        'outbox', (SELECT to_jsonb(o) FROM billing.outbox_stats(p_now) o));
END
$$;
COMMENT ON FUNCTION billing._console_overview(timestamptz, boolean) IS
'Private: the console overview''s document at p_now, its counts read from billing.overview_count, or (p_count_rows) counted from the rows of subscription and invoice; both give the same figures.
Returns the jsonb document of console_overview.';

CREATE OR REPLACE FUNCTION billing.console_overview(p_now timestamptz DEFAULT now())
RETURNS jsonb
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM billing._check_now(p_now);
    RETURN billing._console_overview(p_now, NOT billing._overview_counts_kept())
           || jsonb_build_object('counted', CASE WHEN billing._overview_counts_kept() THEN 'kept' ELSE 'rows' END);
END
$$;
COMMENT ON FUNCTION billing.console_overview(timestamptz) IS
'The console''s overview at p_now: subscriptions by status, renewals (due today and made, still due today, overdue), the charge queue (OPEN invoices due now / scheduled later), gateway claims in the last minute and hour, the dunning funnel of the invoices due in the 30 UTC days ending on p_now''s, and outbox_stats; counted: kept (billing.overview_count) or rows (Citus).
Returns one jsonb document; on a single node its counts are kept by the engine''s writes (the same figures as counting the rows), so it does not grow with the tables.';

-- ---------------------------------------------------------------------------------------------
-- Replay one event: back in the relay's queue, with the same CloudEvents id and payload, so it
-- reaches Kafka again (consumers dedupe on the id). Outbound webhooks are not sent again.
-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION billing.replay_outbox_event(p_outbox_id bigint, p_now timestamptz DEFAULT now())
RETURNS TABLE (id bigint, event_id uuid, status text)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_event billing.outbox_event;
    v_customer_id bigint;
    v_note text;
BEGIN
    PERFORM billing._audit('replay_outbox_event', jsonb_build_object('outbox_id', p_outbox_id, 'now', p_now));
    PERFORM billing._check_now(p_now);
    -- The row by (customer_id, id): one shard on Citus.
    v_customer_id := (billing._outbox_event_customers(ARRAY[p_outbox_id]))[1];
    SELECT * INTO v_event FROM billing.outbox_event e WHERE e.customer_id = v_customer_id AND e.id = p_outbox_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'BL404',
            MESSAGE = format('outbox event %s does not exist (retention may have deleted it)', coalesce(p_outbox_id::text, 'NULL'));
    END IF;
    IF v_event.status = 'PENDING' THEN
        RAISE EXCEPTION USING ERRCODE = 'BL409', MESSAGE = format('outbox event %s is already waiting to be published', p_outbox_id);
    END IF;
    -- The note computed first (Citus allows no STABLE function in a distributed UPDATE's COALESCE).
    v_note := left(format('replay requested at %s (was %s%s)', billing._utc_text(p_now), v_event.status,
                          coalesce(', published ' || billing._utc_text(v_event.published_at), '')), 2000);
    UPDATE billing.outbox_event e
       SET status = 'PENDING', published_at = NULL, available_at = p_now, lease_until = NULL, attempts = 0,
           last_error = v_note
     WHERE e.customer_id = v_customer_id AND e.id = p_outbox_id;
    PERFORM pg_notify('billing_outbox', json_build_object('count', 1)::text);
    RETURN QUERY SELECT e.id, e.event_id, e.status FROM billing.outbox_event e
                  WHERE e.customer_id = v_customer_id AND e.id = p_outbox_id;
END
$$;
COMMENT ON FUNCTION billing.replay_outbox_event(bigint, timestamptz) IS
'Puts one PUBLISHED or DEAD event back in the relay''s queue (PENDING, due at p_now, same id and payload), so the relay publishes it again in order; wakes the relay.
Returns the event''s outbox id, CloudEvents id and new status; BL404 for an unknown (or already deleted) event, BL409 when it is already PENDING.';
