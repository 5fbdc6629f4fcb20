-- 19_ledger_cuts: what the service ledger takes off (docs/money.md; the lines in force: 17_ledger,
-- the sales: 18_ledger_change): a cancellation's unused paid time given back, the lines of an undone
-- change ended, and unpaid invoices cut to the time they served ("Unpaid is unpaid").
-- Re-applied after every migration: CREATE OR REPLACE only.

-- A cancellation now at p_at gives back the unused paid time as p_proration says: none (nothing,
-- the rule before), credit (to the balance, pending while an invoice of the period is unpaid,
-- capped at what the period kept) or refund (from the charges that paid the period, newest first,
-- each an engine refund capped at what its period kept: never money already given back). The
-- unused part of the lines in force is reversed either way the time is given back.
CREATE OR REPLACE FUNCTION billing._cancel_unused(p_sub billing.subscription, p_at timestamptz, p_proration text,
                                                  p_now timestamptz)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_unused record;
    v_amount bigint;
    v_left   bigint;
    v_paid   billing.invoice;
    v_refund billing.refund;
    v_plan   billing.plan;
    v_given  bigint := 0;
BEGIN
    IF p_proration = 'none' OR p_at >= p_sub.current_period_end OR p_sub.status = 'PAUSED' THEN
        RETURN 0;
    END IF;
    PERFORM billing._retax_unfinalized(p_sub, p_at, p_now);
    v_unused := billing._unused_total(p_sub, p_at);
    v_amount := billing._period_credit_base(p_sub, v_unused.net + v_unused.tax_exclusive);
    IF v_amount <= 0 THEN
        RETURN 0;
    END IF;
    SELECT * INTO v_plan FROM billing.plan WHERE id = p_sub.plan_id;
    IF p_proration = 'credit' THEN
        PERFORM billing._reverse_unused(p_sub, p_at, NULL, billing._period_unpaid(p_sub), p_now);
        PERFORM billing._grant_change_credit(p_sub, v_plan.currency, v_amount, p_now);
        RETURN v_amount;
    END IF;
    -- refund: only money the period kept, from the charges that paid it.
    v_left := least(v_amount, billing._period_credit_room(p_sub));
    FOR v_paid IN
        SELECT i.* FROM billing.invoice i
         WHERE i.customer_id = p_sub.customer_id AND i.subscription_id = p_sub.id AND i.status = 'PAID'
           AND i.paid_attempt_id IS NOT NULL
           AND i.period_end = p_sub.current_period_end AND i.period_start >= p_sub.current_period_start
         ORDER BY i.id DESC
           FOR UPDATE
    LOOP
        EXIT WHEN v_left <= 0;
        v_amount := least(v_left, coalesce(billing._refundable(v_paid.customer_id, v_paid.paid_attempt_id), 0));
        CONTINUE WHEN v_amount <= 0;
        v_refund := billing._refund_invoice(v_paid, v_paid.paid_attempt_id, v_amount, 'SUBSCRIPTION_CANCELED',
                                            'engine', NULL, p_now);
        CONTINUE WHEN v_refund.id IS NULL;
        PERFORM billing._emit_event('invoice', v_paid.id, 'RefundDue',
            billing._invoice_data(v_paid) || jsonb_build_object(
                'amount', v_refund.amount, 'currency', v_refund.currency, 'reason', 'SUBSCRIPTION_CANCELED',
                'idempotencyKey', v_refund.idempotency_key), p_now);
        v_left := v_left - v_refund.amount;
        v_given := v_given + v_refund.amount;
    END LOOP;
    IF v_given > 0 THEN
        PERFORM billing._reverse_unused(p_sub, p_at, NULL, NULL, p_now);
    END IF;
    RETURN v_given;
END
$$;
COMMENT ON FUNCTION billing._cancel_unused(billing.subscription, timestamptz, text, timestamptz) IS
'Private: the unused paid time of a subscription canceled now at p_at given back per p_proration: none, credit (capped, pending while the period is unpaid) or refund (engine refunds of the charges that paid the period, capped at what it kept; RefundDue each); its lines reversed.
Returns the amount given back.';

