"""The Citus fixture: a throwaway database on the three-node cluster, migrated with --citus."""

import psycopg


def test_citus_db_is_distributed_by_customer(citus_db_url):
    with psycopg.connect(citus_db_url) as conn:
        nodes = conn.execute("SELECT count(*) FROM pg_dist_node WHERE noderole = 'primary' AND groupid > 0").fetchone()[0]
        dist = conn.execute(
            "SELECT colocationid FROM pg_dist_partition WHERE logicalrelid = 'billing.subscription'::regclass"
        ).fetchone()
        cust = conn.execute(
            "SELECT colocationid FROM pg_dist_partition WHERE logicalrelid = 'billing.customer'::regclass"
        ).fetchone()
    assert nodes == 2
    assert dist is not None and dist == cust
