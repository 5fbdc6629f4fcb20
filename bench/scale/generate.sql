-- bench/scale data, generated set-based (INSERT ... SELECT over generate_series, no row loop), on one
-- core (no parallel workers), indexes and foreign keys built after the load.
-- psql variables: total (subscriptions; one customer each), now (the bench clock).
-- Four plans (three monthly, one yearly; USD and EUR), signups spread over the 24 months before
-- :now; 90% ACTIVE, 3% PAST_DUE (their current invoice OPEN after one decline), 7% CANCELED
-- (by request, at a random instant of the current period). Every subscription has its INITIAL invoice
-- (PAID) and, when its current period is not its first, that period's RENEWAL invoice; each invoice
-- one PLAN CHARGE service line selling its period, as the engine writes it; the periods between the
-- first and the current one are ONE service line per subscription (no invoice rows: the disk), which
-- the MRR rules read exactly as one line per period on the same terms (each line's MRR is its whole
-- period's basis_net normalized to a month). Each customer a name and an email (the console's search).
--
-- Kept counts: the overview's counters (billing.overview_count) are written by the engine's own
-- statement triggers on the inserts (left in place); the MRR aggregate (billing.mrr_segment,
-- mrr_delta, mrr_movement) is rebuilt by the engine's own fold (billing._mrr_fold) of the customers the
-- service-line trigger marked, planned with hash joins for the size (enable_nestloop off in this
-- session only). bench/scale/run.py then checks both against the full recomputation.
\set ON_ERROR_STOP 1
SET max_parallel_workers_per_gather = 0;
SET max_parallel_maintenance_workers = 0;
SET jit = off;
SET work_mem = '256MB';
SET maintenance_work_mem = '1GB';
SET synchronous_commit = off;
\timing on

SELECT code FROM billing.upsert_plan('SCALE_BASIC', 990, 'USD', 'MONTH');
SELECT code FROM billing.upsert_plan('SCALE_PRO', 2990, 'USD', 'MONTH');
SELECT code FROM billing.upsert_plan('SCALE_TEAM', 1900, 'EUR', 'MONTH');
SELECT code FROM billing.upsert_plan('SCALE_ANNUAL', 29900, 'USD', 'YEAR');

CREATE TEMP TABLE scale_plan AS
SELECT row_number() OVER (ORDER BY p.code) - 1 AS n, p.id, p.price_amount, p.billing_interval, p.interval_count, p.currency
  FROM billing.plan p WHERE p.code LIKE 'SCALE\_%';

-- Every index, primary/unique key and foreign key of (or into) the four loaded tables, saved as DDL,
-- dropped, and re-created from the same text after the load: one sorted build each instead of 5
-- million insertions each, one validating join per foreign key instead of a check per row. A table's
-- keys and indexes are built right after its own load (the next table's statement triggers read
-- them: invoice_subscription_exists probes subscription by id); the foreign keys at the end. The
-- statement triggers (the kept counts, the MRR marks, invoice_subscription_exists) stay.
CREATE TEMP TABLE scale_ddl AS
WITH t(rel) AS (VALUES ('billing.customer'::regclass), ('billing.subscription'::regclass),
                       ('billing.invoice'::regclass), ('billing.service_line'::regclass))
SELECT c.conrelid::regclass::text AS rel, 1 AS drop_order, 3 AS add_order, format('ALTER TABLE %s ADD CONSTRAINT %I %s', c.conrelid::regclass, c.conname, pg_get_constraintdef(c.oid)) AS add_ddl,
       format('ALTER TABLE %s DROP CONSTRAINT %I', c.conrelid::regclass, c.conname) AS drop_ddl
  FROM pg_constraint c
 WHERE c.contype = 'f' AND (c.conrelid IN (SELECT rel FROM t) OR c.confrelid IN (SELECT rel FROM t))
UNION ALL
SELECT c.conrelid::regclass::text, 2, 1, format('ALTER TABLE %s ADD CONSTRAINT %I %s', c.conrelid::regclass, c.conname, pg_get_constraintdef(c.oid)),
       format('ALTER TABLE %s DROP CONSTRAINT %I', c.conrelid::regclass, c.conname)
  FROM pg_constraint c
 WHERE c.contype IN ('p', 'u') AND c.conrelid IN (SELECT rel FROM t)
UNION ALL
SELECT i.indrelid::regclass::text, 3, 2, pg_get_indexdef(i.indexrelid), format('DROP INDEX %s', i.indexrelid::regclass)
  FROM pg_index i
 WHERE i.indrelid IN (SELECT rel FROM t)
   AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid AND c.contype IN ('p', 'u', 'x'));
