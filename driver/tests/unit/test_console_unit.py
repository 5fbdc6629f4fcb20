"""The console's pure parts: vendored htmx, the action registry and its SQL, money, the guard's pass-through."""

from __future__ import annotations

import hashlib
import json
import re
from datetime import datetime, timezone

import pytest

from billing.api.security import CONSOLE, required_scope
from billing.config import REPO_ROOT
from billing.console import actions as A
from billing.console.web import csrf_for, safe_next as _safe_next
from billing.console.render import HTMX_FILE, money

STATIC = REPO_ROOT / "driver" / "billing" / "console" / "static"


def test_vendored_htmx_is_the_pinned_file_with_its_licence():
    readme = (STATIC / "README.md").read_text()
    digest = hashlib.sha256((STATIC / HTMX_FILE).read_bytes()).hexdigest()
    assert f"the file's sha256 `{digest}`" in readme
    assert 'version:"2.0.11"' in (STATIC / HTMX_FILE).read_text()
    assert "Zero-Clause BSD" in (STATIC / "htmx-LICENSE.txt").read_text()


def test_no_template_loads_anything_from_another_site():
    for path in (REPO_ROOT / "driver" / "billing" / "console" / "templates").glob("*.html"):
        assert not re.search(r'(src|href)="(https?:)?//', path.read_text()), path


def test_every_action_function_is_granted_to_the_console_role_ahead_of_its_landing():
    grants = (REPO_ROOT / "db" / "functions" / "90_grants.sql").read_text()
    block = re.search(r'"billing_console": \[(.*?)\]', grants, re.S).group(1)
    listed = set(json.loads("[" + block + "]"))
    assert set(A.CANDIDATE_FUNCTIONS) <= listed


def _sig(*args, required=1):
    return A.Signature("change_plan", tuple(n for n, _ in args), tuple(t for _, t in args), required)


def test_a_call_is_built_by_argument_name_from_the_catalog():
    sig = _sig(("p_subscription_id", "bigint"), ("p_plan_code", "text"), ("p_now", "timestamp with time zone"),
               ("p_expected_version", "bigint"), required=2)
    action = A.BY_NAME["change-plan"]
    assert [f["name"] for f in sig.fields(action)] == ["p_plan_code"]
    now = datetime(2026, 1, 1, tzinfo=timezone.utc)
    query, params = A.build_call(action, sig, 7, {"p_plan_code": "PRO", "version": "3"}, now, "bk_x")
    assert params == {"p_subscription_id": 7, "p_plan_code": "PRO", "p_now": now, "p_expected_version": 3}
    text = query.as_string(None)
    assert text.startswith('SELECT * FROM billing."change_plan"(') and '"p_plan_code" => %(p_plan_code)s::text' in text
    with pytest.raises(A.ActionInputError):
        A.build_call(action, sig, 7, {}, now, "bk_x")  # the plan is required
    _, params = A.build_call(action, sig, 7, {"p_plan_code": "PRO"}, now, "bk_x")
    assert "p_expected_version" not in params  # no version: the function's default


def test_fixed_values_idempotency_keys_and_optional_fields():
    sig = A.Signature("refund_invoice", ("p_invoice_id", "p_amount", "p_idempotency_key", "p_reason", "p_now"),
                      ("bigint", "bigint", "text", "text", "timestamp with time zone"), 3)
    action = A.BY_NAME["refund"]
    assert [(f["name"], f["required"]) for f in sig.fields(action)] == [("p_amount", True), ("p_reason", False)]
    _, params = A.build_call(action, sig, 9, {"p_amount": "100", "nonce": "abc"}, None, "bk_k")
    assert params["p_idempotency_key"] == "console/bk_k/abc" and "p_reason" not in params
    cancel = A.BY_NAME["cancel-now"]
    csig = A.Signature("cancel_subscription", ("p_subscription_id", "p_at_period_end", "p_now", "p_expected_version"),
                       ("bigint", "boolean", "timestamp with time zone", "bigint"), 2)
    assert csig.fields(cancel) == []
    assert A.build_call(cancel, csig, 1, {}, None, "k")[1]["p_at_period_end"] is False


def test_actions_are_offered_only_when_their_function_exists_and_fits_the_state():
    sigs = A.available([{"name": "cancel_subscription", "arg_names": ["p_subscription_id", "p_at_period_end"],
                         "arg_types": ["bigint", "boolean"], "required": 2}])
    names = [a.name for a, _ in A.offered(sigs, "subscription", "ACTIVE")]
    assert names == ["cancel-now", "cancel-at-period-end"]
    assert A.offered(sigs, "subscription", "CANCELED") == []
    assert A.offered(sigs, "invoice", "OPEN") == []


def test_money_is_exact_in_minor_units():
    assert money(123456, "USD") == "1,234.56 USD"
    assert money(-5, "EUR") == "-0.05 EUR"
    assert money(1200, "JPY") == "1,200 JPY"
    assert money(1234, "KWD") == "1.234 KWD"


def test_the_api_guard_leaves_the_console_to_itself():
    for path in ("/console", "/console/", "/console/actions/void", "/console/static/console.css"):
        assert required_scope("POST", path) == CONSOLE
    assert required_scope("GET", "/consoles") != CONSOLE