-- An unpaid change whose invoice failed or was voided (p_invoice, a PRORATION that reversed lines
-- and sold new ones): its lines fall, and the lines it had reversed are in force again. When the
-- lines it sold were themselves reversed by a later change at t2 (a pause, a cancellation, another
-- change), the restored lines end at t2 too: a REVERSAL worth 0 from t2 (nothing was given back for
-- that time: the later change's credit waited on this invoice and is reversed with it). So no time
-- is sold twice once the failed change is undone. (Found by the widened money adversary: seats added
-- unpaid, a pause, the seats' invoice given up: the month's first line sold again beside the period
-- the resume started.)
CREATE OR REPLACE FUNCTION billing._end_restored_lines(p_invoice billing.invoice, p_now timestamptz)
RETURNS integer
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_ended timestamptz;
    v_n     integer;
BEGIN
    -- Set-based, one customer (a router query on Citus: every table joined on customer_id); a line
    -- in force is _line_in_force written as joins (its invoice PAID, OPEN or REVIEW if it has one,
    -- none of depends_on VOID or FAILED). When the time the dead invoice sold was ended by a later
    -- change: the earliest reversal in force of one of its CHARGE lines.
    SELECT min(r.span_start) INTO v_ended
      FROM billing.service_line c
      JOIN billing.service_line r ON r.customer_id = c.customer_id AND r.reverses_id = c.id
      LEFT JOIN billing.invoice ri ON ri.customer_id = r.customer_id AND ri.id = r.invoice_id
     WHERE c.customer_id = p_invoice.customer_id AND c.invoice_id = p_invoice.id AND c.kind = 'CHARGE'
       AND (r.invoice_id IS NULL OR ri.status IN ('PAID', 'OPEN', 'REVIEW'))
       AND NOT EXISTS (SELECT 1 FROM billing.invoice d
                        WHERE d.customer_id = r.customer_id AND d.id = ANY (r.depends_on) AND d.status IN ('VOID', 'FAILED'));
    IF v_ended IS NULL THEN
        RETURN 0;  -- the terms it sold were current: the revert restores the old ones
    END IF;
    -- The lines it had reversed, in force again and not reversed by a line in force, serving past
    -- then: ended there with a REVERSAL worth 0.
    INSERT INTO billing.service_line (customer_id, subscription_id, invoice_id, kind, item, plan_id, quantity, unit_price,
                                      span_start, span_end, gross, discount, coupon_code, net, tax, tax_inclusive,
                                      currency, reverses_id, basis_start, basis_gross, basis_net, created_at)
    SELECT o.customer_id, o.subscription_id, NULL, 'REVERSAL', o.item, o.plan_id, o.quantity, o.unit_price,
           greatest(v_ended, o.span_start), o.span_end, 0, 0, o.coupon_code, 0, 0, o.tax_inclusive, o.currency, o.id,
           greatest(v_ended, o.span_start), 0, 0, p_now
      FROM billing.service_line o
     WHERE o.customer_id = p_invoice.customer_id AND o.span_end > v_ended
       AND o.id IN (SELECT v.reverses_id FROM billing.service_line v
                     WHERE v.customer_id = p_invoice.customer_id AND v.invoice_id = p_invoice.id AND v.kind = 'REVERSAL')
       AND (o.invoice_id IS NULL
            OR EXISTS (SELECT 1 FROM billing.invoice oi WHERE oi.customer_id = o.customer_id AND oi.id = o.invoice_id
                         AND oi.status IN ('PAID', 'OPEN', 'REVIEW')))
       AND NOT EXISTS (SELECT 1 FROM billing.invoice d
                        WHERE d.customer_id = o.customer_id AND d.id = ANY (o.depends_on) AND d.status IN ('VOID', 'FAILED'))
       AND NOT EXISTS (SELECT 1 FROM billing.service_line r
                         LEFT JOIN billing.invoice ri ON ri.customer_id = r.customer_id AND ri.id = r.invoice_id
                        WHERE r.customer_id = o.customer_id AND r.reverses_id = o.id
                          AND (r.invoice_id IS NULL OR ri.status IN ('PAID', 'OPEN', 'REVIEW'))
                          AND NOT EXISTS (SELECT 1 FROM billing.invoice d
                                           WHERE d.customer_id = r.customer_id AND d.id = ANY (r.depends_on)
                                             AND d.status IN ('VOID', 'FAILED')))
     ORDER BY o.id;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END
$$;
COMMENT ON FUNCTION billing._end_restored_lines(billing.invoice, timestamptz) IS
'Private: for a PRORATION invoice just FAILED or VOID whose sold lines a later change had ended at t2, ends the lines it had reversed (in force again) at t2 with a REVERSAL worth 0.
Returns how many lines it ended.';

-- Whether a line of a change that ended in credit (p_line: no invoice) waits on an unpaid period
-- invoice (INITIAL, RENEWAL, PLAN_CHANGE) that a cancellation at p_at cuts (_bill_served): that one
-- cuts its unserved rest, not a change's invoice it also waits on.
CREATE OR REPLACE FUNCTION billing._cut_by_period(p_line billing.service_line, p_at timestamptz)
RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM billing.invoice d
                    WHERE d.customer_id = p_line.customer_id AND d.id = ANY (p_line.depends_on)
                      AND d.status IN ('OPEN', 'REVIEW') AND d.unserved = 0 AND d.period_end > p_at
                      AND d.kind IN ('INITIAL', 'RENEWAL', 'PLAN_CHANGE'));
