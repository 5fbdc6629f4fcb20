-- 172_change_tax_by_line: a change's invoice taxes each of its lines at its own rate (house8,
-- migration 0840, docs/money.md "a change reverses the unused part"): the reversals give back each
-- reversed line's own tax, at the rate and jurisdiction it was sold at, the new line is taxed at
-- today's rate, and the invoice carries one tax entry per (rate, jurisdiction) with its base; its tax
-- is the sum of its lines' taxes. Before, it taxed the difference at today's rate: after a move or a
-- change of rate since the reversed lines were sold, (new rate - old rate) x the reversed net too
-- little or too much. Each case: a monthly plan of 1000 from 1 June (30 days), changed on 16 June to
-- one of 3000 (15 of 30 days left: the reversal gives back 500 net, the new line sells 1500).
BEGIN;
SET LOCAL ROLE billing_owner;  -- on Citus, reads of shards in the writers' role (see 200_plans_customers)
SELECT plan(39);

SELECT billing.upsert_plan('H8_S', 1000, 'USD', 'MONTH');
SELECT billing.upsert_plan('H8_L', 3000, 'USD', 'MONTH');
SELECT billing.upsert_plan('H8_M', 2800, 'USD', 'MONTH');  -- a small downgrade from H8_L (money10)
SELECT billing.upsert_tax_rate('H8_XB_VAT', 'XB', NULL, 'VAT', 2000, false);   -- 20% on top
SELECT billing.upsert_tax_rate('H8_XD_VAT', 'XD', NULL, 'VAT', 1000, true);    -- 10% inside
SELECT billing.upsert_tax_rate('H8_XE_VAT', 'XE', NULL, 'VAT', 2000, false);   -- 20%, lowered to 10% below
SELECT billing.upsert_tax_rate('H8_XF_VAT', 'XF', NULL, 'VAT', 1000, false);   -- 10%, raised to 20% below
-- (XC: no rate)

-- p_customer subscribes to p_plan in p_country on 1 June, its invoice finalized there (as its first
-- charge attempt does; p_finalize false: not yet), moves to p_moved_to (NULL: stays; 'RC': reverse
-- charge where it is) and changes to p_to on 16 June. Returns the subscription.
CREATE FUNCTION pg_temp.play(p_customer bigint, p_plan text, p_country text, p_moved_to text, p_to text,
                             p_finalize boolean DEFAULT true)
RETURNS bigint LANGUAGE plpgsql AS $f$
DECLARE
    v_sub bigint;
    v_invoice bigint;
BEGIN
    PERFORM billing.set_customer_details(p_customer, 'H8', NULL, NULL, NULL, NULL, NULL, p_country, NULL, 'TAXABLE');
    v_sub := (billing.create_subscription('h8-' || p_customer, p_customer, p_plan, '2026-06-01 00:00Z')).id;
    IF p_finalize THEN  -- (the id read first: on Citus a call inside a query of a shard runs on its worker)
        SELECT i.id INTO v_invoice FROM billing.invoice i
         WHERE i.customer_id = p_customer AND i.subscription_id = v_sub AND i.kind = 'INITIAL';
        PERFORM billing.finalize_invoice(v_invoice, '2026-06-01 00:01Z');
    END IF;
    IF p_moved_to = 'RC' THEN
        PERFORM billing.set_customer_details(p_customer, 'H8', NULL, NULL, NULL, NULL, NULL, p_country, 'TAX-' || p_customer, 'REVERSE_CHARGE');
    ELSIF p_moved_to IS NOT NULL THEN
        PERFORM billing.set_customer_details(p_customer, 'H8', NULL, NULL, NULL, NULL, NULL, p_moved_to, NULL, 'TAXABLE');
    END IF;
    PERFORM billing.change_plan(v_sub, p_to, '2026-06-16 00:00Z');
    RETURN v_sub;
END
$f$;
-- The change's invoice: subtotal, tax on top, tax inside, total, and its entries (code, rateBp, country, base, amount).
CREATE FUNCTION pg_temp.change_invoice(p_customer bigint)
RETURNS TABLE (subtotal bigint, tax_amount bigint, tax_included bigint, total bigint, entries text)
LANGUAGE plpgsql AS $f$  -- (PL/pgSQL: Citus plans no SQL function with parameters over its tables)
DECLARE
    v_invoice billing.invoice;
