-- 74_usage_preview: the open period's usage told before it is invoiced (docs/usage.md): the upcoming
-- invoice (GET /subscriptions/{id}/upcoming-invoice), the usage alerts (their CRUD and the worker's
-- check), the console's usage panel of a subscription. Read-only but the alerts.
-- Re-applied after every migration: CREATE OR REPLACE only.

-- The upcoming invoice of a subscription (GET /subscriptions/{id}/upcoming-invoice): what the
-- next invoicing at its period's end will bill, as of p_now: the next period's fixed price (the
-- plan it renews on: a scheduled change's, at the price for that period; none when it ends), the
-- current period's usage so far per plan segment and charge, and the late events' adjustments of
-- earlier spans (the increase over what was billed). Read-only, from the rollups; coupons are not
-- previewed (the renewal applies them); the tax of the customer's address on the subtotal.
CREATE OR REPLACE FUNCTION billing.upcoming_invoice(p_subscription_id bigint, p_now timestamptz DEFAULT now())
RETURNS jsonb
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
-- its statements' (and the functions' it calls) generic plans, made once a session: the custom plans
-- the plan cache kept choosing were made again at every call, ~30% of a call's CPU (1.6-2.0 against
-- 2.7 ms at 2M events, bench/README.md "Current usage flat"); on Citus reset (db/citus/10_adapt.sql)
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_now   timestamptz := billing._check_now(p_now);
    v_sub   billing.subscription;
    v_plan  billing.plan;
    v_next  billing.plan;
    v_cur   billing.usage_cursor;
    v_lines jsonb := '[]';
    v_seg   record;
    v_qty   numeric;
    v_amount bigint;
    v_before bigint;
    v_price bigint;
    v_end   timestamptz;
    v_sub_total bigint := 0;
    v_tax   record;
    v_upto  timestamptz;
    v_bounds timestamptz[];
    v_again_start timestamptz[];
    v_again_end   timestamptz[];
    v_again_plan  bigint[];
    v_usage jsonb := '{}';  -- per span read: {meter: value}
    v_key   text;
    v_rows  jsonb := '[]';  -- the usage lines before their amounts
    v_usage_lines jsonb;
    v_models text[] := '{}';
    v_units numeric[] := '{}';
    v_packages bigint[] := '{}';
    v_tiers jsonb[] := '{}';
    v_included numeric[] := '{}';
    v_minimums bigint[] := '{}';
    v_maximums bigint[] := '{}';
    v_qtys numeric[] := '{}';
    v_billed jsonb;  -- what each (meter, span start) billed already: {meter/start: sum}
