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


def _probe_on_a_busy_table(empty_db, tmp_path):
    """A database at the current version, and a pending migration that needs ACCESS EXCLUSIVE on
    billing.plan (a column added: instant, but only once the lock is granted)."""
    db_dir = tmp_path / "db"
    shutil.copytree(REPO_ROOT / "db", db_dir)
    migrate(empty_db, db_dir)
    (db_dir / "schema" / "9999_probe.sql").write_text("ALTER TABLE billing.plan ADD COLUMN probe_9999 int;")
    return db_dir


def test_a_migration_behind_a_long_transaction_gives_way_to_the_workers_then_retries(empty_db, tmp_path):
    """docs/operations.md, upgrades: a long transaction reading billing.plan holds the migration's
    ALTER; without lock_timeout every later reader would queue behind the ALTER's pending lock for
    the whole transaction (6 s here). With it, each attempt waits 0.3 s, rolls back, and readers
    pass between attempts; the migration lands once the long transaction ends."""
    db_dir = _probe_on_a_busy_table(empty_db, tmp_path)
    blocker = psycopg.connect(empty_db)
    blocker.execute("SELECT count(*) FROM billing.plan")  # ACCESS SHARE, held until the commit below
    done = threading.Event()
    waits: list[float] = []

    def release_later():
        done.wait(6.0)
        blocker.commit()

    def reader():
        import time

        with psycopg.connect(empty_db, autocommit=True) as conn:
            while not done.is_set():
                t0 = time.monotonic()
                conn.execute("SELECT count(*) FROM billing.plan")
                waits.append(time.monotonic() - t0)
                time.sleep(0.05)

    threads = [threading.Thread(target=release_later), threading.Thread(target=reader)]
    for t in threads:
        t.start()
    try:
        result = migrate(empty_db, db_dir, lock_timeout=0.3, attempts=40, pause=0.1)
    finally:
        done.set()
        for t in threads:
            t.join()
        blocker.close()
    assert result.applied == ["9999_probe.sql"]
    assert result.attempts > 1, "the long transaction should have made the first attempt give up"
    assert waits, "the reader never ran"
    # A reader arriving behind a waiting ALTER waits at most the rest of its lock_timeout (0.3 s),
    # never the long transaction's 6 s (the bound leaves room for a loaded machine).
    assert max(waits) < 3.0, f"a reader waited {max(waits):.2f} s behind the migration"
    with psycopg.connect(empty_db) as conn:
        assert conn.execute("SELECT count(*) FROM information_schema.columns WHERE table_schema = 'billing' "
                            "AND table_name = 'plan' AND column_name = 'probe_9999'").fetchone()[0] == 1


def test_a_migration_that_never_gets_its_lock_gives_up_and_applies_nothing(empty_db, tmp_path):
    from billing.migrate import LockWaitExhausted

    db_dir = _probe_on_a_busy_table(empty_db, tmp_path)
    with psycopg.connect(empty_db) as blocker:
        blocker.execute("SELECT count(*) FROM billing.plan")
        with pytest.raises(LockWaitExhausted, match="gave up after 2 attempts.*nothing was applied"):
            migrate(empty_db, db_dir, lock_timeout=0.2, attempts=2, pause=0.05)
        blocker.rollback()
    with psycopg.connect(empty_db) as conn:
        assert conn.execute("SELECT count(*) FROM billing.schema_migration WHERE version = 9999").fetchone()[0] == 0
    assert migrate(empty_db, db_dir, lock_timeout=0.2, attempts=1).applied == ["9999_probe.sql"]


def _set_aside(db_dir, name: str) -> dict:
    """Migration `name` and every later one taken out of db_dir (a database as it was before them,
    whatever came after); _put_back restores them and returns their names in order."""
    files = sorted(f for f in (db_dir / "schema").glob("*.sql") if f.name >= name)
    assert files and files[0].name == name
    texts = {f: f.read_text() for f in files}
    for f in files:
        f.unlink()
    return texts


def _put_back(texts: dict) -> list[str]:
    for f, text in texts.items():
        f.write_text(text)
    return [f.name for f in texts]


