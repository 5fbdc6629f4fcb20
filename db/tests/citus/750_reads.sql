-- citus/750_reads: the cross-customer reads on the cluster (docs/scaling.md, "Events, webhooks and
-- reads on Citus"): the reports, `billing status`, the console's lists and pages run as multi-shard
-- reads on the coordinator and give the figures a direct count gives. Fixtures written straight into
-- the tables (create_subscription on Citus is another branch's), committed; the database is make
-- test-citus' own (its customers 650001..650006 and the currency SEK are this file's alone: the
-- reports sum per currency over every customer). Run by `make test-citus` only.
\set ON_ERROR_STOP 1
SELECT plan(17);

-- Six customers with a monthly SEK subscription billed for January 2027 (an OPEN invoice each); two
-- canceled on 20 January, one by dunning, one on request.
SELECT billing.upsert_plan('RD_MONTH_SEK', 2000, 'SEK', 'MONTH', 1, '2026-01-01Z') IS NOT NULL AS plan \gset
INSERT INTO billing.customer (id) SELECT 650000 + g FROM generate_series(1, 6) g;
INSERT INTO billing.subscription (customer_id, plan_id, status, timezone, billing_anchor, current_period_start,
                                  current_period_end, period_price)
SELECT 650000 + g, p.id, 'ACTIVE', 'UTC', '2027-01-01Z', '2027-01-01Z', '2027-02-01Z', 2000
  FROM generate_series(1, 6) g, billing.plan p WHERE p.code = 'RD_MONTH_SEK';
INSERT INTO billing.invoice (subscription_id, customer_id, kind, period_start, period_end, subtotal, amount, currency,
                             status, due_at, next_attempt_at, created_at, plan_id, plan_price, billing_interval,
                             interval_count)
SELECT s.id, s.customer_id, 'INITIAL', s.current_period_start, s.current_period_end, 2000, 2000, 'SEK', 'OPEN',
       s.current_period_start, '2027-03-01Z', s.current_period_start, s.plan_id, 2000, 'MONTH', 1
  FROM billing.subscription s WHERE s.customer_id BETWEEN 650001 AND 650006;
-- What each invoice sold (the service ledger: MRR and revenue read these lines), as the engine writes it.
INSERT INTO billing.service_line (customer_id, subscription_id, invoice_id, kind, item, plan_id, quantity, unit_price,
                                  span_start, span_end, gross, discount, net, tax, tax_inclusive, currency,
                                  basis_start, basis_gross, basis_net, created_at)
SELECT i.customer_id, i.subscription_id, i.id, 'CHARGE', 'PLAN', i.plan_id, i.quantity, i.plan_price,
       i.period_start, i.period_end, i.subtotal, 0, i.subtotal, 0, false, i.currency,
       i.period_start, i.subtotal, i.subtotal, i.created_at
  FROM billing.invoice i WHERE i.customer_id BETWEEN 650001 AND 650006;
UPDATE billing.subscription SET status = 'CANCELED', canceled_at = '2027-01-20Z',
       cancel_reason = CASE customer_id WHEN 650005 THEN 'DUNNING_EXHAUSTED' ELSE 'REQUESTED' END
 WHERE customer_id IN (650005, 650006);
SELECT id AS sub FROM billing.subscription WHERE customer_id = 650001 \gset

SELECT results_eq($$SELECT currency, subscriptions, customers, mrr, arr FROM billing.report_mrr('2027-01-15Z') WHERE currency = 'SEK'$$,
                  $$VALUES ('SEK', 6::bigint, 6::bigint, 12000.00, 144000.00)$$,
                  'report_mrr: every subscription''s billed price, summed over the shards');
SELECT results_eq($$SELECT subscriptions, mrr FROM billing.report_mrr('2027-01-25Z') WHERE currency = 'SEK'$$,
                  $$VALUES (4::bigint, 8000.00)$$, 'the canceled ones no longer count');
SELECT results_eq($$SELECT starting_mrr, churned_mrr, ending_mrr FROM billing.report_mrr_movements('2027-01-01', '2027-01-31')
                     WHERE currency = 'SEK'$$,
                  $$VALUES (12000.00, 4000.00, 8000.00)$$, 'report_mrr_movements: January''s churn');
SELECT results_eq($$SELECT customers_start, customers_churned, churned_voluntary, churned_dunning
                      FROM billing.report_churn('2027-01-01', '2027-01-31') WHERE currency = 'SEK'$$,
                  $$VALUES (6::bigint, 2::bigint, 1::bigint, 1::bigint)$$,
                  'report_churn: each churned customer''s last cancellation, by reason (a join on the shards)');
SELECT results_eq($$SELECT invoiced FROM billing.report_revenue('2027-01-01', '2027-01-31') WHERE currency = 'SEK'$$,
                  $$VALUES (12000::bigint)$$, 'report_revenue: invoiced in January');

SELECT results_eq($$SELECT subscriptions_active, subscriptions_canceled, invoices_open FROM billing.status_summary('2027-01-25Z')$$,
                  $$SELECT (SELECT count(*) FROM billing.subscription WHERE status = 'ACTIVE'),
                           (SELECT count(*) FROM billing.subscription WHERE status = 'CANCELED'),
                           (SELECT count(*) FROM billing.invoice WHERE status = 'OPEN')$$,
                  'status_summary: the counts a direct count gives');
SELECT is((SELECT array_agg(id || ':' || subscriptions || '/' || live_subscriptions || '/' || open_invoices ORDER BY id)
             FROM billing.console_customers('', 500) WHERE id BETWEEN 650001 AND 650006),
          ARRAY['650001:1/1/1', '650002:1/1/1', '650003:1/1/1', '650004:1/1/1', '650005:1/0/1', '650006:1/0/1'],
          'console_customers: each customer''s counts, grouped and joined on customer_id');
SELECT is((SELECT array_agg(id) FROM billing.console_customers('650003', 50)), ARRAY[650003::bigint], 'search by id');
SELECT is((billing.console_overview('2027-01-25Z') -> 'subscriptions' ->> 'active')::bigint,
          (SELECT count(*) FROM billing.subscription WHERE status = 'ACTIVE'), 'console_overview counts over the shards');
SELECT is((billing.console_overview('2027-01-25Z') -> 'outbox' ->> 'backlog')::bigint,
          (SELECT count(*) FROM billing.outbox_event WHERE status = 'PENDING'), 'and reads outbox_stats');
SELECT is((SELECT mrr FROM billing.console_mrr('2027-01-25Z', 3) WHERE currency = 'SEK' AND at = '2027-01-25Z'), 8000::bigint,
          'console_mrr: the live subscriptions'' plan prices');
SELECT is((SELECT count(*) FROM billing.console_invoices('OPEN', NULL, 500)),
          least(500, (SELECT count(*) FROM billing.invoice WHERE status = 'OPEN')), 'console_invoices: newest first over the shards');
SELECT is((SELECT min(id) FROM billing.console_invoices('OPEN', NULL, 500)) >= ALL (
             SELECT id FROM billing.invoice WHERE status = 'OPEN' ORDER BY id DESC OFFSET 500), true, 'the newest ones');
SELECT is(jsonb_array_length(billing.console_subscription(:sub) -> 'invoices'), 1, 'console_subscription reads by its customer');
SELECT is(jsonb_array_length(billing.console_customer(650005) -> 'subscriptions'), 1,
          'console_customer runs on the node holding the customer');
SELECT throws_ok('SELECT billing.console_subscription(-1)', 'BL404', NULL, 'an unknown subscription');
-- The console's '@domain' search reads customer_email_domain_idx's range in each shard, and each
-- shard's planner picks between sorting that range and walking the shard's customers in id order
-- from the domains' statistics (migration 0660): every shard of customer carries the statistics
-- object (Citus makes it on each shard, when the table is distributed and when it is created after),
-- which ANALYZE on the coordinator fills (bench/README, scale6).
SELECT is((SELECT count(*) FROM run_command_on_shards('billing.customer',
               $$SELECT count(*) FROM pg_catalog.pg_statistic_ext WHERE stxrelid = '%s'::regclass
                   AND stxname ~ '^customer_email_domain_stats_[0-9]+$'$$) r WHERE r.success AND r.result = '1'),
          (SELECT count(*) FROM pg_dist_shard WHERE logicalrelid = 'billing.customer'::regclass),
          'every shard of customer has the email domains'' statistics object');

SELECT * FROM finish();
