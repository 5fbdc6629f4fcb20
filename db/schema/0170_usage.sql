-- Usage-based billing, part 1 (issue 29): meters, usage events (CloudEvents 1.0), exactly-once
-- ingestion, and the hourly rollups that answer "current usage" without reading raw events.
-- docs/usage.md explains the model and the exactly-once argument.

-- The API scope of the ingestion door (POST /usage-events). The list keeps every scope of the
-- other branches (customer-sessions:write is doors', 0120) so the order of the merges does not matter.
ALTER TABLE billing.api_key DROP CONSTRAINT api_key_scopes_known,
    ADD CONSTRAINT api_key_scopes_known CHECK (
        cardinality(scopes) > 0
        AND scopes <@ ARRAY['subscriptions:read', 'subscriptions:write', 'refunds:write', 'customer-sessions:write',
                            'usage:write', 'admin']::text[]);
COMMENT ON COLUMN billing.api_key.scopes IS 'subscriptions:read, subscriptions:write, refunds:write, customer-sessions:write, usage:write and/or admin (admin allows everything).';

-- ---------------------------------------------------------------------------------------------
-- meter: what is counted (configuration: a reference table on Citus)
-- ---------------------------------------------------------------------------------------------
CREATE TABLE billing.meter (
    code          text        NOT NULL CONSTRAINT meter_pkey PRIMARY KEY,
    event_type    text        NOT NULL,
    aggregation   text        NOT NULL,
    property      text[],
    filters       jsonb       NOT NULL DEFAULT '{}'::jsonb,
    created_at    timestamptz NOT NULL,
    updated_at    timestamptz NOT NULL,
    CONSTRAINT meter_code_form CHECK (code ~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$'),
    CONSTRAINT meter_event_type_form CHECK (length(event_type) BETWEEN 1 AND 200),
    CONSTRAINT meter_aggregation_known CHECK (aggregation IN ('count', 'sum', 'max', 'unique_count', 'latest')),
    CONSTRAINT meter_property_needed CHECK ((aggregation = 'count') OR property IS NOT NULL),
    CONSTRAINT meter_property_form CHECK (property IS NULL OR cardinality(property) BETWEEN 1 AND 8),
    CONSTRAINT meter_filters_object CHECK (jsonb_typeof(filters) = 'object')
);
COMMENT ON TABLE billing.meter IS 'A meter: which usage events it counts (event type and filters) and how (aggregation of a property of data).';
COMMENT ON COLUMN billing.meter.code IS 'The meter''s code, e.g. api_requests (letters, digits, _ . -).';
COMMENT ON COLUMN billing.meter.event_type IS 'The CloudEvents type it counts (exact match).';
COMMENT ON COLUMN billing.meter.aggregation IS 'count (events), sum, max, latest (numeric property), unique_count (distinct values of the property).';
COMMENT ON COLUMN billing.meter.property IS 'The path of the property in data (each element a key), e.g. {tokens} or {usage,input}; NULL only for count.';
COMMENT ON COLUMN billing.meter.filters IS 'Top-level properties of data an event must match: {"k": "v"} equals, {"k": ["a","b"]} in.';

-- ---------------------------------------------------------------------------------------------
-- usage_event: every accepted event, once. Partitioned by month of its time (native partitions,
-- billing.usage_partitions makes and drops them; docs/usage.md says why not pg_partman).
-- ---------------------------------------------------------------------------------------------
CREATE TABLE billing.usage_event (
    customer_id bigint      NOT NULL,
    event_time  timestamptz NOT NULL,
    source      text        NOT NULL,
    event_id    text        NOT NULL,
    event_type  text        NOT NULL,
    data        jsonb,
    received_at timestamptz NOT NULL,
    CONSTRAINT usage_event_pkey PRIMARY KEY (customer_id, event_time, source, event_id)
) PARTITION BY RANGE (event_time);
-- On Citus the migration runs as the migrating login and billing.migrate's ADOPT hands the tables to
-- billing_owner, but it skips a table with an internal dependency, which Citus gives a distributed
-- partitioned table: name the owner here (a no-op on one PostgreSQL, where billing_owner runs this).
ALTER TABLE billing.usage_event OWNER TO billing_owner;
COMMENT ON TABLE billing.usage_event IS 'A usage event (CloudEvents 1.0) accepted once; partitioned by month of event_time.';
COMMENT ON COLUMN billing.usage_event.customer_id IS 'The customer its subject names.';
COMMENT ON COLUMN billing.usage_event.event_time IS 'Its CloudEvents time (when the usage happened).';
COMMENT ON COLUMN billing.usage_event.source IS 'Its CloudEvents source; (customer, source, event_id) is unique (billing.usage_dedup).';
COMMENT ON COLUMN billing.usage_event.event_id IS 'Its CloudEvents id.';
COMMENT ON COLUMN billing.usage_event.event_type IS 'Its CloudEvents type (matched against meter.event_type).';
COMMENT ON COLUMN billing.usage_event.data IS 'Its CloudEvents data (a JSON object or null).';
COMMENT ON COLUMN billing.usage_event.received_at IS 'When the engine accepted it (p_now of the ingestion).';

-- The exactly-once key: one row per (customer, source, id) ever accepted, kept as long as an
-- event of that time could still be accepted (ingestion refuses events older than the retention).
CREATE TABLE billing.usage_dedup (
    customer_id bigint      NOT NULL,
    source      text        NOT NULL,
    event_id    text        NOT NULL,
    event_time  timestamptz NOT NULL,
    CONSTRAINT usage_dedup_pkey PRIMARY KEY (customer_id, source, event_id),
    CONSTRAINT usage_dedup_customer_fkey FOREIGN KEY (customer_id) REFERENCES billing.customer (id)
);
COMMENT ON TABLE billing.usage_dedup IS 'Each (customer, source, id) accepted: an event sent again is a duplicate. Purged with the retention.';
COMMENT ON COLUMN billing.usage_dedup.event_time IS 'The time of the event it admitted (purged past the retention).';
CREATE INDEX usage_dedup_time_idx ON billing.usage_dedup USING brin (event_time);

-- Hourly rollups per customer and meter, maintained by the ingestion statement.
CREATE TABLE billing.usage_rollup (
    customer_id  bigint      NOT NULL,
    meter_code   text        NOT NULL,
    bucket       timestamptz NOT NULL,
    events       bigint      NOT NULL,
    total        numeric     NOT NULL,
    max_value    numeric,
    latest_time  timestamptz,
    latest_value numeric,
    CONSTRAINT usage_rollup_pkey PRIMARY KEY (customer_id, meter_code, bucket),
    CONSTRAINT usage_rollup_customer_fkey FOREIGN KEY (customer_id) REFERENCES billing.customer (id),
    CONSTRAINT usage_rollup_events_positive CHECK (events > 0)
);
COMMENT ON TABLE billing.usage_rollup IS 'Per customer, meter and hour (bucket = the hour''s start): events counted, sum, max and latest value of the meter''s property.';

-- unique_count: the distinct values per customer, meter and hour.
CREATE TABLE billing.usage_unique (
    customer_id bigint      NOT NULL,
    meter_code  text        NOT NULL,
    bucket      timestamptz NOT NULL,
    value       text        NOT NULL,
    CONSTRAINT usage_unique_pkey PRIMARY KEY (customer_id, meter_code, bucket, value),
    CONSTRAINT usage_unique_customer_fkey FOREIGN KEY (customer_id) REFERENCES billing.customer (id)
);
COMMENT ON TABLE billing.usage_unique IS 'The distinct values of a unique_count meter''s property per customer and hour.';

REVOKE ALL ON billing.meter, billing.usage_event, billing.usage_dedup, billing.usage_rollup, billing.usage_unique
    FROM PUBLIC;
