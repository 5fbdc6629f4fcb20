-- 69_notifications: emails owed to customers (docs/customers.md). A notification row is written in
-- the transaction of the change it announces: by a row trigger on the outbox for the events a
-- customer hears about, by a trigger on the invoice when it is finalized (issued: it has its number
-- and its PDF), and by announce_upcoming_renewals for yearly plans. The worker claims them (a
-- lease), sends each outside any transaction, and records the result: SENT, or a failure retried
-- with backoff until DEAD. Per customer: a locale and the kinds they turned off (not the legal
-- ones). Every row and every call stays inside one customer's shard group on Citus.

CREATE OR REPLACE FUNCTION billing.notification_kinds()
RETURNS TABLE (kind text, legal boolean)
LANGUAGE sql IMMUTABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
    SELECT * FROM (VALUES
        ('INVOICE_ISSUED', true), ('PAYMENT_SUCCEEDED', true), ('PAYMENT_FAILED', false),
        ('ACTION_REQUIRED', true), ('CARD_EXPIRING', false), ('TRIAL_ENDING', false),
        ('UPCOMING_RENEWAL', false), ('SUBSCRIPTION_CANCELED', false), ('REFUND_ISSUED', true)
    ) AS t (kind, legal)
$$;
COMMENT ON FUNCTION billing.notification_kinds() IS
'The kinds of email sent to customers; legal ones (invoice, receipt, refund, action required to pay) cannot be turned off.
Returns one row per kind.';

CREATE OR REPLACE FUNCTION billing.customer_locales()
RETURNS text[]
LANGUAGE sql IMMUTABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$ SELECT ARRAY['en', 'pt-BR', 'es', 'de', 'zh-CN'] $$;
COMMENT ON FUNCTION billing.customer_locales() IS
'The languages emails, documents and the portal are written in.
Returns them as BCP 47 tags.';

-- ---------------------------------------------------------------------------------------------
-- Preferences
-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION billing.set_customer_preferences(
    p_customer_id bigint, p_locale text DEFAULT NULL, p_opt_outs text[] DEFAULT NULL, p_now timestamptz DEFAULT now())
RETURNS billing.customer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_customer billing.customer;
    v_outs     text[];
BEGIN
    PERFORM billing._audit('set_customer_preferences', jsonb_build_object('customer_id', p_customer_id,
        'locale', p_locale, 'opt_outs', p_opt_outs, 'now', p_now));
    PERFORM billing._check_now(p_now);
    IF p_locale IS NOT NULL AND NOT p_locale = ANY (billing.customer_locales()) THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = format('locale %L is not one of %s', p_locale,
            array_to_string(billing.customer_locales(), ', '));
    END IF;
    IF p_opt_outs IS NOT NULL THEN
        IF cardinality(p_opt_outs) > 20 OR EXISTS (SELECT 1 FROM unnest(p_opt_outs) o
                     WHERE o IS NULL OR NOT EXISTS (SELECT 1 FROM billing.notification_kinds() k WHERE k.kind = o)) THEN
            RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = 'opt-outs must be kinds of notification',
                HINT = 'See billing.notification_kinds().';
        END IF;
        IF EXISTS (SELECT 1 FROM unnest(p_opt_outs) o JOIN billing.notification_kinds() k ON k.kind = o WHERE k.legal) THEN
            RAISE EXCEPTION USING ERRCODE = 'BL422',
                MESSAGE = 'invoices, receipts, refunds and requests to authenticate a payment cannot be turned off';
        END IF;
        v_outs := ARRAY(SELECT DISTINCT o FROM unnest(p_opt_outs) o ORDER BY o);
    END IF;
    UPDATE billing.customer c
       SET locale = coalesce(p_locale, c.locale),
           notification_opt_outs = coalesce(v_outs, c.notification_opt_outs),
           updated_at = p_now
     WHERE c.id = p_customer_id
    RETURNING * INTO v_customer;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'BL404', MESSAGE = format('customer %s does not exist', coalesce(p_customer_id::text, 'NULL'));
    END IF;
    RETURN v_customer;