END
$$;
COMMENT ON FUNCTION billing._cut_by_period(billing.service_line, timestamptz) IS
'Private: whether p_line (a credit-ending change''s line) waits on an unpaid period invoice that a cancellation at p_at cuts.
Returns the flag.';

-- One unpaid invoice cut at a cancellation now at p_at (_bill_served): the lines it writes so that
-- what it bills after p_at nets to nothing, and the net they take off (OUT net, >= 0, never more
-- than its subtotal: what its UNSERVED credit note is for).
-- * Cut: the unused part from p_at of the lines of its own chain (its CHARGE lines, and the re-sales
--   of them that later changes' invoices wrote in this cancellation, p_resold / p_resold_of) and of
--   the lines a change that ended in credit sold with its credit waiting on it (for a change's
--   invoice: only when no unpaid period invoice of theirs will cut them): REVERSAL lines billed by
--   it, at their own net and tax.
-- * Re-sold (a change's invoice, PRORATION, whose own terms were still sold at p_at: it cut a line of
--   its own chain): the part from p_at of each line it had reversed, at that line's own net, discount
--   and tax, as a CHARGE line billed by it (a reversal of a reversal). So it bills the difference it
--   made for the time served only. The re-sale belongs to the reversed line's invoice: when that is
--   unpaid too, it cuts the re-sale (returned in resold / resold_of: the re-sale, the line it sells
--   again); when paid, the re-sale stays (with p_proration none, paid time is not given back).
-- Rounding (whole seconds, floors) or a coupon ending inside the span could take off more than the
-- invoice billed, or less than nothing: the cut lines (credit lines first), or the re-sales, are
-- lowered until it does not.
CREATE OR REPLACE FUNCTION billing._cut_unserved(
    p_sub billing.subscription, p_inv billing.invoice, p_at timestamptz, p_resold bigint[], p_resold_of bigint[],
    p_now timestamptz, OUT net bigint, OUT resold bigint[], OUT resold_of bigint[])
RETURNS record
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_own     bigint[];
    v_credit  bigint[];
    v_rows    billing.service_line[] := '{}';
    v_row     billing.service_line;
    v_line    billing.service_line;
    v_rev     billing.service_line;
    v_u       record;
    v_from    timestamptz;
    v_cut_own bigint := 0;
    v_cut     bigint := 0;
    v_sold    bigint := 0;
    v_excess  bigint;
    v_take    bigint;
    v_new     bigint;
    v_id      bigint;
    v_owned   boolean;
    k         integer;
BEGIN
    resold := coalesce(p_resold, '{}');
    resold_of := coalesce(p_resold_of, '{}');
    -- Its own chain: its CHARGE lines, and the re-sales of them (read first, then checked: one shard
    -- on Citus).
    v_own := ARRAY(SELECT l.id FROM billing.service_line l
                    WHERE l.customer_id = p_inv.customer_id AND l.invoice_id = p_inv.id AND l.kind = 'CHARGE');
    -- The lines of a change that ended in credit waiting on it, and the re-sales of them. A period
    -- invoice cuts them (the rule before); a change's invoice only when no unpaid period invoice they
    -- wait on will.
    v_credit := '{}';
    FOR v_line IN SELECT * FROM billing.service_line l
                   WHERE l.customer_id = p_inv.customer_id AND l.kind = 'CHARGE' AND l.invoice_id IS NULL
                     AND l.subscription_id = p_inv.subscription_id AND p_inv.id = ANY (l.depends_on) LOOP
        IF p_inv.kind <> 'PRORATION' OR NOT billing._cut_by_period(v_line, p_at) THEN
            v_credit := v_credit || v_line.id;
        END IF;
    END LOOP;
    FOR k IN 1 .. coalesce(array_length(resold, 1), 0) LOOP
        SELECT * INTO v_line FROM billing.service_line WHERE customer_id = p_inv.customer_id AND id = resold_of[k];
        IF v_line.invoice_id = p_inv.id THEN
            v_own := v_own || resold[k];
        ELSIF v_line.invoice_id IS NULL AND p_inv.id = ANY (v_line.depends_on)
              AND (p_inv.kind <> 'PRORATION' OR NOT billing._cut_by_period(v_line, p_at)) THEN
            v_credit := v_credit || resold[k];
        END IF;
    END LOOP;
    -- Cut: the unused part from p_at of those lines (read first, then written).
    FOR v_u IN SELECT * FROM billing._unused_lines(p_sub, p_at) u
                WHERE (u.line_id = ANY (v_own) OR u.line_id = ANY (v_credit))
                  AND u.span_start < u.span_end AND u.net > 0
                ORDER BY (u.line_id = ANY (v_credit)) DESC, u.line_id LOOP
        SELECT * INTO v_line FROM billing.service_line WHERE customer_id = p_sub.customer_id AND id = v_u.line_id;
        v_row := NULL;
        v_row.customer_id := v_line.customer_id; v_row.subscription_id := v_line.subscription_id;
        v_row.invoice_id := p_inv.id; v_row.kind := 'REVERSAL'; v_row.item := v_line.item;
        v_row.plan_id := v_line.plan_id; v_row.quantity := v_line.quantity; v_row.unit_price := v_line.unit_price;
        v_row.span_start := v_u.span_start; v_row.span_end := v_u.span_end;
        v_row.gross := -v_u.gross; v_row.discount := -v_u.discount; v_row.coupon_code := v_line.coupon_code;
        v_row.net := -v_u.net; v_row.tax := -v_u.tax; v_row.tax_inclusive := v_line.tax_inclusive;
        v_row.currency := v_line.currency; v_row.reverses_id := v_line.id;
        v_rows := v_rows || v_row;
        v_cut := v_cut + v_u.net;
        IF v_u.line_id = ANY (v_own) THEN
            v_cut_own := v_cut_own + v_u.net;
        END IF;
    END LOOP;
    -- Re-sold: a change's invoice whose terms were still sold at p_at sells again the part from p_at
    -- of each line it had reversed (at that line's own terms; never more than its reversal gave back).
    IF p_inv.kind = 'PRORATION' AND v_cut_own > 0 THEN
        FOR v_rev IN SELECT * FROM billing.service_line r
                      WHERE r.customer_id = p_inv.customer_id AND r.invoice_id = p_inv.id AND r.kind = 'REVERSAL'
                        AND r.span_end > p_at
                      ORDER BY r.id LOOP
            SELECT * INTO v_line FROM billing.service_line WHERE customer_id = v_rev.customer_id AND id = v_rev.reverses_id;
            v_from := greatest(p_at, v_rev.span_start);
            v_row := NULL;
            v_row.customer_id := v_line.customer_id; v_row.subscription_id := v_line.subscription_id;
            v_row.invoice_id := p_inv.id; v_row.kind := 'CHARGE'; v_row.item := v_line.item;
            v_row.plan_id := v_line.plan_id; v_row.quantity := v_line.quantity; v_row.unit_price := v_line.unit_price;
            v_row.span_start := v_from; v_row.span_end := v_rev.span_end;
            v_row.gross := least(-v_rev.gross, billing._share(v_line.basis_gross, v_line.basis_start, v_line.span_end,
                                                              v_from, v_line.span_end));
            v_row.net := least(-v_rev.net, v_row.gross,
                               billing._share(v_line.basis_net, v_line.basis_start, v_line.span_end, v_from, v_line.span_end));
            v_row.discount := v_row.gross - v_row.net;
            v_row.coupon_code := CASE WHEN v_row.discount > 0 THEN v_line.coupon_code END;
            v_row.tax := least(-v_rev.tax, billing._share(v_line.tax, v_line.span_start, v_line.span_end,
                                                          v_from, v_line.span_end));
            v_row.tax_inclusive := v_line.tax_inclusive; v_row.currency := v_line.currency;
            v_row.reverses_id := v_line.id;  -- (kept here only to name the line sold again; cleared below)
            CONTINUE WHEN v_row.gross = 0 AND v_row.net = 0;
            v_rows := v_rows || v_row;
            v_sold := v_sold + v_row.net;
        END LOOP;
    END IF;
    -- Within [0, subtotal]: lower the cut lines (credit lines first) or the re-sales.
    v_excess := CASE WHEN v_cut - v_sold > greatest(p_inv.subtotal, 0) THEN v_cut - v_sold - greatest(p_inv.subtotal, 0)
                     WHEN v_cut - v_sold < 0 THEN v_cut - v_sold  -- negative: too much sold again
                     ELSE 0 END;
    FOR k IN 1 .. coalesce(array_length(v_rows, 1), 0) LOOP
        EXIT WHEN v_excess = 0;
        v_row := v_rows[k];
        CONTINUE WHEN (v_excess > 0) <> (v_row.kind = 'REVERSAL');
        v_take := least(abs(v_excess), abs(v_row.net));
        CONTINUE WHEN v_take = 0;
        v_new := abs(v_row.net) - v_take;
        v_row.discount := sign(v_row.net) * trunc(abs(v_row.discount)::numeric * v_new / abs(v_row.net))::bigint;
        v_row.tax := sign(v_row.net) * trunc(abs(v_row.tax)::numeric * v_new / abs(v_row.net))::bigint;
        v_row.net := sign(v_row.net) * v_new;
        v_row.gross := v_row.net + v_row.discount;
        v_rows[k] := v_row;
        IF v_excess > 0 THEN
            v_cut := v_cut - v_take;
            v_excess := v_excess - v_take;
        ELSE
            v_sold := v_sold - v_take;
            v_excess := v_excess + v_take;
        END IF;
    END LOOP;
    FOR k IN 1 .. coalesce(array_length(v_rows, 1), 0) LOOP
        v_row := v_rows[k];
        -- Its tax by rate (money10): its share of the entries of the line it cuts or sells again, at
        -- that line's rates and jurisdiction. (A re-sale names no line it reverses and sits on a change's
        -- invoice: without them, a later reversal of it read the change's invoice's entries in
        -- proportion, and gave back tax at rates it was never sold at.)
        SELECT * INTO v_line FROM billing.service_line WHERE customer_id = v_row.customer_id AND id = v_row.reverses_id;
        INSERT INTO billing.service_line (customer_id, subscription_id, invoice_id, kind, item, plan_id, quantity, unit_price,
                                          span_start, span_end, gross, discount, coupon_code, net, tax, tax_inclusive,
                                          currency, reverses_id, basis_start, basis_gross, basis_net, tax_lines, created_at)
        VALUES (v_row.customer_id, v_row.subscription_id, v_row.invoice_id, v_row.kind, v_row.item, v_row.plan_id,
                v_row.quantity, v_row.unit_price, v_row.span_start, v_row.span_end, v_row.gross, v_row.discount,
                CASE WHEN v_row.discount <> 0 THEN v_row.coupon_code END, v_row.net, v_row.tax, v_row.tax_inclusive,
                v_row.currency, CASE WHEN v_row.kind = 'REVERSAL' THEN v_row.reverses_id END, v_row.span_start,
                v_row.gross, v_row.net,
                billing._split_tax_lines(billing._line_tax_lines(v_line), v_row.tax, v_row.net), p_now)
        RETURNING id INTO v_id;
        IF v_row.kind = 'CHARGE' THEN
            -- A re-sale: whose invoice cuts it when unpaid is decided by the line it sells again.
            resold := resold || v_id;
            resold_of := resold_of || v_row.reverses_id;
        END IF;
    END LOOP;
    net := v_cut - v_sold;
END
$$;
COMMENT ON FUNCTION billing._cut_unserved(billing.subscription, billing.invoice, timestamptz, bigint[], bigint[], timestamptz) IS
'Private: at a cancellation at p_at, for one unpaid invoice of p_sub (locked): REVERSAL lines billed by it for the unused part from p_at of its own lines (its CHARGE lines, and the re-sales of them in p_resold, p_resold_of) and of the lines of a credit-ending change waiting on it; for a change''s invoice whose terms were sold at p_at, a CHARGE line re-selling from p_at each line it had reversed, at that line''s own terms; kept within [0, its subtotal]. Each line written carries its tax by rate (tax_lines): its share of the entries of the line it cuts or sells again.
Returns the net taken off and the re-sales so far (p_resold and p_resold_of with its own appended).';

-- Unpaid is unpaid, whatever the reason (issue 26 #3, #12): a cancellation now at p_at (or dunning's
-- end) bills the time served of every unpaid invoice (OPEN, never declined or in dunning, or in
-- REVIEW) of the subscription and takes off only the rest (_cut_unserved): the unused part from p_at
-- of its lines is reversed on it; the net not served is credited on an UNSERVED credit note (the
-- invoice finalized first) and invoice.unserved is its total: what is charged falls by it, what
-- credit had paid beyond that goes back (a RESTORED entry), and with nothing left to charge it is
-- PAID. An invoice none of whose time was served (p_at at or before its start, never declined) is
-- voided whole, as before. Invoices whose lines end by p_at (a cancellation at period end, an
-- earlier period) were served: they stay owed as they are. A change's invoice (PRORATION) bills the
-- difference it made for the time served: its new line is cut from p_at, the lines it had reversed
-- are sold again on it from p_at (and cut from their own invoice when that is unpaid too). So the
-- changes are cut latest first, then the period invoices. The line a change that ended in credit
-- sold (no invoice; its credit waits on the invoice) is cut the same way, on the period's invoice.
CREATE OR REPLACE FUNCTION billing._bill_served(p_sub billing.subscription, p_at timestamptz, p_now timestamptz)
RETURNS integer
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_ids     bigint[];
    v_id      bigint;
    v_inv     billing.invoice;
    v_cut     record;
    v_resold  bigint[] := '{}';
    v_of      bigint[] := '{}';
    v_note    billing.credit_note;
    v_take    bigint;
    v_back    bigint;
    v_n       integer := 0;
BEGIN
    -- The unpaid invoices not finalized yet retaxed for the customer's address now first (as their
    -- finalization would: the cut gives back each line's tax as it stands; adv11).
    PERFORM billing._retax_unfinalized(p_sub, p_at, p_now);
    -- A change's invoice never declined none of whose time was served (the change at or after p_at):
    -- voided whole (read first, then called: one shard on Citus).
    v_ids := ARRAY(SELECT i.id FROM billing.invoice i
                    WHERE i.customer_id = p_sub.customer_id AND i.subscription_id = p_sub.id
                      AND i.status = 'OPEN' AND i.attempt_count = 0 AND i.kind = 'PRORATION'
                      AND i.period_start >= p_at AND i.period_end > p_at
                    ORDER BY i.id);
    v_n := billing._void_invoices(p_sub.customer_id, v_ids, p_now);
    -- The lines they had reversed are in force again, but only up to where a later change ended the
    -- lines they sold (as when such an invoice fails).
    FOREACH v_id IN ARRAY v_ids LOOP
        SELECT * INTO v_inv FROM billing.invoice WHERE customer_id = p_sub.customer_id AND id = v_id;
        PERFORM billing._end_restored_lines(v_inv, p_now);
    END LOOP;
    -- The changes' invoices latest first (each re-sells what it had reversed, which the one before
    -- then cuts), then the period invoices in order.
    v_ids := ARRAY(SELECT i.id FROM billing.invoice i
                    WHERE i.customer_id = p_sub.customer_id AND i.subscription_id = p_sub.id
                      AND i.status IN ('OPEN', 'REVIEW') AND i.unserved = 0 AND i.period_end > p_at
                      AND i.kind IN ('PRORATION', 'INITIAL', 'RENEWAL', 'PLAN_CHANGE')
                    ORDER BY (i.kind = 'PRORATION') DESC, CASE WHEN i.kind = 'PRORATION' THEN -i.id ELSE i.id END);
    FOREACH v_id IN ARRAY v_ids LOOP
        SELECT * INTO v_inv FROM billing.invoice WHERE customer_id = p_sub.customer_id AND id = v_id FOR UPDATE;
        CONTINUE WHEN v_inv.status NOT IN ('OPEN', 'REVIEW');
        IF p_at <= v_inv.period_start AND v_inv.status = 'OPEN' AND v_inv.attempt_count = 0
           AND v_inv.kind <> 'PRORATION' THEN
            v_n := v_n + billing._void_invoices(v_inv.customer_id, ARRAY[v_inv.id], p_now);
            CONTINUE;
        END IF;
        v_cut := billing._cut_unserved(p_sub, v_inv, p_at, v_resold, v_of, p_now);
        v_resold := v_cut.resold;
        v_of := v_cut.resold_of;
        CONTINUE WHEN v_cut.net <= 0;
        -- The document: an UNSERVED credit note for the net not served and its tax.
        IF v_inv.number IS NULL THEN
            v_inv := billing._finalize_one(v_inv, p_now);
        END IF;
        v_note := billing._unserved_credit_note(v_inv, v_cut.net, p_now);
        v_take := least(v_note.total, v_inv.amount);
        v_back := v_note.total - v_take;
        UPDATE billing.invoice SET unserved = v_note.total
         WHERE customer_id = v_inv.customer_id AND id = v_inv.id
        RETURNING * INTO v_inv;
        IF v_back > 0 THEN
            PERFORM billing._grant_credit(v_inv.customer_id, v_inv.currency, v_back, 'RESTORED',
                                          v_inv.subscription_id, v_inv.id, p_now);
        END IF;
        IF v_inv.amount - v_take = 0 THEN
            -- Nothing left to charge (credit paid for the time served): settled.
            UPDATE billing.invoice
               SET status = 'PAID', paid_at = p_now, next_attempt_at = NULL, waiting_for = NULL
             WHERE customer_id = v_inv.customer_id AND id = v_inv.id
            RETURNING * INTO v_inv;
            PERFORM billing._emit_event('invoice', v_inv.id, 'InvoicePaid', billing._invoice_data(v_inv), p_now);
            PERFORM billing._settle_pending_credit(v_inv, p_now);
        END IF;
        v_n := v_n + 1;
    END LOOP;
    RETURN v_n;
END
$$;
COMMENT ON FUNCTION billing._bill_served(billing.subscription, timestamptz, timestamptz) IS
'Private: at a cancellation now at p_at (or dunning''s end): every unpaid invoice (OPEN or REVIEW) of p_sub serving past p_at bills only its time served (_cut_unserved, the changes'' invoices latest first, then the period invoices): its lines'' unused part reversed from p_at (and that of the line a change ending in credit sold with its credit waiting on it), a change''s invoice selling again from p_at what it had reversed, an UNSERVED credit note for the net not served and its tax, invoice.unserved set (charged: amount - least(unserved, amount); credit beyond that RESTORED; nothing left: PAID). None of it served and never declined: voided whole.
Returns how many invoices it cut or voided.';
