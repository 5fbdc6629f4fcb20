-- 0830_coupon_per_customer (security8): a coupon may be redeemed at most N times by one customer
-- (max_redemptions_per_customer; NULL: no limit, as before). The count is the customer's
-- coupon_redemption rows of the code: a redemption replaced or ended still counts, so removing a
-- coupon and applying it again never resets it. Enforced by _redeem_coupon (apply_coupon,
-- create_subscription, create_subscriptions) and import_subscriptions under the customer's row lock
-- (db/functions/34_coupons.sql), which on Citus is the customer's own shard.
-- upsert_coupon gains the argument at its end: the old signature is dropped here (the function
-- files create the new one after this file), so a call with the old arguments finds one function.
ALTER TABLE billing.coupon
    ADD COLUMN max_redemptions_per_customer integer,
    ADD CONSTRAINT coupon_max_redemptions_per_customer_positive
        CHECK (max_redemptions_per_customer IS NULL OR max_redemptions_per_customer >= 1);
COMMENT ON COLUMN billing.coupon.max_redemptions_per_customer IS
    'At most this many redemptions by one customer (each of its subscriptions that redeemed it, replaced or ended ones too); NULL: no limit.';

DROP FUNCTION IF EXISTS billing.upsert_coupon(text, numeric, bigint, text, text, integer, integer, timestamptz, text[]);
