-- 404_renewal_entries: what migrations 0540 and 0541 took off the renewal's rows, and the promises that make
-- each cut safe (docs/scaling.md, "What a renewal writes").
BEGIN;
SELECT plan(33);

-- The invoice's plan ids carry no foreign key: a plan is never deleted nor renumbered. No function of
-- the engine deletes from billing.plan or sets a plan's id, and no role but the owner may.
SELECT is_empty($$SELECT conname FROM pg_catalog.pg_constraint
                   WHERE conrelid = 'billing.invoice'::regclass AND confrelid = 'billing.plan'::regclass$$,
                'no foreign key from invoice to plan (0540)');
SELECT is_empty($$SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p
                   WHERE p.pronamespace = 'billing'::regnamespace
                     AND (p.prosrc ~* '\mdelete\s+from\s+(only\s+)?(billing\.)?plan(\s|;|$)'
                          OR p.prosrc ~* '\mtruncate\s+(table\s+)?(only\s+)?(billing\.)?plan(\s|;|,|$)'
                          OR p.prosrc ~* '\mupdate\s+(only\s+)?(billing\.)?plan\s+(\w+\s+)?set\s+([^;]*,\s*)?(\w+\.)?id\s*=')$$,
                'no engine function deletes, truncates or renumbers a plan');
SELECT is_empty($$SELECT r.rolname, x.privilege
                    FROM pg_catalog.pg_roles r
                   CROSS JOIN unnest(ARRAY['DELETE', 'TRUNCATE', 'UPDATE']) x(privilege)
                   WHERE r.rolname <> (SELECT pg_catalog.pg_get_userbyid(c.relowner) FROM pg_catalog.pg_class c
                                        WHERE c.oid = 'billing.plan'::regclass)
                     AND NOT r.rolsuper AND r.rolname NOT LIKE 'pg\_%'
                     AND has_table_privilege(r.oid, 'billing.plan', x.privilege)$$,
                'no role but the owner may delete, truncate or update plans');
-- A subscription's plan and a request's subscription: checked once per statement on one PostgreSQL
-- (0720: 12_integrity.sql's statement triggers, no parent lock per row), by the foreign keys on Citus
-- (db/citus/10_adapt.sql). A subscription is never deleted (subscription_never_deleted) nor renumbered.
-- A subscription's customer and scheduled plan: the same since 0760; a customer is never deleted nor renumbered
-- (customer_never_deleted, customer_id_fixed), on Citus too.
SELECT billing._distributed('billing.subscription') AS r404_citus \gset
SELECT ok(CASE WHEN :'r404_citus'::boolean
               THEN EXISTS (SELECT 1 FROM pg_catalog.pg_constraint WHERE conname = 'subscription_plan_fkey')
                    AND EXISTS (SELECT 1 FROM pg_catalog.pg_constraint WHERE conname = 'subscription_customer_fkey')
                    AND EXISTS (SELECT 1 FROM pg_catalog.pg_constraint WHERE conname = 'subscription_scheduled_plan_fkey')
                    AND EXISTS (SELECT 1 FROM pg_catalog.pg_constraint WHERE conname = 'subscription_request_subscription_fkey')
               ELSE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_constraint WHERE conname IN ('subscription_plan_fkey',
                                                                                         'subscription_customer_fkey',
                                                                                         'subscription_scheduled_plan_fkey',
                                                                                         'subscription_request_subscription_fkey'))
                    AND (SELECT count(*) FROM pg_catalog.pg_trigger
                          WHERE tgname IN ('subscription_plan_exists', 'subscription_plan_kept',
                                           'subscription_request_subscription_exists', 'subscription_request_subscription_kept')) = 4
          END, 'subscription -> plan, -> scheduled plan, -> customer and request -> subscription: statement checks (0720, 0760), foreign keys on Citus');
SELECT is_empty($$SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p
                   WHERE p.pronamespace = 'billing'::regnamespace
                     AND p.prosrc ~* '\mupdate\s+(only\s+)?(billing\.)?subscription\s+(\w+\s+)?set\s+([^;]*,\s*)?(\w+\.)?(id|customer_id)\s*='$$,
                'no engine function renumbers a subscription (or moves it to another customer)');
