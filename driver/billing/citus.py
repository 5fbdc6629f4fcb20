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
from pathlib import Path

import psycopg
from psycopg import sql

from billing.sqlfile import read_statements

log = logging.getLogger("billing.citus")

# The placement of every table is declared once, in SQL: billing._placement() (this file of
# db/functions, applied before the tables are placed), checked against the catalog by
# db/tests/880_customer_keys.sql.
PLACEMENT_FILE = "88_placement.sql"
# The DDL that adapts the engine to Citus after the function files (triggers, foreign key, settings,
# shard groups, distributed functions): SQL files of db/citus, applied in name order by adapt().
CITUS_DIR = "citus"


class CitusError(RuntimeError):
    pass


@dataclass
class DistributeResult:
    reference: list[str] = field(default_factory=list)
    distributed: list[str] = field(default_factory=list)
    local: list[str] = field(default_factory=list)
    # A table declared distributed but kept on the coordinator, and why.
    held: dict[str, str] = field(default_factory=dict)


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


def prepare(url: str, roles_sql: str) -> None:
    """roles_sql: the statement that creates the roles (billing.migrate.ROLES, passed by the
    migrator: this module does not import billing.migrate, which imports it)."""
    with _connect(url) as conn:
        check_coordinator(conn)
        conn.execute(roles_sql)  # committed: Citus creates the roles on every node
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


def distributable(placements: list[tuple[str, str, str | None, str]],
                  fks: list[tuple[str, str]]) -> tuple[list[str], dict[str, str]]:
    """The tables declared distributed that Citus can distribute now, and why each other one waits.

    Citus refuses a foreign key between a distributed table and a table it keeps on the coordinator
    (either way), so a declared-distributed table tied by a foreign key to a table that stays there
    (pending, coordinator, or held itself) is held too, until nothing changes. `fks` are
    (referencing, referenced) table pairs."""
    kind = {t: p for t, p, _, _ in placements}
    candidates = [t for t, p, _, _ in placements if p == "distributed"]
    held: dict[str, str] = {}
    changed = True
    while changed:
        changed = False
        for t in candidates:
            if t in held:
                continue
            for a, b in fks:
                other = b if a == t else a if b == t else None
                if other is None or other == t or kind.get(other) == "reference":
                    continue
                if kind.get(other) != "distributed" or other in held:
                    held[t] = f"a foreign key ties it to {other}, which stays on the coordinator"
                    changed = True
                    break
    return [t for t in candidates if t not in held], held


