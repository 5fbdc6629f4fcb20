"""`make audit` (scripts/audit_lock.py): the lock file is pinned, hashed and above every advisory
floor; and the check does fail when it is not."""

from __future__ import annotations

import importlib.util
import tomllib

from billing.config import REPO_ROOT

spec = importlib.util.spec_from_file_location("audit_lock", REPO_ROOT / "scripts" / "audit_lock.py")
audit_lock = importlib.util.module_from_spec(spec)
spec.loader.exec_module(audit_lock)

ADVISORIES = (REPO_ROOT / "deploy" / "advisories.tsv").read_text()
DEPENDENCIES = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["dependencies"]


def test_the_committed_lock_passes():
    pins, floors, problems = audit_lock.check((REPO_ROOT / "requirements" / "runtime.lock").read_text(),
                                              ADVISORIES, DEPENDENCIES)
    assert problems == []
    assert floors >= 5 and {"starlette", "aiohttp", "h11", "uvicorn", "psycopg"} <= set(pins)


def test_a_vulnerable_unhashed_or_unpinned_lock_fails():
    lock = ("starlette==0.40.0 \\\n    --hash=sha256:" + "a" * 64 + "\n"
            "h11==0.14.0\n"
            "aiohttp>=3.9\n")
    _, _, problems = audit_lock.check(lock, ADVISORIES, ["starlette>=0.49.1", "click>=8"])
    text = "\n".join(problems)
    assert "starlette 0.40.0 is below 0.49.1" in text
    assert "h11: no --hash" in text and "h11 0.14.0 is below 0.16.0" in text
    assert "aiohttp: not pinned" in text
    assert "click: in pyproject.toml but not in the lock" in text
    assert "does not satisfy pyproject.toml's >=0.49.1" in text