SELECT is_empty($$SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p
                   WHERE p.pronamespace = 'billing'::regnamespace
                     AND (p.prosrc ~* '\mdelete\s+from\s+(only\s+)?(billing\.)?customer(\s|;|$)'
                          OR p.prosrc ~* '\mupdate\s+(only\s+)?(billing\.)?customer\s+(\w+\s+)?set\s+([^;]*,\s*)?(\w+\.)?id\s*=')$$,
                'no engine function deletes or renumbers a customer (0760)');
-- The guards of rows never deleted nor renumbered: one trigger function, its message an argument
-- (house8 folded _subscription_never_deleted, _customer_never_deleted and _plan_never_deleted).
SELECT is(ARRAY(SELECT t.tgname::text FROM pg_catalog.pg_trigger t
                 WHERE t.tgfoid = 'billing._never_deleted()'::regprocedure
                   AND t.tgrelid IN ('billing.subscription'::regclass, 'billing.customer'::regclass, 'billing.plan'::regclass)
                 ORDER BY t.tgname),
          '{customer_id_fixed,customer_never_deleted,plan_never_deleted,subscription_never_deleted}'::text[],
          'subscriptions, customers and plans are guarded by one function, _never_deleted');
SELECT is_empty($$SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p
                   WHERE p.pronamespace = 'billing'::regnamespace
                     AND p.proname IN ('_subscription_never_deleted', '_customer_never_deleted', '_plan_never_deleted')$$,
                'the three functions it replaced are gone');
\if :r404_citus
SELECT skip('on Citus the foreign keys make these checks (above; a row moved between customers is refused by Citus itself; a customer''s id is its distribution column, and the foreign keys keep customers; invoice_subscription_exists is the composite foreign key, with no mark)', 19);
\else
SELECT count(*) AS r404_plan FROM billing.upsert_plan('R404_M', 1000, 'USD', 'MONTH', 1, '2026-01-01Z') \gset
SELECT (billing.create_subscription('r404-a', 404001, 'R404_M', '2026-02-01Z')).id AS r404_sub \gset
SELECT throws_ok($$INSERT INTO billing.subscription
                   SELECT (jsonb_populate_record(s, jsonb_build_object('id', s.id + 1000000, 'plan_id', -404))).*
                     FROM billing.subscription s WHERE s.id = $$ || :r404_sub, '23503', NULL,
                 'a new subscription naming no plan is refused');
SELECT throws_ok($$UPDATE billing.subscription SET plan_id = -404 WHERE id = $$ || :r404_sub, '23503', NULL,
                 'a subscription moved to no plan is refused');
SELECT throws_ok($$INSERT INTO billing.subscription
                   SELECT (jsonb_populate_record(s, jsonb_build_object('id', s.id + 1000000, 'customer_id', 404999))).*
                     FROM billing.subscription s WHERE s.id = $$ || :r404_sub, '23503',
                 'subscription refers to customer 404999, which does not exist',
                 'a new subscription naming no customer is refused (0760)');
SELECT throws_ok($$UPDATE billing.subscription SET customer_id = 404999 WHERE id = $$ || :r404_sub, '23503',
                 'subscription refers to customer 404999, which does not exist',
                 'a subscription moved to no customer is refused (0760)');
SELECT throws_ok($$INSERT INTO billing.subscription
                   SELECT (jsonb_populate_record(s, jsonb_build_object('id', s.id + 1000001, 'scheduled_plan_id', -405))).*
                     FROM billing.subscription s WHERE s.id = $$ || :r404_sub, '23503',
                 'subscription refers to plan -405, which does not exist',
                 'a new subscription scheduled to no plan is refused (0760)');
SELECT throws_ok($$UPDATE billing.subscription SET scheduled_plan_id = -405 WHERE id = $$ || :r404_sub, '23503',
                 'subscription refers to plan -405, which does not exist',
                 'a subscription scheduled to move to no plan is refused (0760)');
SELECT throws_ok($$INSERT INTO billing.subscription_request (idempotency_key, customer_id, plan_code, options, subscription_id)
                   VALUES ('r404-b', 404001, 'R404_M', '{}', $$ || :r404_sub || $$ + 1000000)$$, '23503', NULL,
                 'a request naming no subscription is refused');
SELECT throws_ok($$UPDATE billing.subscription_request SET customer_id = 404002 WHERE idempotency_key = 'r404-a'$$, '23503', NULL,
                 'a request moved off its subscription is refused');
