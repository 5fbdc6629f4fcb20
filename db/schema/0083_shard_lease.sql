-- 0083_shard_lease: the batch jobs' shard groups and who leases them (docs/scaling.md, "Batch claims").
-- On Citus the batch claims run inside one shard group (a hash range of customer_id: every
-- customer-owned table's shard of that range, on the node that holds them); a worker leases groups
-- here first and claims inside the groups it holds. One row per group: on a single PostgreSQL one
-- group, 0, the whole database; `billing db migrate --citus` puts the cluster's groups (1..n, in
-- hash order) in its place. A reference table on Citus (a copy on every node).
--
-- The lease spreads the groups over the workers; it is not what keeps a row from being taken twice
-- (the row locks and the leases on the rows themselves do that, as on one PostgreSQL): two workers
-- in one group, one of them with a lease that ran out, still skip each other's rows.

CREATE TABLE billing.shard_lease (
    shard_group integer     NOT NULL CONSTRAINT shard_lease_pkey PRIMARY KEY,
    holder      text,
    lease_until timestamptz,
    leased_at   timestamptz,
    CONSTRAINT shard_lease_group_not_negative CHECK (shard_group >= 0),
    CONSTRAINT shard_lease_held_whole CHECK ((holder IS NULL) = (lease_until IS NULL) AND (holder IS NULL) = (leased_at IS NULL)),
    CONSTRAINT shard_lease_holder_form CHECK (holder IS NULL OR (btrim(holder) <> '' AND length(holder) <= 200))
);
COMMENT ON TABLE billing.shard_lease IS 'One row per shard group of the batch claims (0: the whole database on a single PostgreSQL; 1..n on Citus, in hash order) and the worker leasing it until lease_until.';
INSERT INTO billing.shard_lease (shard_group) VALUES (0);
