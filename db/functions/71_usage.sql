-- 71_usage: usage-based billing (issue 29; docs/usage.md): meters, the monthly partitions of
-- usage_event, and the reads of a customer's usage from the hourly rollups (usage_between,
-- current_usage). The ingestion is in 83_usage_ingest, the pricing in 82_usage_pricing.

-- A meter: what it counts and how. Changing an existing meter's definition re-aggregates its
-- rollups from the stored events (one scan of that customer's... every customer's events of the
-- meter's type: an operator's act, rare).
CREATE OR REPLACE FUNCTION billing.upsert_meter(
    p_code text, p_event_type text, p_aggregation text, p_property text[] DEFAULT NULL,
    p_filters jsonb DEFAULT '{}'::jsonb, p_now timestamptz DEFAULT now())
RETURNS billing.meter
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_now     timestamptz := billing._check_now(p_now);
    v_old     billing.meter;
    v_new     billing.meter;
    v_filters jsonb := coalesce(p_filters, '{}'::jsonb);
    v_key     text;
    v_value   jsonb;
BEGIN
    PERFORM billing._audit('upsert_meter', jsonb_build_object('code', p_code, 'event_type', p_event_type,
        'aggregation', p_aggregation, 'property', p_property, 'filters', p_filters));
    IF p_code IS NULL OR p_code !~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$' THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('a meter code is 1 to 64 letters, digits, _ . or - (a letter or digit first), got %L', p_code);
    END IF;
    IF p_event_type IS NULL OR length(p_event_type) NOT BETWEEN 1 AND 200 THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('meter %s: the event type is 1 to 200 characters', p_code);
    END IF;
    PERFORM billing._check_one_of(format('meter %s: aggregation', p_code), p_aggregation,
                                  ARRAY['count', 'sum', 'max', 'unique_count', 'latest'],
                                  'Use count, sum, max, unique_count or latest.');
    IF p_aggregation <> 'count' AND (p_property IS NULL OR cardinality(p_property) NOT BETWEEN 1 AND 8
                                     OR array_position(p_property, NULL) IS NOT NULL) THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('meter %s: %s needs the property it reads (a path of 1 to 8 keys into data)', p_code, p_aggregation);
    END IF;
    IF jsonb_typeof(v_filters) <> 'object' THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = format('meter %s: filters must be a JSON object', p_code);
    END IF;
    FOR v_key, v_value IN SELECT key, value FROM jsonb_each(v_filters) LOOP
        IF jsonb_typeof(v_value) IN ('object', 'null')
           OR (jsonb_typeof(v_value) = 'array' AND (jsonb_array_length(v_value) = 0 OR EXISTS (
                SELECT 1 FROM jsonb_array_elements(v_value) x WHERE jsonb_typeof(x) IN ('object', 'array', 'null')))) THEN
            RAISE EXCEPTION USING ERRCODE = 'BL422',
                MESSAGE = format('meter %s: filter %s must be a value (equals) or a non-empty list of values (in)', p_code, v_key);
        END IF;
    END LOOP;

    SELECT * INTO v_old FROM billing.meter WHERE code = p_code FOR UPDATE;
    INSERT INTO billing.meter (code, event_type, aggregation, property, filters, created_at, updated_at)
    VALUES (p_code, p_event_type, p_aggregation, CASE WHEN p_aggregation = 'count' THEN NULL ELSE p_property END,
            v_filters, v_now, v_now)
    ON CONFLICT (code) DO UPDATE
        SET event_type = EXCLUDED.event_type, aggregation = EXCLUDED.aggregation, property = EXCLUDED.property,
            filters = EXCLUDED.filters, updated_at = EXCLUDED.updated_at
    RETURNING * INTO v_new;

    IF v_old.code IS NOT NULL AND (v_old.event_type, v_old.aggregation, v_old.property, v_old.filters)
                                  IS DISTINCT FROM (v_new.event_type, v_new.aggregation, v_new.property, v_new.filters) THEN
        PERFORM billing._usage_rebuild(v_new);
    ELSIF v_old.code IS NULL THEN
        PERFORM billing._usage_rebuild(v_new);  -- events of its type may be stored already
    END IF;
    RETURN v_new;
