-- 72_usage_rating: rating usage in arrears onto the service ledger (issue 29, docs/usage.md "Rating
-- in arrears"). A step of its own (billing.rate_usage, run by the worker after the renewals), never
-- inside the renewal statement: a subscription's ended periods, once their grace is over, become
-- one USAGE invoice whose service lines (item USAGE) sell each meter's usage of each plan segment
-- at that plan's charge; events that arrive after their span was rated are billed on the next USAGE
-- invoice as adjustment lines for the earlier span (the increase only: never billed twice).
-- Here: the rating itself, one subscription at a time (_rate_subscription, _rate_usage_rows), and
-- the step the worker calls (rate_usage); its set-based statement (_rate_usage_set) is
-- 81_usage_rating_set. What the rating follows
-- and when it is due: 73_usage_cursor; the upcoming invoice and the usage alerts: 74_usage_preview.
-- Re-applied after every migration: CREATE OR REPLACE only.

-- The plan segments of [p_from, p_to) of a subscription: the plan in force at each instant is the
-- plan of the newest PLAN CHARGE line in force covering it that no REVERSAL in force gives back by
-- then (a plan change at t reverses the old line from t and sells the new plan from t; a failed
-- change's lines are not in force, so its time stays on the old plan). Where no line covers (a
-- pause), the plan of the last line before, else p_default_plan. Adjacent segments of one plan merge.
CREATE OR REPLACE FUNCTION billing._usage_segments(p_customer_id bigint, p_subscription_id bigint,
                                                   p_from timestamptz, p_to timestamptz, p_default_plan bigint)
RETURNS TABLE (seg_start timestamptz, seg_end timestamptz, plan_id bigint)
LANGUAGE plpgsql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_lines  billing.service_line[] := '{}';
    v_line   billing.service_line;
    v_rev    billing.service_line;
    v_points timestamptz[];
    v_at     timestamptz;
    v_plan   bigint;
    v_last   bigint := p_default_plan;
    v_cur_start timestamptz;
    v_cur_plan  bigint;
    v_reversed  boolean;
    v_i integer;
BEGIN
    IF p_to <= p_from THEN
        RETURN;
    END IF;
    -- the subscription's PLAN lines in force that reach into the span (read, then checked one by one:
    -- on Citus a call inside a query of one shard would be sent to the worker with it)
    FOR v_line IN SELECT * FROM billing.service_line l
                   WHERE l.customer_id = p_customer_id AND l.subscription_id = p_subscription_id
                     AND l.item = 'PLAN' AND l.span_end > p_from AND l.span_start < p_to
                   ORDER BY l.id LOOP
        IF billing._line_in_force(v_line) THEN
            v_lines := v_lines || v_line;
        END IF;
    END LOOP;
    SELECT l.plan_id INTO v_last FROM billing.service_line l
     WHERE l.customer_id = p_customer_id AND l.subscription_id = p_subscription_id
       AND l.item = 'PLAN' AND l.kind = 'CHARGE' AND l.span_start <= p_from
     ORDER BY l.span_start DESC, l.id DESC LIMIT 1;
    v_last := coalesce(v_last, p_default_plan);
    v_points := ARRAY(SELECT DISTINCT x FROM (SELECT p_from AS x
                                              UNION ALL
                                              SELECT (l).span_start FROM unnest(v_lines) l
                                               WHERE (l).span_start > p_from AND (l).span_start < p_to
                                              UNION ALL
                                              SELECT (l).span_end FROM unnest(v_lines) l
                                               WHERE (l).span_end > p_from AND (l).span_end < p_to) q
                      ORDER BY x);
    FOR v_i IN 1 .. cardinality(v_points) LOOP
        v_at := v_points[v_i];
        v_plan := NULL;
        FOR v_line IN SELECT (l).* FROM unnest(v_lines) l
                       WHERE (l).kind = 'CHARGE' AND (l).span_start <= v_at AND (l).span_end > v_at
                       ORDER BY (l).id DESC LOOP
            v_reversed := false;
            FOREACH v_rev IN ARRAY v_lines LOOP
                IF v_rev.kind = 'REVERSAL' AND v_rev.reverses_id = v_line.id AND v_rev.span_start <= v_at THEN
                    v_reversed := true;
                END IF;
            END LOOP;
            IF NOT v_reversed THEN
                v_plan := v_line.plan_id;
                EXIT;
            END IF;
        END LOOP;
        v_plan := coalesce(v_plan, v_last);
        v_last := v_plan;
        IF v_cur_plan IS NULL THEN
            v_cur_start := v_at;
            v_cur_plan := v_plan;
        ELSIF v_plan <> v_cur_plan THEN
            seg_start := v_cur_start; seg_end := v_at; plan_id := v_cur_plan;
            RETURN NEXT;
            v_cur_start := v_at;
            v_cur_plan := v_plan;
        END IF;
    END LOOP;
    seg_start := v_cur_start; seg_end := p_to; plan_id := v_cur_plan;
    RETURN NEXT;
