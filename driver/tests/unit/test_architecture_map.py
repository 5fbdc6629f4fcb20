"""docs/architecture.md, the map from each rule and each job to its file and functions, checked
against the catalog as db/schema.snapshot prints it (test_sql_schema_drift keeps the snapshot equal
to a migrated database) and against the function files."""

from __future__ import annotations

import re

from billing.config import REPO_ROOT

DOC = REPO_ROOT / "docs" / "architecture.md"
SNAPSHOT = REPO_ROOT / "db" / "schema.snapshot"
FUNCTIONS = REPO_ROOT / "db" / "functions"


def _rows() -> list[tuple[str, list[str], list[str]]]:
    """(rule or job, files, functions) of every table row of the map."""
    rows = []
    for line in DOC.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("|") or len(cells) != 3 or set(cells[1]) <= {"-"} or cells[1] == "File":
            continue
        files = re.findall(r"`(db/[a-z]+/[0-9a-z_]+\.sql)`", cells[1])
        functions = re.findall(r"`([a-z_][a-z0-9_]*)`", cells[2])
        rows.append((cells[0], files, functions))
    return rows


def _catalog() -> set[str]:
    return {m.group(1) for m in re.finditer(r"^function ([a-z_][a-z0-9_]*)\(", SNAPSHOT.read_text(), re.M)}


def test_the_map_has_rows_each_naming_a_file():
    rows = _rows()
    assert len(rows) >= 30
    for what, files, _ in rows:
        assert files, f"docs/architecture.md: {what!r} names no file"
        for f in files:
            assert (REPO_ROOT / f).is_file(), f"docs/architecture.md: {what!r}: {f} does not exist"


def test_every_function_named_exists_in_the_catalog_and_in_its_file():
    catalog = _catalog()
    assert len(catalog) > 100
    for what, files, functions in _rows():
        texts = {f: (REPO_ROOT / f).read_text(encoding="utf-8") for f in files}
        for fn in functions:
            assert fn in catalog, f"docs/architecture.md: {what!r}: billing.{fn} is not in db/schema.snapshot"
            assert any(re.search(rf"FUNCTION billing\.{fn}\(", t) for t in texts.values()), (
                f"docs/architecture.md: {what!r}: billing.{fn} is defined in none of {files}")


def test_every_function_file_is_mapped():
    mapped = {f for _, files, _ in _rows() for f in files}
    missing = sorted(f"db/functions/{p.name}" for p in FUNCTIONS.glob("*.sql") if f"db/functions/{p.name}" not in mapped)
    assert missing == [], f"function files docs/architecture.md does not map: {missing}"


def test_sql_api_md_lists_every_function_file():
    """docs/sql-api.md's table of the function files (issue 25: it listed 13 of 24) names each file of
    db/functions, and no file that is gone."""
    text = (REPO_ROOT / "docs" / "sql-api.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^\| `([0-9]{2}_[a-z0-9_]+\.sql)` \|", text, re.M))
    files = {p.name for p in FUNCTIONS.glob("*.sql")}
    assert sorted(files - listed) == [], "docs/sql-api.md does not list these function files"
    assert sorted(listed - files) == [], "docs/sql-api.md lists function files that do not exist"