def test_redirects_stay_inside_the_console_and_csrf_tokens_differ_per_session():
    assert _safe_next("/console/customers/1") == "/console/customers/1"
    for bad in ("https://evil.example/", "//evil.example/console/", "/console/..//x", "/other", None, "/console\\x"):
        assert _safe_next(bad) == "/console/"
    assert csrf_for("a") != csrf_for("b") and len(csrf_for("a")) == 64


def test_instants_from_the_form_are_utc_and_choices_are_offered():
    pause = A.BY_NAME["pause"]
    sig = A.Signature("pause_subscription", ("p_subscription_id", "p_resume_at", "p_now"),
                      ("bigint", "timestamp with time zone", "timestamp with time zone"), 1)
    [field] = sig.fields(pause)
    assert (field["name"], field["input"], field["required"], field["label"]) == \
        ("p_resume_at", "datetime-local", False, "resume on (UTC)")
    # A browser's datetime-local value has no offset: it is read as UTC, never as the server's zone.
    for raw, sent in (("2026-09-20T09:30", "2026-09-20T09:30+00:00"), ("2026-09-20", "2026-09-20T00:00+00:00"),
                      ("2026-09-20T09:30+02:00", "2026-09-20T09:30+02:00")):
        assert A.build_call(pause, sig, 1, {"p_resume_at": raw}, None, "k")[1]["p_resume_at"] == sent
    assert "p_resume_at" not in A.build_call(pause, sig, 1, {"p_resume_at": ""}, None, "k")[1]  # no date: until resumed
    change = A.BY_NAME["change-plan"]
    csig = A.Signature("change_plan", ("p_subscription_id", "p_plan_code", "p_now", "p_expected_version", "p_when",
                                       "p_prorate"),
                       ("bigint", "text", "timestamp with time zone", "bigint", "text", "boolean"), 2)
    choices = {f["name"]: [v for v, _ in f["choices"] or ()] for f in csig.fields(change)}
    assert choices == {"p_plan_code": [], "p_when": ["now", "period_end"], "p_prorate": ["true", "false"]}


def test_each_lifecycle_action_is_offered_in_the_states_its_function_accepts():
    rows = [{"name": n, "arg_names": ["p_subscription_id", "p_now"], "arg_types": ["bigint", "timestamptz"],
             "required": 1}
            for n in ("pause_subscription", "resume_subscription", "uncancel_subscription", "reactivate_subscription",
                      "cancel_subscription", "change_plan", "set_quantity", "apply_coupon")]
    sigs = A.available(rows)

    def names(status):
        return {a.name for a, _ in A.offered(sigs, "subscription", status)}

    assert {"pause", "uncancel", "change-plan", "set-quantity", "apply-coupon", "cancel-now"} <= names("ACTIVE")
    assert not {"resume", "reactivate", "change-resume-date"} & names("ACTIVE")
    assert {"resume", "change-resume-date", "cancel-now"} <= names("PAUSED")
    assert not {"pause", "cancel-at-period-end", "uncancel"} & names("PAUSED")
    assert names("CANCELED") == {"reactivate"}
    assert "pause" not in names("PAST_DUE") and "pause" not in names("TRIALING")
    inv = A.available([{"name": n, "arg_names": ["p_invoice_id"], "arg_types": ["bigint"], "required": 1}
                       for n in ("retry_invoice", "void_invoice", "refund_invoice")])
    assert {a.name for a, _ in A.offered(inv, "invoice", "OPEN")} == {"retry-now", "void"}
    assert {a.name for a, _ in A.offered(inv, "invoice", "PAID")} == {"refund"}
    for status in ("VOID", "FAILED", "REVIEW"):
        assert A.offered(inv, "invoice", status) == []


def test_the_overview_says_when_its_mrr_panel_timed_out():
    """The overview's figures are shown without the MRR panel when console_mrr ran past the heavy
    pool's statement timeout (recomputed from every line on Citus or with many customers marked
    since the last MRR fold: bench/README.md), and the
    panel says why instead of "No subscriptions yet"."""
    from jinja2 import Environment, PackageLoader, select_autoescape

    from billing.console import render
    env = Environment(loader=PackageLoader("billing.console", "templates"), autoescape=select_autoescape(["html"]))
    env.filters.update(render.FILTERS)
    env.globals.update(refresh_seconds=5, htmx=HTMX_FILE)
    zero = {"active": 0, "past_due": 0, "canceled": 0, "canceling": 0}
    doc = {"now": "2026-03-01T00:00:00+00:00", "subscriptions": zero,
           "renewals": {"renewed_today": 0, "due_rest_of_today": 0, "overdue": 0},
           "charges": {"due_now": 0, "scheduled": 0, "open": 0},
           "gateway": {"claims_last_minute": 0, "claims_last_hour": 0, "results_last_hour": 0, "declined_last_hour": 0},
           "outbox": {"backlog": 0, "dead": 0, "oldest_age_seconds": 0},
           "dunning": {"since": "2026-01-31T00:00:00+00:00", "invoices": 0}}
    page = env.get_template("_overview_figures.html")
    common = {"o": doc, "mrr": [], "gateway_rate": 200, "funnel_svg": "", "base": "/console"}
    timed_out = page.render(**common, mrr_timed_out=True)
    assert "MRR took longer than the time limit" in timed_out and "No subscriptions yet" not in timed_out
    assert "2026-01-31" in timed_out  # the funnel says from which UTC day it counts
    assert "No subscriptions yet" in page.render(**common, mrr_timed_out=False)
