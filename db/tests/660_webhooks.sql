-- 660_webhooks: endpoints, fan-out in the event's transaction, per-aggregate claim order, backoff,
-- disabling after a day, retention, retry-dead.
BEGIN;
SELECT plan(23);
-- One user for the fixtures and the SECURITY DEFINER calls (on Citus a transaction may not read
-- placements another user wrote in it); the same on a single PostgreSQL.
SET LOCAL ROLE billing_owner;

CREATE FUNCTION pg_temp.emit(p_agg bigint, p_type text, p_at timestamptz) RETURNS bigint LANGUAGE sql AS
$$ SELECT billing._emit_event('invoice', p_agg, p_type, jsonb_build_object('invoiceId', p_agg), p_at) $$;
CREATE FUNCTION pg_temp.claim(p_endpoint bigint, p_now timestamptz) RETURNS SETOF bigint LANGUAGE sql AS
$$ SELECT outbox_id FROM billing.claim_webhook_deliveries(p_endpoint, 100, interval '1 minute', p_now) $$;
CREATE FUNCTION pg_temp.record(p_endpoint bigint, p_ids bigint[], p_outcome text, p_now timestamptz) RETURNS text LANGUAGE sql AS
$$ SELECT billing.record_webhook_attempts(p_endpoint, p_ids, array_fill(p_outcome, ARRAY[cardinality(p_ids)]),
                                          array_fill(CASE WHEN p_outcome = 'DELIVERED' THEN 204 ELSE 500 END, ARRAY[cardinality(p_ids)]),
                                          array_fill(NULL::text, ARRAY[cardinality(p_ids)]),
                                          array_fill(3, ARRAY[cardinality(p_ids)]), p_now) $$;

SELECT throws_ok($$SELECT billing.create_webhook_endpoint('ftp://x/', '{*}', 'sixteen-chars-ok', '2026-01-01Z')$$,
                 'BL422', NULL, 'an endpoint url is http(s)');
SELECT throws_ok($$SELECT billing.create_webhook_endpoint('https://u:p@x/', '{*}', 'sixteen-chars-ok', '2026-01-01Z')$$,
                 'BL422', NULL, 'without credentials');
SELECT throws_ok($$SELECT billing.create_webhook_endpoint('https://x/', '{invoice_paid}', 'sixteen-chars-ok', '2026-01-01Z')$$,
                 'BL422', NULL, 'event types are type names');
SELECT throws_ok($$SELECT billing.create_webhook_endpoint('https://x/', '{*}', 'short', '2026-01-01Z')$$,
                 'BL422', NULL, 'a secret has at least 16 characters');
CREATE TEMP TABLE ep (a bigint, b bigint);
INSERT INTO ep (a) SELECT id FROM billing.create_webhook_endpoint('https://a.example/', '{*}', 'sixteen-chars-ok', '2026-01-01Z');
UPDATE ep SET b = (SELECT id FROM billing.create_webhook_endpoint('https://b.example/', '{RefundDue}', 'sixteen-chars-ok', '2026-01-01Z'));

SELECT pg_temp.emit(1, 'InvoicePaid', '2026-01-01Z');  -- e1 aggregate 1
SELECT pg_temp.emit(2, 'InvoicePaid', '2026-01-01Z');  -- e2 aggregate 2
SELECT pg_temp.emit(1, 'RefundDue', '2026-01-01Z');    -- e3 aggregate 1
CREATE TEMP TABLE ev AS SELECT row_number() OVER (ORDER BY id) AS n, id FROM billing.outbox_event;
-- Event n is (SELECT id FROM ev WHERE n = <n>): a subquery of a temporary table, which Citus runs on
-- the coordinator (a pg_temp function would be sent to the workers, where pg_temp does not exist).

SELECT is((SELECT count(*) FROM billing.webhook_delivery WHERE endpoint_id = (SELECT a FROM ep)), 3::bigint,
          'every event is queued for the endpoint that takes all types');
SELECT results_eq($$SELECT outbox_id FROM billing.webhook_delivery WHERE endpoint_id = (SELECT b FROM ep)$$,
                  $$SELECT (SELECT id FROM ev WHERE n = 3)$$, 'and only its types for the other');
SELECT results_eq($$SELECT * FROM pg_temp.claim((SELECT a FROM ep), '2026-01-01 00:00:01Z')$$,
                  $$VALUES ((SELECT id FROM ev WHERE n = 1)), ((SELECT id FROM ev WHERE n = 2)), ((SELECT id FROM ev WHERE n = 3))$$, 'a claim in outbox id order');
