-- 100_periods: period_end counts boundaries from the anchor in the customer's zone.
BEGIN;
SELECT plan(24);

-- Month ends clamp without drift: Jan 31 -> Feb 28, Mar 31, Apr 30, May 31 ... Jan 31.
SELECT is(billing.period_end('2026-01-31 15:00Z', 'MONTH', 1, 1, 'UTC'), '2026-02-28 15:00Z'::timestamptz, 'Jan 31 + 1 month = Feb 28');
SELECT is(billing.period_end('2026-01-31 15:00Z', 'MONTH', 1, 2, 'UTC'), '2026-03-31 15:00Z'::timestamptz, 'boundary 2 is Mar 31, not Mar 28');
SELECT is(billing.period_end('2026-01-31 15:00Z', 'MONTH', 1, 3, 'UTC'), '2026-04-30 15:00Z'::timestamptz, 'boundary 3 is Apr 30');
SELECT is(billing.period_end('2026-01-31 15:00Z', 'MONTH', 1, 12, 'UTC'), '2027-01-31 15:00Z'::timestamptz, 'boundary 12 is Jan 31 again');
SELECT is(billing.period_end('2026-01-31 15:00Z', 'MONTH', 1, 0, 'UTC'), '2026-01-31 15:00Z'::timestamptz, 'boundary 0 is the anchor');
-- Leap years.
SELECT is(billing.period_end('2024-01-31 00:00Z', 'MONTH', 1, 1, 'UTC'), '2024-02-29 00:00Z'::timestamptz, 'Jan 31 2024 + 1 month = Feb 29');
SELECT is(billing.period_end('2024-02-29 10:00Z', 'YEAR', 1, 1, 'UTC'), '2025-02-28 10:00Z'::timestamptz, 'Feb 29 + 1 year = Feb 28');
SELECT is(billing.period_end('2024-02-29 10:00Z', 'YEAR', 1, 4, 'UTC'), '2028-02-29 10:00Z'::timestamptz, 'Feb 29 + 4 years = Feb 29');
SELECT is(billing.period_end('2023-03-29 10:00Z', 'MONTH', 1, 11, 'UTC'), '2024-02-29 10:00Z'::timestamptz, 'Mar 29 + 11 months in a leap year = Feb 29');
-- Interval counts, weeks and days.
SELECT is(billing.period_end('2025-11-30 08:00Z', 'MONTH', 3, 1, 'UTC'), '2026-02-28 08:00Z'::timestamptz, 'quarterly from Nov 30: Feb 28');
SELECT is(billing.period_end('2025-11-30 08:00Z', 'MONTH', 3, 2, 'UTC'), '2026-05-30 08:00Z'::timestamptz, 'quarterly from Nov 30: May 30, no drift');
SELECT is(billing.period_end('2026-01-01 08:00Z', 'WEEK', 2, 3, 'UTC'), '2026-02-12 08:00Z'::timestamptz, 'every 2 weeks, third boundary');
SELECT is(billing.period_end('2026-01-01 08:00Z', 'DAY', 10, 1, 'UTC'), '2026-01-11 08:00Z'::timestamptz, 'every 10 days');
-- DST, America/New_York (EST -05 until Mar 8 2026, EDT -04 until Nov 1 2026): 09:00 local stays 09:00.
SELECT is(billing.period_end('2026-02-15 14:00Z', 'MONTH', 1, 1, 'America/New_York'), '2026-03-15 13:00Z'::timestamptz,
          'New York: 09:00 EST to 09:00 EDT (one hour earlier in UTC)');
SELECT is(billing.period_end('2026-03-01 14:00Z', 'DAY', 1, 14, 'America/New_York'), '2026-03-15 13:00Z'::timestamptz,
          'New York: daily periods keep 09:00 across the spring change');
SELECT is(billing.period_end('2026-10-15 13:00Z', 'MONTH', 1, 1, 'America/New_York'), '2026-11-15 14:00Z'::timestamptz,
          'New York: 09:00 EDT to 09:00 EST in the autumn');
SELECT is(billing.period_end('2026-02-08 07:30Z', 'MONTH', 1, 1, 'America/New_York'), '2026-03-08 07:30Z'::timestamptz,
          'New York: 02:30 does not exist on Mar 8; it moves forward by the gap (03:30 EDT)');
SELECT is(billing.period_end('2026-10-01 05:30Z', 'MONTH', 1, 1, 'America/New_York'), '2026-11-01 06:30Z'::timestamptz,
          'New York: 01:30 exists twice on Nov 1; the later (standard time) instant is used');
-- DST, America/Sao_Paulo historic (DST began 2018-11-04 00:00 -> 01:00, -03 to -02).
SELECT is(billing.period_end('2018-10-04 15:00Z', 'MONTH', 1, 1, 'America/Sao_Paulo'), '2018-11-04 14:00Z'::timestamptz,
          'Sao Paulo 2018: 12:00 local kept when DST begins');
SELECT is(billing.period_end('2018-10-04 03:30Z', 'MONTH', 1, 1, 'America/Sao_Paulo'), '2018-11-04 03:30Z'::timestamptz,
          'Sao Paulo 2018: 00:30 on the DST day does not exist; 01:30 -02 is used');
SELECT is(billing.period_end('2018-01-31 15:00Z', 'MONTH', 1, 1, 'America/Sao_Paulo'), '2018-02-28 16:00Z'::timestamptz,
          'Sao Paulo 2018: Jan 31 13:00 -02 to Feb 28 13:00 -03 (clamp and DST end together)');

-- Invalid input.
SELECT throws_ok($$SELECT billing.period_end('2026-01-31Z', 'FORTNIGHT', 1, 1, 'UTC')$$, 'BL422', NULL, 'unknown interval is BL422');
SELECT throws_ok($$SELECT billing.period_end('2026-01-31Z', 'MONTH', 0, 1, 'UTC')$$, 'BL422', NULL, 'interval count 0 is BL422');
SELECT throws_ok($$SELECT billing.period_end('2026-01-31Z', 'MONTH', 1, 1, 'Mars/Olympus')$$, 'BL422', NULL, 'unknown zone is BL422');

SELECT * FROM finish();
ROLLBACK;
