"""`billing worker`: renewal, charging, the outbox relay, outbound webhooks and retention in one asyncio process.

Each part can be switched off; many instances may run side by side (the SQL API claims with SKIP
LOCKED, the rate limit lives in Redis, the relay elects one publisher). SIGTERM or SIGINT: stop
claiming, finish what is in flight, exit 0.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading

from billing.clock import Clock, SystemClock
from billing.config import Settings

log = logging.getLogger("billing.worker")


def run_worker(settings: Settings, *, concurrency: int | None = None, renew: bool = True, charge: bool = True,
               relay: bool = True, webhooks: bool = True, retention: bool = True, clock: Clock | None = None,
               limiter=None, sink=None, stop: asyncio.Event | None = None, notifications: bool = True) -> int:
    """Run until SIGTERM/SIGINT (or `stop`); the process exit code (0 on a clean stop).

    From inside a running event loop, await `worker_main` with the same arguments instead.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(worker_main(settings, concurrency=concurrency, renew=renew, charge=charge,
                                       relay=relay, webhooks=webhooks, retention=retention, clock=clock,
                                       limiter=limiter, sink=sink, stop=stop, notifications=notifications))
    raise RuntimeError("run_worker() called from a running event loop: use `await worker_main(...)`")


async def worker_main(settings: Settings, *, concurrency: int | None = None, renew: bool = True,
                      charge: bool = True, relay: bool = True, webhooks: bool = True, retention: bool = True,
                      clock: Clock | None = None, limiter=None, sink=None, stop: asyncio.Event | None = None,
                      notifications: bool = True) -> int:
    """Build the worker (`billing.worker.process.build_worker`), run it until `stop` or a signal,
    close it; the exit code."""
    from billing.worker.process import build_worker

    stop = stop or asyncio.Event()
    clock = clock or SystemClock()
    _install_signal_handlers(stop)
    _maybe_serve_metrics(settings)

    worker = await build_worker(settings, clock=clock, limiter=limiter, sink=sink, renew=renew, charge=charge,
                                relay=relay, webhooks=webhooks, retention=retention, concurrency=concurrency,
                                notifications=notifications)
    try:
        return await worker.run(stop)
    finally:
        await worker.close()


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


def _maybe_serve_metrics(settings: Settings) -> None:
    if settings.worker_metrics_port:
        from prometheus_client import start_http_server

        start_http_server(settings.worker_metrics_port, addr=settings.worker_metrics_host)