BEGIN
    SELECT * INTO v_invoice FROM billing.invoice i WHERE i.customer_id = p_customer AND i.kind = 'PRORATION';
    RETURN QUERY
    SELECT v_invoice.subtotal, v_invoice.tax_amount, v_invoice.tax_included, v_invoice.subtotal + v_invoice.tax_amount,
           (SELECT string_agg(format('%s %s %s %s %s', e->>'code', e->>'rateBp', e->>'country', e->>'base', e->>'amount'), '; '
                              ORDER BY e->>'code', (e->>'rateBp')::int)
              FROM jsonb_array_elements(v_invoice.tax_detail->'lines') e);
END
$f$;

-- 1. Moved from 20% on top to no rate, then upgraded: the reversal gives back the 100 of tax the unused
--    half was sold with; the new line bears none (before: 1000 billed, the 100 kept).
SELECT pg_temp.play(84001, 'H8_S', 'XB', 'XC', 'H8_L');
SELECT results_eq($$SELECT * FROM pg_temp.change_invoice(84001)$$,
                  $$VALUES (1000::bigint, -100::bigint, 0::bigint, 900::bigint, 'H8_XB_VAT 2000 XB -500 -100')$$,
                  'taxed -> untaxed, upgrade: 1000 and -100 of XB VAT on -500 (total 900, was 1000)');
-- 2. The other way: the new line bears 20% of its 1500, the reversal gave back nothing (before: 200).
SELECT pg_temp.play(84002, 'H8_S', 'XC', 'XB', 'H8_L');
SELECT results_eq($$SELECT * FROM pg_temp.change_invoice(84002)$$,
                  $$VALUES (1000::bigint, 300::bigint, 0::bigint, 1300::bigint, 'H8_XB_VAT 2000 XB 1500 300')$$,
                  'untaxed -> taxed, upgrade: 300 of XB VAT on the new line''s 1500 (was 200)');
-- 3. Inclusive (10% inside) to no rate: the reversal gives back its contained 45 (its share of 91).
SELECT pg_temp.play(84003, 'H8_S', 'XD', 'XC', 'H8_L');
SELECT results_eq($$SELECT * FROM pg_temp.change_invoice(84003)$$,
                  $$VALUES (1000::bigint, 0::bigint, -45::bigint, 1000::bigint, 'H8_XD_VAT 1000 XD -500 -45')$$,
                  'inclusive -> untaxed, upgrade: -45 of contained tax given back (total unchanged: it was inside)');
-- 4. No rate to inclusive: the new line contains round(1500 x 10/110) = 136.
SELECT pg_temp.play(84004, 'H8_S', 'XC', 'XD', 'H8_L');
SELECT results_eq($$SELECT * FROM pg_temp.change_invoice(84004)$$,
                  $$VALUES (1000::bigint, 0::bigint, 136::bigint, 1000::bigint, 'H8_XD_VAT 1000 XD 1500 136')$$,
                  'untaxed -> inclusive, upgrade: the new line contains 136 (was 91 on the difference)');
-- 5. From 20% on top to 10% inside: two jurisdictions, one entry each.
SELECT pg_temp.play(84005, 'H8_S', 'XB', 'XD', 'H8_L');
SELECT results_eq($$SELECT * FROM pg_temp.change_invoice(84005)$$,
                  $$VALUES (1000::bigint, -100::bigint, 136::bigint, 900::bigint,
                            'H8_XB_VAT 2000 XB -500 -100; H8_XD_VAT 1000 XD 1500 136')$$,
                  'exclusive -> inclusive, upgrade: one entry per (rate, jurisdiction), each with its base');
-- 6. Reverse charge since the sale: the reversal gives back the VAT it was sold with; the new line bears
--    none (the customer accounts for it).
SELECT pg_temp.play(84006, 'H8_S', 'XB', 'RC', 'H8_L');
SELECT results_eq($$SELECT * FROM pg_temp.change_invoice(84006)$$,
                  $$VALUES (1000::bigint, -100::bigint, 0::bigint, 900::bigint, 'H8_XB_VAT 2000 XB -500 -100')$$,
                  'taxable -> reverse charge, upgrade: the VAT sold with the unused half given back');
SELECT results_eq($$SELECT i.tax_detail->>'treatment' FROM billing.invoice i WHERE i.customer_id = 84006 AND i.kind = 'PRORATION'$$,
                  $$VALUES ('REVERSE_CHARGE'::text)$$, 'its detail records the treatment of the new line');
-- 7. The same address, one rate: the same tax as before within a rounding step (here exact: 300 - 100).
SELECT pg_temp.play(84007, 'H8_S', 'XB', NULL, 'H8_L');
SELECT results_eq($$SELECT * FROM pg_temp.change_invoice(84007)$$,
                  $$VALUES (1000::bigint, 200::bigint, 0::bigint, 1200::bigint, 'H8_XB_VAT 2000 XB 1000 200')$$,
                  'one rate throughout: one entry, base the difference, 20% of it');