END
$$;
COMMENT ON FUNCTION billing._usage_segments(bigint, bigint, timestamptz, timestamptz, bigint) IS
'Private: the plan segments of [p_from, p_to) of a subscription, read from its PLAN lines in force (the newest line covering an instant and not given back by then); where none covers, the plan of the last line before, else p_default_plan.
Returns the segments in order, adjacent ones of one plan merged.';

-- The coupon's discount of a usage line (docs/usage.md "Coupons"), by the rule of the plan lines
-- (_line_discount): a percentage coupon of the subscription discounts a usage line of a plan it
-- covers (its plans, its currency) for the line's share of service inside the coupon's time: a
-- repeating coupon's months of service (those its first discounted plan line started, before
-- discount_until; none started, as on a usage-only plan: from the first period that began at or
-- after its redemption); a forever coupon from that period to its removal (ended_at); a coupon
-- replaced or removed before its periods were used (ended_at with periods left) no later than that. Percentages round down, on the line's gross times its share. An amount
-- off (a sum off a period's price, taken on the period's plan line) and a once coupon (the first
-- period's plan line) discount no usage line. Reads only; a coupon is never used up by usage.
CREATE OR REPLACE FUNCTION billing._usage_discount(p_customer_id bigint, p_subscription_id bigint, p_plan_id bigint,
                                                   p_gross bigint, p_start timestamptz, p_end timestamptz,
                                                   OUT discount bigint, OUT coupon_code text)
RETURNS record
LANGUAGE plpgsql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_red    record;
    v_plan   billing.plan;
    v_tz     text;
    v_from   timestamptz;
    v_to     timestamptz;
    v_part   bigint;
BEGIN
    discount := 0;
    IF p_gross <= 0 OR p_start >= p_end
       OR NOT EXISTS (SELECT 1 FROM billing.coupon_redemption r
                       WHERE r.customer_id = p_customer_id AND r.subscription_id = p_subscription_id) THEN
        RETURN;
    END IF;
    SELECT * INTO v_plan FROM billing.plan WHERE id = p_plan_id;
    SELECT s.timezone INTO v_tz FROM billing.subscription s WHERE s.customer_id = p_customer_id AND s.id = p_subscription_id;
    FOR v_red IN
        SELECT r.coupon_code, r.redeemed_at, r.ended_at, r.discount_until, r.periods_left, c.percent_off, c.duration, c.duration_periods
          FROM billing.coupon_redemption r JOIN billing.coupon c ON c.code = r.coupon_code
         WHERE r.customer_id = p_customer_id AND r.subscription_id = p_subscription_id
           AND c.percent_off IS NOT NULL AND c.duration IN ('repeating', 'forever')
           AND (c.plan_codes IS NULL OR v_plan.code = ANY (c.plan_codes))
           AND (c.currency IS NULL OR c.currency = v_plan.currency)
         ORDER BY r.redeemed_at, r.coupon_code
    LOOP
        IF v_red.duration = 'repeating' AND v_red.discount_until IS NOT NULL THEN
            -- its months of service, started by the first period line it discounted
            v_to := v_red.discount_until;
            v_from := ((v_red.discount_until AT TIME ZONE v_tz) - make_interval(months => v_red.duration_periods)) AT TIME ZONE v_tz;
        ELSE
            -- from the first period that began at or after its redemption (a repeating coupon no plan
            -- line started, as on a usage-only plan: its months from there)
            SELECT min(i.period_start) INTO v_from FROM billing.invoice i
             WHERE i.customer_id = p_customer_id AND i.subscription_id = p_subscription_id
               AND i.kind IN ('INITIAL', 'RENEWAL', 'PLAN_CHANGE') AND i.period_start >= v_red.redeemed_at;
            CONTINUE WHEN v_from IS NULL;
            v_to := CASE WHEN v_red.duration = 'repeating'
                         THEN ((v_from AT TIME ZONE v_tz) + make_interval(months => v_red.duration_periods)) AT TIME ZONE v_tz
                         ELSE coalesce(v_red.ended_at, 'infinity') END;
        END IF;
        IF v_red.ended_at IS NOT NULL AND coalesce(v_red.periods_left, 1) > 0 THEN
            -- replaced by another coupon or removed before its periods were used: its time ends there,
            -- as its plan lines' does (the next coupon's starts at the first period after it)
            v_to := least(v_to, v_red.ended_at);
        END IF;
        v_from := greatest(v_from, p_start);
        v_to := least(v_to, p_end);
        CONTINUE WHEN v_to <= v_from;
        v_part := floor(p_gross::numeric * v_red.percent_off / 100
                        * floor(extract(epoch FROM v_to) - extract(epoch FROM v_from))
                        / greatest(floor(extract(epoch FROM p_end) - extract(epoch FROM p_start)), 1))::bigint;
        IF v_part > 0 THEN
            discount := least(p_gross, discount + v_part);
            coupon_code := coalesce(coupon_code, v_red.coupon_code);
        END IF;
    END LOOP;
