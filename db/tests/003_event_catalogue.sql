-- 003_event_catalogue: which events each state change announces, in order, with dataschema.
BEGIN;
SET LOCAL ROLE billing_owner;  -- on Citus, reads of shards in the writers' role (see 200_plans_customers)
SELECT plan(14);

CREATE FUNCTION pg_temp.sid(p_key text) RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN
    RETURN (SELECT subscription_id FROM billing.subscription_request WHERE idempotency_key = p_key);
END
$$;
CREATE FUNCTION pg_temp.inv(p_key text, p_kind text DEFAULT 'INITIAL') RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    v_sub bigint := pg_temp.sid(p_key);
BEGIN
    RETURN (SELECT id FROM billing.invoice WHERE subscription_id = v_sub AND kind = p_kind ORDER BY id DESC LIMIT 1);
END
$$;
-- The events written since the marker, in id order: "<type> <aggregate type>".
CREATE TEMP TABLE mark (id bigint);
INSERT INTO mark VALUES (0);
CREATE FUNCTION pg_temp.since() RETURNS text[] LANGUAGE plpgsql AS $$
BEGIN
    RETURN (SELECT coalesce(array_agg(event_type || ' ' || aggregate_type ORDER BY id), '{}')
      FROM billing.outbox_event WHERE id > (SELECT id FROM mark));
END
$$;
CREATE FUNCTION pg_temp.reset() RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    UPDATE mark SET id = (SELECT coalesce(max(id), 0) FROM billing.outbox_event);
END
$$;
CREATE FUNCTION pg_temp.pay(p_key text, p_outcome text, p_now timestamptz, p_kind text DEFAULT 'INITIAL') RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_inv bigint := pg_temp.inv(p_key, p_kind);
BEGIN
    PERFORM billing.record_payment_result(
        (SELECT key_namespace FROM billing.installation) || '-inv-' || v_inv || '-try-' || (SELECT attempt_count FROM billing.invoice WHERE id = v_inv),
        p_outcome, 'ch', 'card_declined', p_now);
END
$$;

SELECT billing.upsert_plan('T_E1', 1000, 'USD', 'MONTH');
SELECT billing.upsert_plan('T_E2', 3000, 'USD', 'MONTH');

SELECT billing.create_subscription('t10-a', 10001, 'T_E1', '2026-06-01 10:00Z');
SELECT is(pg_temp.since(), ARRAY['SubscriptionCreated subscription', 'InvoiceCreated invoice'],
          'signup: SubscriptionCreated, then InvoiceCreated');
SELECT is((SELECT payload ->> 'dataschema' FROM billing.outbox_event WHERE event_type = 'InvoiceCreated'),
          'urn:billing:events:InvoiceCreated:v1', 'dataschema names the type''s schema and version');

SELECT pg_temp.reset();
SELECT billing.claim_charges('w', 10, interval '5 minutes', '2026-06-01 10:00Z');
SELECT pg_temp.pay('t10-a', 'DECLINED', '2026-06-01 10:01Z');
SELECT is(pg_temp.since(), ARRAY['InvoicePaymentFailed invoice', 'SubscriptionUpdated subscription', 'SubscriptionPastDue subscription'],
          'a decline: InvoicePaymentFailed, SubscriptionUpdated, SubscriptionPastDue');
SELECT is((SELECT payload::jsonb -> 'data' -> 'changes' FROM billing.outbox_event WHERE event_type = 'SubscriptionUpdated'
            ORDER BY id DESC LIMIT 1),
          '{"status": {"after": "PAST_DUE", "before": "ACTIVE"}}'::jsonb, 'SubscriptionUpdated holds the change before and after');

SELECT pg_temp.reset();
SELECT billing.claim_charges('w', 10, interval '5 minutes', '2026-06-03 10:00Z');
SELECT pg_temp.pay('t10-a', 'SUCCEEDED', '2026-06-03 10:01Z');
SELECT is(pg_temp.since(), ARRAY['InvoicePaid invoice', 'SubscriptionUpdated subscription', 'SubscriptionRecovered subscription'],
          'paid after the decline: InvoicePaid, SubscriptionUpdated, SubscriptionRecovered');

