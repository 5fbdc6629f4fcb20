-- 0290_catalog_archive: archiving plans and coupons (issue 28). An archived plan takes no new
-- subscription and no plan change to it; an archived coupon no new redemption. What already uses
-- them continues and renews (billing.archive_plan / archive_coupon, docs/sql-api.md). The lists of
-- /v1 filter on it: each catalog keeps a small partial index per side, in the lists' key order.
-- Forward-only.

ALTER TABLE billing.plan ADD COLUMN archived_at timestamptz;
COMMENT ON COLUMN billing.plan.archived_at IS 'When the plan was archived (archive_plan): no new subscription or plan change to it; the subscriptions on it continue and renew. NULL: offered.';
ALTER TABLE billing.coupon ADD COLUMN archived_at timestamptz;
COMMENT ON COLUMN billing.coupon.archived_at IS 'When the coupon was archived (archive_coupon): no new redemption; the redemptions made continue. NULL: redeemable.';

CREATE INDEX plan_offered_id_idx ON billing.plan (id) WHERE archived_at IS NULL;
CREATE INDEX plan_archived_id_idx ON billing.plan (id) WHERE archived_at IS NOT NULL;
CREATE INDEX coupon_offered_code_idx ON billing.coupon (code) WHERE archived_at IS NULL;
CREATE INDEX coupon_archived_code_idx ON billing.coupon (code) WHERE archived_at IS NOT NULL;
