"""The plan changes customers may make themselves on the portal (`billing plan-options`;
billing.set_plan_change_options, docs/customers.md "The portal")."""

from __future__ import annotations

import json

import psycopg

from billing import db


def parse_option(text: str) -> dict[str, str]:
    """`PRO` (now) or `PRO:period_end` -> {"plan": "PRO", "when": ...}."""
    plan, _, when = text.partition(":")
    if not plan or when not in ("", "now", "period_end"):
        raise ValueError(f"{text!r}: use PLAN, PLAN:now or PLAN:period_end")
    return {"plan": plan, "when": when or "now"}


def set_options(database_url: str, plan: str, options: list[dict[str, str]], *, actor: str) -> int:
    """Replaces what `plan` offers (an empty list offers nothing); returns how many options it has."""
    with psycopg.connect(database_url) as conn:
        with conn.transaction():
            conn.execute(db.SET_ACTOR, {"actor": actor})
            return conn.execute(db.SET_PLAN_CHANGE_OPTIONS, {"plan": plan, "options": json.dumps(options)}).fetchone()[0]
