-- 580_refund_lookups: a refund whose fate is unknown is looked up by the worker, never sent twice
-- (db/functions/57_refunds.sql, docs/providers.md). Key lifetime 23 hours, lookup margin 1 hour.
BEGIN;
SELECT plan(16);

-- One user for the fixtures and the API's SECURITY DEFINER calls: on Citus a transaction may not
-- touch a placement another user modified in it (docs/scaling.md).
SET LOCAL ROLE billing_owner;

-- PL/pgSQL, and IMMUTABLE for the ids: see 510_charging (on Citus a SQL function reading every shard
-- with a parameter cannot be planned, and a temporary function's call must be folded in on the
-- coordinator).
CREATE FUNCTION pg_temp.sid(p_key text) RETURNS bigint LANGUAGE plpgsql IMMUTABLE AS
$$ BEGIN RETURN (SELECT subscription_id FROM billing.subscription_request WHERE idempotency_key = p_key); END $$;
CREATE FUNCTION pg_temp.inv(p_key text) RETURNS bigint LANGUAGE plpgsql IMMUTABLE AS
$$ DECLARE v_sub bigint := pg_temp.sid(p_key);
   BEGIN RETURN (SELECT max(id) FROM billing.invoice WHERE subscription_id = v_sub AND kind = 'INITIAL'); END $$;
CREATE FUNCTION pg_temp.ns() RETURNS text LANGUAGE plpgsql IMMUTABLE AS
$$ BEGIN RETURN (SELECT key_namespace FROM billing.installation); END $$;

SELECT billing.upsert_plan('RL_M', 3000, 'USD', 'MONTH');
SELECT billing.create_subscription('t43-' || g, g, 'RL_M', '2043-06-01Z') FROM generate_series(43001, 43002) g;
SELECT count(billing.record_payment_result(c.idempotency_key, 'SUCCEEDED', 'ch_' || c.customer_id, NULL, '2043-06-01Z'))
  FROM billing.claim_charges('t43', 10, interval '5 minutes', '2043-06-01Z') c;
CREATE TEMP TABLE r43 AS
SELECT (billing.refund_invoice(pg_temp.inv('t43-' || g), 1000, NULL, '2043-06-02Z')).id AS id, g AS customer
  FROM generate_series(43001, 43002) g;
CREATE FUNCTION pg_temp.rid(p_customer bigint) RETURNS bigint LANGUAGE plpgsql IMMUTABLE AS
$$ BEGIN RETURN (SELECT id FROM r43 WHERE customer = p_customer); END $$;
CREATE FUNCTION pg_temp.claim(p_at timestamptz, p_customer bigint) RETURNS TABLE (key text, lookup boolean) LANGUAGE sql AS
$$ SELECT idempotency_key, lookup FROM billing.claim_refunds('t43', 10, interval '5 minutes', p_at) WHERE customer_id = p_customer $$;

SELECT results_eq($$SELECT * FROM pg_temp.claim('2043-06-02Z', 43001)$$,
                  $$VALUES (pg_temp.ns() || '-ref-' || pg_temp.rid(43001), false)$$, 'a new refund is sent');
SELECT billing.record_refund_result(pg_temp.ns() || '-ref-' || pg_temp.rid(43001), 'UNKNOWN', NULL, 'timeout', '2043-06-02 00:01Z');
SELECT results_eq($$SELECT * FROM pg_temp.claim('2043-06-02 00:16Z', 43001)$$,
                  $$VALUES (pg_temp.ns() || '-ref-' || pg_temp.rid(43001), false)$$,
                  'UNKNOWN, well within the key''s life: the same key is sent again (the provider answers the first call)');
SELECT results_eq($$SELECT * FROM pg_temp.claim('2043-06-02 22:00Z', 43001)$$,
                  $$VALUES (pg_temp.ns() || '-ref-' || pg_temp.rid(43001), true)$$,
                  'within the lookup margin of the key''s end: looked up, not sent');
SELECT results_eq($$SELECT * FROM pg_temp.claim('2043-06-03 01:00Z', 43001)$$,
                  $$VALUES (pg_temp.ns() || '-ref-' || pg_temp.rid(43001), true)$$,
                  'past the key''s end: looked up');
SELECT results_eq($$SELECT status, review_reason, next_attempt_at FROM billing.refund WHERE id = pg_temp.rid(43001)$$,
                  $$VALUES ('REQUESTED', 'KEY_EXPIRED', '2043-06-03 02:00Z'::timestamptz)$$,
                  'in review, the next look-up in an hour');
