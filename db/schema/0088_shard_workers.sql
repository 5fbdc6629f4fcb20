-- 0088_shard_workers: the batch workers that lease shard groups, and until when each was last seen
-- (docs/scaling.md, "Batch claims"). lease_shard_groups spreads the groups evenly over the workers
-- seen alive: each holds at most its fair share (groups / workers alive, rounded up) and gives back
-- what it holds beyond it, so a worker that starts after the others gets its share. A reference
-- table on Citus, written about once a lease per worker.

CREATE TABLE billing.shard_worker (
    worker     text        NOT NULL CONSTRAINT shard_worker_pkey PRIMARY KEY,
    seen_until timestamptz NOT NULL,
    CONSTRAINT shard_worker_form CHECK (btrim(worker) <> '' AND length(worker) <= 200)
);
COMMENT ON TABLE billing.shard_worker IS 'The workers leasing shard groups: each counts as alive until seen_until (its last lease_shard_groups call plus the lease).';
