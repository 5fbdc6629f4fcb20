-- 0005_money_terms_and_credit: what each period is invoiced at, and credit tied to its source.
-- * plan_price keeps every price a plan has had and when it took effect, so a late renewal of a
--   past period is priced as it was then; plan.price_effective_from lets the renewal statement
--   skip the lookup in the usual case (the period starts after the current price took effect).
-- * subscription.period_price is the price the current period is billed at (what proration
--   credits or charges against, never the plan's current price).
-- * invoice records its terms: plan, plan price, interval; a PRORATION invoice also the terms it
--   replaced (from_plan_id, from_price), so a failed upgrade can be reverted. PLAN_CHANGE is the
--   invoice of a new period started by a change of billing interval.
-- * try_count numbers the idempotency keys of an invoice (a key found unused at the gateway is
--   replaced by a new one without counting a decline); attempt_count still counts declines.
-- * credit_pending holds credit granted by a plan change while an invoice it depends on is
--   unpaid: released to the balance when they are all PAID, reversed when one is VOID or FAILED.

CREATE TABLE billing.plan_price (
    plan_id        bigint      NOT NULL CONSTRAINT plan_price_plan_fkey REFERENCES billing.plan (id),
    effective_from timestamptz NOT NULL,
    price_amount   bigint      NOT NULL,
    CONSTRAINT plan_price_pkey PRIMARY KEY (plan_id, effective_from),
    CONSTRAINT plan_price_not_negative CHECK (price_amount >= 0)
);
COMMENT ON TABLE billing.plan_price IS 'Price history of each plan: a period is priced at the price in force when it starts.';
COMMENT ON COLUMN billing.plan_price.plan_id IS 'The plan.';
COMMENT ON COLUMN billing.plan_price.effective_from IS 'Periods starting at or after this instant use this price (-infinity for the first price).';
COMMENT ON COLUMN billing.plan_price.price_amount IS 'Price per period in the currency''s smallest unit.';
INSERT INTO billing.plan_price (plan_id, effective_from, price_amount)
SELECT id, '-infinity', price_amount FROM billing.plan;

ALTER TABLE billing.plan ADD COLUMN price_effective_from timestamptz;
COMMENT ON COLUMN billing.plan.price_effective_from IS 'When price_amount took effect; NULL: it is the plan''s first price (periods starting earlier look up billing.plan_price).';

ALTER TABLE billing.subscription ADD COLUMN period_price bigint;
UPDATE billing.subscription s SET period_price = p.price_amount FROM billing.plan p WHERE p.id = s.plan_id;
ALTER TABLE billing.subscription ALTER COLUMN period_price SET NOT NULL,
    ADD CONSTRAINT subscription_period_price_not_negative CHECK (period_price >= 0);
COMMENT ON COLUMN billing.subscription.period_price IS 'Price the current period is billed at (the invoiced terms proration works from).';

ALTER TABLE billing.invoice
    ADD COLUMN plan_id bigint CONSTRAINT invoice_plan_fkey REFERENCES billing.plan (id),
    ADD COLUMN plan_price bigint,
    ADD COLUMN billing_interval text,
    ADD COLUMN interval_count integer,
    ADD COLUMN from_plan_id bigint CONSTRAINT invoice_from_plan_fkey REFERENCES billing.plan (id),
    ADD COLUMN from_price bigint,
    ADD COLUMN try_count integer NOT NULL DEFAULT 0;
UPDATE billing.invoice i
   SET plan_id = s.plan_id, plan_price = p.price_amount, billing_interval = p.billing_interval,
       interval_count = p.interval_count, try_count = i.attempt_count
  FROM billing.subscription s JOIN billing.plan p ON p.id = s.plan_id
 WHERE s.id = i.subscription_id;
ALTER TABLE billing.invoice
    ALTER COLUMN plan_id SET NOT NULL,
    ALTER COLUMN plan_price SET NOT NULL,
    ALTER COLUMN billing_interval SET NOT NULL,
    ALTER COLUMN interval_count SET NOT NULL,
    DROP CONSTRAINT invoice_kind_known,
    ADD CONSTRAINT invoice_kind_known CHECK (kind IN ('INITIAL', 'RENEWAL', 'PRORATION', 'PLAN_CHANGE')),
    ADD CONSTRAINT invoice_try_count_covers_declines CHECK (try_count >= attempt_count),
    ADD CONSTRAINT invoice_replaced_terms_both_or_none CHECK ((from_plan_id IS NULL) = (from_price IS NULL));
COMMENT ON COLUMN billing.invoice.kind IS 'INITIAL (signup), RENEWAL (a later period), PRORATION (change within a period) or PLAN_CHANGE (new period started by a change of interval).';
COMMENT ON COLUMN billing.invoice.plan_id IS 'The plan this invoice bills (for PRORATION: the new plan).';
COMMENT ON COLUMN billing.invoice.plan_price IS 'That plan''s price per period in force for this period (the terms snapshot).';
COMMENT ON COLUMN billing.invoice.billing_interval IS 'That plan''s period unit when invoiced.';
COMMENT ON COLUMN billing.invoice.interval_count IS 'That plan''s units per period when invoiced.';
COMMENT ON COLUMN billing.invoice.from_plan_id IS 'PRORATION: the plan it replaced (restored if the invoice fails).';
COMMENT ON COLUMN billing.invoice.from_price IS 'PRORATION: the period price it replaced.';
COMMENT ON COLUMN billing.invoice.try_count IS 'Idempotency keys used so far: the next key is <namespace>-inv-<id>-try-<try_count>.';
COMMENT ON COLUMN billing.invoice.attempt_count IS 'Declined tries so far (the dunning step).';

CREATE TABLE billing.credit_pending (
    customer_id     bigint      NOT NULL CONSTRAINT credit_pending_customer_fkey REFERENCES billing.customer (id),
    id              bigint GENERATED BY DEFAULT AS IDENTITY,
    currency        char(3)     NOT NULL,
    amount          bigint      NOT NULL,
    subscription_id bigint      NOT NULL CONSTRAINT credit_pending_subscription_fkey REFERENCES billing.subscription (id),
    depends_on      bigint[]    NOT NULL,
    status          text        NOT NULL DEFAULT 'PENDING',
    created_at      timestamptz NOT NULL,
    settled_at      timestamptz,
    CONSTRAINT credit_pending_pkey PRIMARY KEY (customer_id, id),
    CONSTRAINT credit_pending_amount_positive CHECK (amount > 0),
    CONSTRAINT credit_pending_currency_iso4217 CHECK (currency ~ '^[A-Z]{3}$'),
    CONSTRAINT credit_pending_depends_on_something CHECK (cardinality(depends_on) >= 1),
    CONSTRAINT credit_pending_status_known CHECK (status IN ('PENDING', 'RELEASED', 'REVERSED')),
    CONSTRAINT credit_pending_settled_has_time CHECK ((status = 'PENDING') = (settled_at IS NULL))
);
CREATE INDEX credit_pending_open_idx ON billing.credit_pending (customer_id) WHERE status = 'PENDING';
COMMENT ON TABLE billing.credit_pending IS 'Credit granted by a plan change while invoices backing it are unpaid; it reaches credit_balance only once they are all PAID.';
COMMENT ON COLUMN billing.credit_pending.customer_id IS 'Whose credit.';
COMMENT ON COLUMN billing.credit_pending.id IS 'Surrogate key within the customer.';
COMMENT ON COLUMN billing.credit_pending.currency IS 'Currency of the credit.';
COMMENT ON COLUMN billing.credit_pending.amount IS 'Credit to release, smallest currency unit.';
COMMENT ON COLUMN billing.credit_pending.subscription_id IS 'The subscription whose plan change granted it.';
COMMENT ON COLUMN billing.credit_pending.depends_on IS 'Invoices (of that subscription) that were unpaid when it was granted: all must be PAID.';
COMMENT ON COLUMN billing.credit_pending.status IS 'PENDING, RELEASED (a PRORATION credit_entry was written) or REVERSED (a source was voided or failed).';
COMMENT ON COLUMN billing.credit_pending.created_at IS 'Simulated-clock time of the grant.';
COMMENT ON COLUMN billing.credit_pending.settled_at IS 'When it was released or reversed.';

REVOKE ALL ON billing.plan_price, billing.credit_pending FROM PUBLIC;