SELECT is((SELECT count(*) FROM billing.outbox_event WHERE event_type = 'RefundReview' AND aggregate_id = pg_temp.inv('t43-43001')),
          1::bigint, 'RefundReview');
SELECT billing.record_refund_result(pg_temp.ns() || '-ref-' || pg_temp.rid(43001), 'UNKNOWN', NULL, 'lookup failed', '2043-06-03 01:00Z');
SELECT is((SELECT count(*)::int FROM pg_temp.claim('2043-06-03 01:30Z', 43001)), 0, 'not before the hour');
SELECT results_eq($$SELECT * FROM pg_temp.claim('2043-06-03 02:00Z', 43001)$$,
                  $$VALUES (pg_temp.ns() || '-ref-' || pg_temp.rid(43001), true)$$, 'looked up again every hour');
SELECT is((SELECT count(*) FROM billing.outbox_event WHERE event_type = 'RefundReview' AND aggregate_id = pg_temp.inv('t43-43001')),
          1::bigint, 'RefundReview once');

-- The provider never saw the key: a new key, sent at once.
SELECT billing.record_refund_result(pg_temp.ns() || '-ref-' || pg_temp.rid(43001), 'NOT_FOUND', NULL, NULL, '2043-06-03 02:00Z');
SELECT results_eq($$SELECT status, review_reason, idempotency_key, next_attempt_at FROM billing.refund WHERE id = pg_temp.rid(43001)$$,
                  $$VALUES ('REQUESTED', NULL::text, pg_temp.ns() || '-ref-' || pg_temp.rid(43001) || '-try-1',
                            '2043-06-03 02:00Z'::timestamptz)$$,
                  'NOT_FOUND: out of review with a new key, due at once');
SELECT results_eq($$SELECT * FROM pg_temp.claim('2043-06-03 02:00Z', 43001)$$,
                  $$VALUES (pg_temp.ns() || '-ref-' || pg_temp.rid(43001) || '-try-1', false)$$, 'and sent');
SELECT throws_ok($$SELECT billing.record_refund_result(pg_temp.ns() || '-ref-' || pg_temp.rid(43001), 'SUCCEEDED', 're', NULL, '2043-06-03 03:00Z')$$,
                 'BL404', NULL, 'the old key is no refund''s any more');
SELECT billing.record_refund_result(pg_temp.ns() || '-ref-' || pg_temp.rid(43001) || '-try-1', 'SUCCEEDED', 're_1', NULL, '2043-06-03 02:01Z');
SELECT is((SELECT amount_refunded FROM billing.invoice WHERE id = pg_temp.inv('t43-43001')), 1000::bigint, 'refunded once');

-- A look-up that finds it settles it; a failure reported after success takes it back.
SELECT count(*) FROM pg_temp.claim('2043-06-02Z', 43002);
SELECT count(*) FROM pg_temp.claim('2043-06-03 01:00Z', 43002);
SELECT billing.record_refund_result(pg_temp.ns() || '-ref-' || pg_temp.rid(43002), 'SUCCEEDED', 're_2', NULL, '2043-06-03 01:00Z');
SELECT results_eq($$SELECT r.status, i.amount_refunded FROM billing.refund r JOIN billing.invoice i ON i.customer_id = r.customer_id AND i.id = r.invoice_id WHERE r.id = pg_temp.rid(43002)$$,
                  $$VALUES ('SUCCEEDED', 1000::bigint)$$, 'a refund in review found by its look-up: SUCCEEDED');
SELECT billing.record_refund_result(pg_temp.ns() || '-ref-' || pg_temp.rid(43002), 'FAILED', 're_2', 'lost_or_stolen_card', '2043-06-05Z');
SELECT results_eq($$SELECT r.status, r.failure_reason, i.amount_refunded FROM billing.refund r JOIN billing.invoice i ON i.customer_id = r.customer_id AND i.id = r.invoice_id WHERE r.id = pg_temp.rid(43002)$$,
                  $$VALUES ('FAILED', 'lost_or_stolen_card', 0::bigint)$$,
                  'reported failed after it succeeded: FAILED, the money counts as kept again');
SELECT is((SELECT count(*) FROM billing.outbox_event WHERE event_type = 'RefundFailed' AND aggregate_id = pg_temp.inv('t43-43002')),
          1::bigint, 'with RefundFailed');

SELECT * FROM finish();
ROLLBACK;
