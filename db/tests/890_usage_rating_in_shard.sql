-- 890_usage_rating_in_shard: the usage rating per shard group (89_usage_rating_shards) on one
-- PostgreSQL, group 0 (the tables themselves): claim_usage_in_shard + rate_usage_in_shard rate exactly
-- what rate_usage rates (81_usage_rating_set's statement, its static form), on 721's world (every
-- aggregation and pricing model, edge hours, two periods at once, exclusive and inclusive tax, credit,
-- coupons, a plan change inside a period, a cancellation, late events and their adjustment lines, a
-- second rating): the world rated by rate_usage inside a savepoint rolled back, then per group, and
-- compared field by field (USAGE invoices, lines, ratings, cursors, credit, events); the set-based
-- statement rated the live ones (its audit row), nothing is rated twice, the lease and the arguments
-- are checked, and the grants. Its Citus form, per group on the cluster's nodes:
-- citus/891_usage_rating_in_shards.
BEGIN;
SET LOCAL ROLE billing_owner;
SELECT plan(15);

SELECT billing.upsert_tax_rate('C890_XA', 'XA', NULL, 'VAT 20%', 2000, false);
SELECT billing.upsert_tax_rate('C890_XB', 'XB', NULL, 'GST 10%', 1000, true);
SELECT billing.upsert_plan('C890_A', 1000, 'USD', 'MONTH', 1, '2026-02-01Z');
SELECT billing.upsert_plan('C890_B', 0, 'USD', 'MONTH', 1, '2026-02-01Z');
SELECT billing.upsert_meter('c890_req', 'c890.request', 'count', NULL, '{}', '2026-02-01Z');
SELECT billing.upsert_meter('c890_tok', 'c890.request', 'sum', '{tokens}', '{}', '2026-02-01Z');
SELECT billing.upsert_meter('c890_max', 'c890.request', 'max', '{gb}', '{}', '2026-02-01Z');
SELECT billing.upsert_meter('c890_last', 'c890.request', 'latest', '{gb}', '{}', '2026-02-01Z');
SELECT billing.upsert_meter('c890_users', 'c890.request', 'unique_count', '{user}', '{}', '2026-02-01Z');
SELECT billing.upsert_meter('c890_eu', 'c890.request', 'count', NULL, '{"region": "eu"}', '2026-02-01Z');
SELECT billing.upsert_plan_charge('C890_A', 'c890_req', 'per_unit', 0.5, NULL, '[]', 3, NULL, NULL, '2026-02-01Z');
SELECT billing.upsert_plan_charge('C890_A', 'c890_tok', 'graduated', NULL, NULL,
       '[{"upTo": 100, "unitAmount": 1, "flatAmount": 50}, {"upTo": null, "unitAmount": 0.25}]', 0, NULL, NULL, '2026-02-01Z');
SELECT billing.upsert_plan_charge('C890_A', 'c890_max', 'volume', NULL, NULL,
       '[{"upTo": 10, "unitAmount": 7}, {"upTo": null, "unitAmount": 3, "flatAmount": 5}]', 0, NULL, NULL, '2026-02-01Z');
SELECT billing.upsert_plan_charge('C890_A', 'c890_last', 'package', 10, 4, '[]', 0, 20, NULL, '2026-02-01Z');
SELECT billing.upsert_plan_charge('C890_A', 'c890_users', 'per_unit', 100, NULL, '[]', 0, NULL, 250, '2026-02-01Z');
SELECT billing.upsert_plan_charge('C890_A', 'c890_eu', 'per_unit', 9, NULL, '[]', 0, NULL, NULL, '2026-02-01Z');
SELECT billing.upsert_plan_charge('C890_B', 'c890_req', 'per_unit', 2, NULL, '[]', 0, NULL, NULL, '2026-02-01Z');
-- coupons (docs/usage.md "Coupons"): half off for a month of service, 20% forever, an amount off, 30% on plan B only
SELECT billing.upsert_coupon('C890_R50', 50, NULL, NULL, 'repeating', 1);
SELECT billing.upsert_coupon('C890_P20', 20, NULL, NULL, 'forever');
SELECT billing.upsert_coupon('C890_AMT', NULL, 300, 'USD', 'forever');
SELECT billing.upsert_coupon('C890_B30', 30, NULL, NULL, 'forever', NULL, NULL, NULL, ARRAY['C890_B']);

SELECT billing.upsert_customer(c) FROM generate_series(8901, 8908) c;
SELECT billing.set_customer_details(8902, 'XA Ltd', 'xa@example.org', '1 Road', 'Town', '1000', NULL, 'XA', NULL);
SELECT billing.set_customer_details(8908, 'XB Ltd', 'xb@example.org', '1 Road', 'Town', '1000', NULL, 'XB', NULL);
-- every subscription starts inside an hour: its periods' first and last hours are read from the events
SELECT billing.create_subscription('c890-' || c, c, 'C890_A', '2026-03-01T10:20:30Z', 0,
                                   CASE c WHEN 8901 THEN 'C890_R50' WHEN 8902 THEN 'C890_AMT' WHEN 8903 THEN 'C890_P20'
                                          WHEN 8906 THEN 'C890_P20' END, 1, 'c890-' || c)
  FROM generate_series(8901, 8908) c;
SELECT billing.create_subscription('c890-8905b', 8905, 'C890_B', '2026-03-01T10:20:30Z', 0, 'C890_B30', 1, 'c890-8905b');
CREATE TEMP TABLE c890 AS SELECT s.customer_id, s.id, s.external_id AS code FROM billing.subscription s
 WHERE s.customer_id BETWEEN 8901 AND 8908;
-- credit: part of 8903's invoice, all of 8904's, shared by 8905's two
SELECT billing._grant_credit(8903, 'USD', 100, 'PRORATION', NULL, NULL, '2026-03-02Z');
SELECT billing._grant_credit(8904, 'USD', 100000, 'PRORATION', NULL, NULL, '2026-03-02Z');
SELECT billing._grant_credit(8905, 'USD', 700, 'PRORATION', NULL, NULL, '2026-03-02Z');

CREATE FUNCTION pg_temp.ev(p_id text, p_customer bigint, p_time text, p_data jsonb) RETURNS jsonb LANGUAGE sql AS $$
    SELECT jsonb_build_object('specversion', '1.0', 'id', p_id, 'source', 'c890', 'type', 'c890.request',
                              'time', p_time, 'subject', p_customer::text, 'data', p_data)
$$;
-- March and April: events of every customer but 8907, in the edge hours and whole hours
SELECT is((SELECT count(*) FROM billing.ingest_usage((
    SELECT jsonb_agg(pg_temp.ev('e' || c || '-' || n, c,
                                to_char(('2026-03-01T10:20:30Z'::timestamptz + (n * interval '7 hours 13 minutes 11 seconds'))
                                        AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
                                jsonb_build_object('tokens', (n * 37) % 90 + 0.5, 'gb', (n * 13) % 17, 'user', 'u' || (n % 4),
                                                   'region', CASE WHEN n % 3 = 0 THEN 'eu' ELSE 'us' END)))
      FROM generate_series(8901, 8908) c, generate_series(0, 199) n
     WHERE c <> 8907 AND n * interval '7 hours 13 minutes 11 seconds' < interval '59 days'
       AND n < 125), '2026-04-29Z', interval '1 hour', interval '5 minutes', interval '100 days')
    WHERE status = 'accepted'), 875::bigint, 'the events of March and April');
SELECT is((SELECT count(*) FROM billing.ingest_usage(jsonb_build_array(
    pg_temp.ev('edge-a', 8901, '2026-03-01T10:20:30Z', '{"tokens": 1000, "gb": 3, "user": "edge"}'),
    pg_temp.ev('edge-b', 8901, '2026-04-01T10:20:29.999Z', '{"tokens": 7, "gb": 40, "user": "edge2", "region": "eu"}'),
    pg_temp.ev('edge-c', 8901, '2026-04-01T10:20:30Z', '{"tokens": 5, "gb": 1, "user": "u0"}')),
    '2026-04-29Z') WHERE status = 'accepted'), 3::bigint, 'events on the periods'' edges');
-- 8906 changes plan inside March (its periods are left to the per-subscription path); 8908 cancels in April
SELECT billing.change_plan((SELECT id FROM c890 WHERE code = 'c890-8906'), 'C890_B', '2026-03-16T08:00:00Z');
SELECT billing.create_due_invoices(100, '2026-04-01T10:20:31Z');
SELECT billing.cancel_subscription((SELECT id FROM c890 WHERE code = 'c890-8908'), false, '2026-04-20Z');
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
                     FROM billing.credit_balance b WHERE b.customer_id BETWEEN 8901 AND 8908),
      'entries', (SELECT jsonb_agg(jsonb_build_object('c', e.customer_id, 'amount', e.amount, 'reason', e.reason,
                          's', (SELECT c.external_id FROM billing.subscription c WHERE c.customer_id = e.customer_id AND c.id = e.subscription_id)) ORDER BY e.customer_id, e.subscription_id, e.amount)
                     FROM billing.credit_entry e WHERE e.customer_id BETWEEN 8901 AND 8908),
      'events', (SELECT jsonb_agg(jsonb_build_object('type', o.event_type, 'data', (o.payload -> 'data') - 'invoiceId',
                          'time', o.payload -> 'time', 'customer', o.customer_id)
                          ORDER BY o.customer_id, o.payload -> 'data' ->> 'subscriptionId', o.payload -> 'data' ->> 'periodStart', o.event_type)
                     FROM billing.outbox_event o
                    WHERE o.customer_id BETWEEN 8901 AND 8908 AND o.aggregate_type = 'invoice'
                      AND o.payload -> 'data' ->> 'kind' = 'USAGE'))
