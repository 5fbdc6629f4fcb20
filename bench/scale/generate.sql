-- bench/scale data, generated set-based (INSERT ... SELECT over generate_series, no row loop).
-- psql variables: total (subscriptions; one customer each), now (the bench clock).
-- Four plans (three monthly, one yearly; USD and EUR), signups spread over the 24 months before
-- :now; 90% ACTIVE, 3% PAST_DUE (their current invoice OPEN after one decline), 7% CANCELED
-- (by request, at a random instant after signup). Every subscription has its INITIAL invoice
-- (PAID) and, when its current period is not its first, that period's RENEWAL invoice; each
-- customer a name and an email (for the console's search).
\set ON_ERROR_STOP 1
SELECT code FROM billing.upsert_plan('SCALE_BASIC', 990, 'USD', 'MONTH');
SELECT code FROM billing.upsert_plan('SCALE_PRO', 2990, 'USD', 'MONTH');
SELECT code FROM billing.upsert_plan('SCALE_TEAM', 1900, 'EUR', 'MONTH');
SELECT code FROM billing.upsert_plan('SCALE_ANNUAL', 29900, 'USD', 'YEAR');

CREATE TEMP TABLE scale_plan AS
SELECT row_number() OVER (ORDER BY p.code) - 1 AS n, p.id, p.price_amount, p.billing_interval, p.interval_count, p.currency
  FROM billing.plan p WHERE p.code LIKE 'SCALE\_%';

INSERT INTO billing.customer (id, timezone, name, email, created_at, updated_at)
SELECT g, 'UTC', 'Customer ' || g || ' ' || (ARRAY['Acme', 'Globex', 'Initech', 'Umbrella', 'Hooli', 'Stark'])[1 + g % 6],
       'user' || g || '@example' || (g % 997) || '.com',
       timestamptz :'now' - interval '24 months', timestamptz :'now' - interval '24 months'
  FROM generate_series(1, :total) g;

-- x: per subscription its plan, signup instant, seats and fate (hash-spread, reproducible).
CREATE TEMP TABLE scale_sub AS
SELECT g AS id, sp.id AS plan_id, sp.price_amount, sp.billing_interval, sp.interval_count,
       CASE WHEN sp.n = 3 THEN 1 + (h % 10)::int ELSE 1 END AS quantity,
       timestamptz :'now' - interval '24 months' + ((h >> 8) % (730 * 86400)) * interval '1 second' AS anchor,
       CASE WHEN (h >> 20) % 100 < 90 THEN 'ACTIVE' WHEN (h >> 20) % 100 < 93 THEN 'PAST_DUE' ELSE 'CANCELED' END AS status
  FROM (SELECT g, (hashint8(g) & 2147483647)::bigint AS h FROM generate_series(1, :total) g) x
  JOIN scale_plan sp ON sp.n = x.h % 4;

-- The current period: the one containing :now (periods counted from the anchor).
CREATE TEMP TABLE scale_period AS
SELECT s.*, n.k,
       billing._period_end(s.anchor, s.billing_interval, s.interval_count, n.k - 1, 'UTC') AS period_start,
       billing._period_end(s.anchor, s.billing_interval, s.interval_count, n.k, 'UTC') AS period_end
  FROM scale_sub s
 CROSS JOIN LATERAL (SELECT 1 + CASE WHEN s.billing_interval = 'YEAR'
                                     THEN (extract(year FROM age(timestamptz :'now', s.anchor)))::int
                                     ELSE (extract(year FROM age(timestamptz :'now', s.anchor)) * 12
                                           + extract(month FROM age(timestamptz :'now', s.anchor)))::int END AS k) n;

INSERT INTO billing.subscription (id, customer_id, plan_id, status, timezone, billing_anchor, period_number,
                                  current_period_start, current_period_end, period_price, quantity, version,
                                  canceled_at, cancel_reason, created_at, updated_at)
SELECT p.id, p.id, p.plan_id, p.status, 'UTC', p.anchor, p.k, p.period_start, p.period_end,
       p.price_amount * p.quantity, p.quantity, p.k,
       CASE WHEN p.status = 'CANCELED' THEN p.period_start + (p.period_end - p.period_start) / 3 END,
       CASE WHEN p.status = 'CANCELED' THEN 'REQUESTED' END,
       p.anchor, CASE WHEN p.status = 'CANCELED' THEN p.period_start + (p.period_end - p.period_start) / 3 ELSE p.period_start END
  FROM scale_period p;
SELECT setval(pg_get_serial_sequence('billing.subscription', 'id'), :total);

INSERT INTO billing.invoice (subscription_id, customer_id, kind, period_start, period_end, subtotal, credit_applied, amount,
                             currency, status, attempt_count, try_count, due_at, next_attempt_at, paid_at, created_at,
                             plan_id, plan_price, billing_interval, interval_count, quantity)
SELECT p.id, p.id, 'INITIAL', p.anchor, billing._period_end(p.anchor, p.billing_interval, p.interval_count, 1, 'UTC'),
       p.price_amount * p.quantity, 0, p.price_amount * p.quantity, sp.currency, 'PAID', 0, 0, p.anchor, NULL, p.anchor,
       p.anchor, p.plan_id, p.price_amount, p.billing_interval, p.interval_count, p.quantity
  FROM scale_period p JOIN scale_plan sp ON sp.id = p.plan_id;

INSERT INTO billing.invoice (subscription_id, customer_id, kind, period_start, period_end, subtotal, credit_applied, amount,
                             currency, status, attempt_count, try_count, due_at, next_attempt_at, paid_at, created_at,
                             plan_id, plan_price, billing_interval, interval_count, quantity)
SELECT p.id, p.id, 'RENEWAL', p.period_start, p.period_end, p.price_amount * p.quantity, 0, p.price_amount * p.quantity,
       sp.currency, CASE WHEN p.status = 'PAST_DUE' THEN 'OPEN' ELSE 'PAID' END,
       CASE WHEN p.status = 'PAST_DUE' THEN 1 ELSE 0 END, CASE WHEN p.status = 'PAST_DUE' THEN 1 ELSE 0 END,
       p.period_start, CASE WHEN p.status = 'PAST_DUE' THEN timestamptz :'now' + interval '2 days' END,
       CASE WHEN p.status = 'PAST_DUE' THEN NULL ELSE p.period_start END, p.period_start,
       p.plan_id, p.price_amount, p.billing_interval, p.interval_count, p.quantity
  FROM scale_period p JOIN scale_plan sp ON sp.id = p.plan_id
 WHERE p.k > 1;

-- The service ledger (issue 26): one CHARGE line per invoice selling its period, as the engine
-- writes it (MRR and revenue read the lines).
INSERT INTO billing.service_line (customer_id, subscription_id, invoice_id, kind, item, plan_id, quantity, unit_price,
                                  span_start, span_end, gross, discount, net, tax, tax_inclusive, currency,
                                  basis_start, basis_gross, basis_net, created_at)
SELECT i.customer_id, i.subscription_id, i.id, 'CHARGE', 'PLAN', i.plan_id, i.quantity, i.plan_price,
       i.period_start, i.period_end, i.subtotal, 0, i.subtotal, 0, false, i.currency,
       i.period_start, i.subtotal, i.subtotal, i.created_at
  FROM billing.invoice i;

VACUUM (FREEZE, ANALYZE) billing.customer, billing.subscription, billing.invoice, billing.plan, billing.service_line;
SELECT count(*) AS subscriptions FROM billing.subscription;