SELECT count(*) AS ddl_saved FROM scale_ddl;
SELECT drop_ddl FROM scale_ddl ORDER BY drop_order \gexec
-- Autovacuum off on the loaded tables while loading (one core at most): analyzed at the end.
ALTER TABLE billing.customer SET (autovacuum_enabled = false);
ALTER TABLE billing.subscription SET (autovacuum_enabled = false);
ALTER TABLE billing.invoice SET (autovacuum_enabled = false);
ALTER TABLE billing.service_line SET (autovacuum_enabled = false);

INSERT INTO billing.customer (id, timezone, name, email, created_at, updated_at)
SELECT g, 'UTC', 'Customer ' || g || ' ' || (ARRAY['Acme', 'Globex', 'Initech', 'Umbrella', 'Hooli', 'Stark'])[1 + g % 6],
       'user' || g || '@example' || (g % 997) || '.com',
       timestamptz :'now' - interval '24 months', timestamptz :'now' - interval '24 months'
  FROM generate_series(1, :total) g;
SELECT add_ddl FROM scale_ddl WHERE rel = 'billing.customer' AND add_order < 3 ORDER BY add_order, add_ddl \gexec

-- Per subscription its plan, signup instant (anchor), seats and fate (hash-spread, reproducible), k
-- its current period's number (the one containing :now, counted from the anchor) and the periods'
-- boundaries the rows need.
CREATE TEMP TABLE scale_period AS
SELECT x.*,
       billing._period_end(x.anchor, x.billing_interval, x.interval_count, 1, 'UTC') AS first_end,
       billing._period_end(x.anchor, x.billing_interval, x.interval_count, x.k - 1, 'UTC') AS period_start,
       billing._period_end(x.anchor, x.billing_interval, x.interval_count, x.k, 'UTC') AS period_end
  FROM (SELECT s.*, 1 + CASE WHEN s.billing_interval = 'YEAR'
                             THEN (extract(year FROM age(timestamptz :'now', s.anchor)))::int
                             ELSE (extract(year FROM age(timestamptz :'now', s.anchor)) * 12
                                   + extract(month FROM age(timestamptz :'now', s.anchor)))::int END AS k
          FROM (SELECT g AS id, sp.id AS plan_id, sp.price_amount, sp.billing_interval, sp.interval_count, sp.currency,
                       CASE WHEN sp.n = 3 THEN 1 + ((h.h >> 4) % 10)::int ELSE 1 END AS quantity,
                       timestamptz :'now' - interval '24 months' + (h.a % (730 * 86400)) * interval '1 second' AS anchor,
                       CASE WHEN (h.h >> 20) % 100 < 90 THEN 'ACTIVE' WHEN (h.h >> 20) % 100 < 93 THEN 'PAST_DUE' ELSE 'CANCELED' END AS status
                  -- h: the low 31 bits of the id's hash (plan, seats, fate); a: its high 31 bits (the
                  -- signup instant over the whole 730 days: h >> 8 reached only 97 of them).
                  FROM (SELECT g, hashint8(g) & 2147483647 AS h, (hashint8(g) >> 32) & 2147483647 AS a
                          FROM generate_series(1, :total) g) h
                  JOIN scale_plan sp ON sp.n = h.h % 4) s) x;

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
SELECT add_ddl FROM scale_ddl WHERE rel = 'billing.subscription' AND add_order < 3 ORDER BY add_order, add_ddl \gexec

-- The INITIAL invoices, then the current periods' RENEWAL invoices (one statement: one pass of the
-- statement triggers).
INSERT INTO billing.invoice (subscription_id, customer_id, kind, period_start, period_end, subtotal, credit_applied, amount,
                             currency, status, attempt_count, try_count, due_at, next_attempt_at, paid_at, created_at,
                             plan_id, plan_price, billing_interval, interval_count, quantity)
SELECT p.id, p.id, 'INITIAL', p.anchor, p.first_end,
       p.price_amount * p.quantity, 0, p.price_amount * p.quantity, p.currency, 'PAID', 0, 0, p.anchor, NULL, p.anchor,
       p.anchor, p.plan_id, p.price_amount, p.billing_interval, p.interval_count, p.quantity
  FROM scale_period p
