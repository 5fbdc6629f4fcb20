-- 590_refund_webhooks: a provider's refund event is applied only to the refund it is about
-- (db/functions/59_refund_webhooks.sql; issue 27, finding 1): refund id once known, amount,
-- currency and charge must all be given and match; a FAILED after SUCCEEDED is only looked up.
BEGIN;
SELECT plan(18);
SET LOCAL ROLE billing_owner;

CREATE FUNCTION pg_temp.sid(p_key text) RETURNS bigint LANGUAGE plpgsql IMMUTABLE AS
$$ BEGIN RETURN (SELECT subscription_id FROM billing.subscription_request WHERE idempotency_key = p_key); END $$;
CREATE FUNCTION pg_temp.inv(p_key text) RETURNS bigint LANGUAGE plpgsql IMMUTABLE AS
$$ DECLARE v_sub bigint := pg_temp.sid(p_key);
   BEGIN RETURN (SELECT max(id) FROM billing.invoice WHERE subscription_id = v_sub AND kind = 'INITIAL'); END $$;
CREATE FUNCTION pg_temp.ns() RETURNS text LANGUAGE plpgsql IMMUTABLE AS
$$ BEGIN RETURN (SELECT key_namespace FROM billing.installation); END $$;

SELECT billing.upsert_plan('RW_M', 1599, 'USD', 'MONTH');
SELECT billing.create_subscription('t59-' || g, g, 'RW_M', '2044-06-01Z') FROM generate_series(59001, 59002) g;
SELECT count(billing.record_payment_result(c.idempotency_key, 'SUCCEEDED', 'pi_' || c.customer_id, NULL, '2044-06-01Z'))
  FROM billing.claim_charges('t59', 10, interval '5 minutes', '2044-06-01Z') c;
CREATE TEMP TABLE r59 AS
SELECT (billing.refund_invoice(pg_temp.inv('t59-' || g), 1599, NULL, '2044-06-02Z')).id AS id, g AS customer
  FROM generate_series(59001, 59002) g;
CREATE FUNCTION pg_temp.key(p_customer bigint) RETURNS text LANGUAGE plpgsql IMMUTABLE AS
$$ BEGIN RETURN pg_temp.ns() || '-ref-' || (SELECT id FROM r59 WHERE customer = p_customer); END $$;
CREATE FUNCTION pg_temp.refund(p_customer bigint) RETURNS TABLE (status text, provider_reference text, recheck boolean)
LANGUAGE plpgsql AS
$$ DECLARE v_id bigint := (SELECT id FROM r59 WHERE customer = p_customer);
   BEGIN RETURN QUERY SELECT r.status, r.provider_reference, r.recheck_at IS NOT NULL FROM billing.refund r
                       WHERE r.customer_id = p_customer AND r.id = v_id; END $$;
-- (the invoice id computed first: on Citus a temporary function cannot run on a worker)
CREATE FUNCTION pg_temp.refunded(p_customer bigint) RETURNS bigint LANGUAGE plpgsql AS
$$ DECLARE v_inv bigint := pg_temp.inv('t59-' || p_customer);
   BEGIN RETURN (SELECT amount_refunded FROM billing.invoice WHERE customer_id = p_customer AND id = v_inv); END $$;
CREATE FUNCTION pg_temp.reviews(p_customer bigint) RETURNS bigint LANGUAGE plpgsql AS
$$ DECLARE v_inv bigint := pg_temp.inv('t59-' || p_customer);
   BEGIN RETURN (SELECT count(*) FROM billing.outbox_event WHERE event_type = 'RefundReviewRequired'
                    AND aggregate_id = v_inv); END $$;

-- The finding: a genuine event about ANOTHER refund (re_OTHER, 999999 EUR) carrying our key.
SELECT is(billing.apply_refund_webhook('evt-1', pg_temp.key(59001), 'SUCCEEDED', 're_OTHER', 999999, 'EUR', 'pi_other',
                                       NULL, '2044-06-02 00:01Z'), 'REVIEW', 'another refund''s success is not applied');
