-- Signups in bulk (db/functions/31_signups.sql, issue 32): create_subscriptions makes exactly what
-- create_subscription makes for the same arguments (subscriptions, requests, invoices, lines,
-- events: compared column by column, ids aside), replays keys, refuses what it refuses, all or nothing.
BEGIN;
SELECT plan(29);

SET LOCAL ROLE billing_owner;

SELECT billing.upsert_plan('SU_M', 1000, 'USD', 'MONTH');
SELECT billing.upsert_plan('SU_CAL', 3000, 'USD', 'MONTH', 1, '2026-01-01Z', 15);
SELECT billing.upsert_plan('SU_FREE', 0, 'USD', 'YEAR');
SELECT billing.upsert_coupon('SU_TEN', 10, NULL, NULL, 'repeating', 2);
SELECT billing.upsert_tax_rate('SU_VAT', 'DE', NULL, 'USt', 1900, false);
-- The same signups for customers 95000+i (one by one) and 96000+i (in bulk).
CREATE TEMP TABLE su_spec (i integer, plan_code text, trial_days integer, coupon_code text, quantity integer, taxed boolean, credit boolean);
INSERT INTO su_spec VALUES
    (1, 'SU_M', 0, NULL, 1, false, false), (2, 'SU_M', 0, NULL, 4, true, false), (3, 'SU_CAL', 0, NULL, 2, false, false),
    (4, 'SU_CAL', 0, NULL, 1, true, false), (5, 'SU_M', 14, NULL, 1, false, false), (6, 'SU_CAL', 30, NULL, 3, true, false),
    (7, 'SU_FREE', 0, NULL, 1, false, false), (8, 'SU_M', 0, 'SU_TEN', 1, false, false), (9, 'SU_M', 0, NULL, 1, false, true),
    (10, 'SU_M', 0, NULL, 2, false, false);
SELECT count(billing.set_customer_details(base + s.i, 'Kunde', NULL, NULL, NULL, NULL, NULL, 'DE', NULL, 'TAXABLE'))
  FROM su_spec s CROSS JOIN (VALUES (95000), (96000)) b(base) WHERE s.taxed;
SELECT count(billing.upsert_customer(base + s.i)) FROM su_spec s CROSS JOIN (VALUES (95000), (96000)) b(base) WHERE s.credit;
SELECT count(billing._grant_credit(base + s.i, 'USD', 400, 'PRORATION', NULL, NULL, '2026-05-01Z'))
  FROM su_spec s CROSS JOIN (VALUES (95000), (96000)) b(base) WHERE s.credit;

SELECT count(billing.create_subscription('su-a-' || s.i, 95000 + s.i, s.plan_code, '2026-05-03 10:00Z', s.trial_days,
                                         s.coupon_code, s.quantity, CASE WHEN s.i = 10 THEN 'su-ext-a' END))
  FROM (SELECT * FROM su_spec ORDER BY i) s;
SELECT results_eq(
    $$SELECT idempotency_key, outcome FROM billing.create_subscriptions(
        (SELECT jsonb_agg(jsonb_build_object('idempotency_key', 'su-b-' || s.i, 'customer_id', 96000 + s.i, 'plan_code', s.plan_code,
                                             'trial_days', s.trial_days, 'coupon_code', s.coupon_code, 'quantity', s.quantity,
                                             'external_id', CASE WHEN s.i = 10 THEN 'su-ext-b' END) ORDER BY s.i) FROM su_spec s),
        '2026-05-03 10:00Z')$$,
    $$SELECT 'su-b-' || i, 'created' FROM su_spec ORDER BY i$$, 'one row per signup, in order, created');

CREATE TEMP VIEW su_subs AS
    SELECT s.customer_id % 1000 AS i, s.customer_id / 1000 AS side, s.plan_id, s.status, s.timezone, s.billing_anchor, s.period_number,
           s.current_period_start, s.current_period_end, s.cancel_at_period_end, s.period_price, s.quantity, s.trial_end,
           s.trial_notice_at, s.lifecycle_pending, s.coupon_code, s.version, s.updated_at, s.external_id IS NOT NULL AS has_ext
      FROM billing.subscription s WHERE s.customer_id BETWEEN 95001 AND 96999;
