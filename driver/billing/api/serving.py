"""Serving `billing serve` on uvicorn, with limits a public port needs (docs/security.md):

* the request head must arrive within `api_header_timeout_seconds` of the connection opening (or
  of the previous response), the body within `api_body_timeout_seconds` of the head: a slow or
  half-sent request is cut off (uvicorn alone waits for ever); idle keep-alive connections close
  after `api_keep_alive_seconds`;
* at most `api_max_concurrency` connections or requests at once (503 past it), heads of at most
  16 KiB (h11's limit);
* per client address at most `api_max_connections_per_address` connections at once: one more is
  answered 429 with `Retry-After` and closed before anything is read (issue 27, finding 3);
* idle connections that never sent a request do not starve the others: once the connections
  reach 90 % of `api_max_concurrency`, each new one closes the oldest connection that is still
  waiting for its first request head (an anonymous idle socket costs nothing to reopen, so it is
  the first to go);
* `--internal-port`: /metrics, /openapi.json and /healthz without a key on a second listener
  (loopback by default); on the public port they need the admin scope.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from billing.api.app import create_app, internal_app

log = logging.getLogger("billing.api")

MAX_HEAD_BYTES = 16 * 1024


_TOO_MANY = (b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: %d\r\nContent-Type: application/json\r\n"
             b"Connection: close\r\nContent-Length: %d\r\n\r\n%s")


def _too_many_body() -> bytes:
    return b'{"error": {"code": "rate_limited", "message": "too many connections from this address"}}'


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol plus deadlines for the request head and body, a per-address
    connection limit and the shedding of connections that never sent a request."""

    header_timeout: float = 10.0
    body_timeout: float = 30.0
    max_per_address: int = 32
    max_connections: int = 256
    # Shared by the connections of one listener (each protocol_class has its own).
    by_address: dict[str, int] = {}
    never_asked: dict["GuardedH11Protocol", None] = {}  # oldest first
    refused = 0
    shed = 0

    def connection_made(self, transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._deadline: asyncio.TimerHandle | None = None
        self._phase = ""
        self._address = self.client[0] if self.client else ""
        cls = type(self)
        if cls.by_address.get(self._address, 0) >= cls.max_per_address:
            self._address = None  # not counted
            cls.refused += 1
            body = _too_many_body()
            transport.write(_TOO_MANY % (max(1, int(self.header_timeout)), len(body), body))
            transport.close()
            return
        cls.by_address[self._address] = cls.by_address.get(self._address, 0) + 1
        if len(self.connections) >= max(1, int(cls.max_connections * 0.9)) and cls.never_asked:
            oldest = next(iter(cls.never_asked))
            cls.never_asked.pop(oldest, None)
            cls.shed += 1
            if not oldest.transport.is_closing():
                oldest.transport.close()
        cls.never_asked[self] = None
        self._track()

    def data_received(self, data: bytes) -> None:
        type(self).never_asked.pop(self, None)  # it asked something: no longer an idle stranger
        super().data_received(data)
        self._track()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._track()

    def connection_lost(self, exc) -> None:
        cls = type(self)
        cls.never_asked.pop(self, None)
        address = getattr(self, "_address", None)
        if address is not None:
            left = cls.by_address.get(address, 1) - 1
            if left > 0:
                cls.by_address[address] = left
            else:
                cls.by_address.pop(address, None)
        self._set_deadline("", None)
        super().connection_lost(exc)

    def _track(self) -> None:
        state = self.conn.their_state
        if state is h11.IDLE:
            self._set_deadline("head", self.header_timeout)
        elif state is h11.SEND_BODY:
            self._set_deadline("body", self.body_timeout)
        else:  # the whole request is in; the application has it
            self._set_deadline("app", None)

    def _set_deadline(self, phase: str, seconds: float | None) -> None:
        if phase == self._phase:
            return
        self._phase = phase
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        if seconds is not None:
            self._deadline = self.loop.call_later(seconds, self._expired, phase)

    def _expired(self, phase: str) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            log.info("closing a connection: request %s too slow", phase, extra={"client": str(self.client)})
            self.transport.close()  # connection_lost tells a waiting application it is gone


def protocol_class(settings) -> type[GuardedH11Protocol]:
    return type("BillingH11Protocol", (GuardedH11Protocol,), {
        "header_timeout": settings.api_header_timeout_seconds, "body_timeout": settings.api_body_timeout_seconds,
        "max_per_address": settings.api_max_connections_per_address, "max_connections": settings.api_max_concurrency,
        "by_address": {}, "never_asked": {}, "refused": 0, "shed": 0})


def uvicorn_config(app, settings, *, host: str | None = None, port: int | None = None, **kwargs) -> uvicorn.Config:
    extra = {"host": host, "port": port} if host is not None else {}
    return uvicorn.Config(
        app, http=protocol_class(settings), timeout_keep_alive=max(1, int(settings.api_keep_alive_seconds)),
        limit_concurrency=settings.api_max_concurrency, h11_max_incomplete_event_size=MAX_HEAD_BYTES,
        log_config=None, access_log=False, proxy_headers=False, server_header=False, **extra, **kwargs)


class _Follower(uvicorn.Server):
    """A second server in the same process: the main one owns the signals."""

    @contextlib.contextmanager
    def capture_signals(self):
        yield


def serve_app(settings, *, host: str, port: int, clock=None) -> None:
    """The HTTP API (and its console) on one listener until SIGTERM/SIGINT, with `clock` giving
    p_now (`billing demo --serve` stops it at the end of the simulated window)."""
    app = create_app(settings, clock=clock)
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
    uvicorn.Server(uvicorn_config(app, settings, host=host, port=port)).run()


def serve(settings, *, host: str = "127.0.0.1", port: int = 8080, internal_host: str = "127.0.0.1",
          internal_port: int | None = None) -> None:
    """Serve until SIGTERM/SIGINT; a SIGTERM ends in a graceful shutdown and exit status 0."""
    app = create_app(settings)
    # uvicorn shuts down gracefully on SIGTERM, then re-raises it to the handler that was there
    # before; a no-op one makes a requested stop a clean exit for supervisors.
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
    main = uvicorn.Server(uvicorn_config(app, settings, host=host, port=port))
    log.info("serving the HTTP API", extra={"host": host, "port": port, "internal_port": internal_port})
    if internal_port is None:
        main.run()
        return
    side = _Follower(uvicorn_config(internal_app(app), settings, host=internal_host, port=internal_port,
                                    lifespan="off"))

    async def both() -> None:
        task = asyncio.create_task(side.serve())
        try:
            await main.serve()
        finally:
            side.should_exit = True
            await task

    asyncio.run(both())
