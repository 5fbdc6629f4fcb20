"""The driver's layers only point down: an AST walk over every module of driver/billing (imports
inside functions included: a lazy import is still a dependency) fails on an import cycle, on an
import of a higher layer, and on an import between two components of the same layer.

The layers, bottom to top (a module's component is its top-level name under billing, e.g.
`billing.worker`; a component not listed here fails the test: place it):
"""

from __future__ import annotations

import ast
from pathlib import Path

from billing.config import REPO_ROOT

PACKAGE = REPO_ROOT / "driver" / "billing"

LAYERS: list[set[str]] = [
    # 0 base: settings, time, logs, metrics, the pure rules (signatures, input fields, job roles),
    # the SSRF guard: nothing of billing but their own component
    {"billing", "config", "clock", "logs", "metrics", "signing", "fields", "roles", "checks", "sqlfile", "netguard",
     "notifications", "migration_check", "web_forms", "people"},
    # 1 the one place of the driver's SQL calls
    {"db"},
    # 2 what goes through db alone: the Citus set-up, API keys
    {"citus", "api_keys", "after_failover"},
    # 3 the migrator (it runs the Citus set-up with --citus), the restore's aftercare
    {"migrate", "after_restore"},  # after_restore: after_failover's sequences, then its own steps
    # 4 the payment gateway's protocol (client, simulator)
    {"gateway"},
    # 5 the parts the jobs are made of
    {"providers", "limiter", "invoices", "events", "usage", "importer"},
    # 6 the jobs: the worker's loops, the operator console
    {"worker", "console", "portal"},
    # 7 the HTTP API (it mounts the console)
    {"api"},
    # 8 entry points
    {"cli", "demo", "status"},
]

# Modules that sit lower than their package: (module, component it counts as).
PLACED = {
    # The SSRF guard the API checks a webhook URL with at registration and the worker at delivery;
    # it imports nothing of the worker (billing.netguard holds it where that module exists).
    "billing.worker.targets": "netguard",
}

# Imports waiting for another branch of issue 25 (remove the line when it lands).
PENDING: set[tuple[str, str]] = set()


def _modules() -> dict[str, Path]:
    mods = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = path
    return mods


MODULES = _modules()


def _resolve(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(module: str, path: Path) -> set[str]:
    is_package = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            # `from billing.x import y`: the submodule y when it is one, else billing.x
            targets = [f"{prefix}.{a.name}" if f"{prefix}.{a.name}" in MODULES else prefix for a in node.names]
        for target in targets:
            if target == "billing" or target.startswith("billing."):
                resolved = _resolve(target)
                if resolved and resolved != module:
                    out.add(resolved)
    return out


GRAPH = {m: _imports(m, p) for m, p in MODULES.items()}


def component(module: str) -> str:
    if module in PLACED:
        return PLACED[module]
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "billing"


def layer(module: str) -> int:
    comp = component(module)
    for i, members in enumerate(LAYERS):
        if comp in members:
            return i
    raise AssertionError(f"{module}: component {comp!r} is in no layer of test_layers.LAYERS; place it")


def test_every_module_has_a_layer():
    for module in MODULES:
        layer(module)


def test_imports_point_down():
    wrong = []
    for module, targets in GRAPH.items():
        for target in targets:
            if (module, target) in PENDING:
                continue
            # A package's __init__ may re-export its own modules; a module may import its own package.
            if target.startswith(module + ".") or module.startswith(target + "."):
                continue
            same = component(module) == component(target)
            if layer(target) > layer(module) or (layer(target) == layer(module) and not same):
                wrong.append(f"{module} (layer {layer(module)}, {component(module)}) imports {target} "
                             f"(layer {layer(target)}, {component(target)})")
    assert wrong == [], "imports that do not point down:\n" + "\n".join(sorted(wrong))


def test_no_import_cycle():
    edges = {m: {t for t in ts if (m, t) not in PENDING} for m, ts in GRAPH.items()}
    # A package importing its own submodules (re-exports) is not a cycle with them.
    for m, ts in edges.items():
        edges[m] = {t for t in ts if not (m != "billing" and t.startswith(m + "."))}
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for t in sorted(edges.get(m, ())):
            if state.get(t) == 1:
                cycles.append(stack[stack.index(t):] + [t])
            elif t not in state:
                visit(t)
        stack.pop()
        state[m] = 2

    for m in sorted(edges):
        if m not in state:
            visit(m)
    assert cycles == [], "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_the_walk_sees_lazy_imports():
    """The walk is not blind: a function-level import counts (billing.cli.database imports the migrator lazily)."""
    assert "billing.migrate" in GRAPH["billing.cli.database"]
    assert "billing.signing" in GRAPH["billing.providers.sim"]
