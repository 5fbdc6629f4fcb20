-- 86_console: what the operator console (`billing serve`, /console; docs/console.md) reads, its
-- sessions, and the one action of its own (replay an event). Every other action of the console is
-- an existing function of the SQL API, called by the console with the operator's key as actor.
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
-- Customers. A text search is a search by words through customer_search_idx (migration 0311, a GIN
-- index of the name's and the email's words): each word of the query is a word of the name or of
-- the email (the whole address, its part before the @ or its domain), the last one may be the start
-- of a word (what the operator is still typing). Never a scan of every customer (issue 27 finding
-- 2); the row is shown as jsonb.
-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION billing._customer_search_query(p_query text)
RETURNS tsquery
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    -- The query's words as the index's parser reads them ('simple': lower case, no stemming), in
    -- their order, each one whole but the last, which is a prefix; NULL when there is no word.
    SELECT string_agg('''' || replace(replace(w.lexeme, '\', '\\'), '''', '''''') || '''' || CASE WHEN w.last THEN ':*' ELSE '' END, ' & ' ORDER BY w.pos)::tsquery
      FROM (SELECT t.lexeme, t.positions[1] AS pos, t.positions[1] = max(t.positions[1]) OVER () AS last
              FROM unnest(to_tsvector('simple'::regconfig, coalesce(p_query, ''))) t) w
$$;
COMMENT ON FUNCTION billing._customer_search_query(text) IS
'Private: the console''s customer search as a tsquery: the words of p_query (the simple configuration), all of them, the last one as a prefix.
Returns the tsquery, NULL when p_query has no word.';

CREATE OR REPLACE FUNCTION billing.console_customers(p_query text, p_limit integer DEFAULT 50)
RETURNS TABLE (id bigint, customer jsonb, subscriptions bigint, live_subscriptions bigint, open_invoices bigint)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
-- Each search planned with its own words: a rare word through the index, a common one by walking
-- the customers in id order until p_limit match (a cached generic plan cannot tell them apart).
SET plan_cache_mode = force_custom_plan
AS $$
#variable_conflict use_column
DECLARE
    v_query text := nullif(btrim(coalesce(p_query, '')), '');
    v_words tsquery;
    v_ids   bigint[];
BEGIN
    PERFORM billing._check_between('limit', p_limit, 1, 500);
    PERFORM billing._check_text('a search', coalesce(v_query, '-'), 200);
    -- The page's customers first, then their counts grouped by customer_id and joined on it: on
    -- Citus each part runs in the shards of these customers (a correlated subquery per row could
    -- not be planned there).
    IF v_query IS NULL THEN
        v_ids := ARRAY(SELECT c.id FROM billing.customer c ORDER BY c.id LIMIT p_limit);
    ELSIF v_query ~ '^[0-9]{1,18}$' THEN
        v_ids := ARRAY(SELECT c.id FROM billing.customer c WHERE c.id = v_query::bigint);
    ELSE
        v_words := billing._customer_search_query(v_query);
        -- The expression of customer_search_idx (migration 0311), word for word.
        v_ids := ARRAY(
            SELECT c.id FROM billing.customer c
             WHERE to_tsvector('simple'::regconfig,
                               coalesce(c.name, '') || ' ' || coalesce(c.email, '') || ' '
                               || replace(coalesce(c.email, ''), '@', ' ')) @@ v_words
             ORDER BY c.id
             LIMIT p_limit);
    END IF;
    RETURN QUERY
    SELECT c.id, to_jsonb(c), coalesce(s.n, 0), coalesce(s.live, 0), coalesce(i.open, 0)
      FROM billing.customer c
      LEFT JOIN (SELECT x.customer_id, count(*) AS n, count(*) FILTER (WHERE x.status <> 'CANCELED') AS live
                   FROM billing.subscription x WHERE x.customer_id = ANY (v_ids) GROUP BY x.customer_id) s
        ON s.customer_id = c.id
      LEFT JOIN (SELECT y.customer_id, count(*) AS open
                   FROM billing.invoice y WHERE y.customer_id = ANY (v_ids) AND y.status = 'OPEN' GROUP BY y.customer_id) i
        ON i.customer_id = c.id
     WHERE c.id = ANY (v_ids)
     ORDER BY c.id;
END
$$;
COMMENT ON FUNCTION billing.console_customers(text, integer) IS
'Customers matching p_query: its id when it is a number, else by words (each word of the query a word of the name or the email, whole address, local part or domain; the last word may be a word''s start; case-insensitive); all (by id) when empty.
Returns up to p_limit (1..500) rows: id, the customer row as jsonb, subscriptions, live (not canceled) ones, OPEN invoices.';

CREATE OR REPLACE FUNCTION billing._console_secretless(p_doc jsonb)
RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT coalesce(jsonb_object_agg(k, v), '{}'::jsonb)
      FROM jsonb_each(p_doc) e(k, v)
     WHERE k !~* '(secret|token|password|hash|cvc|cvv)' AND k !~* '(^|_)pan($|_)'
$$;
COMMENT ON FUNCTION billing._console_secretless(jsonb) IS
'Private: a row as jsonb without the keys that may hold a secret (secret, token, password, hash, cvc, cvv, pan).
Returns the filtered object.';

CREATE OR REPLACE FUNCTION billing.console_customer(p_customer_id bigint, p_limit integer DEFAULT 200)
RETURNS jsonb
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_customer jsonb;
    v_sub_ids  bigint[];
    v_inv_ids  bigint[];
    v_methods  jsonb;
BEGIN
    PERFORM billing._check_between('limit', p_limit, 1, 2000);
    SELECT to_jsonb(c) INTO v_customer FROM billing.customer c WHERE c.id = p_customer_id;
    IF v_customer IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'BL404', MESSAGE = format('customer %s does not exist', coalesce(p_customer_id::text, 'NULL'));
    END IF;
    v_sub_ids := ARRAY(SELECT s.id FROM billing.subscription s WHERE s.customer_id = p_customer_id);
    v_inv_ids := ARRAY(SELECT i.id FROM billing.invoice i WHERE i.subscription_id = ANY (v_sub_ids));
    -- Payment methods live in a table that may not exist yet (or ever): read it when it does.
    IF to_regclass('billing.payment_method') IS NOT NULL THEN
        EXECUTE format('SELECT coalesce(jsonb_agg(billing._console_secretless(to_jsonb(m))), ''[]'') '
                       'FROM %s m WHERE m.customer_id = $1', to_regclass('billing.payment_method'))
           INTO v_methods USING p_customer_id;
    END IF;
    RETURN jsonb_build_object(
        'customer', v_customer,
        'subscriptions', (SELECT coalesce(jsonb_agg(to_jsonb(s) || jsonb_build_object('plan_code', p.code,
                                                        'price_amount', p.price_amount, 'currency', p.currency)
                                                    ORDER BY s.id DESC), '[]')
                            FROM billing.subscription s JOIN billing.plan p ON p.id = s.plan_id
                           WHERE s.id = ANY (v_sub_ids)),
        'invoices', (SELECT coalesce(jsonb_agg(to_jsonb(i) ORDER BY i.id DESC), '[]')
                       FROM (SELECT * FROM billing.invoice i WHERE i.id = ANY (v_inv_ids)
                              ORDER BY i.id DESC LIMIT p_limit) i),
        'credit_balances', (SELECT coalesce(jsonb_agg(to_jsonb(b) ORDER BY b.currency), '[]')
                              FROM billing.credit_balance b WHERE b.customer_id = p_customer_id),
        'credit_ledger', (SELECT coalesce(jsonb_agg(to_jsonb(e) ORDER BY e.id DESC), '[]')
                            FROM (SELECT * FROM billing.credit_entry e WHERE e.customer_id = p_customer_id
                                   ORDER BY e.id DESC LIMIT p_limit) e),
        'payment_methods', v_methods,
        'timeline', (SELECT coalesce(jsonb_agg(t ORDER BY t.at DESC, t.seq DESC), '[]')
                       FROM (SELECT * FROM (
                                 SELECT o.created_at AS at, o.id AS seq, 'event' AS kind, o.event_type AS what,
                                        o.aggregate_type || '/' || o.aggregate_id AS subject, o.status AS detail,
                                        o.id AS ref
                                   FROM billing.outbox_event o
                                  WHERE (o.aggregate_type = 'subscription' AND o.aggregate_id = ANY (v_sub_ids))
                                     OR (o.aggregate_type = 'invoice' AND o.aggregate_id = ANY (v_inv_ids))
                                 UNION ALL
                                 SELECT a.first_claimed_at, a.id, 'charge', 'charge attempt ' || a.attempt_number,
                                        'invoice/' || a.invoice_id,
                                        coalesce(a.outcome, 'no result yet') || coalesce(' ' || a.failure_reason, '')
                                            || ' ' || a.amount || ' ' || a.currency,
                                        a.id
                                   FROM billing.payment_attempt a WHERE a.invoice_id = ANY (v_inv_ids)
                                 UNION ALL
                                 SELECT e.created_at, e.id, 'credit', 'credit ' || lower(e.reason),
                                        coalesce('invoice/' || e.invoice_id, 'subscription/' || e.subscription_id),
                                        e.amount || ' ' || e.currency, e.id
                                   FROM billing.credit_entry e WHERE e.customer_id = p_customer_id
                             ) u ORDER BY u.at DESC, u.seq DESC LIMIT p_limit) t)
    );
END
$$;
COMMENT ON FUNCTION billing.console_customer(bigint, integer) IS
'One customer for the console: the row, subscriptions (with plan code and price), the latest p_limit invoices, credit balances and ledger, payment methods when the table exists (keys that may hold secrets left out), and a timeline of its events, charge attempts and credit entries, newest first.
Returns one jsonb document; BL404 for an unknown customer.';

CREATE OR REPLACE FUNCTION billing.console_subscription(p_subscription_id bigint)
RETURNS jsonb
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_sub  billing.subscription;
    v_plan billing.plan;
    v_customer_id bigint := billing._subscription_customer(p_subscription_id);
BEGIN
    -- Every read by (customer_id, ...): one shard group on Citus.
    SELECT * INTO v_sub FROM billing.subscription WHERE customer_id = v_customer_id AND id = p_subscription_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'BL404', MESSAGE = format('subscription %s does not exist', coalesce(p_subscription_id::text, 'NULL'));
    END IF;
    SELECT * INTO v_plan FROM billing.plan WHERE id = v_sub.plan_id;
    RETURN jsonb_build_object(
        'subscription', to_jsonb(v_sub),
        'plan', to_jsonb(v_plan),
        'scheduled_plan_code', (SELECT p.code FROM billing.plan p WHERE p.id = v_sub.scheduled_plan_id),
        'invoices', (SELECT coalesce(jsonb_agg(to_jsonb(i) ORDER BY i.period_start DESC, i.id DESC), '[]')
                       FROM billing.invoice i WHERE i.customer_id = v_customer_id AND i.subscription_id = p_subscription_id),
        'attempts', (SELECT coalesce(jsonb_agg(to_jsonb(a) ORDER BY a.id DESC), '[]')
                       FROM billing.payment_attempt a
                      WHERE a.customer_id = v_customer_id
                        AND a.invoice_id IN (SELECT i.id FROM billing.invoice i
                                              WHERE i.customer_id = v_customer_id AND i.subscription_id = p_subscription_id)),
        'events', (SELECT coalesce(jsonb_agg(jsonb_build_object('id', o.id, 'event_type', o.event_type,
                                                               'created_at', o.created_at, 'status', o.status)
                                             ORDER BY o.id DESC), '[]')
                     FROM billing.outbox_event o
                    WHERE o.customer_id = v_customer_id
                      AND o.aggregate_type = 'subscription' AND o.aggregate_id = p_subscription_id),
        'plans', (SELECT coalesce(jsonb_agg(jsonb_build_object('code', p.code, 'price_amount', p.price_amount,
                                                              'currency', p.currency,
                                                              'billing_interval', p.billing_interval,
                                                              'interval_count', p.interval_count) ORDER BY p.code), '[]')
                    FROM billing.plan p WHERE p.currency = v_plan.currency AND p.id <> v_plan.id)
    );
END
$$;
COMMENT ON FUNCTION billing.console_subscription(bigint) IS
'One subscription for the console: the row, its plan, the code of the plan scheduled for its next period, every invoice (its billed periods, newest first), the charge attempts, its own events, and the other plans of its currency (to change to).
Returns one jsonb document; BL404 for an unknown subscription.';

CREATE OR REPLACE FUNCTION billing.console_invoices(p_status text, p_before_id bigint, p_limit integer DEFAULT 50)
RETURNS SETOF billing.invoice
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM billing._check_between('limit', p_limit, 1, 500);
    IF p_status IS NOT NULL THEN
        PERFORM billing._check_one_of('an invoice status', p_status, ARRAY['OPEN', 'PAID', 'FAILED', 'VOID', 'REVIEW'],
                                      'Filter by OPEN, PAID, FAILED, VOID or REVIEW, or give no status.');
    END IF;
    -- One query per case, each walking one index in descending order with no parameter hidden
    -- behind an OR or a coalesce: all invoices on the id index, one status on invoice_status_idx
    -- (status, id), so a status no invoice has is one probe, not a walk of every id (bench/scale: a
    -- cached generic plan of "p_before_id IS NULL OR i.id < p_before_id" walked the index from the
    -- newest invoice for every page; "status = coalesce(p_status, status)" every invoice for FAILED).
    IF p_status IS NULL AND p_before_id IS NULL THEN
        RETURN QUERY
        SELECT * FROM billing.invoice i ORDER BY i.id DESC LIMIT p_limit;
    ELSIF p_status IS NULL THEN
        RETURN QUERY
        SELECT * FROM billing.invoice i WHERE i.id < p_before_id ORDER BY i.id DESC LIMIT p_limit;
    ELSIF p_before_id IS NULL THEN
        RETURN QUERY
        SELECT * FROM billing.invoice i WHERE i.status = p_status ORDER BY i.status DESC, i.id DESC LIMIT p_limit;
    ELSE
        RETURN QUERY
        SELECT * FROM billing.invoice i WHERE i.status = p_status AND i.id < p_before_id
         ORDER BY i.status DESC, i.id DESC LIMIT p_limit;
    END IF;
END
$$;
COMMENT ON FUNCTION billing.console_invoices(text, bigint, integer) IS
'Invoices newest first, of one status (NULL: all), with ids below p_before_id (paging).
Returns up to p_limit (1..500) rows; BL422 for an unknown status.';

CREATE OR REPLACE FUNCTION billing.console_events(
    p_subject text, p_type text, p_before_id bigint, p_limit integer DEFAULT 50)
RETURNS TABLE (id bigint, event_id uuid, aggregate_type text, aggregate_id bigint, event_type text, status text,
               created_at timestamptz, published_at timestamptz, attempts integer, last_error text, payload jsonb)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_subject text := nullif(btrim(coalesce(p_subject, '')), '');
    v_type    text := nullif(btrim(coalesce(p_type, '')), '');
    v_agg     text;
    v_id      bigint;
BEGIN
    PERFORM billing._check_between('limit', p_limit, 1, 500);
    IF v_subject IS NOT NULL THEN
        -- "invoice/12", "subscription/7" (the CloudEvents subject) or a bare id (either kind).
        IF v_subject ~ '^[0-9]{1,18}$' THEN
            v_id := v_subject::bigint;
        ELSIF v_subject ~ '^[a-z_]+/[0-9]{1,18}$' THEN
            v_agg := split_part(v_subject, '/', 1);
            v_id := split_part(v_subject, '/', 2)::bigint;
        ELSE
            RAISE EXCEPTION USING ERRCODE = 'BL422',
                MESSAGE = format('a subject is an id or <type>/<id> (invoice/12), not %s', left(v_subject, 100));
        END IF;
    END IF;
    PERFORM billing._check_text('an event type', coalesce(v_type, '-'), 100);
    RETURN QUERY
    SELECT o.id, o.event_id, o.aggregate_type, o.aggregate_id, o.event_type, o.status, o.created_at, o.published_at,
           o.attempts, o.last_error, o.payload
      FROM billing.outbox_event o
     WHERE (v_id IS NULL OR o.aggregate_id = v_id)
       AND (v_agg IS NULL OR o.aggregate_type = v_agg)
       AND (v_type IS NULL OR o.event_type ILIKE replace(replace(v_type, '%', '\%'), '_', '\_') || '%')
       AND (p_before_id IS NULL OR o.id < p_before_id)
     ORDER BY o.id DESC
     LIMIT p_limit;
END
$$;
COMMENT ON FUNCTION billing.console_events(text, text, bigint, integer) IS
'Outbox events newest first: of one subject (an aggregate id, or <aggregate type>/<id> as in the CloudEvents subject), of types starting with p_type (case-insensitive), ids below p_before_id.
Returns up to p_limit (1..500) rows; BL422 for a subject of another form.';

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
