-- 721_usage_rating_set: the set-based rating (72_usage_rating: rate_usage -> _rate_usage_set) gives
-- exactly what the rating one subscription at a time gives (_rate_usage_rows -> _rate_subscription):
-- the same world rated both ways (the first inside a savepoint rolled back), compared field by field:
-- USAGE invoices (subtotal, tax and its detail, credit applied, amount, status), their service lines,
-- the usage_rating rows, the cursors, the credit and the events. The world: every aggregation and
-- pricing model (included units, minimum, maximum, tiers' flat amounts, a filter), periods that
-- start inside an hour (edge hours read from the events), two periods rated at once, exclusive and
-- inclusive tax, credit that pays part of one invoice and all of another (InvoicePaid), a customer
-- with two usage subscriptions sharing its credit, a subscription without usage (a minimum), a plan
-- change inside a period (left to the per-subscription path), a cancellation, then late events and a
-- second rating. On Citus rate_usage is the per-subscription path itself (compared all the same).
-- A rate_usage call that billed leaves one audit row on either, one that billed nothing none.
BEGIN;
\ir fixtures/usage_partitions_lock.sql
SET LOCAL ROLE billing_owner;
SELECT plan(17);

-- the world (db/tests/fixtures/usage_world*.sql, docs/testing.md "Shared fixtures"): catalogue c721,
-- customers 7211..7218 (subscriptions c721-7211 .. c721-7218 and c721-7215b, temp table c721), state()
\set w c721
\ir fixtures/usage_world.sql
\set set ''
\set base 7210
\set batch 100
\ir fixtures/usage_world_customers.sql
\ir fixtures/usage_world_state.sql

-- the two ratings: two periods at once (May), then a late event of March (pg_temp.late) and June's rating
SAVEPOINT by_rows;
SELECT count(*) FROM billing._rate_usage_rows(100, '2026-05-01T12:00:00Z', interval '1 hour');
SELECT pg_temp.late(7210);
SELECT billing.create_due_invoices(100, '2026-06-01T10:20:31Z');
SELECT count(*) FROM billing._rate_usage_rows(100, '2026-06-01T12:00:00Z', interval '1 hour');
SELECT pg_temp.state() AS by_rows \gset
ROLLBACK TO SAVEPOINT by_rows;

-- the set-based statement alone first: every live subscription but the one changed inside March
SELECT billing._usage_follow_all('2026-05-01T12:00:00Z');
CREATE FUNCTION pg_temp.set_rated() RETURNS text[] LANGUAGE plpgsql AS $$
DECLARE
    v_ids bigint[];
BEGIN
    IF billing._distributed('billing.customer') THEN
        RETURN NULL;  -- on Citus the set-based statement is not used (rate_usage is one at a time there)
    END IF;
    v_ids := ARRAY(SELECT r.subscription_id FROM billing._rate_usage_set(
                       (SELECT array_agg(customer_id ORDER BY customer_id, id) FROM c721),
                       (SELECT array_agg(id ORDER BY customer_id, id) FROM c721),
                       '2026-05-01T12:00:00Z', interval '1 hour') r);
    RETURN ARRAY(SELECT c.code FROM c721 c WHERE c.id = ANY (v_ids) ORDER BY c.code);
END
$$;
SELECT is(pg_temp.set_rated(),
          CASE WHEN billing._distributed('billing.customer') THEN NULL
               ELSE ARRAY['c721-7211', 'c721-7212', 'c721-7213', 'c721-7214', 'c721-7215', 'c721-7215b', 'c721-7217'] END,
          'the set-based statement rates the live subscriptions with whole-period segments, not the one changed inside a period nor the canceled one');
SELECT coalesce(array_agg(a.id), '{}') AS audit_seen FROM billing.audit_log a WHERE a.function = 'rate_usage' \gset
SELECT is((SELECT count(*) FROM billing.rate_usage(100, '2026-05-01T12:00:00Z', interval '1 hour')),
          CASE WHEN billing._distributed('billing.customer') THEN 9 ELSE 2 END::bigint,
          'rate_usage rates the rest (one at a time)');
-- its audit row (docs/security.md "Audit log"), read into a variable first (as the coupons' rows below)
SELECT coalesce(jsonb_agg(a.args - 'now' ORDER BY a.id), '[]') AS audit_may FROM billing.audit_log a
 WHERE a.function = 'rate_usage' AND (a.args ->> 'now')::timestamptz = '2026-05-01T12:00:00Z'
   AND NOT (a.id = ANY (:'audit_seen'::bigint[])) \gset
SELECT is(:'audit_may'::jsonb,
          CASE WHEN billing._distributed('billing.customer') THEN '[{"rated": 9, "set_based": 7, "invoiced": 9}]'
               ELSE '[{"rated": 2, "set_based": 0, "invoiced": 2}]' END::jsonb,
          'a rate_usage call that billed leaves one audit row, on one PostgreSQL as on Citus (looked at, rated set-based, invoiced)');
SELECT is(pg_temp.late(7210), 2::bigint, 'two late events');
SELECT billing.create_due_invoices(100, '2026-06-01T10:20:31Z');
SELECT ok((SELECT count(*) FROM billing.rate_usage(100, '2026-06-01T12:00:00Z', interval '1 hour')) >= 7,
          'June rated (the late ones one at a time)');

SELECT is(pg_temp.state() -> 'invoices', :'by_rows'::jsonb -> 'invoices', 'the same USAGE invoices (tax, credit, status)');
SELECT is(pg_temp.state() -> 'lines', :'by_rows'::jsonb -> 'lines', 'the same USAGE lines');
SELECT is(pg_temp.state() - 'invoices' - 'lines', :'by_rows'::jsonb - 'invoices' - 'lines',
          'the same ratings, cursors, credit and events');
SELECT ok(jsonb_array_length(pg_temp.state() -> 'lines') > 40
          AND (SELECT count(DISTINCT x ->> 'status') FROM jsonb_array_elements(pg_temp.state() -> 'invoices') x) = 2
          AND (SELECT count(*) FROM jsonb_array_elements(pg_temp.state() -> 'invoices') x WHERE (x ->> 'included')::bigint > 0) > 0,
          'the world compared is not empty: lines, PAID and OPEN invoices, inclusive tax');

-- Coupons on usage lines, by the plan lines' rule: a percentage for the line's share inside the coupon's time
-- (read into local tables first: on Citus a pgTAP call around a query of one shard is sent to its worker)
CREATE TEMP TABLE c721_lines AS
SELECT l.customer_id, l.invoice_id, l.span_start, l.span_end, l.gross, l.discount, l.net, l.coupon_code, s.external_id AS code
  FROM billing.service_line l JOIN billing.subscription s ON s.customer_id = l.customer_id AND s.id = l.subscription_id
 WHERE l.customer_id BETWEEN 7211 AND 7218 AND l.item = 'USAGE';
CREATE TEMP TABLE c721_invoices AS
SELECT i.customer_id, i.id, i.subtotal, i.discount_amount, i.coupon_code FROM billing.invoice i
 WHERE i.customer_id BETWEEN 7211 AND 7218 AND i.kind = 'USAGE';
SELECT is((SELECT array_agg(DISTINCT (l.span_start < '2026-04-01T10:20:30Z', l.discount = l.gross * 50 / 100)::text)
             FROM c721_lines l WHERE l.customer_id = 7211 AND l.span_end <= '2026-05-01T10:20:30Z'),
          ARRAY['(f,f)', '(t,t)'],
          'a repeating 50% coupon of one month halves the usage lines of its month (rounded down), not April''s');
SELECT is((SELECT count(*) FILTER (WHERE l.discount <> l.gross * 20 / 100 OR l.net <> l.gross - l.discount
                                   OR (l.discount > 0) <> (l.coupon_code = 'C721_P20'))
             FROM c721_lines l WHERE l.customer_id IN (7213, 7216)),
          0::bigint, '20% forever takes 20% off every usage line, on both plans of a subscription changed inside a period');
SELECT is((SELECT array_agg(DISTINCT (l.code, l.discount = l.gross * 30 / 100, l.discount = 0)::text
                            ORDER BY (l.code, l.discount = l.gross * 30 / 100, l.discount = 0)::text)
             FROM c721_lines l WHERE l.customer_id IN (7212, 7215) AND l.gross >= 10),
          ARRAY['(c721-7212,f,t)', '(c721-7215,f,t)', '(c721-7215b,t,f)'],
          'an amount off takes nothing off usage; 30% on plan B only takes 30% off the usage-only plan B''s lines');
SELECT is((SELECT count(*) FROM c721_invoices i
            WHERE (i.subtotal, i.discount_amount) IS DISTINCT FROM
                  (SELECT (sum(l.net)::bigint, sum(l.discount)::bigint) FROM c721_lines l
                    WHERE l.customer_id = i.customer_id AND l.invoice_id = i.id)
               OR (i.discount_amount > 0) <> (i.coupon_code IS NOT NULL)),
          0::bigint, 'every USAGE invoice is the net of its lines, its discount theirs');

-- rated again: nothing billed, no audit row (idle workers ask every round)
SELECT coalesce(array_agg(a.id), '{}') AS audit_seen FROM billing.audit_log a WHERE a.function = 'rate_usage' \gset
SELECT is((SELECT count(r.invoice_id) FROM billing.rate_usage(100, '2026-06-01T13:00:00Z', interval '1 hour') r), 0::bigint,
          'rated again: nothing billed');
SELECT count(*) AS audit_idle FROM billing.audit_log a WHERE a.function = 'rate_usage' AND NOT (a.id = ANY (:'audit_seen'::bigint[])) \gset
SELECT is(:audit_idle::bigint, 0::bigint, 'a rate_usage call that billed nothing leaves no audit row');

SELECT * FROM finish();
ROLLBACK;
