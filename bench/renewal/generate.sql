-- Renewal bench data, generated set-based (no row-by-row inserts). psql variables:
--   total   subscriptions (one customer each, monthly plan, zone from five)
--   due     how many of them are due at the bench clock 2026-03-01 00:00Z
--   layout  'bands' (default, as production data looks) or 'random' (worst case)
-- Every subscription has its INITIAL invoice, PAID (history the renewal must live with).
--
-- bands: ids follow signup order, as an identity column does in production. Signups spread over
--   23 months (2024-03 .. 2026-01); the first due/total of each month's signups (its first days:
--   the promotion of the seed article, section 2.2) renew on days 1-6 and are due (their period
--   ended in late January or early February); the rest renew on days 7-28 of March. The due rows
--   form 23 bands of consecutive ids, walked in period-end order.
-- random: every (total/due)-th id is due, period ends spread at random over February: every due
--   row sits on a different heap page and the scan order is unrelated to the physical order.
\set ON_ERROR_STOP 1
SELECT code FROM billing.upsert_plan('BENCH_MONTHLY', 2990, 'USD', 'MONTH');

CREATE TEMP TABLE bench_zone (n integer PRIMARY KEY, name text NOT NULL);
INSERT INTO bench_zone VALUES (0, 'UTC'), (1, 'America/Sao_Paulo'), (2, 'America/New_York'),
                              (3, 'Europe/Berlin'), (4, 'Asia/Tokyo');

INSERT INTO billing.customer (id, timezone)
SELECT g, z.name
  FROM generate_series(1, :total) g
  JOIN bench_zone z ON z.n = (hashint8(g) & 65535) % 5;

INSERT INTO billing.subscription (id, customer_id, plan_id, status, timezone, billing_anchor, period_number,
                                  current_period_start, current_period_end, period_price, version, created_at, updated_at)
SELECT y.g, y.g, y.plan_id, 'ACTIVE', y.tz, y.anchor, y.n,
       billing._period_end(y.anchor, 'MONTH', 1, y.n - 1, y.tz),
       billing._period_end(y.anchor, 'MONTH', 1, y.n, y.tz),
       (SELECT p.price_amount FROM billing.plan p WHERE p.id = y.plan_id), y.n, y.anchor, y.anchor
  FROM (SELECT x.g, x.tz, x.plan_id,
               CASE WHEN :'layout' = 'random' THEN
                        CASE WHEN x.g % (:total / :due) = 0
                             THEN timestamptz '2026-01-01 00:00Z' + ((hashint8(x.g) & 2147483647) % (28 * 86400)) * interval '1 second'
                             ELSE timestamptz '2026-02-02 00:00Z' + ((hashint8(x.g) & 2147483647) % (26 * 86400)) * interval '1 second' END
                    WHEN x.q < :due::float8 / :total THEN   -- days 1-6 of month m
                        timestamptz '2024-03-01 00:00Z' + x.m * interval '1 month'
                        + (x.q / (:due::float8 / :total)) * interval '6 days'
                    ELSE                                      -- days 7-28 of month m
                        timestamptz '2024-03-07 00:00Z' + x.m * interval '1 month'
                        + ((x.q - :due::float8 / :total) / (1 - :due::float8 / :total)) * interval '21 days'
               END AS anchor,
               CASE WHEN :'layout' = 'random' THEN 1
                    WHEN x.q < :due::float8 / :total THEN 23 - x.m
                    ELSE 24 - x.m END AS n
          FROM (SELECT g, z.name AS tz, m.id AS plan_id,
                       ((g - 1) * 23) / :total AS m,
                       (((g - 1) * 23) % :total)::float8 / :total AS q
                  FROM generate_series(1, :total) g
                  JOIN bench_zone z ON z.n = (hashint8(g) & 65535) % 5
                 CROSS JOIN (SELECT id FROM billing.plan WHERE code = 'BENCH_MONTHLY') m) x) y;
SELECT setval(pg_get_serial_sequence('billing.subscription', 'id'), :total);

INSERT INTO billing.invoice (subscription_id, customer_id, kind, period_start, period_end, subtotal, credit_applied, amount,
                             currency, status, attempt_count, due_at, next_attempt_at, paid_at, created_at,
                             plan_id, plan_price, billing_interval, interval_count)
SELECT s.id, s.customer_id, 'INITIAL', s.billing_anchor, billing._period_end(s.billing_anchor, 'MONTH', 1, 1, s.timezone),
       p.price_amount, 0, p.price_amount, p.currency, 'PAID', 0, s.billing_anchor, NULL, s.billing_anchor, s.billing_anchor,
       p.id, p.price_amount, p.billing_interval, p.interval_count
  FROM billing.subscription s JOIN billing.plan p ON p.id = s.plan_id;

VACUUM (FREEZE, ANALYZE) billing.customer, billing.subscription, billing.invoice, billing.plan;
SELECT count(*) FILTER (WHERE current_period_end <= :'now') AS due, count(*) AS total FROM billing.subscription;
