-- Security: the clock guard and the simulation mark, lease caps, the audit log, API keys,
-- ownership and grants (docs/security.md). Runs on a simulation database (make test-sql); the
-- mark is cleared inside this transaction to test a production database.
BEGIN;
-- As the owner of the schema: on Citus the fixtures' writes of reference tables (the simulation mark)
-- and the SECURITY DEFINER calls then share one user's connections to the nodes (otherwise a
-- distributed deadlock between two users' connections, or placements written by another user).
SET LOCAL ROLE billing_owner;
SELECT plan(30);
-- The audit log's fixture first: on Citus a plan (a reference table) is not written after a
-- multi-shard read of the same transaction (the claims below).
-- The actor is proven (issue 27): the hash of the key the caller holds, not a name it gives.
SELECT billing.create_api_key('bk_pgtap0001', 'pgtap', sha256('pgtap-key'), ARRAY['admin']);
SELECT set_config('billing.actor', 'someone-else', true);
SELECT set_config('billing.actor_proof', 'key:' || encode(sha256('pgtap-key'), 'hex'), true);
SELECT billing.upsert_plan('SEC_PLAN', 500, 'USD', 'MONTH', 1);
SELECT set_config('billing.actor_proof', '', true);
SELECT set_config('billing.actor', '', true);

-- -- ownership and roles -------------------------------------------------------------------
SELECT is((SELECT nspowner::regrole::text FROM pg_namespace WHERE nspname = 'billing'), 'billing_owner',
          'schema billing belongs to billing_owner');
SELECT is((SELECT count(*)::int FROM pg_class WHERE relnamespace = 'billing'::regnamespace
            AND relowner <> 'billing_owner'::regrole), 0, 'every table and sequence belongs to billing_owner');
SELECT is((SELECT count(*)::int FROM pg_proc WHERE pronamespace = 'billing'::regnamespace
            AND proowner <> 'billing_owner'::regrole), 0, 'every function belongs to billing_owner');
-- On Citus the owner logs in: Citus connects to the workers as the current user (docs/scaling.md).
SELECT CASE WHEN billing._distributed('billing.customer')
            THEN is((SELECT rolsuper FROM pg_roles WHERE rolname = 'billing_owner'), false,
                    'the owner is not a superuser (on Citus it logs in, to the nodes)')
            ELSE is((SELECT rolcanlogin OR rolsuper FROM pg_roles WHERE rolname = 'billing_owner'), false,
                    'the owner can neither log in nor is a superuser') END;
SELECT ok(NOT has_function_privilege('billing_api', 'billing.record_payment_result(text,text,text,text,timestamptz,boolean)', 'EXECUTE'),
          'billing_api cannot record payment results');
SELECT ok(NOT has_function_privilege('billing_api', 'billing.upsert_plan(text,bigint,text,text,integer,timestamptz,integer,text,boolean)', 'EXECUTE'),
          'billing_api cannot change plans');
SELECT ok(NOT has_function_privilege('billing_worker', 'billing.mark_outbox_published(bigint[],timestamptz)', 'EXECUTE'),
          'billing_worker cannot mark events published');
SELECT ok(has_function_privilege('billing_relay', 'billing.mark_outbox_published(bigint[],timestamptz)', 'EXECUTE'),
          'billing_relay can');
SELECT ok(NOT has_table_privilege('billing_admin', 'billing.database_setting', 'UPDATE'),
          'no job role may change the simulation mark');

-- -- the clock guard ---------------------------------------------------------------------------
SELECT is(billing.is_simulation(), true, 'the test database is a simulation database');
SELECT lives_ok($$SELECT billing._check_now(now() + interval '5 years')$$, 'any p_now on a simulation database');
SELECT lives_ok($$SELECT billing._check_lease(interval '2 days')$$, 'a 2-day lease on a simulation database');
UPDATE billing.database_setting SET simulation = false;
SELECT throws_ok($$SELECT billing.create_due_invoices(500, now() + interval '5 years')$$, 'BL422', NULL,
                 'renewing five years ahead: refused');
SELECT throws_ok($$SELECT billing._check_now(now() - interval '6 minutes')$$, 'BL422', NULL,
                 'six minutes in the past: refused');
