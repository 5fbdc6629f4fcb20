"""The SQL splitter `billing db migrate --citus` runs the function files with (one command per call)."""

from __future__ import annotations

from billing.config import REPO_ROOT
from billing.migrate import split_statements


def test_splits_at_semicolons_outside_quotes_dollar_quotes_and_comments():
    text = ("SELECT 'a;b';\n"
            "CREATE FUNCTION f() RETURNS int LANGUAGE sql AS $$ SELECT 1; $$;\n"
            "DO $body$ BEGIN PERFORM 1; END $body$;\n"
            "-- a comment; with a semicolon\n"
            "SELECT E'it\\'s;', \"odd;name\" /* ; /* nested; */ */ FROM t;\n"
            "SELECT 2")
    assert [s.strip() for s in split_statements(text)] == [
        "SELECT 'a;b';",
        "CREATE FUNCTION f() RETURNS int LANGUAGE sql AS $$ SELECT 1; $$;",
        "DO $body$ BEGIN PERFORM 1; END $body$;",
        "-- a comment; with a semicolon\nSELECT E'it\\'s;', \"odd;name\" /* ; /* nested; */ */ FROM t;",
        "SELECT 2",
    ]


def test_a_trailing_comment_is_no_statement():
    assert split_statements("SELECT 1;\n-- done\n") == ["SELECT 1;"]


def test_every_function_file_splits_into_whole_statements():
    for path in sorted((REPO_ROOT / "db" / "functions").glob("*.sql")):
        text = path.read_text(encoding="utf-8")
        parts = split_statements(text)
        assert parts, path.name
        # Nothing is lost but whitespace and comments between statements.
        assert "".join(parts).replace(" ", "") in text.replace(" ", "") or all(p in text for p in parts), path.name
        for p in parts:
            assert p.rstrip().endswith(";") or p is parts[-1], (path.name, p[:80])
            assert p.count("$$") % 2 == 0, (path.name, p[:80])
