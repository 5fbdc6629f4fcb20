"""Forward-only migrations (db/schema) then every re-appliable function file (db/functions).

Several instances may start at once: the whole run holds one transaction-scoped advisory lock, so
the second instance waits, then finds nothing pending and only re-applies the functions.
An applied migration whose file changed since is refused: migrations are never edited, only added.
Strictly ordered (`check_order`): a database holding a version this code does not know (migrated by a
newer release) is refused, and so is a pending file numbered below the highest applied one (it would
run after later migrations here and before them on a fresh database); nothing is applied then.

Roles (docs/security.md): the login that migrates creates the roles when they are missing (it
needs CREATEROLE or superuser for that, once per cluster), hands the schema and every object in it
to the non-login owner role `billing_owner`, then runs everything as that owner (`SET LOCAL ROLE`),
so nothing is ever owned by the login or a superuser. `simulation=True` marks the database as a
simulation database (any p_now; docs/security.md); `False` clears the mark; None leaves it.

Short locks (docs/operations.md, "Upgrades under load"): once the migrators' advisory lock is held
and the roles are in place, every lock the run takes waits at most `lock_timeout` seconds. A migration (or a trigger of the
function files) that waits for a table behind a long transaction would otherwise queue every worker
and API request behind its own pending ACCESS EXCLUSIVE for as long as that transaction lasts; with
the timeout it gives up, the whole run rolls back (nothing applied) and is tried again after a
growing, jittered pause, `attempts` times in all before `MigrationError`.
"""

from __future__ import annotations

import hashlib
import logging
import random
import re
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg

from billing.roles import JOB_ROLES
from billing.sqlfile import split_statements  # noqa: F401 (billing.migrate.split_statements, as before)

log = logging.getLogger("billing.migrate")

# An arbitrary constant: the advisory lock that serializes migrators across instances.
MIGRATION_LOCK_KEY = 0x62696C6C  # "bill"

_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")

# Migrations rewritten after main had applied them, each with the checksums of its earlier forms,
# which a database that applied one of them keeps: the same schema, written so that it also runs where
# the earlier form could not. Never for a change of what a migration does.
REWRITTEN = {
    # adv11: one subcommand per ALTER (an upgrade of a Citus database failed on its first statement:
    # "cannot execute ADD CONSTRAINT command with other subcommands"; a fresh one runs the migrations
    # before it distributes the tables).
    "0910_change_tax_owed.sql": {"059ff8bfd8b4aaed4898e9498d40e0e8d86f9241aa72b33eabf6cde38f2f6d92"},
}

BOOKKEEPING = """
CREATE SCHEMA IF NOT EXISTS billing;
CREATE TABLE IF NOT EXISTS billing.schema_migration (
    version     integer     PRIMARY KEY,
    name        text        NOT NULL,
    checksum    text        NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
);
"""


OWNER = "billing_owner"
DEPRECATED_ROLE = "billing_app"

# Run as the migrating login, before it becomes the owner. Idempotent; safe when another
# migrator (of another database of the same cluster) creates the same roles at the same time.
ROLES = ("""
DO $$
DECLARE
    v_role text;
BEGIN
    FOREACH v_role IN ARRAY ARRAY['billing_owner', @JOB_ROLES@, 'billing_app'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = v_role) THEN
            BEGIN
                EXECUTE format('CREATE ROLE %I NOLOGIN', v_role);
            EXCEPTION WHEN duplicate_object OR unique_violation THEN
                NULL;  -- created meanwhile by a concurrent migrator
            END;
        END IF;
    END LOOP;
    -- The migrating login must be able to SET ROLE billing_owner.
    IF NOT (SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user)
       AND NOT pg_catalog.pg_has_role(current_user, 'billing_owner', 'MEMBER') THEN
        EXECUTE format('GRANT billing_owner TO %I', current_user);
    END IF;
    -- billing_app: the deprecated union of every job role.
    FOREACH v_role IN ARRAY ARRAY[@JOB_ROLES@] LOOP
        IF NOT pg_catalog.pg_has_role('billing_app', v_role, 'MEMBER') THEN
            EXECUTE format('GRANT %I TO billing_app', v_role);
        END IF;
    END LOOP;
END
$$;
""").replace("@JOB_ROLES@", ", ".join(f"'{role}'" for role in JOB_ROLES))  # the one list: billing.roles