UNION ALL
SELECT p.id, p.id, 'RENEWAL', p.period_start, p.period_end, p.price_amount * p.quantity, 0, p.price_amount * p.quantity,
       p.currency, CASE WHEN p.status = 'PAST_DUE' THEN 'OPEN' ELSE 'PAID' END,
       CASE WHEN p.status = 'PAST_DUE' THEN 1 ELSE 0 END, CASE WHEN p.status = 'PAST_DUE' THEN 1 ELSE 0 END,
       p.period_start, CASE WHEN p.status = 'PAST_DUE' THEN timestamptz :'now' + interval '2 days' END,
       CASE WHEN p.status = 'PAST_DUE' THEN NULL ELSE p.period_start END, p.period_start,
       p.plan_id, p.price_amount, p.billing_interval, p.interval_count, p.quantity
  FROM scale_period p
 WHERE p.k > 1;
SELECT add_ddl FROM scale_ddl WHERE rel = 'billing.invoice' AND add_order < 3 ORDER BY add_order, add_ddl \gexec

-- The service ledger (issue 26): one CHARGE line per invoice selling its period, as the engine writes
-- it (MRR and revenue read the lines), and one line for the periods between (2 .. k-1), on the same
-- terms: its basis is one period's (what the MRR reads), its net the periods' sum (what revenue reads).
INSERT INTO billing.service_line (customer_id, subscription_id, invoice_id, kind, item, plan_id, quantity, unit_price,
                                  span_start, span_end, gross, discount, net, tax, tax_inclusive, currency,
                                  basis_start, basis_gross, basis_net, created_at)
SELECT i.customer_id, i.subscription_id, i.id, 'CHARGE', 'PLAN', i.plan_id, i.quantity, i.plan_price,
       i.period_start, i.period_end, i.subtotal, 0, i.subtotal, 0, false, i.currency,
       i.period_start, i.subtotal, i.subtotal, i.created_at
  FROM billing.invoice i
UNION ALL
SELECT p.id, p.id, NULL, 'CHARGE', 'PLAN', p.plan_id, p.quantity, p.price_amount,
       p.first_end, p.period_start, p.price_amount * p.quantity * (p.k - 2), 0, p.price_amount * p.quantity * (p.k - 2), 0, false,
       p.currency, p.first_end, p.price_amount * p.quantity, p.price_amount * p.quantity, p.first_end
  FROM scale_period p
 WHERE p.k > 2;

-- The service lines' keys and indexes, then every foreign key (each validated by one join), from
-- the saved text; then every saved definition must be there again.
SELECT add_ddl FROM scale_ddl WHERE rel = 'billing.service_line' AND add_order < 3 ORDER BY add_order, add_ddl \gexec
SELECT add_ddl FROM scale_ddl WHERE add_order = 3 ORDER BY add_ddl \gexec
DO $$
DECLARE
    v_missing text;
BEGIN
    SELECT string_agg(d.add_ddl, E'\n') INTO v_missing FROM scale_ddl d
     WHERE NOT EXISTS (SELECT 1 FROM pg_indexes x WHERE x.schemaname = 'billing' AND x.indexdef = d.add_ddl)
       AND NOT EXISTS (SELECT 1 FROM pg_constraint c
                        WHERE format('ALTER TABLE %s ADD CONSTRAINT %I %s', c.conrelid::regclass, c.conname, pg_get_constraintdef(c.oid)) = d.add_ddl);
    IF v_missing IS NOT NULL THEN
        RAISE EXCEPTION 'scale generator: not re-created: %', v_missing;
    END IF;
END
$$;

ANALYZE billing.customer, billing.subscription, billing.invoice, billing.service_line, billing.plan;

-- The MRR aggregate: the engine's fold of the marked customers (every customer, marked by the
-- service-line insert's trigger), planned with hash joins for millions of customers.
SET enable_nestloop = off;
SELECT billing._mrr_fold() AS mrr_folded;
RESET enable_nestloop;

ALTER TABLE billing.customer RESET (autovacuum_enabled);
ALTER TABLE billing.subscription RESET (autovacuum_enabled);
ALTER TABLE billing.invoice RESET (autovacuum_enabled);
ALTER TABLE billing.service_line RESET (autovacuum_enabled);
VACUUM (ANALYZE) billing.customer, billing.subscription, billing.invoice, billing.plan, billing.service_line,
                 billing.mrr_segment, billing.mrr_delta, billing.mrr_movement, billing.mrr_dirty, billing.overview_count;
SELECT count(*) AS subscriptions FROM billing.subscription;
-- This backend's CPU (user + system, in clock ticks): the generation's server CPU (no parallel workers).
SELECT 'server_cpu_ticks', (string_to_array(split_part(pg_read_file('/proc/' || pg_backend_pid() || '/stat'), ') ', 2), ' '))[12]::bigint
                         + (string_to_array(split_part(pg_read_file('/proc/' || pg_backend_pid() || '/stat'), ') ', 2), ' '))[13]::bigint;
