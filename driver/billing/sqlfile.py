"""SQL files as statements: the splitter `billing db migrate --citus` runs the function files with,
and billing.citus runs db/citus/*.sql with (one command per call). A module of its own, below both
billing.migrate and billing.citus, so neither imports the other for it."""

from __future__ import annotations

import re
from pathlib import Path

_DOLLAR = re.compile(r"\$([A-Za-z_][A-Za-z_0-9]*)?\$")


def split_statements(text: str) -> list[str]:
    """The statements of an SQL file, split at each `;` outside quotes, dollar quotes and comments.

    Used on Citus, which forwards a replaced function's whole query string to the workers, where a
    string of several commands is refused ("cannot insert multiple commands into a prepared statement")."""
    out: list[str] = []
    start = i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c == "-" and text.startswith("--", i):
            j = text.find("\n", i)
            i = n if j < 0 else j + 1
        elif c == "/" and text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif c in "'\"":
            escape = c == "'" and i > 0 and text[i - 1] in "eE" and (i < 2 or not (text[i - 2].isalnum() or text[i - 2] == "_"))
            i += 1
            while i < n:
                if escape and text[i] == "\\":
                    i += 2
                elif text[i] == c:
                    if i + 1 < n and text[i + 1] == c:
                        i += 2
                    else:
                        i += 1
                        break
                else:
                    i += 1
        elif c == "$" and (m := _DOLLAR.match(text, i)) and not (i > 0 and (text[i - 1].isalnum() or text[i - 1] == "_")):
            tag = m.group(0)
            j = text.find(tag, m.end())
            i = n if j < 0 else j + len(tag)
        elif c == ";":
            stmt = text[start:i + 1]
            if _has_code(stmt):
                out.append(stmt)
            start = i = i + 1
        else:
            i += 1
    if _has_code(text[start:]):
        out.append(text[start:])
    return out


def _has_code(stmt: str) -> bool:
    lines = [ln for ln in stmt.splitlines() if ln.strip() and not ln.strip().startswith("--")]
    return bool(lines) and "".join(lines).strip() not in ("", ";")


def read_statements(path: Path) -> list[str]:
    """The statements of one SQL file, in order."""
    return split_statements(path.read_text(encoding="utf-8"))
