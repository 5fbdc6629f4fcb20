-- 76_mrr_aggregate: MRR kept by the engine's own writes (migration 0360, issue 32), read by the
-- reports (75_reports: report_mrr, report_mrr_movements) and the console (86_console: console_mrr).
-- Re-applied after every migration: CREATE OR REPLACE only.
--
-- The rules are billing._mrr_points' (75_reports.sql, docs/reports.md "MRR"): at an instant, a
-- subscription's MRR is the sum of billing._mrr_term over its PLAN CHARGE lines in force covering
-- the instant, not ended by a reversal in force, its subscription neither canceled nor paused by
-- then; a live subscription past its period's end is counted at that period's last terms. Every
-- condition is a threshold on a line's, a reversal's or the subscription's instant, so each line
-- adds its term over at most two spans: [its start, the first of its end, its reversal, the
-- cancellation, the pause) and, while the subscription is live and not renewed, [its period's end,
-- infinity) when the line sells the period's last instant. billing._mrr_segments_of sums these
-- spans per subscription into steps (mrr_segment), and each customer's spans with some MRR per
-- currency (subscription_id 0). A step that starts or ends is a delta of the per-currency totals
-- at its instant (mrr_delta, grain I, and per UTC day, grain D); a step that changes a month's
-- start or end value is a delta of that month's movements (mrr_movement). Deltas sit at the
-- instants they take effect, whenever they are written: a line voided, reversed or ended later
-- than an instant already reported moves the figure of that instant (as the full recomputation
-- would), never only "from now on".
--
-- Kept: the engine's writes of service lines, of an invoice's status (in force or fallen), of a
-- subscription's status, cancellation, pause and period mark the customer in mrr_dirty (one row
-- per statement holding its customers' ids, insert-only: two writers never wait on one row; the
-- renewal's batch of 5,000 adds one row per table, not 5,000). billing._mrr_fold() recomputes the marked customers from the
-- committed rows, replaces their steps and writes the deltas (the retention pass runs it, every few
-- minutes). The readers add, for the customers still marked, their steps recomputed now less the
-- kept ones: every figure equals the full recomputation at any moment (862_mrr_aggregate.sql
-- checks it over a varied history). Recomputing a marked customer costs the reader 25-75 us, so
-- with more than 10,000 marks (about 5,000 renewed customers: a renewal marks each twice; a
-- migration's backfill; the first of the month before the next fold) the readers recompute in full
-- instead: the same figures, at the old cost. On Citus the triggers are dropped
-- (db/citus/10_adapt.sql) and the readers recompute.

CREATE OR REPLACE FUNCTION billing._mrr_segments_of(p_customers bigint[])
RETURNS TABLE (customer_id bigint, subscription_id bigint, currency text, starts timestamptz, ends timestamptz, mrr numeric)
LANGUAGE plpgsql STABLE
SET search_path = billing, pg_catalog, pg_temp
-- Planned with the array's length (5,000 customers of a renewal batch, or every customer of a
-- backfill): the lines are read by index per customer, every condition by index per line, and the
-- rest is one stream of window functions (no join between two intermediate sets, whose estimates a
-- generic plan gets wrong by orders of magnitude).
SET plan_cache_mode = force_custom_plan
SET jit = off
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH charges AS MATERIALIZED (
        -- The customers' PLAN CHARGE lines in force (billed: no invoice or one PAID, OPEN or REVIEW;
        -- nothing they depend on VOID or FAILED), with when a reversal in force ended them and
        -- their subscription's cancellation, pause and (live: ACTIVE or PAST_DUE, renewing) period end.
        SELECT l.customer_id, l.subscription_id, l.currency::text AS currency, l.span_start, l.span_end,
               coalesce((SELECT min(r.span_start)
                           FROM billing.service_line r
                           LEFT JOIN billing.invoice ri ON ri.customer_id = r.customer_id AND ri.id = r.invoice_id
                          WHERE r.customer_id = l.customer_id AND r.reverses_id = l.id AND r.item = 'PLAN'
                            AND (r.invoice_id IS NULL OR ri.status IN ('PAID', 'OPEN', 'REVIEW'))
                            AND NOT EXISTS (SELECT 1 FROM billing.invoice fi
                                             WHERE r.depends_on IS NOT NULL AND fi.customer_id = r.customer_id
                                               AND fi.id = ANY (r.depends_on) AND fi.status IN ('VOID', 'FAILED'))),
                        'infinity') AS ended_at,
               coalesce(s.canceled_at, 'infinity') AS canceled_at,
               CASE WHEN s.status = 'PAUSED' THEN coalesce(s.paused_at, 'infinity') ELSE 'infinity' END AS paused_at,
               CASE WHEN s.status IN ('ACTIVE', 'PAST_DUE') AND NOT s.cancel_at_period_end AND s.canceled_at IS NULL
                    THEN s.current_period_end END AS lag_from,
               billing._mrr_term(l.basis_net, l.net, l.tax, l.tax_inclusive, pl.billing_interval, pl.interval_count) AS term
          FROM (SELECT DISTINCT x AS customer_id FROM unnest(p_customers) x WHERE x IS NOT NULL) c
          JOIN billing.service_line l ON l.customer_id = c.customer_id
          JOIN billing.plan pl ON pl.id = l.plan_id
          LEFT JOIN billing.invoice i ON i.customer_id = l.customer_id AND i.id = l.invoice_id
          LEFT JOIN billing.subscription s ON s.customer_id = l.customer_id AND s.id = l.subscription_id
         WHERE l.item = 'PLAN' AND l.kind = 'CHARGE'
           AND (l.invoice_id IS NULL OR i.status IN ('PAID', 'OPEN', 'REVIEW'))
           AND NOT EXISTS (SELECT 1 FROM billing.invoice fi
                            WHERE l.depends_on IS NOT NULL AND fi.customer_id = l.customer_id
                              AND fi.id = ANY (l.depends_on) AND fi.status IN ('VOID', 'FAILED'))
    ), spans AS (
        -- In force from its start to the first of its end, its reversal, the cancellation and the
        -- pause; and, live and not renewed, from its period's end on if it sells that period's last instant.
        SELECT h.customer_id, h.subscription_id, h.currency, h.span_start AS starts,
               least(h.span_end, h.ended_at, h.canceled_at, h.paused_at) AS ends, h.term
          FROM charges h
        UNION ALL
        SELECT h.customer_id, h.subscription_id, h.currency, h.lag_from, 'infinity'::timestamptz, h.term
          FROM charges h
         WHERE h.lag_from IS NOT NULL
           AND h.span_start <= h.lag_from - interval '1 microsecond'
           AND h.span_end > h.lag_from - interval '1 microsecond'
           AND h.ended_at > h.lag_from - interval '1 microsecond'
    ), steps AS (
        SELECT x.customer_id, x.subscription_id, x.currency, x.at, sum(x.d) AS d
          FROM (SELECT sp.customer_id, sp.subscription_id, sp.currency, sp.starts AS at, sp.term AS d
                  FROM spans sp WHERE sp.starts < sp.ends
                UNION ALL
                SELECT sp.customer_id, sp.subscription_id, sp.currency, sp.ends, -sp.term
                  FROM spans sp WHERE sp.starts < sp.ends AND sp.ends < 'infinity') x
         GROUP BY 1, 2, 3, 4
    ), levels AS (
        -- The MRR from each instant to the next: the running sum (exact numerics).
        SELECT st.customer_id, st.subscription_id, st.currency, st.at,
               sum(st.d) OVER w AS v, lead(st.at, 1, 'infinity') OVER w AS next_at
          FROM steps st
        WINDOW w AS (PARTITION BY st.customer_id, st.subscription_id, st.currency ORDER BY st.at)
    ), marked AS (
        SELECT lv.*, CASE WHEN lv.v = lag(lv.v) OVER w THEN 0 ELSE 1 END AS brk
          FROM levels lv
        WINDOW w AS (PARTITION BY lv.customer_id, lv.subscription_id, lv.currency ORDER BY lv.at)
    ), islands AS (
        SELECT m.*, sum(m.brk) OVER (PARTITION BY m.customer_id, m.subscription_id, m.currency ORDER BY m.at) AS isl
          FROM marked m
    ), sub_steps AS MATERIALIZED (
        -- One row per run of one value (a renewal on the same terms changes nothing).
        SELECT il.customer_id, il.subscription_id, il.currency, min(il.at) AS starts, max(il.next_at) AS ends, min(il.v) AS mrr
          FROM islands il
         WHERE il.v > 0
         GROUP BY il.customer_id, il.subscription_id, il.currency, il.isl
    ), cust AS (
        SELECT ss.customer_id, ss.currency, ss.starts, ss.ends,
               max(ss.ends) OVER (PARTITION BY ss.customer_id, ss.currency ORDER BY ss.starts, ss.ends
                                  ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
          FROM sub_steps ss
    ), cust_islands AS (
        SELECT cu.*, sum(CASE WHEN cu.prev_end IS NULL OR cu.starts > cu.prev_end THEN 1 ELSE 0 END)
                         OVER (PARTITION BY cu.customer_id, cu.currency ORDER BY cu.starts, cu.ends ROWS UNBOUNDED PRECEDING) AS isl
          FROM cust cu
    )
    SELECT ss.customer_id, ss.subscription_id, ss.currency, ss.starts, ss.ends, ss.mrr FROM sub_steps ss
    UNION ALL
    SELECT ci.customer_id, 0::bigint, ci.currency, min(ci.starts), max(ci.ends), 0::numeric
      FROM cust_islands ci
     GROUP BY ci.customer_id, ci.currency, ci.isl;
END
$$;
COMMENT ON FUNCTION billing._mrr_segments_of(bigint[]) IS
'Private: the MRR steps of the given customers'' subscriptions (billing._mrr_points'' rules, from the service ledger: each PLAN line in force adds billing._mrr_term over its span cut by its reversal, the cancellation or the pause, and from its period''s end on while its subscription is live and not renewed), and with subscription_id 0 each customer''s spans with some MRR per currency.
Returns one row per step with MRR > 0 (ends infinity when it lasts) and per presence span.';

CREATE OR REPLACE FUNCTION billing._mrr_move(p_kind text, p_start numeric, p_end numeric)
RETURNS numeric
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE p_kind
               WHEN 'new'         THEN CASE WHEN p_start = 0 AND p_end > 0 THEN p_end ELSE 0 END
               WHEN 'expansion'   THEN CASE WHEN p_start > 0 AND p_end > p_start THEN p_end - p_start ELSE 0 END
               WHEN 'contraction' THEN CASE WHEN p_end > 0 AND p_end < p_start THEN p_start - p_end ELSE 0 END
               WHEN 'churned'     THEN CASE WHEN p_start > 0 AND p_end = 0 THEN p_start ELSE 0 END
           END
$$;
COMMENT ON FUNCTION billing._mrr_move(text, numeric, numeric) IS
'Private: one subscription''s part of a month''s movement p_kind (new, expansion, contraction, churned) from its MRR at the month''s start and end (report_mrr_movements'' rules).
Returns the amount (0 when the subscription is not in that movement).';

CREATE OR REPLACE FUNCTION billing._mrr_utc_day(p_at timestamptz)
RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT date_trunc('day', p_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'
$$;
COMMENT ON FUNCTION billing._mrr_utc_day(timestamptz) IS
'Private: the start of p_at''s UTC day (billing.mrr_delta''s day grain).
Returns the instant.';

-- ---------------------------------------------------------------------------------------------
-- The fold: the marked customers recomputed, their steps replaced, the deltas written.
-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION billing._mrr_apply(p_customers bigint[])
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
-- Small sets read by index: compiling the plan (JIT) would cost more than running it.
SET jit = off
AS $$
BEGIN
    -- The customers' steps as kept (taken out) and as recomputed now, in two temporary tables with
    -- statistics, so that comparing them is planned for their real sizes (a batch of 5,000 or a
    -- backfill of millions).
    DROP TABLE IF EXISTS pg_temp.mrr_old, pg_temp.mrr_new;
    CREATE TEMP TABLE mrr_old (customer_id bigint, subscription_id bigint, currency text, starts timestamptz,
                               ends timestamptz, mrr numeric) ON COMMIT DROP;
    WITH gone AS (
        DELETE FROM billing.mrr_segment m WHERE m.customer_id = ANY (p_customers)
        RETURNING m.customer_id, m.subscription_id, m.currency, m.starts, m.ends, m.mrr
    )
    INSERT INTO mrr_old SELECT * FROM gone;
    CREATE TEMP TABLE mrr_new ON COMMIT DROP AS SELECT * FROM billing._mrr_segments_of(p_customers);
    INSERT INTO billing.mrr_segment (customer_id, subscription_id, currency, starts, ends, mrr)
    SELECT * FROM mrr_new;
    ANALYZE mrr_old, mrr_new;
    WITH changes AS MATERIALIZED (
        SELECT -1 AS sign, r.* FROM (SELECT * FROM mrr_old EXCEPT ALL SELECT * FROM mrr_new) r
        UNION ALL
        SELECT 1, a.* FROM (SELECT * FROM mrr_new EXCEPT ALL SELECT * FROM mrr_old) a
    ), ev AS (
        -- A step adds its value from its start and takes it off at its end.
        SELECT c.currency, x.at, x.sign * c.mrr AS mrr,
               CASE WHEN c.subscription_id > 0 THEN x.sign ELSE 0 END AS subs,
               CASE WHEN c.subscription_id = 0 THEN x.sign ELSE 0 END AS custs
          FROM changes c
         CROSS JOIN LATERAL (VALUES (c.starts, c.sign), (c.ends, -c.sign)) x(at, sign)
         WHERE x.at < 'infinity'
    ), deltas AS (
        INSERT INTO billing.mrr_delta (grain, currency, at, mrr, subscriptions, customers)
        SELECT g.grain, g.currency, g.at, sum(g.mrr), sum(g.subs), sum(g.custs)
          FROM (SELECT 'I' AS grain, e.currency, e.at, e.mrr, e.subs, e.custs FROM ev e
                UNION ALL
                SELECT 'D', e.currency, billing._mrr_utc_day(e.at), e.mrr, e.subs, e.custs FROM ev e) g
         GROUP BY 1, 2, 3
        HAVING sum(g.mrr) <> 0 OR sum(g.subs) <> 0 OR sum(g.custs) <> 0
    ), months AS (
        -- The months whose start or end value of a subscription may have changed: those holding
        -- (after their start, up to their end) an instant where one of its changed steps begins or
        -- ends (a step covering a whole month leaves it unmoved, before as after).
        SELECT DISTINCT c.customer_id, c.subscription_id, c.currency,
               date_trunc('month', (x.at - interval '1 microsecond') AT TIME ZONE 'UTC') AS month
          FROM changes c
         CROSS JOIN LATERAL (VALUES (c.starts), (c.ends)) x(at)
         WHERE c.subscription_id > 0 AND x.at < 'infinity'
    ), vals AS (
        SELECT m.month, m.currency,
               coalesce(os.mrr, 0) AS s_old, coalesce(oe.mrr, 0) AS e_old,
               coalesce(ns.mrr, 0) AS s_new, coalesce(ne.mrr, 0) AS e_new
          FROM (SELECT m.*, m.month AT TIME ZONE 'UTC' AS b0, (m.month + interval '1 month') AT TIME ZONE 'UTC' AS b1
                  FROM months m) m
          LEFT JOIN mrr_old os ON os.customer_id = m.customer_id AND os.subscription_id = m.subscription_id
                              AND os.currency = m.currency AND os.starts <= m.b0 AND m.b0 < os.ends
          LEFT JOIN mrr_old oe ON oe.customer_id = m.customer_id AND oe.subscription_id = m.subscription_id
                              AND oe.currency = m.currency AND oe.starts <= m.b1 AND m.b1 < oe.ends
          LEFT JOIN mrr_new ns ON ns.customer_id = m.customer_id AND ns.subscription_id = m.subscription_id
                              AND ns.currency = m.currency AND ns.starts <= m.b0 AND m.b0 < ns.ends
          LEFT JOIN mrr_new ne ON ne.customer_id = m.customer_id AND ne.subscription_id = m.subscription_id
                              AND ne.currency = m.currency AND ne.starts <= m.b1 AND m.b1 < ne.ends
    )
    INSERT INTO billing.mrr_movement (month, currency, new, expansion, contraction, churned)
    SELECT v.month::date, v.currency,
           sum(billing._mrr_move('new', v.s_new, v.e_new) - billing._mrr_move('new', v.s_old, v.e_old)),
           sum(billing._mrr_move('expansion', v.s_new, v.e_new) - billing._mrr_move('expansion', v.s_old, v.e_old)),
           sum(billing._mrr_move('contraction', v.s_new, v.e_new) - billing._mrr_move('contraction', v.s_old, v.e_old)),
           sum(billing._mrr_move('churned', v.s_new, v.e_new) - billing._mrr_move('churned', v.s_old, v.e_old))
      FROM vals v
     GROUP BY 1, 2
    HAVING sum(billing._mrr_move('new', v.s_new, v.e_new) - billing._mrr_move('new', v.s_old, v.e_old)) <> 0
        OR sum(billing._mrr_move('expansion', v.s_new, v.e_new) - billing._mrr_move('expansion', v.s_old, v.e_old)) <> 0
        OR sum(billing._mrr_move('contraction', v.s_new, v.e_new) - billing._mrr_move('contraction', v.s_old, v.e_old)) <> 0
        OR sum(billing._mrr_move('churned', v.s_new, v.e_new) - billing._mrr_move('churned', v.s_old, v.e_old)) <> 0;
    DROP TABLE pg_temp.mrr_old, pg_temp.mrr_new;
END
$$;
COMMENT ON FUNCTION billing._mrr_apply(bigint[]) IS
'Private (billing._mrr_fold): recomputes the given customers'' MRR steps (billing._mrr_segments_of), replaces their rows of billing.mrr_segment and writes the deltas of what changed to billing.mrr_delta (totals at the instants the steps start and end) and billing.mrr_movement (the months whose start or end value moved).
Returns nothing.';

CREATE OR REPLACE FUNCTION billing._mrr_kept()
RETURNS boolean
LANGUAGE sql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
    SELECT count(*) = 3 FROM pg_catalog.pg_trigger t
     WHERE t.tgname IN ('service_line_mrr_added', 'invoice_mrr_changed', 'subscription_mrr_changed')
       AND t.tgenabled <> 'D'
$$;
COMMENT ON FUNCTION billing._mrr_kept() IS
'Private: whether the MRR aggregate (billing.mrr_segment, mrr_delta, mrr_movement) is kept by its triggers (single node; dropped on Citus, where the readers recompute).
Returns true when the triggers are in place and enabled.';

CREATE OR REPLACE FUNCTION billing._mrr_fold()
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_customers bigint[];
BEGIN
    -- One folder at a time (another one folding: skip), never on a read-only standby, never on
    -- Citus (nothing kept there).
    IF pg_catalog.pg_is_in_recovery() OR current_setting('transaction_read_only') = 'on'
       OR NOT billing._mrr_kept()
       OR NOT pg_catalog.pg_try_advisory_xact_lock(hashtext('billing.mrr_segment'), 0) THEN
        RETURN 0;
    END IF;
    -- The marks this statement sees (a customer marked by a transaction still running keeps its
    -- mark for the next fold; the recomputation below reads a later snapshot: never older).
    WITH d AS (DELETE FROM billing.mrr_dirty RETURNING customer_ids)
    SELECT array_agg(DISTINCT c) INTO v_customers FROM d, unnest(d.customer_ids) c;
    IF v_customers IS NOT NULL THEN
        PERFORM billing._mrr_apply(v_customers);
    END IF;
    -- The day and month deltas of one key, one row again (the instants stay as written: a reader
    -- reads one day of them).
    WITH g AS (
        SELECT d.currency, d.at FROM billing.mrr_delta d WHERE d.grain = 'D' GROUP BY 1, 2 HAVING count(*) > 1
    ), gone AS (
        DELETE FROM billing.mrr_delta d USING g
         WHERE d.grain = 'D' AND d.currency = g.currency AND d.at = g.at
        RETURNING d.currency, d.at, d.mrr, d.subscriptions, d.customers
    )
    INSERT INTO billing.mrr_delta (grain, currency, at, mrr, subscriptions, customers)
    SELECT 'D', x.currency, x.at, sum(x.mrr), sum(x.subscriptions), sum(x.customers)
      FROM gone x GROUP BY 1, 2, 3
    HAVING sum(x.mrr) <> 0 OR sum(x.subscriptions) <> 0 OR sum(x.customers) <> 0;
    WITH g AS (
        SELECT m.month, m.currency FROM billing.mrr_movement m GROUP BY 1, 2 HAVING count(*) > 1
    ), gone AS (
        DELETE FROM billing.mrr_movement m USING g
         WHERE m.month = g.month AND m.currency = g.currency
        RETURNING m.*
    )
    INSERT INTO billing.mrr_movement (month, currency, new, expansion, contraction, churned)
    SELECT x.month, x.currency, sum(x.new), sum(x.expansion), sum(x.contraction), sum(x.churned)
      FROM gone x GROUP BY 1, 2
    HAVING sum(x.new) <> 0 OR sum(x.expansion) <> 0 OR sum(x.contraction) <> 0 OR sum(x.churned) <> 0;
    RETURN coalesce(cardinality(v_customers), 0);
END
$$;
COMMENT ON FUNCTION billing._mrr_fold() IS
'Private: recomputes the customers marked in billing.mrr_dirty (billing._mrr_apply) and compacts the day and month deltas; skips when another fold runs, on a standby and where the aggregate is not kept. The retention pass (purge_expired) runs it.
Returns how many customers were recomputed.';

-- ---------------------------------------------------------------------------------------------
-- The readers: one function per figure, kept or (p_recompute, Citus, many marks) recomputed.
-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION billing._mrr_use_kept(p_recompute boolean)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
    SELECT NOT coalesce(p_recompute, false) AND billing._mrr_kept()
       AND (SELECT coalesce(sum(cardinality(d.customer_ids)), 0) FROM billing.mrr_dirty d) <= 10000
$$;
COMMENT ON FUNCTION billing._mrr_use_kept(boolean) IS
'Private: whether the MRR readers read the kept aggregate: not asked to recompute, kept here (not Citus), and at most 10,000 marks (customer ids, repeats counted) since the last fold.
Returns true to read the aggregate.';

CREATE OR REPLACE FUNCTION billing._mrr_totals(p_points timestamptz[], p_recompute boolean DEFAULT false)
RETURNS TABLE (at timestamptz, currency text, subscriptions bigint, customers bigint, mrr numeric)
LANGUAGE plpgsql STABLE
SET search_path = billing, pg_catalog, pg_temp
-- Small sets read by index: compiling the plan (JIT) would cost more than running it.
SET jit = off
SET plan_cache_mode = force_custom_plan
AS $$
#variable_conflict use_column
DECLARE
    v_dirty bigint[];
BEGIN
    IF NOT billing._mrr_use_kept(p_recompute) THEN
        RETURN QUERY
        SELECT m.at, m.currency, count(*) FILTER (WHERE m.mrr > 0), count(DISTINCT m.customer_id) FILTER (WHERE m.mrr > 0),
               sum(m.mrr)
          FROM billing._mrr_points(p_points) m
         GROUP BY m.at, m.currency;
        RETURN;
    END IF;
    SELECT array_agg(DISTINCT c) INTO v_dirty FROM billing.mrr_dirty d, unnest(d.customer_ids) c;
    RETURN QUERY
    WITH pts AS MATERIALIZED (
        SELECT DISTINCT x AS at, billing._mrr_utc_day(x) AS day FROM unnest(p_points) x WHERE x IS NOT NULL
    ), parts AS (
        -- Kept: the days before the instant's, then its day's instants up to it.
        SELECT p.at, d.currency, d.mrr, d.subscriptions AS subs, d.customers AS custs
          FROM pts p JOIN billing.mrr_delta d ON d.grain = 'D' AND d.at < p.day
        UNION ALL
        SELECT p.at, d.currency, d.mrr, d.subscriptions, d.customers
          FROM pts p JOIN billing.mrr_delta d ON d.grain = 'I' AND d.at >= p.day AND d.at <= p.at
        UNION ALL
        -- The customers marked since the last fold: recomputed now, less what is kept of them.
        SELECT p.at, s.currency, s.mrr, CASE WHEN s.subscription_id > 0 THEN 1 ELSE 0 END,
               CASE WHEN s.subscription_id = 0 THEN 1 ELSE 0 END
          FROM pts p JOIN billing._mrr_segments_of(v_dirty) s ON s.starts <= p.at AND p.at < s.ends
         WHERE v_dirty IS NOT NULL
        UNION ALL
        SELECT p.at, s.currency, -s.mrr, CASE WHEN s.subscription_id > 0 THEN -1 ELSE 0 END,
               CASE WHEN s.subscription_id = 0 THEN -1 ELSE 0 END
          FROM (SELECT DISTINCT x AS customer_id FROM unnest(v_dirty) x) dc
          JOIN billing.mrr_segment s ON s.customer_id = dc.customer_id
          JOIN pts p ON s.starts <= p.at AND p.at < s.ends
         WHERE v_dirty IS NOT NULL
    )
    SELECT x.at, x.currency, sum(x.subs)::bigint, sum(x.custs)::bigint, sum(x.mrr)
      FROM parts x
     GROUP BY x.at, x.currency;
END
$$;
COMMENT ON FUNCTION billing._mrr_totals(timestamptz[], boolean) IS
'Private: per instant of p_points and currency, the subscriptions and customers with MRR > 0 and the MRR total (exact numeric), the figures of billing._mrr_points summed: read from the kept aggregate (billing.mrr_delta, plus the customers marked since the last fold recomputed), or recomputed from every line when p_recompute, on Citus, or with over 10,000 marks. Both give the same figures (db/tests/862_mrr_aggregate.sql).
Returns one row per instant and currency with anything kept (MRR may be 0).';

CREATE OR REPLACE FUNCTION billing._mrr_movements(p_from date, p_to date, p_recompute boolean DEFAULT false)
RETURNS TABLE (month date, currency text, starting_mrr numeric, new_mrr numeric, expansion_mrr numeric,
               contraction_mrr numeric, churned_mrr numeric, ending_mrr numeric)
LANGUAGE plpgsql STABLE
SET search_path = billing, pg_catalog, pg_temp
-- Small sets read by index: compiling the plan (JIT) would cost more than running it.
SET jit = off
SET plan_cache_mode = force_custom_plan
AS $$
#variable_conflict use_column
DECLARE
    v_dirty  bigint[];
    v_points timestamptz[];
BEGIN
    IF NOT billing._mrr_use_kept(p_recompute) THEN
        RETURN QUERY
        WITH per_sub AS (SELECT * FROM billing._mrr_month_ends(p_from, p_to))
        SELECT p.month, p.currency, sum(p.s),
               coalesce(sum(billing._mrr_move('new', p.s, p.e)), 0),
               coalesce(sum(billing._mrr_move('expansion', p.s, p.e)), 0),
               coalesce(sum(billing._mrr_move('contraction', p.s, p.e)), 0),
               coalesce(sum(billing._mrr_move('churned', p.s, p.e)), 0),
               sum(p.e)
          FROM per_sub p
         GROUP BY p.month, p.currency
        HAVING sum(p.s) > 0 OR sum(p.e) > 0;
        RETURN;
    END IF;
    -- The month bounds (BL422 for a bad span), their totals, the kept movements, and for the
    -- customers marked since the last fold their movements recomputed less the kept ones.
    SELECT array_agg(mo.starts) || array_agg(mo.ends) INTO v_points FROM billing._report_months(p_from, p_to) mo;
    SELECT array_agg(DISTINCT c) INTO v_dirty FROM billing.mrr_dirty d, unnest(d.customer_ids) c;
    RETURN QUERY
    WITH months AS MATERIALIZED (
        SELECT * FROM billing._report_months(p_from, p_to)
    ), totals AS MATERIALIZED (
        SELECT * FROM billing._mrr_totals(v_points)
    ), fresh AS MATERIALIZED (
        SELECT s.* FROM billing._mrr_segments_of(v_dirty) s WHERE v_dirty IS NOT NULL AND s.subscription_id > 0
    ), stale AS MATERIALIZED (
        SELECT s.* FROM (SELECT DISTINCT x AS customer_id FROM unnest(v_dirty) x) dc
          JOIN billing.mrr_segment s ON s.customer_id = dc.customer_id
         WHERE s.subscription_id > 0
    ), keys AS (
        SELECT DISTINCT k.customer_id, k.subscription_id, k.currency
          FROM (SELECT f.customer_id, f.subscription_id, f.currency FROM fresh f
                UNION ALL SELECT s.customer_id, s.subscription_id, s.currency FROM stale s) k
    ), corrected AS (
        SELECT mo.month, k.currency,
               billing._mrr_move('new', coalesce(fs.mrr, 0), coalesce(fe.mrr, 0)) - billing._mrr_move('new', coalesce(ss.mrr, 0), coalesce(se.mrr, 0)) AS new,
               billing._mrr_move('expansion', coalesce(fs.mrr, 0), coalesce(fe.mrr, 0)) - billing._mrr_move('expansion', coalesce(ss.mrr, 0), coalesce(se.mrr, 0)) AS expansion,
               billing._mrr_move('contraction', coalesce(fs.mrr, 0), coalesce(fe.mrr, 0)) - billing._mrr_move('contraction', coalesce(ss.mrr, 0), coalesce(se.mrr, 0)) AS contraction,
               billing._mrr_move('churned', coalesce(fs.mrr, 0), coalesce(fe.mrr, 0)) - billing._mrr_move('churned', coalesce(ss.mrr, 0), coalesce(se.mrr, 0)) AS churned
          FROM months mo CROSS JOIN keys k
          LEFT JOIN fresh fs ON fs.customer_id = k.customer_id AND fs.subscription_id = k.subscription_id
                            AND fs.currency = k.currency AND fs.starts <= mo.starts AND mo.starts < fs.ends
          LEFT JOIN fresh fe ON fe.customer_id = k.customer_id AND fe.subscription_id = k.subscription_id
                            AND fe.currency = k.currency AND fe.starts <= mo.ends AND mo.ends < fe.ends
          LEFT JOIN stale ss ON ss.customer_id = k.customer_id AND ss.subscription_id = k.subscription_id
                            AND ss.currency = k.currency AND ss.starts <= mo.starts AND mo.starts < ss.ends
          LEFT JOIN stale se ON se.customer_id = k.customer_id AND se.subscription_id = k.subscription_id
                            AND se.currency = k.currency AND se.starts <= mo.ends AND mo.ends < se.ends
    ), moves AS (
        SELECT m.month, m.currency, m.new, m.expansion, m.contraction, m.churned
          FROM billing.mrr_movement m JOIN months mo ON mo.month = m.month
        UNION ALL
        SELECT c.month, c.currency, c.new, c.expansion, c.contraction, c.churned FROM corrected c
    ), moved AS (
        SELECT m.month, m.currency, sum(m.new) AS new, sum(m.expansion) AS expansion,
               sum(m.contraction) AS contraction, sum(m.churned) AS churned
          FROM moves m GROUP BY 1, 2
    ), cur AS (
        SELECT DISTINCT t.currency FROM totals t
        UNION SELECT m.currency FROM moved m
    )
    SELECT mo.month, c.currency, coalesce(ts.mrr, 0), coalesce(mv.new, 0), coalesce(mv.expansion, 0),
           coalesce(mv.contraction, 0), coalesce(mv.churned, 0), coalesce(te.mrr, 0)
      FROM months mo CROSS JOIN cur c
      LEFT JOIN totals ts ON ts.at = mo.starts AND ts.currency = c.currency
      LEFT JOIN totals te ON te.at = mo.ends AND te.currency = c.currency
      LEFT JOIN moved mv ON mv.month = mo.month AND mv.currency = c.currency
     WHERE coalesce(ts.mrr, 0) > 0 OR coalesce(te.mrr, 0) > 0;
END
$$;
COMMENT ON FUNCTION billing._mrr_movements(date, date, boolean) IS
'Private: per UTC month (p_from''s to p_to''s) and currency, the MRR at its start and end (billing._mrr_totals) and its movements (each subscription''s MRR at the month''s start against its end, billing._mrr_move): read from the kept aggregate (billing.mrr_movement, plus the customers marked since the last fold recomputed), or recomputed from every line (billing._mrr_month_ends) when p_recompute, on Citus, or with over 10,000 marks. Exact numerics; both give the same figures.
Returns one row per month and currency with MRR at either end; BL422 for a bad span.';

-- ---------------------------------------------------------------------------------------------
-- The marks: which customers' MRR may have changed (insert-only, one statement per write).
-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION billing._mrr_mark_rows()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    -- The rows of the statement (its transition table: new_rows, or old_rows for a DELETE).
    IF TG_OP = 'DELETE' THEN
        INSERT INTO billing.mrr_dirty (customer_ids)
        SELECT array_agg(DISTINCT r.customer_id) FROM old_rows r HAVING count(*) > 0;
    ELSIF TG_TABLE_NAME = 'service_line' THEN
        -- Usage lines are not MRR.
        INSERT INTO billing.mrr_dirty (customer_ids)
        SELECT array_agg(DISTINCT r.customer_id) FROM new_rows r WHERE r.item = 'PLAN' HAVING count(*) > 0;
    ELSE
        INSERT INTO billing.mrr_dirty (customer_ids)
        SELECT array_agg(DISTINCT r.customer_id) FROM new_rows r HAVING count(*) > 0;
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION billing._mrr_mark_rows() IS
'Private trigger (per statement, with a transition table): marks the customers of the rows written in billing.mrr_dirty (their MRR is recomputed by the next fold, and by the readers until then).
Returns NULL.';

CREATE OR REPLACE FUNCTION billing._mrr_mark_row()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        INSERT INTO billing.mrr_dirty (customer_ids) VALUES (ARRAY[OLD.customer_id]);
    ELSE
        INSERT INTO billing.mrr_dirty (customer_ids) VALUES (ARRAY[NEW.customer_id]);
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION billing._mrr_mark_row() IS
'Private trigger (per row): marks the row''s customer in billing.mrr_dirty.
Returns NULL.';

CREATE OR REPLACE FUNCTION billing._mrr_plan_changed()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    -- A plan's period changed (upsert_plan allows it once no subscription is on it): its old lines'
    -- MRR is normalized by it (billing._mrr_term), so their customers are recomputed. Rare; a scan.
    INSERT INTO billing.mrr_dirty (customer_ids)
    SELECT array_agg(DISTINCT l.customer_id) FROM billing.service_line l WHERE l.plan_id = NEW.id HAVING count(*) > 0;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION billing._mrr_plan_changed() IS
'Private trigger (AFTER UPDATE of a plan whose billing interval or count changed, per row): marks the customers with lines of that plan in billing.mrr_dirty.
Returns NULL.';

CREATE OR REPLACE FUNCTION billing._mrr_truncated()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    -- A wiped table: everything kept is forgotten and every remaining customer recomputed.
    DELETE FROM billing.mrr_segment;
    DELETE FROM billing.mrr_delta;
    DELETE FROM billing.mrr_movement;
    DELETE FROM billing.mrr_dirty;
    INSERT INTO billing.mrr_dirty (customer_ids) SELECT array_agg(c.id) FROM billing.customer c HAVING count(*) > 0;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION billing._mrr_truncated() IS
'Private trigger (AFTER TRUNCATE of service_line, invoice or subscription): forgets the kept MRR and marks every customer for the next fold.
Returns NULL.';

-- Service lines: every statement that writes PLAN lines (the renewal's batch: one INSERT of its
-- customers). An invoice: when its status moves in or out of "in force" (PAID, OPEN, REVIEW) or
-- "fallen" (VOID, FAILED); OPEN -> PAID (a charge) changes nothing and fires nothing. A
-- subscription: any UPDATE statement (its status, cancellation, pause or period may have changed:
-- the renewal's advance moves the lag rule; a transition table cannot go with UPDATE OF columns),
-- one set-based INSERT of its customers.
CREATE OR REPLACE TRIGGER service_line_mrr_added
    AFTER INSERT ON billing.service_line
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION billing._mrr_mark_rows();
CREATE OR REPLACE TRIGGER service_line_mrr_changed
    AFTER UPDATE ON billing.service_line
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION billing._mrr_mark_rows();
CREATE OR REPLACE TRIGGER service_line_mrr_deleted
    AFTER DELETE ON billing.service_line
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION billing._mrr_mark_rows();
CREATE OR REPLACE TRIGGER service_line_mrr_truncated
    AFTER TRUNCATE ON billing.service_line
    FOR EACH STATEMENT EXECUTE FUNCTION billing._mrr_truncated();
CREATE OR REPLACE TRIGGER invoice_mrr_changed
    AFTER UPDATE OF status ON billing.invoice
    FOR EACH ROW WHEN ((OLD.status IN ('PAID', 'OPEN', 'REVIEW')) IS DISTINCT FROM (NEW.status IN ('PAID', 'OPEN', 'REVIEW'))
                       OR (OLD.status IN ('VOID', 'FAILED')) IS DISTINCT FROM (NEW.status IN ('VOID', 'FAILED')))
    EXECUTE FUNCTION billing._mrr_mark_row();
CREATE OR REPLACE TRIGGER invoice_mrr_deleted
    AFTER DELETE ON billing.invoice
    FOR EACH ROW EXECUTE FUNCTION billing._mrr_mark_row();
CREATE OR REPLACE TRIGGER invoice_mrr_truncated
    AFTER TRUNCATE ON billing.invoice
    FOR EACH STATEMENT EXECUTE FUNCTION billing._mrr_truncated();
CREATE OR REPLACE TRIGGER subscription_mrr_changed
    AFTER UPDATE ON billing.subscription
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION billing._mrr_mark_rows();
CREATE OR REPLACE TRIGGER plan_mrr_changed
    AFTER UPDATE OF billing_interval, interval_count ON billing.plan
    FOR EACH ROW WHEN (OLD.billing_interval IS DISTINCT FROM NEW.billing_interval
                       OR OLD.interval_count IS DISTINCT FROM NEW.interval_count)
    EXECUTE FUNCTION billing._mrr_plan_changed();
CREATE OR REPLACE TRIGGER subscription_mrr_truncated
    AFTER TRUNCATE ON billing.subscription
    FOR EACH STATEMENT EXECUTE FUNCTION billing._mrr_truncated();
