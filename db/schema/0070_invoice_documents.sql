-- 0070_invoice_documents: invoices as documents (docs/invoices.md). Forward-only.
-- * customer: billing details (name, email, address, city, postal code, region, country, tax id)
--   and tax treatment (TAXABLE, EXEMPT, REVERSE_CHARGE).
-- * tax_rate (reference table): rates by country and optional region, in basis points, inclusive
--   or exclusive; chosen by the customer's billing address when an invoice is created.
-- * invoice: tax_amount (exclusive tax added to the total: amount = subtotal + tax_amount -
--   credit_applied), tax_included (inclusive tax inside subtotal), tax_detail (the rates applied,
--   a snapshot), and the legal number given at finalization with the bill-to snapshot.
-- * invoice_line / credit_note / credit_note_line: the document lines, written once at
--   finalization (a credit note when it is issued) and never changed (triggers refuse it).
-- * document_series: one counter row per numbering series (invoice year 2026, credit notes
--   CN-2026): numbers are gapless because they are taken by updating this row in the transaction
--   that uses them (a rollback gives the number back), never from a sequence.

ALTER TABLE billing.customer
    ADD COLUMN name text,
    ADD COLUMN email text,
    ADD COLUMN address text,
    ADD COLUMN city text,
    ADD COLUMN postal_code text,
    ADD COLUMN region text,
    ADD COLUMN country char(2),
    ADD COLUMN tax_id text,
    ADD COLUMN tax_status text NOT NULL DEFAULT 'TAXABLE',
    ADD CONSTRAINT customer_name_length CHECK (name IS NULL OR (btrim(name) <> '' AND length(name) <= 200)),
    ADD CONSTRAINT customer_email_form CHECK (email IS NULL OR (email ~ '^[^@\s]+@[^@\s]+$' AND length(email) <= 254)),
    ADD CONSTRAINT customer_address_length CHECK (address IS NULL OR length(address) <= 500),
    ADD CONSTRAINT customer_city_length CHECK (city IS NULL OR length(city) <= 100),
    ADD CONSTRAINT customer_postal_code_length CHECK (postal_code IS NULL OR length(postal_code) <= 20),
    ADD CONSTRAINT customer_region_form CHECK (region IS NULL OR region ~ '^[A-Z0-9]{1,3}$'),
    ADD CONSTRAINT customer_country_iso3166 CHECK (country IS NULL OR country ~ '^[A-Z]{2}$'),
    ADD CONSTRAINT customer_tax_id_length CHECK (tax_id IS NULL OR (btrim(tax_id) <> '' AND length(tax_id) <= 50)),
    ADD CONSTRAINT customer_tax_status_known CHECK (tax_status IN ('TAXABLE', 'EXEMPT', 'REVERSE_CHARGE')),
    ADD CONSTRAINT customer_reverse_charge_has_tax_id CHECK (tax_status <> 'REVERSE_CHARGE' OR tax_id IS NOT NULL);
COMMENT ON COLUMN billing.customer.name IS 'Name on invoices (person or company).';
COMMENT ON COLUMN billing.customer.email IS 'Where invoices are sent.';
COMMENT ON COLUMN billing.customer.address IS 'Street address (lines separated by newlines).';
COMMENT ON COLUMN billing.customer.city IS 'City of the billing address.';
COMMENT ON COLUMN billing.customer.postal_code IS 'Postal code of the billing address.';
COMMENT ON COLUMN billing.customer.region IS 'ISO 3166-2 subdivision code without the country (QC, CA, BY...): selects regional tax rates.';
COMMENT ON COLUMN billing.customer.country IS 'ISO 3166-1 alpha-2 country of the billing address: selects the tax rates.';
COMMENT ON COLUMN billing.customer.tax_id IS 'The customer''s tax (VAT) id, printed on invoices; required for REVERSE_CHARGE.';
COMMENT ON COLUMN billing.customer.tax_status IS 'TAXABLE (rates of the address apply), EXEMPT (no tax) or REVERSE_CHARGE (no tax, the customer accounts for it).';

