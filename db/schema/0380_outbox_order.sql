-- 0380_outbox_order: one order for the outbox, on one PostgreSQL and on Citus alike (issue 25).
-- The order of events is billing._outbox_order(aggregate_seq, id) = coalesce(aggregate_seq, id),
-- ties by id (64_outbox.sql, docs/events.md "Order"): on one PostgreSQL aggregate_seq is NULL and
-- the order is the id's; on Citus every event written there has a key (migration 0090) and the
-- events written before it come first. Every claim (relay, relay per shard group, webhook
-- deliveries), the head-of-line probes and the replay walk these indexes in that order; they replace
-- the id-ordered ones one for one (same count of indexes per event on one PostgreSQL, one fewer on
-- Citus), so no plan falls back to a sort. The expressions are written out here (migrations run
-- before the function files) and are what billing._outbox_order inlines to: the pgTAP 642 checks
-- that the planner matches them.

-- The relay's candidates: PENDING events in order.
DROP INDEX billing.outbox_event_pending_idx;
CREATE INDEX outbox_event_pending_idx ON billing.outbox_event ((coalesce(aggregate_seq, id)), id)
    WHERE status = 'PENDING';
-- (the Citus-only partial indexes of the keyed and unkeyed PENDING events: one index now)
DROP INDEX billing.outbox_event_pending_seq_idx;

-- The head-of-line probe: an earlier unpublished event of the aggregate, earlier in the order.
DROP INDEX billing.outbox_event_aggregate_unpublished_idx;
CREATE INDEX outbox_event_aggregate_unpublished_idx
    ON billing.outbox_event (aggregate_type, aggregate_id, (coalesce(aggregate_seq, id)))
    WHERE status <> 'PUBLISHED';

-- The replay (outbox_events_from) walks the published events without a key by outbox_event_id_idx
-- (id) and the keyed ones (Citus) by this index, and merges the two walks: no entry on one
-- PostgreSQL; on Citus an entry when an event is published.
CREATE INDEX outbox_event_keyed_idx ON billing.outbox_event (aggregate_seq, id)
    WHERE aggregate_seq IS NOT NULL AND status = 'PUBLISHED';

-- Webhook deliveries: the same order by the event's key (webhook_delivery.aggregate_seq).
DROP INDEX billing.webhook_delivery_pending_idx;
CREATE INDEX webhook_delivery_pending_idx
    ON billing.webhook_delivery (endpoint_id, (coalesce(aggregate_seq, outbox_id)), outbox_id) WHERE status = 'PENDING';
DROP INDEX billing.webhook_delivery_aggregate_open_idx;
CREATE INDEX webhook_delivery_aggregate_open_idx
    ON billing.webhook_delivery (endpoint_id, aggregate_type, aggregate_id, (coalesce(aggregate_seq, outbox_id)))
    WHERE status <> 'DELIVERED';
