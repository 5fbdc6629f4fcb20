-- 600_invoices: invoices as documents (db/functions/14_tax.sql, 60_invoices.sql, 75_reports.sql,
-- docs/invoices.md): taxes by address, lines, gapless numbering, immutability, credit notes, reports.
BEGIN;
SET LOCAL ROLE billing_owner;  -- on Citus, reads of shards in the writers' role (see 200_plans_customers)
SELECT plan(44);

CREATE FUNCTION pg_temp.inv(p_key text) RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN
    RETURN (SELECT i.id FROM billing.invoice i
              JOIN billing.subscription_request r ON r.customer_id = i.customer_id AND r.subscription_id = i.subscription_id
    WHERE r.idempotency_key = p_key AND i.kind = 'INITIAL');
END
$$;

SELECT billing.upsert_plan('T70_EUR', 1999, 'EUR', 'MONTH');
SELECT billing.upsert_plan('T70_CAD', 10000, 'CAD', 'MONTH');
SELECT billing.upsert_plan('T70_JPY', 1000, 'JPY', 'YEAR');

-- -- configuration: checks ------------------------------------------------------------------------
SELECT throws_ok($$SELECT billing.upsert_tax_rate('bad code!', 'FR', NULL, 'VAT', 2000, false)$$, 'BL422', NULL,
                 'a tax rate code is letters, digits, _ or -');
SELECT throws_ok($$SELECT billing.upsert_tax_rate('X', 'fr', NULL, 'VAT', 2000, false)$$, 'BL422', NULL,
                 'a country is ISO alpha-2 upper case');
SELECT throws_ok($$SELECT billing.upsert_tax_rate('X', 'FR', NULL, 'VAT', 10001, false)$$, 'BL422', NULL,
                 'a rate is 0..10000 basis points');
SELECT lives_ok($$SELECT billing.upsert_tax_rate('T70_FR_VAT', 'FR', NULL, 'VAT', 2000, false)$$, 'an exclusive rate for FR');
SELECT throws_ok($$SELECT billing.upsert_tax_rate('T70_FR_INCL', 'FR', NULL, 'VAT', 550, true)$$, 'BL422', NULL,
                 'an inclusive rate next to an active exclusive one of the same country is refused');
SELECT billing.upsert_tax_rate('T70_CA_GST', 'CA', NULL, 'GST', 500, false);
SELECT billing.upsert_tax_rate('T70_CA_QC_QST', 'CA', 'QC', 'QST', 998, false);
SELECT billing.upsert_tax_rate('T70_JP_CT', 'JP', NULL, 'Consumption tax', 1000, true);
SELECT throws_ok($$SELECT billing.set_customer_details(70001, 'A', 'not-an-email', NULL, NULL, NULL, NULL, 'FR', NULL)$$,
                 'BL422', NULL, 'an email needs an @');
SELECT throws_ok($$SELECT billing.set_customer_details(70001, 'A', NULL, NULL, NULL, NULL, NULL, 'FR', NULL, 'REVERSE_CHARGE')$$,
                 'BL422', 'a reverse-charge customer needs a tax id', 'reverse charge needs a tax id');
SELECT billing.set_customer_details(70001, 'Ada SARL', 'ada@example.com', '1 rue X', 'Paris', '75001', NULL, 'FR', 'FR1', 'TAXABLE');
SELECT billing.set_customer_details(70002, 'Qc Inc', 'qc@example.com', NULL, 'Montreal', NULL, 'QC', 'CA', NULL, 'TAXABLE');
SELECT billing.set_customer_details(70003, 'On Inc', NULL, NULL, 'Toronto', NULL, 'ON', 'CA', NULL, 'TAXABLE');
SELECT billing.set_customer_details(70004, 'Tokyo KK', NULL, NULL, NULL, NULL, NULL, 'JP', NULL, 'TAXABLE');
SELECT billing.set_customer_details(70005, 'EU GmbH', NULL, NULL, NULL, NULL, NULL, 'DE', 'DE99', 'REVERSE_CHARGE');
SELECT billing.set_customer_details(70006, 'Charity', NULL, NULL, NULL, NULL, NULL, 'FR', NULL, 'EXEMPT');

