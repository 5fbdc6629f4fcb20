-- The run's figures (db/functions/79_figures.sql): figures_by_hour, figures_counts, figures_revenue.
BEGIN;
SELECT plan(9);

SET LOCAL ROLE billing_owner;

CREATE FUNCTION pg_temp.pay_key(p_invoice bigint, p_try integer) RETURNS text LANGUAGE sql AS
$$ SELECT (SELECT key_namespace FROM billing.installation) || '-inv-' || p_invoice || '-try-' || p_try $$;

SELECT billing.upsert_plan('FG_M', 3000, 'EUR', 'MONTH');
SELECT billing.create_subscription('fg-1', 7901, 'FG_M', '2026-05-01 10:20Z');
SELECT billing.create_subscription('fg-2', 7902, 'FG_M', '2026-05-01 11:40Z');
SELECT invoice_id AS i1 FROM billing.claim_charges('w', 1, interval '5 minutes', '2026-05-01 12:00Z') \gset
SELECT billing.record_payment_result(pg_temp.pay_key(:i1, 0), 'SUCCEEDED', 'ch_fg', NULL, '2026-05-01 12:01Z');

SELECT results_eq($$SELECT hour, key, n FROM billing.figures_by_hour() WHERE figure = 'due' ORDER BY hour$$,
                  $$VALUES ('2026-05-01 10:00Z'::timestamptz, 'INITIAL', 1::bigint),
                           ('2026-05-01 11:00Z'::timestamptz, 'INITIAL', 1::bigint)$$,
                  'due: each INITIAL invoice in the UTC hour it fell due');
SET LOCAL TimeZone = 'Asia/Kolkata';
SELECT is((SELECT min(hour) FROM billing.figures_by_hour() WHERE figure = 'due'), '2026-05-01 10:00Z'::timestamptz,
          'hours are UTC hours whatever the session''s time zone (Kolkata is +05:30)');
RESET TimeZone;
SELECT results_eq($$SELECT hour, key, n FROM billing.figures_by_hour() WHERE figure = 'attempts'$$,
                  $$VALUES ('2026-05-01 11:00Z'::timestamptz, 'FIRST', 1::bigint)$$,
                  'attempts: a claim at 12:00 sharp counts in the hour that ends there');
SELECT results_eq($$SELECT key, key2, n FROM billing.figures_counts() WHERE figure = 'invoices' ORDER BY key2$$,
                  $$VALUES ('INITIAL', 'OPEN', 1::bigint), ('INITIAL', 'PAID', 1::bigint)$$,
                  'invoices by kind and status');
SELECT results_eq($$SELECT key, n FROM billing.figures_counts() WHERE figure = 'outcomes'$$,
                  $$VALUES ('SUCCEEDED', 1::bigint)$$, 'attempt outcomes');
SELECT is((SELECT n FROM billing.figures_counts() WHERE figure = 'charged'), 1::bigint,
          'charged: invoices with an attempt');
SELECT is((SELECT count(*) FROM billing.figures_counts() WHERE key IS NULL AND key2 IS NULL), 15::bigint,
          'the fifteen single counts are always there');
SELECT results_eq($$SELECT currency, collected, paid, open FROM billing.figures_revenue()$$,
                  $$VALUES ('EUR', 3000::numeric, 1::bigint, 3000::numeric)$$,
                  'revenue per currency, in minor units');
SELECT ok(has_function_privilege('billing_readonly', 'billing.figures_counts()', 'EXECUTE')
          AND NOT has_function_privilege('billing_api', 'billing.figures_counts()', 'EXECUTE'),
          'granted to billing_readonly, not to the API');

SELECT * FROM finish();
ROLLBACK;