$$;
-- the two ratings: two periods at once (May), then a late event of March and June's rating
CREATE FUNCTION pg_temp.late() RETURNS bigint LANGUAGE sql AS $$
    SELECT count(*) FROM billing.ingest_usage(jsonb_build_array(
        pg_temp.ev('late-1', 8901, '2026-03-20T10:00:00Z', '{"tokens": 300, "gb": 50, "user": "late"}'),
        pg_temp.ev('late-2', 8902, '2026-04-30T23:00:00Z', '{"tokens": 1, "gb": 0, "user": "u1", "region": "eu"}')),
        '2026-05-20Z') WHERE status = 'accepted'
$$;


-- the per-group path in group 0, as the worker calls it (one transaction: claim, then rate)
CREATE FUNCTION pg_temp.by_group(p_now timestamptz) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    v_c bigint[];
    v_s bigint[];
BEGIN
    PERFORM billing.lease_shard_groups('t890', 1, interval '10 minutes', p_now);
    SELECT array_agg(c.customer_id), array_agg(c.subscription_id) INTO v_c, v_s
      FROM billing.claim_usage_in_shard('t890', 0, 1000, p_now, interval '1 hour') c;
    RETURN (SELECT count(*) FROM billing.rate_usage_in_shard('t890', 0, coalesce(v_c, '{}'), coalesce(v_s, '{}'), p_now, interval '1 hour'));
