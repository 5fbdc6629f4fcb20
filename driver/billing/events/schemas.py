"""Validates CloudEvents envelopes against the catalogue's JSON Schemas: the package's own
(billing/events/catalogue/*.json, read with importlib.resources, so an installed wheel or the image
has them; the same files as the published docs/events/, both written by docs/events/generate.py),
or the folder BILLING_EVENT_SCHEMA_DIR names (billing.config.event_schema_dir).

Every envelope is checked against `envelope.v1.json`, then its `data` against the schema that
its `dataschema` attribute names (the schema's `$id`). The tests, the demo and the chaos run
check every event they produce with `EventCatalogue.errors`.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from importlib.abc import Traversable
from pathlib import Path
from typing import Any, Iterable

from jsonschema import Draft202012Validator

from billing.config import event_schema_dir

ENVELOPE_ID = "urn:billing:events:envelope:v1"


def packaged_schemas() -> Traversable:
    """The package's folder of schemas."""
    return resources.files("billing.events").joinpath("catalogue")


class EventCatalogue:
    """The schemas of one folder (default: BILLING_EVENT_SCHEMA_DIR, else the package's), by `$id`."""

    def __init__(self, directory: Path | Traversable | None = None) -> None:
        directory = directory or event_schema_dir() or packaged_schemas()
        self.validators: dict[str, Draft202012Validator] = {}
        for path in sorted((p for p in directory.iterdir() if p.name.endswith(".json")), key=lambda p: p.name):
            schema = json.loads(path.read_text(encoding="utf-8"))
            Draft202012Validator.check_schema(schema)
            self.validators[schema["$id"]] = Draft202012Validator(schema)
        if ENVELOPE_ID not in self.validators:
            raise FileNotFoundError(f"no envelope schema ({ENVELOPE_ID}) in {directory}")

    @property
    def types(self) -> set[str]:
        """The event types that have a schema (any version)."""
        return {sid.split(":")[3] for sid in self.validators if sid != ENVELOPE_ID}

    def errors(self, envelope: Any) -> list[str]:
        """What is wrong with one envelope (an empty list when it is valid)."""
        if isinstance(envelope, (str, bytes)):
            envelope = json.loads(envelope)
        found = [f"envelope: {e.json_path}: {e.message}" for e in self.validators[ENVELOPE_ID].iter_errors(envelope)]
        if not isinstance(envelope, dict):
            return found
        schema_id = envelope.get("dataschema")
        validator = self.validators.get(schema_id) if isinstance(schema_id, str) else None
        if validator is None:
            return found + [f"no schema {schema_id!r} in the catalogue (docs/events) for type {envelope.get('type')!r}"]
        if schema_id.split(":")[3] != envelope.get("type"):
            found.append(f"dataschema {schema_id} does not belong to type {envelope.get('type')!r}")
        found += [f"data: {e.json_path}: {e.message}" for e in validator.iter_errors(envelope.get("data"))]
        return found

    def check_all(self, envelopes: Iterable[Any], *, limit: int = 10) -> tuple[int, list[str]]:
        """Validates every envelope. Returns (how many were checked, up to `limit` problems, each
        prefixed with the event's type and id)."""
        count, problems = 0, []
        for envelope in envelopes:
            count += 1
            if isinstance(envelope, (str, bytes)):
                envelope = json.loads(envelope)
            errs = self.errors(envelope)
            if errs and len(problems) < limit:
                label = f"{envelope.get('type')} {envelope.get('id')}" if isinstance(envelope, dict) else "?"
                problems.append(f"{label}: {'; '.join(errs[:3])}")
        return count, problems


@lru_cache(maxsize=1)
def catalogue() -> EventCatalogue:
    """The catalogue (the package's schemas, or BILLING_EVENT_SCHEMA_DIR's), loaded once."""
    return EventCatalogue()
