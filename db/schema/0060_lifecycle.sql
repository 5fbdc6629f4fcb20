-- 0060_lifecycle: trials, coupons, pause and resume, seats, scheduled plan changes and calendar
-- billing (docs/lifecycle.md). Forward-only.
-- * subscription: statuses TRIALING and PAUSED; quantity (seats); the trial's notice; the pause;
--   a plan change scheduled for the period end; lifecycle_pending marks the rows whose next
--   renewal needs the per-row path (a trial ends, a coupon discounts, a scheduled change applies)
--   so that the set-based renewal statement stays as it is for everybody else.
-- * plan.billing_day: calendar billing (every period ends on that day of the month, local time).
-- * coupon and coupon_redemption; invoice.discount_amount / coupon_code / quantity: an invoice's
--   plan line is subtotal + discount_amount, its discount line -discount_amount (so a discount can
--   become its own invoice line).
-- * database_setting.trial_will_end_notice: how long before a trial's end SubscriptionTrialWillEnd.

ALTER TABLE billing.subscription
    ADD COLUMN quantity integer NOT NULL DEFAULT 1,
    ADD COLUMN trial_end timestamptz,
    ADD COLUMN trial_notice_at timestamptz,
    ADD COLUMN paused_at timestamptz,
    ADD COLUMN resume_at timestamptz,
    ADD COLUMN scheduled_plan_id bigint CONSTRAINT subscription_scheduled_plan_fkey REFERENCES billing.plan (id),
    ADD COLUMN lifecycle_pending boolean NOT NULL DEFAULT false,
    ADD COLUMN coupon_code text,
    DROP CONSTRAINT subscription_status_known,
    ADD CONSTRAINT subscription_status_known CHECK (status IN ('TRIALING', 'ACTIVE', 'PAST_DUE', 'PAUSED', 'CANCELED')),
    ADD CONSTRAINT subscription_quantity_range CHECK (quantity BETWEEN 1 AND 1000000),
    ADD CONSTRAINT subscription_trialing_has_trial CHECK (status <> 'TRIALING' OR (trial_end IS NOT NULL AND lifecycle_pending)),
    ADD CONSTRAINT subscription_paused_has_time CHECK (status <> 'PAUSED' OR paused_at IS NOT NULL);
COMMENT ON COLUMN billing.subscription.status IS 'TRIALING (free until trial_end), ACTIVE, PAST_DUE (in dunning, still served), PAUSED (nothing billed until resumed) or CANCELED (final).';
COMMENT ON COLUMN billing.subscription.quantity IS 'Seats: every period is billed price x quantity.';
COMMENT ON COLUMN billing.subscription.trial_end IS 'End of the free trial (the first billed period starts then); NULL: no trial.';
COMMENT ON COLUMN billing.subscription.trial_notice_at IS 'When SubscriptionTrialWillEnd is due; NULL once announced or without a trial.';
COMMENT ON COLUMN billing.subscription.paused_at IS 'When the pause began (set while PAUSED; cleared by resume, kept by a cancellation).';
COMMENT ON COLUMN billing.subscription.resume_at IS 'When a PAUSED subscription resumes by itself; NULL: only on request.';
COMMENT ON COLUMN billing.subscription.scheduled_plan_id IS 'A plan change scheduled for the period end (change_plan with p_when period_end); NULL: none.';
COMMENT ON COLUMN billing.subscription.coupon_code IS 'The active coupon (its coupon_redemption row has no ended_at); NULL: none.';
COMMENT ON COLUMN billing.subscription.lifecycle_pending IS 'True: the next renewal goes through the per-row path (trial end, coupon discount or scheduled change).';

-- The per-row renewal path's queue (usually a small part of the due rows).
CREATE INDEX subscription_lifecycle_due_idx ON billing.subscription (current_period_end)
    WHERE lifecycle_pending AND status IN ('TRIALING', 'ACTIVE', 'PAST_DUE');
CREATE INDEX subscription_resume_idx ON billing.subscription (resume_at) WHERE status = 'PAUSED' AND resume_at IS NOT NULL;
CREATE INDEX subscription_trial_notice_idx ON billing.subscription (trial_notice_at)
    WHERE trial_notice_at IS NOT NULL AND status = 'TRIALING';

