"""The console's actions: each is a function of the SQL API, offered only when it exists.

`ACTIONS` names, for each action, the SQL function(s) that perform it. At every page the console
asks the catalog (billing.console_functions) which of them exist and which the serving login may
execute, with their argument names; an action whose function has not landed yet (or is not granted)
is not shown, and appears the day it lands. The call is built from the catalog by argument name
(PostgreSQL's named notation), so the console needs no change when a function's optional arguments
change: the target's id, p_now, the subscription's expected version, an idempotency key made from
the form's nonce and the action's fixed values are filled in; any other argument becomes a field of
the form (required when it has no default).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from psycopg import sql

TARGET_IDS = {
    "subscription": ("p_subscription_id", "p_id"),
    "invoice": ("p_invoice_id", "p_id"),
    "event": ("p_outbox_id", "p_id"),
}


@dataclass(frozen=True)
class Action:
    name: str  # the URL segment: POST /console/actions/<name>
    label: str
    target: str  # subscription | invoice | event
    functions: tuple[str, ...]  # candidate SQL functions, the first that exists is used
    fixed: dict[str, Any] = field(default_factory=dict)
    states: tuple[str, ...] = ()  # statuses of the target it applies to (empty: any)
    danger: bool = False
    confirm: str = ""  # asked in the form before it is sent


LIVE = ("TRIALING", "ACTIVE", "PAST_DUE", "PAUSED")  # every subscription status but CANCELED

ACTIONS: tuple[Action, ...] = (
    Action("cancel-now", "Cancel now", "subscription", ("cancel_subscription",), {"p_at_period_end": False},
           LIVE, danger=True, confirm="Cancel this subscription now? Open invoices never declined are voided."),
    Action("cancel-at-period-end", "Cancel at period end", "subscription", ("cancel_subscription",),
           {"p_at_period_end": True}, ("TRIALING", "ACTIVE", "PAST_DUE")),
    Action("uncancel", "Undo the cancellation", "subscription", ("uncancel_subscription",), {},
           ("TRIALING", "ACTIVE", "PAST_DUE")),
    Action("pause", "Pause", "subscription", ("pause_subscription",), {}, ("ACTIVE",)),
    Action("change-resume-date", "Change the resume date", "subscription", ("pause_subscription",), {}, ("PAUSED",)),
    Action("resume", "Resume now", "subscription", ("resume_subscription",), {}, ("PAUSED",)),
    Action("change-plan", "Change plan", "subscription", ("change_plan",), {}, LIVE),
    Action("set-quantity", "Change seats", "subscription", ("set_quantity",), {}, LIVE),
    Action("apply-coupon", "Apply a coupon", "subscription", ("apply_coupon",), {}, LIVE),
    Action("reactivate", "Reactivate", "subscription", ("reactivate_subscription",), {}, ("CANCELED",)),
    Action("retry-now", "Retry now", "invoice", ("retry_invoice",), {}, ("OPEN",)),
    Action("void", "Void", "invoice", ("void_invoice",), {}, ("OPEN",), danger=True,
           confirm="Void this invoice? The customer will not be charged for it."),
    Action("refund", "Refund", "invoice", ("refund_invoice",), {}, ("PAID",), danger=True,
           confirm="Refund this invoice?"),
    Action("replay", "Replay", "event", ("replay_outbox_event",), {}, ("PUBLISHED", "DEAD")),
)
BY_NAME = {a.name: a for a in ACTIONS}
CANDIDATE_FUNCTIONS = sorted({f for a in ACTIONS for f in a.functions})

# How some arguments are asked for: a choice of values (the first is the default shown), a label.
BOOLEAN = (("true", "yes"), ("false", "no"))
CHOICES = {"p_when": (("now", "now"), ("period_end", "at the period end"))}
LABELS = {"p_when": "when", "p_prorate": "prorate", "p_resume_at": "resume on (UTC)", "p_code": "coupon code",
          "p_quantity": "seats", "p_reason": "reason", "p_amount": "amount (minor units)"}
_LOCAL_INSTANT = re.compile(r"^\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,6})?)?)?$")

# Arguments the console fills itself; never a form field.
_SUPPLIED = {"p_now", "p_expected_version", "p_idempotency_key"}


@dataclass(frozen=True)
class Signature:
    name: str
    arg_names: tuple[str, ...]
    arg_types: tuple[str, ...]
    required: int

    def fields(self, action: Action) -> list[dict]:
        """The arguments the operator gives: name, SQL type, whether required."""
        out = []
        for i, (name, typ) in enumerate(zip(self.arg_names, self.arg_types)):
            if name in _SUPPLIED or name in action.fixed or name in TARGET_IDS[action.target]:
                continue
            out.append({"name": name, "type": typ, "required": i < self.required,
                        "label": LABELS.get(name, name.removeprefix("p_").replace("_", " ")),
                        "choices": CHOICES.get(name) or (BOOLEAN if typ == "boolean" else None),
                        "input": "datetime-local" if typ == "timestamp with time zone" else "text"})
        return out

    def target_arg(self, action: Action) -> str | None:
        for candidate in TARGET_IDS[action.target]:
            if candidate in self.arg_names:
                return candidate
        return None


def available(rows: list[dict]) -> dict[str, Signature]:
    """Function name -> its longest overload, from billing.console_functions rows."""
    out: dict[str, Signature] = {}
    for r in rows:
        if r["name"] not in out:  # rows come longest first
            out[r["name"]] = Signature(r["name"], tuple(r["arg_names"] or ()), tuple(r["arg_types"]), r["required"])
    return out


def offered(signatures: dict[str, Signature], target: str, status: str | None) -> list[tuple[Action, Signature]]:
    """The actions on this kind of target whose function exists, for a target in `status`."""
    out = []
    for action in ACTIONS:
        if action.target != target or (action.states and status not in action.states):
            continue
        sig = next((signatures[f] for f in action.functions if f in signatures), None)
        if sig is not None and sig.target_arg(action) is not None:
            out.append((action, sig))
    return out


class ActionInputError(ValueError):
    """The form lacks what the function needs."""


def build_call(action: Action, sig: Signature, target_id: int, form: dict[str, str], now, key_id: str
               ) -> tuple[sql.Composed, dict]:
    """SELECT * FROM billing.<function>(<arg> => %(arg)s::<type>, ...) and its parameters."""
    params: dict[str, Any] = {}
    parts = []
    for i, (name, typ) in enumerate(zip(sig.arg_names, sig.arg_types)):
        value: Any
        if name == sig.target_arg(action):
            value = target_id
        elif name in action.fixed:
            value = action.fixed[name]
        elif name == "p_now":
            value = now
        elif name == "p_expected_version":
            raw = form.get("version", "").strip()
            if not raw:
                continue
            if not raw.isdigit():
                raise ActionInputError("the version must be a number")
            value = int(raw)
        elif name == "p_idempotency_key":
            nonce = form.get("nonce", "").strip()
            if not nonce or len(nonce) > 64:
                raise ActionInputError("the form has no nonce: reload the page")
            value = f"console/{key_id}/{nonce}"
        else:
            raw = form.get(name, "").strip()
            if raw == "":
                if i < sig.required:
                    raise ActionInputError(f"{name.removeprefix('p_').replace('_', ' ')} is required")
                continue
            value = raw
            if typ == "timestamp with time zone" and _LOCAL_INSTANT.match(raw):
                value = raw + ("" if "T" in raw or " " in raw else "T00:00") + "+00:00"  # the form's times are UTC
        params[name] = value
        parts.append(sql.SQL("{} => {}::{}").format(sql.Identifier(name), sql.Placeholder(name), sql.SQL(typ)))
    query = sql.SQL("SELECT * FROM billing.{}({})").format(sql.Identifier(sig.name), sql.SQL(", ").join(parts))
    return query, params