END
$$;
COMMENT ON FUNCTION billing.upsert_meter(text, text, text, text[], jsonb, timestamptz) IS
'Creates or changes a meter (code, CloudEvents type, aggregation count|sum|max|unique_count|latest, property path into data, filters {"k": v} equals / {"k": [v...]} in).
A new meter or a changed definition re-aggregates the meter''s rollups from the stored events. BL422 on a bad definition.';

-- Does an event's data match a meter's filters? (top-level keys; equals or in, compared as JSON)
CREATE OR REPLACE FUNCTION billing._usage_match(p_filters jsonb, p_data jsonb)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = billing, pg_catalog, pg_temp
AS $$
    SELECT p_filters = '{}'::jsonb OR NOT EXISTS (
        SELECT 1 FROM jsonb_each(p_filters) f
        WHERE NOT coalesce(CASE WHEN jsonb_typeof(f.value) = 'array'
                                THEN jsonb_typeof(p_data -> f.key) NOT IN ('array', 'object') AND (p_data -> f.key) <@ f.value
                                ELSE p_data -> f.key = f.value END, false))
$$;

-- The earliest event time a customer's usage may still have: the start of its open period, or of
-- the period before while that one's grace runs (p_now - p_grace before the current period start).
-- No live subscription: the UTC calendar month (the one p_now - p_grace is in).
CREATE OR REPLACE FUNCTION billing._usage_open_from(p_customer_id bigint, p_now timestamptz, p_grace interval)
RETURNS timestamptz
LANGUAGE plpgsql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_from timestamptz;
BEGIN
    SELECT min(CASE WHEN p_now - p_grace >= s.current_period_start THEN s.current_period_start
                    ELSE coalesce((SELECT max(i.period_start) FROM billing.invoice i
                                   WHERE i.customer_id = s.customer_id AND i.subscription_id = s.id
                                     AND i.period_start < s.current_period_start), s.current_period_start) END)
      INTO v_from
      FROM billing.subscription s
     WHERE s.customer_id = p_customer_id AND s.status <> 'CANCELED';
    RETURN coalesce(v_from, date_trunc('month', (p_now - p_grace) AT TIME ZONE 'UTC') AT TIME ZONE 'UTC');
END
$$;