CREATE TABLE billing.tax_rate (
    code       text        NOT NULL CONSTRAINT tax_rate_pkey PRIMARY KEY,
    country    char(2)     NOT NULL,
    region     text,
    name       text        NOT NULL,
    rate_bp    integer     NOT NULL,
    inclusive  boolean     NOT NULL,
    active     boolean     NOT NULL DEFAULT true,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT tax_rate_code_form CHECK (code ~ '^[A-Za-z0-9_-]{1,64}$'),
    CONSTRAINT tax_rate_country_iso3166 CHECK (country ~ '^[A-Z]{2}$'),
    CONSTRAINT tax_rate_region_form CHECK (region IS NULL OR region ~ '^[A-Z0-9]{1,3}$'),
    CONSTRAINT tax_rate_name_length CHECK (btrim(name) <> '' AND length(name) <= 100),
    CONSTRAINT tax_rate_bp_range CHECK (rate_bp BETWEEN 0 AND 10000)
);
CREATE INDEX tax_rate_country_idx ON billing.tax_rate (country) WHERE active;
COMMENT ON TABLE billing.tax_rate IS 'Tax rates by billing address (reference table): every active rate of the customer''s country whose region is NULL or the customer''s region applies.';
COMMENT ON COLUMN billing.tax_rate.code IS 'Business key (FR_VAT, CA_GST, CA_QC_QST...).';
COMMENT ON COLUMN billing.tax_rate.country IS 'ISO 3166-1 alpha-2 country it applies in.';
COMMENT ON COLUMN billing.tax_rate.region IS 'Subdivision it applies in; NULL: the whole country.';
COMMENT ON COLUMN billing.tax_rate.name IS 'Name printed on the tax line (VAT, GST, QST, Sales tax...).';
COMMENT ON COLUMN billing.tax_rate.rate_bp IS 'Rate in basis points (2000 = 20%).';
COMMENT ON COLUMN billing.tax_rate.inclusive IS 'True: prices already include it (the tax is extracted); false: added on top. All active rates of a country share the same kind.';
COMMENT ON COLUMN billing.tax_rate.active IS 'False: no longer applied to new invoices (invoices keep the rates they were created with).';
COMMENT ON COLUMN billing.tax_rate.created_at IS 'When it was first stored (wall clock).';
COMMENT ON COLUMN billing.tax_rate.updated_at IS 'When it last changed (wall clock).';

CREATE TABLE billing.document_series (
    series      text        NOT NULL CONSTRAINT document_series_pkey PRIMARY KEY,
    next_number bigint      NOT NULL DEFAULT 1,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT document_series_form CHECK (series ~ '^[A-Z0-9-]{1,20}$'),
    CONSTRAINT document_series_next_positive CHECK (next_number >= 1)
);
COMMENT ON TABLE billing.document_series IS 'The counter of each numbering series (config): the next number is taken by updating the row in the transaction that uses it, so numbers are gapless under concurrency and rollbacks.';
COMMENT ON COLUMN billing.document_series.series IS 'Invoices: the UTC year of finalization (2026); credit notes: CN-<year>.';
COMMENT ON COLUMN billing.document_series.next_number IS 'The number the next document of the series gets.';
COMMENT ON COLUMN billing.document_series.updated_at IS 'When a number was last taken (wall clock).';

ALTER TABLE billing.invoice
    ADD COLUMN tax_amount bigint NOT NULL DEFAULT 0,
    ADD COLUMN tax_included bigint NOT NULL DEFAULT 0,
    ADD COLUMN tax_detail jsonb,
    ADD COLUMN number text,
    ADD COLUMN finalized_at timestamptz,
    ADD COLUMN bill_to jsonb,
    DROP CONSTRAINT invoice_credit_within_subtotal,
    DROP CONSTRAINT invoice_amount_is_subtotal_less_credit,
    ADD CONSTRAINT invoice_tax_not_negative CHECK (tax_amount >= 0 AND tax_included BETWEEN 0 AND subtotal),
    ADD CONSTRAINT invoice_credit_within_total CHECK (credit_applied BETWEEN 0 AND subtotal + tax_amount),
    ADD CONSTRAINT invoice_amount_is_total_less_credit CHECK (amount = subtotal + tax_amount - credit_applied),
    ADD CONSTRAINT invoice_number_has_time CHECK ((number IS NULL) = (finalized_at IS NULL)),
    ADD CONSTRAINT invoice_number_has_bill_to CHECK (number IS NULL OR bill_to IS NOT NULL);
COMMENT ON COLUMN billing.invoice.tax_amount IS 'Exclusive tax added on top of subtotal (sum of its exclusive tax lines).';
COMMENT ON COLUMN billing.invoice.tax_included IS 'Inclusive tax contained in subtotal (sum of its inclusive tax lines).';
COMMENT ON COLUMN billing.invoice.tax_detail IS 'The taxes applied when it was created: {"treatment": TAXABLE|EXEMPT|REVERSE_CHARGE|NONE, "lines": [{code, name, rateBp, inclusive, amount}]}; NULL: no tax (no rate, or created before taxes).';
COMMENT ON COLUMN billing.invoice.amount IS 'What is charged: subtotal + tax_amount - credit_applied, never below zero.';
COMMENT ON COLUMN billing.invoice.number IS 'Legal number <series>-<6 digits>, given at finalization (gapless per series); NULL until then.';
COMMENT ON COLUMN billing.invoice.finalized_at IS 'When it was finalized (numbered, lines written): its document never changes afterwards.';
COMMENT ON COLUMN billing.invoice.bill_to IS 'The customer''s billing details at finalization (what the document shows).';
CREATE UNIQUE INDEX invoice_number_key ON billing.invoice (number) WHERE number IS NOT NULL;
-- The finalizer's queue: small (invoices wait seconds), so the renewal's insert into it is cheap.
CREATE INDEX invoice_unfinalized_idx ON billing.invoice (id) WHERE number IS NULL AND status <> 'VOID';