END
$$;
COMMENT ON FUNCTION billing.set_customer_preferences(bigint, text, text[], timestamptz) IS
'Sets the customer''s language (NULL: unchanged) and the kinds of email they turned off (NULL: unchanged; {}: none).
Returns the customer; BL404 unknown customer, BL422 unknown locale or kind, or a legal kind turned off.';

-- ---------------------------------------------------------------------------------------------
-- What is owed: triggers and the yearly renewal notice.
-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION billing._notification_kind(p_event_type text, p_data jsonb)
RETURNS text
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE p_event_type
        WHEN 'InvoicePaid' THEN 'PAYMENT_SUCCEEDED'
        WHEN 'InvoicePaymentFailed' THEN 'PAYMENT_FAILED'
        WHEN 'InvoiceActionRequired' THEN 'ACTION_REQUIRED'
        WHEN 'PaymentMethodExpiring' THEN 'CARD_EXPIRING'
        WHEN 'SubscriptionTrialWillEnd' THEN 'TRIAL_ENDING'
        WHEN 'SubscriptionCanceled' THEN 'SUBSCRIPTION_CANCELED'
        WHEN 'RefundSucceeded' THEN 'REFUND_ISSUED'
    END
$$;
COMMENT ON FUNCTION billing._notification_kind(text, jsonb) IS
'Private: the kind of email an event of this type announces (NULL: none).
Returns the kind.';

CREATE OR REPLACE FUNCTION billing._notify_from_event()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    -- (the kind follows the type alone: the data, parsed from the payload's text since migration
    -- 0800, is read only for the row written)
    v_kind text := billing._notification_kind(NEW.event_type, NULL);
BEGIN
    IF v_kind IS NULL OR NEW.customer_id IS NULL OR NEW.customer_id = 0 THEN
        RETURN NULL;
    END IF;
    IF TG_TABLE_NAME <> 'outbox_event' THEN
        -- On a Citus shard (billing.outbox_event_<shard id>) a trigger may not query the
        -- distributed customer table: the row is written whatever the address, and the claim
        -- makes it SKIPPED when the customer has none. An event naming no known customer owes
        -- nothing (the foreign key says so; the event itself is kept).
        BEGIN
            INSERT INTO billing.notification (customer_id, kind, dedupe_key, subject, data, created_at, available_at)
            VALUES (NEW.customer_id, v_kind, NEW.event_id::text, NEW.aggregate_type || '/' || NEW.aggregate_id,
                    NEW.payload -> 'data', NEW.created_at, NEW.created_at)
            ON CONFLICT ON CONSTRAINT notification_once DO NOTHING;
        EXCEPTION WHEN foreign_key_violation THEN
            NULL;
        END;
        RETURN NULL;
    END IF;
    INSERT INTO billing.notification (customer_id, kind, dedupe_key, subject, data, created_at, available_at)
    SELECT NEW.customer_id, v_kind, NEW.event_id::text, NEW.aggregate_type || '/' || NEW.aggregate_id,
           NEW.payload -> 'data', NEW.created_at, NEW.created_at
      FROM billing.customer c
     WHERE c.id = NEW.customer_id AND c.email IS NOT NULL
    ON CONFLICT ON CONSTRAINT notification_once DO NOTHING;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION billing._notify_from_event() IS
'Private trigger: an event a customer hears about (billing._notification_kind) owes them an email, when they have an address.
Returns NULL (row-level AFTER trigger).';