END
$$;
COMMENT ON FUNCTION billing._usage_discount(bigint, bigint, bigint, bigint, timestamptz, timestamptz) IS
'Private: the discount of a usage line [p_start, p_end) of p_gross on plan p_plan_id by the subscription''s percentage coupons (repeating or forever, covering the plan and its currency), for the line''s share of service inside each coupon''s time (rounded down); never more than the line.
Returns the discount and the coupon code (NULL when nothing was discounted).';

-- Rates one subscription (named by its cursor) at p_now, under the customer's usage lock: the periods ended at
-- least p_grace ago and not rated yet, each cut into plan segments, each segment rated per charge
-- of its plan (usage_between, _usage_amount); with late events (late_since), the segments already
-- rated that end after them, again, billing only the increase. The positive lines go on one USAGE
-- invoice: [rated_until, cut) for a live subscription; for a canceled one rated to its end, late
-- adjustments on an invoice [the end of its last USAGE invoice, p_now).
CREATE OR REPLACE FUNCTION billing._rate_subscription(p_customer_id bigint, p_subscription_id bigint,
                                                      p_now timestamptz, p_grace interval)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_cur     billing.usage_cursor;
    v_sub     billing.subscription;
    v_plan    billing.plan;
    v_end     timestamptz;   -- where the service rated so far may end (current period start, or the end of a canceled one)
    v_cut     timestamptz;   -- rated up to here by this call
    v_bounds  timestamptz[];
    v_work    record;
    v_charge  billing.plan_charge;
    v_qty     numeric;
    v_amount  bigint;
    v_before  bigint;
    v_billed  bigint;
    v_rows    jsonb := '[]';
    v_row     jsonb;
    v_total   bigint := 0;
    v_inv_start timestamptz;
    v_inv_end   timestamptz;
    v_invoice billing.invoice;
    v_tax     record;
    v_line_id bigint;
    v_seg_plan billing.plan;
    v_late    timestamptz;
    v_again_start timestamptz[];
    v_again_end   timestamptz[];
    v_again_plan  bigint[];
    v_seg_from timestamptz;
    v_seg_to   timestamptz;
    v_values  jsonb;
    v_disc    record;
    v_discount bigint := 0;
    v_coupon  text;
    v_line_disc bigint;
