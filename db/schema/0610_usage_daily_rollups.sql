-- 0610_usage_daily_rollups (issue 29: current usage and the upcoming invoice flat as events grow;
-- docs/usage.md "Current usage, fast"). Forward-only.
--
-- A period's read walked up to ~720 hourly rollup rows per meter, and for a unique_count meter the
-- distinct values of every hour (a set that grows with the events until every hour holds every
-- value). Beside the hourly tables, the same figures per UTC day: a period's read takes its whole
-- days from these (at most 31 rows per meter), the hours at its two ends from the hourly ones (at
-- most 23 + 23), the partial hours from the events, as before.
-- * usage_rollup_day holds the sums of its day's FOLDED hourly rows (usage_rollup.folded): the
--   ingestion statement folds a customer's hours into their days when it inserts the row of an
--   hour two or more later (once an hour a meter: a live stream's other batches write no daily row),
--   and adds a late event's figures to the day of a folded hour. A whole day is read as its daily
--   row plus its hourly rows not folded yet (usage_rollup_unfolded_idx: a few a customer).
-- * usage_unique_day holds every distinct value of a day: the ingestion stores a value there when
--   it is new in its hour (a value stored in an hour is stored in its day by the same statement).
-- The hourly rows stay whole (the set rating, 81, reads them; 721 compares it with the
-- one-at-a-time path, which reads through usage_between).
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
COMMENT ON TABLE billing.usage_rollup_day IS 'Per customer, meter and UTC day (day = its start): the sums of that day''s folded hourly rollups (usage_rollup.folded), written by the ingestion statement. No foreign key: the ingestion checks the batch''s customers (0350).';
COMMENT ON COLUMN billing.usage_rollup_day.day IS 'The UTC day''s start (midnight UTC).';
COMMENT ON COLUMN billing.usage_rollup_day.latest_time IS 'latest meters only: the time of the day''s latest event (NULL for the other meters).';
COMMENT ON COLUMN billing.usage_rollup_day.latest_value IS 'latest meters only: its value (two at one instant: the larger).';

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

-- The hourly rows already stored: those of hours that ended more than an hour ago folded into
-- their days (the live hours are folded by the ingestion later), every distinct value in its day.
-- (Before the partial index: these updates change no indexed column, they stay on their pages.)
ALTER TABLE billing.usage_rollup ADD COLUMN folded boolean;
COMMENT ON COLUMN billing.usage_rollup.folded IS 'true: its figures are in its day''s row of usage_rollup_day (0610; set by the ingestion once the customer has events two hours later; a late event of a folded hour adds to both); NULL: inserted and not updated since, false: updated since (both not folded).';
WITH f AS (
    UPDATE billing.usage_rollup r SET folded = true
     WHERE r.bucket < date_trunc('hour', now()) - interval '1 hour'
    RETURNING r.customer_id, r.meter_code, r.bucket, r.events, r.total, r.max_value, r.latest_time, r.latest_value
)
INSERT INTO billing.usage_rollup_day (customer_id, meter_code, day, events, total, max_value, latest_time, latest_value)
SELECT f.customer_id, f.meter_code, date_trunc('day', f.bucket AT TIME ZONE 'UTC') AT TIME ZONE 'UTC',
       sum(f.events), sum(f.total), max(f.max_value), max(f.latest_time),
       (array_agg(f.latest_value ORDER BY f.latest_time DESC NULLS LAST, f.latest_value DESC NULLS LAST))[1]
  FROM f
 GROUP BY 1, 2, 3;
CREATE INDEX usage_rollup_unfolded_idx ON billing.usage_rollup (customer_id, meter_code, bucket) WHERE folded IS NOT TRUE;
INSERT INTO billing.usage_unique_day (customer_id, meter_code, day, value)
SELECT DISTINCT u.customer_id, u.meter_code, date_trunc('day', u.bucket AT TIME ZONE 'UTC') AT TIME ZONE 'UTC', u.value
  FROM billing.usage_unique u;
