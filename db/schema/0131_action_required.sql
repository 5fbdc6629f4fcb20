-- 0131_action_required: a card that needs the customer's authentication (3-D Secure, Stripe's
-- authentication_required / requires_action) is not a decline (docs/customers.md). The invoice
-- stays OPEN, its dunning waits the installation's action window (invoice.action_required_until;
-- once per invoice), and a success later reported for that attempt pays it. One subcommand per
-- ALTER TABLE: Citus refuses several at once on a distributed or reference table.

ALTER TABLE billing.invoice ADD COLUMN action_required_until timestamptz;
COMMENT ON COLUMN billing.invoice.action_required_until IS 'Set when a charge needed the customer''s authentication: until then the invoice is ACTION_REQUIRED (OPEN, its next try at that time); kept afterwards (once per invoice).';

ALTER TABLE billing.installation ADD COLUMN action_window interval NOT NULL DEFAULT interval '72 hours';
ALTER TABLE billing.installation
    ADD CONSTRAINT installation_action_window_bounded CHECK (action_window >= interval '1 hour' AND action_window <= interval '30 days');
COMMENT ON COLUMN billing.installation.action_window IS 'How long dunning waits for a customer to authenticate a payment before it tries again (set_action_window).';
