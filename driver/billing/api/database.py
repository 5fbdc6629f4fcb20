"""The HTTP API's connection pools (`Database`): one SQL call per request, a mutation in a
transaction that first names its actor for the audit log, with the proof of who it is: the hash of
the credential the request carried (billing.actor_proof; docs/security.md).

Two pools (issue 27, finding 2): the API's own, and a small one for the expensive reads (the
console's pages, the reports: `heavy=True`), whose connections have a statement timeout of their
own, so that a read-only key or an operator's page can never take the connections the API's calls
need (`BILLING_API_HEAVY_POOL_SIZE`, `BILLING_API_HEAVY_STATEMENT_TIMEOUT_MS`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from billing import db
from billing.api.security import Principal, Unavailable
from billing.api_keys import Guardrails

log = logging.getLogger("billing.api")


class Database:
    """The connection pools, opened on first use (so an app built for a test works without lifespan)."""

    def __init__(self, url: str, timeout: float = 5.0, *, heavy_size: int = 3,
                 heavy_statement_timeout_ms: int = 5000) -> None:
        self.url = url
        self.timeout = timeout
        self.heavy_size = heavy_size
        self.heavy_statement_timeout_ms = heavy_statement_timeout_ms
        self._pool: AsyncConnectionPool | None = None
        self._heavy: AsyncConnectionPool | None = None
        self._lock = asyncio.Lock()

    async def pool(self, heavy: bool = False) -> AsyncConnectionPool:
        if heavy:
            if self._heavy is None:
                async with self._lock:
                    if self._heavy is None:
                        pool = AsyncConnectionPool(
                            self.url, min_size=0, max_size=max(1, self.heavy_size), name="billing-heavy", open=False,
                            timeout=self.timeout,
                            kwargs={"autocommit": True, "row_factory": dict_row,
                                    "options": f"-c statement_timeout={int(self.heavy_statement_timeout_ms)}"},
                        )
                        await pool.open(wait=False)
                        self._heavy = pool
            return self._heavy
        if self._pool is None:
            async with self._lock:
                if self._pool is None:
                    pool = AsyncConnectionPool(
                        self.url, min_size=1, max_size=10, name="billing-api", open=False, timeout=self.timeout,
                        kwargs={"autocommit": True, "row_factory": dict_row},
                    )
                    await pool.open(wait=False)
                    self._pool = pool
        return self._pool

    async def one(self, query: str, params: dict | None = None, *, heavy: bool = False) -> dict | None:
        pool = await self.pool(heavy)
        async with pool.connection() as conn:
            cur = await conn.execute(query, params)
            return await cur.fetchone()

    async def all(self, query: str, params: dict | None = None, *, heavy: bool = False) -> list[dict]:
        pool = await self.pool(heavy)
        async with pool.connection() as conn:
            cur = await conn.execute(query, params)
            return await cur.fetchall()

    async def mutate(self, actor: str, query: str, params: dict | None = None, *,
                     check: tuple[str, dict, Callable[[dict | None], None]] | None = None) -> dict | None:
        """One mutation in a transaction whose audit actor is `actor` (docs/security.md); an actor
        made by billing.api.context.actor carries the proof of its credential, which the database
        checks (billing._actor) before it names a key. `check` (query, params, test): a read run
        first in the same transaction, its row given to `test`, which raises to write nothing (a
        customer session's signup locks the plans it names: billing.lock_self_serve_plans)."""
        pool = await self.pool()
        async with pool.connection() as conn:
            async with conn.transaction():
                await conn.execute(db.SET_ACTOR, {"actor": actor})
                await conn.execute(db.SET_ACTOR_PROOF, {"proof": getattr(actor, "proof", "")})
                if check is not None:
                    check_query, check_params, test = check
                    test(await (await conn.execute(check_query, check_params)).fetchone())
                cur = await conn.execute(query, params)
                return await cur.fetchone()

    async def authenticate(self, key_hash: bytes) -> Principal | None:
        try:
            row = await self.one(db.AUTHENTICATE_API_KEY, {"hash": key_hash})
        except (psycopg.OperationalError, PoolTimeout) as exc:
            log.warning("API key check: database unavailable", extra={"error": str(exc).strip()})
            raise Unavailable() from exc
        if not row:
            return None
        return Principal(row["key_id"], tuple(row["scopes"]), Guardrails.of(row), None, "key:" + key_hash.hex())

    async def customer_session(self, customer_id: int, token_hash: bytes, now=None) -> Principal | None:
        """The check of a customer token (billing.customer_session) at `now` (the app's clock)."""
        from datetime import datetime, timezone

        try:
            row = await self.one(db.CUSTOMER_SESSION, {"customer_id": customer_id, "hash": token_hash,
                                                      "now": now or datetime.now(timezone.utc)})
        except (psycopg.OperationalError, PoolTimeout) as exc:
            log.warning("customer session check: database unavailable", extra={"error": str(exc).strip()})
            raise Unavailable() from exc
        except psycopg.Error:
            return None  # e.g. an id past bigint: no such session
        if not row:
            return None
        return Principal(row["key_id"], tuple(row["scopes"]), Guardrails.of(row), row["customer_id"],
                         f"customer:{row['customer_id']}:{token_hash.hex()}")

    async def record_failure(self, key_id: str, address: str, route: str, now=None) -> None:
        """Audits a wrong secret for a known key id (billing.record_auth_failure)."""
        from datetime import datetime, timezone

        await self.one(db.RECORD_AUTH_FAILURE, {"key_id": key_id, "address": address, "route": route,
                                               "now": now or datetime.now(timezone.utc)})

    async def close(self) -> None:
        for pool in (self._pool, self._heavy):
            if pool is not None:
                await pool.close()
        self._pool = self._heavy = None
