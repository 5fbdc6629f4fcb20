-- 0007_gateway_keys_and_review: idempotency keys that cannot collide or outlive the gateway's memory.
-- * billing.installation (one row, created here): the key namespace, generated once, and the
--   gateway's key lifetime. Keys are <namespace>-inv-<invoice id>-try-<n>: a restored backup or a
--   staging copy sharing the gateway account takes a new namespace (billing.new_key_namespace).
-- * payment_attempt.key_expires_at: past it the gateway may have forgotten the key, so a retry
--   could charge twice; the key is never sent again, and an invoice whose fate is still unknown
--   then goes to REVIEW. NOT_FOUND: the gateway's lookup never saw the key (nothing charged).
-- * gateway_webhook.review_reason: a successful webhook whose amount, currency or customer
--   disagree with the attempt is kept, not applied.
CREATE TABLE billing.installation (
    singleton      boolean     NOT NULL DEFAULT true CONSTRAINT installation_pkey PRIMARY KEY,
    key_namespace  text        NOT NULL,
    key_lifetime   interval    NOT NULL DEFAULT interval '23 hours',
    lookup_margin  interval    NOT NULL DEFAULT interval '1 hour',
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT installation_one_row CHECK (singleton),
    CONSTRAINT installation_key_namespace_form CHECK (key_namespace ~ '^[a-z0-9]{4,32}$'),
    CONSTRAINT installation_key_lifetime_positive CHECK (key_lifetime > interval '0'),
    CONSTRAINT installation_lookup_margin_within_lifetime
        CHECK (lookup_margin > interval '0' AND lookup_margin < key_lifetime)
);
COMMENT ON TABLE billing.installation IS 'This installation''s settings: one row, created by the migration.';
COMMENT ON COLUMN billing.installation.singleton IS 'Always true: there is one row.';
COMMENT ON COLUMN billing.installation.key_namespace IS 'Prefix of every new idempotency key, random per installation (billing.new_key_namespace draws another).';
COMMENT ON COLUMN billing.installation.key_lifetime IS 'How long the gateway remembers an idempotency key (set it a little below the gateway''s own figure).';
COMMENT ON COLUMN billing.installation.lookup_margin IS 'Before a key expires, this long ahead, its status is asked of the gateway instead of sending it again.';
COMMENT ON COLUMN billing.installation.created_at IS 'When the row was created (wall clock).';
COMMENT ON COLUMN billing.installation.updated_at IS 'When it last changed (wall clock).';
INSERT INTO billing.installation (key_namespace)
VALUES (substr(replace(gen_random_uuid()::text, '-', ''), 1, 12));

ALTER TABLE billing.payment_attempt ADD COLUMN key_expires_at timestamptz;
UPDATE billing.payment_attempt SET key_expires_at = first_claimed_at + interval '23 hours';
ALTER TABLE billing.payment_attempt
    ALTER COLUMN key_expires_at SET NOT NULL,
    DROP CONSTRAINT payment_attempt_outcome_known,
    ADD CONSTRAINT payment_attempt_outcome_known
        CHECK (outcome IS NULL OR outcome IN ('SUCCEEDED', 'DECLINED', 'UNKNOWN', 'NOT_FOUND'));
COMMENT ON COLUMN billing.payment_attempt.key_expires_at IS 'first_claimed_at + the installation''s key_lifetime: the key is never sent after it.';
COMMENT ON COLUMN billing.payment_attempt.idempotency_key IS '<namespace>-inv-<invoice id>-try-<attempt_number>, sent to the gateway.';
COMMENT ON COLUMN billing.payment_attempt.attempt_number IS 'invoice.try_count when claimed.';
COMMENT ON COLUMN billing.payment_attempt.outcome IS 'Last recorded outcome; SUCCEEDED is final, DECLINED and NOT_FOUND are never replaced by UNKNOWN.';

ALTER TABLE billing.invoice ADD COLUMN review_reason text;
ALTER TABLE billing.invoice
    DROP CONSTRAINT invoice_status_known,
    ADD CONSTRAINT invoice_status_known CHECK (status IN ('OPEN', 'PAID', 'FAILED', 'VOID', 'REVIEW')),
    ADD CONSTRAINT invoice_review_has_reason CHECK ((status = 'REVIEW') <= (review_reason IS NOT NULL));
COMMENT ON COLUMN billing.invoice.status IS 'OPEN (to be charged), PAID, FAILED (dunning exhausted), VOID (canceled before any decline) or REVIEW (payment fate unknown past the key lifetime: a person decides).';
COMMENT ON COLUMN billing.invoice.review_reason IS 'Why it went to REVIEW (kept afterwards for the record).';

ALTER TABLE billing.gateway_webhook ADD COLUMN review_reason text;
COMMENT ON COLUMN billing.gateway_webhook.review_reason IS 'Set when the webhook was kept without being applied (amount, currency or customer disagree with the attempt).';

REVOKE ALL ON billing.installation FROM PUBLIC;