-- -- taxes on new invoices ---------------------------------------------------------------------
SELECT billing.create_subscription('t70-1', 70001, 'T70_EUR', '2026-03-01Z', 0, NULL, 3);
SELECT billing.create_subscription('t70-2', 70002, 'T70_CAD', '2026-03-01Z');
SELECT billing.create_subscription('t70-3', 70003, 'T70_CAD', '2026-03-01Z');
SELECT billing.create_subscription('t70-4', 70004, 'T70_JPY', '2026-03-01Z');
SELECT billing.create_subscription('t70-5', 70005, 'T70_EUR', '2026-03-01Z');
SELECT billing.create_subscription('t70-6', 70006, 'T70_EUR', '2026-03-01Z');
SELECT results_eq($$SELECT subtotal, tax_amount, tax_included, amount FROM billing.invoice WHERE id = (SELECT pg_temp.inv('t70-1'))$$,
                  $$VALUES (5997::bigint, 1199::bigint, 0::bigint, 7196::bigint)$$,
                  'exclusive VAT 20% on 3 x 19.99: round(1199.4) = 11.99 added to the total');
SELECT results_eq($$SELECT tax_amount, amount FROM billing.invoice WHERE id = (SELECT pg_temp.inv('t70-2'))$$,
                  $$VALUES (1498::bigint, 11498::bigint)$$, 'Quebec: GST 5% (500) + QST 9.98% (998), one line each');
SELECT results_eq($$SELECT tax_amount FROM billing.invoice WHERE id = (SELECT pg_temp.inv('t70-3'))$$,
                  $$VALUES (500::bigint)$$, 'Ontario: only the country-wide GST (no regional rate there)');
SELECT results_eq($$SELECT subtotal, tax_amount, tax_included, amount FROM billing.invoice WHERE id = (SELECT pg_temp.inv('t70-4'))$$,
                  $$VALUES (1000::bigint, 0::bigint, 91::bigint, 1000::bigint)$$,
                  'inclusive 10% in 1000 JPY: round(1000 x 1000 / 11000) = 91 included, nothing added');
SELECT results_eq($$SELECT tax_amount, tax_detail->>'treatment' FROM billing.invoice WHERE id IN ((SELECT pg_temp.inv('t70-5')), (SELECT pg_temp.inv('t70-6'))) ORDER BY id$$,
                  $$VALUES (0::bigint, 'REVERSE_CHARGE'), (0::bigint, 'EXEMPT')$$,
                  'reverse-charge and exempt customers pay no tax');

-- -- finalization and numbering ------------------------------------------------------------------
SELECT is((SELECT number FROM billing.invoice WHERE id = (SELECT pg_temp.inv('t70-1'))), NULL, 'not numbered before finalization');
SELECT is(billing.finalize_invoices(500, '2026-03-01 00:05Z'), 6, 'the finalizer numbers the six invoices');
SELECT results_eq($$SELECT number FROM billing.invoice WHERE customer_id BETWEEN 70001 AND 70006 ORDER BY id$$,
                  $$SELECT '2026-' || lpad(g::text, 6, '0') FROM generate_series(
                        (SELECT next_number - 6 FROM billing.document_series WHERE series = '2026')::int,
                        (SELECT next_number - 1 FROM billing.document_series WHERE series = '2026')::int) g$$,
                  'numbers are consecutive in id order, from the 2026 counter');
SELECT is(billing.finalize_invoices(500, '2026-03-01 00:06Z'), 0, 'nothing left to finalize');
SELECT results_eq($$SELECT kind, description, amount FROM billing.invoice_line WHERE invoice_id = (SELECT pg_temp.inv('t70-2')) ORDER BY line_no$$,
                  $$VALUES ('PLAN', 'T70_CAD (1 seat), 2026-03-01 to 2026-04-01', 10000::bigint), ('TAX', 'GST 5%', 500::bigint),
                           ('TAX', 'QST 9.98%', 998::bigint)$$, 'lines: the plan, then one tax line per rate');
