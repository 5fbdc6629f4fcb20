-- 160_shard_claims: the batch claims per shard group on a single PostgreSQL, where there is one
-- group, 0, the whole database (docs/scaling.md; on Citus: db/tests/citus/161_shard_claims.sql).
BEGIN;
SELECT plan(27);

SELECT billing.upsert_plan('T83_PLAN', 1000, 'USD', 'MONTH', 1, '2026-01-01Z');
SELECT billing.create_subscription('t83-a', 83001, 'T83_PLAN', '2026-01-10Z');
SELECT billing.create_subscription('t83-b', 83002, 'T83_PLAN', '2026-01-20Z');
UPDATE billing.outbox_event SET status = 'PUBLISHED', published_at = '2026-01-01Z' WHERE customer_id NOT IN (83001, 83002);

SELECT results_eq($$SELECT shard_group, lease_until, node_name FROM billing.lease_shard_groups('w1', 4, '30 seconds', '2026-01-20 00:10Z')$$,
                  $$VALUES (0, '2026-01-20 00:10:30Z'::timestamptz, NULL::text)$$, 'one group on a single PostgreSQL: 0');
SELECT is_empty($$SELECT * FROM billing.lease_shard_groups('w2', 4, '30 seconds', '2026-01-20 00:10:10Z')$$,
                'a group another worker holds is not leased');
SELECT throws_ok($$SELECT * FROM billing.charge_claims_in_shard('w2', 0, 10, '5 minutes', '2026-01-20 00:10:10Z')$$,
                 'BL409', NULL, 'a claim without the group''s lease: BL409');
SELECT throws_ok($$SELECT * FROM billing.charge_claims_in_shard('w1', 7, 10, '5 minutes', '2026-01-20 00:10:10Z')$$,
                 'BL404', NULL, 'an unknown group: BL404');
SELECT throws_ok($$SELECT * FROM billing.claim_outbox_events_in_shard('w1', 0, 0, '5 minutes', '2026-01-20 00:10:10Z')$$,
                 'BL422', NULL, 'a batch size of 0: BL422');
SELECT throws_ok($$SELECT * FROM billing.lease_shard_groups('', 4, '30 seconds', '2026-01-20 00:10:10Z')$$,
                 'BL422', NULL, 'an empty worker name: BL422');

-- Events: the subscriptions' events, in id order, leased (the relay's claim inside a group).
SELECT ok((SELECT count(*) >= 4 AND bool_and(lease_until = '2026-01-20 00:10:50Z')
             FROM billing.claim_outbox_events_in_shard('w1', 0, 100, '30 seconds', '2026-01-20 00:10:20Z')),
          'events: every pending event, leased');
SELECT is_empty($$SELECT * FROM billing.claim_outbox_events_in_shard('w1', 0, 100, '30 seconds', '2026-01-20 00:10:25Z')$$,
                'events: nothing again while the leases hold');
-- Renewals: a month later both are due, oldest first; the lease renewed by the same worker.
SELECT is((SELECT count(*) FROM billing.lease_shard_groups('w1', 4, '1 hour', '2026-01-20 00:10:28Z')), 1::bigint,
          'the holder renews its lease');
SELECT is((SELECT count(*) FROM billing.lease_shard_groups('w2', 4, '1 hour', '2026-02-25Z')), 1::bigint,
          'a lease that ran out is taken by another worker');

-- Claim and work in one call. Renewals: the due subscriptions renewed in the claimer's transaction.
SELECT throws_ok($$SELECT billing.renew_in_shard('w1', 0, 10, '2026-02-25Z')$$, 'BL409', NULL,
                 'renew_in_shard without the group''s lease: BL409');
SELECT is(billing.renew_in_shard('w2', 0, 1, '2026-02-15Z'), 1, 'renew_in_shard: only what is due at p_now, up to the batch');
SELECT results_eq($$SELECT customer_id FROM billing.invoice WHERE customer_id IN (83001, 83002) AND kind = 'RENEWAL'$$,
                  $$VALUES (83001::bigint)$$, 'renew_in_shard: the oldest due first');