SELECT count(*) AS r404_customer FROM billing.upsert_customer(404003, 'UTC') \gset
SELECT throws_ok($$DELETE FROM billing.customer WHERE id = 404003$$, '23503',
                 'customers are never deleted: their subscriptions, invoices and events refer to them',
                 'a customer is never deleted (0760: subscriptions refer to it without a lock)');
SELECT throws_ok($$UPDATE billing.customer SET id = 404004 WHERE id = 404003$$, '23503',
                 'customer 404003: its id never changes', 'a customer is never renumbered (0760)');
CREATE FUNCTION pg_temp.r404_refusal(p_sql text) RETURNS text LANGUAGE plpgsql AS $f$
DECLARE
    v_msg text; v_constraint text; v_table text;
BEGIN
    EXECUTE p_sql;
    RETURN 'not refused';
EXCEPTION WHEN foreign_key_violation THEN
    GET STACKED DIAGNOSTICS v_msg = MESSAGE_TEXT, v_constraint = CONSTRAINT_NAME, v_table = TABLE_NAME;
    RETURN v_msg || ' [' || v_constraint || ' on ' || v_table || ']';
END
$f$;
SELECT is(ARRAY[pg_temp.r404_refusal('DELETE FROM billing.subscription WHERE id = ' || :r404_sub),
                pg_temp.r404_refusal('UPDATE billing.customer SET id = 404004 WHERE id = 404003')],
          ARRAY['subscriptions are never deleted: cancel them instead [subscription_never_deleted on subscription]',
                'customer 404003: its id never changes [customer_id_fixed on customer]'],
          'each refusal names its own message, constraint (the trigger) and table');

-- The renewal statement's invoices skip invoice_subscription_exists (0920): only while its transaction's
-- mark is in renewal_statement_mark, which _renew_batch alone writes around its statement, and no
-- role but the owner may write. Every other insert, even right after a renewal in its transaction, is
-- checked.
SELECT is(ARRAY(SELECT p.oid::regprocedure::text FROM pg_catalog.pg_proc p
                 WHERE p.pronamespace = 'billing'::regnamespace
                   AND p.prosrc ~* '\minsert\s+into\s+(billing\.)?renewal_statement_mark'),
          ARRAY['billing._renew_batch(integer,timestamp with time zone)'],
          'only _renew_batch writes the renewal statement''s mark');
SELECT is_empty($$SELECT r.rolname, x.privilege
                    FROM pg_catalog.pg_roles r
                   CROSS JOIN unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE', 'TRUNCATE']) x(privilege)
                   WHERE r.rolname <> (SELECT pg_catalog.pg_get_userbyid(c.relowner) FROM pg_catalog.pg_class c
                                        WHERE c.oid = 'billing.renewal_statement_mark'::regclass)
                     AND NOT r.rolsuper AND r.rolname NOT LIKE 'pg\_%'
                     AND has_table_privilege(r.oid, 'billing.renewal_statement_mark', x.privilege)$$,
                'no role but the owner may read or write the mark');