-- The monthly partition of usage_event holding p_at, made if missing. Idempotent.
CREATE OR REPLACE FUNCTION billing._usage_partition(p_at timestamptz)
RETURNS text
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_from timestamptz := date_trunc('month', p_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC';
    v_name text := 'usage_event_p' || to_char(p_at AT TIME ZONE 'UTC', 'YYYYMM');
BEGIN
    IF to_regclass('billing.' || v_name) IS NULL THEN
        -- two ingestions making the same month: the second waits on the lock and finds it made. Its
        -- to_regclass may still answer from this session's catalog cache, which an advisory lock does
        -- not refresh (the first lookup above cached "none"): then CREATE TABLE, which does refresh
        -- it, finds the table the other one committed, and that is the answer too (review6: the
        -- second batch failed with duplicate_table; test_usage_fold_race)
        PERFORM pg_advisory_xact_lock(hashtext('billing.usage_event partitions'));
        IF to_regclass('billing.' || v_name) IS NULL THEN
            BEGIN
                EXECUTE format('CREATE TABLE billing.%I PARTITION OF billing.usage_event FOR VALUES FROM (%L) TO (%L)',
                               v_name, v_from, v_from + interval '1 month');
                EXECUTE format('REVOKE ALL ON billing.%I FROM PUBLIC', v_name);
            EXCEPTION WHEN duplicate_table THEN
                NULL;  -- made by the ingestion that held the lock before us (committed: we waited for it)
            END;
        END IF;
    END IF;
    RETURN v_name;
END
$$;

-- Partition upkeep (billing worker, or `billing usage maintain`): the months from p_now's to two
-- ahead exist; months that ended more than p_retention ago are dropped with the exactly-once keys
-- of their time (ingestion refuses events that old, so a key purged is never needed again).
CREATE OR REPLACE FUNCTION billing.usage_partitions(p_now timestamptz DEFAULT now(),
                                                    p_retention interval DEFAULT interval '100 days')
RETURNS TABLE (partition_name text, action text)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_now  timestamptz := billing._check_now(p_now);
    v_part record;
    v_i    integer;
    v_purged bigint;
BEGIN
    IF p_retention IS NULL OR p_retention < interval '1 day' THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = format('usage retention must be at least a day, got %s', p_retention);
    END IF;
    FOR v_i IN 0..2 LOOP
        partition_name := billing._usage_partition(v_now + make_interval(months => v_i));
        action := 'present';
        RETURN NEXT;
    END LOOP;
    FOR v_part IN
        SELECT c.relname, (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \(''([^'']+)''\)'))[1]::timestamptz AS upper_bound
          FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
         WHERE i.inhparent = 'billing.usage_event'::regclass
    LOOP
        IF v_part.upper_bound <= v_now - p_retention THEN
            EXECUTE format('DROP TABLE billing.%I', v_part.relname);
            partition_name := v_part.relname;
            action := 'dropped';
            RETURN NEXT;
        END IF;
    END LOOP;
    DELETE FROM billing.usage_dedup WHERE event_time < v_now - p_retention;
    GET DIAGNOSTICS v_purged = ROW_COUNT;
    IF v_purged > 0 THEN
        partition_name := 'usage_dedup';
        action := format('purged %s keys', v_purged);
        RETURN NEXT;
    END IF;
END
$$;
COMMENT ON FUNCTION billing.usage_partitions(timestamptz, interval) IS
'Makes the monthly partitions of usage_event from p_now''s month to two ahead, drops those that ended more than p_retention ago
and purges the exactly-once keys of events older than p_retention (ingestion refuses those). Returns what it did.';

-- Re-aggregates one meter's rollups from the stored events (a new or redefined meter): the hourly
-- rows, every one folded into its daily row (0610), the distinct values per hour and per day.
CREATE OR REPLACE FUNCTION billing._usage_rebuild(p_meter billing.meter)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    DELETE FROM billing.usage_rollup WHERE meter_code = p_meter.code;
    DELETE FROM billing.usage_unique WHERE meter_code = p_meter.code;
    INSERT INTO billing.usage_rollup (customer_id, meter_code, bucket, events, total, max_value, latest_time, latest_value, folded)
    SELECT v.customer_id, p_meter.code, v.bucket, count(*), coalesce(sum(v.num), 0), max(v.num),
           -- the latest event's time and value for `latest` meters only (the ingestion writes them so)
           CASE WHEN p_meter.aggregation = 'latest' THEN max(v.event_time) END,
           CASE WHEN p_meter.aggregation = 'latest' THEN (array_agg(v.num ORDER BY v.event_time DESC, v.num DESC NULLS LAST))[1] END,
           true  -- every hour folded into its day's row (below)
      FROM (SELECT e.customer_id, date_trunc('hour', e.event_time AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS bucket,
                   e.event_time,
                   CASE WHEN p_meter.aggregation IN ('sum', 'max', 'latest') AND jsonb_typeof(e.data #> p_meter.property) = 'number'
                        THEN (e.data #>> p_meter.property)::numeric END AS num
              FROM billing.usage_event e
             WHERE e.event_type = p_meter.event_type AND (p_meter.filters = '{}'::jsonb OR billing._usage_match(p_meter.filters, e.data))
               AND (p_meter.aggregation = 'count' OR e.data #> p_meter.property IS NOT NULL)) v
     GROUP BY v.customer_id, v.bucket;
    IF p_meter.aggregation = 'unique_count' THEN
        INSERT INTO billing.usage_unique (customer_id, meter_code, bucket, value)
        SELECT DISTINCT e.customer_id, p_meter.code, date_trunc('hour', e.event_time AT TIME ZONE 'UTC') AT TIME ZONE 'UTC',
               e.data #>> p_meter.property
          FROM billing.usage_event e
         WHERE e.event_type = p_meter.event_type AND (p_meter.filters = '{}'::jsonb OR billing._usage_match(p_meter.filters, e.data))
           AND e.data #>> p_meter.property IS NOT NULL;
    END IF;
    -- the same figures per UTC day (0610), from the hourly rows just written (every one folded)
    DELETE FROM billing.usage_rollup_day WHERE meter_code = p_meter.code;
    DELETE FROM billing.usage_unique_day WHERE meter_code = p_meter.code;
    INSERT INTO billing.usage_rollup_day (customer_id, meter_code, day, events, total, max_value, latest_time, latest_value)
    SELECT r.customer_id, r.meter_code, date_trunc('day', r.bucket AT TIME ZONE 'UTC') AT TIME ZONE 'UTC',
           sum(r.events), sum(r.total), max(r.max_value), max(r.latest_time),
           CASE WHEN p_meter.aggregation = 'latest'
                THEN (array_agg(r.latest_value ORDER BY r.latest_time DESC NULLS LAST, r.latest_value DESC NULLS LAST))[1] END
      FROM billing.usage_rollup r
     WHERE r.meter_code = p_meter.code
     GROUP BY r.customer_id, r.meter_code, 3;
    IF p_meter.aggregation = 'unique_count' THEN
        INSERT INTO billing.usage_unique_day (customer_id, meter_code, day, value)
        SELECT DISTINCT u.customer_id, u.meter_code, date_trunc('day', u.bucket AT TIME ZONE 'UTC') AT TIME ZONE 'UTC', u.value
          FROM billing.usage_unique u
         WHERE u.meter_code = p_meter.code;
    END IF;
END
$$;

-- CloudEvents time -> timestamptz, NULL when it is not an RFC 3339 instant with a zone.
CREATE OR REPLACE FUNCTION billing._usage_time(p_text text)
RETURNS timestamptz
LANGUAGE plpgsql IMMUTABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    IF p_text IS NULL OR p_text !~ '^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})$' THEN
        RETURN NULL;
    END IF;
    RETURN p_text::timestamptz;
EXCEPTION WHEN OTHERS THEN
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION billing.usage_between(p_customer_id bigint, p_from timestamptz, p_to timestamptz)
RETURNS TABLE (meter_code text, aggregation text, value numeric, events bigint)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
-- its statement's generic plan, made once a session (the events' partitions pruned when it starts):
-- the custom plan the plan cache chose was made at every call, and planning probed the events'
-- index for the ends of its ranges, a cost that grew with the events stored (~1 ms a call at 20M);
-- on Citus reset (db/citus/10_adapt.sql)
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_lo  timestamptz;  -- the first whole hour
    v_hi  timestamptz;  -- the end of the last whole hour
    v_dlo timestamptz;  -- the first whole UTC day within [v_lo, v_hi)
    v_dhi timestamptz;  -- the end of the last one
BEGIN
    IF p_customer_id IS NULL OR p_from IS NULL OR p_to IS NULL OR p_to < p_from THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('usage_between: a customer and p_from <= p_to, got %s, %s, %s', p_customer_id, p_from, p_to);
    END IF;
    v_lo := date_trunc('hour', p_from AT TIME ZONE 'UTC') AT TIME ZONE 'UTC';
    IF v_lo < p_from THEN v_lo := v_lo + interval '1 hour'; END IF;
    v_hi := date_trunc('hour', p_to AT TIME ZONE 'UTC') AT TIME ZONE 'UTC';
    IF v_hi <= v_lo THEN v_lo := p_to; v_hi := p_to; END IF;  -- no whole hour: the events alone
    v_dlo := date_trunc('day', v_lo AT TIME ZONE 'UTC') AT TIME ZONE 'UTC';
    IF v_dlo < v_lo THEN v_dlo := v_dlo + interval '1 day'; END IF;
    v_dhi := date_trunc('day', v_hi AT TIME ZONE 'UTC') AT TIME ZONE 'UTC';
    IF v_dhi <= v_dlo THEN v_dlo := v_hi; v_dhi := v_hi; END IF;  -- no whole day: the hours alone
    -- [p_from, v_lo) events, [v_lo, v_dlo) hours, [v_dlo, v_dhi) days, [v_dhi, v_hi) hours, [v_hi, p_to) events:
    -- at most 31 day rows and 46 hour rows a meter a month, however many events (0610)

    RETURN QUERY
    WITH edge AS (
        SELECT m.code, m.aggregation, e.event_time,
               CASE WHEN m.aggregation IN ('sum', 'max', 'latest') THEN (e.data #>> m.property)::numeric END AS num,
               CASE WHEN m.aggregation = 'unique_count' THEN e.data #>> m.property END AS val
          FROM billing.usage_event e
          JOIN billing.meter m ON m.event_type = e.event_type AND (m.filters = '{}'::jsonb OR billing._usage_match(m.filters, e.data))
         WHERE e.customer_id = p_customer_id
           AND ((e.event_time >= p_from AND e.event_time < v_lo) OR (e.event_time >= v_hi AND e.event_time < p_to))
    ), parts AS (
        -- index ranges per meter (customer, meter, hours or days): never the customer's older months
        SELECT m.code, m.aggregation, r.events, r.total, r.max_value, r.latest_time, r.latest_value
          FROM billing.meter m
         CROSS JOIN LATERAL (SELECT r.events, r.total, r.max_value, r.latest_time, r.latest_value
                               FROM billing.usage_rollup r
                              WHERE r.customer_id = p_customer_id AND r.meter_code = m.code
                                AND r.bucket >= v_lo AND r.bucket < v_dlo
                             UNION ALL
                             SELECT d.events, d.total, d.max_value, d.latest_time, d.latest_value
                               FROM billing.usage_rollup_day d
                              WHERE d.customer_id = p_customer_id AND d.meter_code = m.code
                                AND d.day >= v_dlo AND d.day < v_dhi
                             UNION ALL  -- (the whole days' hours not folded into their day's row yet)
                             SELECT r.events, r.total, r.max_value, r.latest_time, r.latest_value
                               FROM billing.usage_rollup r
                              WHERE r.customer_id = p_customer_id AND r.meter_code = m.code AND r.folded IS NOT TRUE
                                AND r.bucket >= v_dlo AND r.bucket < v_dhi
                             UNION ALL
                             SELECT r.events, r.total, r.max_value, r.latest_time, r.latest_value
                               FROM billing.usage_rollup r
                              WHERE r.customer_id = p_customer_id AND r.meter_code = m.code
                                AND r.bucket >= v_dhi AND r.bucket < v_hi
                             OFFSET 0) r  -- (not flattened: a join could read the customer's every meter and month)
        UNION ALL
        SELECT g.code, min(g.aggregation), count(*), coalesce(sum(g.num), 0), max(g.num), max(g.event_time),
               (array_agg(g.num ORDER BY g.event_time DESC, g.num DESC NULLS LAST))[1]
          FROM edge g GROUP BY g.code
    ), agg AS (  -- (the latest value sorted for the meters that need it only: a sort of every hour's row)
        SELECT p.code, sum(p.events)::bigint AS events, sum(p.total) AS total, max(p.max_value) AS max_value,
               (array_agg(p.latest_value ORDER BY p.latest_time DESC NULLS LAST, p.latest_value DESC NULLS LAST)
                  FILTER (WHERE p.aggregation = 'latest'))[1] AS latest_value
          FROM parts p GROUP BY p.code
    ), uniques AS (
        SELECT u.code, count(DISTINCT u.val) AS n
          FROM (SELECT m.code, q.value AS val
                  FROM billing.meter m
                 CROSS JOIN LATERAL (SELECT q.value FROM billing.usage_unique q
                                      WHERE q.customer_id = p_customer_id AND q.meter_code = m.code
                                        AND q.bucket >= v_lo AND q.bucket < v_dlo
                                     UNION ALL
                                     SELECT q.value FROM billing.usage_unique_day q
                                      WHERE q.customer_id = p_customer_id AND q.meter_code = m.code
                                        AND q.day >= v_dlo AND q.day < v_dhi
                                     UNION ALL
                                     SELECT q.value FROM billing.usage_unique q
                                      WHERE q.customer_id = p_customer_id AND q.meter_code = m.code
                                        AND q.bucket >= v_dhi AND q.bucket < v_hi OFFSET 0) q
                 WHERE m.aggregation = 'unique_count'
                UNION ALL
                SELECT g.code, g.val FROM edge g WHERE g.val IS NOT NULL) u
         GROUP BY u.code
    )
    SELECT m.code, m.aggregation,
           CASE m.aggregation WHEN 'count' THEN coalesce(a.events, 0)::numeric
                              WHEN 'sum' THEN coalesce(a.total, 0)
                              WHEN 'max' THEN a.max_value
                              WHEN 'latest' THEN a.latest_value
                              WHEN 'unique_count' THEN coalesce(q.n, 0)::numeric END,
           coalesce(a.events, 0)
      FROM billing.meter m
      LEFT JOIN agg a ON a.code = m.code
      LEFT JOIN uniques q ON q.code = m.code
     ORDER BY m.code;
END
$$;
COMMENT ON FUNCTION billing.usage_between(bigint, timestamptz, timestamptz) IS
'A customer''s usage per meter over [p_from, p_to): value (count, sum, max, latest, or the number of distinct values) and the events counted;
every meter listed (count/sum/unique_count 0, max/latest NULL without events). Whole UTC days from the daily rollups, the other whole hours from the hourly ones, the partial hours from the events.';

-- The customer's usage in its open period: its live subscription's current period (the earliest
-- start when it has several), or the UTC calendar month without one.
CREATE OR REPLACE FUNCTION billing.current_usage(p_customer_id bigint, p_now timestamptz DEFAULT now())
RETURNS TABLE (meter_code text, aggregation text, value numeric, events bigint,
               period_start timestamptz, period_end timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_now   timestamptz := billing._check_now(p_now);
    v_start timestamptz;
    v_end   timestamptz;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM billing.customer c WHERE c.id = p_customer_id) THEN
        RAISE EXCEPTION USING ERRCODE = 'BL404', MESSAGE = format('customer %s not found', p_customer_id);
    END IF;
    SELECT s.current_period_start, s.current_period_end INTO v_start, v_end
      FROM billing.subscription s
     WHERE s.customer_id = p_customer_id AND s.status <> 'CANCELED'
     ORDER BY s.current_period_start LIMIT 1;
    IF v_start IS NULL THEN
        v_start := date_trunc('month', v_now AT TIME ZONE 'UTC') AT TIME ZONE 'UTC';
        v_end := v_start + interval '1 month';
    END IF;
    RETURN QUERY SELECT u.meter_code, u.aggregation, u.value, u.events, v_start, v_end
                   FROM billing.usage_between(p_customer_id, v_start, v_end) u;
END
$$;
COMMENT ON FUNCTION billing.current_usage(bigint, timestamptz) IS
'A customer''s usage per meter in its open period (its live subscription''s current period; the UTC month without one), from the rollups. BL404 for an unknown customer.';

CREATE OR REPLACE FUNCTION billing.list_meters()
RETURNS SETOF billing.meter
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$ SELECT * FROM billing.meter ORDER BY code $$;
COMMENT ON FUNCTION billing.list_meters() IS 'Every meter, by code.';

-- Comments of two lines each (001_schema checks it), the short ones above made whole here.
COMMENT ON FUNCTION billing.current_usage(bigint, timestamptz) IS
'A customer''s usage per meter in its open period (its live subscription''s current period; the UTC month without one), from the rollups.
Returns meter_code, aggregation, value, events, period_start, period_end; BL404 for an unknown customer.';
COMMENT ON FUNCTION billing.list_meters() IS
'Every meter (billing.meter), by code.
Returns the meter rows.';
COMMENT ON FUNCTION billing._usage_match(jsonb, jsonb) IS
'Private: whether an event''s data matches a meter''s filters (top-level keys; a value: equals, a list: in; compared as JSON).
Returns a boolean (true for no filters).';
COMMENT ON FUNCTION billing._usage_open_from(bigint, timestamptz, interval) IS
'Private: the earliest event time a customer''s usage may still have: its open period''s start, or the previous period''s while the grace runs (the UTC month without a live subscription).
Returns a timestamptz.';
COMMENT ON FUNCTION billing._usage_partition(timestamptz) IS
'Private: makes the monthly partition of usage_event holding p_at if it is missing (under an advisory lock).
Returns its name.';
COMMENT ON FUNCTION billing._usage_rebuild(billing.meter) IS
'Private: re-aggregates one meter''s rollups and distinct values from the stored events (a new or redefined meter).
Returns nothing.';
COMMENT ON FUNCTION billing._usage_time(text) IS
'Private: a CloudEvents time (RFC 3339 with a zone) as a timestamptz.
Returns NULL when it is not one or the date does not exist.';
