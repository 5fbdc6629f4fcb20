-- 0541_mrr_marks_uncompressed: the MRR marks' customer arrays stored without compression (issue 32,
-- bench/renewal). A renewal batch of 5,000 writes two marks (its service lines' and its subscription
-- update's, 76_mrr_aggregate.sql), each an array of 5,000 customer ids (40 kB): pglz compressed each
-- one to ~16 kB on every batch, 1.3% of the renewal's CPU under `perf` (~1.2 µs per invoice), for
-- rows that live only until the next fold. Stored out of line as they are: no compression work on
-- write nor on read (the fold and the readers detoast them). Signups, charges and cancellations mark
-- one customer per row: under the 2 kB threshold, unchanged.
ALTER TABLE billing.mrr_dirty ALTER COLUMN customer_ids SET STORAGE EXTERNAL;
