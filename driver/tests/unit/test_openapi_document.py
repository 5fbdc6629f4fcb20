"""The OpenAPI document is the HTTP API's contract (docs/http-api.md, "/v1"): committed as
docs/openapi.json and as the route table of docs/http-api.md, both current; every operation's
scope is the one the guard enforces (a table-driven check of every route, from the document);
every error is the contract's Error body."""

from __future__ import annotations

import json
import re

from billing.api.openapi import DOCUMENT, OPENAPI, render, with_routes_table
from billing.api.security import ANY_KEY, PUBLIC, required_scope
from billing.config import REPO_ROOT


def test_the_committed_document_is_current():
    assert (REPO_ROOT / DOCUMENT).read_text() == render(), "docs/openapi.json is stale: run make openapi"
    json.loads(render())


def test_the_route_table_of_http_api_md_is_current():
    doc = (REPO_ROOT / "docs" / "http-api.md").read_text()
    assert with_routes_table(doc) == doc, "docs/http-api.md's route table is stale: run make openapi"


def _concrete(path: str) -> str:
    return re.sub(r"\{(id|code)\}", lambda m: "1" if m.group(1) == "id" else "PRO", path)


def test_every_operation_needs_the_scope_it_documents():
    checked = 0
    for path, item in OPENAPI["paths"].items():
        for method, op in item.items():
            documented = op.get("x-scope") if op.get("security") else PUBLIC
            assert documented, (method, path, "an operation with security names its x-scope")
            got = required_scope(method.upper(), _concrete(path))
            assert got == documented, f"{method.upper()} {path}: the guard wants {got}, the document says {documented}"
            assert got != ANY_KEY
            checked += 1
    assert checked >= 60


def test_v1_and_the_deprecated_aliases_go_together():
    paths = OPENAPI["paths"]
    deprecated = {p for p, item in paths.items() if all(op.get("deprecated") for op in item.values())}
    assert deprecated, "the unprefixed routes are marked deprecated"
    for path in deprecated:
        assert set(paths["/v1" + path]) >= set(paths[path]), path
        for method, op in paths[path].items():
            assert paths["/v1" + path][method].get("x-scope") == op.get("x-scope"), (method, path)
    unprefixed = {p for p in paths if not p.startswith("/v1/")}
    assert unprefixed - deprecated == {"/healthz", "/metrics", "/openapi.json", "/webhooks/payments", "/webhooks/stripe"}
    ids = [op["operationId"] for item in paths.values() for op in item.values()]
    assert len(ids) == len(set(ids)), "operationIds are unique"


def test_every_error_answer_is_the_error_body():
    for path, item in OPENAPI["paths"].items():
        for method, op in item.items():
            for status, answer in op["responses"].items():
                if status.startswith(("4", "5")) and "content" in answer:
                    schema = answer["content"]["application/json"]["schema"]
                    assert schema == {"$ref": "#/components/schemas/Error"}, (method, path, status)
            if op.get("security") and path != "/healthz":
                assert {"401", "403"} <= set(op["responses"]), (method, path)
