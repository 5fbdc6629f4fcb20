"""The catalogue is complete: every event type the SQL functions write has a JSON Schema in
docs/events and a row in the table of docs/events.md, and nothing else is listed."""

import json
import re

from billing.config import REPO_ROOT
from billing.events.schemas import EventCatalogue

FUNCTIONS = REPO_ROOT / "db" / "functions"
# _emit_event('<aggregate>', <id>, '<Type>', ...) and the set-based inserts' literal types.
EMITTED = re.compile(r"_emit_event\(\s*'[a-z_]+',\s*[^,]+,\s*'([A-Z][A-Za-z]+)'|'([A-Z][A-Za-z]+)'\s+AS\s+event_type"
                     r"|'invoice',\s*[a-z.]+,\s*'([A-Z][A-Za-z]+)'|_cloud_event\([^,]+,\s*'([A-Z][A-Za-z]+)'")


def emitted_types() -> set[str]:
    found = set()
    for path in FUNCTIONS.glob("*.sql"):
        for match in EMITTED.finditer(path.read_text()):
            found |= {g for g in match.groups() if g}
    return found


def test_every_emitted_type_has_a_schema_and_a_row_in_the_docs():
    catalogue = EventCatalogue()
    emitted = emitted_types()
    assert {"InvoicePaid", "InvoiceCreated", "SubscriptionUpdated", "WebhookEndpointDisabled"} <= emitted
    assert emitted - catalogue.types == set(), "event types written without a schema in docs/events"
    documented = set(re.findall(r"^\| `([A-Z][A-Za-z]+)` \|", (REPO_ROOT / "docs" / "events.md").read_text(), re.M))
    assert documented == catalogue.types, "docs/events.md's table and docs/events/*.json disagree"
    envelope = json.loads((REPO_ROOT / "docs" / "events" / "envelope.v1.json").read_text())
    assert set(envelope["properties"]["type"]["enum"]) == catalogue.types


def test_the_validator_rejects_what_the_schemas_forbid():
    catalogue = EventCatalogue()
    good = {"specversion": "1.0", "id": "5f0c6a1e-8d5b-4c1a-9f7e-0a1b2c3d4e5f", "source": "billing",
            "type": "SubscriptionPastDue", "subject": "subscription/7", "time": "2026-09-01T03:00:00.000000Z",
            "datacontenttype": "application/json", "dataschema": "urn:billing:events:SubscriptionPastDue:v1",
            "data": {"subscriptionId": 7, "customerId": 3, "planCode": "PRO", "status": "PAST_DUE",
                     "currentPeriodStart": "2026-09-01T03:00:00.000000Z", "currentPeriodEnd": "2026-10-01T03:00:00.000000Z",
                     "canceledAt": None, "reason": None, "cancelAtPeriodEnd": False, "version": 4,
                     "quantity": 1, "trialEnd": None, "pausedAt": None, "resumeAt": None, "scheduledPlanCode": None,
                     "couponCode": None}}
    assert catalogue.errors(good) == []
    assert catalogue.errors({**good, "data": {**good["data"], "status": "ACTIVE"}})  # a PastDue must say PAST_DUE
    assert catalogue.errors({**good, "data": {**good["data"], "surprise": 1}})  # undocumented field
    assert catalogue.errors({**good, "dataschema": "urn:billing:events:InvoicePaid:v1"})  # another type's schema
    assert catalogue.errors({**good, "dataschema": "urn:billing:events:SubscriptionPastDue:v9"})  # no such version
    assert catalogue.errors({**good, "time": "2026-09-01 03:00"})


def test_the_packaged_schemas_are_the_published_ones():
    """billing/events/catalogue/ (read by the installed package) and docs/events/ (published) hold
    the same files, byte for byte: docs/events/generate.py writes both."""
    from billing.events.schemas import packaged_schemas

    packaged = {p.name: p.read_bytes() for p in packaged_schemas().iterdir() if p.name.endswith(".json")}
    published = {p.name: p.read_bytes() for p in (REPO_ROOT / "docs" / "events").glob("*.json")}
    assert sorted(packaged) == sorted(published), "run python docs/events/generate.py (it writes both folders)"
    differ = [name for name in published if packaged[name] != published[name]]
    assert differ == [], f"{differ}: run python docs/events/generate.py (it writes both folders)"
    assert "envelope.v1.json" in packaged and len(packaged) > 20
