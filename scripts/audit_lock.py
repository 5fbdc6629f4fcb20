"""`make audit`: an offline check of requirements/runtime.lock.

What it checks, without any network:
* every requirement is pinned (==) and carries at least one --hash (pip installs it with
  --require-hashes, so a tampered or substituted file is refused);
* every pinned version is at or above the minimum of deploy/advisories.tsv, a checked-in table
  of the advisories known to affect this project's dependencies (kept by hand: raise a floor there
  and in pyproject.toml when an advisory appears);
* every dependency floor of pyproject.toml is satisfied by the lock.

What it cannot do offline: learn of advisories published after the table was last updated. With
network access, `make audit-online` asks pip-audit's advisory services about the same lock.
Exit status 1 on any finding.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_lock(text: str) -> dict[str, tuple[str, int]]:
    """name -> (version, number of hashes)."""
    pins: dict[str, tuple[str, int]] = {}
    for block in re.split(r"\n(?=[A-Za-z0-9])", text):
        block = "\n".join(line for line in block.splitlines() if not line.lstrip().startswith("#"))
        m = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?\s*(==|>=|~=|<=|>|<|!=)?\s*([^\s\\;]*)", block)
        if not m or not block.strip():
            continue
        name, op, version = canonical(m.group(1)), m.group(3), m.group(4)
        pins[name] = (version if op == "==" else f"UNPINNED {op or ''}{version}", block.count("--hash=sha256:"))
    return pins


def check(lock_text: str, advisories_text: str, dependencies: list[str]) -> tuple[dict, int, list[str]]:
    """(pins, number of advisory floors, problems)."""
    pins = parse_lock(lock_text)
    problems: list[str] = []
    for name, (version, hashes) in sorted(pins.items()):
        if version.startswith("UNPINNED"):
            problems.append(f"{name}: not pinned with == ({version})")
        if hashes == 0:
            problems.append(f"{name}: no --hash")
    advisories = 0
    for line in advisories_text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        name, minimum, why = line.split("\t", 2)
        advisories += 1
        pinned = pins.get(canonical(name))
        if pinned and not pinned[0].startswith("UNPINNED") and Version(pinned[0]) < Version(minimum):
            problems.append(f"{name} {pinned[0]} is below {minimum}: {why}")
    for spec in dependencies:
        req = Requirement(spec)
        pinned = pins.get(canonical(req.name))
        if pinned is None:
            problems.append(f"{req.name}: in pyproject.toml but not in the lock (regenerate it: make lock)")
        elif not pinned[0].startswith("UNPINNED") and not req.specifier.contains(pinned[0], prereleases=True):
            problems.append(f"{req.name} {pinned[0]} does not satisfy pyproject.toml's {req.specifier}")
    return pins, advisories, problems


def main() -> int:
    lock = ROOT / "requirements" / "runtime.lock"
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pins, advisories, problems = check(lock.read_text(), (ROOT / "deploy" / "advisories.tsv").read_text(),
                                       dependencies)
    print(f"audit: {len(pins)} pinned packages in {lock.relative_to(ROOT)}, "
          f"{sum(h for _, h in pins.values())} hashes, checked against {advisories} advisory floors "
          "(deploy/advisories.tsv, offline)")
    print("audit: offline, so advisories newer than that table are not known here; `make audit-online` asks pip-audit")
    for p in problems:
        print(f"audit: FAIL {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