CREATE TEMP TABLE r404_seen (marked boolean, invoices bigint);
GRANT INSERT ON r404_seen TO PUBLIC;  -- (the trigger runs as the renewal's definer, the owner)
CREATE FUNCTION pg_temp.r404_seen() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
    INSERT INTO r404_seen
    SELECT EXISTS (SELECT 1 FROM billing.renewal_statement_mark m WHERE m.xact = pg_current_xact_id()),
           (SELECT count(*) FROM r404_new);
    RETURN NULL;
END
$f$;
CREATE TRIGGER r404_seen AFTER INSERT ON billing.invoice REFERENCING NEW TABLE AS r404_new
    FOR EACH STATEMENT EXECUTE FUNCTION pg_temp.r404_seen();
SELECT is(billing.create_due_invoices(100, '2026-03-01 12:00Z'), 1, 'the subscription renews by the statement');
DROP TRIGGER r404_seen ON billing.invoice;
SELECT results_eq($$SELECT marked, invoices FROM r404_seen$$, $$VALUES (true, 1::bigint)$$,
                  'the renewal statement inserted its invoice while its transaction''s mark was present');
SELECT is_empty($$SELECT 1 FROM billing.renewal_statement_mark$$, 'the mark is gone once the statement is done');
SELECT throws_ok($$INSERT INTO billing.invoice (subscription_id, customer_id, kind, period_start, period_end, subtotal, amount,
                      currency, due_at, next_attempt_at, created_at, plan_id, plan_price, billing_interval, interval_count)
                   SELECT -42, 404001, 'RENEWAL', '2026-03-01Z', '2026-04-01Z', 1, 1, 'USD', '2026-03-01Z', '2026-03-01Z',
                          '2026-03-01Z', p.id, 1, 'MONTH', 1 FROM billing.plan p WHERE p.code = 'R404_M'$$,
                 '23503', 'invoice refers to subscription -42, which does not exist',
                 'an invoice naming no subscription, right after a renewal in the same transaction, is refused');
INSERT INTO billing.renewal_statement_mark VALUES ('1'::xid8);
SELECT throws_ok($$INSERT INTO billing.invoice (subscription_id, customer_id, kind, period_start, period_end, subtotal, amount,
                      currency, due_at, next_attempt_at, created_at, plan_id, plan_price, billing_interval, interval_count)
                   SELECT -42, 404001, 'RENEWAL', '2026-03-01Z', '2026-04-01Z', 1, 1, 'USD', '2026-03-01Z', '2026-03-01Z',
                          '2026-03-01Z', p.id, 1, 'MONTH', 1 FROM billing.plan p WHERE p.code = 'R404_M'$$,
                 '23503', 'invoice refers to subscription -42, which does not exist',
                 'another transaction''s mark vouches for nothing here');
DELETE FROM billing.renewal_statement_mark;
SET LOCAL ROLE billing_worker;
SELECT throws_ok($$INSERT INTO billing.renewal_statement_mark VALUES (pg_current_xact_id())$$, '42501', NULL,
                 'a worker (or any client role) cannot write the mark');
RESET ROLE;
\endif

-- Event ids: one index, on the id alone (GET /v1/events/{id}); no unique pair with the customer.
SELECT is_empty($$SELECT i.indexrelid::regclass FROM pg_catalog.pg_index i
                   WHERE i.indrelid = 'billing.outbox_event'::regclass AND i.indisunique
                     AND 'event_id' = ANY (ARRAY(SELECT a.attname::text FROM pg_catalog.pg_attribute a
                                                  WHERE a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)))$$,
                'no unique index on event ids (each is gen_random_uuid, 0540)');
SELECT has_index('billing', 'outbox_event', 'outbox_event_event_id_idx', 'event_id', 'an event is found by its id alone');
SELECT is_empty($$SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p
                   WHERE p.pronamespace = 'billing'::regnamespace
                     AND p.prosrc ~* 'insert\s+into\s+(billing\.outbox_event|%[0-9]+\$s)\s*\(\s*(id\s*,\s*)?event_id'
                     AND p.prosrc !~* 'gen_random_uuid\(\)'$$,
                'every function writing events draws their ids with gen_random_uuid()');

-- The subscription's status index leaves ACTIVE out (the renewal's update of an ACTIVE subscription
-- writes no entry there); invoices have no index on subscription_id alone.
SELECT is(pg_catalog.pg_get_expr(i.indpred, i.indrelid), '(status <> ''ACTIVE''::text)',
          'subscription_status_idx: WHERE status <> ''ACTIVE''')
  FROM pg_catalog.pg_index i WHERE i.indexrelid = 'billing.subscription_status_idx'::regclass;
SELECT is_empty($$SELECT i.indexrelid::regclass FROM pg_catalog.pg_index i
                   JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
                   WHERE i.indrelid = 'billing.invoice'::regclass AND a.attname = 'subscription_id'$$,
                'no invoice index leads with subscription_id (a subscription''s invoices: through its customer)');

-- The MRR marks' customer arrays (a renewal batch writes two of 5,000 ids): stored uncompressed (0541).
SELECT is((SELECT a.attstorage FROM pg_catalog.pg_attribute a
            WHERE a.attrelid = 'billing.mrr_dirty'::regclass AND a.attname = 'customer_ids'), 'e'::"char",
          'mrr_dirty.customer_ids: STORAGE EXTERNAL (no pglz on every renewal batch, 0541)');

SELECT * FROM finish();
ROLLBACK;
