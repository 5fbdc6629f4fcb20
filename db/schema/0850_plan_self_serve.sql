-- 0850_plan_self_serve (security9): a plan says whether customers may choose it themselves. A
-- customer session (Bearer cs_..., held by a browser) signs up only to a plan with self_serve
-- (POST /subscriptions and each row of POST /v1/subscriptions/batch answer 403 for another); server
-- keys, the console and the SQL API are unaffected, and the portal's plan changes keep following
-- set_plan_change_options. False for every plan, those of before this migration too: an operator
-- whose browsers sign up marks the plans it sells (upsert_plan's p_self_serve, POST /v1/plans
-- selfServe; docs/security.md, "Customer sessions").
-- upsert_plan gains the argument at its end: the old signature is dropped here (the function files
-- create the new one after this file), so a call with the old arguments finds one function.
ALTER TABLE billing.plan ADD COLUMN self_serve boolean NOT NULL DEFAULT false;
COMMENT ON COLUMN billing.plan.self_serve IS
    'Customers may sign up to it themselves (a customer session''s signup); false: only a server key, the console or SQL.';

DROP FUNCTION IF EXISTS billing.upsert_plan(text, bigint, text, text, integer, timestamptz, integer, text);
