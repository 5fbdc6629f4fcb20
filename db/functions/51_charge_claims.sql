-- 51_charge_claims: charge workers claim OPEN invoices (docs/gateway.md): claim_charges (one
-- statement on a single PostgreSQL, row by row on Citus) and, beside it, its forms inside one shard
-- group (charge_claims_in_shard; docs/scaling.md, "Batch claims"). Each claim
-- leases the invoice and keys its attempt with the invoice's current try.
-- Re-applied after every migration: CREATE OR REPLACE only.

-- ---------------------------------------------------------------------------------------------
-- Claims (the results: 53_payment_results.sql)
-- ---------------------------------------------------------------------------------------------
DROP FUNCTION IF EXISTS billing.claim_charges(text, integer, interval, timestamptz);
-- The customer's payment method a new key is sent with: the default one of this provider, not
-- expired at p_now (a card works until the end of its expiry month, UTC).
CREATE OR REPLACE FUNCTION billing._usable_method(p_customer_id bigint, p_provider text, p_now timestamptz)
RETURNS billing.payment_method
LANGUAGE sql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
    SELECT pm.* FROM billing.payment_method pm
     WHERE pm.customer_id = p_customer_id AND pm.is_default AND pm.provider = p_provider
       AND make_timestamptz(pm.exp_year, pm.exp_month, 1, 0, 0, 0, 'UTC') + interval '1 month' > p_now
$$;
COMMENT ON FUNCTION billing._usable_method(bigint, text, timestamptz) IS
'Private: the customer''s default payment method at p_provider if it has not expired by p_now.
Returns the row, or NULL.';

DROP FUNCTION IF EXISTS billing.claim_charges(text, integer, interval, timestamptz, text);
CREATE OR REPLACE FUNCTION billing.claim_charges(
    p_worker text, p_batch_size integer DEFAULT 100, p_lease interval DEFAULT interval '5 minutes',
    p_now timestamptz DEFAULT now(), p_provider text DEFAULT 'sim')
RETURNS TABLE (invoice_id bigint, attempt_id bigint, idempotency_key text, customer_id bigint, amount bigint,
               currency text, lookup boolean, customer_ref text, payment_method_ref text)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
SET jit = off  -- a short OLTP statement: compiling it would cost more than running it
AS $$
#variable_conflict use_column
DECLARE
    v_cfg        billing.installation;
    v_ids        bigint[];
    v_unnumbered bigint[];
