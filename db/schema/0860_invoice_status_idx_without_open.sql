-- 0860_invoice_status_idx_without_open: the renewal's invoice writes one index entry fewer (issue 32,
-- renewal8; bench/README.md "renewal8"). Every renewal inserts OPEN invoices (uncharged), and each
-- wrote an (OPEN, id) entry into invoice_status_idx that only the pages of OPEN invoices read. Like
-- subscription_status_idx without ACTIVE (0540), the index now leaves OPEN out; the OPEN invoices
-- keep an index of their own, invoice_chargeable_idx (next_attempt_at) WHERE status = 'OPEN', which
-- every OPEN row has (the charge claims' queue, waiting ones included with a NULL key).
-- The readers (77_api_lists.list_invoices, 84_console_records.console_invoices): a page of OPEN
-- invoices walks at most 2,000 entries of invoice_id_idx from the cursor with the status checked
-- on the way (OPEN invoices are the recent ones: renewed, not yet charged or in dunning) and, only
-- when that walk neither filled the page nor reached the end, reads the OPEN rows through
-- invoice_chargeable_idx and keeps the newest (top-N): at most 2,000 entries plus the OPEN rows,
-- never a walk of the whole table. Every other status (PAID, FAILED, VOID, REVIEW) keeps its range
-- of this index. The counts of OPEN invoices (console overview's recount, billing status) read
-- invoice_chargeable_idx. pgTAP 770 checks the plans and the rows of both paths.
DROP INDEX billing.invoice_status_idx;
CREATE INDEX invoice_status_idx ON billing.invoice (status, id) WHERE status <> 'OPEN';
