"""`billing db migrate --citus`: the engine on a Citus cluster, distributed by customer (docs/scaling.md).

The migrations and function files are the same as on a single PostgreSQL. On a Citus coordinator:

- `prepare` (before migrating, as the migrating superuser login): the roles are created on every
  node (Citus propagates CREATE ROLE), `billing_owner` may log in (Citus opens the connections to
  the workers as the current user, and every SQL API function runs as its owner), and it may create
  the schema on every node.
- `distribute` (after migrating): the configuration tables become reference tables (a copy on
  every node), the customer-owned tables are distributed by customer and colocated, and every
  function of schema billing is propagated to the workers. Idempotent: what is already distributed
  is left alone, so it runs after every migration.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import psycopg
from psycopg import sql

log = logging.getLogger("billing.citus")

# A copy on every node: configuration, read by every shard's statements, written rarely.
REFERENCE_TABLES = (
    "timezone_name",
    "plan",
    "plan_price",
    "dunning_step",
    "installation",
    "database_setting",
    "api_key",
    "console_session",
    "webhook_endpoint",
    "coupon",
)

# Distributed by customer, colocated with billing.customer, in foreign-key order (a table after the
# tables it references). Each carries customer_id in its primary key and its foreign keys.
# Until the customer-owned tables are re-keyed (customer_id in every primary and foreign key) they
# stay on the coordinator as Citus local tables.
DISTRIBUTED_TABLES: tuple[tuple[str, str], ...] = ()


class CitusError(RuntimeError):
    pass


@dataclass
class DistributeResult:
    reference: list[str] = field(default_factory=list)
    distributed: list[str] = field(default_factory=list)
    local: list[str] = field(default_factory=list)
    functions: int = 0


def _connect(url: str) -> psycopg.Connection:
    return psycopg.connect(url, autocommit=True)


def check_coordinator(conn: psycopg.Connection) -> int:
    """The number of active worker nodes; CitusError when the database is not a Citus coordinator."""
    row = conn.execute("SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'citus'").fetchone()
    if row is None:
        raise CitusError("--citus: extension citus is not installed in this database "
                         "(CREATE EXTENSION citus on every node, then citus_add_node on the coordinator; "
                         "scripts/services/citus.sh createdb does both)")
    workers = conn.execute("SELECT count(*) FROM citus_get_active_worker_nodes()").fetchone()[0]
    if workers == 0:
        raise CitusError("--citus: no worker node is registered (SELECT citus_add_node(host, port))")
    return workers


def prepare(url: str) -> None:
    from billing.migrate import ROLES

    with _connect(url) as conn:
        check_coordinator(conn)
        conn.execute(ROLES)  # committed: Citus creates the roles on every node
        if not conn.execute("SELECT rolcanlogin FROM pg_catalog.pg_roles WHERE rolname = 'billing_owner'").fetchone()[0]:
            conn.execute("ALTER ROLE billing_owner LOGIN")
        db = conn.execute("SELECT current_database()").fetchone()[0]
        grant = sql.SQL("GRANT CREATE ON DATABASE {} TO billing_owner").format(sql.Identifier(db)).as_string(conn)
        conn.execute(grant)  # Citus propagates it to the workers
        # The schema first, committed: created in the migration's transaction by the superuser then
        # used by billing_owner, its propagation would hold locks on the workers through one
        # connection that the other waits for (a distributed deadlock).
        conn.execute("CREATE SCHEMA IF NOT EXISTS billing AUTHORIZATION billing_owner")


def _kind(conn: psycopg.Connection, table: str) -> str:
    """reference, distributed, or local (a plain table, or a Citus local table: one the coordinator
    keeps and Citus tracks, as it does by itself for a table with a foreign key to a reference table)."""
    row = conn.execute(
        "SELECT partmethod, repmodel FROM pg_dist_partition WHERE logicalrelid = to_regclass(%s)", (f"billing.{table}",)
    ).fetchone()
    if row is None:
        return "local"
    return "distributed" if row[0] == "h" else "reference" if row[1] == "t" else "local"


def distribute(conn: psycopg.Connection) -> DistributeResult:
    """Run inside the migration's transaction, after the migrations and before the function files:
    a table a foreign key ties to a reference table becomes a Citus local table, which Citus makes by
    renaming the table to its shard's name, and a function created before would keep the renamed
    row type (billing.subscription_102010) and refuse the next CREATE OR REPLACE."""
    result = DistributeResult()
    if True:
        # DDL and data of several tables in one transaction: one connection per node.
        conn.execute("SET LOCAL citus.multi_shard_modify_mode TO 'sequential'")
        for table in REFERENCE_TABLES:
            if conn.execute("SELECT to_regclass(%s)", (f"billing.{table}",)).fetchone()[0] is None:
                continue
            if _kind(conn, table) != "reference":
                log.info("reference table billing.%s", table)
                conn.execute("SELECT create_reference_table(%s)", (f"billing.{table}",))
            result.reference.append(table)
        for table, column in DISTRIBUTED_TABLES:
            if _kind(conn, table) != "distributed":
                log.info("distributing billing.%s by %s", table, column)
                colocate = "default" if table == "customer" else "billing.customer"
                conn.execute("SELECT create_distributed_table(%s, %s, colocate_with => %s)",
                             (f"billing.{table}", column, colocate))
            result.distributed.append(table)
        result.local = [r[0] for r in conn.execute(
            """SELECT c.relname FROM pg_catalog.pg_class c
                WHERE c.relnamespace = 'billing'::regnamespace AND c.relkind IN ('r', 'p')
                  AND NOT EXISTS (SELECT 1 FROM pg_dist_partition p
                                   WHERE p.logicalrelid = c.oid AND (p.partmethod = 'h' OR p.repmodel = 't'))
                ORDER BY 1""")]
    return result