BEGIN
    -- Tried, never waited for: an ingestion of the customer in flight (or another rating worker)
    -- makes this call skip the subscription until the next one; so no lock order can deadlock.
    IF NOT pg_try_advisory_xact_lock(29, billing._usage_lock_key(p_customer_id)) THEN
        RETURN NULL;
    END IF;
    -- On Citus, then the customer's row on its node, FOR NO KEY UPDATE SKIP LOCKED: a batch of its
    -- usage committed on the coordinator but still prepared on the node (a failed COMMIT PREPARED)
    -- holds it FOR SHARE there, its events unseen (83_usage_ingest): skipped until it is committed.
    IF billing._distributed('billing.customer') THEN
        PERFORM 1 FROM billing.customer c WHERE c.id = p_customer_id FOR NO KEY UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            RETURN NULL;
        END IF;
    END IF;
    -- the subscription first, then its cursor: the order of every path that changes a subscription
    -- and then its cursor (change_plan, cancellations: _usage_touch), so none can deadlock with this
    SELECT * INTO v_sub FROM billing.subscription
     WHERE customer_id = p_customer_id AND id = p_subscription_id FOR NO KEY UPDATE;
    SELECT * INTO v_cur FROM billing.usage_cursor
     WHERE customer_id = p_customer_id AND subscription_id = p_subscription_id FOR UPDATE;
    IF v_cur.customer_id IS NULL OR v_sub.id IS NULL THEN
        RETURN NULL;
    END IF;
    v_late := v_cur.late_since;
    v_end := CASE WHEN v_sub.status = 'CANCELED'
                  THEN greatest(least(coalesce(v_sub.canceled_at, v_sub.current_period_end), v_sub.current_period_end),
                                v_cur.rated_until)
                  ELSE v_sub.current_period_start END;
    -- the period boundaries after rated_until up to v_end, and v_end itself: rated up to the last
    -- one whose grace is over
    v_bounds := ARRAY(SELECT DISTINCT b FROM (
                          SELECT i.period_start AS b FROM billing.invoice i
                           WHERE i.customer_id = p_customer_id AND i.subscription_id = p_subscription_id
                             AND i.kind IN ('INITIAL', 'RENEWAL', 'PLAN_CHANGE')
                             AND i.period_start > v_cur.rated_until AND i.period_start < v_end
                          UNION ALL SELECT v_end WHERE v_end > v_cur.rated_until) q
                       WHERE b + p_grace <= p_now ORDER BY b);
    v_cut := v_bounds[cardinality(v_bounds)];
    IF v_cut IS NULL AND (v_late IS NULL OR v_sub.status <> 'CANCELED' OR NOT v_cur.finished) THEN
        -- nothing ended long enough ago; late events of a live subscription wait for its next period
        RETURN NULL;
    END IF;

    -- the spans already rated that late events reach, read first (on Citus a function called inside
    -- a query of one shard would be sent to its worker)
    SELECT coalesce(array_agg(q.span_start ORDER BY q.span_start), '{}'), coalesce(array_agg(q.span_end ORDER BY q.span_start), '{}'),
           coalesce(array_agg(q.plan_id ORDER BY q.span_start), '{}')
      INTO v_again_start, v_again_end, v_again_plan
      FROM (SELECT DISTINCT r.span_start, r.span_end, r.plan_id FROM billing.usage_rating r
             WHERE r.customer_id = p_customer_id AND r.subscription_id = p_subscription_id
               AND v_late IS NOT NULL AND r.span_end > v_late) q;

    -- the work: (span, plan, charge) to rate, new periods first, then the late spans again
    FOR v_work IN
        WITH periods AS (
            SELECT coalesce(lag(b) OVER (ORDER BY b), v_cur.rated_until) AS p_start, b AS p_end
              FROM unnest(v_bounds) b
        ), fresh AS (
            SELECT g.seg_start, g.seg_end, g.plan_id
              FROM periods p
             CROSS JOIN LATERAL billing._usage_segments(p_customer_id, p_subscription_id, p.p_start, p.p_end, v_sub.plan_id) g
        ), again AS (
            SELECT a.s AS seg_start, a.e AS seg_end, a.p AS plan_id
              FROM unnest(v_again_start, v_again_end, v_again_plan) AS a (s, e, p)
        )
        SELECT w.seg_start, w.seg_end, w.plan_id, c.meter_code
          FROM (SELECT * FROM fresh UNION SELECT * FROM again) w
          JOIN billing.plan_charge c ON c.plan_id = w.plan_id
         ORDER BY w.seg_start, c.meter_code
    LOOP
        SELECT * INTO v_charge FROM billing.plan_charge c WHERE c.plan_id = v_work.plan_id AND c.meter_code = v_work.meter_code;
        -- the segment's usage, every meter at once (read once for the segment's charges)
        IF v_seg_from IS DISTINCT FROM v_work.seg_start OR v_seg_to IS DISTINCT FROM v_work.seg_end THEN
            v_seg_from := v_work.seg_start;
            v_seg_to := v_work.seg_end;
            v_values := (SELECT coalesce(jsonb_object_agg(u.meter_code, u.value), '{}')
                           FROM billing.usage_between(p_customer_id, v_work.seg_start, v_work.seg_end) u);
        END IF;
        v_qty := coalesce((v_values ->> v_work.meter_code)::numeric, 0);
        v_amount := billing._usage_amount(v_charge, v_qty);
        SELECT coalesce(sum(r.billed), 0) INTO v_before FROM billing.usage_rating r
         WHERE r.customer_id = p_customer_id AND r.subscription_id = p_subscription_id
           AND r.meter_code = v_work.meter_code AND r.span_start = v_work.seg_start;
        v_billed := greatest(v_amount - v_before, 0);
        v_disc := billing._usage_discount(p_customer_id, p_subscription_id, v_work.plan_id, v_billed,
                                          v_work.seg_start, v_work.seg_end);
        v_rows := v_rows || jsonb_build_object('start', v_work.seg_start, 'end', v_work.seg_end, 'plan', v_work.plan_id,
                                               'meter', v_work.meter_code, 'qty', v_qty, 'amount', v_amount,
                                               'billed', v_billed, 'discount', v_disc.discount, 'coupon', v_disc.coupon_code);
        v_total := v_total + v_billed;
        v_discount := v_discount + v_disc.discount;
        v_coupon := coalesce(v_coupon, v_disc.coupon_code);
    END LOOP;

    IF v_total > 0 THEN
        SELECT * INTO v_plan FROM billing.plan WHERE id = v_sub.plan_id;
        IF v_cut IS NOT NULL THEN
            v_inv_start := v_cur.rated_until;
            v_inv_end := v_cut;
        ELSE
            SELECT max(i.period_end) INTO v_inv_start FROM billing.invoice i
             WHERE i.customer_id = p_customer_id AND i.subscription_id = p_subscription_id AND i.kind = 'USAGE';
            v_inv_start := greatest(coalesce(v_inv_start, v_cur.rated_until), v_cur.rated_until);
            v_inv_end := p_now;
        END IF;
        IF v_inv_end > v_inv_start THEN
            v_invoice := billing._new_invoice(v_sub, 'USAGE', v_inv_start, v_inv_end, v_total - v_discount, v_plan, 0, p_now,
                                              NULL, NULL, v_discount, v_coupon);
        ELSE
            v_total := 0;  -- (a finished subscription rated again at the instant of its last invoice: next call)
            RETURN NULL;
        END IF;
    END IF;

    FOR v_row IN SELECT r FROM jsonb_array_elements(v_rows) r LOOP
        v_line_id := NULL;
        v_billed := (v_row ->> 'billed')::bigint;
        IF v_billed > 0 THEN
            SELECT * INTO v_seg_plan FROM billing.plan WHERE id = (v_row ->> 'plan')::bigint;
            v_line_disc := (v_row ->> 'discount')::bigint;
            v_tax := billing._line_tax(p_customer_id, v_billed - v_line_disc);
            INSERT INTO billing.service_line (customer_id, subscription_id, invoice_id, kind, item, meter_code, usage_quantity,
                                              plan_id, quantity, unit_price, span_start, span_end, gross, discount, coupon_code, net,
                                              tax, tax_inclusive, currency, basis_start, basis_gross, basis_net, created_at)
            VALUES (p_customer_id, p_subscription_id, v_invoice.id, 'CHARGE', 'USAGE', v_row ->> 'meter', (v_row ->> 'qty')::numeric,
                    v_seg_plan.id, 1, v_billed, (v_row ->> 'start')::timestamptz, (v_row ->> 'end')::timestamptz,
                    v_billed, v_line_disc, CASE WHEN v_line_disc > 0 THEN v_row ->> 'coupon' END, v_billed - v_line_disc,
                    v_tax.tax, v_tax.inclusive, v_seg_plan.currency,
                    (v_row ->> 'start')::timestamptz, v_billed, v_billed - v_line_disc, p_now)
            RETURNING id INTO v_line_id;
        END IF;
        INSERT INTO billing.usage_rating (customer_id, subscription_id, meter_code, span_start, rated_at, span_end, plan_id,
                                          quantity, amount, billed, invoice_id, line_id)
        VALUES (p_customer_id, p_subscription_id, v_row ->> 'meter', (v_row ->> 'start')::timestamptz, p_now,
                (v_row ->> 'end')::timestamptz, (v_row ->> 'plan')::bigint, (v_row ->> 'qty')::numeric,
                (v_row ->> 'amount')::bigint, v_billed, CASE WHEN v_billed > 0 THEN v_invoice.id END, v_line_id);
    END LOOP;

    UPDATE billing.usage_cursor
       SET rated_until = coalesce(v_cut, rated_until), late_since = NULL,
           finished = (v_sub.status = 'CANCELED' AND coalesce(v_cut, rated_until) >= v_end),
           due_at = billing._usage_due_at(v_sub, coalesce(v_cut, rated_until),
                                          v_sub.status = 'CANCELED' AND coalesce(v_cut, rated_until) >= v_end),
           updated_at = p_now
     WHERE customer_id = p_customer_id AND subscription_id = p_subscription_id;
    RETURN v_invoice.id;
