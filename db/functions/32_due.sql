-- 32_due: when a subscription is due for the renewal job: the one home of each "due" condition,
-- used by every path of create_due_invoices (the statement and its shard form, 40_renewal.sql; the
-- per-row and per-shard-group paths, 41_renewal_rows.sql; the lifecycle's path, 35_lifecycle.sql).
-- Each is an inlinable SQL expression over a subscription's columns (LANGUAGE sql, IMMUTABLE, no SET
-- clause, every name qualified): the planner substitutes it into the query, so the partial indexes
-- (subscription_due_idx, subscription_lifecycle_due_idx, subscription_resume_idx,
-- subscription_trial_notice_idx) still match and the renewal statement's generic plan is unchanged.
-- A subscription is TRIALING only with lifecycle_pending (CHECK subscription_trialing_has_trial), so
-- a renewal is due on exactly one of the two paths: _due_renewal = _due_statement OR _due_lifecycle.
-- Re-applied after every migration: CREATE OR REPLACE only.

CREATE OR REPLACE FUNCTION billing._due_statement(p_status text, p_period_end timestamptz, p_lifecycle_pending boolean,
                                                  p_now timestamptz)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT p_status IN ('ACTIVE', 'PAST_DUE') AND p_period_end <= p_now AND NOT p_lifecycle_pending
$$;
COMMENT ON FUNCTION billing._due_statement(text, timestamptz, boolean, timestamptz) IS
'Private: a renewal due at p_now that the renewal statement takes (ACTIVE or PAST_DUE, its period ended, no trial end, coupon or scheduled change pending: those take the lifecycle''s per-row path).
Returns true when due.';

CREATE OR REPLACE FUNCTION billing._due_lifecycle(p_status text, p_period_end timestamptz, p_lifecycle_pending boolean,
                                                  p_now timestamptz)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT p_lifecycle_pending AND p_status IN ('TRIALING', 'ACTIVE', 'PAST_DUE') AND p_period_end <= p_now
$$;
COMMENT ON FUNCTION billing._due_lifecycle(text, timestamptz, boolean, timestamptz) IS
'Private: a renewal due at p_now that needs the lifecycle''s per-row path (_renew_one): a trial ends, a coupon discounts, a scheduled change applies.
Returns true when due.';

CREATE OR REPLACE FUNCTION billing._due_renewal(p_status text, p_period_end timestamptz, p_now timestamptz)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT p_status IN ('TRIALING', 'ACTIVE', 'PAST_DUE') AND p_period_end <= p_now
$$;
COMMENT ON FUNCTION billing._due_renewal(text, timestamptz, timestamptz) IS
'Private: a renewal (or a cancellation at period end) due at p_now on either path: _due_statement or _due_lifecycle.
Returns true when due.';

CREATE OR REPLACE FUNCTION billing._due_resume(p_status text, p_resume_at timestamptz, p_now timestamptz)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT p_status = 'PAUSED' AND p_resume_at <= p_now
$$;
COMMENT ON FUNCTION billing._due_resume(text, timestamptz, timestamptz) IS
'Private: a paused subscription whose resume date has come by p_now.
Returns true when due.';

CREATE OR REPLACE FUNCTION billing._due_trial_notice(p_status text, p_trial_notice_at timestamptz, p_now timestamptz)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT p_status = 'TRIALING' AND p_trial_notice_at <= p_now
$$;
COMMENT ON FUNCTION billing._due_trial_notice(text, timestamptz, timestamptz) IS
'Private: a trial whose SubscriptionTrialWillEnd notice is due by p_now.
Returns true when due.';
