-- 60_invoices: invoices as documents (docs/invoices.md): billing details and tax rates, the lines
-- of an invoice, finalization with a gapless legal number, immutability, credit notes for a
-- voided or refunded finalized invoice, and the document read by GET /invoices/{id}.
-- Re-applied after every migration: CREATE OR REPLACE only.
--
-- Finalization is a job step of its own (finalize_invoices, after create_due_invoices): the
-- renewal statement stays set-based and never waits on a numbering counter. An invoice is charged
-- as soon as it is created; it is numbered within seconds, and at the latest when a refund or a
-- void needs its number. A voided invoice that was never finalized is a draft discarded: no
-- number, no credit note.
--
-- This file: numbering, lines, finalization and totals; immutability and credit notes are
-- 61_credit_notes.sql, tax rates, billing details and the document 62_invoice_document.sql.

-- ---------------------------------------------------------------------------------------------
-- Numbering: one counter row per series, taken under its row lock in the caller's transaction.
-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION billing._take_numbers(p_series text, p_count integer)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_first bigint;
BEGIN
    INSERT INTO billing.document_series (series) VALUES (p_series)
    ON CONFLICT ON CONSTRAINT document_series_pkey DO NOTHING;
    UPDATE billing.document_series SET next_number = next_number + p_count, updated_at = now()
     WHERE series = p_series
    RETURNING next_number - p_count INTO v_first;
    RETURN v_first;
END
$$;
COMMENT ON FUNCTION billing._take_numbers(text, integer) IS
'Private: takes p_count consecutive numbers of the series (its counter row stays locked until the transaction ends, so a rollback gives them back: no gap).
Returns the first number taken.';

-- The claims' form: the counter of p_now's series if no other transaction holds it (SKIP LOCKED), so
-- a claim never waits for the finalization job or another claim; false when it is held.
CREATE OR REPLACE FUNCTION billing._try_lock_numbers(p_now timestamptz)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_series text := to_char(p_now AT TIME ZONE 'UTC', 'YYYY');
BEGIN
    PERFORM 1 FROM billing.document_series WHERE series = v_series FOR UPDATE SKIP LOCKED;
    IF FOUND THEN
        RETURN true;
    END IF;
    IF EXISTS (SELECT 1 FROM billing.document_series WHERE series = v_series) THEN
        RETURN false;  -- held by another transaction
    END IF;
    PERFORM billing._take_numbers(v_series, 0);  -- the year's first number: the series is created
    RETURN true;
END
$$;
COMMENT ON FUNCTION billing._try_lock_numbers(timestamptz) IS
'Private: locks the numbering counter of p_now''s UTC year unless another transaction holds it (SKIP LOCKED; a series not created yet is created).
Returns whether the caller now holds it.';

CREATE OR REPLACE FUNCTION billing._document_number(p_series text, p_number bigint)
RETURNS text
LANGUAGE sql IMMUTABLE
AS $$
    SELECT p_series || '-' || pg_catalog.lpad(p_number::text, 6, '0')
$$;
COMMENT ON FUNCTION billing._document_number(text, bigint) IS
'Private: the printed number: <series>-<at least 6 digits> (2026-000123).
Returns the text.';

-- ---------------------------------------------------------------------------------------------
-- The lines of an invoice, from its terms. Written once at finalization; an invoice not yet
-- finalized shows the same lines as a preview.
-- ---------------------------------------------------------------------------------------------
-- PL/pgSQL: it reads the subscription (a distributed table on Citus) with a parameter.
CREATE OR REPLACE FUNCTION billing._invoice_lines(p_invoice billing.invoice, p_tax_status text)
RETURNS TABLE (line_no integer, kind text, description text, quantity integer, unit_amount bigint, amount bigint,
               tax_rate_code text, tax_rate_bp integer, tax_inclusive boolean,
               period_start timestamptz, period_end timestamptz)
LANGUAGE plpgsql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    -- Service dates are printed in the subscription's own zone (its calendar).
    v_tz text := coalesce((SELECT s.timezone FROM billing.subscription s
                            WHERE s.customer_id = p_invoice.customer_id AND s.id = p_invoice.subscription_id), 'UTC');
