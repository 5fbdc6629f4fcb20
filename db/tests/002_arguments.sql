-- Argument checks: every API function taking p_now validates it through billing._check_now,
-- the one place where a rule about the clock lives (the claims through billing._check_claim, which calls it).
BEGIN;
SELECT plan(6);

SELECT is(
    (SELECT coalesce(string_agg(p.oid::regprocedure::text, ', ' ORDER BY p.proname), '')
       FROM pg_proc p
      WHERE p.pronamespace = 'billing'::regnamespace
        AND p.proname !~ '^_'
        AND 'p_now' = ANY (p.proargnames)
        -- directly, or through the claims' one check, billing._check_claim or _check_claim_args (10_util.sql)
        AND p.prosrc !~ 'billing\._check_now\(p_now\)|billing\._check_claim(_args)?\([^)]*p_now'),
    '',
    'every API function taking p_now calls billing._check_now(p_now)');

SELECT ok((SELECT count(*) FROM pg_proc p WHERE p.pronamespace = 'billing'::regnamespace
            AND p.proname !~ '^_' AND 'p_now' = ANY (p.proargnames)) >= 13,
          'the check above saw the API functions taking p_now');

SELECT throws_ok($$SELECT billing._check_now(NULL)$$, 'BL422', NULL, 'NULL p_now: BL422');
SELECT throws_ok($$SELECT billing._check_now('infinity')$$, 'BL422', NULL, 'infinite p_now: BL422');
SELECT throws_ok($$SELECT * FROM billing.claim_charges('w', 10, '5 minutes', NULL)$$, 'BL422', NULL,
                 'claim_charges with a NULL p_now: BL422');
SELECT is(billing._check_now('2026-01-01Z'), '2026-01-01Z'::timestamptz, 'a finite p_now passes through');

SELECT * FROM finish();
ROLLBACK;
