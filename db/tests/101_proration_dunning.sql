-- 101_proration_dunning: the seed's two pure rules, exactly.
BEGIN;
SELECT plan(16);

-- Seed: 100000 -> 300000 half way through 2026-10-01..2026-10-31 gives 100000.
SELECT is(billing.proration_amount(100000, 300000, '2026-10-01 00:00Z', '2026-10-31 00:00Z', '2026-10-16 00:00Z'),
          100000::bigint, 'seed: upgrade at half period charges half of the difference');
SELECT is(billing.proration_amount(300000, 100000, '2026-10-01 00:00Z', '2026-10-31 00:00Z', '2026-10-16 00:00Z'),
          -100000::bigint, 'downgrade at half period gives a credit of half the difference');
SELECT is(billing.proration_amount(100000, 300000, '2026-10-01 00:00Z', '2026-10-31 00:00Z', '2026-10-01 00:00Z'),
          200000::bigint, 'change at period start: the whole difference');
SELECT is(billing.proration_amount(100000, 300000, '2026-10-01 00:00Z', '2026-10-31 00:00Z', '2026-10-31 00:00Z'),
          0::bigint, 'change at period end: nothing');
-- floor of each term separately, in whole seconds: 999 * 1/3 and 1000 * 1/3.
SELECT is(billing.proration_amount(999, 1000, '2026-01-01 00:00:00Z', '2026-01-01 00:00:03Z', '2026-01-01 00:00:02.9Z'),
          floor(1000 * 1 / 3.0)::bigint - floor(999 * 1 / 3.0)::bigint, 'floor per term, whole seconds');
SELECT is(billing.proration_amount(0, 9223372036854775, '2026-01-01Z', '2027-01-01Z', '2026-07-02 12:00Z'),
          4611686018427387::bigint, 'no overflow for large prices');
SELECT throws_ok($$SELECT billing.proration_amount(1, 2, '2026-10-31Z', '2026-10-01Z', '2026-10-15Z')$$,
                 'BL422', NULL, 'an empty period is BL422');
SELECT throws_ok($$SELECT billing.proration_amount(1, 2, '2026-10-01Z', '2026-10-31Z', '2026-11-15Z')$$,
                 'BL422', NULL, 'a change outside the period is BL422');
SELECT throws_ok($$SELECT billing.proration_amount(-1, 2, '2026-10-01Z', '2026-10-31Z', '2026-10-15Z')$$,
                 'BL422', NULL, 'a negative price is BL422');

-- Seed: attempt 1 lands in [now+1d, now+1d+2h); attempt 4 gives NULL.
SELECT ok(billing.dunning_next_attempt(1, 42, '2026-10-01 00:00Z') >= '2026-10-02 00:00Z'
      AND billing.dunning_next_attempt(1, 42, '2026-10-01 00:00Z') < '2026-10-02 02:00Z',
          'seed: first retry one day later plus jitter below 2 hours');
SELECT is(billing.dunning_next_attempt(4, 42, '2026-10-01 00:00Z'), NULL, 'seed: the fourth failure has no retry');
SELECT ok((SELECT bool_and(billing.dunning_next_attempt(a, s, '2026-10-01Z')
                           - '2026-10-01Z'::timestamptz - d.delay BETWEEN interval '0' AND interval '119 minutes 59 seconds')
             FROM generate_series(1, 3) a JOIN billing.dunning_step d ON d.failed_attempts = a,
                  generate_series(-500, 500) s),
          'jitter is within [0, 120 min) for every attempt and many seeds (negative too)');
SELECT is(billing.dunning_next_attempt(2, 77, '2026-10-01Z'), billing.dunning_next_attempt(2, 77, '2026-10-01Z'),
          'jitter is deterministic for a seed and attempt');
SELECT ok((SELECT count(DISTINCT billing.dunning_next_attempt(1, s, '2026-10-01Z')) > 50 FROM generate_series(1, 100) s),
          'jitter spreads different seeds');
SELECT throws_ok($$SELECT billing.dunning_next_attempt(0, 1, '2026-10-01Z')$$, 'BL422', NULL, 'zero failed attempts is BL422');
-- The schedule lives in a table.
UPDATE billing.dunning_step SET delay = interval '2 days', max_jitter = interval '0' WHERE failed_attempts = 1;
SELECT is(billing.dunning_next_attempt(1, 42, '2026-10-01 00:00Z'), '2026-10-03 00:00Z'::timestamptz,
          'the schedule is configurable in billing.dunning_step');

SELECT * FROM finish();
ROLLBACK;