END
$$;

SAVEPOINT by_set;
SELECT count(*) FROM billing.rate_usage(1000, '2026-05-01T12:00:00Z', interval '1 hour');
SELECT pg_temp.late();
SELECT billing.create_due_invoices(100, '2026-06-01T10:20:31Z');
SELECT count(*) FROM billing.rate_usage(1000, '2026-06-01T12:00:00Z', interval '1 hour');
SELECT pg_temp.state() AS by_set \gset
ROLLBACK TO SAVEPOINT by_set;

SELECT throws_ok($$SELECT * FROM billing.claim_usage_in_shard('t890-nobody', 0, 10, '2026-05-01T12:00:00Z')$$, 'BL409',
                 NULL, 'a worker without the group''s lease cannot claim in it');
SELECT billing.lease_shard_groups('t890', 1, interval '10 minutes', '2026-05-01T12:00:00Z');
SELECT throws_ok($$SELECT * FROM billing.rate_usage_in_shard('t890', 0, '{1,2}', '{1}', '2026-05-01T12:00:00Z')$$, 'BL422',
                 NULL, 'the customer and subscription arrays must be of one length');
SELECT throws_ok($$SELECT * FROM billing.claim_usage_in_shard('t890', 7, 10, '2026-05-01T12:00:00Z')$$, 'BL404',
                 NULL, 'an unknown group');
SELECT is(pg_temp.by_group('2026-05-01T12:00:00Z'), 9::bigint, 'May: every subscription of the world rated in group 0');
SELECT is((SELECT (a.args ->> 'set_based')::integer FROM billing.audit_log a
            WHERE a.function = 'rate_usage_in_shard' AND a.args ->> 'worker' = 't890' ORDER BY a.id DESC LIMIT 1), 7,
          'the set-based statement rated the 7 live subscriptions with whole-period segments (the rest one at a time)');
SELECT is(pg_temp.late(), 2::bigint, 'two late events');
SELECT billing.create_due_invoices(100, '2026-06-01T10:20:31Z');
SELECT ok(pg_temp.by_group('2026-06-01T12:00:00Z') >= 7, 'June rated (the late ones one at a time)');

SELECT is(pg_temp.state() -> 'invoices', :'by_set'::jsonb -> 'invoices', 'per group: the same USAGE invoices (tax, credit, status) as rate_usage');
SELECT is(pg_temp.state() -> 'lines', :'by_set'::jsonb -> 'lines', 'per group: the same USAGE lines (quantities, amounts, discounts, tax, late adjustments)');
SELECT is(pg_temp.state() - 'invoices' - 'lines', :'by_set'::jsonb - 'invoices' - 'lines',
          'per group: the same ratings, cursors, credit and events');
SELECT is(pg_temp.by_group('2026-06-01T12:30:00Z'), 0::bigint, 'rated again: nothing due, nothing billed twice');

SELECT ok(has_function_privilege('billing_worker', 'billing.claim_usage_in_shard(text, integer, integer, timestamptz, interval, boolean)', 'EXECUTE')
          AND has_function_privilege('billing_worker', 'billing.rate_usage_in_shard(text, integer, bigint[], bigint[], timestamptz, interval)', 'EXECUTE')
          AND has_function_privilege('billing_worker', 'billing.lock_usage_customers(bigint[])', 'EXECUTE'),
          'the worker role rates per group');
SELECT ok(NOT has_function_privilege('billing_api', 'billing.rate_usage_in_shard(text, integer, bigint[], bigint[], timestamptz, interval)', 'EXECUTE')
          AND NOT has_function_privilege('billing_api', 'billing.lock_usage_customers(bigint[])', 'EXECUTE')
          AND NOT has_function_privilege('billing_worker', 'billing._rate_usage_set_in_shard(integer, bigint[], bigint[], timestamptz, interval)', 'EXECUTE'),
          'the API cannot, nor anyone the private statement');

SELECT * FROM finish();
ROLLBACK;
