"""The layout of db/functions and db/tests (docs/testing.md, "pgTAP file numbers"): every function
file has a number of its own, every pgTAP file too, and a pgTAP file's number names the function
file it tests; db/tests/citus.list names files that exist; the shared fixtures of db/tests/fixtures
are included (psql's \\ir) by the suites, and each by one suite at least."""

from __future__ import annotations

import re

from billing.config import REPO_ROOT

DB = REPO_ROOT / "db"
_FUNCTION = re.compile(r"^(\d{2})_[a-z0-9_]+\.sql$")
_TEST = re.compile(r"^(\d{2})(\d)_[a-z0-9_]+\.sql$")


def _function_numbers() -> dict[str, str]:
    numbers: dict[str, str] = {}
    for path in sorted((DB / "functions").glob("*.sql")):
        m = _FUNCTION.match(path.name)
        assert m, f"db/functions/{path.name}: function files are named NN_name.sql"
        assert m.group(1) not in numbers, f"db/functions: {numbers.get(m.group(1))} and {path.name} share a number"
        numbers[m.group(1)] = path.name
    return numbers


def test_function_files_have_unique_numbers():
    assert len(_function_numbers()) >= 20


def test_pgtap_files_have_unique_numbers_naming_the_function_file_they_test():
    functions = _function_numbers()
    seen: dict[str, str] = {}
    paths = sorted((DB / "tests").glob("*.sql")) + sorted((DB / "tests" / "citus").glob("*.sql"))
    assert paths
    for path in paths:
        name = path.relative_to(DB / "tests").as_posix()
        m = _TEST.match(path.name)
        assert m, f"db/tests/{name}: pgTAP files are named NNK_name.sql (NN: the function file tested)"
        number = m.group(1) + m.group(2)
        assert number not in seen, f"db/tests: {seen.get(number)} and {name} share the number {number}"
        seen[number] = name
        assert m.group(1) == "00" or m.group(1) in functions, (
            f"db/tests/{name}: no function file db/functions/{m.group(1)}_*.sql (00K: suites across files)")


_INCLUDE = re.compile(r"^\\(ir?|include(?:_relative)?)\s+(\S+)\s*$", re.MULTILINE)
_FIXTURE = re.compile(r"^[a-z][a-z0-9_]*\.sql$")


def test_shared_fixtures_are_included_with_ir_and_each_used():
    """A suite shares a world with others through db/tests/fixtures/NAME.sql, included with `\\ir`
    (relative to the including file, so pg_prove and psql run it from any directory; pg_prove does
    not descend into db/tests/fixtures, so a fixture is never run as a suite of its own)."""
    fixtures_dir = DB / "tests" / "fixtures"
    fixtures = {p.resolve() for p in fixtures_dir.glob("*.sql")}
    for path in fixtures:
        assert _FIXTURE.match(path.name), f"db/tests/fixtures/{path.name}: fixtures are named name.sql (no number)"
    assert not [p for p in fixtures_dir.iterdir() if p.suffix != ".sql"], "db/tests/fixtures holds .sql fixtures only"
    used: set = set()
    for path in sorted((DB / "tests").rglob("*.sql")):
        for command, target in _INCLUDE.findall(path.read_text()):
            name = path.relative_to(DB / "tests").as_posix()
            assert command == "ir", f"db/tests/{name}: include fixtures with \\ir (relative), not \\{command}"
            included = (path.parent / target).resolve()
            assert included in fixtures, f"db/tests/{name}: \\ir {target} is not a file of db/tests/fixtures"
            used.add(included)
    assert fixtures - used == set(), "fixtures no suite includes: " + ", ".join(sorted(p.name for p in fixtures - used))


def test_citus_list_names_existing_files_once():
    names = [ln.strip() for ln in (DB / "tests" / "citus.list").read_text().splitlines()
             if ln.strip() and not ln.startswith("#")]
    assert len(names) == len(set(names))
    for name in names:
        assert (DB / "tests" / name).is_file(), f"db/tests/citus.list: {name} does not exist"


# The single-node suites that do not run on Citus, each with its Citus form (docs/scaling.md says why).
NOT_ON_CITUS = {"160_shard_claims.sql": "citus/161_shard_claims.sql", "401_renewal_conformance.sql": "citus/402_renewal_conformance.sql",
                "890_usage_rating_in_shard.sql": "citus/891_usage_rating_in_shards.sql"}


def test_citus_list_runs_every_suite_but_the_documented_ones():
    names = {ln.strip() for ln in (DB / "tests" / "citus.list").read_text().splitlines()
             if ln.strip() and not ln.startswith("#")}
    every = {p.name for p in (DB / "tests").glob("*.sql")}
    assert every - names == set(NOT_ON_CITUS), "db/tests/citus.list must list every suite but " + ", ".join(NOT_ON_CITUS)
    scaling = (REPO_ROOT / "docs" / "scaling.md").read_text()
    for name, citus_form in NOT_ON_CITUS.items():
        assert (DB / "tests" / citus_form).is_file()
        assert name.removesuffix(".sql") in scaling and citus_form.removesuffix(".sql") in scaling, (
            f"docs/scaling.md must say why {name} is not in citus.list")


_MAKES_USAGE_PARTITIONS = re.compile(r"\b(ingest_usage\w*|usage_partitions|_usage_partition)\s*\(|\\ir\s+\S*usage_world\S*\.sql")
_LOCK_KEY = re.compile(r"pg_advisory_xact_lock\(hashtext\('billing\.usage_event partitions'\)\)")


def test_suites_making_usage_partitions_take_their_lock_first():
    """A suite that makes usage_event's partitions (an ingestion, usage_partitions, the usage world's
    fixtures) includes fixtures/usage_partitions_lock.sql right after its BEGIN: two such suites side
    by side (pg_prove -j) deadlocked on usage_event's ACCESS EXCLUSIVE lock (Makefile, PGTAP_JOBS). The
    fixture takes the very lock billing._usage_partition takes."""
    fixture = (DB / "tests" / "fixtures" / "usage_partitions_lock.sql").read_text()
    assert _LOCK_KEY.search(fixture) and _LOCK_KEY.search((DB / "functions" / "71_usage.sql").read_text()), (
        "fixtures/usage_partitions_lock.sql and billing._usage_partition (71_usage.sql) take one lock")
    for path in sorted((DB / "tests").glob("*.sql")):
        text = path.read_text()
        if not _MAKES_USAGE_PARTITIONS.search(text):
            continue
        head = text[text.index("\nBEGIN;\n") + len("\nBEGIN;\n"):].lstrip()
        assert head.startswith("\\ir fixtures/usage_partitions_lock.sql\n"), (
            f"db/tests/{path.name} makes usage partitions: \\ir fixtures/usage_partitions_lock.sql right after BEGIN")
