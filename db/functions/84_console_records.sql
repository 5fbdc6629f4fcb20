-- 84_console_records: what the operator console (`billing serve`, /console; docs/console.md) reads
-- on the pages of one kind of record: customers (the search by words and one customer), one
-- subscription, invoices, outbox events. Its sessions, overview, MRR and replay: 86_console.
-- Re-applied after every migration: CREATE OR REPLACE only. Granted to billing_console (90_grants).
-- The reads return jsonb documents shaped for one page each, so a page is one call.

-- ---------------------------------------------------------------------------------------------
-- Customers. A text search is a search by words through customer_search_idx (migration 0311, a GIN
-- index of the name's and the email's words): each word of the query is a word of the name or of
-- the email (the whole address, its part before the @ or its domain), the last one may be the start
-- of a word (what the operator is still typing). A query '@domain' is an email's domain (or its
-- start) through customer_email_domain_idx (migration 0660). Never a scan of every customer (issue
-- 27 finding 2); the row is shown as jsonb.
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

CREATE OR REPLACE FUNCTION billing._customer_search_matches(p_words tsquery)
RETURNS double precision
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
-- VOLATILE: EXPLAIN may not run in a STABLE function (console_customers); it reads nothing but the
-- planner's statistics.
AS $$
DECLARE
    v_plan jsonb;
BEGIN
    -- On Citus: no estimate (the walk, as before): an EXPLAIN run locally in the transaction would
    -- forbid the distributed query that follows ("cannot switch local execution status").
    IF pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL THEN
        RETURN NULL;
    END IF;
    EXECUTE format($q$EXPLAIN (FORMAT JSON) SELECT 1 FROM billing.customer c
                       WHERE to_tsvector(%L::regconfig, coalesce(c.name, '') || ' ' || coalesce(c.email, '') || ' '
                                         || replace(coalesce(c.email, ''), '@', ' ')) @@ $1$q$, 'simple')
       USING p_words INTO v_plan;
    RETURN (v_plan -> 0 -> 'Plan' ->> 'Plan Rows')::double precision;
END
$$;
COMMENT ON FUNCTION billing._customer_search_matches(tsquery) IS
'Private (console_customers): how many customers the planner estimates the words p_words match through customer_search_idx''s expression (its word statistics).
Returns the estimate; NULL on Citus.';

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
    v_rows  double precision;
    v_domain  text;
    v_domains text[];
