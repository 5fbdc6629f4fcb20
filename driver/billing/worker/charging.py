"""Charge workers: claim (one committed SQL call) -> gateway call outside any transaction -> record.

Flow in one process:

    claimer ──claim_charges──▶ local queue ──▶ N charger tasks: limiter.acquire() ─▶ POST /v1/charges
                                                                 └─▶ record_payment_results (batched)

* Enough calls in flight: N (the concurrency) defaults to 1.5 x the rate, so the gateway stays at
  its limit even when every call takes a second; tasks waiting for a slot hold their invoice, not
  a connection.
* Claims stay chargeable within the lease: a process never holds more invoices (queued + being
  charged) than the whole rate could charge in a quarter of the lease, and an invoice whose lease is
  nearly over (the call might outlive it) is left alone: the claim comes back after the lease with
  the same idempotency key, so even a late duplicate call cannot charge twice.
* The limiter is acquired right before the call: its pacing slot is awaited here, and its final
  go-ahead runs inside the request, right before the bytes go out (GatewayClient's `gate`), so
  nothing can delay a granted call.
* 429: not a decline and not an attempt. Nothing is recorded; the same key is tried again after the
  limiter grants another slot, while the lease allows.
* Timeouts, 5xx, connection errors: UNKNOWN (attempt count kept, same key next time).
* A key near the end of its lifetime at the gateway (claim_charges says `lookup`) is never sent
  again: its status is asked instead (`look_up`) and the answer recorded.
* A key the gateway refuses as used with other parameters (after a failover that lost the primary's
  last writes, or a restore) is never sent again either: it is looked up at once (`_settle_conflict`).
  The charge it holds is recorded when it is this invoice's (same amount and currency); a success of
  other parameters is CONFLICT (the invoice goes to REVIEW, KEY_CONFLICT: money moved that the books
  do not show, a person decides); a decline of other parameters collected nothing: NOT_FOUND, a new key.
* Stop: no more claims; what is claimed is finished for up to `drain_seconds`, then whatever has
  not reached the gateway is left to its lease, and the calls already made are awaited and recorded.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import os
import random
import socket
import time
from dataclasses import dataclass, field
from datetime import timedelta

import psycopg

from billing import db, metrics
from billing.clock import Clock, SystemClock, sleep_or_stop
from billing.gateway.client import (CONFLICT, DECLINED, NOT_FOUND, SUCCEEDED, UNKNOWN, ChargeResult, GatewayClient,
                                    LookupFailed, NotSent, RateLimited)
from billing.providers import ChargeRequest, Provider
from billing.limiter import RateLimiter
from billing.worker.recorder import ResultRecorder

log = logging.getLogger("billing.charging")

LEASE_SAFETY = 4  # hold at most what the whole rate charges in lease / LEASE_SAFETY


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def default_concurrency(rate: float) -> int:
    """Calls in flight that keep the gateway at `rate` when each call takes up to a second."""
    return max(4, min(5000, math.ceil(rate * 1.5)))


@dataclass
class Claim:
    invoice_id: int
    attempt_id: int
    idempotency_key: str
    customer_id: int
    amount: int
    currency: str
    lookup: bool = False  # the key is near its expiry: ask the gateway what became of it, never resend it
    customer_ref: str | None = None  # the provider's customer and payment method (None: by customer id)
    payment_method_ref: str | None = None
    claimed_at: float = field(default_factory=time.monotonic)

    def request(self) -> ChargeRequest:
        return ChargeRequest(self.idempotency_key, self.invoice_id, self.customer_id, self.amount, self.currency,
                             self.customer_ref, self.payment_method_ref)


class Charger:
    def __init__(self, pool, gateway: GatewayClient | Provider, limiter: RateLimiter, *, rate: float,
                 clock: Clock | None = None, worker_id: str | None = None, concurrency: int | None = None,
                 lease_seconds: float = 300.0, claim_batch: int = 100, poll_seconds: float = 1.0,
                 drain_seconds: float | None = None, record_linger: float = 0.0, shards=None) -> None:
        if gateway.timeout >= lease_seconds:
            raise ValueError(f"the gateway timeout ({gateway.timeout:g} s) must be shorter than the lease "
                             f"({lease_seconds:g} s)")
        self.pool = pool
        # On Citus (a billing.worker.shards.ShardLeases): claims per shard group, on the node of
        # each group the worker leases (charge_claims_in_shard); results recorded as ever.
        self.shards = shards
        self.gateway = gateway  # as given (a GatewayClient speaks the simulator's protocol)
        if isinstance(gateway, GatewayClient):
            from billing.providers.sim import SimProvider

            gateway = SimProvider(gateway)
        self.provider: Provider = gateway
        self.limiter = limiter
        self.clock = clock or SystemClock()
        self.worker_id = worker_id or default_worker_id()
        self.concurrency = concurrency or default_concurrency(rate)
        self.lease_seconds = lease_seconds
        self.max_held = max(1, int(rate * lease_seconds / LEASE_SAFETY))
        self.claim_batch = max(1, min(claim_batch, self.max_held))
        self.poll_seconds = poll_seconds
        self.drain_seconds = drain_seconds if drain_seconds is not None else min(30.0, lease_seconds / 2)
        # Start a call only if it can end (timeout) before the lease does, with some margin.
        margin = min(5.0, 0.1 * lease_seconds)
        self.usable_lease = max(0.0, lease_seconds - gateway.timeout - margin)
        self._queue: asyncio.Queue[Claim] = asyncio.Queue()
        self._room = asyncio.Event()
        self._busy = 0
        self._committed: set[asyncio.Task] = set()  # tasks past the gateway call's start
        # Results are recorded in batches: one record_payment_results call for all that arrive
        # within record_linger of the first or while the previous call runs (one round trip, one
        # transaction and one audit row for many charges).
        self.recorder = ResultRecorder(pool, self.clock, linger=record_linger)
        self.counts = {"claimed": 0, "recorded": 0, "abandoned": 0, "rate_limited": 0}

    # -- SQL -----------------------------------------------------------------------------------

    async def _claim(self, size: int) -> list[Claim]:
        params = {"worker": self.worker_id, "batch": size, "lease": timedelta(seconds=self.lease_seconds),
                  "now": self.clock.now(), "provider": self.provider.name}
        if self.shards is not None:
            from billing.worker.shards import in_each_group

            rows = await in_each_group(self.shards, db.CHARGE_CLAIMS_IN_SHARD, params, want=size)
        else:
            async with self.pool.connection() as conn:
                cur = await conn.execute(db.CLAIM_CHARGES, params)
                rows = await cur.fetchall()
        claims = [Claim(r["invoice_id"], r["attempt_id"], r["idempotency_key"], r["customer_id"], r["amount"],
                        r["currency"].strip(), bool(r.get("lookup")), r.get("customer_ref"),
                        r.get("payment_method_ref")) for r in rows]
        self.counts["claimed"] += len(claims)
        return claims

    async def _record(self, claim: Claim, result: ChargeResult) -> None:
        """Record the gateway's result; batched with other calls' results (billing.worker.recorder)."""
        if await self.recorder.record(claim.idempotency_key, result):
            self.counts["recorded"] += 1

    # -- one invoice -----------------------------------------------------------------------------

    def _abandon(self, claim: Claim, why: str) -> None:
        self.counts["abandoned"] += 1
        metrics.CHARGES_ABANDONED.inc()
        log.info("claim left to its lease", extra={"key": claim.idempotency_key, "reason": why})

    async def look_up(self, claim: Claim) -> ChargeResult | None:
        """A key near the end of its lifetime at the gateway is never sent again: its status is
        asked (GET /v1/charges?idempotencyKey=) and recorded: the charge found, NOT_FOUND (nothing
        was charged: the SQL API moves to a new key), or UNKNOWN when the gateway cannot say (the
        invoice goes to REVIEW once the key has expired). None when left to its lease."""
        remaining = claim.claimed_at + self.usable_lease - time.monotonic()
        try:
            async with asyncio.timeout(max(0.0, remaining)):
                await self.limiter.acquire()  # a lookup is a gateway call too
        except TimeoutError:
            self._abandon(claim, "no rate-limit slot within the lease")
            return None
        try:
            found = await self.provider.lookup(claim.idempotency_key, customer_ref=claim.customer_ref)
        except LookupFailed as exc:
            result = ChargeResult(UNKNOWN, reason=f"key lookup failed: {exc}")
        else:
            result = found if found is not None else ChargeResult(NOT_FOUND, reason="the gateway has no charge for the key")
        log.info("key looked up", extra={"key": claim.idempotency_key, "outcome": result.outcome})
        await self._record(claim, result)
        return result

    async def _settle_conflict(self, claim: Claim, refused: ChargeResult) -> ChargeResult:
        """The gateway refused the key as used with other parameters: what does it hold? Asked at
        once (within the lease, a rate-limit slot like any call); `refused` (UNKNOWN, the key kept)
        when it cannot say."""
        remaining = claim.claimed_at + self.usable_lease - time.monotonic()
        try:
            async with asyncio.timeout(max(0.0, remaining)):
                await self.limiter.acquire()
            found = await self.provider.lookup(claim.idempotency_key, customer_ref=claim.customer_ref)
        except (TimeoutError, LookupFailed) as exc:
            log.warning("key conflict not looked up", extra={"key": claim.idempotency_key, "reason": str(exc)})
            return refused
        if found is None:  # the gateway holds nothing after all (a key in use by a call that failed)
            return refused
        ours = found.amount == claim.amount and found.currency == claim.currency
        log.error("key used with other parameters", extra={
            "key": claim.idempotency_key, "outcome": found.outcome, "amount": found.amount,
            "currency": found.currency, "ours": ours})
        if ours or found.outcome not in (SUCCEEDED, DECLINED):
            return found
        held = f"{found.amount} {found.currency} ({found.reference})"
        if found.outcome == DECLINED:
            return ChargeResult(NOT_FOUND, reference=found.reference,
                                reason=f"the key held a declined charge of other parameters, {held}: nothing collected")
        return ChargeResult(CONFLICT, reference=found.reference,
                            reason=f"the key holds a charge of other parameters that succeeded, {held}")

    async def charge(self, claim: Claim) -> ChargeResult | None:
        """Charge one claimed invoice and record the result; None when left to its lease."""
        if claim.lookup:
            return await self.look_up(claim)
        deadline = claim.claimed_at + self.usable_lease
        # A limiter with two steps waits for its pacing slot here and gives the go-ahead inside
        # the request, right before the bytes go out; any other limiter is acquired here.
        pace = getattr(self.limiter, "pace", None)
        while True:
            waiting_since = time.monotonic()
            gate = functools.partial(self._gate, waiting_since) if pace is not None else None
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._abandon(claim, "lease nearly over")
                return None
            try:
                async with asyncio.timeout(remaining):
                    if pace is not None:
                        await pace()
                    else:
                        await self.limiter.acquire()
                        metrics.LIMITER_WAIT.observe(time.monotonic() - waiting_since)
            except TimeoutError:
                self._abandon(claim, "no rate-limit slot within the lease")
                return None
            task = asyncio.current_task()
            self._committed.add(task)
            metrics.CHARGES_IN_FLIGHT.inc()
            try:
                result = await self.provider.charge(claim.request(), gate=gate)
            except NotSent:  # the limiter said no at the last moment: nothing went out
                self._committed.discard(task)
                continue
            except RateLimited:
                self.counts["rate_limited"] += 1
                self._committed.discard(task)
                await asyncio.sleep(random.uniform(0.05, 0.15))
                continue
            finally:
                metrics.CHARGES_IN_FLIGHT.dec()
            try:
                if result.key_conflict:
                    result = await self._settle_conflict(claim, result)
                await self._record(claim, result)
            finally:
                self._committed.discard(task)
            return result

    async def _gate(self, waiting_since: float):
        """Inside the request, right before its bytes go out: the limiter's go-ahead (a true
        Grant, which the request tells when its bytes were sent). Refused or late, it paces again
        here, holding the (silent) connection, for at most a third of the gateway timeout; then
        the request is dropped unsent (NotSent) and the caller starts over."""
        deadline = time.monotonic() + self.provider.timeout / 3
        while True:
            grant = await self.limiter.use()
            if grant:
                metrics.LIMITER_WAIT.observe(time.monotonic() - waiting_since)
                return grant
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            try:
                async with asyncio.timeout(remaining):
                    await self.limiter.pace()
            except TimeoutError:
                return False

    # -- the loop ------------------------------------------------------------------------------

    async def _consume(self) -> None:
        queue = self._queue
        low_water = max(1, self.claim_batch // 2)
        while True:
            claim = await queue.get()
            self._busy += 1
            try:
                await self.charge(claim)
            except asyncio.CancelledError:
                self._abandon(claim, "shutdown")
                raise
            except Exception:  # noqa: BLE001 - one invoice's failure must not stop the others
                log.exception("charging failed", extra={"key": claim.idempotency_key})
            finally:
                self._busy -= 1
                queue.task_done()
                if queue.qsize() < low_water:
                    self._room.set()

    def held(self) -> int:
        return self._queue.qsize() + self._busy

    async def run(self, stop: asyncio.Event) -> None:
        """Claim and charge until `stop` is set, then drain (see the module's docstring)."""
        consumers = [asyncio.create_task(self._consume(), name=f"charger-{i}") for i in range(self.concurrency)]
        log.info("charging", extra={"worker": self.worker_id, "concurrency": self.concurrency,
                                    "claim_batch": self.claim_batch, "lease_s": self.lease_seconds})
        try:
            await self._claim_loop(stop)
        finally:
            await self._drain(consumers)
            await self.recorder.close()

    async def _claim_loop(self, stop: asyncio.Event) -> None:
        backoff = 0.5
        # Hold every charger busy plus a batch queued, and claim at least half a batch at a time:
        # topping up one invoice per finished charge made one claim_charges call per charge.
        target = min(self.concurrency + self.claim_batch, self.max_held)
        least = max(1, min(self.claim_batch, target) // 2)
        while not stop.is_set():
            size = min(self.claim_batch, target - self.held())
            if size < least:
                self._room.clear()
                waiter = asyncio.ensure_future(self._room.wait())
                stopper = asyncio.ensure_future(stop.wait())
                await asyncio.wait({waiter, stopper}, timeout=self.poll_seconds,
                                   return_when=asyncio.FIRST_COMPLETED)
                waiter.cancel()
                stopper.cancel()
                continue
            try:
                claims = await self._claim(size)
                backoff = 0.5
            except psycopg.Error as exc:
                log.warning("claim_charges failed; retrying", extra={"error": repr(exc)})
                if await sleep_or_stop(stop, backoff):
                    return
                backoff = min(backoff * 2, 10.0)
                continue
            for claim in claims:
                self._queue.put_nowait(claim)
            if len(claims) < size and await sleep_or_stop(stop, self.poll_seconds):
                return

    async def _drain(self, consumers: list[asyncio.Task]) -> None:
        if self.held():
            log.info("stopping: finishing claimed charges", extra={"held": self.held()})
            try:
                await asyncio.wait_for(asyncio.shield(self._queue.join()), self.drain_seconds)
            except asyncio.TimeoutError:
                while not self._queue.empty():
                    self._abandon(self._queue.get_nowait(), "shutdown")
                    self._queue.task_done()
                for task in consumers:
                    if task not in self._committed:
                        task.cancel()
                # What reached the gateway is awaited and recorded.
                await self._queue.join()
        for task in consumers:
            task.cancel()
        await asyncio.gather(*consumers, return_exceptions=True)

    async def charge_due(self) -> int:
        """Claim and charge everything due now, `concurrency` at a time; how many were charged.

        For the demo and tests that drive a simulated clock step by step.
        """
        total = 0
        semaphore = asyncio.Semaphore(self.concurrency)

        async def one(claim: Claim) -> None:
            async with semaphore:
                await self.charge(claim)

        while True:
            claims = await self._claim(self.claim_batch)
            if not claims:
                return total
            await asyncio.gather(*(one(c) for c in claims))
            total += len(claims)
