"""The driver's SQL lives in one place, billing/db.py (each query one call to a function of the SQL
API, by name): no other module of driver/billing holds an SQL string, except the few below, each
for its reason; and db.py holds no query nobody runs."""

from __future__ import annotations

import ast
import re

from billing.config import REPO_ROOT

PACKAGE = REPO_ROOT / "driver" / "billing"
SQL = re.compile(r"^\s*(SELECT\b|INSERT INTO\b|UPDATE \w+(\.\w+)? SET\b|DELETE FROM\b|WITH \w+ AS\b|LISTEN\b|NOTIFY\b|"
                 r"SET( LOCAL)? \w+|CREATE\b|ALTER\b|DROP\b|TRUNCATE\b|DO \$)")

ELSEWHERE = {
    # The migration machinery runs DDL, not the SQL API: its own bookkeeping, roles, ownership.
    "migrate.py": "the migrator's bookkeeping, roles and ownership DDL",
    "citus.py": "the Citus set-up: catalog reads and session settings around db/citus/10_adapt.sql",
    "sqlfile.py": "the SQL file reader",
    "roles.py": "login roles by job (CREATE/ALTER ROLE, by identifier)",
    "demo/services.py": "the demo's own database (CREATE/DROP DATABASE)",
    # The console asks the catalog which actions exist and builds their call by argument name.
    "console/actions.py": "a call built from the catalog's signature",
}


def _sql_strings(path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        parts = [node] if isinstance(node, ast.Constant) else list(node.values) if isinstance(node, ast.JoinedStr) else []
        if parts and isinstance(parts[0], ast.Constant) and isinstance(parts[0].value, str) and SQL.match(parts[0].value):
            found.append((node.lineno, parts[0].value.strip().splitlines()[0][:80]))
    return found


def test_sql_strings_live_in_db_py():
    stray = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel == "db.py" or rel in ELSEWHERE:
            continue
        stray += [f"{rel}:{line}: {text}" for line, text in _sql_strings(path)]
    assert stray == [], "SQL outside billing/db.py (name it there):\n" + "\n".join(stray)


def test_the_scan_finds_sql():
    """Not blind: db.py's queries are found, and so is the migrator's DDL."""
    assert len(_sql_strings(PACKAGE / "db.py")) > 50
    assert _sql_strings(PACKAGE / "migrate.py")


def test_every_query_of_db_py_is_run_somewhere():
    tree = ast.parse((PACKAGE / "db.py").read_text())
    queries = [node.targets[0].id for node in tree.body
               if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
               and node.targets[0].id.isupper() and not node.targets[0].id.startswith("_")
               and isinstance(node.value, (ast.Constant, ast.JoinedStr, ast.Call, ast.BinOp))]
    users = "\n".join(p.read_text() for root in ("driver", "bench") for p in (REPO_ROOT / root).rglob("*.py")
                      if p != PACKAGE / "db.py")
    unused = [name for name in queries if not re.search(rf"\b{name}\b", users)]
    assert unused == [], f"queries of billing/db.py nobody runs: {unused}"