-- 8. An operator's change of rate between the sale and the change, each way: each line at its own rate
--    (same code, another rate: two entries).
SELECT billing.set_customer_details(84008, 'H8', NULL, NULL, NULL, NULL, NULL, 'XE', NULL, 'TAXABLE');
SELECT billing.set_customer_details(84009, 'H8', NULL, NULL, NULL, NULL, NULL, 'XF', NULL, 'TAXABLE');
SELECT (billing.create_subscription('h8-84008', 84008, 'H8_S', '2026-06-01 00:00Z')).id AS h8_sub8 \gset
SELECT (billing.create_subscription('h8-84009', 84009, 'H8_S', '2026-06-01 00:00Z')).id AS h8_sub9 \gset
SELECT billing.upsert_tax_rate('H8_XE_VAT', 'XE', NULL, 'VAT', 1000, false);
SELECT billing.upsert_tax_rate('H8_XF_VAT', 'XF', NULL, 'VAT', 2000, false);
SELECT billing.change_plan(:h8_sub8, 'H8_L', '2026-06-16 00:00Z');
SELECT billing.change_plan(:h8_sub9, 'H8_L', '2026-06-16 00:00Z');
SELECT results_eq($$SELECT * FROM pg_temp.change_invoice(84008)$$,
                  $$VALUES (1000::bigint, 50::bigint, 0::bigint, 1050::bigint,
                            'H8_XE_VAT 1000 XE 1500 150; H8_XE_VAT 2000 XE -500 -100')$$,
                  'rate lowered 20% -> 10% since the sale: 150 - 100 (was 10% of 1000, 100)');
SELECT results_eq($$SELECT * FROM pg_temp.change_invoice(84009)$$,
                  $$VALUES (1000::bigint, 250::bigint, 0::bigint, 1250::bigint,
                            'H8_XF_VAT 1000 XF -500 -50; H8_XF_VAT 2000 XF 1500 300')$$,
                  'rate raised 10% -> 20% since the sale: 300 - 50 (was 20% of 1000, 200)');

-- Every change's invoice: its tax is the sum of its lines' taxes (on top and inside), and of its entries;
-- each reversal's entries are those of the line it reverses (rate and jurisdiction).
SELECT is_empty($$SELECT i.id FROM billing.invoice i
                   CROSS JOIN LATERAL (SELECT coalesce(sum((e->>'amount')::bigint), 0) AS entries
                                         FROM jsonb_array_elements(i.tax_detail->'lines') e) t
                   JOIN billing.service_line l ON l.customer_id = i.customer_id AND l.invoice_id = i.id
                  WHERE i.customer_id BETWEEN 84001 AND 84009 AND i.kind = 'PRORATION'
                  GROUP BY i.customer_id, i.id, i.tax_amount, i.tax_included, t.entries
                 HAVING sum(l.tax) FILTER (WHERE NOT l.tax_inclusive) <> i.tax_amount
                     OR coalesce(sum(l.tax) FILTER (WHERE l.tax_inclusive), 0) <> i.tax_included
                     OR t.entries <> i.tax_amount + i.tax_included$$,
                'each change''s invoice: its tax = the sum of its lines'' own taxes = the sum of its entries');
CREATE FUNCTION pg_temp.rates(p_entries jsonb) RETURNS text[] LANGUAGE sql IMMUTABLE AS $f$
    SELECT array_agg(concat_ws(' ', e->>'code', e->>'rateBp', e->>'country') ORDER BY e->>'code', e->>'rateBp')
      FROM jsonb_array_elements(p_entries) e
$f$;
-- (PL/pgSQL, each row read by its key: on Citus a function over a row inside a query is sent to a worker)
CREATE FUNCTION pg_temp.stray_reversals() RETURNS SETOF bigint LANGUAGE plpgsql AS $f$
DECLARE
    r billing.service_line;
    o billing.service_line;
BEGIN
    FOR r IN SELECT * FROM billing.service_line l WHERE l.customer_id BETWEEN 84001 AND 84009 AND l.kind = 'REVERSAL' LOOP
        SELECT * INTO o FROM billing.service_line l WHERE l.customer_id = r.customer_id AND l.id = r.reverses_id;
        IF pg_temp.rates(r.tax_lines) IS DISTINCT FROM pg_temp.rates(billing._line_tax_lines(o)) THEN
            RETURN NEXT r.id;
        END IF;
    END LOOP;
