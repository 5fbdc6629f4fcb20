-- 83_usage_ingest: the ingestion of usage events (issue 29; docs/usage.md "Ingestion, two doors",
-- "Exactly once"): the one set-based statement behind both doors, the HTTP door's form
-- (ingest_usage) and the Kafka consumer's (ingest_usage_batch). Split out of 71_usage (pure moves).
-- Re-applied after every migration: CREATE OR REPLACE only.

-- The ingestion: a batch of CloudEvents in ONE statement (billing._ingest_usage_rows, the events'
-- envelope attributes as columns; its doors: billing.ingest_usage, a JSON array of at most 1,000
-- (HTTP), billing.ingest_usage_batch, an array of at most 50,000 JSON texts, both through
-- billing._ingest_usage_set, which reads the attributes out of the parsed events, and
-- billing.ingest_usage_columns, the Kafka consumer's: the attributes as it parsed them, each event's
-- data as a JSON text, the events it did not parse as JSON texts). Each event is answered: accepted (stored,
-- counted), duplicate (its (customer, source, id) was accepted before: nothing changes) or
-- rejected with the reason. The exactly-once key, the event and the rollups are written in the
-- same statement, so in the same transaction: an event is counted if and only if its key is stored.
-- Each event i is given by its attributes as `e ->> 'specversion'` (and subject, id, source, type,
-- time) and `e -> 'data'` of its parsed JSON e read them: p_obj[i] is NULL when it is not JSON
-- (invalid_json), false when it is JSON but not an object (its attributes NULL).
CREATE OR REPLACE FUNCTION billing._ingest_usage_rows(
    p_obj boolean[], p_spec text[], p_subject text[], p_id text[], p_source text[], p_type text[], p_time text[],
    p_data jsonb[], p_now timestamptz, p_grace interval, p_skew interval, p_retention interval)
