-- 0220_renewal_indexes: one index entry fewer per renewal (issue 32, bench/renewal).
--
-- * subscription_customer_id_key UNIQUE (customer_id, id) was added by 0061 as the target of the
--   customer-scoped foreign keys while the primary key was (id); since 0080 the primary key is
--   (customer_id, id) too, so the pair was indexed twice and every renewal (a non-HOT update of
--   the subscription: its period end is in the due index) wrote both. The four foreign keys that
--   used it are re-made on the primary key (NOT VALID here, validated by 0221 under a weaker lock).
-- (outbox_event_event_id_idx (event_id) stays, though the renewal writes one entry per event into it:
-- GET /v1/events/{id} looks an event up by its id alone, and a customer's webhook consumer holds only
-- that id.)
ALTER TABLE billing.coupon_redemption DROP CONSTRAINT coupon_redemption_subscription_fkey;
ALTER TABLE billing.credit_entry DROP CONSTRAINT credit_entry_subscription_fkey;
ALTER TABLE billing.credit_pending DROP CONSTRAINT credit_pending_subscription_fkey;
ALTER TABLE billing.subscription_request DROP CONSTRAINT subscription_request_subscription_fkey;
ALTER TABLE billing.subscription DROP CONSTRAINT subscription_customer_id_key;
ALTER TABLE billing.coupon_redemption ADD CONSTRAINT coupon_redemption_subscription_fkey
    FOREIGN KEY (customer_id, subscription_id) REFERENCES billing.subscription (customer_id, id) NOT VALID;
ALTER TABLE billing.credit_entry ADD CONSTRAINT credit_entry_subscription_fkey
    FOREIGN KEY (customer_id, subscription_id) REFERENCES billing.subscription (customer_id, id) NOT VALID;
ALTER TABLE billing.credit_pending ADD CONSTRAINT credit_pending_subscription_fkey
    FOREIGN KEY (customer_id, subscription_id) REFERENCES billing.subscription (customer_id, id) NOT VALID;
ALTER TABLE billing.subscription_request ADD CONSTRAINT subscription_request_subscription_fkey
    FOREIGN KEY (customer_id, subscription_id) REFERENCES billing.subscription (customer_id, id) NOT VALID;