def test_migration_0730_fills_the_email_domains_statistics(empty_db, tmp_path):
    """Migration 0660 made customer_email_domain_stats, which stays empty until the table's next
    ANALYZE (autovacuum analyzes a big, stable customer table only after a tenth of it changed);
    0730 analyzes the table, so the '@domain' search is planned with the domains' figures at once."""
    db_dir = tmp_path / "db"
    shutil.copytree(REPO_ROOT / "db", db_dir)
    later = _set_aside(db_dir, "0730_customer_email_domain_analyze.sql")
    migrate(empty_db, db_dir)
    filled = ("SELECT count(*) FROM pg_catalog.pg_statistic_ext s JOIN pg_catalog.pg_statistic_ext_data d ON d.stxoid = s.oid"
              " WHERE s.stxname = 'customer_email_domain_stats' AND d.stxdexpr IS NOT NULL")
    with psycopg.connect(empty_db, autocommit=True) as conn:
        conn.execute("ALTER TABLE billing.customer SET (autovacuum_enabled = false)")  # no analyze behind the test's back
        conn.execute("INSERT INTO billing.customer (id, email) SELECT g, 'u' || g || '@d' || (g % 7) || '.example'"
                     " FROM generate_series(1, 500) g")
        assert conn.execute(filled).fetchone()[0] == 0, "no figures before an ANALYZE"
    names = _put_back(later)
    assert migrate(empty_db, db_dir).applied == names
    with psycopg.connect(empty_db) as conn:
        assert conn.execute(filled).fetchone()[0] == 1, "the domains' figures are there after 0730"


def test_migration_0780_refuses_a_database_whose_subscriptions_lost_their_plan(empty_db, tmp_path):
    """Since 0720 a subscription's plan has no foreign key on one PostgreSQL: before the trigger
    plan_never_deleted (0780) the owner could delete a plan without prices under its subscriptions.
    0780 refuses such a database, naming the plan, and passes once it is back."""
    db_dir = tmp_path / "db"
    shutil.copytree(REPO_ROOT / "db", db_dir)
    later = _set_aside(db_dir, "0780_plan_never_deleted.sql")
    migrate(empty_db, db_dir, simulation=True)
    with psycopg.connect(empty_db, autocommit=True) as conn:
        conn.execute("DROP TRIGGER plan_never_deleted ON billing.plan")  # as a database built before 0780
        # the plan by its rows, as upsert_plan writes them: today's upsert_plan reads columns of later
        # migrations (0850's plan.self_serve), set aside here
        plan_id = conn.execute("INSERT INTO billing.plan (code, price_amount, currency, billing_interval) "
                               "VALUES ('M780', 1000, 'USD', 'MONTH') RETURNING id").fetchone()[0]
        conn.execute("INSERT INTO billing.plan_price (plan_id, effective_from, price_amount) VALUES (%s, '-infinity', 1000)",
                     (plan_id,))
        # the subscription by its row too: today's create_subscription writes an invoice whose statement
        # check reads 0920's renewal_statement_mark, set aside here
        conn.execute("INSERT INTO billing.customer (id) VALUES (78001)")
        conn.execute("INSERT INTO billing.subscription (customer_id, plan_id, status, timezone, billing_anchor, period_number, "
                     "current_period_start, current_period_end, period_price, quantity, updated_at) "
                     "VALUES (78001, %s, 'ACTIVE', 'UTC', '2026-02-01Z', 1, '2026-02-01Z', '2026-03-01Z', 1000, 1, "
                     "'2026-02-01Z')", (plan_id,))
        conn.execute("DELETE FROM billing.plan_price WHERE plan_id = %s", (plan_id,))
        conn.execute("DELETE FROM billing.plan WHERE id = %s", (plan_id,))
    names = _put_back(later)
    with pytest.raises(psycopg.errors.ForeignKeyViolation, match=rf"subscriptions refer to plans \{{{plan_id}\}}, which were deleted"):
        migrate(empty_db, db_dir)
    with psycopg.connect(empty_db, autocommit=True) as conn:
        conn.execute("INSERT INTO billing.plan (id, code, price_amount, currency, billing_interval) VALUES (%s, 'M780', 1000, 'USD', 'MONTH')",
                     (plan_id,))
    assert migrate(empty_db, db_dir).applied == names
    with psycopg.connect(empty_db, autocommit=True) as conn, pytest.raises(psycopg.errors.ForeignKeyViolation,
                                                                            match="plans are never deleted"):
        conn.execute("DELETE FROM billing.plan WHERE id = %s", (plan_id,))