SELECT results_eq($$SELECT kind, description, amount, tax_inclusive FROM billing.invoice_line WHERE invoice_id = (SELECT pg_temp.inv('t70-5')) ORDER BY line_no$$,
                  $$VALUES ('PLAN', 'T70_EUR (1 seat), 2026-03-01 to 2026-04-01', 1999::bigint, NULL::boolean),
                           ('TAX', 'Reverse charge: tax to be accounted for by the recipient', 0::bigint, false)$$,
                  'a reverse-charge invoice says so on a tax line at 0');
SELECT results_eq($$SELECT subtotal, tax_amount, tax_included, total, amount_due FROM billing._invoice_totals(ARRAY[(SELECT pg_temp.inv('t70-4'))])$$,
                  $$VALUES (1000::bigint, 0::bigint, 91::bigint, 1000::bigint, 1000::bigint)$$,
                  'totals computed from the lines match the invoice (inclusive tax not added)');
SELECT is((billing.get_invoice_document(pg_temp.inv('t70-1'))->'billTo'->>'name'), 'Ada SARL', 'the document carries the bill-to snapshot');
SELECT billing.set_customer_details(70001, 'Ada Renamed', 'ada@example.com', '2 rue Y', 'Lyon', '69001', NULL, 'FR', 'FR1', 'TAXABLE');
SELECT is((billing.get_invoice_document(pg_temp.inv('t70-1'))->'billTo'->>'name'), 'Ada SARL',
          'a finalized invoice keeps the details it was issued with');

-- -- immutability -------------------------------------------------------------------------------
SELECT throws_ok($$UPDATE billing.invoice SET amount = 1, subtotal = 1 WHERE id = (SELECT pg_temp.inv('t70-1'))$$, 'BL409', NULL,
                 'a finalized invoice''s amounts never change');
SELECT throws_ok($$UPDATE billing.invoice SET number = '2026-999999' WHERE id = (SELECT pg_temp.inv('t70-1'))$$, 'BL409', NULL,
                 'nor its number');
SELECT throws_ok($$DELETE FROM billing.invoice WHERE id = (SELECT pg_temp.inv('t70-1'))$$, 'BL409', NULL, 'nor is it deleted');
SELECT throws_ok($$UPDATE billing.invoice_line SET amount = 0 WHERE invoice_id = (SELECT pg_temp.inv('t70-1'))$$, 'BL409', NULL,
                 'lines are written once');
SELECT lives_ok($$UPDATE billing.invoice SET last_failure_reason = 'x' WHERE id = (SELECT pg_temp.inv('t70-1'))$$,
                'payment state still moves');

-- -- gapless under rollback ------------------------------------------------------------------------
SELECT billing.create_subscription('t70-7', 70002, 'T70_CAD', '2026-03-02Z');
SAVEPOINT before_finalize;
SELECT billing.finalize_invoices(500, '2026-03-02 00:05Z');
ROLLBACK TO SAVEPOINT before_finalize;
SELECT billing.create_subscription('t70-8', 70003, 'T70_CAD', '2026-03-02Z');
SELECT billing.finalize_invoices(500, '2026-03-02 00:06Z');
SELECT results_eq($$WITH first AS MATERIALIZED (SELECT right(number, 6)::int AS n FROM billing.invoice WHERE id = (SELECT pg_temp.inv('t70-6')))
                    SELECT right(i.number, 6)::int - f.n
                      FROM billing.invoice i CROSS JOIN first f
                     WHERE i.id IN ((SELECT pg_temp.inv('t70-7')), (SELECT pg_temp.inv('t70-8'))) ORDER BY i.id$$,
                  $$VALUES (1), (2)$$, 'a rolled-back finalization gives its number back: no gap');