RETURNS TABLE (ord integer, status text, reason text, customer_id bigint)
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
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
    v_merge text := current_setting('enable_mergejoin');
    v_plans text := current_setting('plan_cache_mode');
    v_mem   text;
    v_dist  boolean;
    v_held  bigint;
    v_text  text[];
    v_all   text;
    -- a strict RFC 3339 instant with a zone (no capturing group: the batch's check is one DFA scan)
    c_time  CONSTANT text := '\d{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])[Tt ](?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d(?:\.\d{1,9})?(?:[Zz]|[+-](?:[01]\d|2[0-3]):[0-5]\d)';
BEGIN
    IF p_grace IS NULL OR p_grace < interval '0' OR p_grace > interval '7 days'
       OR p_skew IS NULL OR p_skew < interval '0' OR p_skew > interval '1 day'
       OR p_retention IS NULL OR p_retention < interval '1 day' THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('usage ingestion: grace 0..7 days, skew 0..1 day, retention >= 1 day; got %s, %s, %s', p_grace, p_skew, p_retention);
    END IF;
    IF cardinality(p_obj) IS NULL OR cardinality(p_obj) = 0 THEN
        RETURN;
    END IF;
    -- one pass over the events: each one's subject (a customer id, or NULL). The
    -- times are checked as strict RFC 3339 by ONE regular expression over the batch's times joined
    -- by newlines (a call of the regex engine per event was ~7% of a batch's CPU), then cast at
    -- once; when one of them is not of that form (or holds a newline), each one alone; when one of
    -- them still does not exist (30 February), each one alone, NULL for those that fail (invalid_time)
    v_subj := ARRAY(SELECT CASE WHEN length(a.s) BETWEEN 1 AND 18 AND translate(a.s, '0123456789', '') = ''
                                THEN a.s::bigint END
                      FROM unnest(p_subject) WITH ORDINALITY AS a (s, n) ORDER BY a.n);
    v_text := p_time;
    v_all := array_to_string(v_text, E'\n');
    BEGIN
        IF v_all ~ ('^(?:' || c_time || E'\n)*' || c_time || '$')
           AND length(v_all) - length(replace(v_all, E'\n', '')) = cardinality(array_remove(v_text, NULL)) - 1 THEN
            v_times := v_text::timestamptz[];
        ELSE
            v_times := ARRAY(SELECT CASE WHEN t.x ~ ('^' || c_time || '$') THEN t.x::timestamptz END
                               FROM unnest(v_text) WITH ORDINALITY AS t (x, n) ORDER BY t.n);
        END IF;
    EXCEPTION WHEN OTHERS THEN
        v_times := ARRAY(SELECT billing._usage_time(t.x) FROM unnest(v_text) WITH ORDINALITY AS t (x, n) ORDER BY t.n);
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
    -- On Citus the same statement also holds the customer's row FOR SHARE on its node until this
    -- transaction commits there: a batch spanning nodes commits in two phases, and when a node's
    -- COMMIT PREPARED fails (a node unreachable, the coordinator gone after its own commit) the
    -- node keeps the batch prepared, its rows unseen, after the usage locks above are released,
    -- until Citus recovers it. A prepared transaction keeps its row locks: the rating
    -- (rate_usage_in_shard, _rate_subscription) takes that row FOR NO KEY UPDATE SKIP LOCKED and
    -- leaves the customer to a later call (docs/usage.md "Exactly once").
    v_dist := billing._distributed('billing.usage_cursor');
    IF v_dist THEN
        FOR v_k IN 1 .. cardinality(v_ids) LOOP
            CONTINUE WHEN v_from[v_k] IS NULL;  -- (none of its events can be stored)
            WITH held AS (SELECT c.id FROM billing.customer c WHERE c.id = v_ids[v_k] FOR SHARE),
                 marked AS (
                     UPDATE billing.usage_cursor u
                        SET late_since = least(coalesce(u.late_since, v_from[v_k]), v_from[v_k]), updated_at = v_now
                      WHERE u.customer_id = v_ids[v_k] AND u.rated_until > v_from[v_k]
                        AND (u.late_since IS NULL OR u.late_since > v_from[v_k])
                     RETURNING 1)
            SELECT count(*) INTO v_held FROM held;
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
    -- error aborts the transaction or subtransaction, which restores the setting). Merge joins too:
    -- on one-row estimates the planner sorted the batch's 30,000 (event, meter) rows by customer,
    -- meter and hour (text comparisons) to merge 'rollups' with 'latest', where hashing them costs
    -- ~3.5 µs an event less (ingest5, bench/README.md "Ingestion, fifth pass").
    PERFORM set_config('enable_nestloop', 'off', true);
    PERFORM set_config('enable_mergejoin', 'off', true);
    -- Its generic plan, made once a session (one node): the estimates are blind anyway, and the
    -- custom plan the planner kept choosing was planned at each call, most of a batch of ONE
    -- event's cost. (Citus plans a distributed statement's parameters only in a custom plan.)
    IF NOT v_dist THEN
        PERFORM set_config('plan_cache_mode', 'force_generic_plan', true);
    END IF;
    -- The batch's CTEs are held in memory (tuplestores, hash tables): a batch of 50,000 (the Kafka
    -- door's limit) holds ~150,000 (event, meter) rows in one of them, ~20 MB; at PostgreSQL's default
    -- work_mem (4 MB) they would go to temporary files. Above 10,000 events (the limit until ingest7),
    -- at least 64 MB for this statement alone (a smaller batch, the HTTP door's, is left as it was).
    IF cardinality(p_obj) > 10000 AND pg_catalog.pg_size_bytes(current_setting('work_mem')) < 64 * 1024 * 1024 THEN
        v_mem := current_setting('work_mem');
        PERFORM set_config('work_mem', '64MB', true);
    END IF;
    RETURN QUERY
    WITH parsed AS (
        SELECT a.n::integer AS ord, a.o AS obj, a.v AS spec, a.j AS subject, a.s AS subject_id, a.t AS event_time,
               a.i AS event_id, a.so AS source, a.ty AS event_type, a.d AS data
          FROM unnest(p_obj, p_spec, p_subject, p_id, p_source, p_type, p_data, v_subj, v_times)
               WITH ORDINALITY AS a (o, v, j, i, so, ty, d, s, t, n)
    ), checked AS (  -- the reasons that need no meter, in the order of docs/usage.md
        SELECT p.ord, p.subject_id, p.event_time, p.event_id, p.source, p.event_type, p.data, c.id AS cust,
               CASE
                 WHEN p.obj IS NULL THEN 'invalid_json'  -- a Kafka message that is not JSON
                 WHEN NOT p.obj OR p.spec IS DISTINCT FROM '1.0'
                      OR p.event_id IS NULL OR p.event_id = '' OR length(p.event_id) > 200
                      OR p.source IS NULL OR p.source = '' OR length(p.source) > 200
                      OR p.event_type IS NULL OR p.event_type = '' OR length(p.event_type) > 200
                      OR (p.data IS NOT NULL AND jsonb_typeof(p.data) NOT IN ('object', 'null'))
                   THEN 'invalid_event'
                 WHEN p.subject IS NULL THEN 'invalid_event'
                 WHEN p.event_time IS NULL THEN 'invalid_time'
                 WHEN c.id IS NULL THEN 'unknown_customer'
                 WHEN p.event_time > v_now + p_skew THEN 'in_future'
                 WHEN p.event_time < v_now - p_retention THEN 'too_old'
               END AS why
          FROM parsed p LEFT JOIN unnest(v_ids) AS c (id) ON c.id = p.subject_id
    ), meters AS MATERIALIZED (
        SELECT m.code, m.event_type, m.aggregation, m.property, m.filters FROM billing.meter m
    ), matched AS MATERIALIZED (  -- every (event, meter that counts it), the meter's value read once; not the
                                  -- count meters without filters: they read nothing of an event but its
                                  -- type, and are counted per (customer, type, hour) below ('plain')
        SELECT k.ord, m.code, m.aggregation,
               CASE WHEN m.aggregation IN ('sum', 'max', 'latest') AND jsonb_typeof(k.data #> m.property) = 'number'
                    THEN (k.data #> m.property)::numeric END AS num,
               CASE WHEN m.aggregation = 'unique_count' THEN k.data #>> m.property END AS val
          FROM checked k JOIN meters m ON m.event_type = k.event_type
         WHERE k.why IS NULL AND (m.filters = '{}'::jsonb OR billing._usage_match(m.filters, k.data))
           AND NOT (m.aggregation = 'count' AND m.filters = '{}'::jsonb)
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
        SELECT k.cust, x.code, x.aggregation, date_trunc('hour', k.event_time AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS bucket,
               k.event_time, x.num, x.val
          FROM kept k JOIN matched x ON x.ord = k.ord
    ), plain AS (  -- the count meters without filters: the events kept per (customer, type, hour), then
                   -- per meter of that type (no (event, meter) row each: ingest9, -0.85 µs an event)
        SELECT p.cust, m.code, p.bucket, p.events
          FROM (SELECT k.cust, k.event_type, date_trunc('hour', k.event_time AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS bucket,
                       count(*) AS events
                  FROM kept k GROUP BY 1, 2, 3) p
          JOIN meters m ON m.event_type = p.event_type AND m.aggregation = 'count' AND m.filters = '{}'::jsonb
    ), rollups AS (  -- per (customer, meter, hour): the batch's figures, hashed (no sort); the time of
                     -- the latest event for `latest` meters only (the one aggregation that reads it)
        SELECT c.cust, c.code, c.bucket, count(*) AS events, coalesce(sum(c.num), 0) AS total, max(c.num) AS max_value,
               max(c.event_time) FILTER (WHERE c.aggregation = 'latest') AS latest_time
          FROM counted c
         GROUP BY c.cust, c.code, c.bucket
        UNION ALL
        SELECT p.cust, p.code, p.bucket, p.events, 0::numeric, NULL::numeric, NULL::timestamptz FROM plain p
    ), latest AS (  -- a `latest` meter's value at its latest event (two at one instant: the larger): a
                    -- sort of those meters' rows alone
        SELECT DISTINCT ON (c.cust, c.code, c.bucket) c.cust, c.code, c.bucket, c.num AS latest_value
          FROM counted c
         WHERE c.aggregation = 'latest'
         ORDER BY c.cust, c.code, c.bucket, c.event_time DESC, c.num DESC NULLS LAST
    ), rolled AS (
        INSERT INTO billing.usage_rollup AS r (customer_id, meter_code, bucket, events, total, max_value, latest_time, latest_value)
        SELECT s.cust, s.code, s.bucket, s.events, s.total, s.max_value, s.latest_time, l.latest_value
          FROM rollups s LEFT JOIN latest l ON l.cust = s.cust AND l.code = s.code AND l.bucket = s.bucket
        ON CONFLICT ON CONSTRAINT usage_rollup_pkey DO UPDATE
           SET events = r.events + EXCLUDED.events,
               total = r.total + EXCLUDED.total,
               max_value = greatest(r.max_value, EXCLUDED.max_value),
               latest_value = CASE WHEN r.latest_time IS NULL OR EXCLUDED.latest_time > r.latest_time
                                        OR (EXCLUDED.latest_time = r.latest_time AND EXCLUDED.latest_value > r.latest_value)
                                   THEN EXCLUDED.latest_value ELSE r.latest_value END,
               latest_time = greatest(r.latest_time, EXCLUDED.latest_time),
               folded = coalesce(r.folded, false)  -- (NULL: inserted by the statement that returns it)
        RETURNING r.customer_id, r.meter_code, r.bucket, r.folded
    ), uniq AS (
        INSERT INTO billing.usage_unique AS u (customer_id, meter_code, bucket, value)
        SELECT DISTINCT c.cust, c.code, c.bucket, c.val FROM counted c WHERE c.val IS NOT NULL
        ON CONFLICT ON CONSTRAINT usage_unique_pkey DO NOTHING
        RETURNING u.customer_id, u.meter_code, u.bucket, u.value
    ), aged AS (  -- The daily rollups (0610; usage_between reads a period's whole days from them): a
                  -- customer's hours are folded into their days' rows once it has events two hours
                  -- later, i.e. when this batch inserted the row of a later hour (folded NULL: once an
                  -- hour a meter; a live stream's other batches fold nothing). Index probes of the
                  -- customers' rows not folded (usage_rollup_unfolded_idx), no join: rolled is read
                  -- whole first, and a row it updated is left to a later fold (same command).
        UPDATE billing.usage_rollup r SET folded = true
         WHERE r.customer_id = ANY (ARRAY(SELECT DISTINCT f.customer_id FROM rolled f WHERE f.folded IS NULL))
           AND r.folded IS NOT TRUE
           AND r.bucket < (SELECT min(f.bucket) FROM rolled f WHERE f.folded IS NULL) - interval '1 hour'
        RETURNING r.customer_id, r.meter_code, r.bucket, r.events, r.total, r.max_value, r.latest_time, r.latest_value
    ), rolled_day AS (  -- each day's row gets the hours folded now, and the batch's events of the hours
                        -- folded before (late events; read only when there are any)
        INSERT INTO billing.usage_rollup_day AS r (customer_id, meter_code, day, events, total, max_value, latest_time, latest_value)
        SELECT d.cust, d.code, date_trunc('day', d.bucket AT TIME ZONE 'UTC') AT TIME ZONE 'UTC',
               sum(d.events), sum(d.total), max(d.max_value), max(d.latest_time),
               (array_agg(d.latest_value ORDER BY d.latest_time DESC NULLS LAST, d.latest_value DESC NULLS LAST))[1]
          FROM (SELECT a.customer_id AS cust, a.meter_code AS code, a.bucket, a.events, a.total, a.max_value, a.latest_time,
                       a.latest_value
                  FROM aged a
                UNION ALL
                SELECT c.cust, c.code, c.bucket, 1, coalesce(c.num, 0), c.num,
                       CASE WHEN c.aggregation = 'latest' THEN c.event_time END, CASE WHEN c.aggregation = 'latest' THEN c.num END
                  FROM counted c
                  JOIN rolled f ON f.customer_id = c.cust AND f.meter_code = c.code AND f.bucket = c.bucket AND f.folded
                 WHERE (SELECT bool_or(x.folded) FROM rolled x)
                UNION ALL
                SELECT p.cust, p.code, p.bucket, p.events, 0::numeric, NULL::numeric, NULL::timestamptz, NULL::numeric
                  FROM plain p
                  JOIN rolled f ON f.customer_id = p.cust AND f.meter_code = p.code AND f.bucket = p.bucket AND f.folded
                 WHERE (SELECT bool_or(x.folded) FROM rolled x)) d
         GROUP BY 1, 2, 3
        ON CONFLICT ON CONSTRAINT usage_rollup_day_pkey DO UPDATE
           SET events = r.events + EXCLUDED.events,
               total = r.total + EXCLUDED.total,
               max_value = greatest(r.max_value, EXCLUDED.max_value),
               latest_value = CASE WHEN r.latest_time IS NULL OR EXCLUDED.latest_time > r.latest_time
                                        OR (EXCLUDED.latest_time = r.latest_time AND EXCLUDED.latest_value > r.latest_value)
                                   THEN EXCLUDED.latest_value ELSE r.latest_value END,
               latest_time = greatest(r.latest_time, EXCLUDED.latest_time)
        RETURNING 1
    ), uniq_day AS (  -- the distinct values per day: a value new in its hour may be new in its day,
                      -- only those are tried (a value stored in an hour is stored in its day by the
                      -- statement that stored it)
        INSERT INTO billing.usage_unique_day (customer_id, meter_code, day, value)
        SELECT DISTINCT u.customer_id, u.meter_code, date_trunc('day', u.bucket AT TIME ZONE 'UTC') AT TIME ZONE 'UTC', u.value
          FROM uniq u
        ON CONFLICT ON CONSTRAINT usage_unique_day_pkey DO NOTHING
        RETURNING 1
    )
    SELECT k.ord,
           CASE WHEN k.reason IS NOT NULL THEN 'rejected' WHEN kk.ord IS NOT NULL THEN 'accepted' ELSE 'duplicate' END,
           k.reason, k.cust
      FROM judged k LEFT JOIN kept kk ON kk.ord = k.ord
     ORDER BY k.ord;
    PERFORM set_config('enable_nestloop', v_loops, true);
    PERFORM set_config('enable_mergejoin', v_merge, true);
    PERFORM set_config('plan_cache_mode', v_plans, true);
    IF v_mem IS NOT NULL THEN
        PERFORM set_config('work_mem', v_mem, true);
    END IF;
END
$$;

COMMENT ON FUNCTION billing._ingest_usage_rows(boolean[], text[], text[], text[], text[], text[], text[], jsonb[], timestamptz, interval, interval, interval) IS
'Private: the ingestion statement behind every door, the events'' envelope attributes as columns (p_obj NULL: not JSON, invalid_json; false: not an object).
Returns per event (ord, status, reason, customer_id).';

-- The JSON doors' events (parsed; a NULL element: not JSON, invalid_json): their attributes read in
-- one pass, then the statement.
CREATE OR REPLACE FUNCTION billing._ingest_usage_set(
    p_events jsonb[], p_now timestamptz, p_grace interval, p_skew interval, p_retention interval)
RETURNS TABLE (ord integer, status text, reason text, customer_id bigint)
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_obj  boolean[];
    v_spec text[];
    v_subj text[];
    v_id   text[];
    v_src  text[];
    v_type text[];
    v_time text[];
    v_data jsonb[];
BEGIN
    SELECT array_agg(x.o), array_agg(x.v), array_agg(x.j), array_agg(x.i), array_agg(x.so), array_agg(x.ty),
           array_agg(x.t), array_agg(x.d)
      INTO v_obj, v_spec, v_subj, v_id, v_src, v_type, v_time, v_data
      FROM (SELECT a.n, jsonb_typeof(a.e) = 'object' AS o,
                   CASE WHEN jsonb_typeof(a.e) = 'object' THEN a.e ->> 'specversion' END AS v,
                   CASE WHEN jsonb_typeof(a.e) = 'object' THEN a.e ->> 'subject' END AS j,
                   CASE WHEN jsonb_typeof(a.e) = 'object' THEN a.e ->> 'id' END AS i,
                   CASE WHEN jsonb_typeof(a.e) = 'object' THEN a.e ->> 'source' END AS so,
                   CASE WHEN jsonb_typeof(a.e) = 'object' THEN a.e ->> 'type' END AS ty,
                   CASE WHEN jsonb_typeof(a.e) = 'object' THEN a.e ->> 'time' END AS t,
                   CASE WHEN jsonb_typeof(a.e) = 'object' THEN a.e -> 'data' END AS d
              FROM unnest(p_events) WITH ORDINALITY AS a (e, n) ORDER BY a.n) x;
    RETURN QUERY SELECT * FROM billing._ingest_usage_rows(v_obj, v_spec, v_subj, v_id, v_src, v_type, v_time, v_data,
                                                         p_now, p_grace, p_skew, p_retention);
END
$$;
COMMENT ON FUNCTION billing._ingest_usage_set(jsonb[], timestamptz, interval, interval, interval) IS
'Private: the JSON doors'' ingestion (ingest_usage, ingest_usage_batch; a NULL element: not JSON, invalid_json): the events'' attributes, then _ingest_usage_rows.
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

-- The Kafka consumer's form: the messages' values as they came (JSON text), at most 50,000 (BL413
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
    IF cardinality(p_events) > 50000 THEN
        RAISE EXCEPTION USING ERRCODE = 'BL413',
            MESSAGE = format('usage events: at most 50000 a batch, got %s', cardinality(p_events));
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
'The Kafka consumer''s ingestion: as billing.ingest_usage, the events as JSON texts (one message each), at most 50000 (BL413 above).
Returns per event (ord = its 1-based position) accepted, duplicate or rejected with the reason (ingest_usage''s, and invalid_json).';

-- The Kafka consumer's form since ingest4: the events as it parsed them. Event i is either its
-- attributes (p_spec, p_subject, p_id, p_source, p_type, p_time: what `e ->> 'specversion'` ... of its
-- JSON e read, NULL when absent or null; p_data: the JSON text of `e -> 'data'`, NULL when absent)
-- with p_raw[i] NULL, or p_raw[i], its JSON text as it came (the attributes then ignored): what the
-- consumer leaves to the database (docs/usage.md "Ingestion, two doors" says which). At most 50,000.
-- No JSON text of a whole event is parsed here but the raw ones: the envelope costs the database
-- nothing, only the data's parse (for the stored jsonb) stays. Any columns a caller sends are those of
-- some JSON object (a text holds no NUL), so this door accepts nothing the JSON doors would not.
CREATE OR REPLACE FUNCTION billing.ingest_usage_columns(
    p_spec text[], p_subject text[], p_id text[], p_source text[], p_type text[], p_time text[], p_data text[],
    p_raw text[], p_now timestamptz DEFAULT now(), p_grace interval DEFAULT interval '1 hour',
    p_skew interval DEFAULT interval '5 minutes', p_retention interval DEFAULT interval '100 days')
RETURNS TABLE (ord integer, status text, reason text, customer_id bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_n    integer := cardinality(p_raw);
    v_obj  boolean[];
    v_data jsonb[];
    v_one  jsonb;
    v_k    integer;
BEGIN
    IF p_raw IS NULL OR array_ndims(p_raw) > 1 OR p_spec IS NULL OR p_subject IS NULL OR p_id IS NULL
       OR p_source IS NULL OR p_type IS NULL OR p_time IS NULL OR p_data IS NULL
       OR cardinality(p_spec) <> v_n OR cardinality(p_subject) <> v_n OR cardinality(p_id) <> v_n
       OR cardinality(p_source) <> v_n OR cardinality(p_type) <> v_n OR cardinality(p_time) <> v_n
       OR cardinality(p_data) <> v_n THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = 'usage events: eight arrays of one length are expected (the attributes, data, raw texts)';
    END IF;
    IF v_n > 50000 THEN
        RAISE EXCEPTION USING ERRCODE = 'BL413', MESSAGE = format('usage events: at most 50000 a batch, got %s', v_n);
    END IF;
    IF v_n = 0 THEN
        RETURN;
    END IF;
    v_obj := array_fill(true, ARRAY[v_n]);
    -- the data texts parsed at once; when one of them is not JSON, each one alone (its event: invalid_json)
    BEGIN
        v_data := p_data::jsonb[];
    EXCEPTION WHEN OTHERS THEN
        v_data := array_fill(NULL::jsonb, ARRAY[v_n]);
        FOR v_k IN 1 .. v_n LOOP
            BEGIN
                v_data[v_k] := p_data[v_k]::jsonb;
            EXCEPTION WHEN OTHERS THEN
                v_obj[v_k] := NULL;
            END;
        END LOOP;
    END;
    -- the events left as JSON texts (few: see the consumer), each parsed and read as the JSON doors do
    FOR v_k IN SELECT r.n FROM unnest(p_raw) WITH ORDINALITY AS r (t, n) WHERE r.t IS NOT NULL LOOP
        BEGIN
            v_one := p_raw[v_k]::jsonb;
        EXCEPTION WHEN OTHERS THEN
            v_one := NULL;
        END;
        v_obj[v_k] := jsonb_typeof(v_one) = 'object';
        IF v_obj[v_k] THEN
            p_spec[v_k] := v_one ->> 'specversion';
            p_subject[v_k] := v_one ->> 'subject';
            p_id[v_k] := v_one ->> 'id';
            p_source[v_k] := v_one ->> 'source';
            p_type[v_k] := v_one ->> 'type';
            p_time[v_k] := v_one ->> 'time';
            v_data[v_k] := v_one -> 'data';
        ELSE
            p_spec[v_k] := NULL; p_subject[v_k] := NULL; p_id[v_k] := NULL; p_source[v_k] := NULL;
            p_type[v_k] := NULL; p_time[v_k] := NULL; v_data[v_k] := NULL;
        END IF;
    END LOOP;
    RETURN QUERY SELECT * FROM billing._ingest_usage_rows(v_obj, p_spec, p_subject, p_id, p_source, p_type, p_time, v_data,
                                                         billing._check_now(p_now), p_grace, p_skew, p_retention);
END
$$;
COMMENT ON FUNCTION billing.ingest_usage_columns(text[], text[], text[], text[], text[], text[], text[], text[], timestamptz, interval, interval, interval) IS
'The Kafka consumer''s ingestion, the events as it parsed them: per event its attributes (specversion, subject, id, source, type, time as ->> reads them) and data (a JSON text), or its raw JSON text (p_raw); at most 50000 (BL413 above).
Returns per event (ord = its 1-based position) accepted, duplicate or rejected with the reason, as ingest_usage_batch answers the same messages.';

-- Comments of two lines each (001_schema checks it), the short ones above made whole here.
COMMENT ON FUNCTION billing.ingest_usage(jsonb, timestamptz, interval, interval, interval) IS
'Ingests a batch (JSON array, at most 1000; BL413 above) of CloudEvents 1.0 usage events (subject = the customer id) in one statement; the exactly-once key (customer, source, id), the event and the rollups in the same transaction.
Returns per event its 1-based ord, status accepted|duplicate|rejected, reason (invalid_event, invalid_time, unknown_customer, in_future, too_old, not_numeric, missing_property) and customer.';
