"""Stability for callers (issue 28; CHANGELOG.md): the SQL API changes additively. Every public
function of the last release (db/api/signatures-<version>.txt, from that release's
db/schema.snapshot) is still callable as it was: the same signature, or the same name and return
type with the old arguments first, unchanged, and only new arguments with a default after them. A
changed signature or return type keeps its old form for a release, marked deprecated (its COMMENT
starts with "Deprecated", CHANGELOG.md says when it goes), so this test keeps passing."""

from __future__ import annotations

import re

from billing.config import REPO_ROOT

RELEASE = "1.0.0"
SIGNATURES = REPO_ROOT / "db" / "api" / f"signatures-{RELEASE}.txt"
SNAPSHOT = REPO_ROOT / "db" / "schema.snapshot"
_LINE = re.compile(r"^(?P<name>[a-z][a-z0-9_]*)\((?P<args>.*)\) returns (?P<result>.+)$")


def _split(args: str) -> list[str]:
    """Top-level commas only (a default may hold commas in parentheses or quotes)."""
    out, depth, quoted, cur = [], 0, False, ""
    for ch in args:
        if ch == "'":
            quoted = not quoted
        elif not quoted and ch in "([":
            depth += 1
        elif not quoted and ch in ")]":
            depth -= 1
        if ch == "," and depth == 0 and not quoted:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return out + ([cur.strip()] if cur.strip() else [])


def _parse(lines) -> list[tuple[str, list[str], str]]:
    found = []
    for line in lines:
        m = _LINE.match(line.strip())
        if m:
            found.append((m["name"], _split(m["args"]), m["result"]))
    return found


def current_signatures() -> list[tuple[str, list[str], str]]:
    """The public functions of this tree, as db/schema.snapshot prints them."""
    lines = [re.sub(r" (volatile|stable|immutable)( .*)?$", "", line[len("function "):])
             for line in SNAPSHOT.read_text().splitlines() if re.match(r"^function [a-z]", line)]
    return _parse(lines)


def still_callable(old, now) -> bool:
    name, args, result = old
    for n, a, r in now:
        if n != name or r != result or a[: len(args)] != args:
            continue
        if all(" DEFAULT " in extra for extra in a[len(args):]):
            return True
    return False


def test_the_parser_reads_the_release_file():
    old = _parse(SIGNATURES.read_text().splitlines())
    assert len(old) >= 100
    assert ("get_subscription", ["p_subscription_id bigint"], "billing.subscription") in old
    assert _split("a text DEFAULT 'x,y'::text, b numeric(5,2)") == ["a text DEFAULT 'x,y'::text", "b numeric(5,2)"]


def test_every_function_of_the_last_release_is_still_callable_as_it_was():
    now = current_signatures()
    broken = [f"{name}({', '.join(args)}) returns {result}"
              for name, args, result in _parse(SIGNATURES.read_text().splitlines())
              if not still_callable((name, args, result), now)]
    assert broken == [], (
        "the SQL API of release " + RELEASE + " changed incompatibly; keep the old form for a release, its COMMENT "
        "starting with 'Deprecated', and say so in CHANGELOG.md:\n  " + "\n  ".join(broken))


def test_a_changed_form_would_be_caught():
    now = current_signatures()
    sub = next(s for s in now if s[0] == "get_subscription")
    assert still_callable(sub, now)
    assert not still_callable((sub[0], sub[1], "boolean"), now), "a new return type breaks callers"
    assert not still_callable((sub[0], sub[1] + ["p_new integer"], sub[2]), [sub]), "a removed argument breaks them"
    assert still_callable((sub[0], sub[1], sub[2]), [(sub[0], sub[1] + ["p_x integer DEFAULT 1"], sub[2])])
    assert not still_callable((sub[0], sub[1], sub[2]), [(sub[0], sub[1] + ["p_x integer"], sub[2])])
