-- 31_signups: signups in bulk (issue 32). billing.create_subscriptions creates many subscriptions
-- in a few statements, with what create_subscription (30_subscriptions) gives each one: the same
-- checks, the same rows (subscription, its request under the idempotency key, the customer when
-- unknown, the external id), the same INITIAL invoice with its CHARGE line and taxes, the same
-- events (SubscriptionCreated, InvoiceCreated, InvoicePaid when nothing is owed), and the same
-- idempotency: a key used before answers its subscription (replayed), a key used for other
-- parameters is BL409.
--
-- The set-based path takes the usual rows: no coupon, and a customer without credit in the plan's
-- currency (a redemption and credit spreading are create_subscription's, called for those rows one
-- by one in the same transaction, so they get exactly its rules). Per batch: the plan, price, first
-- period and trial end are computed once per plan, time zone and trial length; taxes once per tax
-- class (address, status, amount), and only while an active rate exists.
-- Re-applied after every migration: CREATE OR REPLACE only.

CREATE OR REPLACE FUNCTION billing.create_subscriptions(p_signups jsonb, p_now timestamptz DEFAULT now())
RETURNS TABLE (idempotency_key text, subscription_id bigint, customer_id bigint, outcome text)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
-- (no JIT: the checks' estimates follow the requests' statistics, and on tables growing as fast as
-- this path makes them those go stale: the statement then crossed jit_above_cost and compiled 81
-- functions for a batch that runs in tens of milliseconds)
SET jit = off
-- (the plan cache's choice is the function's own: a batch of more than 500 rows sets
-- force_custom_plan below, for this call only. From a session's sixth call on, plpgsql's plan cache
-- may keep generic plans, which cannot see the arrays' lengths and estimate a few rows: after an
-- ANALYZE they joined the batch's new invoices to its subscriptions with a nested loop, 25 million
-- comparisons for 5,000 signups, 4-5x the CPU of a signup from then on. Planning every statement
-- anew costs 3-6 ms a call: more than that nested loop up to a few hundred rows (a session of
-- batches of 10 paid +78 % a row for it); bench/README.md, "Issue 32, eighth pass")
SET plan_cache_mode = auto
AS $$
DECLARE
    -- The batch between statements: one array per column (a_*: every input row; f_*: the rows of
    -- the set-based path, with their terms and ids), aligned by position. (Arrays of scalars: the
    -- jsonb objects that carried them cost a fifth of a batch's CPU to build, aggregate and parse.)
    a_n bigint[]; a_key text[]; a_customer bigint[]; a_plan_code text[]; a_plan_id bigint[]; a_td integer[];
    a_qty integer[]; a_coupon text[]; a_external text[]; a_options jsonb[]; a_nth bigint[]; a_rq_sub bigint[];
    a_problem text[]; a_fast boolean[]; a_tz text[];
    f_n bigint[]; f_id bigint[]; f_key text[]; f_customer bigint[]; f_plan_code text[]; f_plan_id bigint[];
    f_td integer[]; f_qty integer[]; f_tz text[]; f_anchor timestamptz[]; f_period_number integer[];
    f_period_end timestamptz[]; f_trial_end timestamptz[]; f_price bigint[]; f_list bigint[];
    f_external text[]; f_options jsonb[]; f_end_text text[]; f_trial_text text[];
    v_now_text text := billing._utc_text(p_now);  -- (instants written into the events: once per batch or per terms)
    v_constraint text;
    v_bad_n   bigint;
    v_bad     record;
    v_row     record;
    v_sub     billing.subscription;
    v_notice  interval;
    v_taxes   boolean;
    v_made    integer;
    v_hint    text;
    v_any_fast boolean;
    v_all_slow boolean := false;
    v_citus   boolean := billing._distributed('billing.subscription');
    v_done    jsonb := '{}';  -- per idempotency key of create_subscription's rows: {id, customer_id, outcome}
    v_sub_seq regclass := pg_catalog.pg_get_serial_sequence('billing.subscription', 'id')::regclass;
    -- The events' ids: one random UUID (v4) per batch, its last 48 bits counting the batch's events
    -- from a random start. gen_random_uuid() per event cost ~5 µs each (OpenSSL's RAND_bytes: a
    -- provider lookup and a getpid per call): ~4 % of a signup. Each id keeps the v4 form and 74
    -- random bits shared by its batch; two batches' ids collide only if those 74 bits do.
    v_event_base uuid := gen_random_uuid();
    v_event_head bytea := substring(uuid_send(v_event_base) FROM 1 FOR 10);
    v_event_low bigint := ('x' || right(v_event_base::text, 12))::bit(48)::bigint;
BEGIN
    PERFORM billing._audit('create_subscriptions', jsonb_build_object('rows', jsonb_array_length(p_signups), 'now', p_now));
    PERFORM billing._check_now(p_now);
    IF p_signups IS NULL OR jsonb_typeof(p_signups) <> 'array' OR jsonb_array_length(p_signups) > 10000 THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = 'p_signups is a JSON array of at most 10000 signups',
            HINT = 'Send more in several calls (each key answers its subscription again if sent twice).';
    END IF;
    IF jsonb_array_length(p_signups) > 500 THEN  -- (each statement planned with this batch, restored on return)
        PERFORM pg_catalog.set_config('plan_cache_mode', 'force_custom_plan', true);
    END IF;
    SELECT s.trial_will_end_notice INTO v_notice FROM billing.database_setting s;
    -- The lock of each plan code the batch names, shared, before any statement reads the plans
    -- (_lock_plan_offered): an archive in flight is waited for and then seen, and one waits for the
    -- batch (adv11). In code order (one order for every batch).
    PERFORM billing._lock_plan_offered(c.code)
       FROM (SELECT DISTINCT x->>'plan_code' AS code FROM pg_catalog.jsonb_array_elements(p_signups) x
              WHERE x->>'plan_code' IS NOT NULL ORDER BY 1) c;

    -- Each row, checked as create_subscription checks its arguments, with its earlier request; and
    -- for each new key's first row, whether the set-based path takes it (no coupon, no credit to
    -- spread, one PostgreSQL: on Citus each row is create_subscription's).
    WITH r AS (
        SELECT x.*, coalesce(x.trial_days, 0) AS td, coalesce(x.quantity, 1) AS qty
          FROM ROWS FROM (jsonb_to_recordset(p_signups)
                          AS (idempotency_key text, customer_id bigint, plan_code text, trial_days integer,
                              coupon_code text, quantity integer, external_id text))
               WITH ORDINALITY AS x(idempotency_key, customer_id, plan_code, trial_days, coupon_code, quantity, external_id, n)
    ), o AS (
        SELECT r.*,
               jsonb_build_object('trialDays', r.td, 'couponCode', r.coupon_code, 'quantity', r.qty)
               || CASE WHEN r.external_id IS NOT NULL THEN jsonb_build_object('externalId', r.external_id) ELSE '{}' END AS options
          FROM r
    ), differs AS (
        -- The keys sent twice or more with other parameters (only the keys sent twice are compared).
        SELECT o.idempotency_key
          FROM o
         WHERE o.idempotency_key IN (SELECT o2.idempotency_key FROM o o2 GROUP BY 1 HAVING count(*) > 1)
         GROUP BY 1
        HAVING min(jsonb_build_array(o.customer_id, o.plan_code, o.options)::text)
               <> max(jsonb_build_array(o.customer_id, o.plan_code, o.options)::text)
    ), oq AS (
        -- Each row with the request under its key, the customer's own first, as create_subscription
        -- reads it: two customers' first uses of one key at once both create (keys are unique per
        -- customer), and the join on the key alone gave such a row twice, one of them refused naming
        -- the other (review6). DISTINCT ON, not a LATERAL ... LIMIT 1: Citus plans no lateral outer
        -- join over the batch's rows.
        SELECT DISTINCT ON (o.n) o.*, rq.customer_id AS rq_customer, rq.plan_code AS rq_plan,
               rq.options AS rq_options, rq.subscription_id AS rq_sub, rq.idempotency_key IS NOT NULL AS replay
          FROM o
          LEFT JOIN billing.subscription_request rq ON rq.idempotency_key = o.idempotency_key
         ORDER BY o.n, rq.customer_id = o.customer_id DESC NULLS LAST
    ), k AS (
        SELECT o.*,
               p.id AS plan_id, p.archived_at AS plan_archived, p.currency,
               CASE WHEN o.external_id IS NOT NULL THEN
                   (SELECT ref.object_id FROM billing.external_ref ref
                     WHERE ref.object_type = 'subscription' AND ref.external_id = o.external_id) END AS ext_taken,
               row_number() OVER (PARTITION BY o.idempotency_key ORDER BY o.n) AS nth,
               o.idempotency_key IN (SELECT d.idempotency_key FROM differs d) AS key_differs,
               min(o.idempotency_key) OVER (PARTITION BY o.external_id)
                   <> max(o.idempotency_key) OVER (PARTITION BY o.external_id) AS ext_twice,
               cu.timezone AS tz
          FROM oq o
          LEFT JOIN billing.plan p ON p.code = o.plan_code
          -- (the customer's zone, NULL when it is unknown: read once here, for the customers to
          -- create and the terms below; it was a probe of customer_pkey in each of two statements)
          LEFT JOIN billing.customer cu ON cu.id = o.customer_id
    ), checked AS (
        SELECT k.*,
               CASE
                   WHEN k.idempotency_key IS NULL OR btrim(k.idempotency_key) = '' OR length(k.idempotency_key) > 255
                       THEN 'BL422:an idempotency key of 1 to 255 characters is required'
                   WHEN k.customer_id IS NULL OR k.customer_id < 1
                       THEN format('BL422:a customer id is a positive integer, not %s', coalesce(k.customer_id::text, 'NULL'))
                   WHEN k.td NOT BETWEEN 0 AND 730 THEN format('BL422:trial days must be between 0 and 730, got %s', k.td)
                   WHEN k.qty NOT BETWEEN 1 AND 1000000 THEN format('BL422:quantity must be between 1 and 1000000, got %s', k.qty)
                   WHEN k.external_id IS NOT NULL AND (length(k.external_id) NOT BETWEEN 1 AND 255 OR btrim(k.external_id) <> k.external_id)
                       THEN format('BL422:an external id is 1 to 255 characters without surrounding blanks, got %L', left(k.external_id, 300))
                   WHEN k.key_differs
                       THEN format('BL409:idempotency key %L appears twice in the batch with different parameters', k.idempotency_key)
                   WHEN k.replay AND (k.rq_customer IS DISTINCT FROM k.customer_id OR k.rq_plan IS DISTINCT FROM k.plan_code
                                      OR k.rq_options IS DISTINCT FROM k.options)
                       THEN format('BL409:idempotency key %L was already used for customer %s and plan %s (%s)',
                                   k.idempotency_key, k.rq_customer, k.rq_plan, k.rq_options)
                   WHEN k.replay THEN NULL
                   WHEN k.plan_id IS NULL THEN format('BL422:unknown plan %L', k.plan_code)
                   WHEN k.plan_archived IS NOT NULL THEN format('BL422:plan %s is archived', k.plan_code)
                   WHEN k.external_id IS NOT NULL AND k.ext_twice
                       THEN format('BL409:the external id %L appears under two idempotency keys of the batch', k.external_id)
                   WHEN k.ext_taken IS NOT NULL
                       THEN format('BL409:the external id %L is already in use by another subscription', k.external_id)
               END AS problem
          FROM k
    ), fresh AS (
        -- (NULL for a replayed key or a key's later row: nothing to create)
        SELECT c.*,
               CASE WHEN NOT c.replay AND c.nth = 1 THEN
                   c.coupon_code IS NULL AND NOT v_citus
                   AND NOT EXISTS (SELECT 1 FROM billing.credit_balance b
                                    WHERE b.customer_id = c.customer_id AND b.currency = c.currency AND b.balance > 0)
               END AS fast
          FROM checked c
    )
    SELECT array_agg(c.n), array_agg(c.idempotency_key), array_agg(c.customer_id), array_agg(c.plan_code),
           array_agg(c.plan_id), array_agg(c.td), array_agg(c.qty), array_agg(c.coupon_code), array_agg(c.external_id),
           array_agg(c.options), array_agg(c.nth), array_agg(c.rq_sub), array_agg(c.problem), array_agg(c.fast),
           array_agg(c.tz), min(c.n) FILTER (WHERE c.problem IS NOT NULL)
      INTO a_n, a_key, a_customer, a_plan_code, a_plan_id, a_td, a_qty, a_coupon, a_external, a_options, a_nth, a_rq_sub,
           a_problem, a_fast, a_tz, v_bad_n
      FROM fresh c;
    v_any_fast := true = ANY (a_fast);  -- (from the array: a second aggregate of c.fast ran the credit check twice)

    IF v_bad_n IS NOT NULL THEN
        SELECT u.n, u.idempotency_key, u.problem INTO v_bad
          FROM unnest(a_n, a_key, a_problem) AS u(n, idempotency_key, problem)
         WHERE u.n = v_bad_n;
        RAISE EXCEPTION USING ERRCODE = left(v_bad.problem, 5),
            MESSAGE = format('signup %s (row %s): %s', coalesce(quote_literal(v_bad.idempotency_key), 'without a key'), v_bad.n,
                             substr(v_bad.problem, 7)),
            HINT = 'Nothing of this batch was created; correct the row (or leave it out) and send the batch again.';
    END IF;

    -- The rows to create: each new key once (a key twice in the batch: its later rows replay the first).
    -- The set-based path (fast); every other new row is create_subscription's, one call each.
    IF v_any_fast THEN
      BEGIN
        v_taxes := EXISTS (SELECT 1 FROM billing.tax_rate t WHERE t.active);
        -- Unknown customers are created in UTC, as by create_subscription. A plain insert of the ones
        -- the checks found no zone for (no ON CONFLICT: its speculative insertion cost more per row);
        -- one another transaction creates meanwhile is a unique violation on customer_pkey, which
        -- sends the batch through create_subscription (below), as a key taken meanwhile does.
        INSERT INTO billing.customer (id, timezone)
        SELECT DISTINCT u.customer_id, 'UTC' FROM unnest(a_customer, a_fast, a_tz) AS u(customer_id, fast, tz)
         WHERE u.fast AND u.tz IS NULL
         ORDER BY 1;

        -- Each row's terms: the first period (or trial) once per plan, time zone and trial length,
        -- the price once per plan; then our ids in the batch's order.
        WITH f AS MATERIALIZED (
            -- (the zone as the checks read it; UTC for the customers created above)
            SELECT u.n, u.idempotency_key, u.customer_id, u.plan_code, u.plan_id, u.td, u.qty, u.external_id, u.options,
                   coalesce(u.tz, 'UTC') AS tz
              FROM unnest(a_n, a_key, a_customer, a_plan_code, a_plan_id, a_td, a_qty, a_external, a_options, a_fast, a_tz)
                   AS u(n, idempotency_key, customer_id, plan_code, plan_id, td, qty, external_id, options, fast, tz)
             WHERE u.fast
        ), terms AS MATERIALIZED (
            -- once per plan, time zone, trial length and seats (the functions' calls are not per row)
            SELECT y.*, billing._utc_text(y.period_end) AS end_text, billing._utc_text(y.trial_end) AS trial_text
              FROM (SELECT t.plan_id, t.tz, t.td, t.qty, fp.anchor, fp.period_number, fp.period_end, x.price,
                           CASE WHEN t.td > 0 THEN billing._period_end(p_now, 'DAY', t.td, 1, t.tz) END AS trial_end,
                           CASE WHEN t.td > 0 THEN 0
                                ELSE billing._period_charge(x.price, t.qty, p_now, fp.period_end, fp.nominal_start) END AS list
                      FROM (SELECT DISTINCT f.plan_id, f.tz, f.td, f.qty FROM f) t
                      JOIN billing.plan p ON p.id = t.plan_id
                     CROSS JOIN LATERAL billing._first_period(p, t.tz, p_now) fp
                     CROSS JOIN LATERAL (SELECT billing._price_at(p, p_now) AS price) x) y
        )
        SELECT array_agg(s.n), array_agg(s.id), array_agg(s.idempotency_key), array_agg(s.customer_id),
               array_agg(s.plan_code), array_agg(s.plan_id), array_agg(s.td), array_agg(s.qty), array_agg(s.tz),
               array_agg(s.anchor), array_agg(s.period_number), array_agg(s.period_end), array_agg(s.trial_end),
               array_agg(s.price), array_agg(s.list), array_agg(s.external_id), array_agg(s.options),
               array_agg(s.end_text), array_agg(s.trial_text)
          INTO f_n, f_id, f_key, f_customer, f_plan_code, f_plan_id, f_td, f_qty, f_tz, f_anchor, f_period_number,
               f_period_end, f_trial_end, f_price, f_list, f_external, f_options, f_end_text, f_trial_text
          FROM (SELECT o.*, nextval(v_sub_seq) AS id  -- (above the sort: ids in the batch's order)
                  FROM (SELECT f.n, f.idempotency_key, f.customer_id, f.plan_code, f.plan_id, f.td, f.qty, f.tz,
                               t.anchor, t.period_number, t.period_end, t.trial_end, t.price, t.list, f.external_id,
                               f.options, t.end_text, t.trial_text
                          FROM f JOIN terms t ON t.plan_id = f.plan_id AND t.tz = f.tz AND t.td = f.td AND t.qty = f.qty
                         ORDER BY f.n) o) s;

        -- The subscriptions and their requests in one statement (the requests' foreign key is checked
        -- at its end). A key another transaction took meanwhile is a unique violation on
        -- subscription_request_pkey (a plain insert: no ON CONFLICT's speculative insertion per row):
        -- the whole set-based part is then undone and every row goes through create_subscription
        -- (which replays it).
        WITH made AS (
            INSERT INTO billing.subscription (id, customer_id, plan_id, status, timezone, billing_anchor, period_number,
                                              current_period_start, current_period_end, period_price, quantity,
                                              trial_end, trial_notice_at, lifecycle_pending, updated_at, external_id)
            SELECT f.id, f.customer_id, f.plan_id, CASE WHEN f.td > 0 THEN 'TRIALING' ELSE 'ACTIVE' END, f.tz,
                   CASE WHEN f.td > 0 THEN p_now ELSE f.anchor END,
                   CASE WHEN f.td > 0 THEN 1 ELSE f.period_number END,
                   p_now, CASE WHEN f.td > 0 THEN f.trial_end ELSE f.period_end END, f.list, f.qty,
                   f.trial_end,
                   CASE WHEN f.td > 0 THEN greatest(p_now, f.trial_end - coalesce(v_notice, interval '3 days')) END,
                   f.td > 0, p_now, f.external_id
              FROM unnest(f_id, f_customer, f_plan_id, f_td, f_qty, f_tz, f_anchor, f_period_number, f_period_end,
                          f_trial_end, f_list, f_external)
                   AS f(id, customer_id, plan_id, td, qty, tz, anchor, period_number, period_end, trial_end, list, external_id)
        )
        INSERT INTO billing.subscription_request (idempotency_key, customer_id, plan_code, options, subscription_id)
        SELECT f.idempotency_key, f.customer_id, f.plan_code, f.options, f.id
          FROM unnest(f_id, f_key, f_customer, f_plan_code, f_options)
               AS f(id, idempotency_key, customer_id, plan_code, options);

        INSERT INTO billing.external_ref (object_type, external_id, customer_id, object_id, created_at)
        SELECT 'subscription', f.external_id, f.customer_id, f.id, p_now
          FROM unnest(f_id, f_customer, f_external) AS f(id, customer_id, external_id)
         WHERE f.external_id IS NOT NULL
        ON CONFLICT ON CONSTRAINT external_ref_pkey DO NOTHING;
        GET DIAGNOSTICS v_made = ROW_COUNT;
        IF v_made <> (SELECT count(*) FROM unnest(f_external) AS f(external_id) WHERE f.external_id IS NOT NULL) THEN
            RAISE EXCEPTION USING ERRCODE = 'BL409', MESSAGE = 'create_subscriptions: an external id was taken meanwhile',
                HINT = 'billing.create_subscriptions:per-row';
        END IF;

        -- The INITIAL invoices (no credit, no discount on this path), their CHARGE lines and every
        -- event, in one statement: SubscriptionCreated then InvoiceCreated (InvoicePaid when nothing
        -- is owed) per row, in the batch's order.
        WITH f AS MATERIALIZED (
            SELECT f.*, c.country, c.region, c.tax_status, p.code, p.currency, p.billing_interval, p.interval_count
              FROM unnest(f_n, f_id, f_customer, f_plan_id, f_td, f_qty, f_period_end, f_trial_end, f_price, f_list,
                          f_end_text, f_trial_text)
                   AS f(n, id, customer_id, plan_id, td, qty, period_end, trial_end, price, list, end_text, trial_text)
              JOIN billing.plan p ON p.id = f.plan_id
              LEFT JOIN billing.customer c ON v_taxes AND c.id = f.customer_id
        ), taxed AS MATERIALIZED (
            SELECT x.country, x.region, x.tax_status, x.list, (t.tx).tax_amount, (t.tx).tax_included, (t.tx).tax_detail
              FROM (SELECT DISTINCT f.country, f.region, f.tax_status, f.list FROM f WHERE v_taxes AND f.td = 0) x
             CROSS JOIN LATERAL (SELECT billing._tax_of(x.country, x.region, x.tax_status, x.list) AS tx) t
        ), priced AS MATERIALIZED (
            SELECT f.*, coalesce(x.tax_amount, 0) AS tax_amount, coalesce(x.tax_included, 0) AS tax_included, x.tax_detail
              FROM f
              LEFT JOIN taxed x ON x.list = f.list AND x.tax_status = f.tax_status
                               AND coalesce(x.country, '') = coalesce(f.country, '')
                               AND coalesce(x.region, '') = coalesce(f.region, '')
             WHERE f.td = 0
        ), invoices AS (
            INSERT INTO billing.invoice AS v (subscription_id, customer_id, kind, period_start, period_end, subtotal, credit_applied,
                                              amount, currency, status, due_at, next_attempt_at, paid_at, created_at,
                                              plan_id, plan_price, billing_interval, interval_count, quantity, discount_amount,
                                              tax_amount, tax_included, tax_detail)
            SELECT p.id, p.customer_id, 'INITIAL', p_now, p.period_end, p.list, 0, p.list + p.tax_amount, p.currency,
                   CASE WHEN p.list + p.tax_amount = 0 THEN 'PAID' ELSE 'OPEN' END, p_now,
                   CASE WHEN p.list + p.tax_amount = 0 THEN NULL ELSE p_now END,
                   CASE WHEN p.list + p.tax_amount = 0 THEN p_now END, p_now,
                   p.plan_id, p.price, p.billing_interval, p.interval_count, p.qty, 0,
                   p.tax_amount, p.tax_included, p.tax_detail
              FROM priced p ORDER BY p.n
            RETURNING v.id, v.subscription_id, v.customer_id, v.kind, v.period_start, v.period_end, v.subtotal,
                      v.credit_applied, v.amount, v.currency, v.status, v.paid_at, v.plan_id, v.plan_price,
                      v.quantity, v.tax_amount, v.tax_included, v.coupon_code, v.attempt_count, v.discount_amount,
                      v.gateway_reference
        ), lines AS (
            INSERT INTO billing.service_line (customer_id, subscription_id, invoice_id, kind, item, plan_id, quantity, unit_price,
                                              span_start, span_end, gross, discount, coupon_code, net, tax, tax_inclusive,
                                              currency, depends_on, basis_start, basis_gross, basis_net, created_at)
            SELECT i.customer_id, i.subscription_id, i.id, 'CHARGE', 'PLAN', i.plan_id, i.quantity, i.plan_price,
                   i.period_start, i.period_end, i.subtotal, 0, NULL, i.subtotal, i.tax_amount + i.tax_included,
                   i.tax_included > 0, i.currency, NULL, i.period_start, i.subtotal, i.subtotal, p_now
              FROM invoices i
             WHERE i.period_start < i.period_end
        )
        -- Each event's envelope and data are written as one JSON text and parsed once (building the
        -- data and then the envelope with jsonb_build_object cost more, as in the renewal's
        -- statement): the same jsonb as _cloud_event_at(..., _subscription_data / _invoice_data)
        -- (jsonb orders the keys itself; 310_signups compares every event of both paths with the
        -- builders). Every value written raw is a number, an instant from _utc_text, a value its CHECK
        -- confines to letters (status, kind, currency) or our own literal; free texts go through to_json.
        INSERT INTO billing.outbox_event (event_id, aggregate_type, aggregate_id, event_type, payload, created_at, available_at, customer_id)
        SELECT e.event_id, e.aggregate_type, e.aggregate_id, e.event_type,
               ('{"id": "' || e.event_id::text || '", "data": ' || e.data || ', "time": "' || e.at
                || '", "type": "' || e.event_type || '", "source": "billing", "subject": "' || e.aggregate_type || '/'
                || e.aggregate_id::text || '", "dataschema": "urn:billing:events:' || e.event_type || ':v'
                || billing._event_version(e.event_type) || '", "specversion": "1.0", "datacontenttype": "application/json"}')::json,
               p_now, p_now, e.customer_id
          FROM (SELECT encode(v_event_head || substring(int8send((v_event_low + row_number() OVER ()) & 281474976710655) FROM 3),
                              'hex')::uuid AS event_id,
                       x.*, t.at
                  FROM (-- SubscriptionCreated: billing._subscription_data of the row as inserted, written out over
                        -- the same values (the pgTAP test 310 checks they are equal): no read back, no call per row.
                        SELECT f.id AS sub_id, 0 AS seq, 'subscription' AS aggregate_type, f.id AS aggregate_id,
                               'SubscriptionCreated' AS event_type, f.customer_id,
                               '{"reason": null, "status": "' || CASE WHEN f.td > 0 THEN 'TRIALING' ELSE 'ACTIVE' END
                               || '", "version": 1, "pausedAt": null, "planCode": ' || to_json(f.code)::text
                               || ', "quantity": ' || f.qty::text || ', "resumeAt": null, "trialEnd": '
                               || coalesce('"' || f.trial_text || '"', 'null')
                               || ', "canceledAt": null, "couponCode": null, "customerId": ' || f.customer_id::text
                               || ', "subscriptionId": ' || f.id::text || ', "currentPeriodEnd": "'
                               || CASE WHEN f.td > 0 THEN f.trial_text ELSE f.end_text END
                               || '", "cancelAtPeriodEnd": false, "scheduledPlanCode": null, "currentPeriodStart": "'
                               || v_now_text || '"}' AS data
                          FROM f
                        UNION ALL
                        -- InvoiceCreated (InvoicePaid too when nothing is owed): _invoice_data, written out.
                        SELECT i.subscription_id, k.seq, 'invoice', i.id, k.event_type, i.customer_id, i.data
                          FROM (SELECT i.id, i.subscription_id, i.customer_id, i.status,
                                       -- (the instants: paid_at and period_start are p_now on this path, period_end
                                       -- the row's terms' end: their texts were made once)
                                       '{"kind": "' || i.kind || '", "amount": ' || coalesce(i.amount::text, 'null')
                                       || ', "paidAt": ' || CASE WHEN i.paid_at IS NULL THEN 'null' ELSE '"' || v_now_text || '"' END
                                       || ', "status": "' || i.status || '", "currency": "' || i.currency
                                       || '", "quantity": ' || coalesce(i.quantity::text, 'null')
                                       || ', "subtotal": ' || coalesce(i.subtotal::text, 'null')
                                       || ', "invoiceId": ' || i.id::text
                                       || ', "periodEnd": ' || coalesce('"' || f.end_text || '"', 'null')
                                       || ', "couponCode": ' || coalesce(to_json(i.coupon_code)::text, 'null')
                                       || ', "customerId": ' || i.customer_id::text
                                       || ', "periodStart": "' || v_now_text || '"'
                                       || ', "attemptCount": ' || coalesce(i.attempt_count::text, 'null')
                                       || ', "creditApplied": ' || coalesce(i.credit_applied::text, 'null')
                                       || ', "discountAmount": ' || coalesce(i.discount_amount::text, 'null')
                                       || ', "subscriptionId": ' || coalesce(i.subscription_id::text, 'null')
                                       || ', "gatewayReference": ' || coalesce(to_json(i.gateway_reference)::text, 'null')
                                       || '}' AS data
                                  FROM invoices i JOIN f ON f.id = i.subscription_id) i
                         CROSS JOIN LATERAL (VALUES ('InvoiceCreated', 1), ('InvoicePaid', 2)) k (event_type, seq)
                         WHERE k.seq = 1 OR i.status = 'PAID') x
                 CROSS JOIN (SELECT v_now_text AS at) t
                 ORDER BY x.sub_id, x.seq) e;  -- our ids follow the batch's order
      EXCEPTION WHEN SQLSTATE 'BL409' OR unique_violation THEN
        -- Only our own signal or a customer or key another call created meanwhile: every row of the
        -- set-based part is undone and goes through create_subscription, which replays or refuses it.
        GET STACKED DIAGNOSTICS v_hint = PG_EXCEPTION_HINT, v_constraint = CONSTRAINT_NAME;
        IF v_hint IS DISTINCT FROM 'billing.create_subscriptions:per-row'
           AND v_constraint IS DISTINCT FROM 'customer_pkey' AND v_constraint IS DISTINCT FROM 'subscription_request_pkey' THEN
            RAISE;
        END IF;
        v_all_slow := true;
        f_key := NULL; f_id := NULL; f_customer := NULL;
      END;
    END IF;

    -- The rows of create_subscription: a coupon, credit to spread, Citus (or a key taken meanwhile).
    FOR v_row IN
        SELECT x.* FROM unnest(a_n, a_key, a_customer, a_plan_code, a_td, a_coupon, a_qty, a_external, a_fast)
                        AS x(n, idempotency_key, customer_id, plan_code, td, coupon_code, qty, external_id, fast)
         WHERE NOT x.fast OR (v_all_slow AND x.fast)
         ORDER BY x.n
    LOOP
        v_sub := billing.create_subscription(v_row.idempotency_key, v_row.customer_id, v_row.plan_code, p_now, v_row.td,
                                             v_row.coupon_code, v_row.qty, v_row.external_id);
        v_done := v_done || jsonb_build_object(v_row.idempotency_key, jsonb_build_object(
            'id', v_sub.id, 'customer_id', v_sub.customer_id,
            'outcome', CASE WHEN v_sub.created_at = now() THEN 'created' ELSE 'replayed' END));
    END LOOP;

    -- One row per input row, in order: created now, or the subscription its key was used for.
    RETURN QUERY
    SELECT a.idempotency_key,
           coalesce(f.id, (d.v ->> 'id')::bigint, a.rq_sub),
           coalesce(f.customer_id, (d.v ->> 'customer_id')::bigint, a.customer_id),
           CASE WHEN a.nth <> 1 THEN 'replayed' WHEN f.id IS NOT NULL THEN 'created'
                ELSE coalesce(d.v ->> 'outcome', 'replayed') END
      FROM unnest(a_n, a_key, a_customer, a_rq_sub, a_nth) AS a(n, idempotency_key, customer_id, rq_sub, nth)
      LEFT JOIN unnest(f_key, f_id, f_customer) AS f(idempotency_key, id, customer_id) ON f.idempotency_key = a.idempotency_key
     CROSS JOIN LATERAL (SELECT v_done -> a.idempotency_key AS v) d
     ORDER BY a.n;
END
$$;
COMMENT ON FUNCTION billing.create_subscriptions(jsonb, timestamptz) IS
'Signups in bulk: up to 10000 in one call, each as create_subscription would make it (the same checks, subscription, INITIAL invoice with its line and taxes, events and idempotency). p_signups is a JSON array of {"idempotency_key", "customer_id", "plan_code", "trial_days" (default 0), "coupon_code", "quantity" (default 1), "external_id"}, the arguments of create_subscription. A key used before (or earlier in the batch) answers its subscription, replayed. All or nothing.
Returns one row per input row, in order: its key, subscription id, customer id and outcome created | replayed; BL422 naming the first row create_subscription would refuse (bad key, customer id below 1, unknown or archived plan, trial days or quantity out of range, malformed external id, a bad coupon), BL409 for a key used with other parameters (before or in the batch), an external id taken or twice in the batch, a coupon used up.';
