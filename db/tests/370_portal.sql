-- 370_portal: the customer portal's SQL API (37_portal.sql, docs/customers.md "The portal"): a
-- session opened once per link, bound to its customer; another customer's subscription or invoice
-- is not found, never read or changed; cancel at period end / uncancel / plan change only as the
-- operator offers, each repeatable; no uncancel once the period end passed; audited as the customer.
BEGIN;
SELECT plan(31);
SET LOCAL ROLE billing_owner;

SELECT billing.upsert_plan('BASIC', 1000, 'EUR', 'MONTH', 1, '2026-01-01Z');
SELECT billing.upsert_plan('PRO', 3000, 'EUR', 'MONTH', 1, '2026-01-01Z');
SELECT billing.upsert_plan('TEAM', 9000, 'EUR', 'MONTH', 1, '2026-01-01Z');
SELECT billing.upsert_plan('USD', 1000, 'USD', 'MONTH', 1, '2026-01-01Z');
SELECT billing.upsert_customer(1);
SELECT billing.upsert_customer(2);
SELECT billing.create_subscription('p1', 1, 'BASIC', '2026-01-01Z');
SELECT billing.create_subscription('p2', 2, 'BASIC', '2026-01-01Z');
CREATE TEMP TABLE ids AS SELECT customer_id, id FROM billing.subscription WHERE customer_id IN (1, 2);
CREATE TEMP TABLE inv AS SELECT customer_id, id FROM billing.invoice WHERE customer_id IN (1, 2);

-- Links and sessions.
SELECT billing.create_portal_link(1, sha256('link-1'), '1 hour', '2026-01-01Z');
SELECT billing.create_portal_link(1, sha256('link-old'), '1 hour', '2026-01-01Z');
SELECT billing.create_portal_link(1, sha256('link-revoked'), '1 hour', '2026-01-01Z');
SELECT results_eq($$SELECT customer_id, locale, expires_at FROM billing.portal_open_session(1, sha256('link-1'), sha256('session-1'), '1 hour', '2026-01-01 00:10Z')$$,
                  $$VALUES (1::bigint, 'en', '2026-01-01 01:10Z'::timestamptz)$$, 'a link opens a session for its customer');
SELECT throws_ok($$SELECT * FROM billing.portal_open_session(1, sha256('link-1'), sha256('session-x'), '1 hour', '2026-01-01 00:11Z')$$,
                 'BL404', NULL, 'a used link is refused');
SELECT throws_ok($$SELECT * FROM billing.portal_open_session(2, sha256('link-old'), sha256('session-x'), '1 hour', '2026-01-01 00:11Z')$$,
                 'BL404', NULL, 'a link names its customer: another id matches nothing');
SELECT throws_ok($$SELECT * FROM billing.portal_open_session(1, sha256('link-old'), sha256('session-x'), '1 hour', '2026-01-01 01:00Z')$$,
                 'BL404', NULL, 'an expired link is refused');
SELECT billing.revoke_portal_links(1, '2026-01-01 00:20Z');
SELECT throws_ok($$SELECT * FROM billing.portal_open_session(1, sha256('link-revoked'), sha256('session-x'), '1 hour', '2026-01-01 00:21Z')$$,
                 'BL404', NULL, 'a revoked link is refused');
SELECT results_eq($$SELECT count(*) FROM billing.portal_session WHERE token_hash = sha256('session-x')$$, $$VALUES (0::bigint)$$, 'no session from a refused link');
SELECT billing.create_portal_link(1, sha256('link-2'), '1 hour', '2026-01-01Z');
SELECT throws_ok($$SELECT * FROM billing.portal_open_session(1, sha256('link-2'), sha256('s'), '13 hours', '2026-01-01 00:30Z')$$,
                 'BL422', NULL, 'a session lasts at most 12 hours');
SELECT results_eq($$SELECT used_at FROM billing.portal_link WHERE token_hash = sha256('link-2')$$, $$VALUES (NULL::timestamptz)$$, 'a refused opening leaves the link unused');

SELECT results_eq($$SELECT count(*) FROM billing.portal_session(1, sha256('session-1'), '2026-01-01 01:00Z')$$, $$VALUES (1::bigint)$$, 'the session is valid');
SELECT results_eq($$SELECT count(*) FROM billing.portal_session(2, sha256('session-1'), '2026-01-01 01:00Z')$$, $$VALUES (0::bigint)$$, 'for its own customer only');
SELECT results_eq($$SELECT count(*) FROM billing.portal_session(1, sha256('session-1'), '2026-01-01 01:10Z')$$, $$VALUES (0::bigint)$$, 'until its expiry');