def test_migration_0910_upgrades_a_citus_database(citus_server_url, tmp_path):
    """adv11: 0910 was only ever run on fresh databases, where every migration runs before the tables
    are distributed; on a Citus database built before it (its tables distributed) its first statement
    failed, "cannot execute ADD CONSTRAINT command with other subcommands". One subcommand per ALTER
    now: the upgrade applies it, every shard carries the looser constraints, validated, and a change's
    invoice of negative subtotal (0910's rule) is written on the upgraded cluster."""
    import uuid

    from .conftest import _citus_sh, _exclusive

    name = f"mc_{uuid.uuid4().hex[:12]}"
    _citus_sh("createdb", name)
    try:
        url = url_for_db(citus_server_url, name)
        db_dir = tmp_path / "db"
        shutil.copytree(REPO_ROOT / "db", db_dir)
        later = _set_aside(db_dir, "0910_change_tax_owed.sql")
        with _exclusive("migrate"):
            migrate(url, db_dir, simulation=True, citus=True)
        names = _put_back(later)
        with _exclusive("migrate"):
            assert migrate(url, db_dir, citus=True).applied == names
        with psycopg.connect(url, autocommit=True) as conn:
            for table, constraint, says in (("invoice", "invoice_subtotal_not_negative", "'PRORATION'"),
                                            ("invoice_line", "invoice_line_sign", "'PRORATION'")):
                command = ("SELECT pg_get_constraintdef(c.oid) || ' ' || c.convalidated FROM pg_constraint c"
                           f" WHERE c.conrelid = '%s'::regclass AND c.conname LIKE '{constraint}%%'")
                shards = conn.execute("SELECT DISTINCT result FROM run_command_on_shards(%s::regclass, %s::text)",
                                      (f"billing.{table}", command)).fetchall()
                assert len(shards) == 1 and says in shards[0][0] and shards[0][0].endswith(" true"), (table, shards)
            conn.execute("SELECT billing.upsert_plan('MC_L', 3000, 'USD', 'MONTH')")
            conn.execute("SELECT billing.upsert_plan('MC_M', 2800, 'USD', 'MONTH')")
            conn.execute("SELECT billing.upsert_tax_rate('MC_XB', 'XB', NULL, 'VAT', 2000, false)")
            sub = conn.execute("SELECT id FROM billing.create_subscription('mc-1', 91001, 'MC_L', '2026-06-01Z')").fetchone()[0]
            conn.execute("SELECT billing.finalize_invoices(10, '2026-06-01 00:01Z')")  # (as its first charge attempt)
            conn.execute("SELECT billing.set_customer_details(91001, 'MC', NULL, NULL, NULL, NULL, NULL, 'XB', NULL, 'TAXABLE')")
            conn.execute("SELECT billing.change_plan(%s, 'MC_M', '2026-06-16Z')", (sub,))
            assert conn.execute("SELECT subtotal, tax_amount FROM billing.invoice WHERE customer_id = 91001 AND kind = 'PRORATION'"
                                ).fetchone() == (-100, 280)
    finally:
        _citus_sh("dropdb", name, check=False)


def test_a_rewritten_migration_s_earlier_form_is_accepted(empty_db):
    """A database that applied 0910 before it was split (billing.migrate.REWRITTEN) migrates again
    without a refusal; another checksum is still refused."""
    migrate(empty_db, REPO_ROOT / "db", simulation=True)
    with psycopg.connect(empty_db, autocommit=True) as conn:
        conn.execute("UPDATE billing.schema_migration SET checksum = %s WHERE version = 910",
                     ("059ff8bfd8b4aaed4898e9498d40e0e8d86f9241aa72b33eabf6cde38f2f6d92",))
    assert migrate(empty_db, REPO_ROOT / "db").applied == []
    with psycopg.connect(empty_db, autocommit=True) as conn:
        conn.execute("UPDATE billing.schema_migration SET checksum = repeat('0', 64) WHERE version = 910")
    with pytest.raises(MigrationError, match="0910_change_tax_owed.sql was edited"):
        migrate(empty_db, REPO_ROOT / "db")
