"""Payment results recorded in batches: one `record_payment_results` call (one round trip, one
transaction, one audit row) for every result that arrived within `linger` seconds of the first,
or while the previous call was running.

    recorder = ResultRecorder(pool, clock, linger=0.1)
    recorded = await recorder.record(key, result)     # True once recorded (or refused for good)

`linger` (the worker's BILLING_RECORD_LINGER_MS, default 100 ms) is what makes batches at low
rates: at 70 charges/s a worker records ~7 results per call instead of one, which halves the
database's and the worker's CPU per result; at high rates the results of many gateway calls ride
one call anyway. Waiting does not weaken anything: a result not yet recorded is in the state of a
result whose recording failed (below), and linger is far shorter than the lease.
With `linger=0` a result that finds no call running is sent at once, alone. Each result goes through
`billing.record_payment_result` inside the batch (db/functions/55_charging_batch.sql), so the
rules are the same as one call per result, and a result refused with a BL error does not stop
the others. A failed call (connection lost, deadlock, serialization) is retried whole: recording
is idempotent. After the last retry the results are given up: safe, because each claim comes
back after its lease with the same idempotency key and the gateway answers that retry with the
same result, without charging again.

A caller cancelled while its result is being recorded (shutdown) does not cancel the recording:
what reached the gateway is recorded.
"""

from __future__ import annotations

import asyncio
import logging

import psycopg

from billing import db
from billing.clock import Clock, SystemClock
from billing.gateway.client import ChargeResult

log = logging.getLogger("billing.charging")


class ResultRecorder:
    def __init__(self, pool, clock: Clock | None = None, *, max_batch: int = 500, tries: int = 6,
                 linger: float = 0.0) -> None:
        if linger < 0:
            raise ValueError("linger cannot be negative")
        self.pool = pool
        self.clock = clock or SystemClock()
        self.max_batch = max_batch
        self.linger = linger
        self._closing = asyncio.Event()
        self.tries = tries
        self._pending: list[tuple[str, ChargeResult, asyncio.Future]] = []
        self._flusher: asyncio.Task | None = None
        self.calls = 0  # record_payment_results calls made (tests, benchmarks)

    async def record(self, key: str, result: ChargeResult) -> bool:
        """Record one gateway result; True when recorded, False when refused or given up (logged)."""
        future = asyncio.get_running_loop().create_future()
        self._pending.append((key, result, future))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.ensure_future(self._flush_all())
        return await asyncio.shield(future)

    async def close(self) -> None:
        """Until everything handed over is recorded (or given up); no more lingering."""
        self._closing.set()
        if self._flusher is not None:
            await asyncio.shield(self._flusher)

    async def _flush_all(self) -> None:
        if self.linger > 0 and len(self._pending) < self.max_batch and not self._closing.is_set():
            # Let the results of the calls ending meanwhile join this one (close() cuts it short).
            try:
                await asyncio.wait_for(self._closing.wait(), self.linger)
            except TimeoutError:
                pass
        while self._pending:
            batch, self._pending = self._pending[:self.max_batch], self._pending[self.max_batch:]
            try:
                outcome = await self._call(batch)
            except BaseException:
                for _, _, future in batch:
                    if not future.done():
                        future.set_result(False)
                raise
            for (key, result, future), ok in zip(batch, outcome):
                if not future.done():
                    future.set_result(ok)

    async def _call(self, batch: list[tuple[str, ChargeResult, asyncio.Future]]) -> list[bool]:
        params = {"keys": [k for k, _, _ in batch], "outcomes": [r.outcome for _, r, _ in batch],
                  "references": [r.reference for _, r, _ in batch], "reasons": [r.reason for _, r, _ in batch],
                  "hard": [bool(getattr(r, "hard_decline", False)) for _, r, _ in batch]}
        backoff = 0.2
        for attempt in range(self.tries):
            try:
                params["now"] = self.clock.now()
                async with self.pool.connection() as conn:
                    cur = await conn.execute(db.RECORD_PAYMENT_RESULTS, params)
                    rows = await cur.fetchall()
                self.calls += 1
                refused = {}
                for row in rows:
                    key, code, message = (row["idempotency_key"], row["error_code"], row["error_message"]) \
                        if isinstance(row, dict) else row
                    if code is not None:
                        refused[key] = code
                        log.error("payment result refused", extra={"key": key, "code": code, "error": message})
                return [key not in refused for key, _, _ in batch]
            except psycopg.Error as exc:
                err = db.contract_error(exc)
                if err is not None:  # the call itself refused (malformed batch): no retry helps
                    log.error("payment results refused", extra={"results": len(batch), "code": err.code,
                                                                "error": err.message})
                    return [False] * len(batch)
                log.warning("recording payment results failed; retrying",
                            extra={"results": len(batch), "error": repr(exc), "try": attempt + 1})
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
        for key, result, _ in batch:
            log.error("payment result not recorded; the invoice comes back after its lease",
                      extra={"key": key, "outcome": result.outcome})
        return [False] * len(batch)
