"""`billing db migrate`: ordered, recorded with checksums, refuses edited migrations, concurrent-safe."""

from __future__ import annotations

import shutil
import threading

import psycopg
import pytest
from psycopg import sql

from billing.config import REPO_ROOT
from billing.migrate import MigrationError, migrate

from .conftest import url_for_db


@pytest.fixture
def empty_db(pg_server_url):
    import uuid

    name = f"m_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    yield url_for_db(pg_server_url, name)
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def test_second_run_applies_nothing_new(empty_db):
    first = migrate(empty_db, REPO_ROOT / "db")
    assert first.applied, "a fresh database takes every migration"
    second = migrate(empty_db, REPO_ROOT / "db")
    assert second.applied == []
    assert second.functions == first.functions
    with psycopg.connect(empty_db) as conn:
        rows = conn.execute("SELECT version, checksum FROM billing.schema_migration ORDER BY version").fetchall()
    assert [r[0] for r in rows] == sorted(r[0] for r in rows)
    assert all(len(r[1]) == 64 for r in rows)


def test_edited_migration_is_refused(empty_db, tmp_path):
    db_dir = tmp_path / "db"
    shutil.copytree(REPO_ROOT / "db", db_dir)
    migrate(empty_db, db_dir)
    first = sorted((db_dir / "schema").glob("*.sql"))[0]
    first.write_text(first.read_text() + "\n-- edited after the fact\n")
    with pytest.raises(MigrationError, match="edited"):
        migrate(empty_db, db_dir)


def test_new_migration_is_applied_once(empty_db, tmp_path):
    db_dir = tmp_path / "db"
    shutil.copytree(REPO_ROOT / "db", db_dir)
    migrate(empty_db, db_dir)
    (db_dir / "schema" / "9999_probe.sql").write_text("CREATE TABLE billing.probe_9999 (x int);")
    assert migrate(empty_db, db_dir).applied == ["9999_probe.sql"]
    assert migrate(empty_db, db_dir).applied == []


def test_concurrent_migrators_are_safe(empty_db):
    results, errors = [], []

    def run():
        try:
            results.append(migrate(empty_db, REPO_ROOT / "db"))
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    applied = [r.applied for r in results if r.applied]
    assert len(applied) == 1, "exactly one instance applies the migrations"


def test_a_version_this_code_does_not_know_is_refused(empty_db, tmp_path):
    """A database migrated by a newer release: refused before anything is applied."""
    db_dir = tmp_path / "db"
    shutil.copytree(REPO_ROOT / "db", db_dir)
    probe = db_dir / "schema" / "9998_newer_release.sql"
    probe.write_text("CREATE TABLE billing.probe_9998 (x int);")
    migrate(empty_db, db_dir)
    probe.unlink()
    with pytest.raises(MigrationError, match=r"does not know \(9998\)"):
        migrate(empty_db, db_dir)


def test_a_pending_file_below_the_highest_applied_is_refused(empty_db, tmp_path):
    """A file numbered below what is applied would run in another order than on a fresh database."""
    db_dir = tmp_path / "db"
    shutil.copytree(REPO_ROOT / "db", db_dir)
    migrate(empty_db, db_dir)
    (db_dir / "schema" / "0044_late.sql").write_text("CREATE TABLE billing.probe_0044 (x int);")
    with pytest.raises(MigrationError, match=r"below the highest applied one \(\d{4}\): 0044_late.sql"):
        migrate(empty_db, db_dir)
    with psycopg.connect(empty_db) as conn:
        assert conn.execute("SELECT to_regclass('billing.probe_0044')").fetchone()[0] is None, "nothing applied"
        assert conn.execute("SELECT count(*) FROM billing.schema_migration WHERE version = 44").fetchone()[0] == 0


def test_cli_exits_non_zero_with_the_reason(empty_db, tmp_path):
    from click.testing import CliRunner

    from billing.cli import main

    db_dir = tmp_path / "db"
    shutil.copytree(REPO_ROOT / "db", db_dir)
    migrate(empty_db, db_dir)
    (db_dir / "schema" / "0044_late.sql").write_text("CREATE TABLE billing.probe_0044 (x int);")
    result = CliRunner().invoke(main, ["db", "migrate", "--database-url", empty_db], env={"BILLING_DB_DIR": str(db_dir)})
    assert result.exit_code != 0
    assert "0044_late.sql" in result.output and "strictly ordered" in result.output
