-- 0043_refund_lookups: a refund whose fate is unknown is looked up at the provider by the worker
-- (docs/providers.md), as an UNKNOWN charge is, instead of waiting for a person.
-- * A refund near its key's end, or past it (review_reason KEY_EXPIRED), is claimed for a look-up
--   only (claim_refunds' lookup), never sent again with that key; in review it is looked up every
--   hour (next_attempt_at is set again: refund_review_is_unscheduled goes).
-- * NOT_FOUND (the provider never saw the key: nothing was refunded) gives the refund a new key,
--   <namespace>-ref-<id>-try-<n> (try_count), sent at once.
-- * A refund the provider reports failed after it had succeeded (Stripe's refund.updated /
--   refund.failed) becomes FAILED: the invoice's amount_refunded goes back down.

ALTER TABLE billing.refund DROP CONSTRAINT refund_review_is_unscheduled,
    DROP CONSTRAINT refund_outcome_known,
    ADD CONSTRAINT refund_outcome_known CHECK (outcome IS NULL OR outcome IN ('SUCCEEDED', 'FAILED', 'UNKNOWN', 'NOT_FOUND')),
    ADD COLUMN try_count integer NOT NULL DEFAULT 0,
    ADD CONSTRAINT refund_try_count_not_negative CHECK (try_count >= 0);
COMMENT ON COLUMN billing.refund.try_count IS 'How many keys were given up because the provider never saw them (NOT_FOUND): the key is <namespace>-ref-<id> at 0, then <namespace>-ref-<id>-try-<n>.';
COMMENT ON COLUMN billing.refund.next_attempt_at IS 'When a worker may claim it next (lease, retry, or, in review, the next look-up); NULL once final.';
COMMENT ON COLUMN billing.refund.review_reason IS 'KEY_EXPIRED: its fate stayed unknown past the key lifetime; never sent again with that key, looked up every hour until the provider answers (or a person settles it); NULL once settled.';
COMMENT ON COLUMN billing.refund.outcome IS 'Last outcome reported (SUCCEEDED, FAILED, UNKNOWN, or NOT_FOUND: the provider never saw the key).';

-- Refunds already set aside: looked up from now on.
UPDATE billing.refund SET next_attempt_at = now()
 WHERE status = 'REQUESTED' AND review_reason IS NOT NULL AND next_attempt_at IS NULL;