SELECT is_empty($$SELECT * FROM pg_temp.claim((SELECT a FROM ep), '2026-01-01 00:00:02Z')$$, 'leased: not claimed again');
SELECT is(pg_temp.record((SELECT a FROM ep), ARRAY[(SELECT id FROM ev WHERE n = 1)], 'FAILED', '2026-01-01 00:00:03Z'), 'ENABLED',
          'a failure is recorded');
SELECT pg_temp.record((SELECT a FROM ep), ARRAY[(SELECT id FROM ev WHERE n = 3)], 'RELEASED', '2026-01-01 00:00:03Z');
SELECT pg_temp.record((SELECT a FROM ep), ARRAY[(SELECT id FROM ev WHERE n = 2)], 'DELIVERED', '2026-01-01 00:00:03Z');
SELECT results_eq($$SELECT attempts, available_at, first_failed_at, last_status FROM billing.webhook_delivery
                     WHERE endpoint_id = (SELECT a FROM ep) AND outbox_id = (SELECT id FROM ev WHERE n = 1)$$,
                  $$VALUES (1, '2026-01-01 00:00:08Z'::timestamptz, '2026-01-01 00:00:03Z'::timestamptz, 500)$$,
                  'backs off 5 seconds');
SELECT is((SELECT attempts FROM billing.webhook_delivery WHERE endpoint_id = (SELECT a FROM ep) AND outbox_id = (SELECT id FROM ev WHERE n = 3)),
          0, 'a released delivery was not attempted');
SELECT is_empty($$SELECT * FROM pg_temp.claim((SELECT a FROM ep), '2026-01-01 00:00:05Z')$$,
                'e3 waits behind e1 (same aggregate) while e1 backs off');
SELECT results_eq($$SELECT * FROM pg_temp.claim((SELECT a FROM ep), '2026-01-01 00:00:09Z')$$,
                  $$VALUES ((SELECT id FROM ev WHERE n = 1)), ((SELECT id FROM ev WHERE n = 3))$$, 'then both, in order');
SELECT is(pg_temp.record((SELECT a FROM ep), ARRAY[(SELECT id FROM ev WHERE n = 1), (SELECT id FROM ev WHERE n = 3)], 'FAILED', '2026-01-01 00:00:10Z'),
          'ENABLED', 'failing again');
SELECT is((SELECT available_at FROM billing.webhook_delivery WHERE endpoint_id = (SELECT a FROM ep) AND outbox_id = (SELECT id FROM ev WHERE n = 1)),
          '2026-01-01 00:00:20Z'::timestamptz, 'doubles the backoff');
SELECT results_eq($$SELECT count(*)::int FROM billing.list_webhook_attempts((SELECT a FROM ep), 100)$$,
                  $$VALUES (4)$$, 'every attempt is listed');

SELECT pg_temp.claim((SELECT a FROM ep), '2026-01-02 00:00:30Z');
SELECT is(pg_temp.record((SELECT a FROM ep), ARRAY[(SELECT id FROM ev WHERE n = 1)], 'FAILED', '2026-01-02 00:00:30Z'), 'DISABLED',
          'failing for a day disables the endpoint');
SELECT results_eq($$SELECT status, count(*)::int FROM billing.webhook_delivery WHERE endpoint_id = (SELECT a FROM ep) GROUP BY 1 ORDER BY 1$$,
                  $$VALUES ('DELIVERED', 1), ('FAILED', 2)$$, 'its queue is dropped');
SELECT results_eq($$SELECT aggregate_type, aggregate_id, payload::jsonb -> 'data' ->> 'status' FROM billing.outbox_event
                     WHERE event_type = 'WebhookEndpointDisabled'$$,
                  $$SELECT 'webhook_endpoint', a, 'DISABLED' FROM ep$$, 'and that is announced');
SELECT is((SELECT count(*) FROM billing.webhook_delivery d JOIN billing.outbox_event e ON e.customer_id = d.customer_id AND e.id = d.outbox_id
            WHERE e.event_type = 'WebhookEndpointDisabled' AND d.endpoint_id = (SELECT a FROM ep)), 0::bigint,
          'a disabled endpoint is sent nothing more');
SELECT is_empty($$SELECT * FROM pg_temp.claim((SELECT a FROM ep), '2026-01-03Z')$$, 'nor claimed');

-- Retention keeps what a webhook still needs.
SELECT billing.mark_outbox_published(array_agg(id), '2026-01-01Z') FROM billing.outbox_event;
SELECT results_eq($$SELECT * FROM billing.purge_expired('30 days', 100, '2026-03-01Z')$$,
                  $$VALUES (3::bigint, 3::bigint, 0::bigint)$$,
                  'retention removes the published events but e3, owed to endpoint b, and the finished deliveries');
SELECT results_eq($$SELECT outbox_id FROM billing.webhook_delivery$$, $$SELECT (SELECT id FROM ev WHERE n = 3)$$, 'e3''s delivery stays');
ROLLBACK;