CREATE TABLE billing.invoice_line (
    customer_id    bigint      NOT NULL CONSTRAINT invoice_line_customer_fkey REFERENCES billing.customer (id),
    invoice_id     bigint      NOT NULL CONSTRAINT invoice_line_invoice_fkey REFERENCES billing.invoice (id),
    line_no        integer     NOT NULL,
    kind           text        NOT NULL,
    description    text        NOT NULL,
    quantity       integer,
    unit_amount    bigint,
    amount         bigint      NOT NULL,
    tax_rate_code  text,
    tax_rate_bp    integer,
    tax_inclusive  boolean,
    period_start   timestamptz,
    period_end     timestamptz,
    CONSTRAINT invoice_line_pkey PRIMARY KEY (customer_id, invoice_id, line_no),
    CONSTRAINT invoice_line_kind_known CHECK (kind IN ('PLAN', 'PRORATION', 'DISCOUNT', 'TAX', 'CREDIT')),
    CONSTRAINT invoice_line_tax_has_rate CHECK ((kind = 'TAX') = (tax_rate_bp IS NOT NULL AND tax_inclusive IS NOT NULL)),
    CONSTRAINT invoice_line_sign CHECK ((kind IN ('DISCOUNT', 'CREDIT') AND amount <= 0) OR (kind NOT IN ('DISCOUNT', 'CREDIT') AND amount >= 0))
);
COMMENT ON TABLE billing.invoice_line IS 'The lines of a finalized invoice, written once at finalization: total = PLAN/PRORATION + DISCOUNT + exclusive TAX lines; amount due = total + CREDIT.';
COMMENT ON COLUMN billing.invoice_line.customer_id IS 'The invoice''s customer.';
COMMENT ON COLUMN billing.invoice_line.invoice_id IS 'The invoice.';
COMMENT ON COLUMN billing.invoice_line.line_no IS 'Order on the document (1, 2, ...).';
COMMENT ON COLUMN billing.invoice_line.kind IS 'PLAN (the period''s charge), PRORATION (a plan change''s charge), DISCOUNT (coupon, negative), TAX (one per rate) or CREDIT (customer credit applied, negative).';
COMMENT ON COLUMN billing.invoice_line.description IS 'Text printed on the line.';
COMMENT ON COLUMN billing.invoice_line.quantity IS 'Seats (PLAN and PRORATION lines).';
COMMENT ON COLUMN billing.invoice_line.unit_amount IS 'Plan price per seat and period (PLAN and PRORATION lines).';
COMMENT ON COLUMN billing.invoice_line.amount IS 'Line amount in minor units (signed: DISCOUNT and CREDIT are negative).';
COMMENT ON COLUMN billing.invoice_line.tax_rate_code IS 'TAX lines: the rate applied (NULL for an exemption or reverse charge line).';
COMMENT ON COLUMN billing.invoice_line.tax_rate_bp IS 'TAX lines: its rate in basis points at the time.';
COMMENT ON COLUMN billing.invoice_line.tax_inclusive IS 'TAX lines: true when the tax is included in the charge lines (not added to the total).';
COMMENT ON COLUMN billing.invoice_line.period_start IS 'Service period start (PLAN and PRORATION lines).';
COMMENT ON COLUMN billing.invoice_line.period_end IS 'Service period end, exclusive.';