-- create_subscription's options (trial, coupon, seats) are part of what an idempotency key stands for.
ALTER TABLE billing.subscription_request ADD COLUMN options jsonb NOT NULL DEFAULT '{}'::jsonb;
COMMENT ON COLUMN billing.subscription_request.options IS 'Trial days, coupon code and quantity of the first request with this key.';

ALTER TABLE billing.plan
    ADD COLUMN billing_day smallint,
    ADD CONSTRAINT plan_billing_day_range CHECK (billing_day IS NULL OR (billing_day BETWEEN 1 AND 31 AND billing_interval = 'MONTH'));
COMMENT ON COLUMN billing.plan.billing_day IS 'Calendar billing: periods end on this day of the month (clamped to the month''s last day) at midnight in the customer''s zone; the first period is prorated. NULL: periods count from the signup instant.';

CREATE TABLE billing.coupon (
    code              text        NOT NULL CONSTRAINT coupon_pkey PRIMARY KEY,
    percent_off       numeric(5, 2),
    amount_off        bigint,
    currency          char(3),
    duration          text        NOT NULL,
    duration_periods  integer,
    max_redemptions   integer,
    redeem_by         timestamptz,
    plan_codes        text[],
    times_redeemed    integer     NOT NULL DEFAULT 0,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT coupon_code_form CHECK (code ~ '^[A-Za-z0-9_-]{1,64}$'),
    CONSTRAINT coupon_one_kind_of_discount CHECK ((percent_off IS NULL) <> (amount_off IS NULL)),
    CONSTRAINT coupon_percent_range CHECK (percent_off IS NULL OR (percent_off > 0 AND percent_off <= 100)),
    CONSTRAINT coupon_amount_positive CHECK (amount_off IS NULL OR amount_off > 0),
    CONSTRAINT coupon_amount_has_currency CHECK ((amount_off IS NULL) = (currency IS NULL)),
    CONSTRAINT coupon_currency_iso4217 CHECK (currency IS NULL OR currency ~ '^[A-Z]{3}$'),
    CONSTRAINT coupon_duration_known CHECK (duration IN ('once', 'repeating', 'forever')),
    CONSTRAINT coupon_periods_iff_repeating CHECK ((duration = 'repeating') = (duration_periods IS NOT NULL)),
    CONSTRAINT coupon_periods_range CHECK (duration_periods IS NULL OR duration_periods BETWEEN 1 AND 120),
    CONSTRAINT coupon_max_redemptions_positive CHECK (max_redemptions IS NULL OR max_redemptions >= 1),
    CONSTRAINT coupon_redeemed_within_max CHECK (times_redeemed >= 0 AND (max_redemptions IS NULL OR times_redeemed <= max_redemptions))
);
COMMENT ON TABLE billing.coupon IS 'A discount customers may redeem on a subscription (upsert_coupon, apply_coupon).';
COMMENT ON COLUMN billing.coupon.code IS 'Business key the customer types (letters, digits, _ and -).';
COMMENT ON COLUMN billing.coupon.percent_off IS 'Percentage off each discounted invoice (rounded down to the minor unit); or amount_off.';
COMMENT ON COLUMN billing.coupon.amount_off IS 'Fixed amount off each discounted invoice, in currency''s minor unit (never below zero); or percent_off.';
COMMENT ON COLUMN billing.coupon.currency IS 'Currency of amount_off: only subscriptions billed in it can redeem it.';
COMMENT ON COLUMN billing.coupon.duration IS 'once (one period invoice), repeating (duration_periods period invoices) or forever.';
COMMENT ON COLUMN billing.coupon.duration_periods IS 'How many period invoices a repeating coupon discounts.';
COMMENT ON COLUMN billing.coupon.max_redemptions IS 'At most this many subscriptions may redeem it; NULL: no limit.';
COMMENT ON COLUMN billing.coupon.redeem_by IS 'Not redeemable from this instant; NULL: no end.';
COMMENT ON COLUMN billing.coupon.plan_codes IS 'Only subscriptions on these plans may redeem it; NULL: any plan.';
COMMENT ON COLUMN billing.coupon.times_redeemed IS 'Redemptions so far, counted once each under the coupon''s row lock.';
COMMENT ON COLUMN billing.coupon.created_at IS 'When the coupon was first stored (wall clock).';
COMMENT ON COLUMN billing.coupon.updated_at IS 'When it last changed (wall clock).';

