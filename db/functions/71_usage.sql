-- 71_usage: usage-based billing (issue 29; docs/usage.md): meters, the set-based ingestion of
-- CloudEvents with its exactly-once key, the monthly partitions of usage_event, and the reads of
-- a customer's usage from the hourly rollups.

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
        -- two ingestions making the same month: the second waits on the lock and finds it made
        PERFORM pg_advisory_xact_lock(hashtext('billing.usage_event partitions'));
        IF to_regclass('billing.' || v_name) IS NULL THEN
            EXECUTE format('CREATE TABLE billing.%I PARTITION OF billing.usage_event FOR VALUES FROM (%L) TO (%L)',
                           v_name, v_from, v_from + interval '1 month');
            EXECUTE format('REVOKE ALL ON billing.%I FROM PUBLIC', v_name);
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

-- Re-aggregates one meter's rollups from the stored events (a new or redefined meter).
CREATE OR REPLACE FUNCTION billing._usage_rebuild(p_meter billing.meter)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    DELETE FROM billing.usage_rollup WHERE meter_code = p_meter.code;
    DELETE FROM billing.usage_unique WHERE meter_code = p_meter.code;
    INSERT INTO billing.usage_rollup (customer_id, meter_code, bucket, events, total, max_value, latest_time, latest_value)
    SELECT v.customer_id, p_meter.code, v.bucket, count(*), coalesce(sum(v.num), 0), max(v.num), max(v.event_time),
           (array_agg(v.num ORDER BY v.event_time DESC, v.num DESC NULLS LAST))[1]
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

-- The ingestion: a batch of CloudEvents in ONE statement (billing._ingest_usage_set; the two doors:
-- billing.ingest_usage, a JSON array of at most 1,000 (HTTP), and billing.ingest_usage_batch, an
-- array of at most 10,000 (the Kafka consumer)). Each event is answered: accepted (stored,
-- counted), duplicate (its (customer, source, id) was accepted before: nothing changes) or
-- rejected with the reason. The exactly-once key, the event and the rollups are written in the
-- same statement, so in the same transaction: an event is counted if and only if its key is stored.
CREATE OR REPLACE FUNCTION billing._ingest_usage_set(
    p_events jsonb[], p_now timestamptz, p_grace interval, p_skew interval, p_retention interval)
RETURNS TABLE (ord integer, status text, reason text, customer_id bigint)
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
-- Generic plans, made once a session: the estimates are blind anyway (below), and a custom plan
-- (chosen again and again) is planned at each call: most of a batch of ONE event's cost
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_now   timestamptz := billing._check_now(p_now);
    v_month timestamptz;
    v_subj  bigint[];
    v_times timestamptz[];
    v_ids   bigint[];
    v_from  timestamptz[];
    v_k     integer;
    v_loops text := current_setting('enable_nestloop');