SELECT is(billing.renew_in_shard('w2', 0, 10, '2026-02-25Z'), 1, 'renew_in_shard: then the other due subscription');
SELECT results_eq($$SELECT customer_id, period_start, period_end, status FROM billing.invoice
                     WHERE customer_id IN (83001, 83002) AND kind = 'RENEWAL' ORDER BY customer_id$$,
                  $$VALUES (83001::bigint, '2026-02-10Z'::timestamptz, '2026-03-10Z'::timestamptz, 'OPEN'),
                           (83002, '2026-02-20Z', '2026-03-20Z', 'OPEN')$$,
                  'renew_in_shard: one RENEWAL invoice per subscription for its next period');
SELECT is(billing.renew_in_shard('w2', 0, 10, '2026-02-25Z'), 0, 'renew_in_shard: nothing due twice');
-- Charges: keyed and leased as claim_charges does, so claim_charges (the single-node charger) and
-- charge_claims_in_shard take the same rows with the same keys.
SELECT results_eq($$SELECT c.invoice_id, c.idempotency_key, c.lookup FROM billing.charge_claims_in_shard('w2', 0, 10, '5 minutes', '2026-02-25 00:01Z') c$$,
                  $$SELECT i.id, n.key_namespace || '-inv-' || i.id || '-try-0', false FROM billing.invoice i, billing.installation n
                     WHERE i.customer_id IN (83001, 83002) ORDER BY i.id$$,
                  'charge_claims_in_shard: every due invoice, keyed <namespace>-inv-<id>-try-<n> as claim_charges keys it');
SELECT is_empty($$SELECT * FROM billing.claim_charges('w3', 10, '5 minutes', '2026-02-25 00:02Z')$$,
                'claim_charges respects the leases charge_claims_in_shard took');
SELECT results_eq($$SELECT c.invoice_id, c.idempotency_key FROM billing.claim_charges('w3', 10, '5 minutes', '2026-02-25 00:10Z') c$$,
                  $$SELECT i.id, n.key_namespace || '-inv-' || i.id || '-try-0' FROM billing.invoice i, billing.installation n
                     WHERE i.customer_id IN (83001, 83002) ORDER BY i.id$$,
                  'after the lease claim_charges takes them back with the same keys');
SELECT results_eq($$SELECT count(*), min(claim_count), max(claim_count), min(worker) FROM billing.payment_attempt
                     WHERE customer_id IN (83001, 83002)$$,
                  $$VALUES (4::bigint, 2, 2, 'w3'::text)$$, 'and the same attempts, claimed a second time');

-- Refunds: leased as claim_refunds leases them, same keys.
SELECT billing.record_payment_result(n.key_namespace || '-inv-' || i.id || '-try-0', 'SUCCEEDED', 'ch_83', NULL, '2026-02-25 00:11Z')
  FROM billing.invoice i, billing.installation n WHERE i.customer_id = 83001 AND i.kind = 'INITIAL';
SELECT billing.refund_invoice(i.id, 400, 'rk-83', '2026-02-25 00:12Z') FROM billing.invoice i WHERE i.customer_id = 83001 AND i.kind = 'INITIAL';
SELECT results_eq($$SELECT c.idempotency_key, c.charge_key, c.amount, c.lookup FROM billing.refund_claims_in_shard('w2', 0, 10, '5 minutes', '2026-02-25 00:13Z') c$$,
                  $$SELECT r.idempotency_key, a.idempotency_key, 400::bigint, false FROM billing.refund r
                      JOIN billing.payment_attempt a ON a.customer_id = r.customer_id AND a.id = r.attempt_id
                     WHERE r.customer_id = 83001$$,
                  'refund_claims_in_shard: the requested refund, with its key and its charge''s key');
