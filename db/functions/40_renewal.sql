-- 40_renewal: the renewal job. One statement claims a batch of due subscriptions with
-- FOR NO KEY UPDATE SKIP LOCKED, prices them (credit included), inserts their RENEWAL invoices,
-- advances their periods, cancels the ones flagged to cancel at period end and writes the
-- events, so that concurrent callers never touch the same subscription and no state
-- "invoice created but period not advanced" can exist. UNIQUE (subscription_id,
-- period_start, kind) is the last safety net: a bug cannot bill one period twice.
--
-- Speed (bench/renewal): the calendar is an inlined SQL expression, not a call per row, and the
-- claimed rows are updated through their ctid (a TID scan) rather than a primary-key probe.
-- A ctid is only safe when the locked row version is the one our snapshot sees; when another
-- session changed a due row after the statement began (a catch-up renewal, a concurrent cancel
-- or plan change), the TID scan misses it, the statement notices (renewed <> claimed) and is
-- retried as a whole with a fresh snapshot, inside a subtransaction.
--
-- One statement, one text (_renew_statement): _renew_batch runs it on the tables (generated as
-- static SQL), _renew_batch_in_shard on one shard group's shards (renew_in_shard's set-based step);
-- when each path says a subscription is due: 32_due.sql. The per-row renewal (Citus, the lifecycle)
-- is 41_renewal_rows.sql.
-- Re-applied after every migration: CREATE OR REPLACE only.