-- -- credit notes ---------------------------------------------------------------------------------
SELECT billing.cancel_subscription((SELECT subscription_id FROM billing.invoice WHERE id = (SELECT pg_temp.inv('t70-2'))), false, '2026-03-03Z');
SELECT results_eq($$SELECT reason, subtotal, tax_amount, total, number ~ '^CN-2026-[0-9]{6}$' FROM billing.credit_note WHERE invoice_id = (SELECT pg_temp.inv('t70-2'))$$,
                  $$VALUES ('UNSERVED', 9354::bigint, 1400::bigint, 10754::bigint, true)$$,
                  'cancelling after 2 of 31 days issues a numbered UNSERVED credit note for the 29 days not served and their tax (issue 26 #3)');
SELECT results_eq($$SELECT l.kind, l.amount FROM billing.credit_note_line l JOIN billing.credit_note n ON n.customer_id = l.customer_id AND n.id = l.credit_note_id
                     WHERE n.invoice_id = (SELECT pg_temp.inv('t70-2')) ORDER BY l.line_no$$,
                  $$VALUES ('PLAN', 9354::bigint), ('TAX', 467::bigint), ('TAX', 933::bigint)$$,
                  'its lines: the time not served and each tax''s share, rounded down');
SELECT results_eq($$SELECT status, subtotal + tax_amount, unserved, amount - unserved FROM billing.invoice WHERE id = (SELECT pg_temp.inv('t70-2'))$$,
                  $$VALUES ('OPEN', 11498::bigint, 10754::bigint, 744::bigint)$$,
                  'the invoice, its document unchanged, still bills the 2 days served (744)');
SELECT is((SELECT count(*)::int FROM billing.outbox_event WHERE event_type = 'CreditNoteIssued' AND aggregate_id = (SELECT pg_temp.inv('t70-2'))),
          1, 'CreditNoteIssued announced');
SELECT billing.create_subscription('t70-9', 70003, 'T70_CAD', '2026-03-04Z');
SELECT billing.cancel_subscription((SELECT subscription_id FROM billing.invoice WHERE id = (SELECT pg_temp.inv('t70-9'))), false, '2026-03-04Z');  -- none of it served
SELECT results_eq($$SELECT number IS NULL, (SELECT count(*) FROM billing.credit_note WHERE invoice_id = (SELECT pg_temp.inv('t70-9')))::int
                      FROM billing.invoice WHERE id = (SELECT pg_temp.inv('t70-9'))$$,
                  $$VALUES (true, 0)$$, 'an invoice voided before finalization is a discarded draft: no number, no credit note');
SELECT throws_ok($$SELECT billing.finalize_invoice(pg_temp.inv('t70-9'), '2026-03-04 00:02Z')$$, 'BL422', NULL,
                 'and it is never numbered afterwards');

-- Partial refund of the paid French invoice (7196 = 5997 + 1199 VAT): 1000 back.
SELECT billing.claim_charges('t70', 100, '5 minutes', '2026-03-05Z');
-- (The keys read first, then the calls made on the coordinator: on Citus a call in a query over a
-- distributed table would be sent to the workers.)
SELECT billing.record_payment_result(k, 'SUCCEEDED', 'ch_t70', NULL, '2026-03-05 00:01Z')
  FROM unnest((SELECT array_agg(a.idempotency_key) FROM billing.payment_attempt a
                WHERE a.invoice_id = (SELECT pg_temp.inv('t70-1')))) k;
SELECT billing.record_payment_result(k, 'DECLINED', NULL, 'card_declined', '2026-03-05 00:01Z')
  FROM unnest((SELECT array_agg(a.idempotency_key ORDER BY a.id) FROM billing.payment_attempt a
                WHERE a.invoice_id <> (SELECT pg_temp.inv('t70-1')) AND a.outcome IS NULL)) k;
SELECT billing.refund_invoice(pg_temp.inv('t70-1'), 1000, 't70-refund', '2026-03-06Z');
SELECT billing.claim_refunds('t70', 10, '5 minutes', '2026-03-06 00:01Z');
SELECT billing.record_refund_result(k, 'SUCCEEDED', 're_t70', NULL, '2026-03-06 00:02Z')
  FROM unnest((SELECT array_agg(r.idempotency_key) FROM billing.refund r WHERE r.invoice_id = (SELECT pg_temp.inv('t70-1')))) k;
