"""API keys through the SQL API (billing.create_api_key, list_api_keys, revoke_api_key): what
`billing api-key` runs, and what the demo, the chaos run and the tests use to make their own keys.
The secret is made here (billing.api.security.new_api_key) and only its SHA-256 is sent."""

from __future__ import annotations

import psycopg
from psycopg.rows import dict_row

from billing import db
from billing.api.security import NewKey, new_api_key


def create_key(database_url: str, name: str, scopes: list[str], *, actor: str = "cli") -> NewKey:
    key = new_api_key()
    with psycopg.connect(database_url, row_factory=dict_row) as conn:
        with conn.transaction():
            conn.execute(db.SET_ACTOR, {"actor": actor})
            conn.execute(db.CREATE_API_KEY, {"id": key.key_id, "name": name, "hash": key.key_hash, "scopes": scopes})
    return key


def list_keys(database_url: str) -> list[dict]:
    with psycopg.connect(database_url, autocommit=True, row_factory=dict_row) as conn:
        return conn.execute(db.LIST_API_KEYS).fetchall()


def revoke_key(database_url: str, key_id: str, *, actor: str = "cli"):
    with psycopg.connect(database_url, row_factory=dict_row) as conn:
        with conn.transaction():
            conn.execute(db.SET_ACTOR, {"actor": actor})
            return conn.execute(db.REVOKE_API_KEY, {"id": key_id}).fetchone()["revoked_at"]
