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
BEGIN;
SET LOCAL ROLE billing_owner;
SELECT plan(14);

SELECT billing.upsert_tax_rate('C721_XA', 'XA', NULL, 'VAT 20%', 2000, false);
SELECT billing.upsert_tax_rate('C721_XB', 'XB', NULL, 'GST 10%', 1000, true);
SELECT billing.upsert_plan('C721_A', 1000, 'USD', 'MONTH', 1, '2026-02-01Z');
SELECT billing.upsert_plan('C721_B', 0, 'USD', 'MONTH', 1, '2026-02-01Z');
SELECT billing.upsert_meter('c721_req', 'c721.request', 'count', NULL, '{}', '2026-02-01Z');
SELECT billing.upsert_meter('c721_tok', 'c721.request', 'sum', '{tokens}', '{}', '2026-02-01Z');
SELECT billing.upsert_meter('c721_max', 'c721.request', 'max', '{gb}', '{}', '2026-02-01Z');
SELECT billing.upsert_meter('c721_last', 'c721.request', 'latest', '{gb}', '{}', '2026-02-01Z');
SELECT billing.upsert_meter('c721_users', 'c721.request', 'unique_count', '{user}', '{}', '2026-02-01Z');
SELECT billing.upsert_meter('c721_eu', 'c721.request', 'count', NULL, '{"region": "eu"}', '2026-02-01Z');
SELECT billing.upsert_plan_charge('C721_A', 'c721_req', 'per_unit', 0.5, NULL, '[]', 3, NULL, NULL, '2026-02-01Z');
SELECT billing.upsert_plan_charge('C721_A', 'c721_tok', 'graduated', NULL, NULL,
       '[{"upTo": 100, "unitAmount": 1, "flatAmount": 50}, {"upTo": null, "unitAmount": 0.25}]', 0, NULL, NULL, '2026-02-01Z');
SELECT billing.upsert_plan_charge('C721_A', 'c721_max', 'volume', NULL, NULL,
       '[{"upTo": 10, "unitAmount": 7}, {"upTo": null, "unitAmount": 3, "flatAmount": 5}]', 0, NULL, NULL, '2026-02-01Z');
SELECT billing.upsert_plan_charge('C721_A', 'c721_last', 'package', 10, 4, '[]', 0, 20, NULL, '2026-02-01Z');
SELECT billing.upsert_plan_charge('C721_A', 'c721_users', 'per_unit', 100, NULL, '[]', 0, NULL, 250, '2026-02-01Z');
SELECT billing.upsert_plan_charge('C721_A', 'c721_eu', 'per_unit', 9, NULL, '[]', 0, NULL, NULL, '2026-02-01Z');
SELECT billing.upsert_plan_charge('C721_B', 'c721_req', 'per_unit', 2, NULL, '[]', 0, NULL, NULL, '2026-02-01Z');
-- coupons (docs/usage.md "Coupons"): half off for a month of service, 20% forever, an amount off, 30% on plan B only
SELECT billing.upsert_coupon('C721_R50', 50, NULL, NULL, 'repeating', 1);
SELECT billing.upsert_coupon('C721_P20', 20, NULL, NULL, 'forever');
SELECT billing.upsert_coupon('C721_AMT', NULL, 300, 'USD', 'forever');
SELECT billing.upsert_coupon('C721_B30', 30, NULL, NULL, 'forever', NULL, NULL, NULL, ARRAY['C721_B']);

SELECT billing.upsert_customer(c) FROM generate_series(7211, 7218) c;
SELECT billing.set_customer_details(7212, 'XA Ltd', 'xa@example.org', '1 Road', 'Town', '1000', NULL, 'XA', NULL);
SELECT billing.set_customer_details(7218, 'XB Ltd', 'xb@example.org', '1 Road', 'Town', '1000', NULL, 'XB', NULL);
-- every subscription starts inside an hour: its periods' first and last hours are read from the events
SELECT billing.create_subscription('c721-' || c, c, 'C721_A', '2026-03-01T10:20:30Z', 0,
                                   CASE c WHEN 7211 THEN 'C721_R50' WHEN 7212 THEN 'C721_AMT' WHEN 7213 THEN 'C721_P20'
                                          WHEN 7216 THEN 'C721_P20' END, 1, 'c721-' || c)
  FROM generate_series(7211, 7218) c;
SELECT billing.create_subscription('c721-7215b', 7215, 'C721_B', '2026-03-01T10:20:30Z', 0, 'C721_B30', 1, 'c721-7215b');
CREATE TEMP TABLE c721 AS SELECT s.customer_id, s.id, s.external_id AS code FROM billing.subscription s
 WHERE s.customer_id BETWEEN 7211 AND 7218;