END
$$;
COMMENT ON FUNCTION billing._rate_subscription(bigint, bigint, timestamptz, interval) IS
'Private: rates one subscription''s usage at p_now under the customer''s usage lock: its periods ended p_grace ago or more and not rated (per plan segment and charge), and the spans rated before that late events reach (the increase only); the positive amounts as service lines (item USAGE) on one USAGE invoice; usage_rating records every rating; the cursor moves to the last period boundary rated.
Returns the USAGE invoice''s id, NULL when nothing was billed.';

-- The rating one subscription at a time (_rate_subscription each): the path on Citus (a query of
-- one shard group per subscription), and the reference the set-based path is compared with
-- (bench/usage, 721_usage_rating_set).
CREATE OR REPLACE FUNCTION billing._rate_usage_rows(p_batch_size integer, p_now timestamptz, p_grace interval)
RETURNS TABLE (customer_id bigint, subscription_id bigint, invoice_id bigint)
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_sub record;
BEGIN
    PERFORM billing._usage_follow_all(p_now);
    FOR v_sub IN
        SELECT d.customer_id, d.subscription_id FROM billing._usage_due(p_batch_size, p_now, p_grace) d
    LOOP
        customer_id := v_sub.customer_id;
        subscription_id := v_sub.subscription_id;
        invoice_id := billing._rate_subscription(v_sub.customer_id, v_sub.subscription_id, p_now, p_grace);
        RETURN NEXT;
    END LOOP;