SELECT results_eq($$SELECT reason, subtotal, tax_amount, total FROM billing.credit_note WHERE invoice_id = (SELECT pg_temp.inv('t70-1'))$$,
                  $$VALUES ('REFUND', 834::bigint, 166::bigint, 1000::bigint)$$,
                  'a partial refund: credit note of 1000 whose VAT share is floor(1000 x 1199 / 7196) = 166');
SELECT billing.record_refund_result(k, 'SUCCEEDED', 're_t70', NULL, '2026-03-06 00:03Z')
  FROM unnest((SELECT array_agg(r.idempotency_key) FROM billing.refund r WHERE r.invoice_id = (SELECT pg_temp.inv('t70-1')))) k;
SELECT is((SELECT count(*)::int FROM billing.credit_note WHERE invoice_id = (SELECT pg_temp.inv('t70-1'))), 1,
          'a repeated refund result issues no second credit note');
SELECT results_eq($$SELECT amount, amount_refunded, number IS NOT NULL FROM billing.invoice WHERE id = (SELECT pg_temp.inv('t70-1'))$$,
                  $$VALUES (7196::bigint, 1000::bigint, true)$$, 'the invoice itself is never edited');

-- -- reports ------------------------------------------------------------------------------------
SELECT results_eq($$SELECT currency, mrr FROM billing.report_mrr('2026-03-10Z') WHERE currency = 'JPY'$$,
                  $$VALUES ('JPY', 75.75::numeric)$$,
                  'MRR of a yearly 1000 JPY with 10% included tax: (1000 - 91) / 12 = 75.75');
SELECT is((SELECT mrr FROM billing.report_mrr('2026-03-10Z') WHERE currency = 'EUR'), 9995.00,
          'EUR MRR: 3 x 1999 + 1999 + 1999 (the refund does not change it)');
SELECT throws_ok($$SELECT * FROM billing.report_revenue('2026-05-01', '2026-04-01')$$, 'BL422', NULL,
                 'a report span must not end before it starts');
SELECT is((SELECT sum(recognized)::bigint FROM billing.report_revenue('2026-03-01', '2026-04-30')
            WHERE currency = 'EUR'), (SELECT sum(subtotal - tax_included)::bigint FROM billing.invoice
            WHERE currency = 'EUR' AND status NOT IN ('VOID', 'FAILED'))
            - (SELECT sum(subtotal)::bigint FROM billing.credit_note WHERE reason = 'REFUND' AND currency = 'EUR'),
          'revenue recognized over the invoices'' spans adds up to their net amounts, less the refunds'' net (their credit notes)');

-- -- renewals: their taxes are the new invoices' ------------------------------------------------
-- The renewal statement computes taxes set-based (_invoice_tax_sql joined; on Citus the renewal's
-- per-row path); a new invoice per row (_invoice_tax_row). Both give the same figures.
CREATE FUNCTION pg_temp.renewal_taxes() RETURNS TABLE (renewals bigint, taxed bigint, differing bigint) LANGUAGE plpgsql AS $$
DECLARE
    v_rows billing.invoice[] := ARRAY(SELECT i FROM billing.invoice i WHERE i.kind = 'RENEWAL' ORDER BY i.id);
    v_inv  billing.invoice;
    v_tax  record;
BEGIN
    renewals := 0; taxed := 0; differing := 0;
    FOREACH v_inv IN ARRAY v_rows LOOP
        v_tax := billing._invoice_tax_row(v_inv.customer_id, v_inv.subtotal);
        renewals := renewals + 1;
        taxed := taxed + (v_inv.tax_amount + v_inv.tax_included > 0)::int;
        differing := differing + ((v_inv.tax_amount, v_inv.tax_included, v_inv.tax_detail)
                                  IS DISTINCT FROM (v_tax.tax_amount, v_tax.tax_included, v_tax.tax_detail))::int;
    END LOOP;
    RETURN NEXT;
END
$$;
SELECT billing.create_due_invoices(500, '2026-04-02 12:00Z');
SELECT results_eq($$SELECT * FROM pg_temp.renewal_taxes()$$, $$VALUES (6::bigint, 4::bigint, 0::bigint)$$,
                  'renewals are taxed as new invoices are (the set-based statement and the per-row path agree)');