BEGIN
    RETURN QUERY
    WITH zone AS (
        SELECT v_tz AS tz
    ), charge AS (
        SELECT CASE WHEN p_invoice.kind = 'PRORATION' THEN 'PRORATION' ELSE 'PLAN' END AS kind,
               CASE WHEN p_invoice.kind = 'PRORATION'
                    THEN format('Plan change to %s (%s seat%s), prorated from %s to %s', p.code, p_invoice.quantity,
                                CASE WHEN p_invoice.quantity = 1 THEN '' ELSE 's' END,
                                to_char(p_invoice.period_start AT TIME ZONE z.tz, 'YYYY-MM-DD'),
                                to_char(p_invoice.period_end AT TIME ZONE z.tz, 'YYYY-MM-DD'))
                    ELSE format('%s (%s seat%s), %s to %s%s', p.code, p_invoice.quantity,
                                CASE WHEN p_invoice.quantity = 1 THEN '' ELSE 's' END,
                                to_char(p_invoice.period_start AT TIME ZONE z.tz, 'YYYY-MM-DD'),
                                to_char(p_invoice.period_end AT TIME ZONE z.tz, 'YYYY-MM-DD'),
                                CASE WHEN p_invoice.subtotal + p_invoice.discount_amount
                                          <> p_invoice.plan_price * p_invoice.quantity THEN ', prorated' ELSE '' END)
               END AS description
          FROM billing.plan p, zone z WHERE p.id = p_invoice.plan_id AND p_invoice.kind <> 'USAGE'
    ), usage AS (
        -- A USAGE invoice: one line per service line of rated usage (72_usage_rating), in line order.
        SELECT l.id, format('%s %s%s, %s to %s', l.meter_code, trim(trailing '.' FROM trim(trailing '0' FROM
                                CASE WHEN l.usage_quantity = trunc(l.usage_quantity) THEN trunc(l.usage_quantity)::text || '.'
                                     ELSE l.usage_quantity::text END)),
                           CASE WHEN l.span_end <= p_invoice.period_start THEN ' (late usage)' ELSE '' END,
                           to_char(l.span_start AT TIME ZONE z.tz, 'YYYY-MM-DD HH24:MI'),
                           to_char(l.span_end AT TIME ZONE z.tz, 'YYYY-MM-DD HH24:MI')) AS description,
               l.gross, l.span_start, l.span_end
          FROM billing.service_line l, zone z
         WHERE p_invoice.kind = 'USAGE' AND l.customer_id = p_invoice.customer_id AND l.invoice_id = p_invoice.id
           AND l.item = 'USAGE'
    ), taxes AS (
        -- (a change's invoice, taxed line by line: an entry of another address than the invoice's names
        -- its jurisdiction, house8)
        SELECT t.ord, t.line->>'code' AS code,
               (t.line->>'name') || CASE WHEN t.line ? 'country'
                                              AND ((t.line->>'country') IS DISTINCT FROM (p_invoice.tax_detail->>'country')
                                                   OR (t.line->>'region') IS DISTINCT FROM (p_invoice.tax_detail->>'region'))
                                         THEN ' ' || coalesce(t.line->>'country', '') || coalesce('-' || (t.line->>'region'), '')
                                         ELSE '' END AS name,
               (t.line->>'rateBp')::integer AS rate_bp,
               (t.line->>'inclusive')::boolean AS inclusive, (t.line->>'amount')::bigint AS amount
          FROM jsonb_array_elements(coalesce(p_invoice.tax_detail->'lines', '[]'::jsonb)) WITH ORDINALITY t(line, ord)
    ), treatment AS (
        SELECT coalesce(p_invoice.tax_detail->>'treatment', p_tax_status, 'TAXABLE') AS status
    ), all_lines AS (
        SELECT 1 AS ord, c.kind, c.description, p_invoice.quantity, p_invoice.plan_price AS unit_amount,
               p_invoice.subtotal + p_invoice.discount_amount AS amount,
               NULL::text AS code, NULL::integer AS bp, NULL::boolean AS incl,
               p_invoice.period_start AS ps, p_invoice.period_end AS pe
          FROM charge c
        UNION ALL
        SELECT 1, 'USAGE', u.description, 1, u.gross, u.gross, NULL, NULL, NULL, u.span_start, u.span_end
          FROM usage u
        UNION ALL
        SELECT 2, 'DISCOUNT', format('Coupon %s', p_invoice.coupon_code), NULL, NULL, -p_invoice.discount_amount,
               NULL, NULL, NULL, NULL, NULL
         WHERE p_invoice.discount_amount > 0
        UNION ALL
        SELECT 3 + t.ord, 'TAX',
               format('%s %s%%%s', t.name, trim(trailing '.' FROM trim(trailing '0' FROM to_char(t.rate_bp / 100.0, 'FM990.00'))),
                      CASE WHEN t.inclusive THEN ' (included)' ELSE '' END),
               NULL, NULL, t.amount, t.code, t.rate_bp, t.inclusive, NULL, NULL
          FROM taxes t
        UNION ALL
        -- Every invoice has a tax line: an exempt, reverse-charge or untaxed one says so at 0 (a change's
        -- invoice that gives back tax of another address says its treatment beside it).
        SELECT 3, 'TAX',
               CASE tr.status WHEN 'EXEMPT' THEN 'Tax exempt'
                              WHEN 'REVERSE_CHARGE' THEN 'Reverse charge: tax to be accounted for by the recipient'
                              ELSE 'No tax' END,
               NULL, NULL, 0, NULL, 0, false, NULL, NULL
          FROM treatment tr
         WHERE NOT EXISTS (SELECT 1 FROM taxes) OR tr.status IN ('EXEMPT', 'REVERSE_CHARGE')
        UNION ALL
        SELECT 1000, 'CREDIT', 'Customer credit applied', NULL, NULL, -p_invoice.credit_applied,
               NULL, NULL, NULL, NULL, NULL
         WHERE p_invoice.credit_applied > 0
    )
    SELECT (row_number() OVER (ORDER BY a.ord, a.ps, a.description))::integer, a.kind, a.description, a.quantity, a.unit_amount, a.amount,
           a.code, a.bp, a.incl, a.ps, a.pe
      FROM all_lines a
     ORDER BY a.ord, a.ps, a.description;
