"""`billing db after-failover` (billing.after_failover): after a promotion that lost writes, every id
issued from then on is new (docs/operations.md)."""

from __future__ import annotations

import psycopg
import pytest
from click.testing import CliRunner

from billing.after_failover import advance_sequences
from billing.cli import main


def _sequences(url: str) -> dict[str, int | None]:
    with psycopg.connect(url) as conn:
        return dict(conn.execute("SELECT sequencename, last_value FROM pg_sequences WHERE schemaname = 'billing'"
                                 ).fetchall())


def test_every_sequence_moves_past_what_a_lost_primary_may_have_issued(db_url):
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SELECT billing.upsert_plan('P', 1000, 'USD', 'DAY', 1)")
        sub = conn.execute("SELECT id FROM billing.create_subscription('k1', 1, 'P', now())").fetchone()[0]
        invoice = conn.execute("SELECT max(id) FROM billing.invoice").fetchone()[0]
    before = _sequences(db_url)
    assert before and any(v for v in before.values())
    moved = advance_sequences(db_url, margin=1000)
    assert {m.sequence.split(".", 1)[1] for m in moved} == set(before)
    after = _sequences(db_url)
    for name, last in before.items():
        assert after[name] == (last or 0) + 1000, name
    with psycopg.connect(db_url, autocommit=True) as conn:
        sub2 = conn.execute("SELECT id FROM billing.create_subscription('k2', 2, 'P', now())").fetchone()[0]
        invoice2 = conn.execute("SELECT max(id) FROM billing.invoice").fetchone()[0]
    assert sub2 > sub + 1000 and invoice2 > invoice + 1000


def test_the_command_runs_it_and_refuses_a_margin_of_zero(db_url):
    before = _sequences(db_url)
    runner = CliRunner()
    result = runner.invoke(main, ["db", "after-failover", "--database-url", db_url, "--margin", "5"])
    assert result.exit_code == 0, result.output
    assert f"sequences advanced by 5: {len(before)}" in result.output
    assert all(_sequences(db_url)[n] == (v or 0) + 5 for n, v in before.items())
    assert runner.invoke(main, ["db", "after-failover", "--database-url", db_url, "--margin", "0"]).exit_code != 0
    with pytest.raises(ValueError):
        advance_sequences(db_url, margin=0)
