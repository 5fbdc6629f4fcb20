-- 0360_mrr_aggregate (issue 32, the reports at scale): MRR kept by the engine's own writes instead of
-- recomputed from every service line on each call (report_mrr 29-75 s at 1,000,000 subscriptions).
-- Forward-only. The functions that keep and read these tables are in db/functions/76_mrr_aggregate.sql.
--
-- billing.mrr_segment: each subscription's MRR as a step function (one row per step with MRR > 0, the
--   last one may end at 'infinity'), and each customer's presence per currency (subscription_id 0:
--   the instants it has a subscription with MRR > 0), computed from the service ledger by the same
--   rules as billing._mrr_points (the full recomputation).
-- billing.mrr_delta: insert-only signed deltas of the per-currency totals (MRR, subscriptions and
--   customers with MRR > 0) at the instants the steps start and end (grain 'I'), and the same summed
--   per UTC day (grain 'D'): a total at t = the days before t's day + the instants of t's day up to t.
-- billing.mrr_movement: insert-only signed deltas of each UTC month's movements per currency (new,
--   expansion, contraction, churned: each subscription's MRR at the month's start against its end).
-- billing.mrr_dirty: the customers whose lines, invoices or subscriptions changed since their
--   segments were computed (one array per writing statement, insert-only by triggers, emptied by
--   billing._mrr_fold()); the readers recompute these few on the fly, so every figure is exact.
-- On Citus the triggers are dropped (db/citus/10_adapt.sql) and the readers recompute (as the
-- console's counters, 0310).
CREATE TABLE billing.mrr_segment (
    customer_id     bigint      NOT NULL,
    subscription_id bigint      NOT NULL,
    currency        text        NOT NULL,
    starts          timestamptz NOT NULL,
    ends            timestamptz NOT NULL,
    mrr             numeric     NOT NULL,
    CONSTRAINT mrr_segment_span CHECK (starts < ends)
);
CREATE INDEX mrr_segment_customer_idx ON billing.mrr_segment (customer_id);
COMMENT ON TABLE billing.mrr_segment IS 'Each subscription''s MRR as a step function (rows with MRR > 0) and, with subscription_id 0, each customer''s spans with some MRR per currency; computed from the service ledger (billing._mrr_segments_of), replaced per customer by billing._mrr_fold. Single node only.';
COMMENT ON COLUMN billing.mrr_segment.customer_id IS 'The customer.';
COMMENT ON COLUMN billing.mrr_segment.subscription_id IS 'The subscription; 0 for the customer''s presence row (counted once per customer and currency).';
COMMENT ON COLUMN billing.mrr_segment.currency IS 'The currency of the lines.';
COMMENT ON COLUMN billing.mrr_segment.starts IS 'Start of the step (inclusive).';
COMMENT ON COLUMN billing.mrr_segment.ends IS 'End of the step (exclusive); infinity when it lasts (a live subscription past its period''s end keeps its terms).';
COMMENT ON COLUMN billing.mrr_segment.mrr IS 'The subscription''s MRR over the step (exact numeric, as billing._mrr_points); 0 on a presence row.';

CREATE TABLE billing.mrr_delta (
    grain         char(1)     NOT NULL,
    currency      text        NOT NULL,
    at            timestamptz NOT NULL,
    mrr           numeric     NOT NULL,
    subscriptions bigint      NOT NULL,
    customers     bigint      NOT NULL,
    CONSTRAINT mrr_delta_grain_known CHECK (grain IN ('I', 'D'))
);
CREATE INDEX mrr_delta_at_idx ON billing.mrr_delta (grain, at);
COMMENT ON TABLE billing.mrr_delta IS 'Signed deltas of the MRR totals per currency (insert-only; rows of one key add up; billing._mrr_fold compacts them): grain I at the instant a step starts or ends, grain D the same per UTC day (at = the day''s start).';
COMMENT ON COLUMN billing.mrr_delta.grain IS 'I: at an instant; D: summed over the UTC day starting at at.';
COMMENT ON COLUMN billing.mrr_delta.currency IS 'The currency.';
COMMENT ON COLUMN billing.mrr_delta.at IS 'The instant (I) or the UTC day''s start (D) from which the delta counts.';
COMMENT ON COLUMN billing.mrr_delta.mrr IS 'Change of the MRR total.';
COMMENT ON COLUMN billing.mrr_delta.subscriptions IS 'Change of the count of subscriptions with MRR > 0.';
COMMENT ON COLUMN billing.mrr_delta.customers IS 'Change of the count of customers with MRR > 0.';

CREATE TABLE billing.mrr_movement (
    month       date    NOT NULL,
    currency    text    NOT NULL,
    new         numeric NOT NULL,
    expansion   numeric NOT NULL,
    contraction numeric NOT NULL,
    churned     numeric NOT NULL
);
CREATE INDEX mrr_movement_month_idx ON billing.mrr_movement (month);
COMMENT ON TABLE billing.mrr_movement IS 'Signed deltas of each UTC month''s MRR movements per currency (insert-only; rows of one key add up; billing._mrr_fold compacts them).';
COMMENT ON COLUMN billing.mrr_movement.month IS 'The UTC calendar month (its first day).';
COMMENT ON COLUMN billing.mrr_movement.currency IS 'The currency.';
COMMENT ON COLUMN billing.mrr_movement.new IS 'Change of the new MRR (0 at the month''s start, some at its end).';
COMMENT ON COLUMN billing.mrr_movement.expansion IS 'Change of the expansion MRR (up).';
COMMENT ON COLUMN billing.mrr_movement.contraction IS 'Change of the contraction MRR (down to some, positive).';
COMMENT ON COLUMN billing.mrr_movement.churned IS 'Change of the churned MRR (some to 0).';

CREATE TABLE billing.mrr_dirty (
    customer_ids bigint[] NOT NULL
);
COMMENT ON TABLE billing.mrr_dirty IS 'Customers whose MRR segments may be stale: one row per statement that wrote their lines, invoices or subscriptions (insert-only by the triggers of 76_mrr_aggregate.sql; a customer may be in several rows); emptied by billing._mrr_fold; readers recompute them on the fly.';
COMMENT ON COLUMN billing.mrr_dirty.customer_ids IS 'The customers the statement wrote for (one array: a renewal batch of 5,000 is one row, not 5,000).';

-- Every customer as it is now: the first fold computes them all; until then the readers recompute
-- (exact, as slow as before). Writers are held off until the migration's transaction ends, by which
-- time the function files have created the triggers: nothing written in between goes unmarked.
LOCK TABLE billing.subscription, billing.invoice, billing.service_line IN SHARE ROW EXCLUSIVE MODE;
INSERT INTO billing.mrr_dirty (customer_ids) SELECT array_agg(c.id) FROM billing.customer c HAVING count(*) > 0;
