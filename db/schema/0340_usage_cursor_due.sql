-- 0340_usage_cursor_due (issue 29, the rating at scale: docs/usage.md "Two rating workers and the
-- due index"). Forward-only.
--
-- The rating's due scan read every cursor and its subscription on each call (0.17 s of CPU a call
-- at 100,000 subscriptions). A cursor now says from when its subscription's rating can be due at
-- the earliest (due_at, before the grace): its current period's end when the subscription is rated
-- up to its current period (the renewal moves the period there), else the instant rated up to (due
-- now). What moves a period or ends a service otherwise (a plan change, a cancellation, dunning's
-- end, a new period started by a resume, a trial's end or a reactivation) brings due_at down to
-- its instant (billing._usage_touch). The scan reads the cursors whose due_at is behind the grace,
-- in due_at order, through this partial index; the finished cursors with late events through the
-- second one.
ALTER TABLE billing.usage_cursor ADD COLUMN due_at timestamptz;
COMMENT ON COLUMN billing.usage_cursor.due_at IS 'The earliest instant its rating can be due (before the grace): its current period''s end when it is rated up to its current period, else rated_until; NULL when finished. Lowered to the instant of a change that moves its period or ends its service.';
UPDATE billing.usage_cursor u
   SET due_at = CASE WHEN s.status <> 'CANCELED' AND u.rated_until >= s.current_period_start THEN s.current_period_end
                     ELSE u.rated_until END
  FROM billing.subscription s
 WHERE s.customer_id = u.customer_id AND s.id = u.subscription_id AND NOT u.finished;
CREATE INDEX usage_cursor_due_idx ON billing.usage_cursor (due_at) WHERE NOT finished;
CREATE INDEX usage_cursor_late_idx ON billing.usage_cursor (customer_id, subscription_id) WHERE finished AND late_since IS NOT NULL;
-- rate_usage gains p_follow (the subscriptions not followed yet are looked for once a round, not on
-- every call: that reads every subscription on a charged plan); 72_usage_rating makes it again.
DROP FUNCTION IF EXISTS billing.rate_usage(integer, timestamptz, interval);
-- _usage_start gains due_at (an OUT parameter: its row type changes); 72_usage_rating makes it again.
DROP FUNCTION IF EXISTS billing._usage_start(billing.subscription, timestamptz);
ALTER TABLE billing.usage_cursor ADD CONSTRAINT usage_cursor_due CHECK ((due_at IS NULL) = finished);