BEGIN
    PERFORM billing._check_claim(p_worker, p_batch_size, p_lease, p_now, true, coalesce(p_provider, ''));
    SELECT * INTO v_cfg FROM billing.installation;
    -- Nothing due: the call changes nothing, so it leaves no audit row (idle workers ask every
    -- second). One probe of the index the claim reads.
    IF NOT EXISTS (SELECT 1 FROM billing.invoice i WHERE i.status = 'OPEN' AND i.next_attempt_at <= p_now) THEN
        RETURN;
    END IF;
    PERFORM billing._audit('claim_charges', jsonb_build_object('worker', p_worker, 'batch_size', p_batch_size, 'lease', p_lease, 'now', p_now, 'provider', p_provider));
    IF billing._distributed('billing.customer') THEN
        -- On Citus the statement below would lock rows of many shards at once (refused there): the
        -- same claim row by row, each invoice locked and worked on in its customer's shard.
        RETURN QUERY SELECT * FROM billing._claim_charges_rows(p_worker, p_batch_size, p_lease, p_now, p_provider);
        RETURN;
    END IF;
    -- The batch: due invoices, oldest first, locked (SKIP LOCKED: another claimer's are skipped).
    SELECT array_agg(d.id), array_agg(d.id) FILTER (WHERE d.number IS NULL) INTO v_ids, v_unnumbered
      FROM (SELECT i.id, i.number
              FROM billing.invoice i
             WHERE i.status = 'OPEN' AND i.next_attempt_at <= p_now
             ORDER BY i.next_attempt_at
             LIMIT p_batch_size
               FOR NO KEY UPDATE SKIP LOCKED) d;
    IF v_ids IS NULL THEN
        RETURN;
    END IF;
    -- An invoice is finalized, with its number, no later than its first charge attempt: those of
    -- the batch not numbered yet (normally none: the renewal job finalizes right after creating)
    -- are finalized first, their tax recomputed if the customer changed since (docs/invoices.md).
    -- A claim never waits for the numbering counter: while another transaction holds it (the
    -- finalization job, another claim), they are left for a later round, unclaimed.
    IF v_unnumbered IS NOT NULL THEN
        IF billing._try_lock_numbers(p_now) THEN
            PERFORM billing._finalize(v_unnumbered, p_now);
        ELSE
            v_ids := ARRAY(SELECT x FROM unnest(v_ids) x WHERE x <> ALL (v_unnumbered));
        END IF;
    END IF;

    RETURN QUERY
    WITH due AS MATERIALIZED (
        SELECT i.id, i.try_count, i.customer_id
          FROM billing.invoice i
         WHERE i.id = ANY (v_ids) AND i.status = 'OPEN'  -- locked above; a refreshed one may be PAID
    ), keyed AS MATERIALIZED (
        -- A key already claimed keeps what it was sent with; a new key takes the customer's
        -- default usable method. With the simulator, a customer without a default is charged by
        -- customer id (method NULL); with a real provider such an invoice waits (below).
        SELECT d.id, a.key_expires_at, a.id AS attempt_id, m.id AS method_id, m.customer_ref, m.payment_method_ref,
               (a.id IS NULL AND m.id IS NULL AND (p_provider <> 'sim' OR dm.has_default)) AS needs_method,
               dm.has_default
          FROM due d
          LEFT JOIN billing.payment_attempt a ON a.invoice_id = d.id AND a.attempt_number = d.try_count
          LEFT JOIN LATERAL (SELECT u.* FROM billing._usable_method(d.customer_id, p_provider, p_now) u
                              WHERE a.id IS NULL AND u.id IS NOT NULL) m ON true
          CROSS JOIN LATERAL (SELECT EXISTS (SELECT 1 FROM billing.payment_method x
                                              WHERE x.customer_id = d.customer_id AND x.is_default
                                                AND x.provider = p_provider) AS has_default) dm
    ), expired AS (
        -- The key's lifetime is over and its fate is still unknown: never sent again; a person decides.
        UPDATE billing.invoice i
           SET status = 'REVIEW', next_attempt_at = NULL, review_reason = 'KEY_EXPIRED'
          FROM keyed k
         WHERE i.id = k.id AND k.key_expires_at <= p_now
        RETURNING i.*
    ), review_events AS (
        INSERT INTO billing.outbox_event (event_id, aggregate_type, aggregate_id, event_type, payload, created_at, available_at, customer_id)
        SELECT e.event_id, 'invoice', e.id, 'InvoicePaymentReview',
               billing._cloud_event(e.event_id, 'InvoicePaymentReview', 'invoice', e.id, p_now,
                                    billing._invoice_data(e.inv) || jsonb_build_object('reason', 'KEY_EXPIRED')),
               p_now, p_now, (e.inv).customer_id
          FROM (SELECT gen_random_uuid() AS event_id, x.id, x::billing.invoice AS inv FROM expired x ORDER BY x.id) e
    ), waiting AS (
        -- No usable payment method for a new key: the invoice waits for the customer (set_payment_method).
        UPDATE billing.invoice i
           SET next_attempt_at = NULL, waiting_for = 'PAYMENT_METHOD',
               give_up_at = coalesce(i.give_up_at, billing._waiting_give_up_at(i.customer_id, i.id, p_now))
          FROM keyed k
         WHERE i.id = k.id AND k.needs_method
        RETURNING i.id, i AS inv, k.has_default
    ), waiting_events AS (
        INSERT INTO billing.outbox_event (event_id, aggregate_type, aggregate_id, event_type, payload, created_at, available_at, customer_id)
        SELECT e.event_id, 'invoice', e.id, 'InvoicePaymentMethodRequired',
               billing._cloud_event(e.event_id, 'InvoicePaymentMethodRequired', 'invoice', e.id, p_now,
                                    billing._invoice_data(e.inv) || jsonb_build_object(
                                        'reason', CASE WHEN e.has_default THEN 'PAYMENT_METHOD_EXPIRED' ELSE 'NO_PAYMENT_METHOD' END,
                                        'declineCode', NULL, 'provider', p_provider)),
               p_now, p_now, (e.inv).customer_id
          FROM (SELECT gen_random_uuid() AS event_id, w.id, w.has_default, w.inv
                  FROM waiting w ORDER BY w.id) e
    ), claimed AS (
        -- The lease: a worker that dies before reporting gives the invoice back at p_now + p_lease.
        UPDATE billing.invoice i
           SET next_attempt_at = p_now + p_lease
          FROM keyed k
         WHERE i.id = k.id AND (k.key_expires_at IS NULL OR k.key_expires_at > p_now) AND NOT k.needs_method
        -- What is charged: its amount less what a cancellation took off as not served (issue 26 #3).
        RETURNING i.id, i.try_count, i.customer_id, i.amount - least(i.unserved, i.amount) AS amount, i.currency, k.method_id, k.customer_ref, k.payment_method_ref
    ), attempt AS (
        -- One row per try: a re-claim (lease expired, or UNKNOWN) reuses its key and what it was
        -- sent with, whatever the namespace and the customer's default method are now.
        INSERT INTO billing.payment_attempt AS a
               (customer_id, invoice_id, attempt_number, idempotency_key, amount, currency, worker, first_claimed_at,
                last_claimed_at, key_expires_at, provider, payment_method_id, customer_ref, payment_method_ref)
        SELECT c.customer_id, c.id, c.try_count, v_cfg.key_namespace || '-inv-' || c.id || '-try-' || c.try_count, c.amount, c.currency,
               p_worker, p_now, p_now, p_now + v_cfg.key_lifetime, p_provider, c.method_id, c.customer_ref,
               c.payment_method_ref
          FROM claimed c
        ON CONFLICT ON CONSTRAINT payment_attempt_one_per_try DO UPDATE
            SET claim_count = a.claim_count + 1, worker = excluded.worker, last_claimed_at = excluded.last_claimed_at
        RETURNING a.id, a.invoice_id, a.idempotency_key, a.claim_count, a.key_expires_at, a.customer_ref,
                  a.payment_method_ref, a.amount
    )
    -- The amount the key was first sent with (a re-claim sends the same key: the same amount).
    SELECT c.id, a.id, a.idempotency_key, c.customer_id, a.amount, c.currency::text,
           -- A key sent before whose call could end within the lookup margin of its expiry: ask
           -- the gateway what became of it instead of sending it again.
           a.claim_count > 1 AND p_now + p_lease > a.key_expires_at - v_cfg.lookup_margin,
           a.customer_ref, a.payment_method_ref
      FROM claimed c
      JOIN attempt a ON a.invoice_id = c.id
     ORDER BY c.id;
END
$$;
COMMENT ON FUNCTION billing.claim_charges(text, integer, interval, timestamptz, text) IS
'Claims up to p_batch_size OPEN invoices due by p_now (SKIP LOCKED), each finalized first if it was not (numbered no later than its first charge attempt, its tax recomputed if the customer changed since; left for a later call while another transaction holds the numbering counter), records one payment_attempt per key and leases them until p_now + p_lease. An invoice whose key outlived the gateway''s key lifetime goes to REVIEW instead (InvoicePaymentReview); one whose customer has no usable payment method at p_provider waits (waiting_for PAYMENT_METHOD, InvoicePaymentMethodRequired), except with the simulator (sim) for a customer who never set a default method: charged by customer id.
Returns what to charge: key <namespace>-inv-<invoice id>-try-<n>, reused by a re-claim with the same method references; lookup = ask the gateway for the key''s status instead of sending it (near its expiry); BL422 for bad arguments or a lease not shorter than the key lifetime.';

-- claim_charges' work for one invoice named by (customer_id, id): what the statement of
-- claim_charges does to each row it claims, under the row's lock (FOR NO KEY UPDATE SKIP LOCKED,
-- OPEN and due checked on the locked version), every statement naming the row by (customer_id, id)
-- (one shard on Citus). Used by claim_charges' per-row path on Citus and by the per-shard-group
-- claims (below). The same outcomes: REVIEW when the key outlived its lifetime, a wait
-- for a payment method, or the lease with one attempt row per key (a re-claim reuses it).
DROP FUNCTION IF EXISTS billing._claim_charge_row(billing.invoice, text, interval, timestamptz, text);
CREATE OR REPLACE FUNCTION billing._claim_charge_row(
    p_customer_id bigint, p_invoice_id bigint, p_worker text, p_lease interval, p_now timestamptz, p_provider text,
    p_cfg billing.installation)
RETURNS TABLE (invoice_id bigint, attempt_id bigint, idempotency_key text, customer_id bigint, amount bigint,
               currency text, lookup boolean, customer_ref text, payment_method_ref text)
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_invoice     billing.invoice;
    v_attempt     billing.payment_attempt;
    v_method      billing.payment_method;
    v_has_default boolean;
    v_give_up     timestamptz;
BEGIN
    SELECT * INTO v_invoice FROM billing.invoice i
     WHERE i.customer_id = p_customer_id AND i.id = p_invoice_id AND i.status = 'OPEN' AND i.next_attempt_at <= p_now
       FOR NO KEY UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN;  -- another claimer holds it, or it was settled or leased meanwhile
    END IF;
    IF v_invoice.number IS NULL THEN
        -- Finalized, with its number, no later than its first charge attempt (its tax recomputed
        -- first if the customer changed since: the amount charged is the document's). Never waiting
        -- for the numbering counter: held by another transaction, the invoice is left for later.
        IF NOT billing._try_lock_numbers(p_now) THEN
            RETURN;
        END IF;
        v_invoice := billing._finalize_one(v_invoice, p_now);
        IF v_invoice.status <> 'OPEN' THEN
            RETURN;  -- credit now covers it (PAID): nothing to charge
        END IF;
    END IF;
    SELECT a.* INTO v_attempt FROM billing.payment_attempt a
     WHERE a.customer_id = v_invoice.customer_id AND a.invoice_id = v_invoice.id AND a.attempt_number = v_invoice.try_count;
    -- A key already claimed keeps what it was sent with; a new key takes the customer's default
    -- usable method. With the simulator, a customer without a default is charged by customer id
    -- (method NULL); with a real provider such an invoice waits (below).
    IF v_attempt.id IS NULL THEN
        v_method := billing._usable_method(v_invoice.customer_id, p_provider, p_now);
    END IF;
    v_has_default := EXISTS (SELECT 1 FROM billing.payment_method x
                              WHERE x.customer_id = v_invoice.customer_id AND x.is_default AND x.provider = p_provider);

    IF v_attempt.key_expires_at <= p_now THEN
        -- The key's lifetime is over and its fate is still unknown: never sent again; a person decides.
        UPDATE billing.invoice i
           SET status = 'REVIEW', next_attempt_at = NULL, review_reason = 'KEY_EXPIRED'
         WHERE i.customer_id = v_invoice.customer_id AND i.id = v_invoice.id
        RETURNING i.* INTO v_invoice;
        PERFORM billing._emit_event('invoice', v_invoice.id, 'InvoicePaymentReview',
            billing._invoice_data(v_invoice) || jsonb_build_object('reason', 'KEY_EXPIRED'), p_now);
        RETURN;
    END IF;
    IF v_attempt.id IS NULL AND v_method.id IS NULL AND (p_provider <> 'sim' OR v_has_default) THEN
        -- No usable payment method for a new key: the invoice waits for the customer (set_payment_method).
        -- (The instant computed first: Citus takes no function reading a table, nor a STABLE
        -- operator, inside an UPDATE's coalesce.)
        v_give_up := coalesce(v_invoice.give_up_at, billing._waiting_give_up_at(v_invoice.customer_id, v_invoice.id, p_now));
        UPDATE billing.invoice i
           SET next_attempt_at = NULL, waiting_for = 'PAYMENT_METHOD', give_up_at = v_give_up
         WHERE i.customer_id = v_invoice.customer_id AND i.id = v_invoice.id
        RETURNING i.* INTO v_invoice;
        PERFORM billing._emit_event('invoice', v_invoice.id, 'InvoicePaymentMethodRequired',
            billing._invoice_data(v_invoice) || jsonb_build_object(
                'reason', CASE WHEN v_has_default THEN 'PAYMENT_METHOD_EXPIRED' ELSE 'NO_PAYMENT_METHOD' END,
                'declineCode', NULL, 'provider', p_provider), p_now);
        RETURN;
    END IF;

    -- The lease: a worker that dies before reporting gives the invoice back at p_now + p_lease.
    UPDATE billing.invoice i SET next_attempt_at = p_now + p_lease
     WHERE i.customer_id = v_invoice.customer_id AND i.id = v_invoice.id
    RETURNING i.* INTO v_invoice;
    -- One row per try: a re-claim (lease expired, or UNKNOWN) reuses its key and what it was sent
    -- with, whatever the namespace and the customer's default method are now.
    INSERT INTO billing.payment_attempt AS a
           (customer_id, invoice_id, attempt_number, idempotency_key, amount, currency, worker, first_claimed_at,
            last_claimed_at, key_expires_at, provider, payment_method_id, customer_ref, payment_method_ref)
    VALUES (v_invoice.customer_id, v_invoice.id, v_invoice.try_count,
            p_cfg.key_namespace || '-inv-' || v_invoice.id || '-try-' || v_invoice.try_count,
            v_invoice.amount - least(v_invoice.unserved, v_invoice.amount),
            v_invoice.currency, p_worker, p_now, p_now, p_now + p_cfg.key_lifetime, p_provider, v_method.id,
            v_method.customer_ref, v_method.payment_method_ref)
    ON CONFLICT ON CONSTRAINT payment_attempt_one_per_try DO UPDATE
        SET claim_count = a.claim_count + 1, worker = excluded.worker, last_claimed_at = excluded.last_claimed_at
    RETURNING a.* INTO v_attempt;
    RETURN QUERY
    SELECT v_invoice.id, v_attempt.id, v_attempt.idempotency_key, v_invoice.customer_id, v_attempt.amount,
           v_invoice.currency::text,
           -- A key sent before whose call could end within the lookup margin of its expiry: ask
           -- the gateway what became of it instead of sending it again.
           v_attempt.claim_count > 1 AND p_now + p_lease > v_attempt.key_expires_at - p_cfg.lookup_margin,
           v_attempt.customer_ref, v_attempt.payment_method_ref;
END
$$;
COMMENT ON FUNCTION billing._claim_charge_row(bigint, bigint, text, interval, timestamptz, text, billing.installation) IS
'Private: claim_charges'' work on one invoice named by (customer_id, id), under its row lock (SKIP LOCKED; OPEN and due checked on the locked version), finalized first if it was not: REVIEW when its key outlived the key lifetime (InvoicePaymentReview), a wait for a payment method (InvoicePaymentMethodRequired), else the lease to p_now + p_lease with its payment_attempt (key <namespace>-inv-<id>-try-<n>, one per try; a re-claim counts). p_cfg: billing.installation.
Returns the row claim_charges returns for it, or none (review, waiting, or held by another claimer, settled or leased meanwhile).';

-- claim_charges on Citus: its statement locks due invoices of many shards at once, which Citus
-- refuses. The same claim row by row: the due invoices are read unlocked (a read of every shard,
-- oldest due first, a page at a time), each is locked by (customer_id, id) FOR NO KEY UPDATE SKIP
-- LOCKED (one shard: another claimer's rows are skipped, as by the statement) and worked on by
-- _claim_charge_row, until p_batch_size invoices were locked or none is left.
CREATE OR REPLACE FUNCTION billing._claim_charges_rows(
    p_worker text, p_batch_size integer, p_lease interval, p_now timestamptz, p_provider text)
RETURNS TABLE (invoice_id bigint, attempt_id bigint, idempotency_key text, customer_id bigint, amount bigint,
               currency text, lookup boolean, customer_ref text, payment_method_ref text)
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_cfg       billing.installation;
    v_page      record;
    v_locked    integer := 0;
    v_after     timestamptz := '-infinity';
    v_after_c   bigint := -1;
    v_after_id  bigint := -1;
    v_seen      integer;
    v_row       record;
    v_rows      jsonb := '[]';
BEGIN
    SELECT * INTO v_cfg FROM billing.installation;
    LOOP
        v_seen := 0;
        FOR v_page IN
            SELECT i.customer_id, i.id, i.next_attempt_at FROM billing.invoice i
             WHERE i.status = 'OPEN' AND i.next_attempt_at <= p_now
               AND (i.next_attempt_at, i.customer_id, i.id) > (v_after, v_after_c, v_after_id)
             ORDER BY i.next_attempt_at, i.customer_id, i.id
             LIMIT p_batch_size - v_locked
        LOOP
            v_seen := v_seen + 1;
            v_after := v_page.next_attempt_at;
            v_after_c := v_page.customer_id;
            v_after_id := v_page.id;
            -- Locked here to count it against the batch (the statement's LIMIT counts the rows it
            -- locks); _claim_charge_row takes the same lock again, held already.
            PERFORM 1 FROM billing.invoice i
             WHERE i.customer_id = v_page.customer_id AND i.id = v_page.id
               AND i.status = 'OPEN' AND i.next_attempt_at <= p_now
               FOR NO KEY UPDATE SKIP LOCKED;
            CONTINUE WHEN NOT FOUND;  -- another claimer holds it, or it moved on
            v_locked := v_locked + 1;
            FOR v_row IN SELECT * FROM billing._claim_charge_row(v_page.customer_id, v_page.id, p_worker, p_lease, p_now,
                                                                 p_provider, v_cfg) LOOP
                v_rows := v_rows || jsonb_build_array(to_jsonb(v_row));
            END LOOP;
        END LOOP;
        EXIT WHEN v_seen = 0 OR v_locked >= p_batch_size;
    END LOOP;
    RETURN QUERY
    SELECT r.invoice_id, r.attempt_id, r.idempotency_key, r.customer_id, r.amount, r.currency, r.lookup, r.customer_ref,
           r.payment_method_ref
      FROM jsonb_to_recordset(v_rows) AS r(invoice_id bigint, attempt_id bigint, idempotency_key text, customer_id bigint,
                                           amount bigint, currency text, lookup boolean, customer_ref text,
                                           payment_method_ref text)
     ORDER BY r.invoice_id;
END
$$;
COMMENT ON FUNCTION billing._claim_charges_rows(text, integer, interval, timestamptz, text) IS
'Private: claim_charges on Citus, row by row: the due OPEN invoices read unlocked oldest due first, each locked by (customer_id, id) SKIP LOCKED and claimed by _claim_charge_row, up to p_batch_size locked.
Returns claim_charges'' rows in invoice id order.';
-- claim_charges_in_shard (a claim without the work) was never called by the driver: removed.
DROP FUNCTION IF EXISTS billing.claim_charges_in_shard(text, integer, integer, interval, timestamptz);

-- Set-based inside the group (issue 32): the claimed invoices that are numbered, whose key (if any)
-- is still alive and which have what a key is sent with (an attempt of this try, a usable default
-- method, or the simulator and no default at all) are keyed and leased by one statement on the
-- group's own shards: claim_charges' statement (above) with the shards' names, the same key, amount
-- and lookup. The others (to finalize first, past the key's lifetime, waiting for a method: rare)
-- go through billing._claim_charge_row, claim_charges' per-row form, under the same row locks.
CREATE OR REPLACE FUNCTION billing._charge_keys_statement(
    p_invoice text, p_attempt text, p_method text, p_attempt_seq text)
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path = billing, pg_catalog, pg_temp
AS $f$
    -- $1 customers, $2 invoice ids (both locked by the caller), $3 provider, $4 now, $5 lease,
    -- $6 worker, $7 key namespace, $8 key lifetime, $9 lookup margin.
    SELECT format($q$
    WITH due AS MATERIALIZED (
        -- by (customer_id, id) pairs: "customer_id = ANY AND id = ANY" would probe every combination
        SELECT i.customer_id, i.id, i.try_count
          FROM unnest($1::bigint[], $2::bigint[]) AS k(customer_id, id)
          JOIN %1$s i ON i.customer_id = k.customer_id AND i.id = k.id
         WHERE i.status = 'OPEN' AND i.number IS NOT NULL
    ), keyed AS MATERIALIZED (
        SELECT d.customer_id, d.id, a.id AS attempt_id, m.id AS method_id, m.customer_ref, m.payment_method_ref
          FROM due d
          LEFT JOIN %2$s a ON a.customer_id = d.customer_id AND a.invoice_id = d.id AND a.attempt_number = d.try_count
          LEFT JOIN LATERAL (
              -- billing._usable_method on the group's shard of payment_method
              SELECT pm.id, pm.customer_ref, pm.payment_method_ref FROM %3$s pm
               WHERE a.id IS NULL AND pm.customer_id = d.customer_id AND pm.is_default AND pm.provider = $3
                 AND make_timestamptz(pm.exp_year, pm.exp_month, 1, 0, 0, 0, 'UTC') + interval '1 month' > $4) m ON true
         WHERE (a.id IS NULL OR a.key_expires_at > $4)
           AND (a.id IS NOT NULL OR m.id IS NOT NULL
                OR ($3 = 'sim' AND NOT EXISTS (SELECT 1 FROM %3$s x WHERE x.customer_id = d.customer_id AND x.is_default
                                                                   AND x.provider = $3)))
    ), claimed AS (
        UPDATE %1$s i
           SET next_attempt_at = $4 + $5
          FROM keyed k
         WHERE i.customer_id = k.customer_id AND i.id = k.id
        RETURNING i.id, i.try_count, i.customer_id, i.amount - least(i.unserved, i.amount) AS amount, i.currency,
                  k.method_id, k.customer_ref, k.payment_method_ref
    ), attempt AS (
        INSERT INTO %2$s AS a
               (id, customer_id, invoice_id, attempt_number, idempotency_key, amount, currency, worker, first_claimed_at,
                last_claimed_at, key_expires_at, provider, payment_method_id, customer_ref, payment_method_ref)
        SELECT nextval(%4$L::regclass), c.customer_id, c.id, c.try_count, $7 || '-inv-' || c.id || '-try-' || c.try_count,
               c.amount, c.currency, $6, $4, $4, $4 + $8, $3, c.method_id, c.customer_ref, c.payment_method_ref
          FROM claimed c
        ON CONFLICT (customer_id, invoice_id, attempt_number) DO UPDATE
            SET claim_count = a.claim_count + 1, worker = excluded.worker, last_claimed_at = excluded.last_claimed_at
        RETURNING a.id, a.customer_id, a.invoice_id, a.idempotency_key, a.claim_count, a.key_expires_at, a.customer_ref,
                  a.payment_method_ref, a.amount
    )
    , result AS (
        SELECT c.id AS invoice_id, a.id AS attempt_id, a.idempotency_key, c.customer_id, a.amount,
               c.currency::text AS currency,
               -- near its expiry, a key sent before is looked up instead of sent again
               a.claim_count > 1 AND $4 + $5 > a.key_expires_at - $9 AS lookup,
               a.customer_ref, a.payment_method_ref
          FROM claimed c
          JOIN attempt a ON a.customer_id = c.customer_id AND a.invoice_id = c.id
    )
    SELECT coalesce(jsonb_agg(to_jsonb(r)), '[]'), coalesce(array_agg(r.invoice_id), '{}') FROM result r$q$,
    p_invoice, p_attempt, p_method, p_attempt_seq)
$f$;
COMMENT ON FUNCTION billing._charge_keys_statement(text, text, text, text) IS
'Private: the text of charge_claims_in_shard''s set-based step on the given tables (a group''s shards of invoice, payment_attempt, payment_method; payment_attempt''s id sequence): the locked invoices that are numbered, whose key is alive and that have what a key is sent with are leased until now + lease with their attempt (key <namespace>-inv-<id>-try-<n>; a re-claim counts), as claim_charges'' statement does.
Returns the statement''s text (parameters $1 customers, $2 invoice ids, $3 provider, $4 now, $5 lease, $6 worker, $7 key namespace, $8 key lifetime, $9 lookup margin).';

CREATE OR REPLACE FUNCTION billing.charge_claims_in_shard(
    p_worker text, p_shard_group integer, p_batch_size integer DEFAULT 100, p_lease interval DEFAULT interval '5 minutes',
    p_now timestamptz DEFAULT now(), p_provider text DEFAULT 'sim')
RETURNS TABLE (invoice_id bigint, attempt_id bigint, idempotency_key text, customer_id bigint, amount bigint,
               currency text, lookup boolean, customer_ref text, payment_method_ref text)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    v_cfg       billing.installation;
    v_invoice   text;
    v_customers bigint[];
    v_ids       bigint[];
    v_row       record;
    v_rows      jsonb;
    v_done      bigint[];
BEGIN
    PERFORM billing._check_claim(p_worker, p_batch_size, p_lease, p_now, true, coalesce(p_provider, ''));
    SELECT * INTO v_cfg FROM billing.installation;
    PERFORM billing._check_shard_lease(p_worker, p_shard_group, p_now);
    v_invoice := billing._shard_table('billing.invoice', p_shard_group);
    -- claim_charges' due invoices, in this group: oldest first, locked (SKIP LOCKED) until the
    -- transaction ends.
    EXECUTE format($q$
        WITH due AS MATERIALIZED (
            SELECT i.customer_id, i.id FROM %s i
             WHERE i.status = 'OPEN' AND i.next_attempt_at <= $1
             ORDER BY i.next_attempt_at LIMIT $2
               FOR NO KEY UPDATE SKIP LOCKED
        )
        SELECT array_agg(d.customer_id ORDER BY d.id), array_agg(d.id ORDER BY d.id) FROM due d$q$, v_invoice)
       INTO v_customers, v_ids USING p_now, p_batch_size;
    IF v_ids IS NULL THEN
        RETURN;  -- nothing due: no audit row
    END IF;
    PERFORM billing._audit('charge_claims_in_shard', jsonb_build_object('worker', p_worker, 'shard_group', p_shard_group, 'batch_size', p_batch_size, 'lease', p_lease, 'now', p_now, 'provider', p_provider));
    -- Most of the batch in one statement on the group's shards; then the rest (not numbered yet,
    -- key past its lifetime, waiting for a method: the statement leaves them OPEN and due) row by
    -- row as claim_charges does each. The statement's rows are leased by then (next_attempt_at
    -- in the future), so _claim_charge_row, which checks "due" on the locked row, skips them.
    EXECUTE billing._charge_keys_statement(
            v_invoice, billing._shard_table('billing.payment_attempt', p_shard_group),
            billing._shard_table('billing.payment_method', p_shard_group),
            pg_catalog.pg_get_serial_sequence('billing.payment_attempt', 'id'))
       INTO v_rows, v_done
      USING v_customers, v_ids, p_provider, p_now, p_lease, p_worker, v_cfg.key_namespace, v_cfg.key_lifetime,
            v_cfg.lookup_margin;
    IF cardinality(v_done) < cardinality(v_ids) THEN
        FOR i IN 1 .. cardinality(v_ids) LOOP
            CONTINUE WHEN v_ids[i] = ANY (v_done);
            FOR v_row IN SELECT * FROM billing._claim_charge_row(v_customers[i], v_ids[i], p_worker, p_lease, p_now,
                                                                 p_provider, v_cfg) LOOP
                v_rows := v_rows || jsonb_build_array(to_jsonb(v_row));
            END LOOP;
        END LOOP;
    END IF;
    RETURN QUERY
    SELECT r.invoice_id, r.attempt_id, r.idempotency_key, r.customer_id, r.amount, r.currency, r.lookup, r.customer_ref,
           r.payment_method_ref
      FROM jsonb_to_recordset(v_rows) AS r(invoice_id bigint, attempt_id bigint, idempotency_key text, customer_id bigint,
                                           amount bigint, currency text, lookup boolean, customer_ref text,
                                           payment_method_ref text)
     ORDER BY r.invoice_id;
END
$$;
COMMENT ON FUNCTION billing.charge_claims_in_shard(text, integer, integer, interval, timestamptz, text) IS
'claim_charges inside one leased shard group: claims up to p_batch_size OPEN invoices of the group due by p_now (oldest first, SKIP LOCKED) and does claim_charges'' work on them (set-based on the group''s shards, _charge_keys_statement; row by row, _claim_charge_row, for those to finalize first, past their key''s lifetime or without a usable method): the payment attempt and its key, the lease until p_now + p_lease, REVIEW past the key lifetime, waiting without a usable payment method. Call it on the node holding the group.
Returns what claim_charges returns, in invoice id order; BL409 when the worker does not hold the group''s lease or the group is on another node, BL404 for an unknown group, BL422 for bad arguments.';