-- The statement's one text, with the names it works on as parameters: the tables (billing.* on a
-- single PostgreSQL; a shard group's own shards and this node's copies of the reference tables
-- plan, plan_price and tax_rate inside one group) and the expressions of the clock, the batch size and
-- whether any tax rate exists (the caller's variables, or $1..$3 of a dynamic statement). Ids come
-- from each table's own sequence (a shard has no identity default: Citus gives each node its own
-- range). _renew_batch is generated from it (static SQL, one cached generic plan: bench/renewal);
-- _renew_batch_in_shard executes it on a group's shards. 401_renewal_conformance and
-- citus/402_renewal_conformance check that every path gives the same invoices, credit,
-- subscriptions and events.
DROP FUNCTION IF EXISTS billing._renew_statement(text, text, text, text, text, text, text, text, text, text, text);
DROP FUNCTION IF EXISTS billing._renew_statement(text, text, text, text, text, text, text, text, text, text, text, text);
CREATE OR REPLACE FUNCTION billing._renew_statement(
    p_subscription text, p_credit_balance text, p_plan text, p_plan_price text, p_customer text,
    p_invoice text, p_credit_entry text, p_outbox_event text, p_tax_rate text, p_service_line text,
    p_now text, p_batch_size text, p_taxes text)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    RETURN format($q$
    WITH due AS MATERIALIZED (
        -- Locked rows come back in their latest committed version.
        SELECT s.ctid AS row_id, s.id, s.customer_id, s.plan_id, s.timezone, s.billing_anchor, s.period_number,
               s.current_period_end, s.cancel_at_period_end, s.quantity
          FROM %1$s s
         WHERE billing._due_statement(s.status, s.current_period_end, s.lifecycle_pending, %12$s)
         ORDER BY s.current_period_end
         LIMIT %13$s
           FOR NO KEY UPDATE SKIP LOCKED
    ), credit AS MATERIALIZED (
        -- Usually empty. Locked (waiting, not skipping) in key order, so concurrent renewals of
        -- one customer's subscriptions serialise on the balance instead of deadlocking.
        SELECT b.customer_id, b.currency, b.balance
          FROM %2$s b
         WHERE b.customer_id = ANY (ARRAY(SELECT d.customer_id FROM due d WHERE NOT d.cancel_at_period_end))
           AND b.balance > 0
         ORDER BY b.customer_id, b.currency
           FOR UPDATE
    ), base AS MATERIALIZED (
        SELECT d.row_id, d.id, d.customer_id, d.current_period_end AS period_start,
               billing._period_end(d.billing_anchor, p.billing_interval, p.interval_count,
                                   d.period_number + 1, d.timezone) AS period_end,
               t.price_amount * d.quantity AS amount, t.price_amount AS plan_price, d.quantity,
               p.currency, p.id AS plan_id, p.billing_interval, p.interval_count,
               -- The tax class of the row: its customer's address and tax status (read only while
               -- some tax rate exists).
               c.country, c.region, c.tax_status
          FROM due d
          JOIN %3$s p ON p.id = d.plan_id
          -- The price in force when the period starts (a late renewal of a past period is priced
          -- as it was then); the history is read only for a period older than the current price.
          CROSS JOIN LATERAL (
              SELECT CASE WHEN p.price_effective_from IS NULL OR d.current_period_end >= p.price_effective_from
                          THEN p.price_amount
                          ELSE (SELECT pp.price_amount FROM %4$s pp
                                 WHERE pp.plan_id = p.id AND pp.effective_from <= d.current_period_end
                                 ORDER BY pp.effective_from DESC LIMIT 1) END AS price_amount) t
          -- (a subquery whose other condition is only the flag: a one-time filter, so no customer is read
          -- while no rate exists; as a join condition the generic plan probed each row's customer anyway)
          LEFT JOIN LATERAL (SELECT c.country, c.region, c.tax_status FROM %5$s c
                              WHERE %14$s AND c.id = d.customer_id) c ON true
         WHERE NOT d.cancel_at_period_end
    ), taxed AS MATERIALIZED (
        -- Taxes set-based (14_tax.sql's text): computed once per tax class of the batch (address,
        -- tax status, taxable amount), then joined back to its rows; nothing while no rate exists.
        SELECT k.country, k.region, k.tax_status, k.amount, tx.tax_amount, tx.tax_included, tx.tax_detail
          FROM (SELECT DISTINCT b.country, b.region, b.tax_status, b.amount FROM base b WHERE b.tax_status IS NOT NULL) k
         CROSS JOIN LATERAL (%15$s) tx
    ), spread AS MATERIALIZED (
        -- Usually empty: a balance is spread over the customer's invoices of this batch in id order
        -- (on their totals, tax included); only the rows of customers with a balance are sorted.
        SELECT b.id,
               least(b.amount + coalesce(x.tax_amount, 0),
                     greatest(0, c.balance - coalesce(sum(b.amount + coalesce(x.tax_amount, 0)) OVER (
                         PARTITION BY b.customer_id, b.currency ORDER BY b.id
                         ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0)))::bigint AS credit_applied
          FROM base b
          JOIN credit c ON c.customer_id = b.customer_id AND c.currency = b.currency
          LEFT JOIN taxed x ON x.amount = b.amount AND x.tax_status = b.tax_status
                           AND coalesce(x.country, '') = coalesce(b.country, '')
                           AND coalesce(x.region, '') = coalesce(b.region, '')
    ), priced AS MATERIALIZED (
        SELECT b.row_id, b.id, b.customer_id, b.period_start, b.period_end, b.amount, b.plan_price, b.quantity,
               b.currency, b.plan_id, b.billing_interval, b.interval_count,
               coalesce(x.tax_amount, 0) AS tax_amount, coalesce(x.tax_included, 0) AS tax_included, x.tax_detail,
               coalesce(sp.credit_applied, 0) AS credit_applied
          FROM base b
          -- The class's key: country and region may be NULL (no address), never '' (their checks).
          LEFT JOIN taxed x ON x.amount = b.amount AND x.tax_status = b.tax_status
                           AND coalesce(x.country, '') = coalesce(b.country, '')
                           AND coalesce(x.region, '') = coalesce(b.region, '')
          LEFT JOIN spread sp ON sp.id = b.id
         -- Invoices in the customers' order (their ids, lines and events in that order too).
         ORDER BY b.customer_id, b.id
    ), new_invoice AS (
        INSERT INTO %6$s (id, subscription_id, customer_id, kind, period_start, period_end, subtotal,
                                     credit_applied, amount, currency, status, due_at, next_attempt_at, paid_at,
                                     created_at, plan_id, plan_price, billing_interval, interval_count, quantity,
                                     tax_amount, tax_included, tax_detail, attempt_count, discount_amount, coupon_code,
                                     gateway_reference)
        SELECT nextval(%9$L::regclass), p.id, p.customer_id, 'RENEWAL', p.period_start, p.period_end, p.amount,
               p.credit_applied, p.amount + p.tax_amount - p.credit_applied, p.currency,
               CASE WHEN p.amount + p.tax_amount = p.credit_applied THEN 'PAID' ELSE 'OPEN' END, %12$s,
               CASE WHEN p.amount + p.tax_amount = p.credit_applied THEN NULL ELSE %12$s END,
               CASE WHEN p.amount + p.tax_amount = p.credit_applied THEN %12$s END, %12$s,
               p.plan_id, p.plan_price, p.billing_interval, p.interval_count, p.quantity,
               p.tax_amount, p.tax_included, p.tax_detail, 0, 0, NULL, NULL
          FROM priced p
        -- (what the lines, the credit ledger and the events read: not the whole row)
        RETURNING id, subscription_id, customer_id, period_start, period_end, subtotal, credit_applied, amount,
                  currency, status, plan_id, plan_price, quantity, tax_amount, tax_included
    ), new_lines AS (
        -- The service ledger (17_ledger): each renewal sells its period in one CHARGE line (no
        -- coupon here: a discounted renewal takes the per-row path).
        INSERT INTO %16$s (id, customer_id, subscription_id, invoice_id, kind, item, plan_id, quantity,
                           unit_price, span_start, span_end, gross, net, tax, tax_inclusive, currency,
                           basis_start, basis_gross, basis_net, created_at)
        SELECT nextval(%17$L::regclass), i.customer_id, i.subscription_id, i.id, 'CHARGE', 'PLAN', i.plan_id,
               i.quantity, i.plan_price, i.period_start, i.period_end, i.subtotal, i.subtotal,
               i.tax_amount + i.tax_included, i.tax_included > 0, i.currency, i.period_start, i.subtotal,
               i.subtotal, %12$s
          FROM new_invoice i
    ), renewed AS (
        UPDATE %1$s s
           SET current_period_start = p.period_start,
               current_period_end = p.period_end,
               period_number = s.period_number + 1,
               period_price = p.amount,
               version = s.version + 1,
               updated_at = %12$s
          FROM priced p
         WHERE s.ctid = p.row_id
        RETURNING 1
    ), canceled AS (
        UPDATE %1$s s
           SET status = 'CANCELED', canceled_at = %12$s, cancel_reason = 'PERIOD_END',
               version = s.version + 1, updated_at = %12$s
          FROM due d
         WHERE s.ctid = d.row_id AND d.cancel_at_period_end
        RETURNING s.*
    ), credit_used AS (
        UPDATE %2$s b
           SET balance = b.balance - u.used, updated_at = %12$s
          FROM (SELECT customer_id, currency, sum(credit_applied) AS used
                  FROM priced WHERE credit_applied > 0
                 GROUP BY customer_id, currency) u
         WHERE b.customer_id = u.customer_id AND b.currency = u.currency
    ), credit_ledger AS (
        INSERT INTO %7$s (id, customer_id, currency, amount, reason, subscription_id, invoice_id, created_at)
        SELECT nextval(%10$L::regclass), i.customer_id, i.currency, -i.credit_applied, 'APPLIED', i.subscription_id, i.id, %12$s
          FROM new_invoice i
         WHERE i.credit_applied > 0
    ), now_text AS MATERIALIZED (
        SELECT billing._utc_text(%12$s) AS now_text
    ), event_ids AS MATERIALIZED (
        -- The events' ids: one random UUID (v4) per statement, its last 48 bits (the text's last
        -- group of 12 hex digits) counting the statement's events from a random start, as
        -- create_subscriptions does (gen_random_uuid() per event: ~1.9 us each, bench/README.md
        -- "renewal6"). Each id keeps the v4 form and the 74 random bits of its statement.
        SELECT left(u.u::text, 24) AS head, ('x' || right(u.u::text, 12))::bit(48)::bigint AS low
          FROM (SELECT gen_random_uuid() AS u) u
    ), events AS (
        -- InvoiceCreated for every invoice, plus the rare rows (cancellations, invoices paid by
        -- credit): one INSERT, hence one NOTIFY. An invoice event's envelope is written as one JSON
        -- text, stored as it is (the payload is json since migration 0800: validated, not parsed;
        -- jsonb_build_object for its data and again for the envelope cost ~12 us per invoice,
        -- bench/renewal/profile.py): the text of _cloud_event_at(..., _invoice_data(invoice)) byte
        -- for byte, in jsonb's key order (401_renewal_conformance checks every payload). Every
        -- value written raw is a number, an instant from _utc_text, our own literal (what this
        -- statement inserts: kind, no coupon, no discount, no attempt, no gateway reference) or a
        -- value its CHECK confines to letters (status, currency). The clock's text is made once.
        INSERT INTO %8$s (id, event_id, aggregate_type, aggregate_id, event_type, payload, created_at, available_at, customer_id)
        SELECT nextval(%11$L::regclass), e.event_text::uuid, e.aggregate_type, e.aggregate_id, e.event_type,
               CASE WHEN e.data IS NOT NULL
                    THEN billing._cloud_event_at(e.event_text::uuid, e.event_type, e.aggregate_type, e.aggregate_id,
                                                 e.now_text, e.data)::json
                    ELSE ('{"id": "' || e.event_text || '", "data": ' || e.data_text || ', "time": "'
                          || e.now_text || '", "type": "' || e.event_type
                          || '", "source": "billing", "subject": "invoice/' || e.aggregate_id::text
                          || '", "dataschema": "urn:billing:events:' || e.event_type || ':v'
                          || billing._event_version(e.event_type)
                          || '", "specversion": "1.0", "datacontenttype": "application/json"}')::json END,
               %12$s, %12$s, e.customer_id
          FROM (SELECT g.head || lpad(to_hex((g.low + row_number() OVER ()) & 281474976710655), 12, '0') AS event_text,
                       n.now_text, x.*
                  FROM (SELECT 'subscription' AS aggregate_type, c.id AS aggregate_id,
                               'SubscriptionCanceled' AS event_type,
                               billing._subscription_data(c::billing.subscription) AS data, NULL::text AS data_text,
                               0 AS seq, c.customer_id
                          FROM canceled c
                        UNION ALL
                        SELECT 'invoice', i.id, t.event_type, NULL, i.data_text, t.seq, i.customer_id
                          FROM (SELECT i.id, i.customer_id, i.status,
                                       -- _invoice_data's keys in jsonb's order (the parse keeps them so)
                                       '{"kind": "RENEWAL", "amount": ' || i.amount::text
                                       || ', "paidAt": ' || CASE WHEN i.status = 'PAID' THEN '"' || n.now_text || '"' ELSE 'null' END
                                       || ', "status": "' || i.status || '", "currency": "' || i.currency
                                       || '", "quantity": ' || i.quantity::text
                                       || ', "subtotal": ' || i.subtotal::text
                                       || ', "invoiceId": ' || i.id::text
                                       || ', "periodEnd": "' || billing._utc_text(i.period_end)
                                       || '", "couponCode": null, "customerId": ' || i.customer_id::text
                                       || ', "periodStart": "' || billing._utc_text(i.period_start)
                                       || '", "attemptCount": 0, "creditApplied": ' || i.credit_applied::text
                                       || ', "discountAmount": 0, "subscriptionId": ' || i.subscription_id::text
                                       || ', "gatewayReference": null}' AS data_text
                                  FROM new_invoice i CROSS JOIN now_text n) i
                         CROSS JOIN LATERAL (VALUES ('InvoiceCreated', 1), ('InvoicePaid', 2)) t (event_type, seq)
                         WHERE t.seq = 1 OR i.status = 'PAID') x
                 CROSS JOIN event_ids g CROSS JOIN now_text n
                 ORDER BY x.aggregate_type, x.aggregate_id, x.seq) e
    )
    SELECT (SELECT count(*) FROM due),
           (SELECT count(*) FROM due),
           (SELECT count(*) FROM renewed) + (SELECT count(*) FROM canceled),
           (SELECT array_agg(d.id) FROM due d WHERE d.cancel_at_period_end)$q$,
        p_subscription, p_credit_balance, p_plan, p_plan_price, p_customer, p_invoice, p_credit_entry, p_outbox_event,
        pg_catalog.pg_get_serial_sequence('billing.invoice', 'id'),
        pg_catalog.pg_get_serial_sequence('billing.credit_entry', 'id'),
        pg_catalog.pg_get_serial_sequence('billing.outbox_event', 'id'),
        p_now, p_batch_size, p_taxes,
        billing._invoice_tax_sql(p_tax_rate, 'k.country', 'k.region', 'k.tax_status', 'k.amount'),
        p_service_line, pg_catalog.pg_get_serial_sequence('billing.service_line', 'id'));