-- Reads: one customer's rows.
-- (the documents read first into a temp table: on Citus a call of a function distributed by its
-- customer inside another function's arguments would run on the shard, without pgTAP's state)
CREATE TEMP TABLE home AS SELECT billing.portal_home(1, '2026-01-01 00:10Z') AS doc;
SELECT is(jsonb_array_length(doc -> 'subscriptions'), 1, 'the customer''s subscriptions') FROM home;
SELECT is((doc #>> '{subscriptions,0,id}')::bigint, (SELECT id FROM ids WHERE customer_id = 1),
          'its own, not the other customer''s') FROM home;
SELECT is(doc #> '{subscriptions,0,options}', '[]'::jsonb, 'no plan change offered by default') FROM home;
SELECT throws_ok(format('SELECT billing.portal_invoice_document(1, %s)', (SELECT id FROM inv WHERE customer_id = 2)),
                 'BL404', NULL, 'another customer''s invoice is not found');
SELECT throws_ok(format('SELECT billing.portal_cancel(1, %s, %L)', (SELECT id FROM ids WHERE customer_id = 2), '2026-01-02Z'),
                 'BL404', NULL, 'another customer''s subscription cannot be canceled');
SELECT throws_ok(format('SELECT billing.portal_change_plan(1, %s, %L, %L)', (SELECT id FROM ids WHERE customer_id = 2), 'PRO', '2026-01-02Z'),
                 'BL404', NULL, 'nor changed');
SELECT results_eq($$SELECT cancel_at_period_end FROM billing.subscription WHERE customer_id = 2$$, $$VALUES (false::boolean)$$, 'the other customer''s subscription is untouched');

-- The operator's options.
SELECT throws_ok($$SELECT billing.set_plan_change_options('BASIC', '[{"plan": "USD"}]')$$, 'BL422', NULL, 'no option in another currency');
SELECT is(billing.set_plan_change_options('BASIC', '[{"plan": "PRO", "when": "now"}, {"plan": "TEAM", "when": "period_end"}]'), 2, 'two options');
CREATE TEMP TABLE home2 AS SELECT billing.portal_home(1, '2026-01-01 00:10Z') AS doc;
SELECT is((SELECT array_agg(o ->> 'plan_code' ORDER BY o ->> 'plan_code') FROM home2, jsonb_array_elements(doc #> '{subscriptions,0,options}') o),
          ARRAY['PRO', 'TEAM'], 'offered on the portal');
SELECT throws_ok(format('SELECT billing.portal_change_plan(1, %s, %L, %L)', (SELECT id FROM ids WHERE customer_id = 1), 'USD', '2026-01-02Z'),
                 'BL422', NULL, 'a plan not offered is refused');

-- Actions, audited as the customer (the portal's proof).
SELECT set_config('billing.actor_proof', 'portal:1:' || encode(sha256('session-1'), 'hex'), true);
SELECT billing.portal_change_plan(1, (SELECT id FROM ids WHERE customer_id = 1), 'PRO', '2026-01-10Z');
SELECT results_eq($$SELECT p.code FROM billing.subscription s JOIN billing.plan p ON p.id = s.plan_id WHERE s.customer_id = 1$$, $$VALUES ('PRO'::text)$$, 'moved now');
SELECT results_eq($$SELECT count(*) FROM billing.invoice WHERE customer_id = 1 AND kind = 'PRORATION'$$, $$VALUES (1::bigint)$$, 'prorated: the difference is billed');
SELECT billing.portal_change_plan(1, (SELECT id FROM ids WHERE customer_id = 1), 'PRO', '2026-01-10 00:01Z');
SELECT results_eq($$SELECT count(*) FROM billing.invoice WHERE customer_id = 1 AND kind = 'PRORATION'$$, $$VALUES (1::bigint)$$, 'repeated: nothing billed twice');
SELECT results_eq($$SELECT actor FROM billing.audit_log WHERE function = 'change_plan' ORDER BY id DESC LIMIT 1$$, $$VALUES ('portal-session:1'::text)$$, 'audited as the customer''s session');
SELECT set_config('billing.actor_proof', '', true);

SELECT billing.portal_cancel(1, (SELECT id FROM ids WHERE customer_id = 1), '2026-01-11Z');
SELECT billing.portal_cancel(1, (SELECT id FROM ids WHERE customer_id = 1), '2026-01-11Z');
SELECT results_eq($$SELECT status || ' ' || cancel_at_period_end FROM billing.subscription WHERE customer_id = 1$$, $$VALUES ('ACTIVE true'::text)$$, 'canceled at period end only, twice the same');
SELECT billing.portal_uncancel(1, (SELECT id FROM ids WHERE customer_id = 1), '2026-01-12Z');
SELECT billing.portal_uncancel(1, (SELECT id FROM ids WHERE customer_id = 1), '2026-01-12Z');
SELECT results_eq($$SELECT cancel_at_period_end FROM billing.subscription WHERE customer_id = 1$$, $$VALUES (false::boolean)$$, 'uncanceled, twice the same');
SELECT billing.portal_cancel(1, (SELECT id FROM ids WHERE customer_id = 1), '2026-01-13Z');
SELECT throws_ok(format('SELECT billing.portal_uncancel(1, %s, %L)', (SELECT id FROM ids WHERE customer_id = 1), '2026-02-02Z'),
                 'BL422', NULL, 'past the period end it is too late to uncancel (nothing from nothing)');

-- review7: the options are read from the plan in force once what was due is settled. A change to TEAM
-- scheduled for the period end takes effect at it; before the renewal job runs, a change the operator
-- offers from BASIC (PRO, now) is not one it offers from TEAM (none).
SELECT billing.upsert_customer(3);
SELECT billing.create_subscription('p3', 3, 'BASIC', '2026-01-01Z');
INSERT INTO ids SELECT customer_id, id FROM billing.subscription WHERE customer_id = 3;
SELECT billing.portal_change_plan(3, (SELECT id FROM ids WHERE customer_id = 3), 'TEAM', '2026-01-05Z');
SELECT results_eq($$SELECT q.code FROM billing.subscription s JOIN billing.plan q ON q.id = s.scheduled_plan_id WHERE s.customer_id = 3$$,
                  $$VALUES ('TEAM'::text)$$, 'TEAM scheduled for the period end, as offered');
SELECT throws_ok(format('SELECT billing.portal_change_plan(3, %s, %L, %L)', (SELECT id FROM ids WHERE customer_id = 3),
                        'PRO', '2026-02-01 00:05Z'),
                 'BL422', NULL, 'past the period end the subscription is on TEAM: BASIC''s options are not TEAM''s');

SELECT * FROM finish();
ROLLBACK;
