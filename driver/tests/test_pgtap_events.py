"""The events the pgTAP suites make the SQL API write, validated against their schemas.

Each db/tests file runs in one transaction and rolls back; here it runs once more on a throwaway
database with, just before its ROLLBACK, the outbox written out to a file. Files that write
synthetic events themselves (through billing._emit_event, to test the outbox's mechanics) are left
out: only what the SQL API itself wrote is checked."""

from __future__ import annotations

import subprocess

import psycopg
import pytest

from billing.config import REPO_ROOT
from billing.events.schemas import catalogue

FILES = sorted(p for p in (REPO_ROOT / "db" / "tests").glob("*.sql") if "_emit_event(" not in p.read_text())


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_events_of_the_pgtap_suite_match_their_schemas(db_url, path, tmp_path):
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pgtap")
    out = tmp_path / "events.txt"
    text = path.read_text()
    head, sep, tail = text.rpartition("ROLLBACK;")
    assert sep, f"{path.name} does not end in ROLLBACK"
    script = tmp_path / path.name
    (tmp_path / "fixtures").symlink_to(path.parent / "fixtures")  # its \ir fixtures/... (db/tests/fixtures)
    script.write_text(head + f"\\pset format unaligned\n\\pset tuples_only on\n\\o {out}\n"
                             "SELECT payload::text FROM billing.outbox_event ORDER BY id;\n\\o\nROLLBACK;" + tail)
    run = subprocess.run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", db_url, "-f", str(script)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "not ok" not in run.stdout
    lines = [line for line in out.read_text().splitlines() if line.strip()]
    count, problems = catalogue().check_all(lines)
    assert not problems, f"{path.name}: " + "\n".join(problems)
    if path.name in ("300_subscriptions.sql", "510_charging.sql", "003_event_catalogue.sql"):
        assert count > 0  # these suites do write events