END
$f$;
SELECT is_empty($$SELECT * FROM pg_temp.stray_reversals()$$,
                'each reversal is taxed at the rates and jurisdiction of the line it reverses');

-- 9. A downgrade after a move to an untaxed address: the credit gives back the reversed half with the
--    tax it was sold with (1500 + 300), less the new line (500, untaxed): 1300. After a move to a taxed
--    one: the reversed half had no tax (1500), the new line bears 100: 900.
SELECT pg_temp.play(84010, 'H8_L', 'XB', 'XC', 'H8_S');
SELECT pg_temp.play(84011, 'H8_L', 'XC', 'XB', 'H8_S');
SELECT results_eq($$SELECT c.customer_id, sum(c.amount)::bigint FROM billing.credit_pending c
                    WHERE c.customer_id IN (84010, 84011) GROUP BY c.customer_id ORDER BY c.customer_id$$,
                  $$VALUES (84010::bigint, 1300::bigint), (84011::bigint, 900::bigint)$$,
                  'a downgrade''s credit: each line at its own tax (no gain by a move before it, no loss)');

-- 10. The document and the refund paths read the entries: the TAX line of the reversal is negative and
--     names the jurisdiction of its sale; a void's credit note reverses the invoice's tax as it is.
SELECT i.id AS h8_inv5 FROM billing.invoice i WHERE i.customer_id = 84005 AND i.kind = 'PRORATION' \gset
SELECT billing.finalize_invoice(:h8_inv5, '2026-06-16 00:01Z');
SELECT results_eq($$SELECT l.description, l.amount, l.tax_inclusive FROM billing.invoice_line l
                    JOIN billing.invoice i ON i.customer_id = l.customer_id AND i.id = l.invoice_id
                   WHERE i.customer_id = 84005 AND i.kind = 'PRORATION' AND l.kind = 'TAX' ORDER BY l.line_no$$,
                  $$VALUES ('VAT 10% (included)'::text, 136::bigint, true), ('VAT XB 20%', -100, false)$$,
                  'the finalized document: one TAX line per entry, the reversal''s negative with its jurisdiction');
SELECT billing.get_invoice_document(:h8_inv5)->'taxes' AS h8_taxes \gset
SELECT is(:'h8_taxes'::jsonb,
          '[{"base": 1500, "code": "H8_XD_VAT", "name": "VAT", "amount": 136, "rateBp": 1000, "region": null, "country": "XD", "inclusive": true},
            {"base": -500, "code": "H8_XB_VAT", "name": "VAT", "amount": -100, "rateBp": 2000, "region": null, "country": "XB", "inclusive": false}]'::jsonb,
          'the document''s tax breakdown: each entry with its base');
SELECT billing.void_invoice(:h8_inv5, 'h8 test', '2026-06-16 00:02Z');
SELECT results_eq($$SELECT n.subtotal, n.tax_amount, n.total FROM billing.credit_note n WHERE n.customer_id = 84005 AND n.reason = 'VOID'$$,
                  $$VALUES (1000::bigint, -100::bigint, 900::bigint)$$,
                  'its void''s credit note reverses the total billed, the tax given back included');
SELECT results_eq($$SELECT sum(l.amount)::bigint FROM billing.credit_note_line l JOIN billing.credit_note n
                      ON n.customer_id = l.customer_id AND n.id = l.credit_note_id
                   WHERE n.customer_id = 84005 AND l.kind = 'TAX' AND NOT l.tax_inclusive$$, $$VALUES (-100::bigint)$$,
                  'its credit note''s TAX lines carry the same entries');

-- 11. A move between the change and the finalization: the new line retaxed at the new address, the
--     reversal keeps the tax it was sold with.
SELECT pg_temp.play(84012, 'H8_S', 'XB', NULL, 'H8_L');
SELECT billing.set_customer_details(84012, 'H8', NULL, NULL, NULL, NULL, NULL, 'XC', NULL, 'TAXABLE');
SELECT i.id AS h8_inv12 FROM billing.invoice i WHERE i.customer_id = 84012 AND i.kind = 'PRORATION' \gset
SELECT billing.finalize_invoice(:h8_inv12, '2026-06-16 00:01Z');
SELECT results_eq($$SELECT * FROM pg_temp.change_invoice(84012)$$,
                  $$VALUES (1000::bigint, -100::bigint, 0::bigint, 900::bigint, 'H8_XB_VAT 2000 XB -500 -100')$$,
                  'retaxed at finalization: the new line untaxed now, the reversal at the 20% it was sold with');
