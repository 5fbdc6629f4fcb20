-- 0006_dunning_jitter_check: the jitter is drawn in whole seconds, so a max_jitter between 0 and
-- 1 s made the modulo divide by zero (every DECLINED then failed and its invoice was re-claimed
-- forever). The CHECK now accepts only what _dunning_next_attempt supports: 0 (no jitter) or
-- 1 s to 1 day. A step that had a sub-second jitter keeps its delay and loses the jitter.
UPDATE billing.dunning_step SET max_jitter = interval '0'
 WHERE max_jitter > interval '0' AND max_jitter < interval '1 second';
ALTER TABLE billing.dunning_step
    DROP CONSTRAINT dunning_step_jitter_bounded,
    ADD CONSTRAINT dunning_step_jitter_bounded
        CHECK (max_jitter = interval '0' OR (max_jitter >= interval '1 second' AND max_jitter <= interval '1 day'));
COMMENT ON COLUMN billing.dunning_step.max_jitter IS 'Deterministic jitter in whole seconds in [0, max_jitter) added to spread retries: 0, or 1 s to 1 day.';
