-- 0221_renewal_indexes_validate: the foreign keys 0220 re-made on subscription's primary key,
-- validated (SHARE UPDATE EXCLUSIVE: writers go on while the rows are checked).
ALTER TABLE billing.coupon_redemption VALIDATE CONSTRAINT coupon_redemption_subscription_fkey;
ALTER TABLE billing.credit_entry VALIDATE CONSTRAINT credit_entry_subscription_fkey;
ALTER TABLE billing.credit_pending VALIDATE CONSTRAINT credit_pending_subscription_fkey;
ALTER TABLE billing.subscription_request VALIDATE CONSTRAINT subscription_request_subscription_fkey;