SELECT results_eq($$SELECT l.kind, l.tax FROM billing.service_line l JOIN billing.invoice i
                      ON i.customer_id = l.customer_id AND i.id = l.invoice_id
                   WHERE i.customer_id = 84012 AND i.kind = 'PRORATION' ORDER BY l.kind$$,
                  $$VALUES ('CHARGE'::text, 0::bigint), ('REVERSAL', -100)$$,
                  'and its lines say so');
-- 12. Revenue net of tax and the tax report read the lines and the invoice: the same tax.
SELECT results_eq($$SELECT sum(l.tax)::bigint FROM billing.service_line l JOIN billing.invoice i
                      ON i.customer_id = l.customer_id AND i.id = l.invoice_id
                   WHERE i.customer_id = 84001 AND i.kind = 'PRORATION'$$,
                  $$SELECT i.tax_amount + i.tax_included FROM billing.invoice i WHERE i.customer_id = 84001 AND i.kind = 'PRORATION'$$,
                  'what the lines recognize as tax is what the invoice says it billed');

-- 13. (money10, migration 0910) A move to a taxed address, then a small downgrade: the net falls by 100
--     (the reversal gives back 1500 sold untaxed, the new line sells 1400) but the tax rises by 280 (20%
--     of 1400 on top): the change bills 180 on a PRORATION invoice of subtotal -100 (before: nothing
--     billed and no credit, the 180 kept). Exclusive tax, each way.
SELECT pg_temp.play(84013, 'H8_L', 'XC', 'XB', 'H8_M');
SELECT results_eq($$SELECT * FROM pg_temp.change_invoice(84013)$$,
                  $$VALUES (-100::bigint, 280::bigint, 0::bigint, 180::bigint, 'H8_XB_VAT 2000 XB 1400 280')$$,
                  'untaxed -> 20% on top, small downgrade: -100 net and 280 of tax billed (180; was nothing)');
SELECT results_eq($$SELECT i.amount, i.status FROM billing.invoice i WHERE i.customer_id = 84013 AND i.kind = 'PRORATION'$$,
                  $$VALUES (180::bigint, 'OPEN'::text)$$, 'the 180 is charged as any change''s invoice');