END
$$;
COMMENT ON FUNCTION billing._renew_statement(text, text, text, text, text, text, text, text, text, text, text, text, text) IS
'Private: the renewal statement''s text over the given tables and expressions (clock, batch size, taxes on): claims due subscriptions (SKIP LOCKED), prices them (credit, tax), inserts their RENEWAL invoices and their CHARGE service lines, advances their periods, cancels those flagged to cancel at period end and writes the events; it selects claimed, expected, updated and the ids canceled.
Returns the statement.';

-- _renew_batch: the statement on the tables themselves, generated as static SQL so that PL/pgSQL
-- keeps one plan for every call.
DO $gen$
BEGIN
    EXECUTE format($f$
CREATE OR REPLACE FUNCTION billing._renew_batch(p_batch_size integer, p_now timestamptz)
RETURNS TABLE (handled integer, canceled bigint[])
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
-- One plan for every call: planning this statement anew each time (a custom plan per batch
-- size and clock) cost about 4 ms, 8 us per invoice at the default batch of 500. Without
-- sequential scans the only plans left are the intended ones whatever the estimates: the due
-- index in period-end order, TID scans for the claimed rows, index probes of credit_balance.
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
-- The generic plan's estimates grow with the table (LIMIT of unknown size); past jit_above_cost
-- every call paid ~150 ms of JIT compilation (30 us per invoice at 5M rows) for nothing.
SET jit = off
AS $body$
DECLARE
    v_claimed  integer;
    v_expected integer;
    v_updated  integer;
    v_taxes    boolean := EXISTS (SELECT 1 FROM billing.tax_rate WHERE active);
BEGIN
    -- The mark of this statement (migration 0920): invoice_subscription_exists skips its probe for
    -- the statement's invoices, whose subscriptions are the rows it locks. Removed right after it; an
    -- error rolls it back with the statement (_renew_set's subtransaction).
    INSERT INTO billing.renewal_statement_mark (xact) VALUES (pg_catalog.pg_current_xact_id());
%s
      INTO v_claimed, v_expected, v_updated, canceled;
    DELETE FROM billing.renewal_statement_mark WHERE xact = pg_catalog.pg_current_xact_id();
    PERFORM billing._renew_check(v_expected, v_updated);
    handled := v_claimed;
    RETURN NEXT;
END
$body$
$f$,
        billing._renew_statement('billing.subscription', 'billing.credit_balance', 'billing.plan', 'billing.plan_price',
                                 'billing.customer', 'billing.invoice', 'billing.credit_entry', 'billing.outbox_event',
                                 'billing.tax_rate', 'billing.service_line', 'p_now', 'p_batch_size', 'v_taxes'));
END
$gen$;
COMMENT ON FUNCTION billing._renew_batch(integer, timestamptz) IS
'Private: the renewal statement (_renew_statement) on the tables themselves, static (one cached plan); raises 40001 when a claimed row changed under it.
Returns how many subscriptions it handled and the ids it canceled at period end.';

-- The statement's own check: a claimed row changed after the statement began (its ctid no longer
-- the version the snapshot sees) -- the caller retries on a fresh snapshot (_renew_set).
CREATE OR REPLACE FUNCTION billing._renew_check(p_expected integer, p_updated integer)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    IF p_updated <> p_expected THEN
        RAISE EXCEPTION USING ERRCODE = '40001',
            MESSAGE = format('%s of %s claimed subscriptions changed after the renewal statement began',
                             p_expected - p_updated, p_expected);
    END IF;
