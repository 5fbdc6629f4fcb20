-- Usage ingestion, faster (issue 29; docs/usage.md "Ingestion, two doors" and "Figures measured").
-- The per-row foreign keys of the ingestion's tables to billing.customer are dropped: each one was
-- an SPI query per inserted row (about a fifth of a batch's server time), and the ingestion
-- statement already checks the batch's customers (an event of an unknown customer is rejected,
-- unknown_customer, before any of its rows is written). No function deletes a customer and the
-- job roles have no table access, so no row loses its customer afterwards. Citus: the same (the
-- tables stay distributed by customer_id, colocated with billing.customer).
ALTER TABLE billing.usage_dedup DROP CONSTRAINT usage_dedup_customer_fkey;
ALTER TABLE billing.usage_rollup DROP CONSTRAINT usage_rollup_customer_fkey;
ALTER TABLE billing.usage_unique DROP CONSTRAINT usage_unique_customer_fkey;
COMMENT ON TABLE billing.usage_dedup IS 'Each (customer, source, id) accepted: an event sent again is a duplicate. Purged with the retention. No foreign key: the ingestion checks the batch''s customers (0350).';
COMMENT ON TABLE billing.usage_rollup IS 'Per customer, meter and hour (bucket = the hour''s start): events counted, sum, max and latest value of the meter''s property. No foreign key: the ingestion checks the batch''s customers (0350).';
COMMENT ON TABLE billing.usage_unique IS 'The distinct values of a unique_count meter''s property per customer and hour. No foreign key: the ingestion checks the batch''s customers (0350).';

-- A live stream updates the current hour's rollup row of a customer and meter in every batch: room
-- on each new page keeps those updates HOT (no column of the update is indexed), so they write no
-- new index entry (as 0095 does for the outbox). Not measured apart from the rest of this work;
-- rows already written keep their pages.
ALTER TABLE billing.usage_rollup SET (fillfactor = 70);
