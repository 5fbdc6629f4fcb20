-- 0061_lifecycle_customer_keys: a coupon redemption belongs to a customer, so its foreign key to
-- the subscription carries customer_id too (the engine is to be distributed by customer: a key
-- between two customer-owned tables must include the distribution column). It also makes the
-- database check that a redemption's customer is its subscription's. coupon is a reference table:
-- its key stays the code. Forward-only.
-- subscription gets the (customer_id, id) key such a foreign key needs (id alone stays its primary
-- key; the pair is unique because id is).
ALTER TABLE billing.subscription
    ADD CONSTRAINT subscription_customer_id_key UNIQUE (customer_id, id);
COMMENT ON CONSTRAINT subscription_customer_id_key ON billing.subscription IS
    'Target of the customer-scoped foreign keys of customer-owned tables (coupon_redemption).';

ALTER TABLE billing.coupon_redemption
    DROP CONSTRAINT coupon_redemption_subscription_fkey,
    ADD CONSTRAINT coupon_redemption_subscription_fkey FOREIGN KEY (customer_id, subscription_id)
        REFERENCES billing.subscription (customer_id, id);
