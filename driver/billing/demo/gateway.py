"""The demo's gateway: the simulator (`billing.gateway.simulator`) with customers' cards as its
decision model and paced webhooks, in a process of its own.

Everything else (the limit and its 429s, faults, latency, duplicate and late webhooks,
signatures, the ledger) is the simulator's own behaviour.
"""

from __future__ import annotations

import asyncio
import multiprocessing

import aiohttp

from billing.gateway.decisions import DecisionModel
from billing.gateway.simulator import GatewaySimulator

# Webhooks are delivered at most this many at a time, as a real gateway paces its calls to one
# endpoint, rather than all at once: the HTTP API answers 503 when its connection pool is
# exhausted, and the retries would pile up.
WEBHOOK_SLOTS = 16


class CardDecisions(DecisionModel):
    """Cards behave like customers' cards: most are fine, a few are dead (every charge declined:
    dunning ends in cancellation), some are flaky (about half declined: dunning usually recovers).
    `decline_rate` is the target share of first attempts declined: a third from dead cards, a
    third from flaky cards, a third at random. Timeouts and 5xx are the simulator's default."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.dead_share = self.decline_rate / 3
        self.flaky_share = 2 * self.decline_rate / 3  # declined half the time
        self.random_decline = self.decline_rate / 3

    def decline_code(self, key: str, customer_id: int, amount: int, currency: str) -> str | None:
        card = self.chance(customer_id, "card")
        if card < self.dead_share:
            # A soft code: the demo's dead cards walk the dunning schedule to its end. (A hard one,
            # expired_card, would stop the schedule and wait for a new card: docs/providers.md.)
            return "do_not_honor"
        if card < self.dead_share + self.flaky_share:
            return "insufficient_funds" if self.chance(key, "decline") < 0.5 else None
        if self.chance(key, "decline") < self.random_decline:
            return self.random_code(key)
        return None


def demo_gateway(*, seed: int, decline_rate: float, timeout_rate: float, error_rate: float,
                 webhook_slots: int = WEBHOOK_SLOTS, **options) -> GatewaySimulator:
    """The simulator as the demo runs it (call inside the event loop that will serve it)."""
    decisions = CardDecisions(seed=seed, decline_rate=decline_rate, timeout_rate=timeout_rate,
                              error_rate=error_rate)
    return GatewaySimulator(seed=seed, decisions=decisions, webhook_gate=asyncio.Semaphore(webhook_slots),
                            **options)


class GatewayProcess:
    """The demo's gateway in a process of its own, so that its HTTP work (answering the charges,
    sending the webhooks) runs on another core than the worker's. Read over HTTP like any gateway:
    `GET /v1/ledger`, `GET /v1/stats` (with the webhooks not yet delivered) and `GET /v1/accepted`
    (the wall-clock instants of accepted calls)."""

    def __init__(self, **options) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=serve_in_process, args=(options, child), daemon=True, name="demo-gateway")
        self.url: str | None = None

    async def start(self) -> str:
        self._proc.start()
        answer = await asyncio.to_thread(self._conn.recv)
        if isinstance(answer, BaseException):
            raise answer
        self.url = answer
        return answer

    async def _get(self, path: str) -> dict:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
            async with session.get(f"{self.url}{path}") as resp:
                resp.raise_for_status()
                return await resp.json()

    async def pending_webhooks(self) -> int:
        return (await self._get("/v1/stats"))["webhooksPending"]

    async def ledger(self) -> dict:
        return await self._get("/v1/ledger")

    async def stats(self) -> dict:
        return await self._get("/v1/stats")

    async def accepted_times(self) -> list[float]:
        return (await self._get("/v1/accepted"))["accepted"]

    async def close(self) -> None:
        try:
            self._conn.send("stop")
        except (OSError, EOFError):
            pass
        await asyncio.to_thread(self._proc.join, 15)
        if self._proc.is_alive():
            self._proc.terminate()
            await asyncio.to_thread(self._proc.join, 5)


def serve_in_process(options: dict, conn) -> None:
    """The child process: serve the demo's gateway until the parent says stop (or is gone)."""
    asyncio.run(_serve(options, conn))


async def _serve(options: dict, conn) -> None:
    gateway = demo_gateway(**options)
    try:
        url = await gateway.start()
    except Exception as exc:  # noqa: BLE001 - handed to the parent, which raises it
        conn.send(exc)
        return
    conn.send(url)
    try:
        await asyncio.to_thread(conn.recv)  # "stop", or EOFError when the parent is gone
    except (EOFError, OSError):
        pass
    finally:
        await gateway.close()