BEGIN
    PERFORM billing._check_between('limit', p_limit, 1, 500);
    PERFORM billing._check_text('a search', coalesce(v_query, '-'), 200);
    -- The page's customers first, then their counts grouped by customer_id and joined on it: on
    -- Citus each part runs in the shards of these customers (a correlated subquery per row could
    -- not be planned there). The OPEN invoices are counted among the page's customers' invoices
    -- (invoice_pkey, (customer_id, id)): with the status in the WHERE clause the planner ANDed in
    -- the partial index of every OPEN invoice (invoice_chargeable_idx: 26,000 entries read at
    -- 1,000,000 subscriptions for a page of 50 customers). The cost now follows the page's
    -- customers' invoices (a row each: no index holds both customer_id and status), not the
    -- system's OPEN ones.
    IF v_query IS NULL THEN
        v_ids := ARRAY(SELECT c.id FROM billing.customer c ORDER BY c.id LIMIT p_limit);
    ELSIF v_query ~ '^[0-9]{1,18}$' THEN
        v_ids := ARRAY(SELECT c.id FROM billing.customer c WHERE c.id = v_query::bigint);
    ELSIF v_query ~ '^@[^@[:space:]]+$' THEN
        -- An email's domain: '@example.org', or its start while the operator types ('@exam'), in any
        -- case. Through customer_email_domain_idx (migration 0660: (domain, id), the expression word
        -- for word): the distinct domains that start with it, one probe each (a loose scan, at most
        -- 11), then each one's first p_limit customers in id order, merged: a page reads about a
        -- page of entries per domain, whatever the domains' sizes. More than 10 such domains (a
        -- short start): one range of the index, planned with its statistics (the range sorted, or
        -- the customers walked in id order). On Citus: that range, in each shard.
        v_domain := lower(substr(v_query, 2));
        IF pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NULL THEN
            v_domains := ARRAY(
                WITH RECURSIVE d(domain, n) AS (
                    SELECT (SELECT min(lower(split_part(c.email, '@', 2)) COLLATE "C") FROM billing.customer c
                             WHERE c.email IS NOT NULL AND lower(split_part(c.email, '@', 2)) COLLATE "C" >= v_domain), 1
                    UNION ALL
                    SELECT (SELECT min(lower(split_part(c.email, '@', 2)) COLLATE "C") FROM billing.customer c
                             WHERE c.email IS NOT NULL AND lower(split_part(c.email, '@', 2)) COLLATE "C" > d.domain), d.n + 1
                      FROM d
                     WHERE starts_with(d.domain, v_domain) AND d.n <= 10)
                SELECT d.domain FROM d WHERE starts_with(d.domain, v_domain) ORDER BY d.n);
        END IF;
        IF cardinality(v_domains) <= 10 THEN
            v_ids := ARRAY(
                SELECT x.id
                  FROM unnest(v_domains) u(domain)
                 CROSS JOIN LATERAL (
                       SELECT c.id FROM billing.customer c
                        WHERE c.email IS NOT NULL AND lower(split_part(c.email, '@', 2)) COLLATE "C" = u.domain
                        ORDER BY c.id
                        LIMIT p_limit) x
                 ORDER BY x.id
                 LIMIT p_limit);
        ELSE
            v_ids := ARRAY(
                SELECT c.id FROM billing.customer c
                 WHERE c.email IS NOT NULL
                   AND lower(split_part(c.email, '@', 2)) COLLATE "C" >= v_domain
                   AND lower(split_part(c.email, '@', 2)) COLLATE "C" < v_domain || chr(1114111)
                   AND starts_with(lower(split_part(c.email, '@', 2)), v_domain)
                 ORDER BY c.id
                 LIMIT p_limit);
        END IF;
    ELSE
        v_words := billing._customer_search_query(v_query);
        -- How many customers the words match, as the planner estimates it (the index's word
        -- statistics). Walking the customers in id order until p_limit match costs a word test per
        -- customer walked (~20 us: the row's words are computed), about p_limit * customers / matches
        -- of them; reading the matches through the index and sorting them costs a few us per match.
        -- Below the break-even (matches^2 < 7 * p_limit * customers: ~42,000 matches at 5,000,000
        -- customers) the matches are read through the index (a domain shared by 5,000 customers: the
        -- walk read 49,000 rows, 1.4 s); above it (a common word), the walk. The same rows either
        -- way: the words, ORDER BY id, LIMIT.
        v_rows := billing._customer_search_matches(v_words);
        IF v_rows * v_rows < 7.0 * p_limit * greatest((SELECT c.reltuples FROM pg_catalog.pg_class c
                                                       WHERE c.oid = 'billing.customer'::regclass), 1) THEN
            -- OFFSET 0: the matches planned on their own (through the index), then the first p_limit.
            v_ids := ARRAY(
                SELECT m.id FROM (
                    SELECT c.id FROM billing.customer c
                     WHERE to_tsvector('simple'::regconfig,
                                       coalesce(c.name, '') || ' ' || coalesce(c.email, '') || ' '
                                       || replace(coalesce(c.email, ''), '@', ' ')) @@ v_words
                    OFFSET 0) m
                 ORDER BY m.id
                 LIMIT p_limit);
        ELSE
            -- A common word: the customers walked in id order (the expression of customer_search_idx,
            -- migration 0311, word for word).
            v_ids := ARRAY(
                SELECT c.id FROM billing.customer c
                 WHERE to_tsvector('simple'::regconfig,
                                   coalesce(c.name, '') || ' ' || coalesce(c.email, '') || ' '
                                   || replace(coalesce(c.email, ''), '@', ' ')) @@ v_words
                 ORDER BY c.id
                 LIMIT p_limit);
        END IF;
    END IF;
    RETURN QUERY
    SELECT c.id, to_jsonb(c), coalesce(s.n, 0), coalesce(s.live, 0), coalesce(i.open, 0)
      FROM billing.customer c
      LEFT JOIN (SELECT x.customer_id, count(*) AS n, count(*) FILTER (WHERE x.status <> 'CANCELED') AS live
                   FROM billing.subscription x WHERE x.customer_id = ANY (v_ids) GROUP BY x.customer_id) s
        ON s.customer_id = c.id
      LEFT JOIN (SELECT y.customer_id, count(*) FILTER (WHERE y.status = 'OPEN') AS open
                   FROM billing.invoice y WHERE y.customer_id = ANY (v_ids) GROUP BY y.customer_id) i
        ON i.customer_id = c.id
     WHERE c.id = ANY (v_ids)
     ORDER BY c.id;
END
$$;
COMMENT ON FUNCTION billing.console_customers(text, integer) IS
'Customers matching p_query: its id when it is a number; ''@'' and one word: the customers whose email''s domain starts with that word (any case); else by words (each word of the query a word of the name or the email, whole address, local part or domain; the last word may be a word''s start; case-insensitive); all (by id) when empty.
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
    v_inv_ids := ARRAY(SELECT i.id FROM billing.invoice i WHERE i.customer_id = p_customer_id AND i.subscription_id = ANY (v_sub_ids));
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
                                  -- The customer's own events (outbox_event_pkey, (customer_id, id)): an
                                  -- event of a subscription or an invoice carries its customer's id
                                  -- (customerId, the shard on Citus). Without it the OR of the two
                                  -- aggregates read every event (no index of (aggregate_type,
                                  -- aggregate_id) holds the published ones): a scan of the outbox.
                                  WHERE o.customer_id = p_customer_id
                                    AND ((o.aggregate_type = 'subscription' AND o.aggregate_id = ANY (v_sub_ids))
                                         OR (o.aggregate_type = 'invoice' AND o.aggregate_id = ANY (v_inv_ids)))
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
    -- behind an OR or a coalesce: all invoices on the id index, one status but OPEN on
    -- invoice_status_idx (status, id), so a status no invoice has is one probe, not a walk of every id (bench/scale: a
    -- cached generic plan of "p_before_id IS NULL OR i.id < p_before_id" walked the index from the
    -- newest invoice for every page; "status = coalesce(p_status, status)" every invoice for FAILED).
    -- OPEN is not in invoice_status_idx (db/schema/0860): list_invoices' page of OPEN invoices, the
    -- same statement (billing._page's walk, adv11: it was a copy of it): at most 2,000 entries of the
    -- id index from the cursor with the status checked on the way (OPEN invoices are the recent ones)
    -- and, only when that walk neither filled the page nor reached the end, the OPEN rows through
    -- invoice_chargeable_idx (status = 'OPEN'), the newest kept. On Citus each shard plans its own
    -- page (as list_invoices does there).
    IF p_status = 'OPEN' AND billing._distributed('billing.invoice') THEN
        RETURN QUERY
        SELECT * FROM billing.invoice i WHERE i.status = 'OPEN' AND i.id < coalesce(p_before_id, 9223372036854775807)
         ORDER BY i.id DESC LIMIT p_limit;
    ELSIF p_status = 'OPEN' THEN
        RETURN QUERY EXECUTE billing._page('billing.invoice', 'id', ARRAY['status = ''OPEN'''], p_before_id IS NOT NULL,
                                           false, p_limit, 2000, 500)
            USING p_before_id;
    ELSIF p_status IS NULL AND p_before_id IS NULL THEN
        RETURN QUERY
        SELECT * FROM billing.invoice i ORDER BY i.id DESC LIMIT p_limit;
    ELSIF p_status IS NULL THEN
        RETURN QUERY
        SELECT * FROM billing.invoice i WHERE i.id < p_before_id ORDER BY i.id DESC LIMIT p_limit;
    ELSIF p_before_id IS NULL THEN
        RETURN QUERY
        SELECT * FROM billing.invoice i WHERE i.status = p_status AND i.status <> 'OPEN'
         ORDER BY i.status DESC, i.id DESC LIMIT p_limit;
    ELSE
        RETURN QUERY
        SELECT * FROM billing.invoice i WHERE i.status = p_status AND i.status <> 'OPEN' AND i.id < p_before_id
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
    v_owners  bigint[];
    v_like    text;
    v_rare    text;
    v_ids     bigint[] := '{}';
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
    -- A subject's events are read among its customer's own (outbox_event_pkey, (customer_id, id)):
    -- an aggregate belongs to one customer (an invoice's, a subscription's, a customer itself; a
    -- webhook endpoint's events are customer 0's: docs/scaling.md), whose id its events carry. The
    -- page walks that customer's events newest first; the walk of every event newest first, as
    -- before, read the outbox to its start for an aggregate with few events (no index holds the
    -- published events' aggregates; one would cost every event written an entry). A bare id may be
    -- any of the four. Another type of aggregate: the walk of every event.
    IF v_id IS NOT NULL AND (v_agg IS NULL OR v_agg IN ('invoice', 'subscription', 'customer', 'webhook_endpoint')) THEN
        v_owners := ARRAY(SELECT DISTINCT w.c FROM unnest(ARRAY[
                              CASE WHEN v_agg IS NULL OR v_agg = 'invoice' THEN billing._invoice_customer(v_id) END,
                              CASE WHEN v_agg IS NULL OR v_agg = 'subscription' THEN billing._subscription_customer(v_id) END,
                              CASE WHEN v_agg IS NULL OR v_agg = 'customer' THEN v_id END,
                              CASE WHEN v_agg IS NULL OR v_agg = 'webhook_endpoint' THEN 0 END]) w(c)
                           WHERE w.c IS NOT NULL);
        RETURN QUERY
        SELECT o.id, o.event_id, o.aggregate_type, o.aggregate_id, o.event_type, o.status, o.created_at, o.published_at,
               o.attempts, o.last_error, o.payload::jsonb
          FROM billing.outbox_event o
         WHERE o.customer_id = ANY (v_owners)
           AND o.aggregate_id = v_id
           AND (v_agg IS NULL OR o.aggregate_type = v_agg)
           AND (v_type IS NULL OR o.event_type ILIKE replace(replace(v_type, '%', '\%'), '_', '\_') || '%')
           AND (p_before_id IS NULL OR o.id < p_before_id)
         ORDER BY o.id DESC
         LIMIT p_limit;
        RETURN;
    END IF;
    IF v_agg IS NOT NULL AND v_agg NOT IN ('invoice', 'subscription', 'customer', 'webhook_endpoint') THEN
        RETURN;  -- no event has another aggregate type (outbox_event_aggregate_type_known): no walk for none
    END IF;
    -- A type alone (migration 0781): each matching type's newest events, at most a page each, merged.
    -- The types other than the three of the volume paths are found in outbox_event_rare_type_idx (one
    -- probe per type present: a skip scan, a query each, as Citus runs it too), then a page of each
    -- read from it; the three (dense) on the id index. The page: the newest p_limit of those ids.
    IF v_id IS NULL AND v_type IS NOT NULL THEN
        v_like := replace(replace(v_type, '%', '\%'), '_', '\_') || '%';
        v_rare := '';
        LOOP
            SELECT min(o.event_type) INTO v_rare
              FROM billing.outbox_event o
             WHERE o.event_type > v_rare
               AND o.event_type <> ALL (ARRAY['InvoiceCreated', 'InvoicePaid', 'SubscriptionCreated']);
            EXIT WHEN v_rare IS NULL;
            CONTINUE WHEN v_rare NOT ILIKE v_like;
            v_ids := v_ids || ARRAY(
                SELECT o.id FROM billing.outbox_event o
                 WHERE o.event_type = v_rare
                   AND o.event_type <> ALL (ARRAY['InvoiceCreated', 'InvoicePaid', 'SubscriptionCreated'])
                   AND (p_before_id IS NULL OR o.id < p_before_id)
                 ORDER BY o.event_type DESC, o.id DESC
                 LIMIT p_limit);
        END LOOP;
        IF EXISTS (SELECT 1 FROM unnest(ARRAY['InvoiceCreated', 'InvoicePaid', 'SubscriptionCreated']) t WHERE t ILIKE v_like) THEN
            v_ids := v_ids || ARRAY(
                SELECT o.id FROM billing.outbox_event o
                 WHERE o.event_type = ANY (ARRAY(SELECT t FROM unnest(ARRAY['InvoiceCreated', 'InvoicePaid', 'SubscriptionCreated']) t
                                                  WHERE t ILIKE v_like))
                   AND (p_before_id IS NULL OR o.id < p_before_id)
                 ORDER BY o.id DESC
                 LIMIT p_limit);
        END IF;
        v_ids := ARRAY(SELECT i FROM unnest(v_ids) i ORDER BY i DESC LIMIT p_limit);
        RETURN QUERY
        SELECT o.id, o.event_id, o.aggregate_type, o.aggregate_id, o.event_type, o.status, o.created_at, o.published_at,
               o.attempts, o.last_error, o.payload::jsonb
          FROM billing.outbox_event o
         WHERE o.id = ANY (v_ids)
         ORDER BY o.id DESC;
        RETURN;
    END IF;
    RETURN QUERY
    SELECT o.id, o.event_id, o.aggregate_type, o.aggregate_id, o.event_type, o.status, o.created_at, o.published_at,
           o.attempts, o.last_error, o.payload::jsonb
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
