-- 83_shard_claims: the batch claims per shard group on a single PostgreSQL, where there is one
-- group, 0, the whole database (docs/scaling.md; on Citus: db/tests/citus/20_shard_claims.sql).
BEGIN;
SELECT plan(16);

SELECT billing.upsert_plan('T83_PLAN', 1000, 'USD', 'MONTH', 1, '2026-01-01Z');
SELECT billing.create_subscription('t83-a', 83001, 'T83_PLAN', '2026-01-10Z');
SELECT billing.create_subscription('t83-b', 83002, 'T83_PLAN', '2026-01-20Z');
UPDATE billing.outbox_event SET status = 'PUBLISHED', published_at = '2026-01-01Z' WHERE customer_id NOT IN (83001, 83002);

SELECT results_eq($$SELECT shard_group, lease_until, node_name FROM billing.lease_shard_groups('w1', 4, '30 seconds', '2026-01-20 00:10Z')$$,
                  $$VALUES (0, '2026-01-20 00:10:30Z'::timestamptz, NULL::text)$$, 'one group on a single PostgreSQL: 0');
SELECT is_empty($$SELECT * FROM billing.lease_shard_groups('w2', 4, '30 seconds', '2026-01-20 00:10:10Z')$$,
                'a group another worker holds is not leased');
SELECT throws_ok($$SELECT * FROM billing.claim_charges_in_shard('w2', 0, 10, '5 minutes', '2026-01-20 00:10:10Z')$$,
                 'BL409', NULL, 'a claim without the group''s lease: BL409');
SELECT throws_ok($$SELECT * FROM billing.claim_charges_in_shard('w1', 7, 10, '5 minutes', '2026-01-20 00:10:10Z')$$,
                 'BL404', NULL, 'an unknown group: BL404');
SELECT throws_ok($$SELECT * FROM billing.claim_outbox_in_shard('w1', 0, 0, '5 minutes', '2026-01-20 00:10:10Z')$$,
                 'BL422', NULL, 'a batch size of 0: BL422');
SELECT throws_ok($$SELECT * FROM billing.lease_shard_groups('', 4, '30 seconds', '2026-01-20 00:10:10Z')$$,
                 'BL422', NULL, 'an empty worker name: BL422');

-- Charges: both INITIAL invoices are due; leased, then not again until the lease runs out.
SELECT results_eq($$SELECT customer_id, lease_until FROM billing.claim_charges_in_shard('w1', 0, 10, '5 minutes', '2026-01-20 00:10:10Z')$$,
                  $$VALUES (83001::bigint, '2026-01-20 00:15:10Z'::timestamptz), (83002, '2026-01-20 00:15:10Z')$$,
                  'charges: the due invoices, each leased');
SELECT is_empty($$SELECT * FROM billing.claim_charges_in_shard('w1', 0, 10, '5 minutes', '2026-01-20 00:10:20Z')$$,
                'charges: nothing again while the leases hold');
-- Events: the subscriptions' events, in id order, leased.
SELECT ok((SELECT count(*) >= 4 AND bool_and(lease_until = '2026-01-20 00:10:50Z')
             FROM billing.claim_outbox_in_shard('w1', 0, 100, '30 seconds', '2026-01-20 00:10:20Z')),
          'events: every pending event, leased');
SELECT is_empty($$SELECT * FROM billing.claim_outbox_in_shard('w1', 0, 100, '30 seconds', '2026-01-20 00:10:25Z')$$,
                'events: nothing again while the leases hold');
-- Renewals: a month later both are due, oldest first; the lease renewed by the same worker.
SELECT is((SELECT count(*) FROM billing.lease_shard_groups('w1', 4, '1 hour', '2026-01-20 00:10:28Z')), 1::bigint,
          'the holder renews its lease');
SELECT is((SELECT count(*) FROM billing.lease_shard_groups('w2', 4, '1 hour', '2026-02-25Z')), 1::bigint,
          'a lease that ran out is taken by another worker');
SELECT results_eq($$SELECT customer_id FROM billing.claim_renewals_in_shard('w2', 0, 10, '2026-02-25Z')$$,
                  $$VALUES (83001::bigint), (83002)$$, 'renewals: the due subscriptions, oldest due first');
SELECT results_eq($$SELECT customer_id FROM billing.claim_renewals_in_shard('w2', 0, 1, '2026-02-15Z')$$,
                  $$VALUES (83001::bigint)$$, 'renewals: only what is due at p_now, up to the batch');

-- Audit rows only for calls that changed something (idle workers ask every second, per group).
SELECT is((SELECT count(*) FROM billing.audit_log WHERE function = 'claim_charges_in_shard'), 1::bigint,
          'charges: one audit row, for the claim that took invoices, none for the empty one');
SELECT is((SELECT count(*) FROM billing.audit_log WHERE function = 'lease_shard_groups'), 2::bigint,
          'leases: an audit row when a group changes hands, none for a renewal or nothing taken');

SELECT * FROM finish();
ROLLBACK;