-- -- a move before the invoice is finalized: its lines follow its tax (review7) -----------------------
-- A customer taxed 20% (FR) moves to an address without a rate before the first charge: the invoice is
-- finalized at 0%, and so are the lines it sells, from which a change gives back the unused part: a
-- downgrade half way gives back no tax that was never paid.
SELECT billing.upsert_plan('T70_EUR_LITE', 999, 'EUR', 'MONTH');
SELECT billing.set_customer_details(70009, 'Mover', NULL, NULL, NULL, NULL, NULL, 'FR', NULL, 'TAXABLE');
SELECT billing.create_subscription('t70-move', 70009, 'T70_EUR', '2026-06-01 00:00Z');
SELECT billing.set_customer_details(70009, 'Mover', NULL, NULL, NULL, NULL, NULL, 'US', NULL, 'TAXABLE');
SELECT billing.finalize_invoice((SELECT pg_temp.inv('t70-move')), '2026-06-01 00:01Z');
SELECT results_eq($$SELECT i.tax_amount, l.tax, l.tax_inclusive FROM billing.invoice i
                     JOIN billing.service_line l ON l.customer_id = i.customer_id AND l.invoice_id = i.id
                    WHERE i.id = (SELECT pg_temp.inv('t70-move'))$$,
                  $$VALUES (0::bigint, 0::bigint, false)$$,
                  'an invoice whose tax was recomputed at finalization: its CHARGE line carries the tax it bills');
SELECT billing.change_plan((SELECT r.subscription_id FROM billing.subscription_request r WHERE r.idempotency_key = 't70-move'),
                           'T70_EUR_LITE', '2026-06-16 00:00Z');
SELECT results_eq($$SELECT sum(l.tax)::bigint FROM billing.service_line l WHERE l.customer_id = 70009 AND l.kind = 'REVERSAL'$$,
                  $$VALUES (0::bigint)$$,
                  'a downgrade gives back the unused part at the tax billed (none), not at the old address''s 20%');

-- An untaxed customer moves to FR (20%) and upgrades half way: the change's invoice taxes each line at
-- its own rate (house8): the new line 20% of its whole net, the reversal the none it was sold with
-- (review7 had taxed the difference at 20% and bent the new line's tax to fit: 200 billed).
SELECT billing.upsert_plan('T70_EUR_MAX', 3999, 'EUR', 'MONTH');
SELECT billing.set_customer_details(70010, 'Upgrader', NULL, NULL, NULL, NULL, NULL, 'US', NULL, 'TAXABLE');
SELECT billing.create_subscription('t70-up', 70010, 'T70_EUR', '2026-06-01 00:00Z');
-- (its period's invoice finalized untaxed at its first charge attempt, before the move: adv11 retaxes an
-- invoice not finalized yet before a change reverses its line)
SELECT billing.finalize_invoice((SELECT pg_temp.inv('t70-up')), '2026-06-01 00:01Z');
SELECT billing.set_customer_details(70010, 'Upgrader', NULL, NULL, NULL, NULL, NULL, 'FR', NULL, 'TAXABLE');
SELECT billing.change_plan((SELECT r.subscription_id FROM billing.subscription_request r WHERE r.idempotency_key = 't70-up'),
                           'T70_EUR_MAX', '2026-06-16 00:00Z');
SELECT results_eq($$SELECT i.tax_amount, sum(l.tax)::bigint FROM billing.invoice i
                     JOIN billing.service_line l ON l.customer_id = i.customer_id AND l.invoice_id = i.id
                    WHERE i.customer_id = 70010 AND i.kind = 'PRORATION' GROUP BY i.customer_id, i.id, i.tax_amount$$,
                  $$VALUES (400::bigint, 400::bigint)$$,
                  'a change after a move: its tax is its lines'' (20% of the new line''s 1999; the reversal of 999 sold untaxed gives back none)');

SELECT * FROM finish();
ROLLBACK;
