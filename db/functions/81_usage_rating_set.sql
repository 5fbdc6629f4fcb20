-- 81_usage_rating_set: the set-based usage rating (issue 29, docs/usage.md "Rating in arrears"): one
-- statement rates a batch of live subscriptions without late events. One text
-- (_rate_usage_set_statement) with the tables it works on as parameters, as the renewal's
-- _renew_statement: _rate_usage_set runs it on the tables themselves (generated below as static SQL,
-- what rate_usage calls on one PostgreSQL), _rate_usage_set_in_shard on one shard group's own shards
-- and this node's copies of the reference tables (rate_usage_in_shard on Citus, 89_usage_rating_shards).
-- 72_usage_rating holds the step itself, the one-at-a-time path it is compared with, and the plan
-- segments and coupon rules both read. Re-applied after every migration: CREATE OR REPLACE only.

-- The statement: the set-based rating of a batch of live subscriptions without late events, whose rows and
-- customers' usage locks the caller holds (rate_usage): the same results as _rate_subscription
-- for each, in one statement. Per subscription: its ended periods whose grace is over (the
-- boundaries: the starts of its INITIAL, RENEWAL and PLAN_CHANGE invoices after rated_until, and its
-- current period's start), each period one plan segment when no PLAN line has an end inside it and
-- none is a REVERSAL (the plan of its newest line in force; where none is, the plan of the last line
-- before, else the subscription's): a subscription with a period cut by a change or a pause is left
-- to _rate_subscription (not returned). Each segment's usage per charged meter read from the rollups
-- (whole hours) and the events (the edge hours), as usage_between; every charge priced at once
-- (_usage_amounts); billed = the amount less what the segment billed before; one USAGE invoice per
-- subscription with a positive total (tax by the customer's address, credit applied in key order as
-- _new_invoice does), its lines (tax per line as _line_tax), the usage_rating rows, the events, the
-- cursors moved to the last boundary rated.
--
-- Every read and write names its table through a placeholder ({subscription}, {invoice}, ...), the
-- values through {customer_ids}, {subscription_ids}, {now}, {grace}, {taxes} (the caller's variables,
-- or $1..$5 of a dynamic statement), the ids through each table's own sequence ({invoice_seq}, ...: a
-- shard has no identity default; Citus gives each node its own range), the tax through 14_tax's text
-- ({tax_sql}). Nothing called inside it reads a table (on Citus a query over shards may not start a
-- distributed one): the coupon's discount (_usage_discount) and the tax (_tax_of) are written as
-- joins. 721_usage_rating_set compares it with _rate_subscription on one PostgreSQL,
-- 890_usage_rating_in_shard its group-0 form, citus/891_usage_rating_in_shards its per-group form on
-- the cluster with the coordinator's per-row path.
CREATE OR REPLACE FUNCTION billing._rate_usage_set_statement(p_names jsonb)
RETURNS text
LANGUAGE plpgsql IMMUTABLE
SET search_path = billing, pg_catalog, pg_temp
AS $f$
DECLARE
    v_sql  text := $q$
    WITH sub AS MATERIALIZED (
        SELECT s.customer_id, s.id AS subscription_id, u.rated_until, s.current_period_start AS v_end,
               s.current_period_end AS v_next, s.plan_id, s.quantity
          FROM unnest({customer_ids}, {subscription_ids}) AS k (c, i)
          JOIN {usage_cursor} u ON u.customer_id = k.c AND u.subscription_id = k.i
          JOIN {subscription} s ON s.customer_id = k.c AND s.id = k.i
         WHERE NOT u.finished AND u.late_since IS NULL AND s.status <> 'CANCELED'
    ), bounds AS MATERIALIZED (
        -- (each read of a table is a lateral subquery with an aggregate: an index probe per row, while
        -- the joins of these CTEs to each other are hash joins; enable_nestloop is off for them)
        SELECT s.customer_id, s.subscription_id, q.b
          FROM sub s
         CROSS JOIN LATERAL (
             SELECT coalesce(array_agg(i.period_start), '{}') AS starts FROM {invoice} i
              WHERE i.customer_id = s.customer_id AND i.subscription_id = s.subscription_id
                AND i.kind IN ('INITIAL', 'RENEWAL', 'PLAN_CHANGE')
                AND i.period_start > s.rated_until AND i.period_start < s.v_end) x
         CROSS JOIN LATERAL (
             SELECT DISTINCT y.b FROM (SELECT unnest(x.starts) AS b UNION ALL SELECT s.v_end WHERE s.v_end > s.rated_until) y
              WHERE y.b + {grace} <= {now}) q
    ), periods AS MATERIALIZED (
        SELECT b.customer_id, b.subscription_id,
               coalesce(lag(b.b) OVER (PARTITION BY b.customer_id, b.subscription_id ORDER BY b.b), s.rated_until) AS p_start,
               b.b AS p_end,
               max(b.b) OVER (PARTITION BY b.customer_id, b.subscription_id) AS cut
          FROM bounds b JOIN sub s ON s.customer_id = b.customer_id AND s.subscription_id = b.subscription_id
    ), lines AS MATERIALIZED (
        -- per period, from the PLAN lines reaching into it (in force or not, as _line_in_force):
        -- whether one ends inside it or is a REVERSAL, and the plan of the newest in force
        SELECT p.customer_id, p.subscription_id, p.p_start, coalesce(x.cut_inside, false) AS cut_inside, x.plan_in_force
          FROM periods p
         CROSS JOIN LATERAL (
             SELECT bool_or(l.kind <> 'CHARGE' OR l.span_start > p.p_start OR l.span_end < p.p_end) AS cut_inside,
                    (array_agg(l.plan_id ORDER BY l.id DESC) FILTER (WHERE
                         (l.invoice_id IS NULL OR EXISTS (SELECT 1 FROM {invoice} i
                                                           WHERE i.customer_id = l.customer_id AND i.id = l.invoice_id
                                                             AND i.status IN ('PAID', 'OPEN', 'REVIEW')))
                         AND (l.depends_on IS NULL OR NOT EXISTS (SELECT 1 FROM {invoice} i
                                                                   WHERE i.customer_id = l.customer_id AND i.id = ANY (l.depends_on)
                                                                     AND i.status IN ('VOID', 'FAILED')))))[1] AS plan_in_force
               FROM {service_line} l
              WHERE l.customer_id = p.customer_id AND l.subscription_id = p.subscription_id
                AND l.item = 'PLAN' AND l.span_end > p.p_start AND l.span_start < p.p_end) x
    ), simple AS MATERIALIZED (
        -- the subscriptions whose every period is one segment (the others: _rate_subscription)
        SELECT s.* FROM sub s
         WHERE NOT EXISTS (SELECT 1 FROM lines l
                            WHERE l.customer_id = s.customer_id AND l.subscription_id = s.subscription_id AND l.cut_inside)
    ), segs AS MATERIALIZED (
        SELECT p.customer_id, p.subscription_id, p.p_start AS seg_start, p.p_end AS seg_end, p.cut,
               coalesce(l.plan_in_force,
                        (SELECT x.plan_id FROM {service_line} x
                          WHERE x.customer_id = p.customer_id AND x.subscription_id = p.subscription_id
                            AND x.item = 'PLAN' AND x.kind = 'CHARGE' AND x.span_start <= p.p_start
                          ORDER BY x.span_start DESC, x.id DESC LIMIT 1),
                        s.plan_id) AS plan_id
          FROM periods p
          JOIN simple s ON s.customer_id = p.customer_id AND s.subscription_id = p.subscription_id
          LEFT JOIN lines l ON l.customer_id = p.customer_id AND l.subscription_id = p.subscription_id AND l.p_start = p.p_start
    ), work AS MATERIALIZED (
        SELECT row_number() OVER (ORDER BY g.customer_id, g.subscription_id, g.seg_start, c.meter_code) AS k,
               g.customer_id, g.subscription_id, g.seg_start, g.seg_end, g.plan_id, c.meter_code, c AS charge,
               m.aggregation, m.event_type, m.filters, m.property,
               -- usage_between's whole hours [lo, hi); the edge hours from the events
               CASE WHEN h.hi0 <= h.lo0 THEN g.seg_end ELSE h.lo0 END AS lo,
               CASE WHEN h.hi0 <= h.lo0 THEN g.seg_end ELSE h.hi0 END AS hi
          FROM segs g
          JOIN {plan_charge} c ON c.plan_id = g.plan_id
          JOIN {meter} m ON m.code = c.meter_code
         CROSS JOIN LATERAL (
             SELECT CASE WHEN t.t0 < g.seg_start THEN t.t0 + interval '1 hour' ELSE t.t0 END AS lo0, t.hi0
               FROM (SELECT date_trunc('hour', g.seg_start AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS t0,
                            date_trunc('hour', g.seg_end AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS hi0) t) h
    ), spans AS MATERIALIZED (
        -- one read per (customer, span, meter), whatever the subscriptions sharing it
        SELECT DISTINCT w.customer_id, w.seg_start, w.seg_end, w.lo, w.hi, w.meter_code, w.aggregation, w.event_type,
               w.filters, w.property
          FROM work w
    ), agg AS MATERIALIZED (
        -- usage_between's figures of each span: the rollups of its whole hours and one part of its
        -- edge hours' events (when there are any), aggregated as one
        SELECT n.customer_id, n.seg_start, n.seg_end, n.meter_code, x.events, x.total, x.max_value, x.latest_value, u.uniques
          FROM spans n
         CROSS JOIN LATERAL (
             SELECT sum(p.events)::bigint AS events, sum(p.total) AS total, max(p.max_value) AS max_value,
                    (array_agg(p.latest_value ORDER BY p.latest_time DESC NULLS LAST, p.latest_value DESC NULLS LAST)
                         FILTER (WHERE n.aggregation = 'latest'))[1] AS latest_value
               FROM (SELECT r.events, r.total, r.max_value, r.latest_time, r.latest_value
                       FROM {usage_rollup} r
                      WHERE r.customer_id = n.customer_id AND r.meter_code = n.meter_code AND r.bucket >= n.lo AND r.bucket < n.hi
                     UNION ALL
                     SELECT count(*), coalesce(sum(g.num), 0), max(g.num), max(g.event_time),
                            (array_agg(g.num ORDER BY g.event_time DESC, g.num DESC NULLS LAST))[1]
                       FROM (SELECT e.event_time,
                                    CASE WHEN n.aggregation IN ('sum', 'max', 'latest') THEN (e.data #>> n.property)::numeric END AS num
                               FROM (SELECT e.event_time, e.event_type, e.data FROM {usage_event} e
                                      WHERE n.lo > n.seg_start AND e.customer_id = n.customer_id
                                        AND e.event_time >= n.seg_start AND e.event_time < n.lo
                                     UNION ALL
                                     SELECT e.event_time, e.event_type, e.data FROM {usage_event} e
                                      WHERE n.seg_end > n.hi AND e.customer_id = n.customer_id
                                        AND e.event_time >= n.hi AND e.event_time < n.seg_end) e
                              WHERE e.event_type = n.event_type
                                AND (n.filters = '{}'::jsonb OR billing._usage_match(n.filters, e.data))) g
                     HAVING count(*) > 0) p) x
          LEFT JOIN LATERAL (
             SELECT count(DISTINCT q.val) AS uniques
               FROM (SELECT v.value AS val FROM {usage_unique} v
                      WHERE v.customer_id = n.customer_id AND v.meter_code = n.meter_code AND v.bucket >= n.lo AND v.bucket < n.hi
                     UNION ALL
                     SELECT e.data #>> n.property
                       FROM (SELECT e.event_type, e.data FROM {usage_event} e
                              WHERE n.lo > n.seg_start AND e.customer_id = n.customer_id
                                AND e.event_time >= n.seg_start AND e.event_time < n.lo
                             UNION ALL
                             SELECT e.event_type, e.data FROM {usage_event} e
                              WHERE n.seg_end > n.hi AND e.customer_id = n.customer_id
                                AND e.event_time >= n.hi AND e.event_time < n.seg_end) e
                      WHERE e.event_type = n.event_type
                        AND (n.filters = '{}'::jsonb OR billing._usage_match(n.filters, e.data))
                        AND e.data #>> n.property IS NOT NULL) q
              WHERE n.aggregation = 'unique_count') u ON true
    ), valued AS MATERIALIZED (
        SELECT w.k, w.customer_id, w.subscription_id, w.seg_start, w.seg_end, w.plan_id, w.meter_code, w.charge,
               coalesce(CASE w.aggregation WHEN 'count' THEN coalesce(a.events, 0)::numeric
                                           WHEN 'sum' THEN coalesce(a.total, 0)
                                           WHEN 'max' THEN a.max_value
                                           WHEN 'latest' THEN a.latest_value
                                           WHEN 'unique_count' THEN coalesce(a.uniques, 0)::numeric END, 0) AS qty
          FROM work w
          LEFT JOIN agg a ON a.customer_id = w.customer_id AND a.seg_start = w.seg_start AND a.seg_end = w.seg_end
                         AND a.meter_code = w.meter_code
    ), rated0 AS MATERIALIZED (
        SELECT v.k, v.customer_id, v.subscription_id, v.seg_start, v.seg_end, v.plan_id, v.meter_code, v.qty,
               a.amount,
               greatest(a.amount - (SELECT coalesce(sum(r.billed), 0) FROM {usage_rating} r
                                     WHERE r.customer_id = v.customer_id AND r.subscription_id = v.subscription_id
                                       AND r.meter_code = v.meter_code AND r.span_start = v.seg_start), 0)::bigint AS billed
          FROM valued v
          JOIN billing._usage_amounts((SELECT array_agg((x.charge).model ORDER BY x.k) FROM valued x),
                                      (SELECT array_agg((x.charge).unit_amount ORDER BY x.k) FROM valued x),
                                      (SELECT array_agg((x.charge).package_size ORDER BY x.k) FROM valued x),
                                      (SELECT array_agg((x.charge).tiers ORDER BY x.k) FROM valued x),
                                      (SELECT array_agg((x.charge).included_units ORDER BY x.k) FROM valued x),
                                      (SELECT array_agg((x.charge).minimum_amount ORDER BY x.k) FROM valued x),
                                      (SELECT array_agg((x.charge).maximum_amount ORDER BY x.k) FROM valued x),
                                      (SELECT array_agg(x.qty ORDER BY x.k) FROM valued x)) a ON a.n = v.k
    ), rated AS MATERIALIZED (
        -- the coupon's discount of each line, _usage_discount's rule written as a join (a function
        -- reading tables cannot run inside a statement over a shard group's shards): each percentage
        -- coupon of the subscription (repeating or forever, covering the segment's plan and its
        -- currency) discounts floor(billed x percent / 100 x its share of the segment), its time
        -- [from, to) as _usage_discount says; the sum never more than the line; the code of the first
        -- that discounted (redemption order)
        SELECT r.*, coalesce(d.discount, 0) AS discount, d.coupon_code, r.billed - coalesce(d.discount, 0) AS net
          FROM rated0 r
          LEFT JOIN LATERAL (
              SELECT least(r.billed, coalesce(sum(q.part), 0))::bigint AS discount,
                     (array_agg(q.coupon_code ORDER BY q.redeemed_at, q.coupon_code))[1] AS coupon_code
                FROM (SELECT x.coupon_code, x.redeemed_at,
                             floor(r.billed::numeric * x.percent_off / 100
                                   * floor(extract(epoch FROM least(x.t_to, r.seg_end)) - extract(epoch FROM greatest(x.t_from, r.seg_start)))
                                   / greatest(floor(extract(epoch FROM r.seg_end) - extract(epoch FROM r.seg_start)), 1))::bigint AS part
                        FROM (SELECT red.coupon_code, red.redeemed_at, c.percent_off,
                                     CASE WHEN c.duration = 'repeating' AND red.discount_until IS NOT NULL
                                          THEN ((red.discount_until AT TIME ZONE s.timezone)
                                                - make_interval(months => c.duration_periods)) AT TIME ZONE s.timezone
                                          ELSE f.first_start END AS t_from,
                                     -- a coupon replaced or removed before its periods were used
                                     -- (ended_at with periods left) discounts no later than that
                                     least(CASE WHEN c.duration = 'repeating' AND red.discount_until IS NOT NULL THEN red.discount_until
                                                WHEN c.duration = 'repeating'
                                                THEN ((f.first_start AT TIME ZONE s.timezone)
                                                      + make_interval(months => c.duration_periods)) AT TIME ZONE s.timezone
                                                ELSE coalesce(red.ended_at, 'infinity') END,
                                           CASE WHEN red.ended_at IS NOT NULL AND coalesce(red.periods_left, 1) > 0
                                                THEN red.ended_at ELSE 'infinity'::timestamptz END) AS t_to
                                FROM {coupon_redemption} red
                                JOIN {coupon} c ON c.code = red.coupon_code
                                JOIN {plan} pl ON pl.id = r.plan_id
                                JOIN {subscription} s ON s.customer_id = r.customer_id AND s.id = r.subscription_id
                                LEFT JOIN LATERAL (
                                    -- the first period that began at or after the redemption
                                    SELECT min(i.period_start) AS first_start FROM {invoice} i
                                     WHERE i.customer_id = r.customer_id AND i.subscription_id = r.subscription_id
                                       AND i.kind IN ('INITIAL', 'RENEWAL', 'PLAN_CHANGE') AND i.period_start >= red.redeemed_at
                                       AND NOT (c.duration = 'repeating' AND red.discount_until IS NOT NULL)) f ON true
                               WHERE red.customer_id = r.customer_id AND red.subscription_id = r.subscription_id
                                 AND c.percent_off IS NOT NULL AND c.duration IN ('repeating', 'forever')
                                 AND (c.plan_codes IS NULL OR pl.code = ANY (c.plan_codes))
                                 AND (c.currency IS NULL OR c.currency = pl.currency)) x
                       WHERE x.t_from IS NOT NULL AND least(x.t_to, r.seg_end) > greatest(x.t_from, r.seg_start)) q
               WHERE q.part > 0) d ON r.billed > 0
    ), totals AS MATERIALIZED (
        SELECT s.customer_id, s.subscription_id, s.rated_until, s.quantity, s.plan_id, pc.cut,
               coalesce(rt.gross, 0)::bigint AS gross, coalesce(rt.gross - rt.discount, 0)::bigint AS total,
               coalesce(rt.discount, 0)::bigint AS discount, rt.coupon_code
          FROM simple s
          LEFT JOIN (SELECT p.customer_id, p.subscription_id, max(p.cut) AS cut FROM periods p
                      GROUP BY p.customer_id, p.subscription_id) pc
                 ON pc.customer_id = s.customer_id AND pc.subscription_id = s.subscription_id
          LEFT JOIN (SELECT r.customer_id, r.subscription_id, sum(r.billed) AS gross, sum(r.discount) AS discount,
                            (array_agg(r.coupon_code ORDER BY r.k) FILTER (WHERE r.coupon_code IS NOT NULL))[1] AS coupon_code
                       FROM rated r
                      GROUP BY r.customer_id, r.subscription_id) rt
                 ON rt.customer_id = s.customer_id AND rt.subscription_id = s.subscription_id
    ), base AS MATERIALIZED (
        SELECT t.customer_id, t.subscription_id, t.rated_until AS period_start, t.cut AS period_end, t.total,
               t.discount, CASE WHEN t.discount > 0 THEN t.coupon_code END AS coupon_code, t.quantity, p.id AS plan_id, p.currency, p.billing_interval, p.interval_count,
               c.country, c.region, c.tax_status
          FROM totals t
          JOIN {plan} p ON p.id = t.plan_id
          LEFT JOIN {customer} c ON {taxes} AND c.id = t.customer_id
         WHERE t.gross > 0 AND t.cut IS NOT NULL
    ), taxed AS MATERIALIZED (
        -- the tax of every amount to tax (invoices' subtotals, lines' nets) per tax class, once each
        -- (14_tax's set-based text, on the rates given: _tax_of's figures)
        SELECT k.country, k.region, k.tax_status, k.amount, x.tax_amount, x.tax_included, x.tax_detail
          FROM (SELECT DISTINCT b.country, b.region, b.tax_status, b.total AS amount FROM base b WHERE {taxes}
                UNION
                SELECT DISTINCT c.country, c.region, c.tax_status, r.net FROM rated r
                  JOIN {customer} c ON c.id = r.customer_id
                 WHERE {taxes} AND r.billed > 0) k
         CROSS JOIN LATERAL ({tax_sql}) x
    ), credit AS MATERIALIZED (
        -- usually empty; locked in key order (as the renewal statement)
        SELECT b.customer_id, b.currency, b.balance
          FROM {credit_balance} b
         WHERE b.customer_id = ANY (ARRAY(SELECT x.customer_id FROM base x)) AND b.balance > 0
         ORDER BY b.customer_id, b.currency
           FOR UPDATE
    ), priced AS MATERIALIZED (
        SELECT b.*, coalesce(x.tax_amount, 0) AS tax_amount, coalesce(x.tax_included, 0) AS tax_included, x.tax_detail
          FROM base b
          LEFT JOIN taxed x ON x.amount = b.total AND coalesce(x.tax_status, '') = coalesce(b.tax_status, '')
                           AND coalesce(x.country, '') = coalesce(b.country, '') AND coalesce(x.region, '') = coalesce(b.region, '')
    ), spread AS MATERIALIZED (
        SELECT p.subscription_id, p.customer_id,
               least(p.total + p.tax_amount,
                     greatest(0, c.balance - coalesce(sum(p.total + p.tax_amount) OVER (
                         PARTITION BY p.customer_id, p.currency ORDER BY p.subscription_id
                         ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0)))::bigint AS credit_applied
          FROM priced p
          JOIN credit c ON c.customer_id = p.customer_id AND c.currency = p.currency
    ), numbered AS MATERIALIZED (
        SELECT nextval({invoice_seq}::regclass) AS invoice_id, q.*
          FROM (SELECT p.*, coalesce(sp.credit_applied, 0) AS credit_applied
                  FROM priced p
                  LEFT JOIN spread sp ON sp.customer_id = p.customer_id AND sp.subscription_id = p.subscription_id
                 ORDER BY p.customer_id, p.subscription_id) q
    ), new_invoice AS (
        INSERT INTO {invoice} (id, subscription_id, customer_id, kind, period_start, period_end, subtotal, credit_applied,
                                     amount, currency, status, due_at, next_attempt_at, paid_at, created_at,
                                     plan_id, plan_price, billing_interval, interval_count, from_plan_id, from_price,
                                     quantity, discount_amount, coupon_code, from_quantity,
                                     tax_amount, tax_included, tax_detail)
        SELECT n.invoice_id, n.subscription_id, n.customer_id, 'USAGE', n.period_start, n.period_end, n.total, n.credit_applied,
               n.total + n.tax_amount - n.credit_applied, n.currency,
               CASE WHEN n.total + n.tax_amount - n.credit_applied = 0 THEN 'PAID' ELSE 'OPEN' END, {now},
               CASE WHEN n.total + n.tax_amount - n.credit_applied = 0 THEN NULL ELSE {now} END,
               CASE WHEN n.total + n.tax_amount - n.credit_applied = 0 THEN {now} END, {now},
               n.plan_id, 0, n.billing_interval, n.interval_count, NULL, NULL,
               n.quantity, n.discount, n.coupon_code, NULL,
               n.tax_amount, n.tax_included, n.tax_detail
          FROM numbered n
        RETURNING *
    ), line_rows AS MATERIALIZED (
        SELECT r.*, n.invoice_id, pl.currency,
               CASE WHEN r.billed > 0 THEN nextval({line_seq}::regclass) END AS line_id
          FROM (SELECT r.* FROM rated r ORDER BY r.k) r
          LEFT JOIN numbered n ON n.customer_id = r.customer_id AND n.subscription_id = r.subscription_id
          JOIN {plan} pl ON pl.id = r.plan_id
    ), new_lines AS (
        INSERT INTO {service_line} (id, customer_id, subscription_id, invoice_id, kind, item, meter_code, usage_quantity,
                                          plan_id, quantity, unit_price, span_start, span_end, gross, discount, coupon_code, net,
                                          tax, tax_inclusive, currency, basis_start, basis_gross, basis_net, created_at)
        SELECT l.line_id, l.customer_id, l.subscription_id, l.invoice_id, 'CHARGE', 'USAGE', l.meter_code, l.qty,
               l.plan_id, 1, l.billed, l.seg_start, l.seg_end, l.billed, l.discount,
               CASE WHEN l.discount > 0 THEN l.coupon_code END, l.net,
               coalesce(x.tax_amount, 0) + coalesce(x.tax_included, 0), coalesce(x.tax_included, 0) > 0, l.currency,
               l.seg_start, l.billed, l.net, {now}
          FROM line_rows l
          LEFT JOIN {customer} c ON {taxes} AND c.id = l.customer_id
          LEFT JOIN taxed x ON x.amount = l.net AND coalesce(x.tax_status, '') = coalesce(c.tax_status, '')
                           AND coalesce(x.country, '') = coalesce(c.country, '') AND coalesce(x.region, '') = coalesce(c.region, '')
         WHERE l.billed > 0
         ORDER BY l.line_id
    ), new_ratings AS (
        INSERT INTO {usage_rating} (id, customer_id, subscription_id, meter_code, span_start, rated_at, span_end, plan_id,
                                          quantity, amount, billed, invoice_id, line_id)
        SELECT nextval({rating_seq}::regclass), l.customer_id, l.subscription_id, l.meter_code, l.seg_start, {now}, l.seg_end, l.plan_id, l.qty, l.amount,
               l.billed, CASE WHEN l.billed > 0 THEN l.invoice_id END, l.line_id
          FROM line_rows l ORDER BY l.k
    ), credit_used AS (
        UPDATE {credit_balance} b
           SET balance = b.balance - u.used, updated_at = {now}
          FROM (SELECT n.customer_id, n.currency, sum(n.credit_applied) AS used
                  FROM numbered n WHERE n.credit_applied > 0
                 GROUP BY n.customer_id, n.currency) u
         WHERE b.customer_id = u.customer_id AND b.currency = u.currency
    ), credit_ledger AS (
        INSERT INTO {credit_entry} (id, customer_id, currency, amount, reason, subscription_id, invoice_id, created_at)
        SELECT nextval({entry_seq}::regclass), i.customer_id, i.currency, -i.credit_applied, 'APPLIED', i.subscription_id, i.id, {now}
          FROM new_invoice i WHERE i.credit_applied > 0
         ORDER BY i.id
    ), events AS (
        INSERT INTO {outbox_event} (id, event_id, aggregate_type, aggregate_id, event_type, payload, created_at, available_at, customer_id)
        SELECT nextval({event_seq}::regclass), e.event_id, 'invoice', e.id, e.event_type,
               billing._cloud_event_at(e.event_id, e.event_type, 'invoice', e.id, billing._utc_text({now}), e.data),
               {now}, {now}, e.customer_id
          FROM (SELECT gen_random_uuid() AS event_id, x.*
                  FROM (SELECT i.id, 'InvoiceCreated' AS event_type, billing._invoice_data(i::billing.invoice) AS data, 1 AS seq,
                               i.customer_id
                          FROM new_invoice i
                        UNION ALL
                        SELECT i.id, 'InvoicePaid', billing._invoice_data(i::billing.invoice), 2, i.customer_id
                          FROM new_invoice i WHERE i.status = 'PAID') x
                 ORDER BY x.id, x.seq) e
    ), moved AS (
        -- (due_at as _usage_due_at says for a live subscription)
        UPDATE {usage_cursor} u
           SET rated_until = t.cut, late_since = NULL, finished = false,
               due_at = CASE WHEN t.cut >= x.v_end THEN x.v_next ELSE t.cut END, updated_at = {now}
          FROM totals t
          JOIN sub x ON x.customer_id = t.customer_id AND x.subscription_id = t.subscription_id
         WHERE u.customer_id = t.customer_id AND u.subscription_id = t.subscription_id AND t.cut IS NOT NULL
        RETURNING u.customer_id, u.subscription_id
    )
    SELECT t.customer_id, t.subscription_id, n.invoice_id
      FROM totals t
      LEFT JOIN numbered n ON n.customer_id = t.customer_id AND n.subscription_id = t.subscription_id
     ORDER BY t.customer_id, t.subscription_id$q$;
    v_name text;
    v_value text;
BEGIN
    v_sql := replace(v_sql, '{tax_sql}', billing._invoice_tax_sql(p_names ->> 'tax_rate', 'k.country', 'k.region',
                                                                    'k.tax_status', 'k.amount'));
    FOR v_name, v_value IN SELECT e.key, e.value FROM jsonb_each_text(p_names) e LOOP
        v_sql := replace(v_sql, '{' || v_name || '}', v_value);
    END LOOP;
    IF v_sql ~ '\{[a-z_]+\}' THEN
        RAISE EXCEPTION 'rate usage statement: no value for %', substring(v_sql FROM '\{[a-z_]+\}');
    END IF;
    RETURN v_sql;
END
$f$;
COMMENT ON FUNCTION billing._rate_usage_set_statement(jsonb) IS
'Private: the set-based usage rating statement''s text over the tables, sequences and value expressions named in p_names (placeholders: the tables subscription, usage_cursor, invoice, service_line, plan_charge, meter, usage_rollup, usage_event, usage_unique, usage_rating, coupon_redemption, coupon, customer, plan, tax_rate, credit_balance, credit_entry, outbox_event; the sequences invoice_seq, line_seq, rating_seq, entry_seq, event_seq; the values customer_ids, subscription_ids, now, grace, taxes). It selects (customer_id, subscription_id, invoice_id) per subscription rated.
Returns the statement.';

-- The names of the statement over the tables themselves (one PostgreSQL), or over a shard group's
-- shards and this node's copies of the reference tables (p_shard_group; on one PostgreSQL group 0
-- is the tables themselves): the values as given (p_values: customer_ids, subscription_ids, now,
-- grace, taxes).
CREATE OR REPLACE FUNCTION billing._rate_usage_set_names(p_shard_group integer, p_values jsonb)
RETURNS jsonb
LANGUAGE plpgsql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_names jsonb := p_values || jsonb_build_object(
        'invoice_seq', quote_literal(pg_get_serial_sequence('billing.invoice', 'id')),
        'line_seq', quote_literal(pg_get_serial_sequence('billing.service_line', 'id')),
        'rating_seq', quote_literal(pg_get_serial_sequence('billing.usage_rating', 'id')),
        'entry_seq', quote_literal(pg_get_serial_sequence('billing.credit_entry', 'id')),
        'event_seq', quote_literal(pg_get_serial_sequence('billing.outbox_event', 'id')));
    v_table text;
BEGIN
    FOREACH v_table IN ARRAY ARRAY['subscription', 'usage_cursor', 'invoice', 'service_line', 'usage_rollup', 'usage_event',
                                   'usage_unique', 'usage_rating', 'coupon_redemption', 'customer', 'credit_balance',
                                   'credit_entry', 'outbox_event'] LOOP
        v_names := v_names || jsonb_build_object(v_table, CASE WHEN p_shard_group IS NULL THEN 'billing.' || v_table
                                                               ELSE billing._shard_table(('billing.' || v_table)::regclass, p_shard_group) END);
    END LOOP;
    FOREACH v_table IN ARRAY ARRAY['plan_charge', 'meter', 'coupon', 'plan', 'tax_rate'] LOOP
        v_names := v_names || jsonb_build_object(v_table, CASE WHEN p_shard_group IS NULL THEN 'billing.' || v_table
                                                               ELSE billing._local_table(('billing.' || v_table)::regclass) END);
    END LOOP;
    RETURN v_names;
END
$$;
COMMENT ON FUNCTION billing._rate_usage_set_names(integer, jsonb) IS
'Private: the names _rate_usage_set_statement fills in: the tables themselves (NULL group), or one shard group''s shards and this node''s copies of the reference tables (BL409 unless the group is on this node), the sequences, and the values given.
Returns a jsonb object.';

-- _rate_usage_set: the statement on the tables themselves, generated as static SQL (one plan kept per
-- session, as before it was one text). The CTEs' row estimates are blind (1 row each): nested loops
-- over them are quadratic. Every read of a table is a lateral subquery with an aggregate (an index
-- probe per row whatever this says).
DO $gen$
BEGIN
    EXECUTE format($f$
CREATE OR REPLACE FUNCTION billing._rate_usage_set(p_customer_ids bigint[], p_subscription_ids bigint[],
                                                   p_now timestamptz, p_grace interval)
RETURNS TABLE (customer_id bigint, subscription_id bigint, invoice_id bigint)
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
SET enable_nestloop = off
SET enable_seqscan = off
SET jit = off
AS $body$
#variable_conflict use_column
DECLARE
    v_taxes boolean := EXISTS (SELECT 1 FROM billing.tax_rate r WHERE r.active);
BEGIN
    RETURN QUERY
%s;
END
$body$
$f$,
        billing._rate_usage_set_statement(billing._rate_usage_set_names(NULL, jsonb_build_object(
            'customer_ids', 'p_customer_ids', 'subscription_ids', 'p_subscription_ids', 'now', 'p_now',
            'grace', 'p_grace', 'taxes', 'v_taxes'))));
END
$gen$;
COMMENT ON FUNCTION billing._rate_usage_set(bigint[], bigint[], timestamptz, interval) IS
'Private: rates a batch of live subscriptions without late events (their rows and usage locks held by the caller) in one statement, as _rate_subscription would each: periods ended p_grace ago, one segment each (a subscription with a period cut by a change or a pause is left out), usage from the rollups and edge events, every charge priced at once, USAGE invoices, lines, ratings, credit, events, cursors.
Returns each subscription rated and its USAGE invoice (NULL: nothing billed); the ones left out are not returned.';

-- The same statement on one shard group's own shards (rate_usage_in_shard's set-based step), on the
-- node holding the group (on one PostgreSQL, group 0: the tables themselves); planned per call.
CREATE OR REPLACE FUNCTION billing._rate_usage_set_in_shard(p_shard_group integer, p_customer_ids bigint[],
                                                            p_subscription_ids bigint[], p_now timestamptz, p_grace interval)
RETURNS TABLE (customer_id bigint, subscription_id bigint, invoice_id bigint)
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
SET enable_nestloop = off
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
    v_taxes boolean := EXISTS (SELECT 1 FROM billing.tax_rate r WHERE r.active);
BEGIN
    RETURN QUERY EXECUTE billing._rate_usage_set_statement(billing._rate_usage_set_names(p_shard_group, jsonb_build_object(
        'customer_ids', '$1', 'subscription_ids', '$2', 'now', '$3', 'grace', '$4', 'taxes', '$5')))
     USING p_customer_ids, p_subscription_ids, p_now, p_grace, v_taxes;
END
$$;
COMMENT ON FUNCTION billing._rate_usage_set_in_shard(integer, bigint[], bigint[], timestamptz, interval) IS
'Private: the set-based rating statement (_rate_usage_set_statement) on one shard group''s own shards and this node''s copies of the reference tables (rate_usage_in_shard''s set-based step; group 0 on one PostgreSQL: the tables), for subscriptions whose rows and usage locks the caller holds.
Returns each subscription rated and its USAGE invoice (NULL: nothing billed); the ones left out are not returned.';
