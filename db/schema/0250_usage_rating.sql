-- Usage-based billing, part 3 (issue 29): rating in arrears on the service ledger (docs/usage.md,
-- "Rating in arrears"). Forward-only.
-- * invoice.kind gains USAGE: the invoice that bills a subscription's ended period(s) of usage, made
--   by the rating step (billing.rate_usage) after the grace, with one service line per charge and
--   plan segment, and the adjustment lines of late events for earlier spans.
-- * service_line.item gains USAGE: a line of rated usage (meter_code, usage_quantity); quantity is 1
--   and unit_price the amount of the quantity rated (usage lines are never prorated or reversed).
-- * usage_cursor: per subscription, how far its usage is rated (rated_until) and the earliest
--   event time that arrived after a rating of its span (late_since: its spans are rated again).
-- * usage_rating: every rating of one (subscription, meter, plan segment): the quantity and amount
--   at that rating and what it billed (the increase over what was billed before); the sum of billed
--   is what the segment has been invoiced, whatever became of the invoice (never billed twice).
ALTER TABLE billing.invoice DROP CONSTRAINT invoice_kind_known;
ALTER TABLE billing.invoice ADD CONSTRAINT invoice_kind_known
    CHECK (kind IN ('INITIAL', 'RENEWAL', 'PRORATION', 'PLAN_CHANGE', 'USAGE'));

ALTER TABLE billing.service_line ADD COLUMN meter_code text;
ALTER TABLE billing.service_line ADD COLUMN usage_quantity numeric;
ALTER TABLE billing.service_line DROP CONSTRAINT service_line_item_known;
ALTER TABLE billing.service_line ADD CONSTRAINT service_line_item_known
    CHECK (item IN ('PLAN', 'USAGE') AND (item = 'USAGE') = (meter_code IS NOT NULL));
COMMENT ON COLUMN billing.service_line.item IS 'What is sold: PLAN (the plan times its seats) or USAGE (a meter''s rated usage of the span under plan_id''s charge).';
COMMENT ON COLUMN billing.service_line.meter_code IS 'USAGE lines: the meter rated.';
COMMENT ON COLUMN billing.service_line.usage_quantity IS 'USAGE lines: the quantity of the span rated (the meter''s value), whole or fractional.';

CREATE TABLE billing.usage_cursor (
    customer_id     bigint      NOT NULL,
    subscription_id bigint      NOT NULL,
    rated_until     timestamptz NOT NULL,
    late_since      timestamptz,
    finished        boolean     NOT NULL DEFAULT false,
    updated_at      timestamptz NOT NULL,
    CONSTRAINT usage_cursor_pkey PRIMARY KEY (customer_id, subscription_id),
    CONSTRAINT usage_cursor_subscription_fkey FOREIGN KEY (customer_id, subscription_id)
        REFERENCES billing.subscription (customer_id, id)
);
COMMENT ON TABLE billing.usage_cursor IS 'Per subscription with usage charges: how far its usage is rated, and whether late events arrived for a span already rated.';
COMMENT ON COLUMN billing.usage_cursor.customer_id IS 'The customer (distribution column on Citus).';
COMMENT ON COLUMN billing.usage_cursor.subscription_id IS 'The subscription rated.';
COMMENT ON COLUMN billing.usage_cursor.rated_until IS 'Usage before this instant is rated (a period boundary, or the end of a canceled subscription''s service).';
COMMENT ON COLUMN billing.usage_cursor.late_since IS 'The earliest time of an event accepted after its span was rated (NULL: none): the next rating rates the spans from it again and bills the difference.';
COMMENT ON COLUMN billing.usage_cursor.finished IS 'A canceled subscription rated to its end: only late events rate it again.';
COMMENT ON COLUMN billing.usage_cursor.updated_at IS 'Last change (p_now).';

CREATE TABLE billing.usage_rating (
    customer_id     bigint      NOT NULL,
    subscription_id bigint      NOT NULL,
    meter_code      text        NOT NULL,
    span_start      timestamptz NOT NULL,
    rated_at        timestamptz NOT NULL,
    span_end        timestamptz NOT NULL,
    plan_id         bigint      NOT NULL,
    quantity        numeric     NOT NULL,
    amount          bigint      NOT NULL,
    billed          bigint      NOT NULL,
    invoice_id      bigint,
    line_id         bigint,
    CONSTRAINT usage_rating_pkey PRIMARY KEY (customer_id, subscription_id, meter_code, span_start, rated_at),
    CONSTRAINT usage_rating_subscription_fkey FOREIGN KEY (customer_id, subscription_id)
        REFERENCES billing.subscription (customer_id, id),
    CONSTRAINT usage_rating_span CHECK (span_start < span_end),
    CONSTRAINT usage_rating_amounts CHECK (amount >= 0 AND billed >= 0),
    CONSTRAINT usage_rating_line CHECK ((billed > 0) = (line_id IS NOT NULL))
);
COMMENT ON TABLE billing.usage_rating IS 'Each rating of one meter over one plan segment [span_start, span_end) of a subscription: the quantity and amount then, and what it billed (the increase over the sum billed before).';
COMMENT ON COLUMN billing.usage_rating.customer_id IS 'The customer (distribution column on Citus).';
COMMENT ON COLUMN billing.usage_rating.subscription_id IS 'The subscription rated.';
COMMENT ON COLUMN billing.usage_rating.meter_code IS 'The meter rated.';
COMMENT ON COLUMN billing.usage_rating.span_start IS 'Start of the plan segment (a period, or its part before or after a plan change).';
COMMENT ON COLUMN billing.usage_rating.rated_at IS 'When (p_now of the rating).';
COMMENT ON COLUMN billing.usage_rating.span_end IS 'End of the plan segment, exclusive.';
COMMENT ON COLUMN billing.usage_rating.plan_id IS 'The plan whose charge rated it (the plan in force over the segment).';
COMMENT ON COLUMN billing.usage_rating.quantity IS 'The meter''s value over the segment at this rating.';
COMMENT ON COLUMN billing.usage_rating.amount IS 'The charge''s amount for that quantity (billing._usage_amount).';
COMMENT ON COLUMN billing.usage_rating.billed IS 'What this rating billed: amount less the sum billed before, never below 0.';
COMMENT ON COLUMN billing.usage_rating.invoice_id IS 'The USAGE invoice that billed it (NULL when nothing was billed).';
COMMENT ON COLUMN billing.usage_rating.line_id IS 'The service line that billed it (NULL when nothing was billed).';
REVOKE ALL ON billing.usage_cursor FROM PUBLIC;
REVOKE ALL ON billing.usage_rating FROM PUBLIC;

-- A USAGE invoice's document lines: one USAGE line per service line of rated usage.
ALTER TABLE billing.invoice_line DROP CONSTRAINT invoice_line_kind_known;
ALTER TABLE billing.invoice_line ADD CONSTRAINT invoice_line_kind_known
    CHECK (kind IN ('PLAN', 'PRORATION', 'USAGE', 'DISCOUNT', 'TAX', 'CREDIT'));
