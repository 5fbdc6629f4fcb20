-- citus/511_row_claims: the SQL API's batch claims on the coordinator, row by row on Citus
-- (claim_charges, claim_refunds: an unlocked read of every shard, then each row locked by
-- (customer_id, id) SKIP LOCKED in its shard), and a payment result recorded twice at once. Two
-- claimers in open transactions never take the same invoice or refund and together take every due
-- one; a second session recording the same success waits for the first and changes nothing. The
-- claimers are two other sessions (dblink) on the coordinator, so the fixtures are committed (no
-- enclosing transaction): they are billed in 2001, when nothing else of the database is due, and
-- left settled. The database is make test-citus' own, made fresh each run. Run by `make test-citus` only.
\set ON_ERROR_STOP 1
SELECT plan(12);

\set T '''2001-01-01 10:00Z'''
\set T2 '''2001-01-01 11:00Z'''
\set T3 '''2001-01-01 12:00Z'''
SELECT (billing.upsert_plan('RC30_M', 1000, 'USD', 'MONTH', 1, '2000-01-01Z')).id AS plan_id \gset
SELECT count(billing.create_subscription('c30-' || g, 630000 + g, 'RC30_M', :T)) AS subs
  FROM generate_series(1, 12) g \gset
CREATE TEMP TABLE due_invoices AS
SELECT i.customer_id, i.id FROM billing.invoice i WHERE i.customer_id BETWEEN 630001 AND 630012 AND i.status = 'OPEN';
SELECT is((SELECT count(*) FROM due_invoices), 12::bigint, 'twelve invoices due, one per customer, spread over the shards');
-- Finalized first, as the renewal job does right after creating them (a claim finalizes an
-- unnumbered invoice itself only when no other transaction holds the numbering counter).
SELECT count(billing.finalize_invoice(id, :T)) AS finalized FROM due_invoices \gset

CREATE EXTENSION IF NOT EXISTS dblink;
SELECT format('host=127.0.0.1 port=%s dbname=%s user=postgres', inet_server_port(), current_database()) AS conninfo \gset
SELECT dblink_connect('a', :'conninfo') AS a, dblink_connect('b', :'conninfo') AS b \gset
-- A claim that waited for the other's locks instead of skipping them fails here rather than hang.
SELECT dblink_exec('a', 'SET statement_timeout = ''20s''') AS a_timeout,
       dblink_exec('b', 'SET statement_timeout = ''20s''') AS b_timeout \gset

-- Charges: A claims 5 and keeps its transaction open (its rows locked); B, meanwhile, claims
-- everything due: it skips A's rows instead of waiting for them, and takes all the others.
SELECT dblink_exec('a', 'BEGIN') AS a_begin \gset
CREATE TEMP TABLE ca AS SELECT * FROM dblink('a', format(
    'SELECT customer_id, invoice_id, idempotency_key FROM billing.claim_charges(%L, 5, %L, %L)', 'claimer-a',
    interval '5 minutes', :T)) AS t(customer_id bigint, id bigint, key text);
CREATE TEMP TABLE cb AS SELECT * FROM dblink('b', format(
    'SELECT customer_id, invoice_id, idempotency_key FROM billing.claim_charges(%L, 100, %L, %L)', 'claimer-b',
    interval '5 minutes', :T)) AS t(customer_id bigint, id bigint, key text);
SELECT dblink_exec('a', 'COMMIT') AS a_commit \gset
SELECT is((SELECT count(*) FROM ca), 5::bigint, 'charges: A claims its batch of 5');
SELECT is_empty('SELECT customer_id, id FROM ca INTERSECT SELECT customer_id, id FROM cb',
                'charges: B takes none of the invoices A holds');
SELECT set_eq('SELECT customer_id, id FROM ca UNION ALL SELECT customer_id, id FROM cb', 'SELECT * FROM due_invoices',
              'charges: together they claim every due invoice, each once');
SELECT is((SELECT count(*) FROM billing.claim_charges('claimer-c', 100, interval '5 minutes', :T)), 0::bigint,
          'nothing left to claim while the leases hold');

