-- 0090_outbox_aggregate_seq: an order key per aggregate for the outbox on Citus (docs/scaling.md,
-- "Events, webhooks and reads on Citus"). On one PostgreSQL an event's id follows commit order within
-- its aggregate (its events are written under the aggregate's row lock, ids from one sequence). On
-- Citus each node takes ids from its own range of the sequence (the coordinator from 1, worker group
-- g from g << 48), and an aggregate's events are written by whichever node runs the call (a
-- distributed function on the worker holding the customer, a call by subscription id on the
-- coordinator): an event written on the coordinator after one written on a worker gets the smaller
-- id. So on Citus a row trigger (60_outbox.sql) sets aggregate_seq, a time in microseconds raised
-- above every unpublished event of the aggregate, and the relay's claims take events in
-- aggregate_seq order (the oldest first, whatever node wrote them) and an aggregate's in that
-- order. NULL on a single PostgreSQL (no trigger there): the order is the id's, and nothing changes
-- on its paths (the index is partial on NOT NULL: no entry there).
ALTER TABLE billing.outbox_event ADD COLUMN aggregate_seq bigint;
COMMENT ON COLUMN billing.outbox_event.aggregate_seq IS
    'On Citus: the order of the event (microseconds, raised above every unpublished event of its aggregate when written); NULL on a single PostgreSQL, where the id is the order.';
CREATE INDEX outbox_event_pending_seq_idx ON billing.outbox_event (aggregate_seq)
    WHERE status = 'PENDING' AND aggregate_seq IS NOT NULL;
ALTER TABLE billing.webhook_delivery ADD COLUMN aggregate_seq bigint;
COMMENT ON COLUMN billing.webhook_delivery.aggregate_seq IS
    'The event''s outbox_event.aggregate_seq (Citus); NULL on a single PostgreSQL, where outbox_id is the order.';
