-- The console's '@domain' search (84_console_records, migration 0660) with hostile input (review6):
-- LIKE's wildcards and escape are plain characters there (starts_with and ranges, no LIKE), a case
-- differs nothing, a domain that merely starts with the one asked is found too (documented: '@exam'
-- while typing), and a long run of wildcards finds nothing.
BEGIN;
SELECT plan(7);
SET LOCAL ROLE billing_owner;

SELECT billing.upsert_customer(c) FROM generate_series(8631, 8636) c;
SELECT billing.set_customer_details(8631, 'P', 'x@a%b.org', '1 Road', 'Town', '1000', NULL, 'DE', NULL);
SELECT billing.set_customer_details(8632, 'U', 'x@a_b.org', '1 Road', 'Town', '1000', NULL, 'DE', NULL);
SELECT billing.set_customer_details(8633, 'X', 'x@axb.org', '1 Road', 'Town', '1000', NULL, 'DE', NULL);
SELECT billing.set_customer_details(8634, 'B', 'x@a\b.org', '1 Road', 'Town', '1000', NULL, 'DE', NULL);
SELECT billing.set_customer_details(8635, 'E', 'x@Example.org', '1 Road', 'Town', '1000', NULL, 'DE', NULL);
SELECT billing.set_customer_details(8636, 'F', 'x@example.org.evil.com', '1 Road', 'Town', '1000', NULL, 'DE', NULL);

SELECT is((SELECT array_agg(id ORDER BY id) FROM billing.console_customers('@a%', 50)), ARRAY[8631]::bigint[],
          '% is a character, not any text');
SELECT is((SELECT array_agg(id ORDER BY id) FROM billing.console_customers('@a_', 50)), ARRAY[8632]::bigint[],
          '_ is a character, not any one');
SELECT is((SELECT array_agg(id ORDER BY id) FROM billing.console_customers('@a\', 50)), ARRAY[8634]::bigint[],
          'a backslash is a character, not an escape');
SELECT is((SELECT array_agg(id ORDER BY id) FROM billing.console_customers('@a', 50)), ARRAY[8631, 8632, 8633, 8634]::bigint[],
          'the start of a domain finds every domain it starts');
SELECT is((SELECT array_agg(id ORDER BY id) FROM billing.console_customers('@EXAMPLE.ORG', 50)), ARRAY[8635, 8636]::bigint[],
          'any case; a domain that starts with the one asked is found too (the operator reads the addresses)');
SELECT is((SELECT count(*)::int FROM billing.console_customers('@' || repeat('%', 199), 50)), 0,
          'a run of wildcards finds nothing');
SELECT is((SELECT count(*)::int FROM billing.console_customers('@%', 50)), 0, 'a wildcard alone finds nothing');

SELECT * FROM finish();
ROLLBACK;
