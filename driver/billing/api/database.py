"""The HTTP API's connection pool (`Database`): one SQL call per request, a mutation in a
transaction that first names its actor for the audit log (docs/security.md)."""

from __future__ import annotations

import asyncio
import logging

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from billing import db
from billing.api.security import Unavailable

log = logging.getLogger("billing.api")


class Database:
    """The connection pool, opened on first use (so an app built for a test works without lifespan)."""

    def __init__(self, url: str, timeout: float = 5.0) -> None:
        self.url = url
        self.timeout = timeout
        self._pool: AsyncConnectionPool | None = None
        self._lock = asyncio.Lock()

    async def pool(self) -> AsyncConnectionPool:
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

    async def one(self, query: str, params: dict | None = None) -> dict | None:
        pool = await self.pool()
        async with pool.connection() as conn:
            cur = await conn.execute(query, params)
            return await cur.fetchone()

    async def all(self, query: str, params: dict | None = None) -> list[dict]:
        pool = await self.pool()
        async with pool.connection() as conn:
            cur = await conn.execute(query, params)
            return await cur.fetchall()

    async def mutate(self, actor: str, query: str, params: dict | None = None) -> dict | None:
        """One mutation in a transaction whose audit actor is `actor` (docs/security.md)."""
        pool = await self.pool()
        async with pool.connection() as conn:
            async with conn.transaction():
                await conn.execute(db.SET_ACTOR, {"actor": actor})
                cur = await conn.execute(query, params)
                return await cur.fetchone()

    async def authenticate(self, key_hash: bytes) -> tuple[str, list[str]] | None:
        try:
            row = await self.one(db.AUTHENTICATE_API_KEY, {"hash": key_hash})
        except (psycopg.OperationalError, PoolTimeout) as exc:
            log.warning("API key check: database unavailable", extra={"error": str(exc).strip()})
            raise Unavailable() from exc
        return (row["key_id"], list(row["scopes"])) if row else None

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None