END
$$;
COMMENT ON FUNCTION billing._renew_check(integer, integer) IS
'Private: raises 40001 when the renewal statement updated fewer rows than it claimed.
Returns nothing.';

-- The same statement on one shard group's own shards (renew_in_shard's set-based step), on the
-- node holding the group (on a single PostgreSQL, group 0: the tables themselves); planned per call.
CREATE OR REPLACE FUNCTION billing._renew_batch_in_shard(p_shard_group integer, p_batch_size integer, p_now timestamptz)
RETURNS TABLE (handled integer, canceled bigint[])
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
    v_claimed  integer;
    v_expected integer;
    v_updated  integer;
    v_taxes    boolean := EXISTS (SELECT 1 FROM billing.tax_rate WHERE active);
BEGIN
    EXECUTE billing._renew_statement(
        billing._shard_table('billing.subscription', p_shard_group),
        billing._shard_table('billing.credit_balance', p_shard_group),
        billing._local_table('billing.plan'),
        billing._local_table('billing.plan_price'),
        billing._shard_table('billing.customer', p_shard_group),
        billing._shard_table('billing.invoice', p_shard_group),
        billing._shard_table('billing.credit_entry', p_shard_group),
        billing._shard_table('billing.outbox_event', p_shard_group),
        billing._local_table('billing.tax_rate'),
        billing._shard_table('billing.service_line', p_shard_group),
        '$1', '$2', '$3')
      INTO v_claimed, v_expected, v_updated, canceled
     USING p_now, p_batch_size, v_taxes;
    PERFORM billing._renew_check(v_expected, v_updated);
    handled := v_claimed;
    RETURN NEXT;