def distribute(conn: psycopg.Connection) -> DistributeResult:
    """Run inside the migration's transaction, after the migrations and before the function files
    (billing._placement() excepted, applied just before): a table a foreign key ties to a reference
    table becomes a Citus local table, which Citus makes by renaming the table to its shard's name,
    and a function created before would keep the renamed row type (billing.subscription_102010) and
    refuse the next CREATE OR REPLACE."""
    result = DistributeResult()
    # DDL and data of several tables in one transaction: one connection per node.
    conn.execute("SET LOCAL citus.multi_shard_modify_mode TO 'sequential'")
    # The engine's triggers are kept on Citus (docs/scaling.md, "Triggers"): each fires on the
    # shard its row is in, on the node that holds it.
    conn.execute("SET LOCAL citus.enable_unsafe_triggers TO on")
    placements = [tuple(r) for r in conn.execute(
        "SELECT table_name, placement, distribution_column, reason FROM billing._placement()")]
    fks = [tuple(r) for r in conn.execute(
        """SELECT k.conrelid::regclass::text, k.confrelid::regclass::text FROM pg_catalog.pg_constraint k
            WHERE k.contype = 'f' AND k.connamespace = 'billing'::regnamespace""")]
    fks = [(a.removeprefix("billing."), b.removeprefix("billing.")) for a, b in fks]
    ready, result.held = distributable(placements, fks)
    column = {t: c for t, _, c, _ in placements}
    todo = [t for t in ready if _kind(conn, t) != "distributed"]
    # Citus refuses a foreign key between a table it keeps on the coordinator (a plain or Citus
    # local table) and a distributed one, either way, so while the tables are distributed one by
    # one the keys between them cannot stay: the foreign keys of the tables to distribute are
    # dropped and made again, the same, once all of them are distributed (a key between two
    # colocated tables on customer_id is then checked inside each shard group, a key to a
    # reference table on every node).
    saved = [] if not todo else [tuple(r) for r in conn.execute(
        """SELECT k.conrelid::regclass::text, k.conname, pg_catalog.pg_get_constraintdef(k.oid)
             FROM pg_catalog.pg_constraint k
            WHERE k.contype = 'f' AND k.connamespace = 'billing'::regnamespace
              AND (k.conrelid = ANY (%(t)s::regclass[]) OR k.confrelid = ANY (%(t)s::regclass[]))
            ORDER BY 1, 2""", {"t": [f"billing.{t}" for t in todo]})]
    for table, name, _ in saved:
        conn.execute(sql.SQL("ALTER TABLE {} DROP CONSTRAINT {}").format(sql.SQL(table), sql.Identifier(name)))
    # (before the reference tables too: a table a foreign key ties to a reference table becomes a
    # Citus local table, which Citus cannot distribute afterwards when it has an identity column)
    for table, placement, _, _ in placements:
        if placement != "reference" or conn.execute("SELECT to_regclass(%s)", (f"billing.{table}",)).fetchone()[0] is None:
            continue
        if _kind(conn, table) != "reference":
            log.info("reference table billing.%s", table)
            conn.execute("SELECT create_reference_table(%s)", (f"billing.{table}",))
        result.reference.append(table)
    # billing.customer first: the others are colocated with it.
    for table in sorted(ready, key=lambda t: t != "customer"):
        if table in todo:
            log.info("distributing billing.%s by %s", table, column[table])
            colocate = "none" if table == "customer" else "billing.customer"
            conn.execute("SELECT create_distributed_table(%s, %s, colocate_with => %s)",
                         (f"billing.{table}", column[table], colocate))
        result.distributed.append(table)
    for table, name, definition in saved:
        conn.execute(sql.SQL("ALTER TABLE {} ADD CONSTRAINT {} {}").format(
            sql.SQL(table), sql.Identifier(name), sql.SQL(definition)))
    for table, why in result.held.items():
        log.info("billing.%s stays on the coordinator for now: %s", table, why)
    result.local = [r[0] for r in conn.execute(
        """SELECT c.relname FROM pg_catalog.pg_class c
            WHERE c.relnamespace = 'billing'::regnamespace AND c.relkind IN ('r', 'p')
              AND NOT EXISTS (SELECT 1 FROM pg_dist_partition p
                               WHERE p.logicalrelid = c.oid AND (p.partmethod = 'h' OR p.repmodel = 't'))
            ORDER BY 1""")]
    return result


@dataclass
class AdaptResult:
    triggers: list[str] = field(default_factory=list)
    functions: list[str] = field(default_factory=list)


def adapt(conn: psycopg.Connection, db_dir: Path) -> AdaptResult:
    """After the function files, in the migration's transaction, on Citus (docs/scaling.md): the SQL
    files of db/citus, one statement at a time (db/citus/10_adapt.sql: the triggers with a transition
    table replaced, the coupon's calls made sequential, the shard groups' lease rows, every SQL API
    function taking p_customer_id distributed by it). They record what they did in
    pg_temp.citus_adapted, read back here."""
    result = AdaptResult()
    files = sorted((db_dir / CITUS_DIR).glob("*.sql"))
    if not files:
        raise CitusError(f"--citus: no SQL file in {db_dir / CITUS_DIR}")
    for path in files:
        log.debug("citus: applying %s", path.name)
        for stmt in read_statements(path):
            conn.execute(stmt)
    for kind, name in conn.execute("SELECT kind, name FROM pg_temp.citus_adapted ORDER BY kind, name"):
        (result.triggers if kind == "trigger" else result.functions).append(name)
    return result