-- credit: part of 7213's invoice, all of 7214's, shared by 7215's two
SELECT billing._grant_credit(7213, 'USD', 100, 'PRORATION', NULL, NULL, '2026-03-02Z');
SELECT billing._grant_credit(7214, 'USD', 100000, 'PRORATION', NULL, NULL, '2026-03-02Z');
SELECT billing._grant_credit(7215, 'USD', 700, 'PRORATION', NULL, NULL, '2026-03-02Z');

CREATE FUNCTION pg_temp.ev(p_id text, p_customer bigint, p_time text, p_data jsonb) RETURNS jsonb LANGUAGE sql AS $$
    SELECT jsonb_build_object('specversion', '1.0', 'id', p_id, 'source', 'c721', 'type', 'c721.request',
                              'time', p_time, 'subject', p_customer::text, 'data', p_data)
$$;
-- March and April: events of every customer but 7217, in the edge hours and whole hours
SELECT is((SELECT count(*) FROM billing.ingest_usage((
    SELECT jsonb_agg(pg_temp.ev('e' || c || '-' || n, c,
                                to_char(('2026-03-01T10:20:30Z'::timestamptz + (n * interval '7 hours 13 minutes 11 seconds'))
                                        AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
                                jsonb_build_object('tokens', (n * 37) % 90 + 0.5, 'gb', (n * 13) % 17, 'user', 'u' || (n % 4),
                                                   'region', CASE WHEN n % 3 = 0 THEN 'eu' ELSE 'us' END)))
      FROM generate_series(7211, 7218) c, generate_series(0, 199) n
     WHERE c <> 7217 AND n * interval '7 hours 13 minutes 11 seconds' < interval '59 days'
       AND n < 125), '2026-04-29Z', interval '1 hour', interval '5 minutes', interval '100 days')
    WHERE status = 'accepted'), 875::bigint, 'the events of March and April');
SELECT is((SELECT count(*) FROM billing.ingest_usage(jsonb_build_array(
    pg_temp.ev('edge-a', 7211, '2026-03-01T10:20:30Z', '{"tokens": 1000, "gb": 3, "user": "edge"}'),
    pg_temp.ev('edge-b', 7211, '2026-04-01T10:20:29.999Z', '{"tokens": 7, "gb": 40, "user": "edge2", "region": "eu"}'),
    pg_temp.ev('edge-c', 7211, '2026-04-01T10:20:30Z', '{"tokens": 5, "gb": 1, "user": "u0"}')),
    '2026-04-29Z') WHERE status = 'accepted'), 3::bigint, 'events on the periods'' edges');
-- 7216 changes plan inside March (its periods are left to the per-subscription path); 7218 cancels in April
SELECT billing.change_plan((SELECT id FROM c721 WHERE code = 'c721-7216'), 'C721_B', '2026-03-16T08:00:00Z');
SELECT billing.create_due_invoices(100, '2026-04-01T10:20:31Z');
SELECT billing.cancel_subscription((SELECT id FROM c721 WHERE code = 'c721-7218'), false, '2026-04-20Z');
SELECT billing.create_due_invoices(100, '2026-05-01T10:20:31Z');

-- What a rating wrote, without the ids (sequences are not rolled back with the savepoint).
CREATE FUNCTION pg_temp.state() RETURNS jsonb LANGUAGE sql AS $$
    SELECT jsonb_build_object(
      'invoices', (SELECT jsonb_agg(jsonb_build_object('s', c.external_id, 'start', i.period_start, 'end', i.period_end,
                          'subtotal', i.subtotal, 'credit', i.credit_applied, 'amount', i.amount, 'currency', i.currency,
                          'status', i.status, 'tax', i.tax_amount, 'included', i.tax_included, 'detail', i.tax_detail,
                          'plan', i.plan_id, 'quantity', i.quantity, 'price', i.plan_price, 'due', i.due_at,
                          'paid', i.paid_at, 'next', i.next_attempt_at, 'discount', i.discount_amount)
                          ORDER BY c.external_id, i.period_start)
                     FROM billing.invoice i JOIN billing.subscription c ON c.customer_id = i.customer_id AND c.id = i.subscription_id
                    WHERE i.kind = 'USAGE'),
      'lines', (SELECT jsonb_agg(jsonb_build_object('s', c.external_id, 'invoice', i.period_start, 'meter', l.meter_code,
                          'q', l.usage_quantity, 'plan', l.plan_id, 'unit', l.unit_price, 'n', l.quantity,
                          'start', l.span_start, 'end', l.span_end, 'gross', l.gross, 'discount', l.discount, 'net', l.net,
                          'tax', l.tax, 'inclusive', l.tax_inclusive, 'currency', l.currency, 'kind', l.kind,
                          'basis', jsonb_build_array(l.basis_start, l.basis_gross, l.basis_net), 'coupon', l.coupon_code)
                          ORDER BY c.external_id, l.span_start, l.meter_code, l.created_at, l.net)
                     FROM billing.service_line l JOIN billing.subscription c ON c.customer_id = l.customer_id AND c.id = l.subscription_id
                     JOIN billing.invoice i ON i.customer_id = l.customer_id AND i.id = l.invoice_id
                    WHERE l.item = 'USAGE'),
      'ratings', (SELECT jsonb_agg(jsonb_build_object('s', c.external_id, 'meter', r.meter_code, 'start', r.span_start,
                          'end', r.span_end, 'plan', r.plan_id, 'q', r.quantity, 'amount', r.amount, 'billed', r.billed,
                          'at', r.rated_at, 'invoiced', r.invoice_id IS NOT NULL, 'line', r.line_id IS NOT NULL,
                          'line_net', (SELECT l.net FROM billing.service_line l WHERE l.customer_id = r.customer_id AND l.id = r.line_id))
                          ORDER BY c.external_id, r.span_start, r.meter_code, r.rated_at)
                     FROM billing.usage_rating r JOIN billing.subscription c ON c.customer_id = r.customer_id AND c.id = r.subscription_id),
      'cursors', (SELECT jsonb_agg(jsonb_build_object('s', c.external_id, 'until', u.rated_until, 'late', u.late_since,
                          'finished', u.finished, 'at', u.updated_at) ORDER BY c.external_id)
                     FROM billing.usage_cursor u JOIN billing.subscription c ON c.customer_id = u.customer_id AND c.id = u.subscription_id),
      'credit', (SELECT jsonb_agg(jsonb_build_object('c', b.customer_id, 'balance', b.balance) ORDER BY b.customer_id)
                     FROM billing.credit_balance b WHERE b.customer_id BETWEEN 7211 AND 7218),
      'entries', (SELECT jsonb_agg(jsonb_build_object('c', e.customer_id, 'amount', e.amount, 'reason', e.reason,
                          's', (SELECT c.external_id FROM billing.subscription c WHERE c.customer_id = e.customer_id AND c.id = e.subscription_id)) ORDER BY e.customer_id, e.subscription_id, e.amount)
                     FROM billing.credit_entry e WHERE e.customer_id BETWEEN 7211 AND 7218),
      'events', (SELECT jsonb_agg(jsonb_build_object('type', o.event_type, 'data', (o.payload -> 'data') - 'invoiceId',
                          'time', o.payload -> 'time', 'customer', o.customer_id)
                          ORDER BY o.customer_id, o.payload -> 'data' ->> 'subscriptionId', o.payload -> 'data' ->> 'periodStart', o.event_type)
                     FROM billing.outbox_event o
                    WHERE o.customer_id BETWEEN 7211 AND 7218 AND o.aggregate_type = 'invoice'
                      AND o.payload -> 'data' ->> 'kind' = 'USAGE'))
$$;
-- the two ratings: two periods at once (May), then a late event of March and June's rating
CREATE FUNCTION pg_temp.late() RETURNS bigint LANGUAGE sql AS $$
    SELECT count(*) FROM billing.ingest_usage(jsonb_build_array(
        pg_temp.ev('late-1', 7211, '2026-03-20T10:00:00Z', '{"tokens": 300, "gb": 50, "user": "late"}'),
        pg_temp.ev('late-2', 7212, '2026-04-30T23:00:00Z', '{"tokens": 1, "gb": 0, "user": "u1", "region": "eu"}')),
        '2026-05-20Z') WHERE status = 'accepted'
$$;

SAVEPOINT by_rows;
SELECT count(*) FROM billing._rate_usage_rows(100, '2026-05-01T12:00:00Z', interval '1 hour');
SELECT pg_temp.late();
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
SELECT is((SELECT count(*) FROM billing.rate_usage(100, '2026-05-01T12:00:00Z', interval '1 hour')),
          CASE WHEN billing._distributed('billing.customer') THEN 9 ELSE 2 END::bigint,
          'rate_usage rates the rest (one at a time)');
SELECT is(pg_temp.late(), 2::bigint, 'two late events');
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

SELECT * FROM finish();
ROLLBACK;