SELECT lives_ok($$SELECT billing._check_now(now() + interval '4 minutes')$$, 'four minutes ahead: accepted');
SELECT throws_ok($$SELECT * FROM billing.claim_charges('w', 10, '1000 years', now())$$, 'BL422', NULL,
                 'a 1000-year lease: refused');
SELECT throws_ok($$SELECT * FROM billing.claim_outbox_events(10, '2 hours', now())$$, 'BL422', NULL,
                 'a 2-hour relay lease: refused');
SELECT lives_ok($$SELECT * FROM billing.claim_charges('w', 10, '1 hour', now())$$, 'a 1-hour lease: accepted');
SELECT is(billing.set_max_clock_skew('1 hour'), interval '1 hour', 'the skew is configurable');
SELECT lives_ok($$SELECT billing._check_now(now() + interval '50 minutes')$$, 'and applies at once');
SELECT throws_ok($$SELECT billing.set_max_clock_skew('2 days')$$, 'BL422', NULL, 'at most a day');

-- -- the audit log (its fixture, upsert_plan as api-key:bk_pgtap0001, at the top) -----------------
SELECT is((SELECT actor || ' ' || db_role || ' ' || (args ->> 'code') FROM billing.audit_log
            WHERE function = 'upsert_plan' ORDER BY id DESC LIMIT 1),
          'api-key:bk_pgtap0001 ' || session_user || ' SEC_PLAN', 'a mutation records who (the proven key), the login and its arguments');
SELECT set_config('billing.actor', 'api-key:bk_pgtap0001', true);
SELECT is(billing._actor(), session_user || ' (claimed api-key:bk_pgtap0001 without proof)',
          'a caller cannot name a key without its proof');
SELECT set_config('billing.actor', 'cli:tester', true);
SELECT is(billing._actor(), 'cli:tester', 'a description of itself that names no key is kept (db_role says who)');
SELECT set_config('billing.actor_proof', 'key:' || encode(sha256('not-the-key'), 'hex'), true);
SELECT is(billing._actor(), session_user || ' (credential not valid)', 'a proof of no key names none');
SELECT set_config('billing.actor_proof', '', true);
SELECT set_config('billing.actor', '', true);
SELECT is((SELECT count(*)::int FROM pg_proc p WHERE p.pronamespace = 'billing'::regnamespace
            AND p.proname IN ('upsert_plan', 'upsert_customer', 'create_subscription', 'cancel_subscription',
                              'change_plan', 'create_due_invoices', 'claim_charges', 'record_payment_result',
                              'apply_gateway_webhook', 'claim_outbox_events', 'mark_outbox_published',
                              'mark_outbox_failed', 'create_api_key', 'revoke_api_key', 'set_max_clock_skew',
                              'expire_idempotency_keys', 'record_payment_results', 'create_webhook_endpoint',
                              'delete_webhook_endpoint', 'claim_webhook_deliveries', 'record_webhook_attempts',
                              'purge_expired', 'retry_dead_outbox_events', 'upsert_coupon', 'apply_coupon',
                              'pause_subscription', 'resume_subscription', 'uncancel_subscription',
                              'reactivate_subscription', 'set_quantity', 'set_trial_will_end_notice', 'rate_usage')
            AND p.prosrc ~ ('billing\._audit\(''' || p.proname || '''')), 32,
          'every mutating API function writes its audit row');

-- -- API keys --------------------------------------------------------------------------------
SELECT lives_ok($$SELECT * FROM billing.create_api_key('bk_pgtap0002', 'pgtap', sha256('bk_pgtap0002_s3cret'), ARRAY['subscriptions:read'])$$,
                'a key is stored by its hash');
SELECT is((SELECT key_id FROM billing.authenticate_api_key(sha256('bk_pgtap0002_s3cret'))), 'bk_pgtap0002',
          'and found by it');
SELECT throws_ok($$SELECT * FROM billing.create_api_key('bk_pgtap0003', 'pgtap', sha256('x'), ARRAY['root'])$$,
                 'BL422', NULL, 'an unknown scope is refused');
SELECT billing.revoke_api_key('bk_pgtap0002');
SELECT is((SELECT count(*)::int FROM billing.authenticate_api_key(sha256('bk_pgtap0002_s3cret'))), 0,
          'a revoked key authenticates nothing');

SELECT * FROM finish();
ROLLBACK;
