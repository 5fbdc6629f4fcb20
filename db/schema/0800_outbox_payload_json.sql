-- 0800_outbox_payload_json (renewal7): the outbox's payload stored as the JSON text it is written as
-- (`json`: validated, not parsed into jsonb's binary form). The renewal and the signups in bulk write
-- each event as one JSON text in jsonb's own key order; parsing it into jsonb (`jsonb_in`) was ~9 us
-- an event, the largest cost of the renewal's event (bench/README.md, "renewal6"), and the relay's
-- `payload::text` then printed the jsonb back (~6 us an event); `json` keeps the text as given (its
-- validation ~2.4 us) and prints it as stored. Every byte a reader sees is the same: the rows kept
-- are converted by jsonb's own output (the text the relay published), the renewal's and the signups'
-- texts are jsonb's output byte for byte (401 and 310 compare them), and the other writers' jsonb
-- values become their own text by the assignment cast. Readers: `->`, `->>` work on json as on
-- jsonb (each parses the text: the writes' CHECK below, not the reads, is the hot path); the
-- functions that return the payload as jsonb cast it (77_api_lists, 84_console_records).
--
-- The CloudEvents CHECK: its three `->>` would parse the text three times (~10 us an event on
-- json), so it first tests the text itself and parses only a text that test does not settle:
--   * the text starts with `{"id": "<event_id>", "data": ` (the first member is the id), and
--   * the part after the text's last `", "type": "` is exactly the envelope's tail, type to end:
--     `<event_type>", "source": "billing", "subject": "<aggregate_type>/<aggregate_id>",
--     "dataschema": "urn:billing:events:<event_type>:v1", "specversion": "1.0", "datacontenttype":
--     "application/json"}` (event_type without a double quote). A valid JSON object that ends so has
--     type, source, subject, dataschema, specversion and datacontenttype as its last top-level
--     members (each quote of that tail follows a space, a colon or a comma, so none is escaped), and
--     `->>` answers a key's last member: type and specversion are what the parse would read.
--   * else the three `->>` as before (any other text, a version other than 1, a duplicate type).
-- The one text the first test lets pass that the parse would refuse: a second top-level "id" member
-- after the first with another value. No writer makes one (a jsonb value has no duplicate key; the
-- two text writers write the id once). Measured on 5,000 renewal envelopes (one connection, CPU of
-- the backend): the text to jsonb with the old CHECK 12.4-13.0 us an event, the text to json with
-- this one 7.8 (the three `->>` on json: 22.5).
--
-- The type change rewrites the outbox under ACCESS EXCLUSIVE: every writer of an event (renewals,
-- charges, signups) and the relay wait for it. Measured: 500,000 renewal events (932 MB at
-- fillfactor 50, 792 MB after) in 8.8 s at load 4.5, so ~18 s a million; the outbox holds the
-- events of its retention window (docs/events.md), so run it at a quiet hour, after a purge. Not
-- split expand-then-contract: a second payload column would make every reader choose between two.
-- On Citus it runs before the tables are placed (a new cluster) or is propagated to the shards.
ALTER TABLE billing.outbox_event DROP CONSTRAINT outbox_event_payload_is_cloudevent;
-- migration-check: allow the outbox is a queue of its retention window: ~18 s a million events, at a quiet hour (above)
ALTER TABLE billing.outbox_event ALTER COLUMN payload TYPE json USING payload::json;
ALTER TABLE billing.outbox_event ADD CONSTRAINT outbox_event_payload_is_cloudevent
    CHECK ((starts_with(payload::text, '{"id": "' || event_id::text || '", "data": ')
            AND strpos(event_type, '"') = 0
            AND split_part(payload::text, '", "type": "', -1)
                = event_type || '", "source": "billing", "subject": "' || aggregate_type || '/' || aggregate_id::text
                  || '", "dataschema": "urn:billing:events:' || event_type
                  || ':v1", "specversion": "1.0", "datacontenttype": "application/json"}')
           OR (payload ->> 'specversion' = '1.0' AND payload ->> 'id' = event_id::text AND payload ->> 'type' = event_type));
COMMENT ON COLUMN billing.outbox_event.payload IS 'The full CloudEvents 1.0 JSON envelope: the Kafka message value, stored as its text (json, keys in jsonb''s order).';
