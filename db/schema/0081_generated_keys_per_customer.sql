-- 0081_generated_keys_per_customer: the idempotency keys the engine makes itself are unique per
-- customer (docs/scaling.md). A payment attempt's key is `<namespace>-inv-<invoice id>-try-<n>`
-- and a refund's `<namespace>-ref-<refund id>`: each names a row of one customer, so unique per
-- customer says exactly what unique did, and Citus can enforce it inside the customer's shard.
-- The lookups by key alone (a gateway webhook, a provider's answer) keep a plain index.
-- refund.request_key, the caller's own key, stays unique across customers (docs/scaling.md says
-- how it is kept on Citus).

ALTER TABLE billing.payment_attempt DROP CONSTRAINT payment_attempt_idempotency_key_key,
    ADD CONSTRAINT payment_attempt_idempotency_key_key UNIQUE (customer_id, idempotency_key);
CREATE INDEX payment_attempt_idempotency_key_idx ON billing.payment_attempt (idempotency_key);

ALTER TABLE billing.refund DROP CONSTRAINT refund_idempotency_key_key,
    ADD CONSTRAINT refund_idempotency_key_key UNIQUE (customer_id, idempotency_key);
CREATE INDEX refund_idempotency_key_idx ON billing.refund (idempotency_key);