END
$$;
COMMENT ON FUNCTION billing._rate_usage_rows(integer, timestamptz, interval) IS
'Private: the rating one subscription at a time (_rate_subscription each, under its customer''s usage lock, tried): the path on Citus and the reference of the set-based one.
Returns each subscription looked at and its USAGE invoice (NULL: nothing billed).';

-- rate_usage's set-based step on the Citus coordinator (admin, the demo; the worker rates per group
-- itself, 89_usage_rating_shards), after rate_usage took the due subscriptions (_usage_due: unlocked
-- on Citus) and tried their customers' usage locks: per shard group one call of _rate_usage_group,
-- which Citus runs on the group's node (force-delegated: the set statement on the group's shards, in
-- this transaction). What it did not rate (a period cut by a change or a pause, late events, a
-- cancellation, a customer whose row is held) rate_usage rates one at a time, as on one PostgreSQL.
-- The calls' values are literals: Citus delegates a call only with constant arguments.
DROP FUNCTION IF EXISTS billing._rate_usage_in_groups(integer, timestamptz, interval, boolean);
CREATE OR REPLACE FUNCTION billing._rate_usage_in_groups(p_cust bigint[], p_subs bigint[], p_locked bigint[],
                                                         p_now timestamptz, p_grace interval)
RETURNS TABLE (customer_id bigint, subscription_id bigint, invoice_id bigint)
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_cust   bigint[] := p_cust;
    v_subs   bigint[] := p_subs;
    v_locked bigint[] := p_locked;
    v_group  record;
    v_row    record;