--     From inclusive (10% inside) to 20% on top: the reversal gives back its contained 136 inside its
--     1500; the new line bears 280 on top; total 180 (the contained tax given back is the customer's).
SELECT pg_temp.play(84014, 'H8_L', 'XD', 'XB', 'H8_M');
SELECT results_eq($$SELECT * FROM pg_temp.change_invoice(84014)$$,
                  $$VALUES (-100::bigint, 280::bigint, -136::bigint, 180::bigint,
                            'H8_XB_VAT 2000 XB 1400 280; H8_XD_VAT 1000 XD -1500 -136')$$,
                  'inclusive -> on top, small downgrade: 180 billed, the contained tax given back beside it');
--     Sold under reverse charge, then taxable at 20% on top: as 13.
SELECT billing.set_customer_details(84015, 'H8', NULL, NULL, NULL, NULL, NULL, 'XB', 'TAX-84015', 'REVERSE_CHARGE');
SELECT (billing.create_subscription('h8-84015', 84015, 'H8_L', '2026-06-01 00:00Z')).id AS h8_sub15 \gset
SELECT i.id AS h8_inv15 FROM billing.invoice i WHERE i.customer_id = 84015 \gset
SELECT billing.finalize_invoice(:h8_inv15, '2026-06-01 00:01Z');
SELECT billing.set_customer_details(84015, 'H8', NULL, NULL, NULL, NULL, NULL, 'XB', NULL, 'TAXABLE');
SELECT billing.change_plan(:h8_sub15, 'H8_M', '2026-06-16 00:00Z');
SELECT results_eq($$SELECT * FROM pg_temp.change_invoice(84015)$$,
                  $$VALUES (-100::bigint, 280::bigint, 0::bigint, 180::bigint, 'H8_XB_VAT 2000 XB 1400 280')$$,
                  'reverse charge -> 20% on top, small downgrade: 180 billed');
--     The other ways still end in credit: to an address with tax inside (the price holds the tax: the
--     customer pays 100 less) or to reverse charge (no tax on the new line): 100 of credit, no invoice.
SELECT pg_temp.play(84016, 'H8_L', 'XC', 'XD', 'H8_M');
SELECT pg_temp.play(84017, 'H8_L', 'XC', 'RC', 'H8_M');
SELECT results_eq($$SELECT c.customer_id, sum(c.amount)::bigint,
                           (SELECT count(*) FROM billing.invoice i WHERE i.customer_id = c.customer_id AND i.kind = 'PRORATION')
                      FROM billing.credit_pending c
                    WHERE c.customer_id IN (84016, 84017) GROUP BY c.customer_id ORDER BY c.customer_id$$,
                  $$VALUES (84016::bigint, 100::bigint, 0::bigint), (84017::bigint, 100::bigint, 0::bigint)$$,
                  'untaxed -> inclusive or reverse charge, small downgrade: 100 of credit, nothing billed');
--     Its document: the PRORATION line at -100 beside the TAX line; its void's credit note reverses it.
SELECT i.id AS h8_inv13 FROM billing.invoice i WHERE i.customer_id = 84013 AND i.kind = 'PRORATION' \gset
SELECT billing.finalize_invoice(:h8_inv13, '2026-06-16 00:01Z');
SELECT results_eq($$SELECT l.kind, l.amount FROM billing.invoice_line l
                     WHERE l.customer_id = 84013 AND l.invoice_id = $$ || :h8_inv13 || $$ ORDER BY l.line_no$$,
                  $$VALUES ('PRORATION'::text, -100::bigint), ('TAX', 280)$$,
                  'the finalized document: the change''s net (-100) and its tax (280)');
SELECT billing.void_invoice(:h8_inv13, 'h8 test', '2026-06-16 00:02Z');
SELECT results_eq($$SELECT n.subtotal, n.tax_amount, n.total FROM billing.credit_note n WHERE n.customer_id = 84013 AND n.reason = 'VOID'$$,
                  $$VALUES (-100::bigint, 280::bigint, 180::bigint)$$,
                  'its void''s credit note reverses the 180 billed, -100 and 280');

-- 14. (money10) The lines a cancellation re-sells on a change's invoice carry their own tax entries.
--     Sold at XB (20% on top, paid), moved to XD (10% inside), upgraded on 16 June (unpaid), canceled now
--     on 21 June with its unused time credited: the cut re-sells the XB line from 21 June on the change's
--     invoice, and the credit reverses that re-sale. The re-sale is taxed at XB only (before: at the
--     change's invoice's entries in proportion, XB's negative and XD's positive), its reversal gives
--     back exactly its tax per rate and jurisdiction, and what XB and XD keep is the tax of the time
--     served at each.
SELECT billing.set_customer_details(84020, 'H8', NULL, NULL, NULL, NULL, NULL, 'XB', NULL, 'TAXABLE');
SELECT (billing.create_subscription('h8-84020', 84020, 'H8_S', '2026-06-01 00:00Z')).id AS h8_sub20 \gset
SELECT billing.record_payment_result(c.idempotency_key, 'SUCCEEDED', 'ch_h8_84020', NULL, '2026-06-01 00:00Z')
  FROM billing.claim_charges('h8', 1000, interval '5 minutes', '2026-06-01 00:00Z') c WHERE c.customer_id = 84020;
SELECT billing.set_customer_details(84020, 'H8', NULL, NULL, NULL, NULL, NULL, 'XD', NULL, 'TAXABLE');
SELECT billing.change_plan(:h8_sub20, 'H8_L', '2026-06-16 00:00Z');
SELECT billing.cancel_subscription(:h8_sub20, false, '2026-06-21 00:00Z', NULL, 'credit');
CREATE FUNCTION pg_temp.entries_of(p_kind text, p_of text) RETURNS text LANGUAGE plpgsql AS $f$
DECLARE
    l billing.service_line;
    v_out text[] := '{}';
BEGIN
    -- p_of: 'resale' (the CHARGE the cut wrote on the change's invoice for H8_S) or 'its reversal'.
    FOR l IN SELECT * FROM billing.service_line x WHERE x.customer_id = 84020 ORDER BY x.id LOOP
        IF (p_of = 'resale' AND l.kind = 'CHARGE' AND l.plan_id = (SELECT id FROM billing.plan WHERE code = 'H8_S')
                AND l.invoice_id = (SELECT i.id FROM billing.invoice i WHERE i.customer_id = 84020 AND i.kind = 'PRORATION'))
           OR (p_of = 'its reversal' AND l.kind = 'REVERSAL' AND l.reverses_id IN (
                SELECT r.id FROM billing.service_line r WHERE r.customer_id = 84020 AND r.kind = 'CHARGE'
                   AND r.plan_id = (SELECT id FROM billing.plan WHERE code = 'H8_S')
                   AND r.invoice_id = (SELECT i.id FROM billing.invoice i WHERE i.customer_id = 84020 AND i.kind = 'PRORATION'))) THEN
            v_out := v_out || ARRAY(SELECT format('%s %s %s %s', e->>'code', e->>'rateBp', e->>'country',
                                                  CASE p_kind WHEN 'tax' THEN (e->>'amount')::bigint ELSE l.tax END)
                                      FROM jsonb_array_elements(billing._line_tax_lines(l)) e);
        END IF;
    END LOOP;
    RETURN array_to_string(v_out, '; ');
END
$f$;
SELECT is(pg_temp.entries_of('tax', 'resale'), pg_temp.entries_of('line', 'resale'),
          'the re-sale of the XB line is taxed at XB 20% only, its entries adding up to its tax');
SELECT is(replace(pg_temp.entries_of('tax', 'its reversal'), '-', ''), pg_temp.entries_of('tax', 'resale'),
          'the reversal of the re-sale gives back exactly its tax, per rate and jurisdiction');
-- (PL/pgSQL, each line read on its own: on Citus a function over a row inside a query is sent to a worker)
CREATE FUNCTION pg_temp.kept_by_country() RETURNS TABLE (country text, amount bigint) LANGUAGE plpgsql AS $f$
DECLARE
    l billing.service_line;
    v_entries jsonb := '[]';
BEGIN
    FOR l IN SELECT * FROM billing.service_line x WHERE x.customer_id = 84020 LOOP
        v_entries := v_entries || billing._line_tax_lines(l);
    END LOOP;
    RETURN QUERY SELECT e->>'country', sum((e->>'amount')::bigint)::bigint
                   FROM jsonb_array_elements(v_entries) e GROUP BY 1 ORDER BY 1;
END
$f$;
SELECT results_eq($$SELECT * FROM pg_temp.kept_by_country()$$,
                  $$VALUES ('XB'::text, 100::bigint), ('XD', 46)$$,  -- (XD: 136 less the cut's share of 10 days in 15, 90 rounded down)
                  'what each jurisdiction keeps is the tax of the time served there (XB 1-16 June, XD 16-21 June)');

-- 15. (money10, found by the adversary) An upgrade before the first charge, then a move to an untaxed
--     address, then the finalization: the period's invoice keeps the 20% it was made with, since the
--     change already gave back its unused half's 20% (before: retaxed to 0 at finalization while the
--     reversal had given back 100 of tax never paid).
SELECT pg_temp.play(84021, 'H8_S', 'XB', NULL, 'H8_L', false);
SELECT billing.set_customer_details(84021, 'H8', NULL, NULL, NULL, NULL, NULL, 'XC', NULL, 'TAXABLE');
SELECT i.id AS h8_inv21 FROM billing.invoice i WHERE i.customer_id = 84021 AND i.kind = 'INITIAL' \gset
SELECT billing.finalize_invoice(:h8_inv21, '2026-06-16 00:01Z');
SELECT results_eq($$SELECT i.subtotal, i.tax_amount, i.number IS NOT NULL FROM billing.invoice i
                     WHERE i.customer_id = 84021 AND i.kind = 'INITIAL'$$,
                  $$VALUES (1000::bigint, 200::bigint, true)$$,
                  'finalized after the move: the period''s invoice keeps the tax its reversed line was sold with');
SELECT results_eq($$SELECT sum(l.tax)::bigint FROM billing.service_line l WHERE l.customer_id = 84021
                       AND l.plan_id = (SELECT id FROM billing.plan WHERE code = 'H8_S')$$,
                  $$VALUES (100::bigint)$$,
                  'the tax kept for the half served (200 billed, 100 given back): none given back unpaid');

-- 16. (adv11) The period's invoice not finalized yet (no charge attempt: say no card), a move, then a
--     change: the invoice is retaxed for the address now before the change reverses its line, as its
--     finalization would (before: it kept the old address's tax, the reversal gave back its share of
--     it, and finalization, a line reversed, left it: 20% kept on the half served, or none billed).
--     From 20% on top to untaxed, an upgrade: no tax anywhere (before: 1200 + 900 = 2100 for 2000).
SELECT pg_temp.play(84030, 'H8_S', 'XB', 'XC', 'H8_L', false);
SELECT results_eq($$SELECT i.kind, i.subtotal, i.tax_amount FROM billing.invoice i WHERE i.customer_id = 84030 ORDER BY i.id$$,
                  $$VALUES ('INITIAL'::text, 1000::bigint, 0::bigint), ('PRORATION', 1000, 0)$$,
                  'not finalized, taxed -> untaxed, upgrade: the period''s invoice retaxed to none before the reversal; 2000 owed');
--     From untaxed to 20% on top: the period's invoice bears its 200, the reversal gives back 100 of it,
--     the new line 300 (before: 1000 + 1300 = 2300, the half served untaxed).
SELECT pg_temp.play(84031, 'H8_S', 'XC', 'XB', 'H8_L', false);
SELECT results_eq($$SELECT i.kind, i.subtotal, i.tax_amount FROM billing.invoice i WHERE i.customer_id = 84031 ORDER BY i.id$$,
                  $$VALUES ('INITIAL'::text, 1000::bigint, 200::bigint), ('PRORATION', 1000, 200)$$,
                  'not finalized, untaxed -> taxed, upgrade: 1200 + 1200 = 2400, 20% of the 2000 served and sold');
SELECT i.id AS h8_inv31 FROM billing.invoice i WHERE i.customer_id = 84031 AND i.kind = 'INITIAL' \gset
SELECT billing.finalize_invoice(:h8_inv31, '2026-06-16 00:01Z');
SELECT results_eq($$SELECT i.tax_amount, i.number IS NOT NULL FROM billing.invoice i WHERE i.customer_id = 84031 AND i.kind = 'INITIAL'$$,
                  $$VALUES (200::bigint, true)$$, 'finalized after: the tax it had at the change stands');
-- 17. (adv11) Case 13's small downgrade (a move to 20%, then 180 of tax owed on a subtotal of -100), then a
--     move back to the untaxed address before the change's invoice is finalized: retaxed there it
--     bills -100, so the change ends in credit as it would have at this address: the invoice VOID,
--     never numbered, its lines in force without invoice, 100 of credit pending on the period's
--     unpaid invoice (before: the invoice kept its 280 of tax and billed 180).
SELECT pg_temp.play(84032, 'H8_L', 'XC', 'XB', 'H8_M');
SELECT billing.set_customer_details(84032, 'H8', NULL, NULL, NULL, NULL, NULL, 'XC', NULL, 'TAXABLE');
SELECT i.id AS h8_inv32 FROM billing.invoice i WHERE i.customer_id = 84032 AND i.kind = 'PRORATION' \gset
SELECT billing.finalize_invoice(:h8_inv32, '2026-06-16 00:01Z');
SELECT results_eq($$SELECT i.status, i.number IS NULL FROM billing.invoice i WHERE i.customer_id = 84032 AND i.kind = 'PRORATION'$$,
                  $$VALUES ('VOID'::text, true)$$, 'moved back before finalization: the change''s invoice bills nothing, VOID, unnumbered');
SELECT results_eq($$SELECT sum(c.amount)::bigint FROM billing.credit_pending c WHERE c.customer_id = 84032 AND c.status = 'PENDING'$$,
                  $$VALUES (100::bigint)$$, 'the 100 the net fell by is credit, waiting on the period''s unpaid invoice');
CREATE FUNCTION pg_temp.change_lines(p_customer bigint) RETURNS TABLE (kind text, net bigint, tax bigint, in_force boolean)
LANGUAGE plpgsql AS $f$
DECLARE
    l billing.service_line;
BEGIN
    FOR l IN SELECT * FROM billing.service_line x WHERE x.customer_id = p_customer AND x.span_start = '2026-06-16 00:00Z'
              ORDER BY x.id LOOP
        kind := l.kind; net := l.net; tax := l.tax; in_force := billing._line_in_force(l) AND l.invoice_id IS NULL;
        RETURN NEXT;
    END LOOP;
END
$f$;
SELECT results_eq($$SELECT * FROM pg_temp.change_lines(84032)$$,
                  $$VALUES ('REVERSAL'::text, -1500::bigint, 0::bigint, true), ('CHARGE', 1400, 0, true)$$,
                  'its lines stay in force without invoice, the new line retaxed to none');
--     Paid, the period's invoice releases the credit: 3000 paid for H8_L, 100 back, the downgrade kept.
SELECT billing.record_payment_result(c.idempotency_key, 'SUCCEEDED', 'ch_h8_84032', NULL, '2026-06-16 00:02Z')
  FROM billing.claim_charges('h8', 1000, interval '5 minutes', '2026-06-16 00:02Z') c WHERE c.customer_id = 84032;
SELECT results_eq($$SELECT b.balance, (SELECT p.code FROM billing.subscription s JOIN billing.plan p ON p.id = s.plan_id
                                        WHERE s.customer_id = 84032)
                      FROM billing.credit_balance b WHERE b.customer_id = 84032$$,
                  $$VALUES (100::bigint, 'H8_M'::text)$$, 'paid: the 100 is on the balance, the subscription on H8_M');

SELECT * FROM finish();
ROLLBACK;
