"""The settings and the environment: every field of `billing.config.Settings` is read from the
variable named after it (`BILLING_` + the field's name in capitals), a name written nowhere but in the
field itself (from_env derives it), each field in one group of settings; and no module of the driver
but billing/config.py reads the environment."""

from __future__ import annotations

import ast
import dataclasses
import typing
from pathlib import Path

from billing import config
from billing.config import REPO_ROOT, Settings

# A value each kind of field accepts, and what from_env makes of it (special forms first).
SPECIAL = {"shard_claims": ("on", "on"), "console_cookie_secure": ("true", "true"),
           "gateway_provider": ("Stripe", "stripe"), "issuer_address": ("a\\nb", "a\nb"),
           "db_dir": ("/tmp/billing-db", Path("/tmp/billing-db")), "usage_rating_workers": ("3", 3)}
BY_TYPE = {int: ("4321", 4321), float: ("43.25", 43.25), bool: ("true", True), str: ("value-from-env", "value-from-env")}


def _sample(field: dataclasses.Field, hints: dict) -> tuple[str, object]:
    if field.name in SPECIAL:
        return SPECIAL[field.name]
    kind = hints[field.name]
    args = [a for a in typing.get_args(kind) if a is not type(None)]
    return BY_TYPE[args[0] if args else kind]


def test_every_setting_is_read_from_billing_and_its_name(monkeypatch):
    hints = typing.get_type_hints(Settings)
    for name in [k for k in __import__("os").environ if k.startswith("BILLING_")]:
        monkeypatch.delenv(name)
    expected = {}
    for field in dataclasses.fields(Settings):
        raw, value = _sample(field, hints)
        monkeypatch.setenv(f"BILLING_{field.name.upper()}", raw)
        expected[field.name] = value
    settings = Settings.from_env()
    wrong = {name: getattr(settings, name) for name, value in expected.items() if getattr(settings, name) != value}
    assert wrong == {}, f"fields not read from BILLING_<FIELD>: {wrong}"
    assert len(expected) >= 45


def test_only_config_reads_the_environment():
    readers = []
    package = REPO_ROOT / "driver" / "billing"
    for path in package.rglob("*.py"):
        if path == package / "config.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv")
                    and isinstance(node.value, ast.Name) and node.value.id == "os"):
                readers.append(f"{path.relative_to(package)}:{node.lineno}")
    assert readers == [], f"the environment read outside billing/config.py: {readers}"


def test_variable_names_are_derived_from_the_fields_never_written():
    """from_env names no variable: each is BILLING_ + the field's name (env_name), so a field is
    written once, in its group, and its variable cannot drift from it."""
    variables = {config.env_name(f.name) for f in dataclasses.fields(Settings)}
    tree = ast.parse(Path(config.__file__).read_text())
    written = sorted({node.value for node in ast.walk(tree) if isinstance(node, ast.Constant)
                      and isinstance(node.value, str) and node.value in variables})
    assert written == [], f"settings' variables written by hand in config.py: {written}"
    source = Path(config.__file__).read_text()
    assert "from_env" in source and "env_name(f.name)" in source


def test_every_setting_belongs_to_one_group():
    groups = [base for base in Settings.__mro__[1:] if dataclasses.is_dataclass(base)]
    assert len(groups) >= 8
    owners = {}
    for group in groups:
        for f in dataclasses.fields(group):
            owners.setdefault(f.name, []).append(group.__name__)
    assert {name: where for name, where in owners.items() if len(where) != 1} == {}
    assert sorted(owners) == sorted(f.name for f in dataclasses.fields(Settings)), "a field outside the groups"
