"""The benches run as modules (`python -m bench.<name>.run`, what the Makefile's bench targets do):
every folder of bench/ is a package, and no bench or driver module patches sys.path."""

from __future__ import annotations

import ast

from billing.config import REPO_ROOT

BENCH = REPO_ROOT / "bench"


def test_every_bench_folder_is_a_package():
    folders = [p for p in BENCH.iterdir() if p.is_dir() and any(p.glob("*.py"))]
    assert len(folders) >= 8
    assert (BENCH / "__init__.py").is_file()
    assert [p.name for p in folders if not (p / "__init__.py").is_file()] == []


def test_nothing_patches_sys_path():
    patched = []
    for root in (BENCH, REPO_ROOT / "driver" / "billing"):
        for path in root.rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if (isinstance(node, ast.Attribute) and node.attr == "path" and isinstance(node.value, ast.Name)
                        and node.value.id == "sys"):
                    patched.append(f"{path.relative_to(REPO_ROOT)}:{node.lineno}")
    assert patched == [], f"sys.path touched (run the bench as a module instead): {patched}"


def test_the_makefile_runs_benches_as_modules():
    makefile = (REPO_ROOT / "Makefile").read_text()
    assert "python bench/" not in makefile
    assert "-m bench.renewal.run" in makefile and "-m bench.relay.run" in makefile