SELECT is((SELECT count(*) FROM su_subs WHERE side = 96), 10::bigint, 'ten subscriptions in bulk');
SELECT is_empty($$(SELECT i, plan_id, status, timezone, billing_anchor, period_number, current_period_start, current_period_end,
                          cancel_at_period_end, period_price, quantity, trial_end, trial_notice_at, lifecycle_pending,
                          coupon_code, version, updated_at, has_ext FROM su_subs WHERE side = 95
                   EXCEPT SELECT i, plan_id, status, timezone, billing_anchor, period_number, current_period_start, current_period_end,
                          cancel_at_period_end, period_price, quantity, trial_end, trial_notice_at, lifecycle_pending,
                          coupon_code, version, updated_at, has_ext FROM su_subs WHERE side = 96)$$,
                'the subscriptions are create_subscription''s, column by column');

CREATE TEMP VIEW su_invoices AS
    SELECT i.customer_id / 1000 AS side, i.customer_id % 1000 AS n, i.kind, i.period_start, i.period_end, i.subtotal, i.credit_applied,
           i.amount, i.currency, i.status, i.due_at, i.next_attempt_at, i.paid_at, i.created_at, i.plan_id, i.plan_price,
           i.billing_interval, i.interval_count, i.quantity, i.discount_amount, i.coupon_code, i.tax_amount, i.tax_included,
           i.tax_detail, i.from_plan_id, i.from_price, i.from_quantity, i.unserved
      FROM billing.invoice i WHERE i.customer_id BETWEEN 95001 AND 96999;
SELECT is((SELECT count(*) FROM su_invoices WHERE side = 96), 8::bigint, 'an INITIAL invoice for each signup without a trial');
SELECT is_empty($$(SELECT n, kind, period_start, period_end, subtotal, credit_applied, amount, currency, status, due_at, next_attempt_at,
                          paid_at, created_at, plan_id, plan_price, billing_interval, interval_count, quantity, discount_amount,
                          coupon_code, tax_amount, tax_included, tax_detail::text, from_plan_id, from_price, from_quantity, unserved
                     FROM su_invoices WHERE side = 95
                   EXCEPT SELECT n, kind, period_start, period_end, subtotal, credit_applied, amount, currency, status, due_at, next_attempt_at,
                          paid_at, created_at, plan_id, plan_price, billing_interval, interval_count, quantity, discount_amount,
                          coupon_code, tax_amount, tax_included, tax_detail::text, from_plan_id, from_price, from_quantity, unserved
                     FROM su_invoices WHERE side = 96)$$,
                'the invoices are create_subscription''s (taxes, calendar proration, a free plan paid, credit, coupon)');