CREATE TABLE billing.coupon_redemption (
    customer_id     bigint      NOT NULL CONSTRAINT coupon_redemption_customer_fkey REFERENCES billing.customer (id),
    subscription_id bigint      NOT NULL CONSTRAINT coupon_redemption_subscription_fkey REFERENCES billing.subscription (id),
    coupon_code     text        NOT NULL CONSTRAINT coupon_redemption_coupon_fkey REFERENCES billing.coupon (code),
    periods_left    integer,
    redeemed_at     timestamptz NOT NULL,
    ended_at        timestamptz,
    CONSTRAINT coupon_redemption_pkey PRIMARY KEY (customer_id, subscription_id, coupon_code),
    CONSTRAINT coupon_redemption_periods_left_not_negative CHECK (periods_left IS NULL OR periods_left >= 0)
);
CREATE UNIQUE INDEX coupon_redemption_one_active_idx ON billing.coupon_redemption (customer_id, subscription_id)
    WHERE ended_at IS NULL;
COMMENT ON TABLE billing.coupon_redemption IS 'A coupon redeemed on a subscription: at most one active per subscription, a coupon at most once per subscription.';
COMMENT ON COLUMN billing.coupon_redemption.customer_id IS 'The subscription''s customer.';
COMMENT ON COLUMN billing.coupon_redemption.subscription_id IS 'The subscription discounted.';
COMMENT ON COLUMN billing.coupon_redemption.coupon_code IS 'The coupon.';
COMMENT ON COLUMN billing.coupon_redemption.periods_left IS 'Period invoices still to discount; NULL: forever.';
COMMENT ON COLUMN billing.coupon_redemption.redeemed_at IS 'Simulated-clock time of apply_coupon (or signup).';
COMMENT ON COLUMN billing.coupon_redemption.ended_at IS 'When it stopped applying (used up, replaced by another coupon); NULL while active.';

ALTER TABLE billing.invoice
    ADD COLUMN quantity integer NOT NULL DEFAULT 1,
    ADD COLUMN discount_amount bigint NOT NULL DEFAULT 0,
    ADD COLUMN coupon_code text,
    ADD COLUMN from_quantity integer,
    ADD CONSTRAINT invoice_quantity_positive CHECK (quantity >= 1),
    ADD CONSTRAINT invoice_discount_not_negative CHECK (discount_amount >= 0),
    ADD CONSTRAINT invoice_discount_has_coupon CHECK ((discount_amount > 0) <= (coupon_code IS NOT NULL));
COMMENT ON COLUMN billing.invoice.quantity IS 'Seats billed (the plan line is plan_price x quantity, prorated for a first calendar period).';
COMMENT ON COLUMN billing.invoice.discount_amount IS 'Coupon discount: the plan line is subtotal + discount_amount, the discount line -discount_amount; subtotal is after it.';
COMMENT ON COLUMN billing.invoice.coupon_code IS 'The coupon that gave discount_amount.';
COMMENT ON COLUMN billing.invoice.from_quantity IS 'PRORATION: the seats it replaced (restored with from_plan_id if the invoice fails).';
COMMENT ON COLUMN billing.invoice.subtotal IS 'Price after any coupon discount and before customer credit, smallest currency unit.';

ALTER TABLE billing.database_setting
    ADD COLUMN trial_will_end_notice interval NOT NULL DEFAULT interval '3 days',
    ADD CONSTRAINT database_setting_trial_notice_range
        CHECK (trial_will_end_notice >= interval '0' AND trial_will_end_notice <= interval '30 days');
COMMENT ON COLUMN billing.database_setting.trial_will_end_notice IS 'SubscriptionTrialWillEnd is announced this long before a trial ends (default 3 days).';

REVOKE ALL ON billing.coupon, billing.coupon_redemption FROM PUBLIC;