-- A row trigger whose WHEN keeps every other event (a renewal's InvoiceCreated, ...) from calling
-- anything: the renewal statement is not slowed. It runs on Citus unchanged (on the event's shard).
CREATE OR REPLACE TRIGGER outbox_event_notify_customer
    AFTER INSERT ON billing.outbox_event
    FOR EACH ROW WHEN (NEW.event_type IN ('InvoicePaid', 'InvoicePaymentFailed', 'InvoiceActionRequired',
        'PaymentMethodExpiring', 'SubscriptionTrialWillEnd', 'SubscriptionCanceled', 'RefundSucceeded'))
    EXECUTE FUNCTION billing._notify_from_event();

CREATE OR REPLACE FUNCTION billing._notify_invoice_issued()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_data jsonb := jsonb_build_object('invoiceId', NEW.id, 'subscriptionId', NEW.subscription_id,
        'customerId', NEW.customer_id, 'number', NEW.number, 'amount', NEW.amount, 'currency', NEW.currency,
        'periodStart', NEW.period_start, 'periodEnd', NEW.period_end);
BEGIN
    IF TG_TABLE_NAME <> 'invoice' THEN  -- on a Citus shard: as _notify_from_event
        INSERT INTO billing.notification (customer_id, kind, dedupe_key, subject, data, created_at, available_at)
        VALUES (NEW.customer_id, 'INVOICE_ISSUED', 'invoice-issued/' || NEW.id, 'invoice/' || NEW.id, v_data,
                NEW.finalized_at, NEW.finalized_at)
        ON CONFLICT ON CONSTRAINT notification_once DO NOTHING;
        RETURN NULL;
    END IF;
    INSERT INTO billing.notification (customer_id, kind, dedupe_key, subject, data, created_at, available_at)
    SELECT NEW.customer_id, 'INVOICE_ISSUED', 'invoice-issued/' || NEW.id, 'invoice/' || NEW.id, v_data,
           NEW.finalized_at, NEW.finalized_at
      FROM billing.customer c
     WHERE c.id = NEW.customer_id AND c.email IS NOT NULL
    ON CONFLICT ON CONSTRAINT notification_once DO NOTHING;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION billing._notify_invoice_issued() IS
'Private trigger: a finalized invoice (it has its number) owes its customer the invoice by email, when they have an address.
Returns NULL (row-level AFTER trigger).';

CREATE OR REPLACE TRIGGER invoice_issued_notify_customer
    AFTER UPDATE OF number ON billing.invoice
    FOR EACH ROW WHEN (OLD.number IS NULL AND NEW.number IS NOT NULL)
    EXECUTE FUNCTION billing._notify_invoice_issued();

CREATE OR REPLACE FUNCTION billing.announce_upcoming_renewals(
    p_days integer DEFAULT 14, p_batch_size integer DEFAULT 500, p_now timestamptz DEFAULT now())
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_count integer := 0;
    v_row   record;
BEGIN
    PERFORM billing._check_now(p_now);
    PERFORM billing._check_between('days of notice', p_days, 0, 366);
    PERFORM billing._check_between('batch size', p_batch_size, 1, 10000);
    -- Read without locks (every shard on Citus), then one insert per renewal in its customer's
    -- shard; the key (subscription, period end) makes each renewal announced once.
    FOR v_row IN
        SELECT s.customer_id, s.id, s.current_period_end, p.code, p.price_amount, p.currency, s.quantity
          FROM billing.subscription s
          JOIN billing.plan p ON p.id = coalesce(s.scheduled_plan_id, s.plan_id)
         WHERE s.status = 'ACTIVE' AND NOT s.cancel_at_period_end AND p.billing_interval = 'YEAR'
           AND s.current_period_end > p_now AND s.current_period_end <= p_now + make_interval(days => p_days)
           AND NOT EXISTS (SELECT 1 FROM billing.notification n
                            WHERE n.customer_id = s.customer_id
                              AND n.dedupe_key = 'renewal/' || s.id || '/' || extract(epoch FROM s.current_period_end)::bigint)
         ORDER BY s.current_period_end
         LIMIT p_batch_size
    LOOP
        INSERT INTO billing.notification (customer_id, kind, dedupe_key, subject, data, created_at, available_at)
        SELECT v_row.customer_id, 'UPCOMING_RENEWAL',
               'renewal/' || v_row.id || '/' || extract(epoch FROM v_row.current_period_end)::bigint,
               'subscription/' || v_row.id,
               jsonb_build_object('subscriptionId', v_row.id, 'customerId', v_row.customer_id, 'planCode', v_row.code,
                                  'renewalAt', v_row.current_period_end, 'amount', v_row.price_amount * v_row.quantity,
                                  'currency', v_row.currency),
               p_now, p_now
          FROM billing.customer c
         WHERE c.id = v_row.customer_id AND c.email IS NOT NULL
        ON CONFLICT ON CONSTRAINT notification_once DO NOTHING;
        IF FOUND THEN
            v_count := v_count + 1;
        END IF;
    END LOOP;
    RETURN v_count;
END
$$;
COMMENT ON FUNCTION billing.announce_upcoming_renewals(integer, integer, timestamptz) IS
'Owes an email to each customer whose ACTIVE yearly subscription (not ending) renews within p_days, once per renewal; run it periodically (the worker does).
Returns how many were owed; BL422 for bad arguments.';

-- ---------------------------------------------------------------------------------------------
-- The worker's side
-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION billing.claim_notifications(
    p_batch_size integer, p_lease interval, p_now timestamptz DEFAULT now())
RETURNS TABLE (customer_id bigint, id bigint, kind text, subject text, data jsonb, attempts integer,
               recipient text, customer_name text, locale text, timezone text, dedupe_key text)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_cand record;
    v_cust billing.customer;
    v_n    billing.notification;
BEGIN
    PERFORM billing._check_claim_args(p_batch_size, p_lease, p_now, 1000);
    -- Candidates read without locks, oldest first; each then leased by a conditional update of its
    -- row (a concurrent claimer waits for the row and finds it leased): the same on Citus, where
    -- each update runs in the customer's shard.
    FOR v_cand IN
        SELECT n.customer_id, n.id FROM billing.notification n
         WHERE n.status = 'PENDING' AND n.available_at <= p_now AND (n.lease_until IS NULL OR n.lease_until <= p_now)
         ORDER BY n.available_at, n.id
         LIMIT p_batch_size
    LOOP
        SELECT * INTO v_cust FROM billing.customer c WHERE c.id = v_cand.customer_id;
        UPDATE billing.notification n
           SET status = CASE WHEN v_cust.email IS NULL OR n.kind = ANY (v_cust.notification_opt_outs) THEN 'SKIPPED' ELSE n.status END,
               last_error = CASE WHEN v_cust.email IS NULL THEN 'no email address'
                                 WHEN n.kind = ANY (v_cust.notification_opt_outs) THEN 'turned off by the customer'
                                 ELSE n.last_error END,
               lease_until = p_now + p_lease, attempts = n.attempts + 1,
               recipient = v_cust.email, locale = v_cust.locale
         WHERE n.customer_id = v_cand.customer_id AND n.id = v_cand.id AND n.status = 'PENDING'
           AND n.available_at <= p_now AND (n.lease_until IS NULL OR n.lease_until <= p_now)
        RETURNING n.* INTO v_n;
        CONTINUE WHEN NOT FOUND OR v_n.status <> 'PENDING';
        customer_id := v_n.customer_id; id := v_n.id; kind := v_n.kind; subject := v_n.subject; data := v_n.data;
        attempts := v_n.attempts; recipient := v_n.recipient; customer_name := v_cust.name; locale := v_n.locale;
        timezone := v_cust.timezone; dedupe_key := v_n.dedupe_key;
        RETURN NEXT;
    END LOOP;
END
$$;
COMMENT ON FUNCTION billing.claim_notifications(integer, interval, timestamptz) IS
'Leases up to p_batch_size due notifications for p_lease, oldest first, with the address and language read now; one the customer turned off (or without an address) becomes SKIPPED instead.
Returns the leased rows; BL422 for bad arguments.';

CREATE OR REPLACE FUNCTION billing.record_notification_result(
    p_customer_id bigint, p_id bigint, p_outcome text, p_error text, p_message_id text, p_now timestamptz,
    p_backoff interval DEFAULT interval '30 seconds', p_backoff_cap interval DEFAULT interval '1 hour',
    p_max_attempts integer DEFAULT 12)
RETURNS billing.notification
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_n         billing.notification;
    v_status    text;
    v_sent      timestamptz;
    v_error     text;
    v_available timestamptz;
BEGIN
    PERFORM billing._check_now(p_now);
    PERFORM billing._check_one_of('outcome', p_outcome, ARRAY['SENT', 'FAILED'], 'SENT or FAILED');
    PERFORM billing._check_between('max attempts', p_max_attempts, 1, 100);
    SELECT * INTO v_n FROM billing.notification n WHERE n.customer_id = p_customer_id AND n.id = p_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'BL404', MESSAGE = format('notification %s/%s does not exist', p_customer_id, p_id);
    END IF;
    IF v_n.status <> 'PENDING' THEN
        RETURN v_n;  -- already SENT, SKIPPED or DEAD: unchanged (a late duplicate result)
    END IF;
    -- The new values computed first (Citus plans no non-immutable expression inside an UPDATE's CASE).
    IF p_outcome = 'SENT' THEN
        v_status := 'SENT'; v_sent := p_now; v_error := NULL; v_available := v_n.available_at;
    ELSE
        v_status := CASE WHEN v_n.attempts >= p_max_attempts THEN 'DEAD' ELSE 'PENDING' END;
        v_error := left(p_error, 1000);
        -- 30 s, 1 min, 2 min ... capped: the attempt count is the one the claim took.
        v_available := p_now + least(p_backoff_cap, p_backoff * power(2, least(v_n.attempts - 1, 30)));
    END IF;
    UPDATE billing.notification n
       SET status = v_status, sent_at = v_sent, message_id = coalesce(p_message_id, n.message_id),
           last_error = v_error, lease_until = NULL, available_at = v_available
     WHERE n.customer_id = p_customer_id AND n.id = p_id
    RETURNING * INTO v_n;
    RETURN v_n;
END
$$;
COMMENT ON FUNCTION billing.record_notification_result(bigint, bigint, text, text, text, timestamptz, interval, interval, integer) IS
'Records a send: SENT, or FAILED (retried after p_backoff doubling per attempt up to p_backoff_cap; DEAD after p_max_attempts). A result for a row no longer PENDING changes nothing.
Returns the row; BL404 unknown, BL422 bad outcome.';

CREATE OR REPLACE FUNCTION billing.list_notifications(p_customer_id bigint, p_limit integer DEFAULT 100)
RETURNS SETOF billing.notification
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM billing._check_between('limit', p_limit, 1, 1000);
    RETURN QUERY SELECT * FROM billing.notification n WHERE n.customer_id = p_customer_id ORDER BY n.id DESC LIMIT p_limit;
END
$$;
COMMENT ON FUNCTION billing.list_notifications(bigint, integer) IS
'The customer''s notifications, newest first.
Returns up to p_limit rows (1..1000).';

-- ---------------------------------------------------------------------------------------------
-- Portal links: a random token, kept as its SHA-256; expiring, single-use, revocable.
-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION billing.create_portal_link(
    p_customer_id bigint, p_token_hash bytea, p_ttl interval DEFAULT interval '72 hours',
    p_now timestamptz DEFAULT now())
RETURNS billing.portal_link
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_link billing.portal_link;
BEGIN
    PERFORM billing._audit('create_portal_link', jsonb_build_object('customer_id', p_customer_id, 'ttl', p_ttl, 'now', p_now));
    PERFORM billing._check_now(p_now);
    IF p_token_hash IS NULL OR octet_length(p_token_hash) <> 32 THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = 'a portal link is kept as the 32-byte SHA-256 of its token';
    END IF;
    IF p_ttl IS NULL OR p_ttl <= interval '0' OR p_ttl > interval '30 days' THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = 'a portal link lives more than 0 and at most 30 days';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM billing.customer c WHERE c.id = p_customer_id) THEN
        RAISE EXCEPTION USING ERRCODE = 'BL404', MESSAGE = format('customer %s does not exist', coalesce(p_customer_id::text, 'NULL'));
    END IF;
    INSERT INTO billing.portal_link (customer_id, token_hash, created_at, expires_at, created_by)
    VALUES (p_customer_id, p_token_hash, p_now, p_now + p_ttl,
            coalesce(nullif(left(current_setting('billing.actor', true), 200), ''), session_user::text))
    RETURNING * INTO v_link;
    RETURN v_link;
END
$$;
COMMENT ON FUNCTION billing.create_portal_link(bigint, bytea, interval, timestamptz) IS
'Records a portal link for the customer (the caller made the random token and keeps it; only its SHA-256 is stored), valid for p_ttl.
Returns the row; BL404 unknown customer, BL422 bad hash or lifetime.';

CREATE OR REPLACE FUNCTION billing.use_portal_link(p_customer_id bigint, p_token_hash bytea, p_now timestamptz DEFAULT now())
RETURNS billing.portal_link
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_link billing.portal_link;
BEGIN
    PERFORM billing._check_now(p_now);
    UPDATE billing.portal_link l SET used_at = p_now
     WHERE l.customer_id = p_customer_id AND l.token_hash = p_token_hash
       AND l.used_at IS NULL AND l.revoked_at IS NULL AND l.expires_at > p_now
    RETURNING * INTO v_link;
    IF NOT FOUND THEN
        -- One answer for unknown, used, revoked and expired: a guesser learns nothing.
        RAISE EXCEPTION USING ERRCODE = 'BL404', MESSAGE = 'this link is not valid (used, expired or revoked): ask for a new one';
    END IF;
    PERFORM billing._audit('use_portal_link', jsonb_build_object('customer_id', p_customer_id, 'now', p_now));
    RETURN v_link;
END
$$;
COMMENT ON FUNCTION billing.use_portal_link(bigint, bytea, timestamptz) IS
'Uses a portal link once: the first call before its expiry succeeds, every later one fails.
Returns the link; BL404 when unknown, used, expired or revoked (one answer for all).';

CREATE OR REPLACE FUNCTION billing.revoke_portal_links(p_customer_id bigint, p_now timestamptz DEFAULT now())
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_count integer;
BEGIN
    PERFORM billing._audit('revoke_portal_links', jsonb_build_object('customer_id', p_customer_id, 'now', p_now));
    PERFORM billing._check_now(p_now);
    UPDATE billing.portal_link l SET revoked_at = p_now
     WHERE l.customer_id = p_customer_id AND l.used_at IS NULL AND l.revoked_at IS NULL AND l.expires_at > p_now;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END
$$;
COMMENT ON FUNCTION billing.revoke_portal_links(bigint, timestamptz) IS
'Revokes every unused, unexpired portal link of the customer.
Returns how many were revoked.';

CREATE OR REPLACE FUNCTION billing.set_action_window(p_window interval)
RETURNS interval
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM billing._audit('set_action_window', jsonb_build_object('window', p_window));
    IF p_window IS NULL OR p_window < interval '1 hour' OR p_window > interval '30 days' THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = 'the action window is 1 hour to 30 days';
    END IF;
    UPDATE billing.installation SET action_window = p_window;
    RETURN p_window;
END
$$;
COMMENT ON FUNCTION billing.set_action_window(interval) IS
'How long dunning waits for a customer to authenticate a payment (3-D Secure) before trying again (72 hours by default).
Returns the window; BL422 outside 1 hour .. 30 days.';

CREATE OR REPLACE FUNCTION billing.invoice_action(p_customer_id bigint, p_invoice_id bigint, p_now timestamptz DEFAULT now())
RETURNS TABLE (invoice_id bigint, idempotency_key text, payment_reference text, provider text, amount bigint,
               currency text, action_required_until timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM billing._check_now(p_now);
    -- The customer's own OPEN invoice whose payment waits for their authentication: the attempt
    -- to confirm (its key and the provider's reference). Another customer's invoice is unknown.
    RETURN QUERY
    SELECT i.id, a.idempotency_key, a.gateway_reference, a.provider, a.amount, a.currency::text, i.action_required_until
      FROM billing.invoice i
      JOIN billing.payment_attempt a ON a.customer_id = i.customer_id AND a.invoice_id = i.id
     WHERE i.customer_id = p_customer_id AND i.id = p_invoice_id AND i.status = 'OPEN'
       AND i.action_required_until IS NOT NULL AND a.failure_reason = 'authentication_required'
       AND a.gateway_reference IS NOT NULL
     ORDER BY a.attempt_number DESC
     LIMIT 1;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'BL404',
            MESSAGE = format('invoice %s of customer %s waits for no authentication', p_invoice_id, p_customer_id);
    END IF;
END
$$;
COMMENT ON FUNCTION billing.invoice_action(bigint, bigint, timestamptz) IS
'The payment a customer is asked to authenticate on one of their OPEN invoices: the attempt''s key and the provider''s reference (a PaymentIntent), amount and currency.
Returns one row; BL404 when the invoice is not theirs, not OPEN, or waits for no authentication.';
