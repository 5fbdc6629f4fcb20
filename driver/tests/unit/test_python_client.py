"""clients/python is generated from the committed OpenAPI document (make client): it fails here when
the document changed since (the SHA-256 the generation recorded), or when the helpers' copy
differs from clients/helpers.py."""

from __future__ import annotations

import hashlib

from billing.config import REPO_ROOT

CLIENT = REPO_ROOT / "clients" / "python"


def test_the_client_was_generated_from_the_committed_document():
    recorded = (CLIENT / "OPENAPI.sha256").read_text().strip()
    current = hashlib.sha256((REPO_ROOT / "docs" / "openapi.json").read_bytes()).hexdigest()
    assert recorded == current, "clients/python is stale: run make client"


def test_the_helpers_are_the_maintained_ones():
    assert (CLIENT / "billing_client" / "helpers.py").read_text() == (REPO_ROOT / "clients" / "helpers.py").read_text(), \
        "clients/python/billing_client/helpers.py is a copy of clients/helpers.py: run make client"


def test_the_client_speaks_v1_only():
    api = CLIENT / "billing_client" / "api" / "default"
    names = {p.stem for p in api.glob("*.py")}
    assert {"list_subscriptions", "create_subscription", "list_invoices", "get_customer", "report_mrr"} <= names
    assert not any(n.endswith("_unversioned") for n in names), "the deprecated paths are left out"
