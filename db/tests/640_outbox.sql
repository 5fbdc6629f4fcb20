-- 640_outbox: CloudEvents envelope, lease-based claim in aggregate order, backoff and DEAD.
BEGIN;
SELECT plan(33);
-- One user for the fixtures and the SECURITY DEFINER calls (on Citus a transaction may not read
-- placements another user wrote in it); the same on a single PostgreSQL.
SET LOCAL ROLE billing_owner;

CREATE FUNCTION pg_temp.emit(p_type text, p_agg bigint, p_at timestamptz) RETURNS bigint LANGUAGE sql AS
$$ SELECT billing._emit_event('invoice', p_agg, p_type, jsonb_build_object('invoiceId', p_agg), p_at) $$;
CREATE FUNCTION pg_temp.claim(p_batch integer, p_now timestamptz) RETURNS SETOF bigint LANGUAGE sql AS
$$ SELECT id FROM billing.claim_outbox_events(p_batch, interval '30 seconds', p_now) $$;

-- Envelope -------------------------------------------------------------------------------------
SELECT billing.upsert_plan('T_O', 700, 'USD', 'MONTH');
SELECT (billing.create_subscription('t08-a', 8001, 'T_O', '2026-06-01 10:00Z')).id AS t08_sub \gset
-- (called with the id, not from a query of subscription_request: on Citus a call inside a query of
-- one shard is sent to the worker with it, where the call's own distributed queries are refused)
SELECT billing.cancel_subscription(:t08_sub, false, '2026-06-02 11:12:13.456789Z');
SELECT results_eq(
    $$SELECT array_agg(k ORDER BY k) FROM billing.outbox_event, jsonb_object_keys(payload::jsonb) k
       WHERE event_type = 'SubscriptionCanceled'$$,
    $$VALUES (ARRAY['data', 'datacontenttype', 'dataschema', 'id', 'source', 'specversion', 'subject', 'time', 'type'])$$,
    'the payload is a CloudEvents envelope with exactly its attributes');
SELECT results_eq(
    $$SELECT payload ->> 'specversion', payload ->> 'id' = event_id::text, payload ->> 'source', payload ->> 'type',
             payload ->> 'subject', payload ->> 'time', payload ->> 'datacontenttype',
             payload ->> 'dataschema',
             (payload::jsonb -> 'data' ->> 'subscriptionId')::bigint = aggregate_id, aggregate_type, status
        FROM billing.outbox_event WHERE event_type = 'SubscriptionCanceled'$$,
    $$VALUES ('1.0', true, 'billing', 'SubscriptionCanceled', 'subscription/$$ || :t08_sub || $$', '2026-06-02T11:12:13.456789Z',
              'application/json', 'urn:billing:events:SubscriptionCanceled:v1', true, 'subscription', 'PENDING')$$,
    'envelope attributes: stable id, subject = kind/id, UTC time');
-- On Citus there is no notify trigger (billing db migrate --citus drops it: a transition table
-- cannot be planned next to a distributed table, and a worker would raise the notification): the
-- relay polls there (docs/scaling.md).
SELECT is((SELECT (tgtype & 1)::int FROM pg_trigger WHERE tgname = 'outbox_event_notify'),
          CASE WHEN billing._distributed('billing.outbox_event') THEN NULL ELSE 0 END,
          'the notify trigger is per statement, not per row (none on Citus)');
SELECT is((SELECT tgnewtable FROM pg_trigger WHERE tgname = 'outbox_event_notify'),
          CASE WHEN billing._distributed('billing.outbox_event') THEN NULL ELSE 'new_events'::name END,
          'and counts the statement''s rows from its transition table');

-- The payload is stored as its text (json, migration 0800) and its CloudEvents CHECK settles a
-- text in jsonb's order from the text itself: every event written so far is such a text, and a
-- text in any other layout is parsed (the three ->>), so a wrong id, type or specversion is refused
-- either way (23514; on Citus the worker's refusal reaches the coordinator as XX000, hence the
-- message).
SELECT is((SELECT count(*) FILTER (WHERE NOT (starts_with(payload::text, '{"id": "' || event_id::text || '", "data": ')
                                              AND split_part(payload::text, '", "type": "', -1)
                                                  = event_type || '", "source": "billing", "subject": "' || aggregate_type || '/'
                                                    || aggregate_id::text || '", "dataschema": "urn:billing:events:' || event_type
                                                    || ':v1", "specversion": "1.0", "datacontenttype": "application/json"}'))
             FROM billing.outbox_event), 0::bigint,
          'every event written is settled by the CHECK''s text test (no parse)');
SELECT is((SELECT pg_typeof(payload)::text FROM billing.outbox_event LIMIT 1), 'json', 'the payload is stored as json');
CREATE TEMP TABLE bad_payload (n int, event_id uuid, event_type text, payload text);
INSERT INTO bad_payload VALUES
  (1, 'a0000000-0000-4000-8000-000000000001', 'InvoicePaid',
   '{"id":"a0000000-0000-4000-8000-000000000001","data":{"invoiceId":9},"type":"InvoicePaid","specversion":"1.0"}'),
  (2, 'a0000000-0000-4000-8000-000000000002', 'InvoicePaid',
   '{"id": "a0000000-0000-4000-8000-000000000002", "data": {}, "time": "2026-01-01T00:00:00.000000Z", "type": "InvoiceVoided", "source": "billing", "subject": "invoice/9", "dataschema": "urn:billing:events:InvoiceVoided:v1", "specversion": "1.0", "datacontenttype": "application/json"}'),
  (3, 'a0000000-0000-4000-8000-000000000003', 'InvoicePaid',
   '{"id": "a0000000-0000-4000-8000-000000000099", "data": {}, "time": "2026-01-01T00:00:00.000000Z", "type": "InvoicePaid", "source": "billing", "subject": "invoice/9", "dataschema": "urn:billing:events:InvoicePaid:v1", "specversion": "1.0", "datacontenttype": "application/json"}'),
  (4, 'a0000000-0000-4000-8000-000000000004', 'InvoicePaid',
   '{"id": "a0000000-0000-4000-8000-000000000004", "data": {}, "time": "2026-01-01T00:00:00.000000Z", "type": "InvoicePaid", "source": "billing", "subject": "invoice/9", "dataschema": "urn:billing:events:InvoicePaid:v1", "specversion": "0.3", "datacontenttype": "application/json"}'),
  (5, 'a0000000-0000-4000-8000-000000000005', 'InvoicePaid',
   '{"id": "a0000000-0000-4000-8000-000000000005", "data": {"type": "InvoicePaid"}, "time": "2026-01-01T00:00:00.000000Z", "type": "RefundDue", "source": "billing", "subject": "invoice/9", "dataschema": "urn:billing:events:InvoicePaid:v1", "specversion": "1.0", "datacontenttype": "application/json"}');
SELECT lives_ok($$INSERT INTO billing.outbox_event (event_id, aggregate_type, aggregate_id, event_type, payload, created_at, available_at, customer_id)
                  SELECT event_id, 'invoice', 9, event_type, payload::json, '2026-01-01Z', '2026-01-01Z', 8001 FROM bad_payload WHERE n = 1$$,
                'a valid envelope in another layout is accepted (parsed)');
SELECT is((SELECT payload::text FROM billing.outbox_event WHERE event_id = 'a0000000-0000-4000-8000-000000000001'),
          (SELECT payload FROM bad_payload WHERE n = 1), 'and kept as the very text written');
SELECT throws_like($$INSERT INTO billing.outbox_event (event_id, aggregate_type, aggregate_id, event_type, payload, created_at, available_at, customer_id)
                   SELECT event_id, 'invoice', 9, event_type, payload::json, '2026-01-01Z', '2026-01-01Z', 8001 FROM bad_payload WHERE n = 2$$,
                 '%violates check constraint "outbox_event_payload_is_cloudevent"%', 'an envelope whose type is not the event''s is refused');
SELECT throws_like($$INSERT INTO billing.outbox_event (event_id, aggregate_type, aggregate_id, event_type, payload, created_at, available_at, customer_id)
                   SELECT event_id, 'invoice', 9, event_type, payload::json, '2026-01-01Z', '2026-01-01Z', 8001 FROM bad_payload WHERE n = 3$$,
                 '%violates check constraint "outbox_event_payload_is_cloudevent"%', 'an envelope whose id is not the event''s is refused');
SELECT throws_like($$INSERT INTO billing.outbox_event (event_id, aggregate_type, aggregate_id, event_type, payload, created_at, available_at, customer_id)
                   SELECT event_id, 'invoice', 9, event_type, payload::json, '2026-01-01Z', '2026-01-01Z', 8001 FROM bad_payload WHERE n = 4$$,
                 '%violates check constraint "outbox_event_payload_is_cloudevent"%', 'an envelope of another specversion is refused');
SELECT throws_like($$INSERT INTO billing.outbox_event (event_id, aggregate_type, aggregate_id, event_type, payload, created_at, available_at, customer_id)
                   SELECT event_id, 'invoice', 9, event_type, payload::json, '2026-01-01Z', '2026-01-01Z', 8001 FROM bad_payload WHERE n = 5$$,
                 '%violates check constraint "outbox_event_payload_is_cloudevent"%', 'the event''s type inside the data does not stand for the envelope''s');
DELETE FROM billing.outbox_event;

-- Claim order, lease, aggregate order ----------------------------------------------------------
SELECT pg_temp.emit('InvoicePaid', 1, '2026-01-01Z');          -- e1 aggregate 1
SELECT pg_temp.emit('InvoicePaid', 2, '2026-01-01Z');          -- e2 aggregate 2
SELECT pg_temp.emit('RefundDue', 1, '2026-01-01Z');            -- e3 aggregate 1
CREATE TEMP TABLE ev AS SELECT row_number() OVER (ORDER BY id) AS n, id FROM billing.outbox_event;
-- Event n is (SELECT id FROM ev WHERE n = <n>): a subquery of a temporary table, which Citus runs on
-- the coordinator (a pg_temp function would be sent to the workers, where pg_temp does not exist).

SELECT results_eq($$SELECT * FROM pg_temp.claim(1, '2026-01-01 00:00:01Z')$$, $$SELECT (SELECT id FROM ev WHERE n = 1)$$, 'claims the oldest event first');
SELECT is((SELECT lease_until FROM billing.outbox_event WHERE id = (SELECT id FROM ev WHERE n = 1)), '2026-01-01 00:00:31Z'::timestamptz, 'and leases it');
SELECT results_eq($$SELECT * FROM pg_temp.claim(10, '2026-01-01 00:00:02Z')$$, $$SELECT (SELECT id FROM ev WHERE n = 2)$$,
                  'another relay gets other aggregates only: e3 waits while e1 (same aggregate) is leased elsewhere');
SELECT results_eq($$SELECT * FROM pg_temp.claim(10, '2026-01-01 00:00:40Z')$$, $$VALUES ((SELECT id FROM ev WHERE n = 1)), ((SELECT id FROM ev WHERE n = 2)), ((SELECT id FROM ev WHERE n = 3))$$,
                  'after the leases expire all come back, in id order, in one claim');
SELECT is(billing.mark_outbox_published(ARRAY[(SELECT id FROM ev WHERE n = 1), (SELECT id FROM ev WHERE n = 2)], '2026-01-01 00:00:41Z'), 2, 'mark published returns the count');
SELECT is(billing.mark_outbox_published(ARRAY[(SELECT id FROM ev WHERE n = 1), (SELECT id FROM ev WHERE n = 2)], '2026-01-01 00:00:42Z'), 0, 'marking again changes nothing');
SELECT results_eq($$SELECT status, published_at, lease_until FROM billing.outbox_event WHERE id = (SELECT id FROM ev WHERE n = 1)$$,
                  $$VALUES ('PUBLISHED', '2026-01-01 00:00:41Z'::timestamptz, NULL::timestamptz)$$, 'published rows are kept');
SELECT is_empty($$SELECT * FROM pg_temp.claim(10, '2026-01-01 00:00:43Z')$$, 'e3 is still leased');
SELECT results_eq($$SELECT * FROM pg_temp.claim(10, '2026-01-01 00:01:20Z')$$, $$SELECT (SELECT id FROM ev WHERE n = 3)$$,
                  'e3 once its lease expired');

-- Failure, backoff, DEAD -----------------------------------------------------------------------
SELECT pg_temp.emit('InvoicePaid', 3, '2026-01-02Z');  -- e4 aggregate 3
SELECT pg_temp.emit('RefundDue', 3, '2026-01-02Z');    -- e5 aggregate 3
INSERT INTO ev SELECT 3 + row_number() OVER (ORDER BY id), id FROM billing.outbox_event WHERE aggregate_id = 3;
SELECT billing.mark_outbox_failed((SELECT id FROM ev WHERE n = 4), 'broker down', '2026-01-02 00:00:00Z');
SELECT results_eq($$SELECT attempts, last_error, available_at, lease_until, status FROM billing.outbox_event WHERE id = (SELECT id FROM ev WHERE n = 4)$$,
                  $$VALUES (1, 'broker down', '2026-01-02 00:00:05Z'::timestamptz, NULL::timestamptz, 'PENDING')$$,
                  'a failure backs off 5 seconds');
SELECT results_eq($$SELECT * FROM pg_temp.claim(10, '2026-01-02 00:00:01Z')$$, $$SELECT (SELECT id FROM ev WHERE n = 3)$$,
                  'during the backoff neither it nor the later event of its aggregate is claimed');
SELECT billing.mark_outbox_failed((SELECT id FROM ev WHERE n = 4), 'broker down', '2026-01-02 00:00:10Z');
SELECT is((SELECT available_at FROM billing.outbox_event WHERE id = (SELECT id FROM ev WHERE n = 4)), '2026-01-02 00:00:20Z'::timestamptz,
          'the second failure backs off 10 seconds');
SELECT billing.mark_outbox_failed((SELECT id FROM ev WHERE n = 4), 'broker down', '2026-01-02 01:00:00Z') FROM generate_series(1, 6);
SELECT is((SELECT available_at FROM billing.outbox_event WHERE id = (SELECT id FROM ev WHERE n = 4)), '2026-01-02 01:10:40Z'::timestamptz,
          'the backoff doubles (640 s after eight failures)');
SELECT billing.mark_outbox_failed((SELECT id FROM ev WHERE n = 4), 'broker down', '2026-01-02 02:00:00Z');
SELECT is((SELECT available_at FROM billing.outbox_event WHERE id = (SELECT id FROM ev WHERE n = 4)), '2026-01-02 02:15:00Z'::timestamptz,
          'and is capped at 15 minutes');
SELECT is((SELECT status FROM billing.outbox_event WHERE id = (SELECT id FROM ev WHERE n = 4)), 'PENDING', 'still PENDING after nine failures');
SELECT billing.mark_outbox_failed((SELECT id FROM ev WHERE n = 4), 'broker down', '2026-01-02 03:00:00Z');
SELECT results_eq($$SELECT status, attempts FROM billing.outbox_event WHERE id = (SELECT id FROM ev WHERE n = 4)$$,
                  $$VALUES ('DEAD', 10)$$, 'DEAD after ten failures, and kept');
SELECT lives_ok($$SELECT billing.mark_outbox_failed((SELECT id FROM ev WHERE n = 4), 'again', '2026-01-02 03:00:01Z')$$, 'failing a DEAD event is harmless');
SELECT is((SELECT attempts FROM billing.outbox_event WHERE id = (SELECT id FROM ev WHERE n = 4)), 10, 'and changes nothing');
SELECT results_eq($$SELECT * FROM pg_temp.claim(10, '2026-01-02 04:00:00Z')$$, $$VALUES ((SELECT id FROM ev WHERE n = 3)), ((SELECT id FROM ev WHERE n = 5))$$,
                  'a DEAD event no longer holds back its aggregate; DEAD events are never claimed');
SELECT throws_ok($$SELECT billing.mark_outbox_failed(-1, 'x', '2026-01-02Z')$$, 'BL404', NULL, 'unknown event: BL404');
SELECT throws_ok($$SELECT * FROM billing.claim_outbox_events(0)$$, 'BL422', NULL, 'batch size 0: BL422');

SELECT * FROM finish();
ROLLBACK;