-- The same success recorded by two sessions at once: B waits for A's row locks, then finds the
-- attempt answered and changes nothing. One payment, one InvoicePaid.
SELECT key AS k1, id AS i1 FROM ca ORDER BY id LIMIT 1 \gset
SELECT dblink_exec('a', 'BEGIN') AS a_begin2 \gset
SELECT status AS a_status FROM dblink('a', format(
    'SELECT status FROM billing.record_payment_result(%L, %L, %L, NULL, %L)', :'k1', 'SUCCEEDED', 'ch_a', :T))
    AS t(status text) \gset
SELECT dblink_send_query('b', format(
    'SELECT status, gateway_reference FROM billing.record_payment_result(%L, %L, %L, NULL, %L)', :'k1', 'SUCCEEDED', 'ch_b',
    timestamptz :T + interval '1 second')) AS b_sent \gset
SELECT pg_sleep(0.5);
SELECT is(dblink_is_busy('b'), 1, 'the second result waits for the first one''s locks');
SELECT dblink_exec('a', 'COMMIT') AS a_commit2 \gset
SELECT results_eq(format($$SELECT * FROM dblink_get_result('b') AS t(status text, reference text)$$),
                  $$VALUES ('PAID', 'ch_a')$$, 'then finds the invoice paid by the first and changes nothing');
SELECT count(*) AS b_drained FROM dblink_get_result('b') AS t(status text, reference text) \gset
SELECT results_eq(format($$SELECT count(*) FROM billing.outbox_event
                            WHERE aggregate_type = 'invoice' AND aggregate_id = %s AND event_type = 'InvoicePaid'$$, :i1),
                  $$VALUES (1::bigint)$$, 'one InvoicePaid');
SELECT results_eq(format($$SELECT count(*) FROM billing.refund WHERE invoice_id = %s$$, :i1), $$VALUES (0::bigint)$$,
                  'and no refund: nothing was charged twice');

-- Refunds: every invoice paid, a refund asked of each; A claims 3 in an open transaction, B the rest.
SELECT count(billing.record_payment_result(key, 'SUCCEEDED', 'ch_' || id, NULL, :T2)) AS paid
  FROM (SELECT key, id FROM ca UNION ALL SELECT key, id FROM cb) k \gset
SELECT count(billing.refund_invoice(id, 100, 'c30-refund-' || id, :T2)) AS asked FROM due_invoices \gset
SELECT dblink_exec('a', 'BEGIN') AS a_begin3 \gset
CREATE TEMP TABLE ra AS SELECT * FROM dblink('a', format(
    'SELECT customer_id, refund_id FROM billing.claim_refunds(%L, 3, %L, %L)', 'claimer-a', interval '5 minutes', :T3))
    AS t(customer_id bigint, id bigint);
CREATE TEMP TABLE rb AS SELECT * FROM dblink('b', format(
    'SELECT customer_id, refund_id FROM billing.claim_refunds(%L, 100, %L, %L)', 'claimer-b', interval '5 minutes', :T3))
    AS t(customer_id bigint, id bigint);
SELECT dblink_exec('a', 'COMMIT') AS a_commit3 \gset
SELECT is((SELECT count(*) FROM ra), 3::bigint, 'refunds: A claims its batch of 3');
SELECT is_empty('SELECT * FROM ra INTERSECT SELECT * FROM rb', 'refunds: B takes none of the refunds A holds');
SELECT set_eq('SELECT * FROM ra UNION ALL SELECT * FROM rb',
              'SELECT r.customer_id, r.id FROM billing.refund r WHERE r.customer_id BETWEEN 630001 AND 630012',
              'refunds: together they claim every requested refund, each once');

-- Left settled: the refunds succeed, nothing of the fixtures is due again.
SELECT count(billing.record_refund_result(k, 'SUCCEEDED', 're_' || k, NULL, :T3)) AS refunded
  FROM unnest((SELECT array_agg(x.idempotency_key) FROM billing.refund x
                WHERE x.customer_id BETWEEN 630001 AND 630012)) AS k \gset
SELECT dblink_disconnect('a') AS a_done, dblink_disconnect('b') AS b_done \gset
SELECT * FROM finish();