BEGIN
    FOR v_group IN
        SELECT g.shard_group, min(k.c) AS anchor, array_agg(k.c ORDER BY k.c, k.i) AS c, array_agg(k.i ORDER BY k.c, k.i) AS i
          FROM unnest(v_cust, v_subs) AS k (c, i)
          JOIN (SELECT (row_number() OVER (ORDER BY d.shardminvalue::bigint))::integer AS shard_group, d.shardid
                  FROM pg_catalog.pg_dist_shard d WHERE d.logicalrelid = 'billing.customer'::regclass) g
            ON g.shardid = get_shard_id_for_distribution_column('billing.customer', k.c)
         WHERE k.c = ANY (v_locked)
         GROUP BY g.shard_group ORDER BY g.shard_group
    LOOP
        FOR v_row IN EXECUTE format('SELECT customer_id, subscription_id, invoice_id FROM billing._rate_usage_group(%s, %s, %L, %L, %L, %L)',
                                    v_group.anchor, v_group.shard_group, v_group.c, v_group.i, p_now, p_grace)
        LOOP
            customer_id := v_row.customer_id;
            subscription_id := v_row.subscription_id;
            invoice_id := v_row.invoice_id;
            RETURN NEXT;
        END LOOP;
    END LOOP;
END
$$;
COMMENT ON FUNCTION billing._rate_usage_in_groups(bigint[], bigint[], bigint[], timestamptz, interval) IS
'Private: rate_usage''s set-based step on Citus, given the due subscriptions (customers, subscriptions) and the customers whose usage locks it took: the live ones without late events rated per shard group on its node (_rate_usage_group, force-delegated); rate_usage rates the rest one at a time.
Returns each subscription the set statement rated and its USAGE invoice (NULL: nothing billed).';

-- The rating step (the worker, after the renewals; docs/usage.md): follows every subscription on a
-- plan with usage charges, then rates up to p_batch_size subscriptions whose period ended at least
-- p_grace ago (or whose canceled service did, or with late events after their end), each under its
-- customer's usage lock, tried (a customer busy elsewhere is left for the next call). On one
-- PostgreSQL: the locks in one statement, the rows in one, then the live subscriptions without late
-- events and with whole-period segments rated set-based (_rate_usage_set), the rest (a change or
-- a pause inside a period, late events, cancellations) one at a time (_rate_subscription). On
-- Citus: the same split, the set statement per shard group on its node (_rate_usage_in_groups).
-- A call that billed leaves one audit row (docs/security.md "Audit log"), on either.
CREATE OR REPLACE FUNCTION billing.rate_usage(p_batch_size integer DEFAULT 500, p_now timestamptz DEFAULT now(),
                                              p_grace interval DEFAULT interval '1 hour', p_follow boolean DEFAULT true)