# Run as the migrating login: schema billing and everything in it belong to billing_owner (a
# database migrated by an earlier version has them owned by whoever migrated it).
ADOPT = """
DO $$
DECLARE
    v_obj record;
BEGIN
    -- Migrations say CREATE SCHEMA IF NOT EXISTS billing, which needs CREATE on the database.
    IF NOT has_database_privilege('billing_owner', current_database(), 'CREATE') THEN
        EXECUTE format('GRANT CREATE ON DATABASE %I TO billing_owner', current_database());
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = 'billing') THEN
        CREATE SCHEMA billing AUTHORIZATION billing_owner;
        RETURN;
    END IF;
    IF (SELECT nspowner FROM pg_catalog.pg_namespace WHERE nspname = 'billing') <> 'billing_owner'::regrole THEN
        ALTER SCHEMA billing OWNER TO billing_owner;
    END IF;
    FOR v_obj IN
        SELECT c.oid::regclass AS name, c.relkind
          FROM pg_catalog.pg_class c
         WHERE c.relnamespace = 'billing'::regnamespace AND c.relowner <> 'billing_owner'::regrole
           AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S')
           -- sequences of identity / serial columns follow their table
           AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend d
                            WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.deptype IN ('a', 'i'))
    LOOP
        EXECUTE format('ALTER %s %s OWNER TO billing_owner',
                       CASE WHEN v_obj.relkind = 'S' THEN 'SEQUENCE' ELSE 'TABLE' END, v_obj.name);
    END LOOP;
    FOR v_obj IN
        SELECT p.oid::regprocedure AS name, p.prokind
          FROM pg_catalog.pg_proc p
         WHERE p.pronamespace = 'billing'::regnamespace AND p.proowner <> 'billing_owner'::regrole
    LOOP
        EXECUTE format('ALTER %s %s OWNER TO billing_owner',
                       CASE WHEN v_obj.prokind = 'p' THEN 'PROCEDURE' ELSE 'FUNCTION' END, v_obj.name);
    END LOOP;
END
$$;
"""

# Set once the advisory lock is held and the roles are ready (neither is a lock on a table).
LOCK_TIMEOUT = "SELECT set_config('lock_timeout', %s, true)"
DEFAULT_LOCK_TIMEOUT = 2.0  # seconds
DEFAULT_ATTEMPTS = 10

MARK_SIMULATION = "UPDATE billing.database_setting SET simulation = %s, updated_at = now() WHERE simulation <> %s"


class MigrationError(RuntimeError):
    pass


class LockWaitExhausted(MigrationError):
    """Every attempt gave up waiting for a lock (lock_timeout): nothing was applied."""


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    path: Path

    @property
    def sql(self) -> str:
        return self.path.read_text(encoding="utf-8")

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.path.read_bytes()).hexdigest()


def discover(db_dir: Path) -> tuple[list[Migration], list[Path]]:
    migrations = []
    for path in sorted((db_dir / "schema").glob("*.sql")):
        m = _NAME.match(path.name)
        if not m:
            raise MigrationError(f"{path.name}: migrations are named NNNN_name.sql")
        migrations.append(Migration(int(m.group(1)), m.group(2), path))
    versions = [m.version for m in migrations]
    if len(set(versions)) != len(versions):
        raise MigrationError("two migrations share a version number")
    functions = sorted((db_dir / "functions").glob("*.sql"))
    return migrations, functions