END
$$;
COMMENT ON FUNCTION billing._invoice_lines(billing.invoice, text) IS
'Private: the document lines of an invoice from its terms (service dates in the subscription''s zone): PLAN (or PRORATION) = subtotal + discount (a USAGE invoice: one USAGE line per rated usage service line), DISCOUNT, one TAX line per rate applied (or one at 0 saying exempt / reverse charge / no tax), CREDIT.
Returns the lines in order.';

-- ---------------------------------------------------------------------------------------------
-- Finalization
-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION billing._bill_to(p_customer_id bigint)
RETURNS jsonb
LANGUAGE plpgsql STABLE  -- PL/pgSQL: it reads the customer (a distributed table on Citus) with a parameter
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    RETURN (SELECT jsonb_strip_nulls(jsonb_build_object(
                'customerId', c.id, 'name', c.name, 'email', c.email, 'address', c.address, 'city', c.city,
                'postalCode', c.postal_code, 'region', c.region, 'country', c.country, 'taxId', c.tax_id,
                'taxStatus', c.tax_status))
              FROM billing.customer c WHERE c.id = p_customer_id);
END
$$;
COMMENT ON FUNCTION billing._bill_to(bigint) IS
'Private: the customer''s billing details as printed on a document.
Returns a jsonb object.';

-- The tax of an invoice not finalized yet is of the address its detail records (treatment,
-- country, region). When the customer's details changed since, the bill-to printed and the tax
-- would be of two instants: at finalization they are taken together again and the tax recomputed
-- (only for an invoice never sent to the gateway: one charged keeps the figures it was charged).
CREATE OR REPLACE FUNCTION billing._tax_stale(p_detail jsonb, p_tax_status text, p_country text, p_region text)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT p_detail IS NOT NULL
       AND ((p_detail->>'treatment') IS DISTINCT FROM p_tax_status
            OR (p_detail ? 'country' AND ((p_detail->>'country') IS DISTINCT FROM p_country
                                          OR (p_detail->>'region') IS DISTINCT FROM p_region)))
$$;
COMMENT ON FUNCTION billing._tax_stale(jsonb, text, text, text) IS
'Private: whether an invoice''s tax detail was computed for another tax status or address (country, region) than the given one; false without a detail (no rate existed when it was created) and, for an invoice created before the detail recorded its address, only by the treatment.
Returns the boolean.';