CREATE TABLE billing.credit_note (
    customer_id  bigint      NOT NULL CONSTRAINT credit_note_customer_fkey REFERENCES billing.customer (id),
    id           bigint GENERATED BY DEFAULT AS IDENTITY,
    invoice_id   bigint      NOT NULL CONSTRAINT credit_note_invoice_fkey REFERENCES billing.invoice (id),
    number       text        NOT NULL CONSTRAINT credit_note_number_key UNIQUE,
    reason       text        NOT NULL,
    refund_id    bigint,
    subtotal     bigint      NOT NULL,
    tax_amount   bigint      NOT NULL,
    total        bigint      NOT NULL,
    currency     char(3)     NOT NULL,
    issued_at    timestamptz NOT NULL,
    CONSTRAINT credit_note_pkey PRIMARY KEY (customer_id, id),
    CONSTRAINT credit_note_refund_fkey FOREIGN KEY (customer_id, refund_id) REFERENCES billing.refund (customer_id, id),
    CONSTRAINT credit_note_reason_known CHECK (reason IN ('VOID', 'REFUND')),
    CONSTRAINT credit_note_refund_has_refund CHECK ((reason = 'REFUND') = (refund_id IS NOT NULL)),
    CONSTRAINT credit_note_amounts CHECK (total > 0 AND tax_amount >= 0 AND total = subtotal + tax_amount)
);
CREATE UNIQUE INDEX credit_note_one_per_refund ON billing.credit_note (customer_id, refund_id) WHERE refund_id IS NOT NULL;
CREATE UNIQUE INDEX credit_note_one_void ON billing.credit_note (customer_id, invoice_id) WHERE reason = 'VOID';
CREATE INDEX credit_note_invoice_idx ON billing.credit_note (invoice_id);
COMMENT ON TABLE billing.credit_note IS 'A numbered credit note: what a finalized invoice no longer claims (voided) or gave back (refunded). The invoice itself is never edited.';
COMMENT ON COLUMN billing.credit_note.customer_id IS 'The invoice''s customer.';
COMMENT ON COLUMN billing.credit_note.id IS 'Surrogate key within the customer.';
COMMENT ON COLUMN billing.credit_note.invoice_id IS 'The finalized invoice it credits.';
COMMENT ON COLUMN billing.credit_note.number IS 'Legal number CN-<year>-<6 digits> (gapless per series).';
COMMENT ON COLUMN billing.credit_note.reason IS 'VOID (the whole invoice is canceled) or REFUND (money given back).';
COMMENT ON COLUMN billing.credit_note.refund_id IS 'REFUND: the refund that succeeded.';
COMMENT ON COLUMN billing.credit_note.subtotal IS 'Credited amount before exclusive tax (positive).';
COMMENT ON COLUMN billing.credit_note.tax_amount IS 'Exclusive tax credited (positive).';
COMMENT ON COLUMN billing.credit_note.total IS 'subtotal + tax_amount.';
COMMENT ON COLUMN billing.credit_note.currency IS 'The invoice''s currency.';
COMMENT ON COLUMN billing.credit_note.issued_at IS 'When it was issued (simulated clock).';

CREATE TABLE billing.credit_note_line (
    customer_id    bigint  NOT NULL,
    credit_note_id bigint  NOT NULL,
    line_no        integer NOT NULL,
    kind           text    NOT NULL,
    description    text    NOT NULL,
    amount         bigint  NOT NULL,
    tax_rate_code  text,
    tax_rate_bp    integer,
    tax_inclusive  boolean,
    CONSTRAINT credit_note_line_pkey PRIMARY KEY (customer_id, credit_note_id, line_no),
    CONSTRAINT credit_note_line_note_fkey FOREIGN KEY (customer_id, credit_note_id) REFERENCES billing.credit_note (customer_id, id),
    CONSTRAINT credit_note_line_kind_known CHECK (kind IN ('PLAN', 'PRORATION', 'DISCOUNT', 'TAX', 'REFUND')),
    CONSTRAINT credit_note_line_tax_has_rate CHECK ((kind = 'TAX') = (tax_rate_bp IS NOT NULL AND tax_inclusive IS NOT NULL))
);
COMMENT ON TABLE billing.credit_note_line IS 'Lines of a credit note (amounts credited, positive; a DISCOUNT line negative): subtotal = non-TAX lines less inclusive tax... see docs/invoices.md.';
COMMENT ON COLUMN billing.credit_note_line.customer_id IS 'The credit note''s customer.';
COMMENT ON COLUMN billing.credit_note_line.credit_note_id IS 'The credit note.';
COMMENT ON COLUMN billing.credit_note_line.line_no IS 'Order on the document.';
COMMENT ON COLUMN billing.credit_note_line.kind IS 'The invoice line kind it reverses (VOID), or REFUND / TAX (a refund''s share of each).';
COMMENT ON COLUMN billing.credit_note_line.description IS 'Text printed on the line.';
COMMENT ON COLUMN billing.credit_note_line.amount IS 'Amount credited in minor units.';
COMMENT ON COLUMN billing.credit_note_line.tax_rate_code IS 'TAX lines: the rate.';
COMMENT ON COLUMN billing.credit_note_line.tax_rate_bp IS 'TAX lines: its rate in basis points.';
COMMENT ON COLUMN billing.credit_note_line.tax_inclusive IS 'TAX lines: included in the other lines (not added).';

REVOKE ALL ON billing.tax_rate, billing.document_series, billing.invoice_line, billing.credit_note,
    billing.credit_note_line FROM PUBLIC;