SELECT is_empty($$SELECT * FROM billing.claim_refunds('w3', 10, '5 minutes', '2026-02-25 00:14Z')$$,
                'claim_refunds respects the lease refund_claims_in_shard took');
SELECT results_eq($$SELECT c.idempotency_key, c.lookup FROM billing.claim_refunds('w3', 10, '5 minutes', '2026-02-25 00:20Z') c$$,
                  $$SELECT r.idempotency_key, false FROM billing.refund r WHERE r.customer_id = 83001$$,
                  'after the lease claim_refunds takes it back with the same key');

-- renew_in_shard (its set-based statement on the group's tables) gives what create_due_invoices gives:
-- a customer with credit, one canceled at period end (its unpaid invoice voided), a plain one.
SELECT billing.create_subscription('t83-r' || n, 83010 + n, 'T83_PLAN', '2026-01-24Z') FROM generate_series(1, 3) n;
SELECT billing._grant_credit(83011, 'USD', 300, 'PRORATION', NULL, NULL, '2026-01-25Z');
SELECT billing.cancel_subscription(r.subscription_id, true, '2026-01-25Z') FROM billing.subscription_request r WHERE r.idempotency_key = 't83-r2';
CREATE TEMP VIEW renewal_83 AS
SELECT concat_ws(' ', 'invoice', r.idempotency_key, i.kind, i.status, i.period_start, i.period_end, i.subtotal,
                 i.credit_applied, i.amount, i.tax_amount, i.next_attempt_at) AS state
  FROM billing.invoice i JOIN billing.subscription_request r ON r.customer_id = i.customer_id AND r.subscription_id = i.subscription_id
 WHERE r.idempotency_key LIKE 't83-r%'
UNION ALL
SELECT concat_ws(' ', 'subscription', r.idempotency_key, s.status, s.current_period_end, s.period_number, s.version, s.cancel_reason)
  FROM billing.subscription s JOIN billing.subscription_request r ON r.customer_id = s.customer_id AND r.subscription_id = s.id
 WHERE r.idempotency_key LIKE 't83-r%'
UNION ALL
SELECT concat_ws(' ', 'event', e.customer_id, e.event_type, e.aggregate_type, ((e.payload::jsonb -> 'data') - 'invoiceId'::text)::text)
  FROM billing.outbox_event e WHERE e.customer_id BETWEEN 83011 AND 83013 AND e.created_at >= '2026-02-25 00:30Z'
UNION ALL
SELECT concat_ws(' ', 'credit', b.customer_id, b.balance) FROM billing.credit_balance b WHERE b.customer_id BETWEEN 83011 AND 83013;
SAVEPOINT by_statement;
SELECT billing.create_due_invoices(500, '2026-02-25 00:30Z') AS by_statement_count \gset
SELECT string_agg(state, E'\n' ORDER BY state) AS by_statement FROM renewal_83 \gset
ROLLBACK TO SAVEPOINT by_statement;
SELECT is(billing.renew_in_shard('w2', 0, 500, '2026-02-25 00:30Z'), :by_statement_count, 'renew_in_shard handles what create_due_invoices handles (3)');
SELECT is((SELECT string_agg(state, E'\n' ORDER BY state) FROM renewal_83), :'by_statement',
          'renew_in_shard: the same invoices, credit, subscriptions and events as create_due_invoices');

-- Audit rows only for calls that changed something (idle workers ask every second, per group).
SELECT is((SELECT count(*) FROM billing.audit_log WHERE function = 'claim_outbox_events_in_shard'), 1::bigint,
          'events: one audit row, for the claim that took events, none for the empty one');
SELECT is((SELECT count(*) FROM billing.audit_log WHERE function = 'lease_shard_groups'), 2::bigint,
          'leases: an audit row when a group changes hands, none for a renewal or nothing taken');

SELECT * FROM finish();
ROLLBACK;
