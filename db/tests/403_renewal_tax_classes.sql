-- 403_renewal_tax_classes: the renewal statement computes taxes once per tax class of its batch
-- (address, tax status, taxable amount: 40_renewal.sql's taxed CTE) and joins them back to its
-- rows. One batch holding many classes side by side (exclusive and inclusive countries, a regional
-- rate over a national one, a region without its own rate, an exempt and a reverse-charge
-- customer, no address at all, seats giving other amounts, two customers of one class): every
-- invoice's tax equals _tax_of for its customer and amount, and the per-row path gives the same
-- invoices and lines (on Citus both calls are the per-row path; the per-shard-group path runs the
-- statement's text: 401_renewal_conformance, citus/402).
BEGIN;
SET LOCAL ROLE billing_owner;  -- on Citus, reads of shards in the writers' role (see 200_plans_customers)
SELECT plan(5);

SELECT billing.upsert_plan('T403_M', 1000, 'USD', 'MONTH', 1, '2033-01-01Z');
SELECT billing.upsert_tax_rate('T403_FR', 'FR', NULL, 'TVA', 2000, false);
SELECT billing.upsert_tax_rate('T403_CA', 'CA', NULL, 'GST', 500, false);
SELECT billing.upsert_tax_rate('T403_QC', 'CA', 'QC', 'QST', 998, false);
SELECT billing.upsert_tax_rate('T403_DE', 'DE', NULL, 'MwSt', 1900, true);
SELECT billing.upsert_customer(c) FROM generate_series(40301, 40311) c;
SELECT billing.set_customer_details(40301, 'fr', NULL, NULL, NULL, NULL, NULL, 'FR', NULL);
SELECT billing.set_customer_details(40302, 'fr too', NULL, NULL, NULL, NULL, NULL, 'FR', NULL);
SELECT billing.set_customer_details(40303, 'qc', NULL, NULL, NULL, NULL, 'QC', 'CA', NULL);
SELECT billing.set_customer_details(40304, 'on', NULL, NULL, NULL, NULL, 'ON', 'CA', NULL);
SELECT billing.set_customer_details(40305, 'ca', NULL, NULL, NULL, NULL, NULL, 'CA', NULL);
SELECT billing.set_customer_details(40306, 'de', NULL, NULL, NULL, NULL, NULL, 'DE', NULL);
SELECT billing.set_customer_details(40307, 'exempt', NULL, NULL, NULL, NULL, NULL, 'FR', NULL, 'EXEMPT');
SELECT billing.set_customer_details(40308, 'reverse', NULL, NULL, NULL, NULL, NULL, 'DE', 'DE123', 'REVERSE_CHARGE');
SELECT billing.set_customer_details(40309, 'us', NULL, NULL, NULL, NULL, 'NY', 'US', NULL);
-- 40310: no address at all; 40311: French, three seats (another amount in the same address).
SELECT billing.set_customer_details(40311, 'fr seats', NULL, NULL, NULL, NULL, NULL, 'FR', NULL);
SELECT billing.create_subscription('t403-' || c, c, 'T403_M', '2033-01-10Z', 0, NULL, CASE WHEN c IN (40311, 40303) THEN 3 ELSE 1 END)
  FROM generate_series(40301, 40311) c;

CREATE TEMP VIEW renewal_403 AS
SELECT concat_ws(' ', 'invoice', i.customer_id, i.subtotal, i.tax_amount, i.tax_included, i.amount, i.tax_detail::text) AS line
  FROM billing.invoice i WHERE i.customer_id BETWEEN 40301 AND 40311 AND i.kind = 'RENEWAL'
UNION ALL
SELECT concat_ws(' ', 'line', l.customer_id, l.gross, l.net, l.tax, l.tax_inclusive)
  FROM billing.service_line l WHERE l.customer_id BETWEEN 40301 AND 40311 AND l.span_start >= '2033-02-01Z';

-- The figures are compared on a local copy of the invoices (on Citus, _tax_of, a SQL function, cannot
-- be called with arguments from a distributed table's rows).
CREATE TEMP TABLE got_403 (customer_id bigint, subtotal bigint, tax_amount bigint, tax_included bigint, tax_detail jsonb,
                           country char(2), region text, tax_status text);

SAVEPOINT by_statement;
SELECT billing.create_due_invoices(500, '2033-02-12Z') AS statement_count \gset
INSERT INTO got_403
SELECT i.customer_id, i.subtotal, i.tax_amount, i.tax_included, i.tax_detail, c.country, c.region, c.tax_status
  FROM billing.invoice i JOIN billing.customer c ON c.id = i.customer_id
 WHERE i.customer_id BETWEEN 40301 AND 40311 AND c.id BETWEEN 40301 AND 40311 AND i.kind = 'RENEWAL';
SELECT count(*) AS st_invoices,
       count(*) FILTER (WHERE (g.tax_amount, g.tax_included, g.tax_detail) IS NOT DISTINCT FROM
                              ((g.t).tax_amount, (g.t).tax_included, (g.t).tax_detail)) AS st_agreeing,
       count(DISTINCT (g.country, g.region, g.tax_status, g.subtotal)) AS st_classes,
       count(*) FILTER (WHERE g.tax_amount > 0) AS st_exclusive, count(*) FILTER (WHERE g.tax_included > 0) AS st_inclusive
  -- _tax_of called in a target list (as _invoice_tax_row does): on Citus, inlined in FROM it would
  -- not see this transaction's rates.
  FROM (SELECT x.*, billing._tax_of(x.country, x.region, x.tax_status, x.subtotal) AS t FROM got_403 x) g \gset
SELECT string_agg(line, E'\n' ORDER BY line) AS by_statement FROM renewal_403 \gset
ROLLBACK TO SAVEPOINT by_statement;

SAVEPOINT by_rows;
SELECT billing._renew_rows(500, '2033-02-12Z') AS rows_count \gset
SELECT string_agg(line, E'\n' ORDER BY line) AS by_rows FROM renewal_403 \gset
ROLLBACK TO SAVEPOINT by_rows;

SELECT is(:st_invoices::int, 11, 'the statement renews all eleven in one batch');
SELECT ok(:st_classes >= 10 AND :st_exclusive >= 6 AND :st_inclusive = 1,
          'the batch holds ten classes or more, exclusive and inclusive (' || :st_classes || ' classes)');
SELECT is(:st_agreeing::int, :st_invoices::int, 'every invoice''s tax and detail equal _tax_of for its customer and amount');
SELECT is(:rows_count, :statement_count, 'per row: as many renewed as the statement');
SELECT is(:'by_rows'::text, :'by_statement'::text, 'per row: the same invoices (tax, detail) and lines as the statement');

SELECT * FROM finish();
ROLLBACK;
