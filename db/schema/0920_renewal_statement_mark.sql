-- 0920_renewal_statement_mark: the renewal statement's own invoices skip the statement check of
-- invoice.subscription_id (issue 32, renewal9; bench/README.md "renewal9"; docs/scaling.md "What a
-- renewal writes"). invoice_subscription_exists (12_integrity.sql) probes subscription_id_idx once an
-- invoice (2-6 us of ~90 in renewal8). The renewal statement (40_renewal.sql, _renew_batch) takes
-- every invoice's subscription from a row it has itself locked (FOR NO KEY UPDATE) in the same
-- statement, and a subscription is never deleted (subscription_never_deleted) nor renumbered (its id
-- is an identity; no engine function sets it): the probe can only find what the statement just locked.
--
-- The mark: _renew_batch inserts its transaction's id here before its statement and deletes it right
-- after, in the same subtransaction (a failed statement rolls the mark back with it); the trigger
-- skips its check when its own transaction's mark is present. Nothing but the statement runs between
-- the two, and the statement's triggers insert no invoice. No role but the owner has any privilege on
-- this table (90_grants.sql revokes them all), a setting cannot forge it, another transaction cannot
-- see an uncommitted mark, and every other writer of invoices (the per-row renewal, the lifecycle,
-- signups, plan changes, imports, _renew_batch_in_shard) never writes it: its invoices are checked as
-- before. pgTAP 404 checks both: the mark never outlives the statement, and a forged invoice is
-- refused with 23503 right after a renewal in the same transaction.
CREATE TABLE billing.renewal_statement_mark (
    xact xid8 PRIMARY KEY
);
COMMENT ON TABLE billing.renewal_statement_mark IS
'Private: the transaction whose renewal statement (_renew_batch) is running; present only during that statement. invoice_subscription_exists skips its check for it (migration 0920).';
