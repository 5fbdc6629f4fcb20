"""The refund worker: claim (one committed SQL call) -> provider call outside any transaction -> record.

    refunder = Refunder(pool, provider, limiter, clock=clock)
    await refunder.run(stop)          # or: await refunder.refund_due() (demo, tests)

* Each refund row has its own idempotency key (<namespace>-ref-<id>), sent with every try: a
  retry after a crash or an UNKNOWN answer is answered by the provider's idempotency, never
  refunded twice. A key near or past its lifetime at the provider is never sent again: claim_refunds
  hands it out for a look-up (`lookup`), and the worker asks the provider what became of it
  (provider.lookup_refund): found, its outcome is recorded; not found, NOT_FOUND (nothing was
  refunded: the SQL API gives the refund a new key); the provider cannot say, UNKNOWN (in review,
  looked up again every hour).
* Calls share the gateway's rate limit with the charges (the same limiter); 429 is not an
  answer: the same key is tried again after the limiter grants another slot, within the lease.
* A refund whose call would outlive its lease is left to the lease; the claim comes back with
  the same key.
* A SUCCEEDED refund that a provider event said failed (Stripe's refund.failed: the bank sent it
  back, or the event is about another refund) is never failed on the event's word: the API marks
  it (apply_refund_webhook), `claim_refund_rechecks` hands it here for a look-up, and the
  provider's answer is recorded (FAILED: it leaves amount_refunded; SUCCEEDED: the recheck ends).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from datetime import timedelta

import psycopg

from billing import db
from billing.clock import Clock, SystemClock, sleep_or_stop
from billing.gateway.client import NOT_FOUND, UNKNOWN, LookupFailed, NotSent, RateLimited, RefundResult
from billing.providers import Provider, RefundRequest

log = logging.getLogger("billing.refunds")


class Refunder:
    def __init__(self, pool, provider: Provider, limiter, *, clock: Clock | None = None, worker_id: str = "refunds",
                 lease_seconds: float = 300.0, batch: int = 50, concurrency: int = 8,
                 poll_seconds: float = 1.0, shards=None) -> None:
        if provider.timeout >= lease_seconds:
            raise ValueError("the provider's timeout must be shorter than the lease")
        self.pool = pool
        self.shards = shards  # on Citus: claims per shard group (refund_claims_in_shard), billing.worker.shards
        self.provider = provider
        self.limiter = limiter
        self.clock = clock or SystemClock()
        self.worker_id = worker_id
        self.lease_seconds = lease_seconds
        self.batch = batch
        self.concurrency = concurrency
        self.poll_seconds = poll_seconds
        margin = min(5.0, 0.1 * lease_seconds)
        self.usable_lease = max(0.0, lease_seconds - provider.timeout - margin)
        self.counts = {"claimed": 0, "recorded": 0, "abandoned": 0, "rate_limited": 0, "looked_up": 0}

    async def _claim(self) -> list[RefundRequest]:
        params = {"worker": self.worker_id, "batch": self.batch, "lease": timedelta(seconds=self.lease_seconds),
                  "now": self.clock.now()}
        if self.shards is not None:
            from billing.worker.shards import in_each_group

            rows = await in_each_group(self.shards, db.REFUND_CLAIMS_IN_SHARD, params, want=self.batch)
        else:
            async with self.pool.connection() as conn:
                cur = await conn.execute(db.CLAIM_REFUNDS, params)
                rows = await cur.fetchall()
        # and the SUCCEEDED refunds an event said failed: only the provider's own answer decides
        async with self.pool.connection() as conn:
            cur = await conn.execute(db.CLAIM_REFUND_RECHECKS, params)
            rows = list(rows) + list(await cur.fetchall())
        self.counts["claimed"] += len(rows)
        return [RefundRequest(r["idempotency_key"], r["refund_id"], r["invoice_id"], r["customer_id"], r["amount"],
                              r["currency"].strip(), r["charge_reference"], r["charge_key"], bool(r.get("lookup")))
                for r in rows]

    async def _record(self, request: RefundRequest, result: RefundResult) -> None:
        backoff = 0.2
        for attempt in range(6):
            try:
                async with self.pool.connection() as conn:
                    await conn.execute(db.RECORD_REFUND_RESULT, {
                        "key": request.idempotency_key, "outcome": result.outcome, "reference": result.reference,
                        "reason": (result.reason or None) and result.reason[:500], "now": self.clock.now()})
                self.counts["recorded"] += 1
                return
            except psycopg.Error as exc:
                if db.contract_error(exc) is not None:
                    log.error("refund result refused", extra={"key": request.idempotency_key, "error": str(exc)})
                    return
                log.warning("recording a refund result failed; retrying", extra={"error": repr(exc), "try": attempt + 1})
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
        # Safe to give up: the refund comes back after its lease with the same key.
        log.error("refund result not recorded; the refund comes back after its lease",
                  extra={"key": request.idempotency_key, "outcome": result.outcome})

    async def look_up(self, request: RefundRequest, deadline: float) -> RefundResult | None:
        """Ask the provider what became of a refund whose key must not be sent again, and record
        it: its outcome, NOT_FOUND (never seen: a new key), or UNKNOWN (cannot say)."""
        try:
            async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                await self.limiter.acquire()  # a look-up is a provider call too
        except TimeoutError:
            self.counts["abandoned"] += 1
            return None
        try:
            found = await self.provider.lookup_refund(request)
        except LookupFailed as exc:
            result = RefundResult(UNKNOWN, reason=f"refund look-up failed: {exc}"[:500])
        else:
            result = found if found is not None else RefundResult(NOT_FOUND, reason="the provider has no refund for the key")
        self.counts["looked_up"] += 1
        log.info("refund looked up", extra={"key": request.idempotency_key, "outcome": result.outcome})
        await self._record(request, result)
        return result

    async def refund(self, request: RefundRequest, claimed_at: float | None = None) -> RefundResult | None:
        """Execute one claimed refund (or look it up) and record the result; None when left to its lease."""
        deadline = (claimed_at or time.monotonic()) + self.usable_lease
        if request.lookup:
            return await self.look_up(request, deadline)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.counts["abandoned"] += 1
                log.info("refund left to its lease", extra={"key": request.idempotency_key})
                return None
            try:
                async with asyncio.timeout(remaining):
                    await self.limiter.acquire()
            except TimeoutError:
                continue
            try:
                result = await self.provider.refund(request)
            except NotSent:
                continue
            except RateLimited:
                self.counts["rate_limited"] += 1
                await asyncio.sleep(random.uniform(0.05, 0.15))
                continue
            if result.outcome == UNKNOWN:
                log.warning("refund outcome unknown; the same key again later",
                            extra={"key": request.idempotency_key, "reason": result.reason})
            await self._record(request, result)
            return result

    async def refund_due(self) -> int:
        """Claim and execute everything due now, `concurrency` at a time; how many were claimed."""
        total = 0
        semaphore = asyncio.Semaphore(self.concurrency)

        async def one(request: RefundRequest, at: float) -> None:
            async with semaphore:
                await self.refund(request, at)

        while True:
            requests = await self._claim()
            if not requests:
                return total
            at = time.monotonic()
            await asyncio.gather(*(one(r, at) for r in requests))
            total += len(requests)

    async def run(self, stop: asyncio.Event) -> None:
        """Refund until `stop` is set; a database error is logged and retried with backoff."""
        backoff = 0.5
        log.info("refund loop started", extra={"worker": self.worker_id})
        while not stop.is_set():
            try:
                done = await self.refund_due()
                backoff = 0.5
                wait = self.poll_seconds if not done else 0.0
            except psycopg.Error as exc:
                log.warning("claim_refunds failed; retrying", extra={"error": repr(exc)})
                wait = backoff
                backoff = min(backoff * 2, 10.0)
            if wait and await sleep_or_stop(stop, wait):
                return
