-- 0610_usage_daily_rollups (issue 29: current usage and the upcoming invoice flat as events grow;
-- docs/usage.md "Current usage, fast"). Forward-only.
--
-- A period's read walked up to ~720 hourly rollup rows per meter, and for a unique_count meter the
-- distinct values of every hour (a set that grows with the events until every hour holds every
-- value). Beside the hourly tables, the same figures per UTC day: a period's read takes its whole
-- days from these (at most 31 rows per meter), the hours at its two ends from the hourly ones (at
-- most 23 + 23), the partial hours from the events, as before. The ingestion statement writes both
-- levels in the same statement (83_usage_ingest), _usage_rebuild rebuilds both (71_usage); the set
-- rating (81) still reads the hourly rows (the same figures: 721 compares it with the one-at-a-time
-- path, which reads through usage_between).
CREATE TABLE billing.usage_rollup_day (
    customer_id  bigint      NOT NULL,
    meter_code   text        NOT NULL,
    day          timestamptz NOT NULL,
    events       bigint      NOT NULL,
    total        numeric     NOT NULL,
    max_value    numeric,
    latest_time  timestamptz,
    latest_value numeric,
    CONSTRAINT usage_rollup_day_pkey PRIMARY KEY (customer_id, meter_code, day),
    CONSTRAINT usage_rollup_day_events_positive CHECK (events > 0)
);
COMMENT ON TABLE billing.usage_rollup_day IS 'Per customer, meter and UTC day (day = its start): the sums of that day''s hourly rollups (usage_rollup), written by the same ingestion statement. No foreign key: the ingestion checks the batch''s customers (0350).';
COMMENT ON COLUMN billing.usage_rollup_day.day IS 'The UTC day''s start (midnight UTC).';
COMMENT ON COLUMN billing.usage_rollup_day.latest_time IS 'latest meters only: the time of the day''s latest event (NULL for the other meters).';
COMMENT ON COLUMN billing.usage_rollup_day.latest_value IS 'latest meters only: its value (two at one instant: the larger).';
-- the live day's row is updated by every batch, as the live hour's (0350): room on each page keeps
-- those updates HOT
ALTER TABLE billing.usage_rollup_day SET (fillfactor = 70);

CREATE TABLE billing.usage_unique_day (
    customer_id bigint      NOT NULL,
    meter_code  text        NOT NULL,
    day         timestamptz NOT NULL,
    value       text        NOT NULL,
    CONSTRAINT usage_unique_day_pkey PRIMARY KEY (customer_id, meter_code, day, value)
);
COMMENT ON TABLE billing.usage_unique_day IS 'The distinct values of a unique_count meter''s property per customer and UTC day: a value''s row is written when it is first seen in one of the day''s hours (usage_unique). No foreign key: the ingestion checks the batch''s customers (0350).';
COMMENT ON COLUMN billing.usage_unique_day.day IS 'The UTC day''s start (midnight UTC).';

REVOKE ALL ON billing.usage_rollup_day, billing.usage_unique_day FROM PUBLIC;

-- From the hourly rows already stored (the same figures the ingestion would have written).
INSERT INTO billing.usage_rollup_day (customer_id, meter_code, day, events, total, max_value, latest_time, latest_value)
SELECT r.customer_id, r.meter_code, date_trunc('day', r.bucket AT TIME ZONE 'UTC') AT TIME ZONE 'UTC',
       sum(r.events), sum(r.total), max(r.max_value),
       CASE WHEN min(m.aggregation) = 'latest' THEN max(r.latest_time) END,
       CASE WHEN min(m.aggregation) = 'latest'
            THEN (array_agg(r.latest_value ORDER BY r.latest_time DESC NULLS LAST, r.latest_value DESC NULLS LAST))[1] END
  FROM billing.usage_rollup r
  LEFT JOIN billing.meter m ON m.code = r.meter_code
 GROUP BY 1, 2, 3;
INSERT INTO billing.usage_unique_day (customer_id, meter_code, day, value)
SELECT DISTINCT u.customer_id, u.meter_code, date_trunc('day', u.bucket AT TIME ZONE 'UTC') AT TIME ZONE 'UTC', u.value
  FROM billing.usage_unique u;
