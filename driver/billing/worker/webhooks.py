"""Outbound webhooks: the outbox's second sink. Every enabled endpoint has its own queue
(`billing.webhook_delivery`, filled in the event's own transaction) and its own loop here, so a
slow or dead endpoint holds back neither Kafka nor the other endpoints.

Each loop claims a batch of its endpoint's due deliveries (`claim_webhook_deliveries`: outbox id
order, never an event while an earlier one of its aggregate is pending elsewhere), delivers each
aggregate's events one after the other (the aggregates side by side, up to `concurrency` at a
time), stops an aggregate at its first failure (the rest is RELEASED, not attempted), and records
the batch with one `record_webhook_attempts`, which backs failures off (5 s doubling, capped at an
hour) and disables the endpoint, with a `WebhookEndpointDisabled` event, once a delivery has been
failing for a day.

A delivery is a POST of the CloudEvents envelope (structured mode), signed like the gateway's
webhooks to us: `Billing-Signature: t=<unix time>,v1=<hex HMAC-SHA256 of "<t>.<body>">` with the
endpoint's secret. Only a 2xx counts; a redirect is a failure (never followed); the request has a
timeout; and the address must be public unless `BILLING_WEBHOOK_ALLOW_PRIVATE` is set:
`billing.netguard.pin` reads every numeric form of the host, resolves a name once, refuses
loopback, private, link-local, multicast, reserved, NAT64, 6to4 and Teredo addresses (any of them
among a name's answers), and the request is sent to the address it checked (the Host header and
the TLS server name keep the endpoint's name), so neither a DNS answer nor the HTTP library's own
parsing of the host can send it elsewhere.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from datetime import timedelta

import aiohttp

from billing import signing
from billing import db
from billing.clock import Clock, SystemClock, sleep_or_stop
from billing.netguard import BlockedAddress, Pinned, Resolve, pin, system_resolve

log = logging.getLogger("billing.webhooks")

USER_AGENT = "billing-webhooks/1"


@dataclass
class WebhookOptions:
    batch_size: int = 100
    lease: timedelta = timedelta(minutes=2)
    concurrency: int = 8  # aggregates delivered side by side, per endpoint
    timeout_seconds: float = 10.0
    allow_private: bool = False
    poll_interval: float = 1.0  # fallback poll of an idle endpoint (NOTIFY wakes it sooner)
    refresh_interval: float = 2.0  # how often the list of enabled endpoints is read
    backoff: timedelta = timedelta(seconds=5)
    backoff_cap: timedelta = timedelta(hours=1)
    give_up_after: timedelta = timedelta(days=1)
    resolve: Resolve = system_resolve  # the name resolver of netguard.pin (tests give their own)
    pin_ttl: float = 60.0  # seconds a name's checked address is reused

    @classmethod
    def from_settings(cls, settings) -> "WebhookOptions":
        return cls(timeout_seconds=settings.webhook_timeout_seconds, allow_private=settings.webhook_allow_private,
                   backoff=timedelta(seconds=settings.webhook_backoff_seconds),
                   backoff_cap=timedelta(seconds=settings.webhook_backoff_cap_seconds),
                   give_up_after=timedelta(seconds=settings.webhook_give_up_seconds))


@dataclass
class Result:
    outbox_id: int
    outcome: str  # DELIVERED, FAILED, RELEASED
    status: int | None = None
    error: str | None = None
    duration_ms: int = 0


class WebhookDeliverer:
    """One loop per enabled endpoint, started and stopped as endpoints come and go."""

    def __init__(self, pool, stop: asyncio.Event, *, clock: Clock | None = None,
                 options: WebhookOptions | None = None) -> None:
        self.pool, self.stop = pool, stop
        self.clock = clock or SystemClock()
        self.opt = options or WebhookOptions()
        self.delivered = 0
        self._loops: dict[int, asyncio.Task] = {}
        self._wake: dict[int, asyncio.Event] = {}
        self._session: aiohttp.ClientSession | None = None
        self._pins: dict[str, tuple[float, Pinned]] = {}

    async def run(self) -> None:
        # Every request goes to an address netguard.pin checked (the URL rewritten to it): the
        # connector never resolves a name of an endpoint's.
        connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=60)
        self._session = aiohttp.ClientSession(
            connector=connector, timeout=aiohttp.ClientTimeout(total=self.opt.timeout_seconds),
            headers={"User-Agent": USER_AGENT}, auto_decompress=False)
        listener = asyncio.ensure_future(self._listen())
        try:
            while not self.stop.is_set():
                try:
                    await self._refresh()
                except Exception as exc:  # noqa: BLE001 - the database may be away; try again
                    log.warning("webhooks: cannot read the endpoints", extra={"error": str(exc).strip()})
                await sleep_or_stop(self.stop, self.opt.refresh_interval)
        finally:
            listener.cancel()
            loops = list(self._loops.values())
            await asyncio.gather(*loops, return_exceptions=True)
            await asyncio.gather(listener, return_exceptions=True)
            await self._session.close()

    async def _refresh(self) -> None:
        async with self.pool.connection() as conn:
            rows = await (await conn.execute(db.ENABLED_WEBHOOK_ENDPOINTS)).fetchall()
        wanted = {r["id"]: r for r in rows}
        for endpoint_id, task in list(self._loops.items()):
            if task.done():
                del self._loops[endpoint_id]
                if not task.cancelled() and task.exception() is not None:
                    log.error("webhooks: endpoint loop crashed; restarting", exc_info=task.exception(),
                              extra={"endpoint_id": endpoint_id})
        for endpoint_id, row in wanted.items():
            if endpoint_id not in self._loops:
                self._wake[endpoint_id] = asyncio.Event()
                self._loops[endpoint_id] = asyncio.create_task(self._endpoint_loop(row), name=f"webhook-{endpoint_id}")
        for endpoint_id in set(self._loops) - set(wanted):
            self._loops.pop(endpoint_id).cancel()  # deleted or disabled: its claims lapse with the lease

    async def _listen(self) -> None:
        """Wakes every endpoint loop on NOTIFY billing_webhooks (the loops also poll)."""
        import psycopg

        while not self.stop.is_set():
            try:
                async with await psycopg.AsyncConnection.connect(self.pool.conninfo, autocommit=True) as conn:
                    await conn.execute(db.LISTEN_WEBHOOKS)
                    async for _ in conn.notifies():
                        for wake in self._wake.values():
                            wake.set()
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - polling covers the gap
                await sleep_or_stop(self.stop, 1.0)

    async def _endpoint_loop(self, endpoint: dict) -> None:
        endpoint_id = endpoint["id"]
        wake = self._wake[endpoint_id]
        while not self.stop.is_set():
            try:
                async with self.pool.connection() as conn:
                    rows = await (await conn.execute(db.CLAIM_WEBHOOK_DELIVERIES, {
                        "endpoint": endpoint_id, "batch": self.opt.batch_size, "lease": self.opt.lease,
                        "now": self.clock.now()})).fetchall()
                if not rows:
                    wake.clear()
                    try:
                        await asyncio.wait_for(wake.wait(), timeout=self.opt.poll_interval)
                    except asyncio.TimeoutError:
                        pass
                    continue
                results = await self._deliver_batch(endpoint, rows)
                status = await self._record(endpoint_id, results)
                if status != "ENABLED":
                    log.warning("webhooks: endpoint no longer enabled; its loop ends",
                                extra={"endpoint_id": endpoint_id, "status": status})
                    return
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the claims come back after their lease
                log.warning("webhooks: endpoint loop error", extra={"endpoint_id": endpoint_id,
                                                                     "error": str(exc).strip()})
                await sleep_or_stop(self.stop, self.opt.poll_interval)

    async def _deliver_batch(self, endpoint: dict, rows: list[dict]) -> list[Result]:
        chains: dict[tuple[str, int], list[dict]] = {}
        for row in rows:  # claimed in outbox id order: each chain is in commit order
            chains.setdefault((row["aggregate_type"], row["aggregate_id"]), []).append(row)
        gate = asyncio.Semaphore(self.opt.concurrency)
        results: list[Result] = []

        async def chain(events: list[dict]) -> None:
            async with gate:
                for i, row in enumerate(events):
                    result = await self.deliver(endpoint, row)
                    results.append(result)
                    if result.outcome != "DELIVERED":
                        results.extend(Result(r["outbox_id"], "RELEASED") for r in events[i + 1:])
                        return

        await asyncio.gather(*(chain(c) for c in chains.values()))
        return results

    async def deliver(self, endpoint: dict, row: dict) -> Result:
        """One signed POST of one event; never raises."""
        body = row["payload"].encode()
        timestamp = int(time.time())
        headers = {
            "Content-Type": "application/cloudevents+json; charset=utf-8",
            "Billing-Signature": f"t={timestamp},v1={signing.sign(endpoint['secret'], timestamp, body)}",
            "Billing-Event-Id": row["event_id"],
        }
        started = time.monotonic()

        def done(outcome: str, status: int | None = None, error: str | None = None) -> Result:
            return Result(row["outbox_id"], outcome, status, error, int((time.monotonic() - started) * 1000))

        try:
            target = await self._pin(endpoint["url"])
            if target.host_header:
                headers["Host"] = target.host_header
            async with self._session.post(target.url, data=body, headers=headers, allow_redirects=False,
                                          server_hostname=target.server_hostname) as resp:
                if 200 <= resp.status < 300:
                    self.delivered += 1
                    return done("DELIVERED", resp.status)
                text = (await resp.content.read(300)).decode("utf-8", "replace")
                kind = "redirect (not followed)" if 300 <= resp.status < 400 else "HTTP"
                return done("FAILED", resp.status, f"{kind} {resp.status}: {text}".strip())
        except asyncio.TimeoutError:
            return done("FAILED", None, f"timed out after {self.opt.timeout_seconds:g} s")
        except BlockedAddress as exc:
            return done("FAILED", None, f"blocked: {exc}")
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            cause = exc.__cause__ or exc
            if isinstance(cause, BlockedAddress) or "BlockedAddress" in repr(exc):
                return done("FAILED", None, f"blocked: {cause}")
            return done("FAILED", None, f"{type(exc).__name__}: {exc}"[:500])

    async def _pin(self, url: str) -> Pinned:
        """netguard.pin, its answer reused for pin_ttl seconds (a refusal is never cached)."""
        now = time.monotonic()
        cached = self._pins.get(url)
        if cached is not None and now - cached[0] < self.opt.pin_ttl:
            return cached[1]
        target = await pin(url, allow_private=self.opt.allow_private, resolve=self.opt.resolve)
        if len(self._pins) > 10_000:
            self._pins.clear()
        self._pins[url] = (now, target)
        return target

    async def _record(self, endpoint_id: int, results: list[Result]) -> str:
        async with self.pool.connection() as conn:
            row = await (await conn.execute(db.RECORD_WEBHOOK_ATTEMPTS, {
                "endpoint": endpoint_id, "ids": [r.outbox_id for r in results],
                "outcomes": [r.outcome for r in results], "statuses": [r.status for r in results],
                "errors": [r.error for r in results], "durations": [r.duration_ms for r in results],
                "now": self.clock.now(), "backoff": self.opt.backoff, "cap": self.opt.backoff_cap,
                "give_up": self.opt.give_up_after})).fetchone()
        return row["status"]


async def run_webhooks(settings, stop: asyncio.Event, *, clock: Clock | None = None,
                       options: WebhookOptions | None = None) -> None:
    """Deliver outbound webhooks until `stop` is set, on a small pool of its own."""
    from billing.db import async_pool

    pool = await async_pool(settings.database_url, min_size=1, max_size=4, name="billing-webhooks")
    try:
        await WebhookDeliverer(pool, stop, clock=clock, options=options or WebhookOptions.from_settings(settings)).run()
    finally:
        await pool.close()
