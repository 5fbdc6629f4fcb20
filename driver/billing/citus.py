"""`billing db migrate --citus`: the engine on a Citus cluster, distributed by customer (docs/scaling.md).

The migrations and function files are the same as on a single PostgreSQL. On a Citus coordinator the
SQL files of db/citus do the rest; this module only runs them, each at its step, one statement at a
time, and reads back what they did:

- `prepare` (before migrating, as the migrating superuser login; db/citus/prepare.sql, autocommit):
  the coordinator checked, the roles created on every node (Citus propagates CREATE ROLE),
  `billing_owner` may log in (Citus opens the connections to the workers as the current user, and
  every SQL API function runs as its owner) and create the schema on every node.
- `distribute` (after the migrations, before the function files; db/citus/distribute.sql): the
  configuration tables become reference tables (a copy on every node), the customer-owned tables
  are distributed by customer and colocated (billing._placement(), billing._distributable(): 88_placement.sql).
  Idempotent: what is already placed is left alone, so it runs after every migration.
- `adapt` (after the function files; the numbered files db/citus/NN_*.sql, in name order): the
  triggers with a transition table replaced, the shard groups, the distributed functions.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from billing.sqlfile import read_statements

log = logging.getLogger("billing.citus")

# The placement of every table is declared once, in SQL: billing._placement() (this file of
# db/functions, applied before the tables are placed), checked against the catalog by
# db/tests/880_customer_keys.sql.
PLACEMENT_FILE = "88_placement.sql"
# The Citus SQL files, in db/citus: PREPARE_FILE before migrating, DISTRIBUTE_FILE after the
# migrations, then every numbered file (NN_*.sql) after the function files, in name order.
CITUS_DIR = "citus"
PREPARE_FILE = "prepare.sql"
DISTRIBUTE_FILE = "distribute.sql"
ADAPT_FILES = "[0-9][0-9]_*.sql"
# What the files record of what they did (temporary tables of the migration's session).
_PLACED = "SELECT kind, name, why FROM pg_temp.citus_placed ORDER BY kind, name"
_ADAPTED = "SELECT kind, name FROM pg_temp.citus_adapted ORDER BY kind, name"


class CitusError(RuntimeError):
    pass


@dataclass
class DistributeResult:
    reference: list[str] = field(default_factory=list)
    distributed: list[str] = field(default_factory=list)
    local: list[str] = field(default_factory=list)
    # A table declared distributed but kept on the coordinator, and why.
    held: dict[str, str] = field(default_factory=dict)


def _run(conn: psycopg.Connection, path: Path) -> None:
    if not path.is_file():
        raise CitusError(f"--citus: {path} is missing")
    log.debug("citus: applying %s", path.name)
    for stmt in read_statements(path):
        conn.execute(stmt)


def prepare(url: str, roles_sql: str, db_dir: Path) -> None:
    """roles_sql: the statement that creates the roles (billing.migrate.ROLES, passed by the
    migrator: this module does not import billing.migrate, which imports it). Each statement
    committed on its own (Citus propagates the roles, the grant and the schema to the workers)."""
    with psycopg.connect(url, autocommit=True) as conn:
        try:
            conn.execute(roles_sql)
            _run(conn, db_dir / CITUS_DIR / PREPARE_FILE)
        except psycopg.errors.ObjectNotInPrerequisiteState as exc:
            raise CitusError(exc.diag.message_primary) from exc
        except psycopg.errors.UndefinedFunction as exc:  # citus_get_active_worker_nodes: no Citus
            raise CitusError(f"--citus: this database is not a Citus coordinator ({exc.diag.message_primary})") from exc


def distribute(conn: psycopg.Connection, db_dir: Path) -> DistributeResult:
    """Run inside the migration's transaction, after the migrations and before the function files
    (88_placement.sql excepted, applied just before): db/citus/distribute.sql says why."""
    _run(conn, db_dir / CITUS_DIR / DISTRIBUTE_FILE)
    result = DistributeResult()
    for kind, name, why in conn.execute(_PLACED):
        if kind == "held":
            result.held[name] = why
            log.info("billing.%s stays on the coordinator for now: %s", name, why)
        else:
            getattr(result, kind).append(name)
    return result


@dataclass
class AdaptResult:
    triggers: list[str] = field(default_factory=list)
    functions: list[str] = field(default_factory=list)


def adapt(conn: psycopg.Connection, db_dir: Path) -> AdaptResult:
    """After the function files, in the migration's transaction, on Citus (docs/scaling.md): the
    numbered SQL files of db/citus, one statement at a time (db/citus/10_adapt.sql: the triggers with a transition
    table replaced, the coupon's calls made sequential, the shard groups' lease rows, every SQL API
    function taking p_customer_id distributed by it). They record what they did in
    pg_temp.citus_adapted, read back here."""
    result = AdaptResult()
    files = sorted((db_dir / CITUS_DIR).glob(ADAPT_FILES))
    if not files:
        raise CitusError(f"--citus: no SQL file in {db_dir / CITUS_DIR}")
    for path in files:
        _run(conn, path)
    for kind, name in conn.execute(_ADAPTED):
        (result.triggers if kind == "trigger" else result.functions).append(name)
    return result
