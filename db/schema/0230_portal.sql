-- 0230_portal (issue 30): the customer portal's sessions and the plan changes the operator offers.
-- billing.portal_session: a browser session opened by a single-use portal link, bound to one
-- customer (only the SHA-256 of its cookie token is kept). billing.plan_change_option: from a
-- plan, which plans a customer may move to on the portal, and when (now, prorated, or at the
-- period end). Nothing else may be chosen there.

CREATE TABLE billing.portal_session (
    customer_id bigint      NOT NULL,
    token_hash  bytea       NOT NULL,
    created_at  timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    closed_at   timestamptz,
    CONSTRAINT portal_session_pkey PRIMARY KEY (customer_id, token_hash),
    CONSTRAINT portal_session_customer_fkey FOREIGN KEY (customer_id) REFERENCES billing.customer (id),
    CONSTRAINT portal_session_hash_sha256 CHECK (octet_length(token_hash) = 32),
    CONSTRAINT portal_session_expires_after_creation CHECK (expires_at > created_at)
);
COMMENT ON TABLE billing.portal_session IS 'Customer portal sessions: opened by a portal link, bound to one customer, kept as the SHA-256 of the cookie token.';
COMMENT ON COLUMN billing.portal_session.customer_id IS 'The one customer the session may read and act on.';
COMMENT ON COLUMN billing.portal_session.token_hash IS 'SHA-256 of the cookie token (the token itself is never stored).';
COMMENT ON COLUMN billing.portal_session.created_at IS 'When the link was used and the session opened (p_now).';
COMMENT ON COLUMN billing.portal_session.expires_at IS 'When the session ends on its own.';
COMMENT ON COLUMN billing.portal_session.closed_at IS 'When the customer logged out (NULL: open).';

CREATE TABLE billing.plan_change_option (
    plan_id    bigint NOT NULL,
    to_plan_id bigint NOT NULL,
    change_at  text   NOT NULL,
    CONSTRAINT plan_change_option_pkey PRIMARY KEY (plan_id, to_plan_id),
    CONSTRAINT plan_change_option_plan_fkey FOREIGN KEY (plan_id) REFERENCES billing.plan (id),
    CONSTRAINT plan_change_option_to_plan_fkey FOREIGN KEY (to_plan_id) REFERENCES billing.plan (id),
    CONSTRAINT plan_change_option_not_itself CHECK (plan_id <> to_plan_id),
    CONSTRAINT plan_change_option_change_at_known CHECK (change_at IN ('now', 'period_end'))
);
COMMENT ON TABLE billing.plan_change_option IS 'The plan changes customers may make themselves on the portal (set by the operator; none by default).';
COMMENT ON COLUMN billing.plan_change_option.plan_id IS 'The plan a subscription is on.';
COMMENT ON COLUMN billing.plan_change_option.to_plan_id IS 'A plan it may move to.';
COMMENT ON COLUMN billing.plan_change_option.change_at IS 'now (prorated, at once) or period_end (from the next period).';