BEGIN
    SELECT * INTO v_sub FROM billing.subscription s WHERE s.id = p_subscription_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'BL404', MESSAGE = format('subscription %s not found', p_subscription_id);
    END IF;
    SELECT * INTO v_plan FROM billing.plan WHERE id = v_sub.plan_id;
    SELECT * INTO v_cur FROM billing.usage_cursor u WHERE u.customer_id = v_sub.customer_id AND u.subscription_id = v_sub.id;
    -- the fixed price of the next period, unless the subscription ends with this one
    IF v_sub.status NOT IN ('CANCELED', 'PAUSED') AND NOT v_sub.cancel_at_period_end THEN
        SELECT * INTO v_next FROM billing.plan WHERE id = coalesce(v_sub.scheduled_plan_id, v_sub.plan_id);
        v_price := billing._price_at(v_next, v_sub.current_period_end);
        v_end := billing._period_end(v_sub.billing_anchor, v_next.billing_interval, v_next.interval_count,
                                     v_sub.period_number + 1, v_sub.timezone);
        IF v_price * v_sub.quantity > 0 THEN
            v_lines := v_lines || jsonb_build_object('kind', 'PLAN', 'planCode', v_next.code, 'quantity', v_sub.quantity,
                                                     'unitAmount', v_price, 'amount', v_price * v_sub.quantity,
                                                     'periodStart', v_sub.current_period_end,
                                                     'periodEnd', v_end);
            v_sub_total := v_sub_total + v_price * v_sub.quantity;
        END IF;
    END IF;
    -- the usage not rated yet, so far: from where it is rated to now (or to the service's end)
    v_upto := CASE WHEN v_sub.status = 'CANCELED'
                   THEN least(coalesce(v_sub.canceled_at, v_sub.current_period_end), v_sub.current_period_end)
                   ELSE least(v_now, v_sub.current_period_end) END;
    -- the period boundaries read first, then segmented (on Citus a function called inside a query of
    -- one shard would be sent to its worker)
    v_bounds := ARRAY(SELECT DISTINCT b FROM (
                          SELECT i.period_start AS b FROM billing.invoice i
                           WHERE i.customer_id = v_sub.customer_id AND i.subscription_id = v_sub.id
                             AND i.kind IN ('INITIAL', 'RENEWAL', 'PLAN_CHANGE')
                             AND i.period_start > coalesce(v_cur.rated_until, v_sub.current_period_start) AND i.period_start < v_upto
                          UNION ALL SELECT v_upto) q
                       WHERE b > coalesce(v_cur.rated_until, v_sub.current_period_start) ORDER BY b);
    SELECT coalesce(array_agg(q.span_start ORDER BY q.span_start), '{}'), coalesce(array_agg(q.span_end ORDER BY q.span_start), '{}'),
           coalesce(array_agg(q.plan_id ORDER BY q.span_start), '{}')
      INTO v_again_start, v_again_end, v_again_plan
      FROM (SELECT DISTINCT r.span_start, r.span_end, r.plan_id FROM billing.usage_rating r
             WHERE r.customer_id = v_sub.customer_id AND r.subscription_id = v_sub.id
               AND v_cur.late_since IS NOT NULL AND r.span_end > v_cur.late_since) q;
    -- what the segments' spans billed already, per meter and span start, in ONE read (the segments
    -- start at rated_until or at a late span's start, never before)
    SELECT coalesce(jsonb_object_agg(q.k, q.b), '{}') INTO v_billed
      FROM (SELECT r.meter_code || '/' || r.span_start::text AS k, sum(r.billed) AS b FROM billing.usage_rating r
             WHERE r.customer_id = v_sub.customer_id AND r.subscription_id = v_sub.id
               AND r.span_start >= least(coalesce(v_cur.rated_until, v_sub.current_period_start), v_again_start[1])
             GROUP BY 1) q;
    -- every (segment, charge) first, its quantity from ONE read of its span's usage (every meter);
    -- then all of them priced in one call (_usage_amounts: a SQL function is planned at each call)
    FOR v_seg IN
        WITH periods AS (
            SELECT coalesce(lag(b) OVER (ORDER BY b), coalesce(v_cur.rated_until, v_sub.current_period_start)) AS p_start, b AS p_end
              FROM unnest(v_bounds) b
        ), segs AS (
            SELECT g.seg_start, g.seg_end, g.plan_id, false AS late
              FROM periods p
             CROSS JOIN LATERAL billing._usage_segments(v_sub.customer_id, v_sub.id, p.p_start, p.p_end, v_sub.plan_id) g
            UNION
            SELECT a.s, a.e, a.p, true FROM unnest(v_again_start, v_again_end, v_again_plan) AS a (s, e, p)
        )
        SELECT s.*, c.meter_code, c.model, c.unit_amount, c.package_size, c.tiers, c.included_units, c.minimum_amount,
               c.maximum_amount, p.code AS plan_code
          FROM segs s JOIN billing.plan_charge c ON c.plan_id = s.plan_id JOIN billing.plan p ON p.id = s.plan_id
         ORDER BY s.seg_start, c.meter_code
    LOOP
        v_key := v_seg.seg_start::text || '/' || v_seg.seg_end::text;
        IF NOT v_usage ? v_key THEN
            v_usage := v_usage || jsonb_build_object(v_key, (
                SELECT coalesce(jsonb_object_agg(u.meter_code, u.value) FILTER (WHERE u.value IS NOT NULL), '{}')
                  FROM billing.usage_between(v_sub.customer_id, v_seg.seg_start, v_seg.seg_end) u));
        END IF;
        v_qty := coalesce((v_usage -> v_key ->> v_seg.meter_code)::numeric, 0);
        -- what was billed for this span and meter already (a late adjustment bills the increase)
        v_before := coalesce((v_billed ->> (v_seg.meter_code || '/' || v_seg.seg_start::text))::bigint, 0);
        v_models := v_models || v_seg.model;
        v_units := v_units || v_seg.unit_amount;
        v_packages := v_packages || v_seg.package_size;
        v_tiers := v_tiers || v_seg.tiers;
        v_included := v_included || v_seg.included_units;
        v_minimums := v_minimums || v_seg.minimum_amount;
        v_maximums := v_maximums || v_seg.maximum_amount;
        v_qtys := v_qtys || v_qty;
        v_rows := v_rows || jsonb_build_object('kind', 'USAGE', 'meterCode', v_seg.meter_code, 'planCode', v_seg.plan_code,
                                               'quantity', v_qty, 'late', v_seg.late, 'before', v_before,
                                               'periodStart', v_seg.seg_start, 'periodEnd', v_seg.seg_end);
    END LOOP;
    IF cardinality(v_qtys) > 0 THEN
        -- each line's amount less what was billed for its span already (a late adjustment: the increase)
        SELECT coalesce(jsonb_agg(q.line ORDER BY q.n), '[]'), coalesce(sum((q.line ->> 'amount')::bigint), 0)
          INTO v_usage_lines, v_amount
          FROM (SELECT a.n, (v_rows -> (a.n::integer - 1)) - 'before'
                            || jsonb_build_object('amount', greatest(a.amount - (v_rows -> (a.n::integer - 1) ->> 'before')::bigint, 0)) AS line
                  FROM billing._usage_amounts(v_models, v_units, v_packages, v_tiers, v_included, v_minimums, v_maximums, v_qtys) a) q
         WHERE NOT ((q.line ->> 'late')::boolean AND (q.line ->> 'amount')::bigint = 0);
        v_lines := v_lines || v_usage_lines;
        v_sub_total := v_sub_total + v_amount;
    END IF;
    v_tax := billing._invoice_tax_row(v_sub.customer_id, v_sub_total);
    RETURN jsonb_build_object(
        'object', 'upcoming_invoice', 'subscriptionId', v_sub.id, 'customerId', v_sub.customer_id,
        'currency', v_plan.currency, 'invoicedAt', v_sub.current_period_end, 'asOf', v_now,
        'lines', v_lines, 'subtotal', v_sub_total,
        'tax', coalesce(v_tax.tax_amount, 0) + coalesce(v_tax.tax_included, 0),
        'taxInclusive', coalesce(v_tax.tax_included, 0) > 0,
        'total', v_sub_total + coalesce(v_tax.tax_amount, 0));
END
$$;
COMMENT ON FUNCTION billing.upcoming_invoice(bigint, timestamptz) IS
'The preview of what a subscription''s next invoicing (at its period''s end) bills as of p_now: the next period''s fixed price (a scheduled plan''s; none when it ends), the usage not rated yet per plan segment and charge, late adjustments; tax on the subtotal; coupons not previewed. BL404 for an unknown subscription.
Returns a JSON document {object, subscriptionId, customerId, currency, invoicedAt, asOf, lines[], subtotal, tax, taxInclusive, total}.';

-- Usage alerts (docs/usage.md): a customer's threshold on a meter, announced once per open period.
CREATE OR REPLACE FUNCTION billing.set_usage_alert(p_customer_id bigint, p_meter_code text, p_threshold numeric,
                                                   p_now timestamptz DEFAULT now())
RETURNS billing.usage_alert
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_now   timestamptz := billing._check_now(p_now);
    v_alert billing.usage_alert;
BEGIN
    PERFORM billing._audit('set_usage_alert', jsonb_build_object('customer_id', p_customer_id, 'meter_code', p_meter_code,
                                                                 'threshold', p_threshold, 'now', p_now));
    IF p_threshold IS NULL OR p_threshold <= 0 THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = format('usage alert: a threshold above 0, got %s', p_threshold);
    END IF;
    IF NOT EXISTS (SELECT 1 FROM billing.customer c WHERE c.id = p_customer_id) THEN
        RAISE EXCEPTION USING ERRCODE = 'BL404', MESSAGE = format('customer %s not found', p_customer_id);
    END IF;
    IF NOT EXISTS (SELECT 1 FROM billing.meter m WHERE m.code = p_meter_code) THEN
        RAISE EXCEPTION USING ERRCODE = 'BL404', MESSAGE = format('meter %L not found', p_meter_code);
    END IF;
    -- (the worker's check reads every alert each round: a customer keeps at most 100)
    PERFORM 1 FROM billing.customer c WHERE c.id = p_customer_id FOR NO KEY UPDATE;  -- one setter at a time
    IF (SELECT count(*) FROM billing.usage_alert a WHERE a.customer_id = p_customer_id) >= 100
       AND NOT EXISTS (SELECT 1 FROM billing.usage_alert a
                        WHERE a.customer_id = p_customer_id AND a.meter_code = p_meter_code AND a.threshold = p_threshold) THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = format('usage alert: customer %s has 100 alerts already', p_customer_id);
    END IF;
    INSERT INTO billing.usage_alert AS a (customer_id, meter_code, threshold, created_at, updated_at)
    VALUES (p_customer_id, p_meter_code, p_threshold, v_now, v_now)
    ON CONFLICT ON CONSTRAINT usage_alert_one_per_threshold DO UPDATE SET updated_at = a.updated_at
    RETURNING * INTO v_alert;
    RETURN v_alert;
END
$$;
COMMENT ON FUNCTION billing.set_usage_alert(bigint, text, numeric, timestamptz) IS
'Sets a customer''s usage alert on a meter at a threshold (idempotent: the same threshold twice is one alert). BL404 unknown customer or meter, BL422 a threshold not above 0 or a 101st alert of the customer.
Returns the alert.';

-- The rest of the alerts' CRUD (HTTP: /v1/customers/{id}/usage-alerts, docs/usage.md).
CREATE OR REPLACE FUNCTION billing.list_usage_alerts(p_customer_id bigint)
RETURNS SETOF billing.usage_alert
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM billing.customer c WHERE c.id = p_customer_id) THEN
        RAISE EXCEPTION USING ERRCODE = 'BL404', MESSAGE = format('customer %s not found', p_customer_id);
    END IF;
    RETURN QUERY SELECT a.* FROM billing.usage_alert a WHERE a.customer_id = p_customer_id
                  ORDER BY a.meter_code, a.threshold, a.id;
END
$$;
COMMENT ON FUNCTION billing.list_usage_alerts(bigint) IS
'A customer''s usage alerts, by meter and threshold. BL404 for an unknown customer.
Returns the alerts (at most 100).';

CREATE OR REPLACE FUNCTION billing.update_usage_alert(p_customer_id bigint, p_alert_id bigint, p_threshold numeric,
                                                      p_now timestamptz DEFAULT now())
RETURNS billing.usage_alert
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_now   timestamptz := billing._check_now(p_now);
    v_alert billing.usage_alert;
BEGIN
    PERFORM billing._audit('update_usage_alert', jsonb_build_object('customer_id', p_customer_id, 'alert_id', p_alert_id,
                                                                    'threshold', p_threshold, 'now', p_now));
    IF p_threshold IS NULL OR p_threshold <= 0 THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = format('usage alert: a threshold above 0, got %s', p_threshold);
    END IF;
    SELECT * INTO v_alert FROM billing.usage_alert a WHERE a.customer_id = p_customer_id AND a.id = p_alert_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'BL404', MESSAGE = format('usage alert %s of customer %s not found', p_alert_id, p_customer_id);
    END IF;
    IF v_alert.threshold = p_threshold THEN
        RETURN v_alert;  -- unchanged (idempotent)
    END IF;
    IF EXISTS (SELECT 1 FROM billing.usage_alert a WHERE a.customer_id = p_customer_id AND a.meter_code = v_alert.meter_code
                                                      AND a.threshold = p_threshold) THEN
        RAISE EXCEPTION USING ERRCODE = 'BL409',
            MESSAGE = format('usage alert: customer %s has an alert on %s at %s already', p_customer_id, v_alert.meter_code, p_threshold);
    END IF;
    -- a new threshold may fire in the period it is set in, even if the old one fired there
    UPDATE billing.usage_alert a SET threshold = p_threshold, fired_for = NULL, updated_at = v_now
     WHERE a.customer_id = p_customer_id AND a.id = p_alert_id
    RETURNING * INTO v_alert;
    RETURN v_alert;
END
$$;
COMMENT ON FUNCTION billing.update_usage_alert(bigint, bigint, numeric, timestamptz) IS
'Changes a usage alert''s threshold (it may fire again in the current period; the same threshold: unchanged). BL404 unknown alert of the customer, BL409 the customer has that threshold on the meter already, BL422 a threshold not above 0.
Returns the alert.';

CREATE OR REPLACE FUNCTION billing.delete_usage_alert(p_customer_id bigint, p_alert_id bigint, p_now timestamptz DEFAULT now())
RETURNS billing.usage_alert
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_alert billing.usage_alert;
BEGIN
    PERFORM billing._check_now(p_now);
    PERFORM billing._audit('delete_usage_alert', jsonb_build_object('customer_id', p_customer_id, 'alert_id', p_alert_id, 'now', p_now));
    DELETE FROM billing.usage_alert a WHERE a.customer_id = p_customer_id AND a.id = p_alert_id
    RETURNING * INTO v_alert;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'BL404', MESSAGE = format('usage alert %s of customer %s not found', p_alert_id, p_customer_id);
    END IF;
    RETURN v_alert;
END
$$;
COMMENT ON FUNCTION billing.delete_usage_alert(bigint, bigint, timestamptz) IS
'Deletes a usage alert (an alert fires nothing more once deleted). BL404 unknown alert of the customer (deleted already included).
Returns the alert deleted.';

-- The alerts' check (the worker, after the rating): every alert not fired in its customer's open
-- period whose meter has reached its threshold there fires (UsageThresholdReached), once: fired_for
-- is set under the alert's row lock, so concurrent checks announce it once.
CREATE OR REPLACE FUNCTION billing.check_usage_alerts(p_batch_size integer DEFAULT 500, p_now timestamptz DEFAULT now())
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_now   timestamptz := billing._check_now(p_now);
    v_alert billing.usage_alert;
    v_use   record;
    v_fired integer := 0;
BEGIN
    IF p_batch_size IS NULL OR p_batch_size < 1 OR p_batch_size > 10000 THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = format('check_usage_alerts: batch 1..10000, got %s', p_batch_size);
    END IF;
    FOR v_alert IN
        SELECT a.* FROM billing.usage_alert a ORDER BY a.customer_id, a.id
    LOOP
        EXIT WHEN v_fired >= p_batch_size;
        SELECT u.value, u.period_start, u.period_end INTO v_use
          FROM billing.current_usage(v_alert.customer_id, v_now) u WHERE u.meter_code = v_alert.meter_code;
        CONTINUE WHEN v_use.value IS NULL OR v_use.value < v_alert.threshold
                   OR v_alert.fired_for IS NOT DISTINCT FROM v_use.period_start;
        UPDATE billing.usage_alert a SET fired_for = v_use.period_start, updated_at = v_now
         WHERE a.customer_id = v_alert.customer_id AND a.id = v_alert.id
           AND a.fired_for IS DISTINCT FROM v_use.period_start;
        CONTINUE WHEN NOT FOUND;  -- fired by a concurrent check
        PERFORM billing._emit_event('customer', v_alert.customer_id, 'UsageThresholdReached',
            jsonb_build_object('customerId', v_alert.customer_id, 'alertId', v_alert.id, 'meterCode', v_alert.meter_code,
                               'threshold', v_alert.threshold, 'value', v_use.value,
                               'periodStart', billing._utc_text(v_use.period_start),
                               'periodEnd', billing._utc_text(v_use.period_end)), v_now);
        v_fired := v_fired + 1;
    END LOOP;
    RETURN v_fired;
END
$$;
COMMENT ON FUNCTION billing.check_usage_alerts(integer, timestamptz) IS
'Fires the usage alerts whose meter reached their threshold in the customer''s open period and that did not fire in that period yet (UsageThresholdReached, once per period; up to p_batch_size). BL422 for a bad batch size.
Returns how many fired.';

-- The console's usage panel of a subscription (docs/console.md): its customer's usage per meter in
-- the open period (current_usage, from the rollups) and the preview of its next invoicing
-- (upcoming_invoice). Read-only.
CREATE OR REPLACE FUNCTION billing.console_usage(p_subscription_id bigint, p_now timestamptz DEFAULT now())
RETURNS jsonb
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_now      timestamptz := billing._check_now(p_now);
    v_customer bigint := billing._subscription_customer(p_subscription_id);
    v_plan_id  bigint;
    v_meters   jsonb;
    v_from     timestamptz;
    v_to       timestamptz;
    v_rated    timestamptz;
BEGIN
    SELECT s.plan_id INTO v_plan_id FROM billing.subscription s WHERE s.customer_id = v_customer AND s.id = p_subscription_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'BL404', MESSAGE = format('subscription %s does not exist', coalesce(p_subscription_id::text, 'NULL'));
    END IF;
    SELECT coalesce(jsonb_agg(jsonb_build_object('meter_code', u.meter_code, 'aggregation', u.aggregation,
                                                 'value', u.value, 'events', u.events) ORDER BY u.meter_code), '[]'),
           min(u.period_start), min(u.period_end)
      INTO v_meters, v_from, v_to
      FROM billing.current_usage(v_customer, v_now) u;
    SELECT u.rated_until INTO v_rated FROM billing.usage_cursor u
     WHERE u.customer_id = v_customer AND u.subscription_id = p_subscription_id;
    RETURN jsonb_build_object(
        'charged', EXISTS (SELECT 1 FROM billing.plan_charge c WHERE c.plan_id = v_plan_id),
        'meters', v_meters, 'period_start', v_from, 'period_end', v_to, 'rated_until', v_rated,
        'upcoming', billing.upcoming_invoice(p_subscription_id, v_now));
END
$$;
COMMENT ON FUNCTION billing.console_usage(bigint, timestamptz) IS
'A subscription''s usage panel for the console: whether its plan has usage charges, its customer''s usage per meter in the open period (current_usage), how far its usage is rated, and the preview of its next invoicing (upcoming_invoice). BL404 for an unknown subscription.
Returns one jsonb document.';