END
$$;
COMMENT ON FUNCTION billing._renew_batch_in_shard(integer, integer, timestamptz) IS
'Private: the renewal statement (_renew_statement) on one shard group''s own shards (renew_in_shard''s set-based step: subscriptions without lifecycle_pending); raises 40001 when a claimed row changed under it.
Returns how many subscriptions it handled and the ids it canceled at period end.';

-- The statement's step of create_due_invoices and renew_in_shard: run (on the tables, or on one
-- shard group's shards), retried as a whole on a fresh snapshot when a claimed row changed under it
-- (inside a subtransaction: rolled back to before the statement). The subscriptions it canceled at
-- period end keep their unpaid invoices owed: they bill time served.
CREATE OR REPLACE FUNCTION billing._renew_set(p_shard_group integer, p_batch_size integer, p_now timestamptz)
RETURNS integer
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_handled  integer;
    v_canceled bigint[];
    v_try      integer := 0;
BEGIN
    LOOP
        v_try := v_try + 1;
        BEGIN
            IF p_shard_group IS NULL THEN
                SELECT r.handled, r.canceled INTO v_handled, v_canceled FROM billing._renew_batch(p_batch_size, p_now) r;
            ELSE
                SELECT r.handled, r.canceled INTO v_handled, v_canceled
                  FROM billing._renew_batch_in_shard(p_shard_group, p_batch_size, p_now) r;
            END IF;
            EXIT;
        EXCEPTION WHEN serialization_failure THEN
            -- Rolled back to before the statement; a new statement takes a new snapshot.
            IF v_try >= 10 THEN
                RAISE;
            END IF;
        END;
    END LOOP;
    -- The subscriptions canceled at period end keep their unpaid invoices: they bill time served (the
    -- whole period; issue 26 #3), so nothing is voided (v_canceled: the statement's answer).
    RETURN v_handled;
END
$$;
COMMENT ON FUNCTION billing._renew_set(integer, integer, timestamptz) IS
'Private: the renewal statement''s step (NULL group: _renew_batch on the tables; else _renew_batch_in_shard on the group''s shards), retried up to 10 times on 40001 (the subscriptions it canceled at period end keep their unpaid invoices: time served).
Returns how many subscriptions it handled.';

CREATE OR REPLACE FUNCTION billing.create_due_invoices(p_batch_size integer DEFAULT 500, p_now timestamptz DEFAULT now())
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_lifecycle integer;
BEGIN
    PERFORM billing._audit('create_due_invoices', jsonb_build_object('batch_size', p_batch_size, 'now', p_now));
    PERFORM billing._check_now(p_now);
    PERFORM billing._check_between('batch size', p_batch_size, 1, 100000);
    -- On Citus the statement below cannot run (FOR UPDATE across shards, docs/scaling.md): the
    -- same work row by row, each row locked by (customer_id, id). The scale path there is
    -- renew_in_shard, per shard group.
    IF billing._distributed('billing.customer') THEN
        RETURN billing._renew_rows(p_batch_size, p_now);
    END IF;
    -- Trial notices, resumes at their date, and the renewals that need the per-row path (a trial
    -- ends, a coupon discounts, a scheduled change applies): usually few rows (35_lifecycle.sql).
    v_lifecycle := billing._renew_lifecycle(p_batch_size, p_now);
    -- Then the statement on the tables.
    RETURN billing._renew_set(NULL, p_batch_size, p_now) + v_lifecycle;
END
$$;
COMMENT ON FUNCTION billing.create_due_invoices(integer, timestamptz) IS
'Claims up to p_batch_size due subscriptions (SKIP LOCKED); renews each by one period (RENEWAL invoice due at p_now at the plan''s price in force when the period starts, times its seats, coupon discount and credit applied) or cancels it if flagged; ends trials (first invoice), resumes paused subscriptions at their resume date, applies scheduled plan changes and announces trials ending soon.
Returns how many it handled: 0 means nothing is due; call again to catch up missed periods (one per call per subscription).';
