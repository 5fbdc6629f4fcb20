"""The migration check (billing.migration_check): no migration rewrites a table under an exclusive lock."""

from __future__ import annotations

from pathlib import Path

import pytest

from billing.config import REPO_ROOT
from billing.migration_check import check_dir, check_file, main


def _findings(sql: str):
    return check_file(Path("0999_test.sql"), sql)


def test_every_migration_of_the_repository_passes():
    refused = [str(f) for f in check_dir(REPO_ROOT / "db" / "schema") if f.refused]
    assert not refused, refused
    assert main([str(REPO_ROOT / "db" / "schema")]) == 0


@pytest.mark.parametrize("sql", [
    "ALTER TABLE billing.invoice ALTER COLUMN amount TYPE numeric;",
    "ALTER TABLE billing.invoice ALTER amount SET DATA TYPE numeric(20);",
    "ALTER TABLE billing.invoice ADD COLUMN seen_at timestamptz NOT NULL DEFAULT now();",
    "ALTER TABLE invoice ADD COLUMN token uuid DEFAULT gen_random_uuid();",
    "ALTER TABLE billing.invoice ADD COLUMN stamp timestamptz DEFAULT CURRENT_TIMESTAMP;",
    "ALTER TABLE billing.invoice ADD COLUMN total bigint GENERATED ALWAYS AS (amount + 1) STORED;",
    "ALTER TABLE billing.invoice SET LOGGED;",
    "ALTER TABLE billing.outbox_event SET TABLESPACE fast;",
    "VACUUM FULL billing.outbox_event;",
    "VACUUM (FULL, VERBOSE) billing.outbox_event;",
    "CLUSTER billing.invoice USING invoice_pkey;",
    "ALTER TABLE billing.invoice ADD COLUMN note text, ALTER COLUMN amount TYPE numeric;",
])
def test_a_rewrite_of_an_existing_table_is_refused(sql):
    findings = _findings(sql)
    assert [f.refused for f in findings] == [True], findings
    assert "rewrites" in findings[0].rule


@pytest.mark.parametrize("sql", [
    "ALTER TABLE billing.invoice ADD COLUMN note text;",
    "ALTER TABLE billing.invoice ADD COLUMN tries integer NOT NULL DEFAULT 0;",  # a constant: no rewrite
    "ALTER TABLE billing.invoice ADD COLUMN tag text DEFAULT 'now()';",  # a string, not a call
    "CREATE TABLE billing.fresh (id bigint, at timestamptz);\n"
    "ALTER TABLE billing.fresh ALTER COLUMN id TYPE numeric, ADD COLUMN seen timestamptz DEFAULT now();",
    "-- migration-check: allow the table is a 10-row configuration table\n"
    "ALTER TABLE billing.dunning_step ALTER COLUMN delay TYPE interval;",
    "ALTER TABLE billing.invoice ADD CONSTRAINT invoice_amount_positive CHECK (amount > 0) NOT VALID;",
    "ALTER TABLE billing.invoice VALIDATE CONSTRAINT invoice_amount_positive;",
    "DO $$ BEGIN EXECUTE 'ALTER TABLE billing.x ALTER COLUMN y TYPE text'; END $$;",  # bodies are not read
    "CREATE OR REPLACE FUNCTION billing.f() RETURNS void LANGUAGE sql AS $f$ VACUUM FULL; $f$;",
])
def test_what_does_not_rewrite_passes(sql):
    assert not [f for f in _findings(sql) if f.refused], _findings(sql)


def test_scans_under_the_lock_are_warnings():
    findings = _findings("ALTER TABLE billing.invoice ALTER COLUMN note SET NOT NULL,\n"
                         "    ADD CONSTRAINT invoice_note_short CHECK (length(note) < 100);\n")
    assert [(f.refused, f.line) for f in findings] == [(False, 1), (False, 1)]
    assert "SET NOT NULL" in findings[0].rule.upper() and "NOT VALID" in findings[1].rule


def test_the_line_of_a_finding_is_the_statement_s_first(tmp_path):
    path = tmp_path / "0999_x.sql"
    path.write_text("-- a comment\n\nCREATE TABLE billing.t (a int);\n/* block\ncomment */\n"
                    "ALTER TABLE billing.invoice\n    ALTER COLUMN amount TYPE numeric;\n")
    (finding,) = check_file(path)
    assert finding.line == 6 and finding.table == "billing.invoice"
    assert main([str(tmp_path)]) == 1
