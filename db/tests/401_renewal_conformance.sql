-- 401_renewal_conformance: every path of the renewal job, run from the same state, gives the same
-- result (as River's driver tests run each driver through one suite). The paths: the statement
-- (create_due_invoices on a single PostgreSQL: _renew_lifecycle, then _renew_batch, the static form
-- of _renew_statement), the per-row path (_renew_rows: create_due_invoices on Citus) and the
-- per-shard-group path (renew_in_shard on group 0: _renew_batch_in_shard, the dynamic form of the
-- same statement text, after the group's lifecycle rows through _renew_row). The state covers what
-- the statement prices (price history, seats, credit spread over two invoices, credit paying a whole
-- invoice, tax, cancellation at period end with its unpaid invoice voided, PAST_DUE) and what the
-- per-row path handles (a trial's end, a trial notice, a resume, a coupon, a scheduled change).
-- Compared: every invoice, subscription, credit balance and credit entry of these customers (all
-- columns but generated ids), and their events (type, data without ids, order per subscription).
-- On Citus: db/tests/citus/402_renewal_conformance.sql.
BEGIN;
SET LOCAL ROLE billing_owner;  -- on Citus, reads of shards in the writers' role (see 200_plans_customers)
SELECT plan(13);

SELECT billing.upsert_plan('T401_M', 1000, 'USD', 'MONTH', 1, '2032-01-01Z');
SELECT billing.upsert_plan('T401_N', 1800, 'USD', 'MONTH', 1, '2032-01-01Z');
-- Price history: 1500 until 2032-02-20, then 2500; a period starting 2032-02-10 is billed at 1500.
SELECT billing.upsert_plan('T401_P', 1500, 'USD', 'MONTH', 1, '2032-01-01Z');
SELECT billing.upsert_plan('T401_P', 2500, 'USD', 'MONTH', 1, '2032-02-20Z');
SELECT billing.upsert_coupon('T401_HALF', 50, NULL, NULL, 'once');
SELECT billing.upsert_tax_rate('T401_VAT', 'FR', NULL, 'VAT', 2000, false);
SELECT billing.upsert_customer(40109);
SELECT billing.set_customer_details(40109, 'Taxed', NULL, NULL, NULL, NULL, NULL, 'FR', NULL);

SELECT billing.create_subscription('t401-plain', 40101, 'T401_M', '2032-01-10Z');
SELECT billing.create_subscription('t401-seats', 40102, 'T401_M', '2032-01-10Z', 0, NULL, 3);
SELECT billing.create_subscription('t401-credit-a', 40103, 'T401_M', '2032-01-10Z');
SELECT billing.create_subscription('t401-credit-b', 40103, 'T401_M', '2032-01-10 06:00Z');
SELECT billing._grant_credit(40103, 'USD', 1700, 'PRORATION', NULL, NULL, '2032-01-20Z');
SELECT billing.create_subscription('t401-paid-by-credit', 40105, 'T401_M', '2032-01-10Z');
SELECT billing._grant_credit(40105, 'USD', 5000, 'PRORATION', NULL, NULL, '2032-01-20Z');
SELECT billing.create_subscription('t401-cancel', 40106, 'T401_M', '2032-01-10Z');
SELECT billing.cancel_subscription(r.subscription_id, true, '2032-01-20Z') FROM billing.subscription_request r
 WHERE r.idempotency_key = 't401-cancel';
SELECT billing.create_subscription('t401-past-due', 40107, 'T401_M', '2032-01-10Z');
UPDATE billing.subscription s SET status = 'PAST_DUE' FROM billing.subscription_request r
 WHERE r.idempotency_key = 't401-past-due' AND s.customer_id = r.customer_id AND s.id = r.subscription_id;
SELECT billing.create_subscription('t401-price-history', 40108, 'T401_P', '2032-01-10Z');
SELECT billing.create_subscription('t401-taxed', 40109, 'T401_M', '2032-01-10Z');
SELECT billing.create_subscription('t401-trial-ends', 40110, 'T401_M', '2032-02-01Z', 10);
SELECT billing.create_subscription('t401-trial-notice', 40111, 'T401_M', '2032-02-20Z', 7);
SELECT billing.create_subscription('t401-resume', 40112, 'T401_M', '2032-01-10Z');
SELECT billing.pause_subscription(r.subscription_id, '2032-02-15Z', '2032-01-25Z') FROM billing.subscription_request r
 WHERE r.idempotency_key = 't401-resume';
SELECT billing.create_subscription('t401-coupon', 40113, 'T401_M', '2032-01-10Z');
SELECT billing.apply_coupon(r.subscription_id, 'T401_HALF', '2032-01-20Z') FROM billing.subscription_request r
 WHERE r.idempotency_key = 't401-coupon';
SELECT billing.create_subscription('t401-scheduled', 40114, 'T401_M', '2032-01-10Z');
SELECT billing.change_plan(r.subscription_id, 'T401_N', '2032-01-20Z', NULL, 'period_end') FROM billing.subscription_request r
 WHERE r.idempotency_key = 't401-scheduled';

-- What a path left behind, one line per row, in a stable order (ids are left out: sequences are
-- not rolled back, so each path takes other ids).
CREATE TEMP VIEW renewal_401 AS
WITH subs AS (
    SELECT r.idempotency_key AS sub, r.customer_id, r.subscription_id
      FROM billing.subscription_request r WHERE r.idempotency_key LIKE 't401-%'
)
SELECT concat_ws(' ', 'invoice', x.sub, (to_jsonb(i) - ARRAY['id', 'subscription_id'])::text) AS line
  FROM billing.invoice i JOIN subs x ON x.customer_id = i.customer_id AND x.subscription_id = i.subscription_id
UNION ALL
SELECT concat_ws(' ', 'subscription', x.sub, (to_jsonb(s) - ARRAY['id', 'scheduled_plan_id', 'plan_id'])::text,
                 billing.plan_code(s.plan_id), billing.plan_code(s.scheduled_plan_id))
  FROM billing.subscription s JOIN subs x ON x.customer_id = s.customer_id AND x.subscription_id = s.id
UNION ALL
SELECT concat_ws(' ', 'credit', (to_jsonb(b))::text)
  FROM billing.credit_balance b WHERE b.customer_id BETWEEN 40101 AND 40114
UNION ALL
SELECT concat_ws(' ', 'credit-entry', (to_jsonb(c) - ARRAY['id', 'invoice_id', 'subscription_id'])::text)
  FROM billing.credit_entry c WHERE c.customer_id BETWEEN 40101 AND 40114
UNION ALL
SELECT concat_ws(' ', 'events', x.sub, string_agg(concat_ws(':', e.event_type,
                 ((e.payload::jsonb -> 'data') - ARRAY['invoiceId', 'id', 'number'])::text), ' / ' ORDER BY e.id))
  FROM billing.outbox_event e
  JOIN subs x ON x.customer_id = e.customer_id
   AND x.subscription_id = CASE WHEN e.aggregate_type = 'subscription' THEN e.aggregate_id
                                ELSE (SELECT i.subscription_id FROM billing.invoice i
                                       WHERE i.customer_id = e.customer_id AND i.id = e.aggregate_id) END
 WHERE e.created_at >= '2032-02-25Z'
 GROUP BY x.sub;

-- Every invoice event's whole payload (envelope and data, ids included) against the writer's own
-- functions: the statement writes its invoice events as one JSON text (40_renewal.sql).
CREATE TEMP VIEW renewal_401_payloads AS
SELECT count(*) FILTER (WHERE e.payload::jsonb = billing._cloud_event_at(e.event_id, e.event_type, e.aggregate_type, e.aggregate_id,
                                                                  billing._utc_text(e.created_at), billing._invoice_data(i))
                          AND e.payload::text = billing._cloud_event_at(e.event_id, e.event_type, e.aggregate_type, e.aggregate_id,
                                                                        billing._utc_text(e.created_at), billing._invoice_data(i))::text)
           AS same,
       count(*) AS all_events
  FROM billing.outbox_event e
  JOIN billing.invoice i ON i.customer_id = e.customer_id AND i.id = e.aggregate_id
 WHERE e.aggregate_type = 'invoice' AND e.event_type IN ('InvoiceCreated', 'InvoicePaid')
   AND e.created_at >= '2032-02-25Z' AND e.customer_id BETWEEN 40101 AND 40114;

-- Each path from the same state, its effects kept in psql variables, then rolled back (the
-- assertions come after the rollback: pgTAP keeps its count in a table the rollback would undo).
SAVEPOINT by_statement;
SELECT billing.create_due_invoices(500, '2032-02-25Z') AS statement_count \gset
SELECT billing.create_due_invoices(500, '2032-02-25Z') AS statement_again \gset
SELECT string_agg(line, E'\n' ORDER BY line) AS by_statement FROM renewal_401 \gset
SELECT same AS statement_payloads_same, all_events AS statement_payloads FROM renewal_401_payloads \gset
SELECT count(*) AS statement_events,
       count(DISTINCT e.event_id) FILTER (WHERE substr(e.event_id::text, 15, 1) = '4'
                                            AND substr(e.event_id::text, 20, 1) IN ('8', '9', 'a', 'b')) AS statement_ids
  FROM billing.outbox_event e WHERE e.created_at >= '2032-02-25Z' AND e.customer_id BETWEEN 40101 AND 40114 \gset
ROLLBACK TO SAVEPOINT by_statement;

SAVEPOINT by_rows;
SELECT billing._renew_rows(500, '2032-02-25Z') AS rows_count \gset
SELECT billing._renew_rows(500, '2032-02-25Z') AS rows_again \gset
SELECT string_agg(line, E'\n' ORDER BY line) AS by_rows FROM renewal_401 \gset
ROLLBACK TO SAVEPOINT by_rows;

-- One group, 0, on a single PostgreSQL: the tables themselves.
SAVEPOINT by_shard;
SELECT count(*) FROM billing.lease_shard_groups('w401', 1, '5 minutes', '2032-02-25Z');
SELECT billing.renew_in_shard('w401', 0, 500, '2032-02-25Z') AS shard_count \gset
SELECT billing.renew_in_shard('w401', 0, 500, '2032-02-25Z') AS shard_again \gset
SELECT string_agg(line, E'\n' ORDER BY line) AS by_shard FROM renewal_401 \gset
SELECT same AS shard_payloads_same, all_events AS shard_payloads FROM renewal_401_payloads \gset
SELECT count(*) AS shard_events,
       count(DISTINCT e.event_id) FILTER (WHERE substr(e.event_id::text, 15, 1) = '4'
                                            AND substr(e.event_id::text, 20, 1) IN ('8', '9', 'a', 'b')) AS shard_ids
  FROM billing.outbox_event e WHERE e.created_at >= '2032-02-25Z' AND e.customer_id BETWEEN 40101 AND 40114 \gset
ROLLBACK TO SAVEPOINT by_shard;

SELECT ok(:statement_count >= 14, 'the statement handles every due subscription and notice (' || :statement_count || ')');
SELECT is(:statement_again, 0, 'the statement: nothing due twice');
SELECT ok(:'by_statement' LIKE '%InvoicePaid%' AND :'by_statement' LIKE '%SubscriptionCanceled%'
          AND :'by_statement' LIKE '%"tax_amount": 200,%' AND :'by_statement' LIKE '%"plan_price": 1500,%'
          AND :'by_statement' LIKE '%SubscriptionTrialWillEnd%' AND :'by_statement' LIKE '%T401_N%'
          AND :'by_statement' LIKE '%"discount_amount": 500%',
          'the state covers a paid-by-credit invoice, a cancellation, tax, the price history, a trial notice, a scheduled change and a coupon');
SELECT is(:rows_count, :statement_count, 'per row: as many handled as the statement');
SELECT is(:rows_again, 0, 'per row: nothing due twice');
SELECT is(:'by_rows'::text, :'by_statement'::text, 'per row: the same invoices, subscriptions, credit and events as the statement');
SELECT is(:shard_count, :statement_count, 'per shard group: as many handled as the statement');
SELECT is(:shard_again, 0, 'per shard group: nothing due twice');
SELECT is(:'by_shard'::text, :'by_statement'::text, 'per shard group: the same invoices, subscriptions, credit and events as the statement');

SELECT ok(:statement_payloads >= 9 AND :statement_payloads_same = :statement_payloads,
          'the statement: every invoice event''s payload is _cloud_event_at(_invoice_data) byte for byte ('
          || :statement_payloads_same || ' of ' || :statement_payloads || ')');
SELECT ok(:shard_payloads >= 9 AND :shard_payloads_same = :shard_payloads,
          'per shard group: every invoice event''s payload is _cloud_event_at(_invoice_data) byte for byte ('
          || :shard_payloads_same || ' of ' || :shard_payloads || ')');

-- The statement draws one random UUID per run and counts its events in the last 48 bits: every id
-- still distinct and a version 4 UUID (RFC 4122 variant), as gen_random_uuid's per event.
SELECT ok(:statement_events >= 9 AND :statement_ids = :statement_events,
          'the statement: every event id distinct and a version 4 UUID (' || :statement_ids || ' of ' || :statement_events || ')');
SELECT ok(:shard_events >= 9 AND :shard_ids = :shard_events,
          'per shard group: every event id distinct and a version 4 UUID (' || :shard_ids || ' of ' || :shard_events || ')');

SELECT * FROM finish();
ROLLBACK;
