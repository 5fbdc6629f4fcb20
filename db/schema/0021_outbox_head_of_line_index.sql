-- 0021_outbox_head_of_line_index: the claim's head-of-line probe gets an index only it can use.
-- The probe ("is an earlier event of this aggregate still pending?") used to read
-- outbox_event_aggregate_pending_idx, whose predicate (status = 'PENDING') is also the predicate of
-- outbox_event_pending_idx (id). When the statistics say few rows are pending (an ANALYZE taken
-- while the backlog was empty, or right after retention deleted many rows) both look free and the
-- planner may probe with the other one: `id < candidate` over the whole pending backlog, per
-- candidate, O(batch^2) (measured in bench/retention: a 5,000-event claim 170 ms -> 5.5 s). With a
-- predicate that the candidate scan's `status = 'PENDING'` cannot prove equal to, the probe
-- (`status <> 'PUBLISHED' AND status <> 'DEAD'`) can only be served by this index; the few DEAD
-- rows it also holds are filtered out.
CREATE INDEX outbox_event_aggregate_unpublished_idx ON billing.outbox_event (aggregate_type, aggregate_id, id)
    WHERE status <> 'PUBLISHED';
DROP INDEX billing.outbox_event_aggregate_pending_idx;

-- The same for the head-of-line probe of webhook deliveries (claim_webhook_deliveries), whose
-- statuses are PENDING, DELIVERED and FAILED.
CREATE INDEX webhook_delivery_aggregate_open_idx
    ON billing.webhook_delivery (endpoint_id, aggregate_type, aggregate_id, outbox_id) WHERE status <> 'DELIVERED';
DROP INDEX billing.webhook_delivery_aggregate_pending_idx;
