-- 0082_customer_keys_rest: the last customer-owned tables keyed by customer (docs/scaling.md), so
-- that `billing db migrate --citus` distributes every one of them by customer_id.
--
-- * outbox_event, webhook_delivery, webhook_attempt, gateway_webhook and audit_log gain customer_id:
--   an event's is its data's customerId (every event names its customer, except a webhook
--   endpoint's: customer 0, the installation's own rows), a delivery's and an attempt's their
--   event's, a gateway webhook's its payment attempt's (0 when the key names no attempt), an audit
--   row's the customer_id among its arguments (0 otherwise). Their primary keys start with it.
-- * Numbers and keys that were unique across customers become unique per customer, each keeping a
--   plain index for the lookups by itself alone:
--   - invoice and credit note numbers: each is taken once from its series' counter (the series
--     row is locked while a number is taken, _take_numbers), so the counter, not an index, is what
--     makes them unique across customers; the index says it per customer, which Citus enforces
--     inside a shard;
--   - a payment attempt's, a refund's event id (a random uuid) likewise;
--   - the callers' keys (refund request keys, subscription requests): the functions still look a
--     key up by itself first and refuse it for another customer (BL409), as before; what is no
--     longer refused is the one race of two *different* customers' first uses of one key at the
--     same instant (both are created). Within one customer nothing changes: the key is unique.
-- The same migration runs on a single PostgreSQL (the composite keys say no less about one
-- customer's rows than the old ones).

-- Events: the customer of the event's data.
ALTER TABLE billing.outbox_event ADD COLUMN customer_id bigint;
UPDATE billing.outbox_event SET customer_id = coalesce((payload -> 'data' ->> 'customerId')::bigint, 0);
ALTER TABLE billing.outbox_event ALTER COLUMN customer_id SET NOT NULL,
    DROP CONSTRAINT outbox_event_pkey, ADD CONSTRAINT outbox_event_pkey PRIMARY KEY (customer_id, id),
    DROP CONSTRAINT outbox_event_event_id_key, ADD CONSTRAINT outbox_event_event_id_key UNIQUE (customer_id, event_id);
CREATE INDEX outbox_event_id_idx ON billing.outbox_event (id);
CREATE INDEX outbox_event_event_id_idx ON billing.outbox_event (event_id);
COMMENT ON COLUMN billing.outbox_event.customer_id IS 'The customer the event is about (its data''s customerId; 0 for an event of no customer, such as a webhook endpoint''s): the distribution key on Citus.';

ALTER TABLE billing.webhook_delivery ADD COLUMN customer_id bigint;
UPDATE billing.webhook_delivery d SET customer_id = e.customer_id FROM billing.outbox_event e WHERE e.id = d.outbox_id;
UPDATE billing.webhook_delivery SET customer_id = 0 WHERE customer_id IS NULL;  -- its event purged
ALTER TABLE billing.webhook_delivery ALTER COLUMN customer_id SET NOT NULL,
    DROP CONSTRAINT webhook_delivery_pkey, ADD CONSTRAINT webhook_delivery_pkey PRIMARY KEY (customer_id, endpoint_id, outbox_id);
CREATE INDEX webhook_delivery_endpoint_outbox_idx ON billing.webhook_delivery (endpoint_id, outbox_id);
COMMENT ON COLUMN billing.webhook_delivery.customer_id IS 'Its event''s customer (the distribution key on Citus).';

ALTER TABLE billing.webhook_attempt ADD COLUMN customer_id bigint;
UPDATE billing.webhook_attempt a SET customer_id = d.customer_id
  FROM billing.webhook_delivery d WHERE d.endpoint_id = a.endpoint_id AND d.outbox_id = a.outbox_id;
UPDATE billing.webhook_attempt SET customer_id = 0 WHERE customer_id IS NULL;
ALTER TABLE billing.webhook_attempt ALTER COLUMN customer_id SET NOT NULL,
    DROP CONSTRAINT webhook_attempt_pkey, ADD CONSTRAINT webhook_attempt_pkey PRIMARY KEY (customer_id, endpoint_id, outbox_id, attempt);
COMMENT ON COLUMN billing.webhook_attempt.customer_id IS 'Its delivery''s customer (the distribution key on Citus).';

ALTER TABLE billing.gateway_webhook ADD COLUMN customer_id bigint;
UPDATE billing.gateway_webhook w SET customer_id = a.customer_id
  FROM billing.payment_attempt a WHERE a.idempotency_key = w.idempotency_key;
UPDATE billing.gateway_webhook SET customer_id = 0 WHERE customer_id IS NULL;
ALTER TABLE billing.gateway_webhook ALTER COLUMN customer_id SET NOT NULL,
    DROP CONSTRAINT gateway_webhook_pkey, ADD CONSTRAINT gateway_webhook_pkey PRIMARY KEY (customer_id, event_id);
CREATE INDEX gateway_webhook_event_idx ON billing.gateway_webhook (event_id);
COMMENT ON COLUMN billing.gateway_webhook.customer_id IS 'The customer of the payment attempt its key names (0 when it names none): the distribution key on Citus.';

ALTER TABLE billing.audit_log ADD COLUMN customer_id bigint;
UPDATE billing.audit_log SET customer_id = coalesce((args ->> 'customer_id')::bigint, 0);
ALTER TABLE billing.audit_log ALTER COLUMN customer_id SET NOT NULL, ALTER COLUMN customer_id SET DEFAULT 0,
    DROP CONSTRAINT audit_log_pkey, ADD CONSTRAINT audit_log_pkey PRIMARY KEY (customer_id, id);
CREATE INDEX audit_log_id_idx ON billing.audit_log (id);
COMMENT ON COLUMN billing.audit_log.customer_id IS 'The customer named by the call''s arguments (0 when none): the distribution key on Citus.';

-- Numbers and keys unique per customer (the lookups by the number or key alone keep an index).
DROP INDEX billing.invoice_number_key;
CREATE UNIQUE INDEX invoice_number_key ON billing.invoice (customer_id, number) WHERE number IS NOT NULL;
CREATE INDEX invoice_number_idx ON billing.invoice (number) WHERE number IS NOT NULL;

ALTER TABLE billing.credit_note DROP CONSTRAINT credit_note_number_key,
    ADD CONSTRAINT credit_note_number_key UNIQUE (customer_id, number);
CREATE INDEX credit_note_number_idx ON billing.credit_note (number);

ALTER TABLE billing.refund DROP CONSTRAINT refund_request_key_key,
    ADD CONSTRAINT refund_request_key_key UNIQUE (customer_id, request_key);
CREATE INDEX refund_request_key_idx ON billing.refund (request_key) WHERE request_key IS NOT NULL;

ALTER TABLE billing.subscription_request DROP CONSTRAINT subscription_request_pkey,
    ADD CONSTRAINT subscription_request_pkey PRIMARY KEY (customer_id, idempotency_key);
CREATE INDEX subscription_request_key_idx ON billing.subscription_request (idempotency_key);
