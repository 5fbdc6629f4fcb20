"""Refuse migrations that would rewrite a table under an exclusive lock (docs/operations.md, upgrades).

`billing db migrate` applies `db/schema/NNNN_*.sql` while the previous release's workers run. A
statement that rewrites a whole table holds ACCESS EXCLUSIVE for as long as the rewrite takes: on
`invoice` or `outbox_event` at production size that is minutes of every worker and the API blocked.
This check reads each migration's statements and refuses, for tables that existed before the file
(a table the same file creates is empty):

* `ALTER TABLE ... ALTER COLUMN ... TYPE` (a rewrite, unless binary-coercible: not worth guessing);
* `ALTER TABLE ... ADD COLUMN ... DEFAULT <volatile>` (now(), clock_timestamp(), random(),
  gen_random_uuid(), nextval(...): a rewrite; a constant default is not) and `... GENERATED ALWAYS
  AS (...) STORED` (a rewrite);
* `ALTER TABLE ... SET LOGGED | SET UNLOGGED | SET TABLESPACE`, `VACUUM FULL`, `CLUSTER` (rewrites).

It warns (does not refuse) about full scans under the exclusive lock: `ALTER COLUMN ... SET NOT
NULL` and `ADD CONSTRAINT ... CHECK | FOREIGN KEY` without `NOT VALID` (write them as a `NOT VALID`
constraint, then `VALIDATE CONSTRAINT` in a later migration, which takes a weaker lock).

A statement may be allowed on purpose with a comment on the line before it:
`-- migration-check: allow <reason>`. Files numbered up to `GRANDFATHERED` are not read (none: every
file of db/schema passed when the check was written; the scans of the early ones are warnings).

    python -m billing.migration_check db/schema      # exit 1 and the findings when refused
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

GRANDFATHERED = 0  # every file of db/schema passes today; raise it only to exempt history
ALLOW = re.compile(r"--\s*migration-check:\s*allow\s+\S", re.I)
VOLATILE = re.compile(r"\b(now|clock_timestamp|statement_timestamp|timeofday|random|gen_random_uuid|uuid_generate_v[14]"
                      r"|nextval)\s*\(|\bcurrent_timestamp\b|\blocaltimestamp\b", re.I)
TABLE = r"(?:only\s+)?(?:if\s+exists\s+)?((?:\"?[a-z_][a-z0-9_]*\"?\.)?\"?[a-z_][a-z0-9_]*\"?)"


@dataclass(frozen=True)
class Finding:
    file: str
    line: int
    table: str
    rule: str
    refused: bool

    def __str__(self) -> str:
        kind = "REFUSED" if self.refused else "warning"
        return f"{self.file}:{self.line}: {kind}: {self.table}: {self.rule}"


def _statements(text: str) -> list[tuple[int, str, bool]]:
    """(first line, statement without comments, allowed by a comment) for each top-level statement.
    Dollar-quoted bodies (functions, DO blocks) are kept whole and never inspected."""
    out: list[tuple[int, str, bool]] = []
    buf: list[str] = []
    start, allowed, line_no = 1, False, 1
    i, n = 0, len(text)
    dollar: str | None = None
    pending_allow = False
    while i < n:
        c = text[i]
        if dollar:
            if text.startswith(dollar, i):
                buf.append(dollar)
                i += len(dollar)
                dollar = None
                continue
            buf.append(c)
        elif text.startswith("--", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            if ALLOW.search(text[i:end]):
                pending_allow = True
            i = end
            continue
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            line_no += text.count("\n", i, end)
            i = end
            continue
        elif c == "'":
            end = i + 1
            while end < n:
                if text[end] == "'" and text.startswith("''", end):
                    end += 2
                    continue
                if text[end] == "'":
                    break
                end += 1
            buf.append(text[i:end + 1])
            line_no += text.count("\n", i, end + 1)
            i = end + 1
            continue
        elif c == "$" and (m := re.match(r"\$[a-zA-Z_0-9]*\$", text[i:])):
            dollar = m.group(0)
            buf.append(dollar)
            i += len(dollar)
            continue
        elif c == ";":
            stmt = "".join(buf).strip()
            if stmt:
                out.append((start, stmt, allowed))
            buf, allowed = [], False
            i += 1
            continue
        else:
            if not "".join(buf).strip() and not c.isspace():
                start, allowed, pending_allow = line_no, pending_allow, False
            buf.append(c)
        if c == "\n":
            line_no += 1
        i += 1
    stmt = "".join(buf).strip()
    if stmt:
        out.append((start, stmt, allowed))
    return out


def _norm(table: str) -> str:
    table = table.replace('"', "").lower()
    return table if "." in table else f"billing.{table}"


def check_file(path: Path, text: str | None = None) -> list[Finding]:
    """The findings of one migration file."""
    text = path.read_text() if text is None else text
    created: set[str] = set()
    findings: list[Finding] = []
    for line, stmt, allowed in _statements(text):
        flat = " ".join(stmt.split())
        low = flat.lower()
        m = re.match(r"create\s+(?:unlogged\s+)?table\s+(?:if\s+not\s+exists\s+)?" + TABLE, low)
        if m:
            created.add(_norm(m.group(1)))
            continue

        def add(table: str, rule: str, refused: bool = True) -> None:
            if _norm(table) in created:
                return
            findings.append(Finding(path.name, line, _norm(table), rule, refused and not allowed))

        m = re.match(r"vacuum\s*(?:\(([^)]*)\)|full)\s*(?:\w+\s+)*?" + TABLE + r"?\s*$", low)
        if m and ("full" in (m.group(1) or "") or low.startswith("vacuum full")):
            add(m.group(2) or "(every table)", "VACUUM FULL rewrites the table under ACCESS EXCLUSIVE")
            continue
        m = re.match(r"cluster\b\s*(?:verbose\s+)?" + TABLE + "?", low)
        if m:
            add(m.group(1) or "(every clustered table)", "CLUSTER rewrites the table under ACCESS EXCLUSIVE")
            continue
        m = re.match(r"alter\s+table\s+" + TABLE + r"\s+(.*)$", low)
        if not m:
            continue
        table, actions = m.group(1), m.group(2)
        for action in _split_actions(actions):
            a = action.strip()
            if re.match(r"alter\s+(?:column\s+)?\S+\s+(?:set\s+data\s+)?type\b", a):
                add(table, f"'{a[:60]}' rewrites the table (a column's type)")
            elif re.match(r"add\s+(?:column\s+)?(?:if\s+not\s+exists\s+)?\S+", a) and not a.startswith(
                    ("add constraint", "add primary", "add unique", "add foreign", "add check", "add exclude")):
                if re.search(r"\bgenerated\s+always\s+as\s*\(.*\)\s*stored\b", a):
                    add(table, f"'{a[:60]}' rewrites the table (a stored generated column)")
                elif (d := re.search(r"\bdefault\b(.*)$", a)) and VOLATILE.search(
                        re.sub(r"'(?:[^']|'')*'", "''", d.group(1))):  # calls, not strings that look like them
                    add(table, f"'{a[:60]}' rewrites the table (a volatile default)")
            elif re.match(r"set\s+(?:logged|unlogged|tablespace)\b", a):
                add(table, f"'{a[:60]}' rewrites the table")
            elif re.match(r"alter\s+(?:column\s+)?\S+\s+set\s+not\s+null", a):
                add(table, f"'{a[:60]}' scans the table under ACCESS EXCLUSIVE (add a NOT VALID CHECK "
                           "(col IS NOT NULL), validate it in a later migration, then SET NOT NULL)", refused=False)
            elif re.match(r"add\s+(?:constraint\s+\S+\s+)?(?:check|foreign\s+key)\b", a) and "not valid" not in a:
                add(table, f"'{a[:60]}' scans the table under its lock (add it NOT VALID, then VALIDATE "
                           "CONSTRAINT in a later migration)", refused=False)
    return findings


def _split_actions(actions: str) -> list[str]:
    """The comma-separated actions of one table alteration (commas inside parentheses belong to an action)."""
    out, depth, cur = [], 0, []
    for c in actions:
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        if c == "," and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(c)
    out.append("".join(cur))
    return out


def check_dir(schema_dir: Path, *, grandfathered: int = GRANDFATHERED) -> list[Finding]:
    findings: list[Finding] = []
    for path in sorted(schema_dir.glob("*.sql")):
        m = re.match(r"(\d+)_", path.name)
        if m and int(m.group(1)) <= grandfathered:
            continue
        findings += check_file(path)
    return findings


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    schema_dir = Path(argv[0]) if argv else Path("db/schema")
    findings = check_dir(schema_dir)
    for f in findings:
        print(f)
    refused = [f for f in findings if f.refused]
    if refused:
        print(f"{len(refused)} statement(s) would rewrite a table under an exclusive lock: split them "
              "expand-then-contract (docs/operations.md), or allow one with '-- migration-check: allow <reason>'")
    return 1 if refused else 0


if __name__ == "__main__":
    sys.exit(main())
