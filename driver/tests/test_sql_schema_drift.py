"""No drift: a database built from db/schema + db/functions is what the repository says it is.

1. Its catalog, as printed by db/snapshot.sql (tables, columns, constraints, indexes, triggers,
   function signatures and attributes, grants), equals the committed db/schema.snapshot. A
   migration or function change that alters the interface must regenerate the snapshot in the
   same commit, so the change is visible in review (as graphile-worker does with its dump).
2. docs/sql-api.md describes exactly that database: every API function with its exact signature,
   every table with its exact column list, and nothing that does not exist.
"""

from __future__ import annotations

import difflib
import re

import psycopg

from billing.config import REPO_ROOT

SNAPSHOT_SQL = REPO_ROOT / "db" / "snapshot.sql"
SNAPSHOT = REPO_ROOT / "db" / "schema.snapshot"
DOCS = REPO_ROOT / "docs" / "sql-api.md"
REGENERATE = "psql -XAtq -d <freshly migrated database> -f db/snapshot.sql > db/schema.snapshot"


def snapshot(url: str) -> list[str]:
    with psycopg.connect(url) as conn:
        return [row[0] for row in conn.execute(SNAPSHOT_SQL.read_text())]


def test_migrated_schema_equals_the_committed_snapshot(db_url):
    got = snapshot(db_url)
    want = SNAPSHOT.read_text().splitlines()
    if got != want:
        diff = "\n".join(difflib.unified_diff(want, got, "db/schema.snapshot", "migrated database", lineterm="", n=0))
        raise AssertionError(
            f"the migrated schema differs from db/schema.snapshot; if the change is intended, run\n  {REGENERATE}\n"
            f"and update docs/sql-api.md.\n{diff}"
        )


def test_snapshot_is_stable_across_builds(db_url):
    # The template is migrated once; a second run of every functions file must change nothing.
    from billing.migrate import migrate

    before = snapshot(db_url)
    migrate(db_url, REPO_ROOT / "db")
    assert snapshot(db_url) == before


def test_docs_describe_every_api_function_and_table_exactly(db_url):
    docs = DOCS.read_text()
    with psycopg.connect(db_url) as conn:
        functions = conn.execute(
            "SELECT p.proname, format('billing.%s(%s) → %s', p.proname, pg_get_function_arguments(p.oid),"
            "                         pg_get_function_result(p.oid))"
            "  FROM pg_proc p WHERE p.pronamespace = 'billing'::regnamespace AND p.proname !~ '^_'"
            "   AND p.prorettype <> 'trigger'::regtype ORDER BY 1"
        ).fetchall()
        tables = conn.execute(
            "SELECT c.relname, format('billing.%s(%s)', c.relname, string_agg(a.attname, ', ' ORDER BY a.attnum))"
            "  FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped"
            " WHERE c.relnamespace = 'billing'::regnamespace AND c.relkind = 'r' GROUP BY c.relname ORDER BY 1"
        ).fetchall()
        everything = {
            r[0]
            for r in conn.execute(
                "SELECT proname FROM pg_proc WHERE pronamespace = 'billing'::regnamespace"
                " UNION SELECT relname FROM pg_class WHERE relnamespace = 'billing'::regnamespace"
            )
        }
    missing = [sig for _, sig in functions + tables if sig not in docs]
    assert not missing, "docs/sql-api.md lacks (or has a stale form of):\n  " + "\n  ".join(missing)
    mentioned = set(re.findall(r"billing\.([a-z_][a-z0-9_]*)", docs))
    assert mentioned <= everything, f"docs/sql-api.md mentions what does not exist: {sorted(mentioned - everything)}"