def check_order(applied: set[int], migrations: list[Migration]) -> None:
    """MigrationError unless the files extend what the database holds strictly in order: every
    applied version is known here, and every pending one is numbered above the highest applied."""
    known = {m.version for m in migrations}
    unknown = sorted(applied - known)
    if unknown:
        raise MigrationError(
            "the database holds migrations this code does not know ("
            + ", ".join(f"{v:04d}" for v in unknown)
            + "): it was migrated by a newer release; run that release (or a later one), never an older one")
    if applied:
        top = max(applied)
        early = [m.path.name for m in migrations if m.version not in applied and m.version < top]
        if early:
            raise MigrationError(
                f"pending migrations numbered below the highest applied one ({top:04d}): {', '.join(early)}; "
                "they would run in another order here than on a fresh database: renumber them above "
                f"{top:04d} (migrations are strictly ordered)")


@dataclass
class MigrateResult:
    applied: list[str]
    functions: int
    simulation: bool = False
    citus: object | None = None  # billing.citus.DistributeResult with --citus
    attempts: int = 1  # runs started: more than one when a lock wait timed out (lock_timeout)


def migrate(database_url: str, db_dir: Path, *, simulation: bool | None = None,
            citus: bool = False, lock_timeout: float | None = DEFAULT_LOCK_TIMEOUT,
            attempts: int = DEFAULT_ATTEMPTS, pause: float = 0.5) -> MigrateResult:
    """`citus=True`: the database is a Citus coordinator's (the extension created, the workers
    registered); the roles are prepared on every node first and, after the migrations, the tables
    and functions are distributed (billing.citus, docs/scaling.md).

    `lock_timeout` (seconds; None or 0 = wait forever): the longest any lock of the run may be
    waited for; a run that times out is rolled back and tried again after `pause` (doubled each
    time, at most 10 s, with jitter), `attempts` runs in all."""
    if attempts < 1:
        raise ValueError("attempts must be at least 1")
    wait = pause
    for attempt in range(1, attempts + 1):
        try:
            result = _migrate_once(database_url, db_dir, simulation=simulation, citus=citus,
                                   lock_timeout=lock_timeout)
        except psycopg.errors.LockNotAvailable as exc:
            if attempt == attempts:
                raise LockWaitExhausted(
                    f"gave up after {attempts} attempts: a lock was not granted within lock_timeout "
                    f"({lock_timeout} s) each time ({exc.diag.message_primary}); a long transaction holds a "
                    "table the migration needs: end it, or run again later (nothing was applied)") from exc
            log.warning("migration attempt %d/%d: %s; rolled back, trying again in %.1f s",
                        attempt, attempts, exc.diag.message_primary, wait)
            time.sleep(wait * random.uniform(0.75, 1.25))
            wait = min(wait * 2, 10.0)
            continue
        result.attempts = attempt
        return result
    raise AssertionError("unreachable")