SELECT pg_temp.reset();
SELECT billing.change_plan(pg_temp.sid('t10-a'), 'T_E2', '2026-06-10 10:00Z');
SELECT is(pg_temp.since(), ARRAY['InvoiceCreated invoice', 'SubscriptionUpdated subscription'],
          'an upgrade: the PRORATION InvoiceCreated, then SubscriptionUpdated');
SELECT is((SELECT payload::jsonb -> 'data' -> 'changes' FROM billing.outbox_event WHERE event_type = 'SubscriptionUpdated'
            ORDER BY id DESC LIMIT 1),
          '{"planCode": {"after": "T_E2", "before": "T_E1"}}'::jsonb, 'with the plan before and after');

SELECT pg_temp.reset();
SELECT billing.change_plan(pg_temp.sid('t10-a'), 'T_E2', '2026-06-10 11:00Z');
SELECT is(pg_temp.since(), '{}'::text[], 'no change, no event');

SELECT pg_temp.reset();
SELECT billing.create_due_invoices(100, '2026-07-01 10:00Z');
SELECT is(pg_temp.since(), ARRAY['InvoiceCreated invoice'], 'a renewal: InvoiceCreated (the new period is the invoice''s)');

SELECT pg_temp.reset();
SELECT billing.cancel_subscription(pg_temp.sid('t10-a'), true, '2026-07-02 10:00Z');
SELECT is(pg_temp.since(), ARRAY['SubscriptionUpdated subscription'], 'cancel at period end: SubscriptionUpdated');
SELECT is((SELECT payload::jsonb -> 'data' -> 'changes' FROM billing.outbox_event WHERE event_type = 'SubscriptionUpdated'
            ORDER BY id DESC LIMIT 1),
          '{"cancelAtPeriodEnd": {"after": true, "before": false}}'::jsonb, 'with the flag before and after');

SELECT pg_temp.reset();
SELECT billing.cancel_subscription(pg_temp.sid('t10-a'), false, '2026-07-03 10:00Z');
SELECT is(pg_temp.since(), ARRAY['CreditNoteIssued invoice', 'SubscriptionCanceled subscription'],
          'cancel now: the renewal bills the 2 days served, the rest taken off (CreditNoteIssued, UNSERVED); June''s upgrade was served: owed as it is; then SubscriptionCanceled');

-- Dunning exhausted: the fourth decline fails the invoice and ends the subscription.
SELECT billing.create_subscription('t10-b', 10002, 'T_E1', '2026-08-01 10:00Z');
SELECT billing.claim_charges('w', 10, interval '5 minutes', '2026-08-01 10:00Z');
SELECT pg_temp.pay('t10-b', 'DECLINED', '2026-08-01 10:01Z');
SELECT billing.claim_charges('w', 10, interval '5 minutes', '2026-08-05 10:00Z');
SELECT pg_temp.pay('t10-b', 'DECLINED', '2026-08-05 10:01Z');
SELECT billing.claim_charges('w', 10, interval '5 minutes', '2026-08-15 10:00Z');
SELECT pg_temp.pay('t10-b', 'DECLINED', '2026-08-15 10:01Z');
SELECT pg_temp.reset();
SELECT billing.claim_charges('w', 10, interval '5 minutes', '2026-08-30 10:00Z');
SELECT pg_temp.pay('t10-b', 'DECLINED', '2026-08-30 10:01Z');
SELECT is(pg_temp.since(), ARRAY['InvoicePaymentFailed invoice', 'InvoiceFailed invoice', 'SubscriptionCanceled subscription'],
          'dunning exhausted: InvoicePaymentFailed (final), InvoiceFailed, SubscriptionCanceled');
SELECT is((SELECT count(*) FROM billing.outbox_event WHERE payload ->> 'dataschema' IS DISTINCT FROM
                  'urn:billing:events:' || event_type || ':v1'), 0::bigint, 'every event names its schema');
ROLLBACK;