-- A change's invoice not finalized, never sent to the gateway, none of whose lines was reversed,
-- that retaxed at the customer's address now bills nothing or less (_refresh_tax): the change ends in
-- credit as _prorate_change ends it when the difference tax included is not positive. The invoice
-- is VOID (never numbered, InvoiceVoided with reason "retaxed", the credit it consumed given back);
-- its lines stay in force without invoice (the reversals depending on nothing, the new line, retaxed,
-- on the period's other unpaid invoices, as a credit-ending change writes them); the difference is
-- credit for the period (_grant_change_credit: pending on those invoices, capped by what the period
-- kept). Its figures go with its lines: subtotal, tax and amount 0 (announced voided with the figures
-- it billed until then). The subscription keeps its new terms. When the subscription is in another period since,
-- the invoice keeps its figures.
CREATE OR REPLACE FUNCTION billing._change_invoice_to_credit(p_invoice billing.invoice, p_charge_id bigint,
                                                             p_charge_tax bigint, p_charge_inclusive boolean,
                                                             p_charge_entries jsonb, p_now timestamptz)
RETURNS billing.invoice
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_sub     billing.subscription;
    v_invoice billing.invoice;
    v_rev     record;
    v_charge  billing.service_line;
BEGIN
    SELECT * INTO v_sub FROM billing.subscription s
     WHERE s.customer_id = p_invoice.customer_id AND s.id = p_invoice.subscription_id;
    IF NOT FOUND OR v_sub.current_period_end IS DISTINCT FROM p_invoice.period_end
       OR v_sub.current_period_start > p_invoice.period_start THEN
        RETURN p_invoice;
    END IF;
    SELECT coalesce(sum(-l.net), 0)::bigint AS net,
           coalesce(sum(-l.tax) FILTER (WHERE NOT l.tax_inclusive), 0)::bigint AS tax_exclusive INTO v_rev
      FROM billing.service_line l
     WHERE l.customer_id = p_invoice.customer_id AND l.invoice_id = p_invoice.id AND l.kind = 'REVERSAL';
    UPDATE billing.invoice i
       SET status = 'VOID', next_attempt_at = NULL, waiting_for = NULL, give_up_at = NULL, closed_at = p_now
     WHERE i.customer_id = p_invoice.customer_id AND i.id = p_invoice.id
    RETURNING i.* INTO v_invoice;
    -- (announced with the figures it billed until now; then they go with its lines: it bills nothing)
    PERFORM billing._emit_event('invoice', v_invoice.id, 'InvoiceVoided',
        billing._invoice_data(v_invoice) || jsonb_build_object('reason', 'retaxed: the change ends in credit'), p_now);
    PERFORM billing._restore_credit(v_invoice, p_now);
    PERFORM billing._settle_pending_credit(v_invoice, p_now);
    UPDATE billing.invoice i
       SET subtotal = 0, tax_amount = 0, tax_included = 0, credit_applied = 0, amount = 0
     WHERE i.customer_id = p_invoice.customer_id AND i.id = p_invoice.id
    RETURNING i.* INTO v_invoice;
    UPDATE billing.service_line l SET invoice_id = NULL
     WHERE l.customer_id = p_invoice.customer_id AND l.invoice_id = p_invoice.id AND l.kind = 'REVERSAL';
    UPDATE billing.service_line l
       SET invoice_id = NULL, depends_on = billing._period_unpaid(v_sub),
           tax = p_charge_tax, tax_inclusive = p_charge_inclusive, tax_lines = p_charge_entries
     WHERE l.customer_id = p_invoice.customer_id AND l.id = p_charge_id
    RETURNING l.* INTO v_charge;
    PERFORM billing._grant_change_credit(
        v_sub, p_invoice.currency,
        billing._period_credit_base(v_sub, v_rev.net + v_rev.tax_exclusive)
            - (v_charge.net + CASE WHEN p_charge_inclusive THEN 0 ELSE p_charge_tax END), p_now);
    RETURN v_invoice;
END
$$;
COMMENT ON FUNCTION billing._change_invoice_to_credit(billing.invoice, bigint, bigint, boolean, jsonb, timestamptz) IS
'Private: a change''s invoice that retaxed at finalization bills nothing or less: VOID (InvoiceVoided, the credit it consumed given back), its lines in force without invoice (the new line p_charge_id retaxed: p_charge_tax, p_charge_inclusive, p_charge_entries; depending on the period''s other unpaid invoices) and the difference granted as the period''s credit, as a change ending in credit; unchanged when its subscription is in another period since.
Returns the invoice as it is now.';

CREATE OR REPLACE FUNCTION billing._refresh_tax(p_invoice billing.invoice, p_now timestamptz)
RETURNS billing.invoice
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_customer billing.customer;
    v_tax      record;
    v_total    bigint;
    v_applied  bigint;
    v_invoice  billing.invoice;
    v_line     record;
    v_line_tax record;
    v_charge   record;
    v_by_line  boolean;
    v_now      record;
    v_charge_entries jsonb;
BEGIN
    IF p_invoice.tax_detail IS NULL OR p_invoice.number IS NOT NULL THEN
        RETURN p_invoice;
    END IF;
    SELECT * INTO v_customer FROM billing.customer c WHERE c.id = p_invoice.customer_id;
    IF NOT FOUND OR NOT billing._tax_stale(p_invoice.tax_detail, v_customer.tax_status, v_customer.country::text, v_customer.region) THEN
        RETURN p_invoice;
    END IF;
    IF p_invoice.status <> 'OPEN' OR p_invoice.try_count > 0 OR p_invoice.attempt_count > 0
       OR EXISTS (SELECT 1 FROM billing.payment_attempt a
                   WHERE a.customer_id = p_invoice.customer_id AND a.invoice_id = p_invoice.id) THEN
        -- Sent to the gateway or settled: its figures stand. (An invoice is finalized before its
        -- first charge attempt, so only one settled by credit alone, or made before this rule, is here.)
        RETURN p_invoice;
    END IF;
    IF EXISTS (SELECT 1 FROM billing.service_line c
                 JOIN billing.service_line r ON r.customer_id = c.customer_id AND r.reverses_id = c.id
                WHERE c.customer_id = p_invoice.customer_id AND c.invoice_id = p_invoice.id AND c.kind = 'CHARGE') THEN
        -- A change (or cancellation) already gave back part of a line it sells, at the tax the line was
        -- sold with: its figures stand (money10, found by the adversary: retaxed after a move to an
        -- untaxed address, the line bore no tax while its reversal had given back 20% of it, tax the
        -- customer never paid; the other way, tax it never gave back).
        RETURN p_invoice;
    END IF;
    -- A change's invoice (a CHARGE line beside REVERSAL lines): its tax is its lines' (house8): the new
    -- line retaxed at the address now, the reversals keep the tax of the lines they reverse.
    SELECT l.id, l.net INTO v_charge FROM billing.service_line l
     WHERE l.customer_id = p_invoice.customer_id AND l.invoice_id = p_invoice.id AND l.kind = 'CHARGE'
     ORDER BY l.id LIMIT 1;
    v_by_line := p_invoice.kind = 'PRORATION' AND v_charge.id IS NOT NULL
                 AND EXISTS (SELECT 1 FROM billing.service_line l WHERE l.customer_id = p_invoice.customer_id
                                AND l.invoice_id = p_invoice.id AND l.kind = 'REVERSAL');
    IF v_by_line THEN
        SELECT (x.t).tax_amount, (x.t).tax_included, (x.t).tax_detail INTO v_now
          FROM (SELECT billing._tax_of(v_customer.country, v_customer.region, v_customer.tax_status, v_charge.net) AS t) x;
        v_charge_entries := billing._tax_lines_of(v_now.tax_detail, v_charge.net);
        v_tax := billing._tax_of_lines(billing._invoice_tax_lines(p_invoice.customer_id, p_invoice.id, v_charge.id,
                                                                  v_charge_entries),
                                       v_now.tax_detail->>'treatment', v_now.tax_detail->>'country', v_now.tax_detail->>'region');
        IF p_invoice.subtotal + v_tax.tax_amount <= 0 THEN
            -- It would give back as much as it bills or more (the customer moved to an untaxed address
            -- since): the change ends in credit, as it would have at this address (adv11; before, it
            -- kept its figures: a small downgrade that billed its tax owed after a move kept billing it
            -- when the customer moved back before its finalization).
            RETURN billing._change_invoice_to_credit(p_invoice, v_charge.id, v_now.tax_amount + v_now.tax_included,
                                                     v_now.tax_included > 0, v_charge_entries, p_now);
        END IF;
    ELSE
        -- Called in a target list (Citus refuses a query into which _tax_of was inlined).
        SELECT (x.t).tax_amount, (x.t).tax_included, (x.t).tax_detail INTO v_tax
          FROM (SELECT billing._tax_of(v_customer.country, v_customer.region, v_customer.tax_status, p_invoice.subtotal) AS t) x;
    END IF;
    v_total := p_invoice.subtotal + v_tax.tax_amount;
    -- Credit pays the total, tax included: what a lower total no longer needs goes back.
    v_applied := least(p_invoice.credit_applied, v_total);
    IF p_invoice.credit_applied > v_applied THEN
        PERFORM billing._grant_credit(p_invoice.customer_id, p_invoice.currency, p_invoice.credit_applied - v_applied,
                                      'RESTORED', p_invoice.subscription_id, p_invoice.id, p_now);
    END IF;
    UPDATE billing.invoice i
       SET tax_amount = v_tax.tax_amount, tax_included = v_tax.tax_included, tax_detail = v_tax.tax_detail,
           credit_applied = v_applied, amount = v_total - v_applied,
           status = CASE WHEN v_total - v_applied = 0 THEN 'PAID' ELSE i.status END,
           paid_at = CASE WHEN v_total - v_applied = 0 THEN p_now ELSE i.paid_at END,
           next_attempt_at = CASE WHEN v_total - v_applied = 0 THEN NULL ELSE i.next_attempt_at END,
           waiting_for = CASE WHEN v_total - v_applied = 0 THEN NULL ELSE i.waiting_for END,
           give_up_at = CASE WHEN v_total - v_applied = 0 THEN NULL ELSE i.give_up_at END
     WHERE i.customer_id = p_invoice.customer_id AND i.id = p_invoice.id
    RETURNING i.* INTO v_invoice;
    -- The lines it sells carry the tax it now bills (review7): a change or a cancellation gives back a
    -- line's unused part at the line's own tax, so a line left at the old address's rate would give
    -- back tax never paid (or keep tax that was). Its REVERSAL lines keep the tax of the lines they
    -- reverse (what was paid for them). One line at a time by (customer_id, id): one shard on Citus.
    IF v_by_line THEN
        UPDATE billing.service_line l
           SET tax = v_now.tax_amount + v_now.tax_included, tax_inclusive = v_now.tax_included > 0,
               tax_lines = v_charge_entries
         WHERE l.customer_id = p_invoice.customer_id AND l.id = v_charge.id;
    END IF;
    FOR v_line IN SELECT l.id, l.net FROM billing.service_line l
                   WHERE l.customer_id = p_invoice.customer_id AND l.invoice_id = p_invoice.id AND l.kind = 'CHARGE'
                     AND NOT v_by_line
    LOOP
        v_line_tax := billing._line_tax(p_invoice.customer_id, v_line.net);
        UPDATE billing.service_line l SET tax = v_line_tax.tax, tax_inclusive = v_line_tax.inclusive
         WHERE l.customer_id = p_invoice.customer_id AND l.id = v_line.id
           AND (l.tax, l.tax_inclusive) IS DISTINCT FROM (v_line_tax.tax, v_line_tax.inclusive);
    END LOOP;
    IF v_invoice.status = 'PAID' THEN
        PERFORM billing._emit_event('invoice', v_invoice.id, 'InvoicePaid', billing._invoice_data(v_invoice), p_now);
        PERFORM billing._settle_pending_credit(v_invoice, p_now);
    END IF;
    RETURN v_invoice;
END
$$;
COMMENT ON FUNCTION billing._refresh_tax(billing.invoice, timestamptz) IS
'Private: before an invoice is finalized (or a line of it reversed: _retax_unfinalized), its tax recomputed for the customer''s current tax status and address when its detail records others (_tax_stale), it was never sent to the gateway and no line it sells was reversed yet (a reversal gave back the line''s tax as it stood: then its figures stand): tax, total, credit applied (the excess RESTORED) and amount, and the tax of the CHARGE lines it sells (service_line); PAID (announced) when credit now covers it; a change''s invoice that would bill nothing or less ends in credit (_change_invoice_to_credit: VOID). Call it holding the invoice''s row lock.
Returns the invoice as it is now.';

-- Finalizes the given invoices (locked by the caller, not finalized, not VOID) in id order.
CREATE OR REPLACE FUNCTION billing._finalize(p_ids bigint[], p_now timestamptz)
RETURNS integer
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_series  text := to_char(p_now AT TIME ZONE 'UTC', 'YYYY');
    v_first   bigint;
    v_count   integer := coalesce(cardinality(p_ids), 0);
    v_invoice billing.invoice;
    v_done    integer := 0;
BEGIN
    IF v_count = 0 THEN
        RETURN 0;
    END IF;
    -- Bill-to and tax of one instant: an invoice whose customer changed tax status or address since
    -- it was made gets its tax recomputed first (rare: one row at a time; on Citus each by its key,
    -- read first). A change's invoice that then bills nothing is VOID (its change ends in credit,
    -- adv11): never numbered, so the numbers are taken after.
    IF billing._distributed('billing.customer') THEN
        FOREACH v_invoice IN ARRAY ARRAY(SELECT i FROM billing.invoice i WHERE i.id = ANY (p_ids) ORDER BY i.id) LOOP
            PERFORM billing._refresh_tax(v_invoice, p_now);
        END LOOP;
    ELSE
        FOR v_invoice IN
            SELECT i.* FROM billing.invoice i JOIN billing.customer c ON c.id = i.customer_id
             WHERE i.id = ANY (p_ids) AND billing._tax_stale(i.tax_detail, c.tax_status, c.country::text, c.region)
        LOOP
            PERFORM billing._refresh_tax(v_invoice, p_now);
        END LOOP;
    END IF;
    IF EXISTS (SELECT 1 FROM billing.invoice i WHERE i.id = ANY (p_ids) AND i.status = 'VOID') THEN
        p_ids := ARRAY(SELECT i.id FROM billing.invoice i WHERE i.id = ANY (p_ids) AND i.status <> 'VOID' ORDER BY i.id);
        v_count := coalesce(cardinality(p_ids), 0);
        IF v_count = 0 THEN
            RETURN 0;
        END IF;
    END IF;
    v_first := billing._take_numbers(v_series, v_count);
    IF billing._distributed('billing.customer') THEN
        -- Citus: one invoice at a time by (customer_id, id) (this statement would span shards); the
        -- rows (locked by the caller) read first, then finalized.
        FOREACH v_invoice IN ARRAY ARRAY(SELECT i FROM billing.invoice i WHERE i.id = ANY (p_ids) ORDER BY i.id) LOOP
            PERFORM billing._finalize_one(v_invoice, p_now, billing._document_number(v_series, v_first + v_done));
            v_done := v_done + 1;
        END LOOP;
        RETURN v_done;
    END IF;
    WITH numbered AS (
        SELECT i.id, v_first + row_number() OVER (ORDER BY i.id) - 1 AS n
          FROM billing.invoice i WHERE i.id = ANY (p_ids)
    ), done AS (
        UPDATE billing.invoice i
           SET number = billing._document_number(v_series, n.n), finalized_at = p_now,
               bill_to = billing._bill_to(i.customer_id)
          FROM numbered n
         WHERE i.id = n.id
        RETURNING i.*
    )
    INSERT INTO billing.invoice_line (customer_id, invoice_id, line_no, kind, description, quantity, unit_amount, amount,
                                      tax_rate_code, tax_rate_bp, tax_inclusive, period_start, period_end)
    SELECT d.customer_id, d.id, l.line_no, l.kind, l.description, l.quantity, l.unit_amount, l.amount,
           l.tax_rate_code, l.tax_rate_bp, l.tax_inclusive, l.period_start, l.period_end
      FROM done d
     CROSS JOIN LATERAL billing._invoice_lines(d::billing.invoice, d.bill_to->>'taxStatus') l;

    -- The lines must add up to the invoice's figures (a bug here must not print a wrong document).
    PERFORM 1 FROM billing.invoice i
      LEFT JOIN billing._invoice_totals(p_ids) t ON t.invoice_id = i.id
     WHERE i.id = ANY (p_ids)
       AND (t.invoice_id IS NULL OR t.subtotal <> i.subtotal OR t.tax_amount <> i.tax_amount
            OR t.tax_included <> i.tax_included OR t.amount_due <> i.amount);
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'XX000', MESSAGE = 'invoice lines do not add up to the invoice totals';
    END IF;
    RETURN v_count;