RETURNS TABLE (customer_id bigint, subscription_id bigint, invoice_id bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_now    timestamptz := billing._check_now(p_now);
    v_cust   bigint[];
    v_subs   bigint[];
    v_locked bigint[];
    v_fast_c bigint[];
    v_fast_s bigint[];
    v_done   bigint[];
    v_done_c bigint[];
    v_done_i bigint[];
    v_row    record;
    v_billed integer;
BEGIN
    IF p_batch_size IS NULL OR p_batch_size < 1 OR p_batch_size > 10000
       OR p_grace IS NULL OR p_grace < interval '0' OR p_grace > interval '7 days' THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('rate_usage: batch 1..10000 and grace 0..7 days, got %s, %s', p_batch_size, p_grace);
    END IF;
    IF p_follow THEN
        PERFORM billing._usage_follow_all(v_now);
    END IF;
    SELECT coalesce(array_agg(d.customer_id ORDER BY d.customer_id, d.subscription_id), '{}'),
           coalesce(array_agg(d.subscription_id ORDER BY d.customer_id, d.subscription_id), '{}')
      INTO v_cust, v_subs
      FROM billing._usage_due(p_batch_size, v_now, p_grace) d;
    -- the customers' usage locks, tried in key order (a customer whose ingestion is in flight is
    -- rated on a next call), in a statement of their own: what follows reads with a snapshot taken
    -- after them (an ingestion committed before a lock is read)
    v_locked := ARRAY(SELECT c FROM (SELECT DISTINCT c FROM unnest(v_cust) c) q
                       WHERE pg_try_advisory_xact_lock(29, billing._usage_lock_key(c)) ORDER BY c);
    IF billing._distributed('billing.customer') THEN  -- the set statement per shard group on its node
        SELECT coalesce(array_agg(r.subscription_id ORDER BY r.n), '{}'), coalesce(array_agg(r.customer_id ORDER BY r.n), '{}'),
               coalesce(array_agg(r.invoice_id ORDER BY r.n), '{}')
          INTO v_done, v_done_c, v_done_i
          FROM billing._rate_usage_in_groups(v_cust, v_subs, v_locked, v_now, p_grace) WITH ORDINALITY AS r (customer_id, subscription_id, invoice_id, n);
    ELSE
        -- the rows, locked in key order (the subscriptions are held since the due scan: as in
        -- _rate_subscription, the subscription before its cursor); the live ones without late events
        -- go set-based
        SELECT coalesce(array_agg(q.customer_id ORDER BY q.customer_id, q.subscription_id) FILTER (WHERE q.fast), '{}'),
               coalesce(array_agg(q.subscription_id ORDER BY q.customer_id, q.subscription_id) FILTER (WHERE q.fast), '{}')
          INTO v_fast_c, v_fast_s
          FROM (SELECT u.customer_id, u.subscription_id,
                       (NOT u.finished AND u.late_since IS NULL AND s.status <> 'CANCELED') AS fast
                  FROM unnest(v_cust, v_subs) AS k (c, i)
                  JOIN (SELECT DISTINCT l FROM unnest(v_locked) l) l ON l.l = k.c
                  JOIN billing.usage_cursor u ON u.customer_id = k.c AND u.subscription_id = k.i
                  JOIN billing.subscription s ON s.customer_id = k.c AND s.id = k.i
                 ORDER BY u.customer_id, u.subscription_id
                   FOR UPDATE OF u FOR NO KEY UPDATE OF s) q;
        SELECT coalesce(array_agg(r.subscription_id), '{}'), coalesce(array_agg(r.customer_id), '{}'),
               coalesce(array_agg(r.invoice_id), '{}')
          INTO v_done, v_done_c, v_done_i
          FROM billing._rate_usage_set(v_fast_c, v_fast_s, v_now, p_grace) r;
    END IF;
    RETURN QUERY SELECT d.c, d.s, d.i FROM unnest(v_done_c, v_done, v_done_i) AS d (c, s, i);
    v_billed := cardinality(array_remove(v_done_i, NULL));
    -- the rest, one at a time (a customer not locked above is tried again there, and skipped: NULL)
    FOR v_row IN
        SELECT k.c, k.i FROM unnest(v_cust, v_subs) WITH ORDINALITY AS k (c, i, n)
         WHERE NOT EXISTS (SELECT 1 FROM unnest(v_done) d WHERE d = k.i)
         ORDER BY k.n
    LOOP
        customer_id := v_row.c;
        subscription_id := v_row.i;
        invoice_id := billing._rate_subscription(v_row.c, v_row.i, v_now, p_grace);
        v_billed := v_billed + (invoice_id IS NOT NULL)::integer;
        RETURN NEXT;
    END LOOP;
    -- an audit row only when something was billed (as rate_usage_in_shard's; idle workers ask every round)
    IF v_billed > 0 THEN
        PERFORM billing._audit('rate_usage', jsonb_build_object('rated', cardinality(v_subs), 'set_based', cardinality(v_done),
                                                                'invoiced', v_billed, 'now', v_now));
    END IF;
END
$$;
COMMENT ON FUNCTION billing.rate_usage(integer, timestamptz, interval, boolean) IS
'Rates usage in arrears (docs/usage.md): follows every subscription on a plan with usage charges (p_follow; false: the worker''s calls after its round''s first, as that reads every cursor), then rates up to p_batch_size subscriptions whose period (or canceled service) ended p_grace or more before p_now, or with late events: one USAGE invoice each with a service line per charge and plan segment, late events as adjustment lines for their earlier span (the increase only). A customer whose usage lock is held (an ingestion or another rating in flight) is skipped until the next call. BL422 for a bad batch size or grace.
Returns each subscription looked at and its USAGE invoice (NULL: nothing billed).';
