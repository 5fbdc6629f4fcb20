"""`billing worker`: the renewal loop, the charge workers and the outbox relay in one asyncio process.

Each part can be switched off; many instances may run side by side (the SQL API claims with SKIP
LOCKED, the rate limit lives in Redis, the relay elects one publisher). SIGTERM or SIGINT: stop
claiming, finish what is in flight, exit 0.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading

from billing.clock import Clock, SystemClock
from billing.config import Settings

log = logging.getLogger("billing.worker")


def run_worker(settings: Settings, *, concurrency: int | None = None, renew: bool = True, charge: bool = True,
               relay: bool = True, clock: Clock | None = None, limiter=None, sink=None,
               stop: asyncio.Event | None = None) -> int:
    """Run until SIGTERM/SIGINT (or `stop`); the process exit code (0 on a clean stop).

    From inside a running event loop, await `worker_main` with the same arguments instead.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(worker_main(settings, concurrency=concurrency, renew=renew, charge=charge,
                                       relay=relay, clock=clock, limiter=limiter, sink=sink, stop=stop))
    raise RuntimeError("run_worker() called from a running event loop: use `await worker_main(...)`")


async def worker_main(settings: Settings, *, concurrency: int | None = None, renew: bool = True,
                      charge: bool = True, relay: bool = True, clock: Clock | None = None, limiter=None,
                      sink=None, stop: asyncio.Event | None = None) -> int:
    from billing.db import async_pool

    stop = stop or asyncio.Event()
    clock = clock or SystemClock()
    _install_signal_handlers(stop)
    _maybe_serve_metrics()

    closers = []
    parts: dict[str, asyncio.Task] = {}
    pool = None
    try:
        if renew or charge:
            pool = await async_pool(settings.database_url, min_size=1, max_size=10, name="billing-worker")
        if renew:
            from billing.worker.renewal import run_renewal

            parts["renewal"] = asyncio.create_task(run_renewal(pool, stop, clock=clock), name="renewal")
        if charge:
            from billing.gateway.client import GatewayClient
            from billing.limiter import limiter_from_settings
            from billing.worker.charging import Charger

            timeout = min(settings.gateway_timeout_seconds, settings.charge_lease_seconds / 3)
            gateway = GatewayClient(settings.gateway_url, timeout=timeout)
            closers.append(gateway.close)
            if limiter is None:
                limiter = limiter_from_settings(settings)
                closers.append(limiter.close)
            charger = Charger(pool, gateway, limiter, rate=settings.gateway_rate, clock=clock,
                              concurrency=concurrency, lease_seconds=settings.charge_lease_seconds)
            parts["charging"] = asyncio.create_task(charger.run(stop), name="charging")
        if relay:
            try:
                from billing.worker.relay import run_relay
            except ImportError as exc:
                log.warning("outbox relay not available; skipped", extra={"error": repr(exc)})
            else:
                parts["relay"] = asyncio.create_task(run_relay(settings, stop, sink=sink, clock=clock), name="relay")
        if not parts:
            log.warning("nothing to run: renewal, charging and relay are all switched off")
            return 0
        log.info("worker started", extra={"parts": ",".join(parts), "pid": os.getpid()})

        failed = False
        pending = set(parts.values())
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                exc = task.exception() if not task.cancelled() else None
                if exc is not None:
                    failed = True
                    log.error("worker part crashed; stopping", extra={"part": task.get_name()}, exc_info=exc)
                elif not stop.is_set():
                    failed = True
                    log.error("worker part ended on its own; stopping", extra={"part": task.get_name()})
                stop.set()
        log.info("worker stopped", extra={"clean": not failed})
        return 1 if failed else 0
    finally:
        for part in parts.values():
            if not part.done():
                part.cancel()
        for close in closers:
            try:
                await close()
            except Exception:  # noqa: BLE001 - closing is best effort
                log.debug("close failed", exc_info=True)
        if pool is not None:
            await pool.close()


def _install_signal_handlers(stop: asyncio.Event) -> None:
    if threading.current_thread() is not threading.main_thread():
        return
    loop = asyncio.get_running_loop()

    def on_signal(signame: str) -> None:
        if not stop.is_set():
            log.info("signal received: no more claims, finishing what is in flight", extra={"signal": signame})
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, on_signal, sig.name)
        except (NotImplementedError, RuntimeError):  # pragma: no cover - unusual platforms
            pass


def _maybe_serve_metrics() -> None:
    port = os.environ.get("BILLING_WORKER_METRICS_PORT")
    if port:
        from prometheus_client import start_http_server

        start_http_server(int(port), addr=os.environ.get("BILLING_WORKER_METRICS_HOST", "127.0.0.1"))
