-- 0781_outbox_event_rare_type_index (house7): the console's events filtered by type alone
-- (console_events with p_type and no subject) walked outbox_event_id_idx newest first and tested each
-- event's type, so a type with few events (a refund, a failed payment) read the outbox far back, to
-- its start for a type that has none. This index of (event_type, id) lets it read each matching type's
-- newest events only: a page is at most the page size an event type (84_console_records.sql).
-- It leaves out the three types written by the volume paths (a signup's SubscriptionCreated, each
-- invoice's InvoiceCreated, each payment's InvoicePaid): the renewal, the signups and the charging
-- write no entry here (0220: each entry an event costs them), and those types are dense enough for the
-- walk of the id index to find a page soon. The predicate is written the same in the function (the
-- planner proves the index usable from it). Built under a SHARE lock (the outbox's writers wait for the
-- build, as for 0380's indexes).
CREATE INDEX outbox_event_rare_type_idx ON billing.outbox_event (event_type, id)
    WHERE event_type <> ALL (ARRAY['InvoiceCreated', 'InvoicePaid', 'SubscriptionCreated']);
