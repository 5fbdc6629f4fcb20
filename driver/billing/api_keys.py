"""API keys: their form (`bk_<id>_<secret>`; the id, `bk_` + 10 lower-case letters or digits, is
public and readable, the secret 32 random bytes, URL-safe base64), and their management through the
SQL API (billing.create_api_key, list_api_keys, revoke_api_key): what `billing api-key` runs, and
what the demo, the chaos run and the tests use to make their own keys. The secret is made here
(`new_api_key`) and only its SHA-256 is sent. The HTTP API (billing.api.security) and the console
(billing.console) check keys with `looks_like_key` and `hash_key`."""

from __future__ import annotations

import base64
import re
import secrets
from dataclasses import dataclass

import psycopg
from psycopg.rows import dict_row

from billing import db, signing

SCOPES = ("subscriptions:read", "subscriptions:write", "refunds:write", "customer-sessions:write", "usage:write",
          "customers:read", "customers:write", "catalog:write", "reports:read", "admin")
KEY_PREFIX = "bk_"
_ID_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"
_KEY_FORM = re.compile(r"^bk_[a-z0-9]{8,32}_[A-Za-z0-9_-]{43,}$")


@dataclass(frozen=True)
class NewKey:
    key_id: str
    key: str  # shown once, never stored

    @property
    def key_hash(self) -> bytes:
        return hash_key(self.key)


def new_api_key() -> NewKey:
    """A fresh key: a readable id and 32 random bytes."""
    key_id = KEY_PREFIX + "".join(secrets.choice(_ID_ALPHABET) for _ in range(10))
    secret = base64.urlsafe_b64encode(secrets.token_bytes(32)).decode().rstrip("=")
    return NewKey(key_id, f"{key_id}_{secret}")


def hash_key(key: str) -> bytes:
    return signing.token_hash(key)


def looks_like_key(token: str) -> bool:
    return bool(_KEY_FORM.match(token))


def key_id_of(key: str) -> str:
    return "_".join(key.split("_", 2)[:2]) if looks_like_key(key) else ""  # the secret may hold "_"


@dataclass(frozen=True)
class Guardrails:
    """A key's own limits (docs/security.md, "Key guardrails"); None: no limit of its own."""

    max_quantity: int | None = None
    max_trial_days: int | None = None
    max_refund: int | None = None
    allow_no_proration: bool = False

    @classmethod
    def of(cls, row: dict | None) -> "Guardrails":
        if not row:
            return cls()
        return cls(row.get("max_quantity"), row.get("max_trial_days"), row.get("max_refund"),
                   bool(row.get("allow_no_proration")))

    def describe(self) -> str:
        parts = [f"{label} {value}" for label, value in (("max quantity", self.max_quantity),
                                                         ("max trial days", self.max_trial_days),
                                                         ("max refund", self.max_refund)) if value is not None]
        if self.allow_no_proration:
            parts.append("may skip proration")
        return ", ".join(parts)


def create_key(database_url: str, name: str, scopes: list[str], *, actor: str = "cli",
               guardrails: Guardrails | None = None) -> NewKey:
    key = new_api_key()
    g = guardrails or Guardrails()
    with psycopg.connect(database_url, row_factory=dict_row) as conn:
        with conn.transaction():
            conn.execute(db.SET_ACTOR, {"actor": actor})
            conn.execute(db.CREATE_API_KEY, {"id": key.key_id, "name": name, "hash": key.key_hash, "scopes": scopes,
                                             "max_quantity": g.max_quantity, "max_trial_days": g.max_trial_days,
                                             "max_refund": g.max_refund, "allow_no_proration": g.allow_no_proration})
    return key


def list_keys(database_url: str) -> list[dict]:
    with psycopg.connect(database_url, autocommit=True, row_factory=dict_row) as conn:
        return conn.execute(db.LIST_API_KEYS).fetchall()


def revoke_key(database_url: str, key_id: str, *, actor: str = "cli"):
    with psycopg.connect(database_url, row_factory=dict_row) as conn:
        with conn.transaction():
            conn.execute(db.SET_ACTOR, {"actor": actor})
            return conn.execute(db.REVOKE_API_KEY, {"id": key_id}).fetchone()["revoked_at"]
