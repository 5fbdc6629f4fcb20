-- 0310_overview_count (issue 32, the operator's reads at scale): the counts of the console's overview
-- kept by the engine's own writes instead of counted from every subscription and invoice on each
-- call (8.6 s at 1,000,000 subscriptions). Forward-only.
--
-- billing.overview_count holds signed deltas, insert-only: the triggers of db/functions/70_stats.sql
-- add +n for the rows a statement inserts and -1/+1 for a row whose counted columns change, so two
-- writers never wait on one counter row (the renewal's parallel batches, the charging workers). The
-- reader sums them per key; billing._overview_count_fold() replaces the rows of a key by their sum
-- now and then (the overview does it). A subscription is counted by (status, cancel_at_period_end),
-- an invoice by (status, attempt_count > 0, kind, the UTC day of due_at): what the overview shows.
-- On Citus the triggers are dropped (db/citus/10_adapt.sql) and the overview counts the rows.
CREATE TABLE billing.overview_count (
    subject text    NOT NULL,
    status  text    NOT NULL,
    flag    boolean NOT NULL,
    kind    text,
    due_day date,
    n       bigint  NOT NULL,
    CONSTRAINT overview_count_subject_known CHECK (subject IN ('subscription', 'invoice')),
    CONSTRAINT overview_count_invoice_keyed CHECK ((subject = 'invoice') = (kind IS NOT NULL AND due_day IS NOT NULL))
);
COMMENT ON TABLE billing.overview_count IS 'The console overview''s counts as signed deltas (insert-only; several rows of one key add up; billing._overview_count_fold sums them): subscriptions by (status, cancel_at_period_end), invoices by (status, attempt_count > 0, kind, UTC day of due_at). Kept by triggers on subscription and invoice (70_stats.sql); not kept on Citus.';
COMMENT ON COLUMN billing.overview_count.subject IS 'subscription or invoice.';
COMMENT ON COLUMN billing.overview_count.status IS 'The counted rows'' status.';
COMMENT ON COLUMN billing.overview_count.flag IS 'A subscription: cancel_at_period_end. An invoice: attempt_count > 0 (declined at least once).';
COMMENT ON COLUMN billing.overview_count.kind IS 'An invoice''s kind (INITIAL, RENEWAL, ...); NULL for a subscription.';
COMMENT ON COLUMN billing.overview_count.due_day IS 'The UTC day of an invoice''s due_at; NULL for a subscription.';
COMMENT ON COLUMN billing.overview_count.n IS 'How many rows this delta adds (negative: removes).';

-- The counts as they are now. Writers are held off until the migration's transaction ends, by which
-- time the function files have created the triggers: nothing written in between goes uncounted.
LOCK TABLE billing.subscription, billing.invoice IN SHARE ROW EXCLUSIVE MODE;
INSERT INTO billing.overview_count (subject, status, flag, n)
SELECT 'subscription', s.status, s.cancel_at_period_end, count(*)
  FROM billing.subscription s GROUP BY s.status, s.cancel_at_period_end;
INSERT INTO billing.overview_count (subject, status, flag, kind, due_day, n)
SELECT 'invoice', i.status, i.attempt_count > 0, i.kind, (i.due_at AT TIME ZONE 'UTC')::date, count(*)
  FROM billing.invoice i GROUP BY 2, 3, 4, 5;