def _migrate_once(database_url: str, db_dir: Path, *, simulation: bool | None, citus: bool,
                  lock_timeout: float | None) -> MigrateResult:
    migrations, functions = discover(db_dir)
    applied: list[str] = []
    if citus:
        from billing import citus as citus_mod

        try:
            citus_mod.prepare(database_url, ROLES, db_dir)
        except citus_mod.CitusError as exc:
            raise MigrationError(str(exc)) from exc
    with psycopg.connect(database_url, autocommit=False) as conn:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK_KEY,))
            try:
                conn.execute(ROLES)
                conn.execute(ADOPT)
            except psycopg.errors.InsufficientPrivilege as exc:
                raise MigrationError(
                    f"the migrating login cannot create or hand over the billing roles ({exc.diag.message_primary}); "
                    "migrate once as a superuser or a login with CREATEROLE that owns the billing schema "
                    "(docs/security.md)") from exc
            # From here on every lock is waited for at most lock_timeout. Not before: the roles are
            # shared by every database of the cluster, and migrators of other databases (the test
            # templates, made at once) wait for each other's role rows for as long as their whole
            # run; that queues no worker.
            if lock_timeout:
                conn.execute(LOCK_TIMEOUT, (f"{max(1, round(lock_timeout * 1000))}ms",))
            if not citus:
                conn.execute(f"SET LOCAL ROLE {OWNER}")
            # On Citus the migration runs as the migrating login and hands everything to the owner
            # at the end of the same transaction (ADOPT below): Citus propagates each new object with
            # its owner role to the workers through a connection of the current user, and as
            # billing_owner it would try to alter that role itself there (superuser only).
            conn.execute(BOOKKEEPING)
            done = {
                row[0]: (row[1], row[2])
                for row in conn.execute("SELECT version, name, checksum FROM billing.schema_migration")
            }
            check_order(set(done), migrations)
            for m in migrations:
                if m.version in done:
                    name, checksum = done[m.version]
                    if checksum != m.checksum and checksum not in REWRITTEN.get(m.path.name, ()):
                        raise MigrationError(
                            f"migration {m.path.name} was edited after it was applied "
                            f"(checksum {checksum[:12]} in the database, {m.checksum[:12]} on disk); "
                            "add a new migration instead"
                        )
                    continue
                log.info("applying migration %s", m.path.name)
                # On Citus one statement at a time (a DDL it propagates to the workers may not be
                # one of several commands), as the function files below.
                for stmt in (split_statements(m.sql) if citus else [m.sql]):
                    conn.execute(stmt)
                conn.execute(
                    "INSERT INTO billing.schema_migration (version, name, checksum) VALUES (%s, %s, %s)",
                    (m.version, m.name, m.checksum),
                )
                applied.append(m.path.name)
            if citus:
                try:
                    placement = next((f for f in functions if f.name == citus_mod.PLACEMENT_FILE), None)
                    if placement is None:
                        raise MigrationError(f"--citus: db/functions/{citus_mod.PLACEMENT_FILE} is missing")
                    for stmt in split_statements(placement.read_text(encoding="utf-8")):
                        conn.execute(stmt)
                    placed = citus_mod.distribute(conn, db_dir)
                except (psycopg.Error, citus_mod.CitusError) as exc:
                    raise MigrationError(f"--citus: {exc}") from exc
                log.info("citus: %d reference tables, %d distributed by customer, %d left on the coordinator (%s)",
                         len(placed.reference), len(placed.distributed), len(placed.local), ", ".join(placed.local))
                citus_placed = placed
            for path in functions:
                log.debug("applying functions %s", path.name)
                try:
                    text = path.read_text(encoding="utf-8")
                    for stmt in (split_statements(text) if citus else [text]):
                        conn.execute(stmt)
                except psycopg.errors.LockNotAvailable:
                    raise  # a trigger waited too long for its table: the run is tried again
                except psycopg.Error as exc:
                    raise MigrationError(f"{path.name}: {exc}") from exc
            if citus:
                try:
                    adapted = citus_mod.adapt(conn, db_dir)
                except (psycopg.Error, citus_mod.CitusError) as exc:
                    raise MigrationError(f"--citus: {exc}") from exc
                log.info("citus: %d triggers replaced (%s), %d distributed functions", len(adapted.triggers),
                         ", ".join(adapted.triggers), len(adapted.functions))
                conn.execute(ADOPT)
            # An older db/ (a benchmark's baseline commit) has neither the mark nor the clock guard.
            marked = conn.execute("SELECT to_regclass('billing.database_setting') IS NOT NULL").fetchone()[0]
            if simulation is not None and marked:
                conn.execute(MARK_SIMULATION, (simulation, simulation))
            is_simulation = bool(marked and conn.execute("SELECT billing.is_simulation()").fetchone()[0])
    if is_simulation:
        log.info("this is a simulation database: any p_now is accepted (billing.is_simulation())")
    return MigrateResult(applied=applied, functions=len(functions), simulation=is_simulation,
                         citus=citus_placed if citus else None)
