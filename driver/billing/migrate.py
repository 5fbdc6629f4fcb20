"""Forward-only migrations (db/schema) then every re-appliable function file (db/functions).

Several instances may start at once: the whole run holds one transaction-scoped advisory lock, so
the second instance waits, then finds nothing pending and only re-applies the functions.
An applied migration whose file changed since is refused: migrations are never edited, only added.
"""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass
from pathlib import Path

import psycopg

log = logging.getLogger("billing.migrate")

# An arbitrary constant: the advisory lock that serializes migrators across instances.
MIGRATION_LOCK_KEY = 0x62696C6C  # "bill"

_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")

BOOKKEEPING = """
CREATE SCHEMA IF NOT EXISTS billing;
CREATE TABLE IF NOT EXISTS billing.schema_migration (
    version     integer     PRIMARY KEY,
    name        text        NOT NULL,
    checksum    text        NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
);
"""


class MigrationError(RuntimeError):
    pass


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


@dataclass
class MigrateResult:
    applied: list[str]
    functions: int


def migrate(database_url: str, db_dir: Path) -> MigrateResult:
    migrations, functions = discover(db_dir)
    applied: list[str] = []
    with psycopg.connect(database_url, autocommit=False) as conn:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK_KEY,))
            conn.execute(BOOKKEEPING)
            done = {
                row[0]: (row[1], row[2])
                for row in conn.execute("SELECT version, name, checksum FROM billing.schema_migration")
            }
            for m in migrations:
                if m.version in done:
                    name, checksum = done[m.version]
                    if checksum != m.checksum:
                        raise MigrationError(
                            f"migration {m.path.name} was edited after it was applied "
                            f"(checksum {checksum[:12]} in the database, {m.checksum[:12]} on disk); "
                            "add a new migration instead"
                        )
                    continue
                log.info("applying migration %s", m.path.name)
                conn.execute(m.sql)
                conn.execute(
                    "INSERT INTO billing.schema_migration (version, name, checksum) VALUES (%s, %s, %s)",
                    (m.version, m.name, m.checksum),
                )
                applied.append(m.path.name)
            unknown = set(done) - {m.version for m in migrations}
            if unknown:
                log.warning("database has migrations this code does not know: %s", sorted(unknown))
            for path in functions:
                log.debug("applying functions %s", path.name)
                try:
                    conn.execute(path.read_text(encoding="utf-8"))
                except psycopg.Error as exc:
                    raise MigrationError(f"{path.name}: {exc}") from exc
    return MigrateResult(applied=applied, functions=len(functions))
