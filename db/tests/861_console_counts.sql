-- The console overview's and status_summary's counts kept by the engine's writes (migration 0310,
-- billing.overview_count, 70_stats.sql) equal the same figures counted from the rows, after every
-- kind of write: signups, charges paid and declined, renewals, cancellations (now and at the
-- period's end), a pause, a void, a fold of the deltas, a TRUNCATE. On Citus the counts are not
-- kept and both sides count rows.
BEGIN;
SELECT plan(25);
SET LOCAL ROLE billing_owner;

CREATE FUNCTION pg_temp.sid(p_key text) RETURNS bigint LANGUAGE plpgsql IMMUTABLE AS
$$ BEGIN RETURN (SELECT subscription_id FROM billing.subscription_request WHERE idempotency_key = p_key); END $$;
CREATE FUNCTION pg_temp.pay_key(p_invoice bigint, p_try integer) RETURNS text LANGUAGE sql AS
$$ SELECT (SELECT key_namespace FROM billing.installation) || '-inv-' || p_invoice || '-try-' || p_try $$;
-- The overview and `billing status` as they are read (kept counts on a single node) against the rows counted.
CREATE FUNCTION pg_temp.same(p_now timestamptz, p_what text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_kept jsonb := billing._console_overview(p_now, NOT billing._overview_counts_kept());
    v_rows jsonb := billing._console_overview(p_now, true);
BEGIN
    RETURN is(v_kept, v_rows, p_what || ': the overview''s kept counts equal the rows counted') || E'\n'
        || is((SELECT row(s.*)::text FROM billing._status_summary(p_now, NOT billing._overview_counts_kept()) s),
              (SELECT row(s.*)::text FROM billing._status_summary(p_now, true) s),
              p_what || ': billing status''s kept counts equal the rows counted');
END
$$;
-- Every invoice's payment key claimed at p_now, then paid (or declined: those of p_decline).
CREATE FUNCTION pg_temp.charge(p_now timestamptz, p_decline bigint[]) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    v_claim record;
    v_n integer := 0;
BEGIN
    FOR v_claim IN SELECT * FROM billing.claim_charges('w861', 100, interval '5 minutes', p_now) LOOP
        PERFORM billing.record_payment_result(v_claim.idempotency_key,
                    CASE WHEN v_claim.customer_id = ANY (p_decline) THEN 'DECLINED' ELSE 'SUCCEEDED' END,
                    CASE WHEN v_claim.customer_id = ANY (p_decline) THEN NULL ELSE 'ch_' || v_claim.attempt_id END,
                    CASE WHEN v_claim.customer_id = ANY (p_decline) THEN 'insufficient_funds' END,
                    p_now + interval '1 minute');
        v_n := v_n + 1;
    END LOOP;
    RETURN v_n;
END
$$;

SELECT ok(billing._overview_counts_kept() <> billing._distributed('billing.customer'),
          'the counts are kept on a single PostgreSQL, not on Citus');

SELECT billing.upsert_plan('OC_M', 3000, 'EUR', 'MONTH');
SELECT billing.upsert_plan('OC_Y', 24000, 'USD', 'YEAR');
SELECT billing.upsert_customer(c, 'UTC') FROM generate_series(86101, 86108) c;
SELECT billing.create_subscription('oc-' || c, c, CASE WHEN c % 3 = 0 THEN 'OC_Y' ELSE 'OC_M' END, '2026-07-01 10:00Z')
  FROM generate_series(86101, 86106) c;
SELECT billing.create_subscription('oc-86107', 86107, 'OC_M', '2026-07-01 10:00Z', 14);  -- a trial
SELECT pg_temp.same('2026-07-01 12:00Z', 'after signups');

SELECT pg_temp.charge('2026-07-01 12:00Z', ARRAY[86102, 86105]::bigint[]);
SELECT pg_temp.same('2026-07-01 12:05Z', 'after charges paid and declined');
SELECT is((billing._console_overview('2026-07-01 12:05Z', true) -> 'dunning' ->> 'in_dunning')::int >= 2, true,
          'two invoices in dunning (the figure is not empty)');

SELECT billing.cancel_subscription(pg_temp.sid('oc-86103'), true, '2026-07-02Z');
SELECT billing.cancel_subscription(pg_temp.sid('oc-86104'), false, '2026-07-02Z');
SELECT billing.pause_subscription(pg_temp.sid('oc-86106'), NULL, '2026-07-02Z');
SELECT pg_temp.same('2026-07-02 00:01Z', 'after cancellations now and at period end, a pause');

SELECT pg_temp.charge('2026-07-03Z', ARRAY[86105]::bigint[]);   -- the retries: one recovers, one declines again
SELECT pg_temp.same('2026-07-03 00:05Z', 'after the retries');

SELECT billing.create_due_invoices(100, '2026-08-01 10:00Z');
SELECT billing.create_due_invoices(100, '2026-08-01 10:00Z');
SELECT pg_temp.same('2026-08-01 10:00Z', 'after the renewals (renewed today, period ended at period end)');
SELECT is((billing._console_overview('2026-08-01 10:00Z', true) -> 'renewals' ->> 'renewed_today')::int >= 1, true,
          'renewals made today are counted');
SELECT pg_temp.charge('2026-08-01 10:30Z', ARRAY[86101]::bigint[]);
SELECT pg_temp.same('2026-08-01 11:00Z', 'after the renewals'' charges');
SELECT pg_temp.same('2026-08-20Z', 'later in the month (the 30-day window moves)');

SELECT id AS void_me FROM billing.invoice WHERE customer_id = 86101 AND status = 'OPEN' \gset
SELECT billing.void_invoice(:void_me, 'goodwill', '2026-08-02Z');
SELECT pg_temp.same('2026-08-02 00:01Z', 'after a void');

SELECT billing._overview_count_fold();
SELECT is_empty($$SELECT 1 FROM billing.overview_count c GROUP BY c.subject, c.status, c.flag, c.kind, c.due_day
                  HAVING count(*) > 1$$, 'a fold leaves one row per key');
SELECT pg_temp.same('2026-08-02 00:01Z', 'after a fold');
SELECT is(billing.console_overview('2026-08-02 00:01Z') - 'counted', billing._console_overview('2026-08-02 00:01Z', true),
          'console_overview shows the counted figures');

-- A wiped table counts nothing (the model test's reset truncates every customer table).
CREATE FUNCTION pg_temp.wipe() RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF billing._overview_counts_kept() THEN
        TRUNCATE billing.subscription, billing.invoice CASCADE;
    END IF;
END
$$;
SELECT pg_temp.wipe();
SELECT pg_temp.same('2026-08-02 00:02Z', 'after a TRUNCATE');

SELECT * FROM finish();
ROLLBACK;