BEGIN
    IF p_grace IS NULL OR p_grace < interval '0' OR p_grace > interval '7 days'
       OR p_skew IS NULL OR p_skew < interval '0' OR p_skew > interval '1 day'
       OR p_retention IS NULL OR p_retention < interval '1 day' THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('usage ingestion: grace 0..7 days, skew 0..1 day, retention >= 1 day; got %s, %s, %s', p_grace, p_skew, p_retention);
    END IF;
    IF cardinality(p_events) IS NULL OR cardinality(p_events) = 0 THEN
        RETURN;
    END IF;
    -- one pass over the events: each one's subject (a customer id, or NULL) and time, parsed once:
    -- a strict RFC 3339 form cast directly; when one of them still does not exist (30 February),
    -- each one alone, NULL for those that fail (invalid_time)
    BEGIN
        SELECT array_agg(CASE WHEN jsonb_typeof(a.e) = 'object' AND length(a.e ->> 'subject') BETWEEN 1 AND 18
                              AND translate(a.e ->> 'subject', '0123456789', '') = ''
                              THEN (a.e ->> 'subject')::bigint END ORDER BY a.n),
               array_agg(CASE WHEN jsonb_typeof(a.e) = 'object'
                               AND a.e ->> 'time' ~ '^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])[Tt ]([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{1,9})?([Zz]|[+-]([01]\d|2[0-3]):[0-5]\d)$'
                              THEN (a.e ->> 'time')::timestamptz END ORDER BY a.n)
          INTO v_subj, v_times FROM unnest(p_events) WITH ORDINALITY AS a (e, n);
    EXCEPTION WHEN OTHERS THEN
        SELECT array_agg(CASE WHEN jsonb_typeof(a.e) = 'object' AND length(a.e ->> 'subject') BETWEEN 1 AND 18
                              AND translate(a.e ->> 'subject', '0123456789', '') = ''
                              THEN (a.e ->> 'subject')::bigint END ORDER BY a.n),
               array_agg(CASE WHEN jsonb_typeof(a.e) = 'object' THEN billing._usage_time(a.e ->> 'time') END ORDER BY a.n)
          INTO v_subj, v_times FROM unnest(p_events) WITH ORDINALITY AS a (e, n);
    END;
    -- the batch's customers that exist (in key order), one customer at a time (on Citus each is a
    -- query of its own shard group, not a nested distributed query)
    SELECT coalesce(array_agg(c.id ORDER BY c.id), '{}') INTO v_ids
      FROM billing.customer c
     WHERE c.id IN (SELECT DISTINCT s FROM unnest(v_subj) s WHERE s IS NOT NULL);
    -- the customers' usage locks, shared, in key order (the rating takes them exclusive: 72_usage_rating;
    -- hashint8 is billing._usage_lock_key's key, written inline: a function call per customer costs),
    -- before anything is read: an event stored while its span is rated is read by the rating, or
    -- finds the cursor moved past it and marks its span late (below)
    PERFORM pg_advisory_xact_lock_shared(29, q.k)
       FROM (SELECT DISTINCT hashint8(i) AS k FROM unnest(v_ids) i ORDER BY 1) q;
    -- the earliest event time of each customer in the batch (late events: before a span already rated)
    v_from := ARRAY(SELECT m.t FROM unnest(v_ids) WITH ORDINALITY AS u (i, n)
                      LEFT JOIN (SELECT x.s, min(x.t) AS t FROM unnest(v_subj, v_times) AS x (s, t)
                                  WHERE x.t >= v_now - p_retention GROUP BY x.s) m ON m.s = u.i
                     ORDER BY u.n);
    -- the partitions of the batch's months (a catalog probe each; made at most once a month)
    FOR v_month IN
        SELECT DISTINCT date_trunc('month', t AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'
          FROM unnest(v_times) t
         WHERE t IS NOT NULL AND t <= v_now + p_skew AND t >= v_now - p_retention
    LOOP
        PERFORM billing._usage_partition(v_month);
    END LOOP;

    -- a span already rated that this batch reaches is rated again (the increase billed on the next
    -- USAGE invoice): one statement for the batch (on Citus, one probe per customer: a join of the
    -- distributed cursors with the batch's list would not be one shard group's query)
    IF billing._distributed('billing.usage_cursor') THEN
        FOR v_k IN 1 .. cardinality(v_ids) LOOP
            CONTINUE WHEN v_from[v_k] IS NULL;
            UPDATE billing.usage_cursor u
               SET late_since = least(coalesce(u.late_since, v_from[v_k]), v_from[v_k]), updated_at = v_now
             WHERE u.customer_id = v_ids[v_k] AND u.rated_until > v_from[v_k]
               AND (u.late_since IS NULL OR u.late_since > v_from[v_k]);
        END LOOP;
    ELSE
        UPDATE billing.usage_cursor u
           SET late_since = least(coalesce(u.late_since, f.t), f.t), updated_at = v_now
          FROM unnest(v_ids, v_from) AS f (id, t)
         WHERE f.t IS NOT NULL AND u.customer_id = f.id AND u.rated_until > f.t
           AND (u.late_since IS NULL OR u.late_since > f.t);
    END IF;

    -- The statement's CTEs have blind row estimates (one row each; more once the plan is generic):
    -- a nested loop over two of them is quadratic in the batch. Every join below is an equality
    -- of two CTEs (hash), so nested loops are off for this statement alone (set back after it; an
    -- error aborts the transaction or subtransaction, which restores the setting).
    PERFORM set_config('enable_nestloop', 'off', true);
    RETURN QUERY
    WITH parsed AS (
        SELECT a.n::integer AS ord, a.e, a.s AS subject_id, a.t AS event_time,
               CASE WHEN jsonb_typeof(a.e) = 'object' THEN a.e ->> 'id' END AS event_id,
               CASE WHEN jsonb_typeof(a.e) = 'object' THEN a.e ->> 'source' END AS source,
               CASE WHEN jsonb_typeof(a.e) = 'object' THEN a.e ->> 'type' END AS event_type,
               CASE WHEN jsonb_typeof(a.e) = 'object' THEN a.e -> 'data' END AS data
          FROM unnest(p_events, v_subj, v_times) WITH ORDINALITY AS a (e, s, t, n)
    ), checked AS (  -- the reasons that need no meter, in the order of docs/usage.md
        SELECT p.ord, p.subject_id, p.event_time, p.event_id, p.source, p.event_type, p.data, c.id AS cust,
               CASE
                 WHEN p.e IS NULL THEN 'invalid_json'  -- a Kafka message that is not JSON (ingest_usage_batch)
                 WHEN jsonb_typeof(p.e) <> 'object' OR p.e ->> 'specversion' IS DISTINCT FROM '1.0'
                      OR p.event_id IS NULL OR p.event_id = '' OR length(p.event_id) > 200
                      OR p.source IS NULL OR p.source = '' OR length(p.source) > 200
                      OR p.event_type IS NULL OR p.event_type = '' OR length(p.event_type) > 200
                      OR (p.data IS NOT NULL AND jsonb_typeof(p.data) NOT IN ('object', 'null'))
                   THEN 'invalid_event'
                 WHEN p.e ->> 'subject' IS NULL THEN 'invalid_event'
                 WHEN p.event_time IS NULL THEN 'invalid_time'
                 WHEN c.id IS NULL THEN 'unknown_customer'
                 WHEN p.event_time > v_now + p_skew THEN 'in_future'
                 WHEN p.event_time < v_now - p_retention THEN 'too_old'
               END AS why
          FROM parsed p LEFT JOIN unnest(v_ids) AS c (id) ON c.id = p.subject_id
    ), meters AS MATERIALIZED (
        SELECT m.code, m.event_type, m.aggregation, m.property, m.filters FROM billing.meter m
    ), matched AS MATERIALIZED (  -- every (event, meter that counts it), the meter's value read once
        SELECT k.ord, m.code, m.aggregation,
               CASE WHEN m.aggregation IN ('sum', 'max', 'latest') AND jsonb_typeof(k.data #> m.property) = 'number'
                    THEN (k.data #> m.property)::numeric END AS num,
               CASE WHEN m.aggregation = 'unique_count' THEN k.data #>> m.property END AS val
          FROM checked k JOIN meters m ON m.event_type = k.event_type
         WHERE k.why IS NULL AND (m.filters = '{}'::jsonb OR billing._usage_match(m.filters, k.data))
    ), bad AS (  -- a numeric meter's property missing or not a number first, then a unique_count's missing
        SELECT x.ord, CASE WHEN bool_or(x.aggregation IN ('sum', 'max', 'latest') AND x.num IS NULL)
                           THEN 'not_numeric' ELSE 'missing_property' END AS why
          FROM matched x
         WHERE (x.aggregation IN ('sum', 'max', 'latest') AND x.num IS NULL)
            OR (x.aggregation = 'unique_count' AND x.val IS NULL)
         GROUP BY x.ord
    ), judged AS (
        SELECT k.*, coalesce(k.why, b.why) AS reason FROM checked k LEFT JOIN bad b ON b.ord = k.ord
    ), firsts AS (  -- a key sent twice in one batch: its first occurrence counts
        SELECT DISTINCT ON (k.cust, k.source, k.event_id) k.ord, k.cust, k.source, k.event_id, k.event_time,
               k.event_type, k.data
          FROM judged k WHERE k.reason IS NULL
         ORDER BY k.cust, k.source, k.event_id, k.ord
    ), fresh AS (
        INSERT INTO billing.usage_dedup AS d (customer_id, source, event_id, event_time)
        SELECT f.cust, f.source, f.event_id, f.event_time FROM firsts f
        ON CONFLICT ON CONSTRAINT usage_dedup_pkey DO NOTHING
        RETURNING d.customer_id, d.source, d.event_id
    ), kept AS (
        SELECT f.* FROM firsts f
          JOIN fresh n ON n.customer_id = f.cust AND n.source = f.source AND n.event_id = f.event_id
    ), stored AS (
        INSERT INTO billing.usage_event (customer_id, event_time, source, event_id, event_type, data, received_at)
        SELECT k.cust, k.event_time, k.source, k.event_id, k.event_type, k.data, v_now FROM kept k
        RETURNING 1
    ), counted AS (
        SELECT k.cust, x.code, date_trunc('hour', k.event_time AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS bucket,
               k.event_time, x.num, x.val
          FROM kept k JOIN matched x ON x.ord = k.ord
    ), rollups AS (  -- per (customer, meter, hour): the batch's figures, and the value of the latest
                     -- event (two at one instant: the larger), in one sort
        SELECT DISTINCT ON (c.cust, c.code, c.bucket) c.cust, c.code, c.bucket,
               count(*) OVER w AS events, coalesce(sum(c.num) OVER w, 0) AS total, max(c.num) OVER w AS max_value,
               max(c.event_time) OVER w AS latest_time, c.num AS latest_value
          FROM counted c
        WINDOW w AS (PARTITION BY c.cust, c.code, c.bucket)
         ORDER BY c.cust, c.code, c.bucket, c.event_time DESC, c.num DESC NULLS LAST
    ), rolled AS (
        INSERT INTO billing.usage_rollup AS r (customer_id, meter_code, bucket, events, total, max_value, latest_time, latest_value)
        SELECT s.cust, s.code, s.bucket, s.events, s.total, s.max_value, s.latest_time, s.latest_value FROM rollups s
        ON CONFLICT ON CONSTRAINT usage_rollup_pkey DO UPDATE
           SET events = r.events + EXCLUDED.events,
               total = r.total + EXCLUDED.total,
               max_value = greatest(r.max_value, EXCLUDED.max_value),
               latest_value = CASE WHEN r.latest_time IS NULL OR EXCLUDED.latest_time > r.latest_time
                                        OR (EXCLUDED.latest_time = r.latest_time AND EXCLUDED.latest_value > r.latest_value)
                                   THEN EXCLUDED.latest_value ELSE r.latest_value END,
               latest_time = greatest(r.latest_time, EXCLUDED.latest_time)
        RETURNING 1
    ), uniq AS (
        INSERT INTO billing.usage_unique (customer_id, meter_code, bucket, value)
        SELECT DISTINCT c.cust, c.code, c.bucket, c.val FROM counted c WHERE c.val IS NOT NULL
        ON CONFLICT ON CONSTRAINT usage_unique_pkey DO NOTHING
        RETURNING 1
    )
    SELECT k.ord,
           CASE WHEN k.reason IS NOT NULL THEN 'rejected' WHEN kk.ord IS NOT NULL THEN 'accepted' ELSE 'duplicate' END,
           k.reason, k.cust
      FROM judged k LEFT JOIN kept kk ON kk.ord = k.ord
     ORDER BY k.ord;
    PERFORM set_config('enable_nestloop', v_loops, true);
END
$$;

COMMENT ON FUNCTION billing._ingest_usage_set(jsonb[], timestamptz, interval, interval, interval) IS
'Private: the ingestion statement behind ingest_usage and ingest_usage_batch (a NULL element: not JSON, invalid_json).
Returns per event (ord, status, reason, customer_id).';

-- The HTTP door's form: a JSON array of at most 1,000 events (BL413 above).
CREATE OR REPLACE FUNCTION billing.ingest_usage(
    p_events jsonb, p_now timestamptz DEFAULT now(), p_grace interval DEFAULT interval '1 hour',
    p_skew interval DEFAULT interval '5 minutes', p_retention interval DEFAULT interval '100 days')
RETURNS TABLE (ord integer, status text, reason text, customer_id bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    IF p_events IS NULL OR jsonb_typeof(p_events) <> 'array' THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = 'usage events: a JSON array of CloudEvents is expected';
    END IF;
    IF jsonb_array_length(p_events) > 1000 THEN
        RAISE EXCEPTION USING ERRCODE = 'BL413',
            MESSAGE = format('usage events: at most 1000 a batch, got %s', jsonb_array_length(p_events));
    END IF;
    RETURN QUERY SELECT * FROM billing._ingest_usage_set(
        ARRAY(SELECT a.e FROM jsonb_array_elements(p_events) WITH ORDINALITY AS a (e, n) ORDER BY a.n),
        billing._check_now(p_now), p_grace, p_skew, p_retention);
END
$$;
COMMENT ON FUNCTION billing.ingest_usage(jsonb, timestamptz, interval, interval, interval) IS
'Ingests a batch (JSON array, at most 1000; BL413 above) of CloudEvents 1.0 usage events in one statement: per event (ord = its 1-based
position) accepted, duplicate (its (customer, source, id) was accepted before) or rejected with the reason: invalid_event, invalid_time,
unknown_customer, in_future (beyond p_skew), too_old (before the open period, or the period before while p_grace runs, or older than
p_retention), not_numeric (a sum/max/latest meter''s property), missing_property (a unique_count meter''s). subject = the customer id.';

-- The Kafka consumer's form: the messages' values as they came (JSON text), at most 10,000 (BL413
-- above): a batch that large makes fewer rollup rows per event (a customer's events of one hour and
-- meter are added to its rollup once), and the consumer neither parses nor re-serializes them.
-- A message that is not JSON is answered rejected, invalid_json.
CREATE OR REPLACE FUNCTION billing.ingest_usage_batch(
    p_events text[], p_now timestamptz DEFAULT now(), p_grace interval DEFAULT interval '1 hour',
    p_skew interval DEFAULT interval '5 minutes', p_retention interval DEFAULT interval '100 days')
RETURNS TABLE (ord integer, status text, reason text, customer_id bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_events jsonb[];
    v_one    jsonb;
    v_text   text;
BEGIN
    IF p_events IS NULL OR array_ndims(p_events) > 1 THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = 'usage events: an array of CloudEvents (JSON texts) is expected';
    END IF;
    IF cardinality(p_events) > 10000 THEN
        RAISE EXCEPTION USING ERRCODE = 'BL413',
            MESSAGE = format('usage events: at most 10000 a batch, got %s', cardinality(p_events));
    END IF;
    -- parsed at once; when one of them is not JSON, each one alone (NULL for those: invalid_json)
    BEGIN
        v_events := p_events::jsonb[];
    EXCEPTION WHEN OTHERS THEN
        v_events := '{}';
        FOREACH v_text IN ARRAY p_events LOOP
            BEGIN
                v_one := v_text::jsonb;
            EXCEPTION WHEN OTHERS THEN
                v_one := NULL;
            END;
            v_events := array_append(v_events, v_one);
        END LOOP;
    END;
    RETURN QUERY SELECT * FROM billing._ingest_usage_set(v_events, billing._check_now(p_now), p_grace, p_skew, p_retention);
END
$$;
COMMENT ON FUNCTION billing.ingest_usage_batch(text[], timestamptz, interval, interval, interval) IS
'The Kafka consumer''s ingestion: as billing.ingest_usage, the events as JSON texts (one message each), at most 10000 (BL413 above).
Returns per event (ord = its 1-based position) accepted, duplicate or rejected with the reason (ingest_usage''s, and invalid_json).';

CREATE OR REPLACE FUNCTION billing.usage_between(p_customer_id bigint, p_from timestamptz, p_to timestamptz)
RETURNS TABLE (meter_code text, aggregation text, value numeric, events bigint)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_lo timestamptz;  -- the first whole hour
    v_hi timestamptz;  -- the end of the last whole hour
BEGIN
    IF p_customer_id IS NULL OR p_from IS NULL OR p_to IS NULL OR p_to < p_from THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('usage_between: a customer and p_from <= p_to, got %s, %s, %s', p_customer_id, p_from, p_to);
    END IF;
    v_lo := date_trunc('hour', p_from AT TIME ZONE 'UTC') AT TIME ZONE 'UTC';
    IF v_lo < p_from THEN v_lo := v_lo + interval '1 hour'; END IF;
    v_hi := date_trunc('hour', p_to AT TIME ZONE 'UTC') AT TIME ZONE 'UTC';
    IF v_hi <= v_lo THEN v_lo := p_to; v_hi := p_to; END IF;  -- no whole hour: the events alone

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
        -- an index range per meter (customer, meter, hours): never the customer's older months
        SELECT m.code, m.aggregation, r.events, r.total, r.max_value, r.latest_time, r.latest_value
          FROM billing.meter m
         CROSS JOIN LATERAL (SELECT r.events, r.total, r.max_value, r.latest_time, r.latest_value
                               FROM billing.usage_rollup r
                              WHERE r.customer_id = p_customer_id AND r.meter_code = m.code
                                AND r.bucket >= v_lo AND r.bucket < v_hi
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
                                        AND q.bucket >= v_lo AND q.bucket < v_hi OFFSET 0) q
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
every meter listed (count/sum/unique_count 0, max/latest NULL without events). Whole hours from the rollups, the partial hours from the events.';

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

-- Pricing (docs/usage.md, "Pricing"): a plan's charge for a meter.
CREATE OR REPLACE FUNCTION billing.upsert_plan_charge(
    p_plan_code text, p_meter_code text, p_model text, p_unit_amount numeric DEFAULT NULL,
    p_package_size bigint DEFAULT NULL, p_tiers jsonb DEFAULT '[]'::jsonb, p_included_units numeric DEFAULT 0,
    p_minimum_amount bigint DEFAULT NULL, p_maximum_amount bigint DEFAULT NULL, p_now timestamptz DEFAULT now())
RETURNS billing.plan_charge
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_now     timestamptz := billing._check_now(p_now);
    v_plan_id bigint;
    v_tiers   jsonb := coalesce(p_tiers, '[]'::jsonb);
    v_row     billing.plan_charge;
    v_prev    numeric := 0;
    v_tier    jsonb;
    v_i       integer := 0;
    v_n       integer;
BEGIN
    PERFORM billing._audit('upsert_plan_charge', jsonb_build_object('plan', p_plan_code, 'meter', p_meter_code,
        'model', p_model, 'unit_amount', p_unit_amount, 'package_size', p_package_size, 'tiers', p_tiers,
        'included_units', p_included_units, 'minimum', p_minimum_amount, 'maximum', p_maximum_amount));
    SELECT id INTO v_plan_id FROM billing.plan WHERE code = p_plan_code;
    IF v_plan_id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'BL404', MESSAGE = format('plan %s not found', p_plan_code);
    END IF;
    IF NOT EXISTS (SELECT 1 FROM billing.meter WHERE code = p_meter_code) THEN
        RAISE EXCEPTION USING ERRCODE = 'BL404', MESSAGE = format('meter %s not found', p_meter_code);
    END IF;
    PERFORM billing._check_one_of(format('charge %s/%s: model', p_plan_code, p_meter_code), p_model,
                                  ARRAY['per_unit', 'graduated', 'volume', 'package'],
                                  'Use per_unit, graduated, volume or package.');
    IF p_model IN ('per_unit', 'package') AND (p_unit_amount IS NULL OR p_unit_amount < 0 OR v_tiers <> '[]'::jsonb) THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('charge %s/%s: %s needs a unit amount >= 0 and no tiers', p_plan_code, p_meter_code, p_model);
    END IF;
    IF (p_model = 'package') <> (p_package_size IS NOT NULL) OR p_package_size <= 0 THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('charge %s/%s: a package size > 0 for package, and only for it', p_plan_code, p_meter_code);
    END IF;
    IF p_model IN ('graduated', 'volume') THEN
        IF p_unit_amount IS NOT NULL OR jsonb_typeof(v_tiers) <> 'array' OR jsonb_array_length(v_tiers) = 0 THEN
            RAISE EXCEPTION USING ERRCODE = 'BL422',
                MESSAGE = format('charge %s/%s: %s needs tiers and no unit amount', p_plan_code, p_meter_code, p_model);
        END IF;
        v_n := jsonb_array_length(v_tiers);
        FOR v_tier IN SELECT value FROM jsonb_array_elements(v_tiers) LOOP
            v_i := v_i + 1;
            IF jsonb_typeof(v_tier) <> 'object' OR (v_tier - 'upTo' - 'unitAmount' - 'flatAmount') <> '{}'::jsonb
               OR jsonb_typeof(v_tier -> 'unitAmount') IS DISTINCT FROM 'number' OR (v_tier ->> 'unitAmount')::numeric < 0
               OR (v_tier ? 'flatAmount' AND (jsonb_typeof(v_tier -> 'flatAmount') IS DISTINCT FROM 'number'
                                              OR (v_tier ->> 'flatAmount')::numeric < 0
                                              OR (v_tier ->> 'flatAmount')::numeric <> trunc((v_tier ->> 'flatAmount')::numeric)))
               OR (v_i < v_n AND (jsonb_typeof(v_tier -> 'upTo') IS DISTINCT FROM 'number' OR (v_tier ->> 'upTo')::numeric <= v_prev))
               OR (v_i = v_n AND coalesce(jsonb_typeof(v_tier -> 'upTo'), 'null') <> 'null') THEN
                RAISE EXCEPTION USING ERRCODE = 'BL422',
                    MESSAGE = format('charge %s/%s: tier %s must be {"upTo": n, "unitAmount": x, "flatAmount": n}, upTo ascending, the last upTo null',
                                     p_plan_code, p_meter_code, v_i);
            END IF;
            IF v_i < v_n THEN v_prev := (v_tier ->> 'upTo')::numeric; END IF;
        END LOOP;
    END IF;
    IF coalesce(p_included_units, 0) < 0 OR p_minimum_amount < 0 OR p_maximum_amount < coalesce(p_minimum_amount, 0) THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('charge %s/%s: included units >= 0, 0 <= minimum <= maximum', p_plan_code, p_meter_code);
    END IF;
    INSERT INTO billing.plan_charge AS c (plan_id, meter_code, model, unit_amount, package_size, tiers, included_units,
                                          minimum_amount, maximum_amount, created_at, updated_at)
    VALUES (v_plan_id, p_meter_code, p_model, p_unit_amount, p_package_size, v_tiers, coalesce(p_included_units, 0),
            p_minimum_amount, p_maximum_amount, v_now, v_now)
    ON CONFLICT ON CONSTRAINT plan_charge_pkey DO UPDATE
       SET model = EXCLUDED.model, unit_amount = EXCLUDED.unit_amount, package_size = EXCLUDED.package_size,
           tiers = EXCLUDED.tiers, included_units = EXCLUDED.included_units, minimum_amount = EXCLUDED.minimum_amount,
           maximum_amount = EXCLUDED.maximum_amount, updated_at = EXCLUDED.updated_at
    RETURNING * INTO v_row;
    -- the plan's subscriptions are followed by the rating from the period current now (a charge
    -- applies from the period it was made in, never back to their first period: 72_usage_rating)
    PERFORM billing._usage_follow_plans(v_plan_id, v_now);
    RETURN v_row;
END
$$;
COMMENT ON FUNCTION billing.upsert_plan_charge(text, text, text, numeric, bigint, jsonb, numeric, bigint, bigint, timestamptz) IS
'Creates or changes a plan''s usage charge for a meter: per_unit (p_unit_amount per unit), graduated / volume (p_tiers), package
(p_unit_amount per started p_package_size units); p_included_units free, then at least p_minimum_amount and at most p_maximum_amount
per period. BL404 unknown plan or meter; BL422 a bad definition.';

-- The amounts (minor units) charges bill for quantities, set-based: the n-th charge (its terms, one
-- array each) for p_quantities[n], one row per n. Per charge: the included units off first, the model's amount rounded up to a whole
-- minor unit once, then the minimum and the maximum (docs/usage.md "Pricing"). The rating prices its
-- whole batch in one call (72_usage_rating); _usage_amount is the same for one charge.
-- graduated: each tier's slice of q (between the previous tier's upTo and its own) at its unit
-- amount, plus its flat amount when the slice is not empty; volume: the whole q at the first tier
-- whose upTo it does not pass, plus that tier's flat amount; q = 0 bills 0 under both.
DROP FUNCTION IF EXISTS billing._usage_amounts(billing.plan_charge[], numeric[]);
CREATE OR REPLACE FUNCTION billing._usage_amounts(
    p_models text[], p_unit_amounts numeric[], p_package_sizes bigint[], p_tiers jsonb[], p_included numeric[],
    p_minimums bigint[], p_maximums bigint[], p_quantities numeric[])
RETURNS TABLE (n bigint, amount bigint)
LANGUAGE plpgsql IMMUTABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    -- PL/pgSQL, not SQL: its plan is kept for the session (a SQL function's is made at every call,
    -- most of a preview's pricing); the plan has no join, so the generic plan of any batch is linear:
    -- each charge's tiers read by a subquery of its own row
    RETURN QUERY
    SELECT r.n,
           least(greatest(ceil(CASE r.model WHEN 'per_unit' THEN r.q * r.unit_amount
                                             WHEN 'package' THEN ceil(r.q / r.package_size) * r.unit_amount
                                             ELSE coalesce((
                   SELECT CASE WHEN r.model = 'graduated'
                               THEN sum((least(r.q, coalesce(t.upto, r.q)) - t.prev) * t.unit + t.flat)
                                        FILTER (WHERE least(r.q, coalesce(t.upto, r.q)) - t.prev > 0)
                               ELSE (array_agg(r.q * t.unit + t.flat ORDER BY t.k) FILTER (WHERE t.upto IS NULL OR r.q <= t.upto))[1]
                          END
                     FROM (SELECT t.k, (t.v ->> 'upTo')::numeric AS upto, (t.v ->> 'unitAmount')::numeric AS unit,
                                  coalesce((t.v ->> 'flatAmount')::numeric, 0) AS flat,
                                  coalesce(lag((t.v ->> 'upTo')::numeric) OVER (ORDER BY t.k), 0) AS prev
                             FROM jsonb_array_elements(r.tiers) WITH ORDINALITY AS t (v, k)) t
                    WHERE r.model IN ('graduated', 'volume') AND r.q > 0), 0) END),
                          r.minimum_amount),
                 r.maximum_amount)::bigint
      FROM (SELECT c.n, c.model, c.unit_amount, c.package_size, c.tiers, c.minimum_amount, c.maximum_amount,
                   greatest(coalesce(c.quantity, 0) - c.included_units, 0) AS q
              FROM unnest(p_models, p_unit_amounts, p_package_sizes, p_tiers, p_included, p_minimums, p_maximums, p_quantities)
                   WITH ORDINALITY AS c (model, unit_amount, package_size, tiers, included_units, minimum_amount, maximum_amount,
                                         quantity, n)) r
     ORDER BY r.n;
END
$$;
COMMENT ON FUNCTION billing._usage_amounts(text[], numeric[], bigint[], jsonb[], numeric[], bigint[], bigint[], numeric[]) IS
'Private, set-based: the amount in minor units the n-th charge (model, unit amount, package size, tiers, included units, minimum, maximum: the n-th of each array) bills for the quantity p_quantities[n] (included units off, the model, rounded up once, minimum, maximum).
Returns one row (n, amount) per charge.';

-- The amount (minor units) a charge bills for a period's quantity: _usage_amounts for one charge.
CREATE OR REPLACE FUNCTION billing._usage_amount(p_charge billing.plan_charge, p_quantity numeric)
RETURNS bigint
LANGUAGE sql IMMUTABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
    SELECT a.amount FROM billing._usage_amounts(ARRAY[p_charge.model], ARRAY[p_charge.unit_amount], ARRAY[p_charge.package_size],
                                                ARRAY[p_charge.tiers], ARRAY[p_charge.included_units],
                                                ARRAY[p_charge.minimum_amount], ARRAY[p_charge.maximum_amount], ARRAY[p_quantity]) a
$$;
COMMENT ON FUNCTION billing._usage_amount(billing.plan_charge, numeric) IS
'Private: the amount in minor units a plan charge bills for a period''s quantity (included units off, the model, rounded up once, minimum, maximum).';

-- Comments of two lines each (001_schema checks it), the short ones above made whole here.
COMMENT ON FUNCTION billing.ingest_usage(jsonb, timestamptz, interval, interval, interval) IS
'Ingests a batch (JSON array, at most 1000; BL413 above) of CloudEvents 1.0 usage events (subject = the customer id) in one statement; the exactly-once key (customer, source, id), the event and the rollups in the same transaction.
Returns per event its 1-based ord, status accepted|duplicate|rejected, reason (invalid_event, invalid_time, unknown_customer, in_future, too_old, not_numeric, missing_property) and customer.';
COMMENT ON FUNCTION billing.current_usage(bigint, timestamptz) IS
'A customer''s usage per meter in its open period (its live subscription''s current period; the UTC month without one), from the rollups.
Returns meter_code, aggregation, value, events, period_start, period_end; BL404 for an unknown customer.';
COMMENT ON FUNCTION billing.list_meters() IS
'Every meter (billing.meter), by code.
Returns the meter rows.';
COMMENT ON FUNCTION billing.upsert_plan_charge(text, text, text, numeric, bigint, jsonb, numeric, bigint, bigint, timestamptz) IS
'Creates or changes a plan''s usage charge for a meter: per_unit, graduated or volume (p_tiers [{upTo, unitAmount, flatAmount}]), package (p_unit_amount per started p_package_size units), with included units, minimum, maximum.
Returns the charge; BL404 for an unknown plan or meter, BL422 for a bad definition.';
COMMENT ON FUNCTION billing._usage_amount(billing.plan_charge, numeric) IS
'Private: the amount in minor units a plan charge bills for a period''s quantity (included units off, the model, rounded up once, minimum, maximum).
Returns a bigint >= 0.';
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