END
$$;
COMMENT ON FUNCTION billing._finalize(bigint[], timestamptz) IS
'Private: numbers the given locked invoices (gapless, series = UTC year of p_now, in id order), snapshots the bill-to details (the tax recomputed first where the customer changed tax status or address since: _refresh_tax) and writes their lines; checks the lines add up to the invoice figures.
Returns how many were finalized.';

-- One invoice, by (customer_id, id): the per-row paths (finalize_invoice, a refund's credit note) and
-- the batch on Citus. Without p_number it takes the next number of the series (the caller holds the
-- invoice's row lock: invoice first, then the series' counter, as everywhere).
CREATE OR REPLACE FUNCTION billing._finalize_one(p_invoice billing.invoice, p_now timestamptz, p_number text DEFAULT NULL)
RETURNS billing.invoice
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_series  text := to_char(p_now AT TIME ZONE 'UTC', 'YYYY');
    v_number  text := p_number;
    v_bill_to jsonb := billing._bill_to(p_invoice.customer_id);
    v_invoice billing.invoice;
    v_totals  record;
BEGIN
    -- Bill-to and tax of one instant (the tax recomputed when the customer changed since). A change's
    -- invoice that then bills nothing is VOID (its change ends in credit: adv11), never numbered.
    v_invoice := billing._refresh_tax(p_invoice, p_now);
    IF v_invoice.status = 'VOID' THEN
        RETURN v_invoice;
    END IF;
    v_number := coalesce(v_number, billing._document_number(v_series, billing._take_numbers(v_series, 1)));
    UPDATE billing.invoice SET number = v_number, finalized_at = p_now, bill_to = v_bill_to
     WHERE customer_id = p_invoice.customer_id AND id = p_invoice.id
    RETURNING * INTO v_invoice;
    INSERT INTO billing.invoice_line (customer_id, invoice_id, line_no, kind, description, quantity, unit_amount, amount,
                                      tax_rate_code, tax_rate_bp, tax_inclusive, period_start, period_end)
    SELECT v_invoice.customer_id, v_invoice.id, l.line_no, l.kind, l.description, l.quantity, l.unit_amount, l.amount,
           l.tax_rate_code, l.tax_rate_bp, l.tax_inclusive, l.period_start, l.period_end
      FROM billing._invoice_lines(v_invoice, v_bill_to->>'taxStatus') l;
    -- The lines must add up to the invoice's figures (a bug here must not print a wrong document).
    SELECT * INTO v_totals FROM billing._invoice_totals(v_invoice.customer_id, ARRAY[v_invoice.id]);
    IF v_totals.invoice_id IS NULL OR v_totals.subtotal <> v_invoice.subtotal OR v_totals.tax_amount <> v_invoice.tax_amount
       OR v_totals.tax_included <> v_invoice.tax_included OR v_totals.amount_due <> v_invoice.amount THEN
        RAISE EXCEPTION USING ERRCODE = 'XX000', MESSAGE = 'invoice lines do not add up to the invoice totals';
    END IF;
    RETURN v_invoice;
END
$$;
COMMENT ON FUNCTION billing._finalize_one(billing.invoice, timestamptz, text) IS
'Private: finalizes one locked invoice by (customer_id, id): its number (p_number, or the next of the series of p_now''s UTC year), bill-to snapshot (the tax recomputed first if the customer changed tax status or address since: _refresh_tax) and lines; checks the lines add up to its figures.
Returns the invoice finalized.';


CREATE OR REPLACE FUNCTION billing.finalize_invoices(p_batch_size integer DEFAULT 500, p_now timestamptz DEFAULT now())
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_ids     bigint[];
    v_keys    record;
    v_invoice billing.invoice;
    v_locked  billing.invoice[] := '{}';
    v_series  text := to_char(p_now AT TIME ZONE 'UTC', 'YYYY');
    v_first   bigint;
    i         integer;
BEGIN
    PERFORM billing._check_now(p_now);
    PERFORM billing._check_between('batch size', p_batch_size, 1, 100000);
    -- The series' counter first (waiting): one finalizer at a time per series, whose invoices
    -- are then picked in id order, skipping those another transaction holds (a charge, a void).
    PERFORM billing._take_numbers(v_series, 0);
    IF billing._distributed('billing.customer') THEN
        -- Citus (convention 3 of docs/scaling.md): the candidates read unlocked over every shard, then
        -- each locked by (customer_id, id), SKIP LOCKED, its condition checked again on the locked row.
        SELECT array_agg(x.customer_id ORDER BY x.id) AS customers, array_agg(x.id ORDER BY x.id) AS ids INTO v_keys
          FROM (SELECT i.customer_id, i.id FROM billing.invoice i
                 WHERE i.number IS NULL AND i.status <> 'VOID'
                 ORDER BY i.id LIMIT p_batch_size) x;
        FOR i IN 1..coalesce(cardinality(v_keys.ids), 0) LOOP
            SELECT * INTO v_invoice FROM billing.invoice
             WHERE customer_id = v_keys.customers[i] AND id = v_keys.ids[i] AND number IS NULL AND status <> 'VOID'
               FOR UPDATE SKIP LOCKED;
            IF FOUND THEN
                v_locked := v_locked || v_invoice;
            END IF;
        END LOOP;
        -- (retaxed first: one that is then VOID, its change ending in credit, is never numbered: adv11)
        FOR i IN 1..cardinality(v_locked) LOOP
            v_locked[i] := billing._refresh_tax(v_locked[i], p_now);
        END LOOP;
        v_locked := ARRAY(SELECT x FROM unnest(v_locked) x WHERE x.status <> 'VOID');
        IF cardinality(v_locked) = 0 THEN
            RETURN 0;
        END IF;
        v_first := billing._take_numbers(v_series, cardinality(v_locked));
        FOR i IN 1..cardinality(v_locked) LOOP
            PERFORM billing._finalize_one(v_locked[i], p_now, billing._document_number(v_series, v_first + i - 1));
        END LOOP;
        RETURN cardinality(v_locked);
    END IF;
    SELECT array_agg(id ORDER BY id) INTO v_ids
      FROM (SELECT i.id FROM billing.invoice i
             WHERE i.number IS NULL AND i.status <> 'VOID'
             ORDER BY i.id
             LIMIT p_batch_size
               FOR UPDATE SKIP LOCKED) x;
    RETURN billing._finalize(v_ids, p_now);
END
$$;
COMMENT ON FUNCTION billing.finalize_invoices(integer, timestamptz) IS
'Finalizes up to p_batch_size invoices not yet finalized (any status but VOID), oldest first: each gets its legal number <year>-<6 digits> from the gapless series of p_now''s UTC year, its bill-to details and its lines; its document never changes afterwards. Run by the renewal job after create_due_invoices.
Returns how many were finalized: 0 means none is waiting.';

CREATE OR REPLACE FUNCTION billing.finalize_invoice(p_invoice_id bigint, p_now timestamptz DEFAULT now())
RETURNS billing.invoice
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_invoice billing.invoice;
    v_customer_id bigint;
BEGIN
    PERFORM billing._check_now(p_now);
    v_customer_id := billing._invoice_customer(p_invoice_id);
    -- Lock order: the invoice, then the series' counter (in _finalize_one), as the refund and void
    -- paths do; finalize_invoices takes the counter first but never waits for an invoice (SKIP
    -- LOCKED), so no cycle can form.
    SELECT * INTO v_invoice FROM billing.invoice WHERE customer_id = v_customer_id AND id = p_invoice_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'BL404',
            MESSAGE = format('invoice %s does not exist', coalesce(p_invoice_id::text, 'NULL'));
    END IF;
    IF v_invoice.number IS NOT NULL THEN
        RETURN v_invoice;
    END IF;
    IF v_invoice.status = 'VOID' THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('invoice %s was voided before it was finalized: it is never numbered', p_invoice_id);
    END IF;
    RETURN billing._finalize_one(v_invoice, p_now);
END
$$;
COMMENT ON FUNCTION billing.finalize_invoice(bigint, timestamptz) IS
'Finalizes one invoice now (as finalize_invoices does); idempotent: a finalized invoice is returned unchanged. A change''s invoice that, retaxed for the customer''s address now, bills nothing or less is voided instead, unnumbered (its change ends in credit).
Returns the invoice; BL404 for an unknown id, BL422 for an invoice voided before it was finalized.';

DROP VIEW IF EXISTS billing.invoice_totals;
-- PL/pgSQL (the lines are a distributed table on Citus); with p_customer_id, the lines of one customer
-- only (one shard group on Citus).
CREATE OR REPLACE FUNCTION billing._invoice_totals(p_customer_id bigint, p_invoice_ids bigint[])
RETURNS TABLE (invoice_id bigint, subtotal bigint, tax_amount bigint, tax_included bigint, total bigint,
               credit_applied bigint, amount_due bigint)
LANGUAGE plpgsql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    -- One query text for both forms: the customer's filter is a constant fragment (no input in it).
    RETURN QUERY EXECUTE format($q$
    SELECT l.invoice_id,
           sum(l.amount) FILTER (WHERE l.kind IN ('PLAN', 'PRORATION', 'USAGE', 'DISCOUNT'))::bigint,
           coalesce(sum(l.amount) FILTER (WHERE l.kind = 'TAX' AND NOT l.tax_inclusive), 0)::bigint,
           coalesce(sum(l.amount) FILTER (WHERE l.kind = 'TAX' AND l.tax_inclusive), 0)::bigint,
           (sum(l.amount) FILTER (WHERE l.kind IN ('PLAN', 'PRORATION', 'USAGE', 'DISCOUNT'))
            + coalesce(sum(l.amount) FILTER (WHERE l.kind = 'TAX' AND NOT l.tax_inclusive), 0))::bigint,
           coalesce(-sum(l.amount) FILTER (WHERE l.kind = 'CREDIT'), 0)::bigint,
           (sum(l.amount) FILTER (WHERE l.kind <> 'TAX' OR NOT l.tax_inclusive))::bigint
      FROM billing.invoice_line l
     WHERE %s l.invoice_id = ANY ($1)
     GROUP BY l.invoice_id$q$, CASE WHEN p_customer_id IS NULL THEN '' ELSE 'l.customer_id = $2 AND' END)
    USING p_invoice_ids, p_customer_id;
END
$$;
COMMENT ON FUNCTION billing._invoice_totals(bigint, bigint[]) IS
'Private: totals of finalized invoices computed from their lines: subtotal (charges and discounts), exclusive tax, inclusive tax, total, credit applied and amount due; of one customer''s invoices when p_customer_id is given.
Returns one row per invoice that has lines.';

CREATE OR REPLACE FUNCTION billing._invoice_totals(p_invoice_ids bigint[])
RETURNS TABLE (invoice_id bigint, subtotal bigint, tax_amount bigint, tax_included bigint, total bigint,
               credit_applied bigint, amount_due bigint)
LANGUAGE plpgsql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    RETURN QUERY SELECT * FROM billing._invoice_totals(NULL, p_invoice_ids);
END
$$;
COMMENT ON FUNCTION billing._invoice_totals(bigint[]) IS
'Private: _invoice_totals of the given invoices, whatever their customers.
Returns one row per invoice that has lines.';