SELECT results_eq($$SELECT * FROM pg_temp.refund(59001)$$, $$VALUES ('REQUESTED', NULL::text, false)$$,
                  'our refund is untouched');
SELECT is(pg_temp.reviews(59001), 1::bigint, 'RefundReviewRequired');
SELECT is(billing.apply_refund_webhook('evt-1', pg_temp.key(59001), 'SUCCEEDED', 're_OTHER', 999999, 'EUR', 'pi_other',
                                       NULL, '2044-06-02 00:02Z'), 'REVIEW', 'the same event again...');
SELECT is(pg_temp.reviews(59001), 1::bigint, '...is reviewed once');
SELECT is(billing.apply_refund_webhook('evt-2', pg_temp.key(59001), 'SUCCEEDED', 're_59001', 1599, 'USD', NULL,
                                       NULL, '2044-06-02 00:03Z'), 'REVIEW', 'a field missing: not applied');
SELECT is(billing.apply_refund_webhook('evt-3', pg_temp.key(59001), 'SUCCEEDED', 're_59001', 1000, 'USD', 'pi_59001',
                                       NULL, '2044-06-02 00:04Z'), 'REVIEW', 'another amount: not applied');
SELECT is(billing.apply_refund_webhook('evt-4', pg_temp.key(59001), 'SUCCEEDED', 're_59001', 1599, 'USD', 'pi_59001',
                                       NULL, '2044-06-02 00:05Z'), 'APPLIED', 'the refund''s own success is applied');
SELECT results_eq($$SELECT * FROM pg_temp.refund(59001)$$, $$VALUES ('SUCCEEDED', 're_59001', false)$$,
                  'SUCCEEDED, its provider id known from now on');
SELECT is(pg_temp.refunded(59001), 1599::bigint, 'amount_refunded counts it');

-- A third refund's failure, or a failure for ours: never applied on the event's word.
SELECT is(billing.apply_refund_webhook('evt-5', pg_temp.key(59001), 'FAILED', 're_THIRD', 1599, 'USD', 'pi_59001',
                                       'lost_or_stolen_card', '2044-06-02 00:06Z'), 'REVIEW',
          'another refund id than ours (now known): not applied');
SELECT is(billing.apply_refund_webhook('evt-6', pg_temp.key(59001), 'FAILED', 're_59001', 1599, 'USD', 'pi_59001',
                                       'lost_or_stolen_card', '2044-06-02 00:07Z'), 'RECHECK',
          'our own refund said failed after it succeeded: looked up, not applied');
SELECT results_eq($$SELECT * FROM pg_temp.refund(59001)$$, $$VALUES ('SUCCEEDED', 're_59001', true)$$,
                  'still SUCCEEDED, marked for the worker''s look-up');
SELECT is(pg_temp.refunded(59001), 1599::bigint, 'and still counted: the same 1,599 cannot be asked again');
SELECT pg_temp.inv('t59-59001') AS inv59001 \gset
SELECT throws_ok(format('SELECT billing.refund_invoice(%s, 1, NULL, %L)', :inv59001, '2044-06-02 00:08Z'),
                 'BL422', NULL, 'nothing left to refund');
SELECT is((SELECT count(*) FROM billing.claim_refund_rechecks(10, interval '5 minutes', '2044-06-02 00:09Z')
            WHERE customer_id = 59001 AND lookup), 1::bigint, 'the worker is handed it for a look-up');
-- The provider's own answer (the worker's look-up) decides.
SELECT billing.record_refund_result(pg_temp.key(59001), 'SUCCEEDED', 're_59001', NULL, '2044-06-02 00:10Z');
SELECT results_eq($$SELECT * FROM pg_temp.refund(59001)$$, $$VALUES ('SUCCEEDED', 're_59001', false)$$,
                  'the provider says it succeeded: the recheck ends, nothing changed');
SELECT throws_ok($$SELECT billing.apply_refund_webhook('evt-7', 'nope-ref-1', 'SUCCEEDED', 're_x', 1, 'USD', 'pi_x',
                                                       NULL, '2044-06-02 00:11Z')$$, 'BL404', NULL, 'an unknown key: BL404');

SELECT * FROM finish();
ROLLBACK;