-- (single-customer reads into variables first: on Citus a query on one customer's shard, pgTAP's call
-- included, would run on the worker, without the test's plan)
SELECT tax_amount AS su_tax FROM billing.invoice WHERE customer_id = 96002 \gset
SELECT is(:su_tax::bigint, 760::bigint, 'taxed: 19 % of 4000');
SELECT is_empty($$(SELECT l.customer_id % 1000, l.kind, l.item, l.plan_id, l.quantity, l.unit_price, l.span_start, l.span_end, l.gross,
                          l.discount, l.coupon_code, l.net, l.tax, l.tax_inclusive, l.currency, l.depends_on, l.basis_start,
                          l.basis_gross, l.basis_net, l.created_at
                     FROM billing.service_line l WHERE l.customer_id BETWEEN 95001 AND 95999
                   EXCEPT SELECT l.customer_id % 1000, l.kind, l.item, l.plan_id, l.quantity, l.unit_price, l.span_start, l.span_end, l.gross,
                          l.discount, l.coupon_code, l.net, l.tax, l.tax_inclusive, l.currency, l.depends_on, l.basis_start,
                          l.basis_gross, l.basis_net, l.created_at
                     FROM billing.service_line l WHERE l.customer_id BETWEEN 96001 AND 96999)$$,
                'the service lines are create_subscription''s');
SELECT is((SELECT count(*) FROM billing.service_line WHERE customer_id BETWEEN 96001 AND 96999), 8::bigint, 'one CHARGE line per invoice');
-- Events: the same types per signup in the same order, the same data but for ids.
CREATE TEMP VIEW su_events AS
    SELECT e.customer_id / 1000 AS side, e.customer_id % 1000 AS n, e.event_type,
           row_number() OVER (PARTITION BY e.customer_id ORDER BY e.id) AS k,
           (e.payload::jsonb -> 'data') - 'subscriptionId' - 'invoiceId' - 'customerId' AS data, e.created_at, e.available_at
      FROM billing.outbox_event e WHERE e.customer_id BETWEEN 95001 AND 96999;
SELECT is((SELECT count(*) FROM su_events WHERE side = 96), 19::bigint, 'SubscriptionCreated x10, InvoiceCreated x8, InvoicePaid x1');
SELECT is_empty($$(SELECT n, event_type, k, data, created_at, available_at FROM su_events WHERE side = 95
                   EXCEPT SELECT n, event_type, k, data, created_at, available_at FROM su_events WHERE side = 96)$$,
                'the events are create_subscription''s, in the same order per signup');
-- The bulk's event ids: one random UUID a batch whose last 48 bits count its events (31_signups):
-- each id distinct, in the v4 form (version 4, RFC 4122 variant), as gen_random_uuid's per call.
SELECT is((SELECT count(DISTINCT e.event_id) FILTER (WHERE substr(e.event_id::text, 15, 1) = '4'
                                                      AND substr(e.event_id::text, 20, 1) IN ('8', '9', 'a', 'b'))
             FROM billing.outbox_event e WHERE e.customer_id BETWEEN 95001 AND 96999),
          (SELECT count(*) FROM billing.outbox_event e WHERE e.customer_id BETWEEN 95001 AND 96999),
          'every event id distinct and a version 4 UUID (per call and in bulk)');
SELECT billing._distributed('billing.subscription') AS su_citus \gset
\if :su_citus
SELECT skip('on Citus every row is create_subscription''s (no row written out by the set-based path)', 4);
\else
-- create_subscription writes the usual signup's events out in one statement too: each equals what
-- the shared builders make of the rows (both paths, per call).
SELECT is_empty($$SELECT 1 FROM billing.outbox_event e JOIN billing.subscription s ON s.customer_id = e.customer_id AND s.id = e.aggregate_id
                   WHERE e.aggregate_type = 'subscription' AND s.customer_id BETWEEN 95001 AND 95010
                     AND e.payload::jsonb -> 'data' <> billing._subscription_data(s)$$,
                'create_subscription: SubscriptionCreated equals _subscription_data of the row');
SELECT is_empty($$SELECT 1 FROM billing.outbox_event e JOIN billing.invoice i ON i.customer_id = e.customer_id AND i.id = e.aggregate_id
                   WHERE e.aggregate_type = 'invoice' AND i.customer_id BETWEEN 95001 AND 96999
                     AND e.payload::jsonb -> 'data' <> billing._invoice_data(i)$$,
                'InvoiceCreated and InvoicePaid equal _invoice_data of the invoice (per call and in bulk)');
SELECT is_empty($$SELECT 1 FROM billing.outbox_event e WHERE e.customer_id BETWEEN 95001 AND 96999
                     AND e.payload::jsonb <> billing._cloud_event(e.event_id, e.event_type, e.aggregate_type, e.aggregate_id, e.created_at,
                                                           e.payload::jsonb -> 'data')$$,
                'every envelope is _cloud_event''s (per call and in bulk)');
SELECT is_empty($$SELECT 1 FROM billing.outbox_event e JOIN billing.subscription s ON s.customer_id = e.customer_id AND s.id = e.aggregate_id
                   WHERE e.aggregate_type = 'subscription' AND s.customer_id BETWEEN 96001 AND 96007
                     AND e.payload::jsonb -> 'data' <> billing._subscription_data(s)$$,
                'SubscriptionCreated written out equals _subscription_data of the row');
\endif
SELECT subscription_id AS su_req FROM billing.subscription_request WHERE idempotency_key = 'su-b-3' \gset
SELECT id AS su_sub3 FROM billing.subscription WHERE customer_id = 96003 \gset
SELECT is(:su_req::bigint, :su_sub3::bigint, 'each key recorded with its subscription');

-- Idempotency: the batch again answers the same subscriptions, replayed, and makes nothing.
CREATE TEMP TABLE su_again AS
    SELECT * FROM billing.create_subscriptions(
        '[{"idempotency_key": "su-b-1", "customer_id": 96001, "plan_code": "SU_M"},
          {"idempotency_key": "su-b-11", "customer_id": 96011, "plan_code": "SU_M"},
          {"idempotency_key": "su-b-11", "customer_id": 96011, "plan_code": "SU_M"}]', '2026-05-04Z') WITH ORDINALITY;
SELECT id AS su_sub1 FROM billing.subscription WHERE customer_id = 96001 \gset
SELECT id AS su_sub11 FROM billing.subscription WHERE customer_id = 96011 \gset
SELECT results_eq($$SELECT subscription_id, outcome FROM su_again ORDER BY ordinality$$,
                  format($$VALUES (%s::bigint, 'replayed'), (%s, 'created'), (%s, 'replayed')$$, :su_sub1, :su_sub11, :su_sub11),
                  'a key used before replays; a key twice in the batch: created once');
SELECT throws_ok($$SELECT billing.create_subscriptions('[{"idempotency_key": "su-b-2", "customer_id": 96002, "plan_code": "SU_M"}]', '2026-05-04Z')$$,
                 'BL409', NULL, 'a key used for other parameters: BL409');
SELECT throws_ok($$SELECT billing.create_subscriptions('[{"idempotency_key": "su-t1", "customer_id": 96101, "plan_code": "SU_M"},
                                                         {"idempotency_key": "su-t2", "customer_id": 96102, "plan_code": "SU_M"},
                                                         {"idempotency_key": "su-t1", "customer_id": 96101, "plan_code": "SU_M", "quantity": 2}]', '2026-05-04Z')$$,
                 'BL409', 'signup ''su-t1'' (row 1): idempotency key ''su-t1'' appears twice in the batch with different parameters',
                 'a key twice in the batch with other parameters: BL409');
SELECT throws_ok($$SELECT billing.create_subscriptions('[{"idempotency_key": "su-x1", "customer_id": 96100, "plan_code": "SU_M"},
                                                         {"idempotency_key": "su-x2", "customer_id": 0, "plan_code": "SU_M"}]', '2026-05-04Z')$$,
                 'BL422', 'signup ''su-x2'' (row 2): a customer id is a positive integer, not 0', 'a bad row names itself; nothing is created');
SELECT count(*) AS su_none FROM billing.subscription WHERE customer_id = 96100 \gset
SELECT is(:su_none::bigint, 0::bigint, 'all or nothing');

-- The figures the engine keeps from its writes equal the ones recomputed from the rows after every
-- signup above (one by one: the usual path and the general path's coupon and credit; in bulk).
SELECT is(billing._console_overview('2026-05-03 12:00Z', NOT billing._overview_counts_kept()),
          billing._console_overview('2026-05-03 12:00Z', true),
          'signups: the overview''s kept counts equal the rows counted');
SELECT is((SELECT count(*) FROM (
               (SELECT * FROM billing._mrr_totals(ARRAY['2026-05-03 10:00Z', '2026-05-20Z', '2026-06-10Z', '2026-07-20Z']::timestamptz[], false)
                EXCEPT ALL
                SELECT * FROM billing._mrr_totals(ARRAY['2026-05-03 10:00Z', '2026-05-20Z', '2026-06-10Z', '2026-07-20Z']::timestamptz[], true))
               UNION ALL
               (SELECT * FROM billing._mrr_totals(ARRAY['2026-05-03 10:00Z', '2026-05-20Z', '2026-06-10Z', '2026-07-20Z']::timestamptz[], true)
                EXCEPT ALL
                SELECT * FROM billing._mrr_totals(ARRAY['2026-05-03 10:00Z', '2026-05-20Z', '2026-06-10Z', '2026-07-20Z']::timestamptz[], false))) d),
          0::bigint, 'signups: the kept MRR equals the MRR recomputed from the lines');

-- The customer's zone, read by the checks' statement: a known customer's own (a calendar plan's
-- period ends on its billing day there), UTC for one the batch creates; as create_subscription.
SELECT billing.upsert_customer(c, 'Asia/Tokyo') FROM (VALUES (97001), (97002)) v(c);
SELECT billing.create_subscription(k, c, 'SU_CAL', '2026-05-14 20:00Z') FROM (VALUES ('su-tz-a', 97001), ('su-tz-d', 97004)) v(k, c);
SELECT count(*) FROM billing.create_subscriptions(
    '[{"idempotency_key": "su-tz-b", "customer_id": 97002, "plan_code": "SU_CAL"},
      {"idempotency_key": "su-tz-c", "customer_id": 97003, "plan_code": "SU_CAL"}]', '2026-05-14 20:00Z');
-- (in Tokyo the 15th has begun: the first period ends on 15 June there, on 15 May in UTC)
SELECT results_eq(
    $$SELECT s.timezone, s.billing_anchor, s.current_period_end, s.period_price
        FROM billing.subscription s WHERE s.customer_id IN (97002, 97003) ORDER BY s.customer_id$$,
    $$SELECT s.timezone, s.billing_anchor, s.current_period_end, s.period_price
        FROM billing.subscription s WHERE s.customer_id IN (97001, 97004) ORDER BY s.customer_id$$,
    'signups: a known customer''s zone (Asia/Tokyo: the calendar''s day there), UTC for a customer the batch creates');
SELECT ok((SELECT s.current_period_end FROM billing.subscription s WHERE s.customer_id = 97002)
          <> (SELECT s.current_period_end FROM billing.subscription s WHERE s.customer_id = 97003),
          'signups: the two zones give two calendars here');
SELECT results_eq($$SELECT timezone FROM billing.customer WHERE id = 97003$$, $$VALUES ('UTC')$$,
                  'signups: a customer the batch creates is in UTC');

-- A batch of more than 500 rows planned with its own arrays (a generic plan cached from a session's
-- sixth call on joined a batch's invoices to its subscriptions by a nested loop: 4-5x the CPU a
-- signup, bench/signup/session.py), for that call only (the function's SET clause restores the
-- setting on return), and no JIT.
SELECT ok((SELECT p.proconfig @> ARRAY['jit=off', 'plan_cache_mode=auto']
                  AND p.prosrc ~ 'jsonb_array_length\(p_signups\) > 500 THEN[^;]*set_config\(''plan_cache_mode'', ''force_custom_plan'', true\)'
             FROM pg_catalog.pg_proc p WHERE p.oid = 'billing.create_subscriptions(jsonb, timestamptz)'::regprocedure),
          'signups: create_subscriptions plans a batch of more than 500 rows with its own arrays, for the call only, without JIT');
SET plan_cache_mode = force_generic_plan;
-- (on Citus every row is create_subscription's, one call each: 21 s for 501 rows, skipped)
SELECT CASE WHEN billing._distributed('billing.subscription')
            THEN skip('on Citus the rows of a batch are create_subscription''s, one by one', 1)
            ELSE is((SELECT count(*) FROM billing.create_subscriptions(
                         (SELECT jsonb_agg(jsonb_build_object('idempotency_key', 'su-plan-' || g, 'customer_id', 930000 + g,
                                                              'plan_code', 'SU_M'))
                            FROM generate_series(1, 501) g), '2026-05-03 10:00Z') WHERE outcome = 'created'),
                    501::bigint, 'signups: a batch of 501 is created whatever the session''s plan cache mode') END;
SELECT is(current_setting('plan_cache_mode'), 'force_generic_plan',
          'signups: the session''s plan_cache_mode is its own again after create_subscriptions');
RESET plan_cache_mode;
SELECT * FROM finish();
ROLLBACK;
