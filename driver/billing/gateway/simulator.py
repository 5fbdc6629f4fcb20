"""A payment gateway simulator (docs/gateway.md): a real HTTP server, embeddable in-process.

    sim = GatewaySimulator(rate=20, decline_rate=0.1, latency_ms=(50, 300))
    url = await sim.start()            # port 0: a free port; sim.url afterwards
    ... GatewayClient(url) ...
    sim.ledger(), sim.stats()          # or GET /v1/ledger, GET /v1/stats
    await sim.close()

Behaviour (docs/gateway.md is the reference for other programs):
- `POST /v1/charges`, header `Idempotency-Key`, body `{"customerId", "amount", "currency"}`
  answers `{"id", "status": "succeeded"|"declined", "declineCode"}`. A key is charged at most
  once; the same key again answers the stored result (same key, other parameters: 409).
- Rate limit, sliding window: a call is *accepted* when fewer than `rate` calls were accepted in
  the second before it; otherwise 429 and `rateLimited` + 1. Every accepted call counts, replays
  included. `maxWindow` is the most accepted calls seen in any sliding one-second window.
  In `observe` mode nothing is refused: each call that would have been refused counts in
  `excess` (used by the benchmark to measure another limiter's bursts).
- Faults, decided by a `DecisionModel` (gateway/decisions.py; by default a hash of (seed, key, how
  many calls this key has had)), so a run is
  reproducible: `error_rate` answers 500 *without* charging; `timeout_rate` charges and then holds
  the answer `timeout_hold_seconds` (past the client's timeout). Faults only hit a key's first
  charging call: a replay answers the stored result after the usual latency.
  Declines depend on (seed, key) only.
- `POST /v1/refunds`, header `Idempotency-Key`, body `{"chargeKey", "amount"}` refunds part of a
  succeeded charge once per key, never more than the charge has left; the ledger lists refunds.
- `GET /v1/charges?idempotencyKey=K` answers the charge made for K (200, the charge's answer plus
  its amount, currency and customerId) or 404 when K was never charged; it is not rate limited.
  `GET /v1/refunds?idempotencyKey=K` likewise answers the refund made with K, or 404.
  `DecisionModel.lookup_fails` can make it answer 500.
- Authentication (3-D Secure): a charge declined `authentication_required` (the decision model's
  choice) can be confirmed on session: `POST /v1/charges/{id}/confirm` `{"returnUrl"}` answers
  `requires_action` with `nextAction.redirectUrl`, the simulator's own page
  (`GET /authenticate/{id}`: the amount and two buttons); approving there makes the charge
  `succeeded` (announced by a webhook of its own event id) and sends the customer back to
  `returnUrl`; `GET /v1/charges/{id}` answers the charge as it is now.
- Webhooks: each charge is announced by a signed POST to `webhook_url` after a random delay
  (`webhook_delay_ms`, so they arrive late and out of order), sent twice with probability
  `webhook_duplicate_rate` (same `eventId`), retried on failure.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import random
import signal
from datetime import datetime, timezone
from typing import AsyncContextManager

from aiohttp import ClientSession, ClientTimeout, web

from billing.gateway.arrival import arrival, stamp_arrivals
from billing.gateway.decisions import DECLINE_CODES, DecisionModel, chance, charge_id
from billing.gateway.records import Charge, Refund, _Window, parse_latency
from billing.gateway.sim_authentication import AuthenticationRoutes
from billing.gateway.sim_refunds import RefundRoutes
from billing.gateway.sim_webhooks import WEBHOOK_MAX_TRIES, WebhookSender

__all__ = ["DECLINE_CODES", "WEBHOOK_MAX_TRIES", "Charge", "DecisionModel", "GatewaySimulator", "Refund", "chance",
           "charge_id", "main", "parse_latency"]

log = logging.getLogger("billing.gateway.simulator")


# The refunds, the 3-D Secure pages and the webhooks are mixed in from their own modules
# (sim_refunds, sim_authentication, sim_webhooks); the charges, the lookups and the read API are here.
class GatewaySimulator(RefundRoutes, AuthenticationRoutes, WebhookSender):
    """The simulated gateway. Extension points (constructor arguments):

    * `decisions`: a `DecisionModel` (declines, timeouts after charging, 5xx); by default one built
      from `seed`, `decline_rate`, `timeout_rate` and `error_rate`;
    * `webhook_gate`: an async context manager entered around each webhook delivery (after its
      delay, for all its retries), e.g. `asyncio.Semaphore(16)` to pace the calls to one endpoint.

    Read API: `ledger()`, `stats()` (with `webhooksPending`), `accepted_times()`,
    `pending_webhooks()`; over HTTP `GET /v1/ledger`, `/v1/stats`, `/v1/accepted`.
    """

    def __init__(self, *, rate: int = 200, decline_rate: float = 0.0, timeout_rate: float = 0.0,
                 error_rate: float = 0.0, latency_ms: tuple[int, int] | str = (0, 0),
                 webhook_url: str | None = None, webhook_secret: str | None = None,
                 webhook_duplicate_rate: float = 0.0, webhook_delay_ms: tuple[int, int] | str = (0, 2000),
                 seed: int = 0, mode: str = "strict", timeout_hold_seconds: float = 30.0,
                 decisions: DecisionModel | None = None,
                 webhook_gate: AsyncContextManager | None = None) -> None:
        if mode not in ("strict", "observe"):
            raise ValueError("mode must be strict or observe")
        if not 0.0 <= webhook_duplicate_rate <= 1.0:
            raise ValueError("webhook_duplicate_rate must be between 0 and 1")
        if webhook_url and not webhook_secret:
            raise ValueError("webhooks need a secret to sign them")
        self.decisions = decisions or DecisionModel(seed=seed, decline_rate=decline_rate,
                                                    timeout_rate=timeout_rate, error_rate=error_rate)
        self.rate = rate
        self.mode = mode
        self.latency_ms = parse_latency(latency_ms) if isinstance(latency_ms, str) else tuple(latency_ms)
        self.webhook_url = webhook_url
        self.webhook_secret = webhook_secret
        self.webhook_duplicate_rate = webhook_duplicate_rate
        self.webhook_delay_ms = (parse_latency(webhook_delay_ms) if isinstance(webhook_delay_ms, str)
                                 else tuple(webhook_delay_ms))
        self.webhook_gate = webhook_gate
        self.seed = seed
        self.timeout_hold_seconds = timeout_hold_seconds
        self._rng = random.Random(seed)
        self._window = _Window(rate, mode == "strict")
        self._charges: dict[str, Charge] = {}
        self._refunds: dict[str, Refund] = {}
        self._refunded: dict[str, int] = {}  # charge key -> amount refunded
        self._calls: dict[str, int] = {}
        self._lookups: dict[str, int] = {}
        self._accepted_times: list[float] = []
        self._tasks: set[asyncio.Task] = set()
        self._runner: web.AppRunner | None = None
        self._session: ClientSession | None = None
        self._event_seq = 0
        self.url: str | None = None
        self.counters = {"accepted": 0, "rateLimited": 0, "replays": 0, "errors": 0, "timeouts": 0,
                         "conflicts": 0, "badRequests": 0, "lookups": 0, "webhooksDelivered": 0, "webhooksFailed": 0,
                         "webhookAttempts": 0, "refundsRefused": 0, "authenticated": 0}

    def _new_charge(self, key: str, customer_id: int, amount: int, currency: str) -> Charge:
        code = self.decisions.decline_code(key, customer_id, amount, currency)
        return Charge(key, customer_id, amount, currency, "succeeded" if code is None else "declined",
                      charge_id(self.seed, key), code,
                      datetime.now(timezone.utc).isoformat().replace("+00:00", "Z"))

    # -- HTTP ----------------------------------------------------------------------------------

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/charges", self._handle_charge)
        app.router.add_get("/v1/charges", self._handle_lookup)
        app.router.add_post("/v1/refunds", self._handle_refund)
        app.router.add_get("/v1/refunds", self._handle_refund_lookup)
        app.router.add_get("/v1/ledger", self._handle_ledger)
        app.router.add_get("/v1/stats", self._handle_stats)
        app.router.add_get("/v1/accepted", self._handle_accepted)
        app.router.add_get("/healthz", self._handle_health)
        app.router.add_post("/v1/charges/{id}/confirm", self._handle_confirm)
        app.router.add_get("/v1/charges/{id}", self._handle_charge_by_id)
        app.router.add_get("/authenticate/{id}", self._handle_auth_page)
        app.router.add_post("/authenticate/{id}", self._handle_auth_decision)
        return app

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        self._runner = web.AppRunner(self.app(), access_log=None, handle_signals=False, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, backlog=4096)
        await stamp_arrivals(self._runner, site)  # each request stamped when its bytes arrived
        bound_host, bound_port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{bound_port}"
        if self.webhook_url:
            self._session = ClientSession(timeout=ClientTimeout(total=10))
        return self.url

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> "GatewaySimulator":
        if self._runner is None:
            await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    def _latency(self) -> float:
        lo, hi = self.latency_ms
        return self._rng.uniform(lo, hi) / 1000 if hi else 0.0

    async def _handle_charge(self, request: web.Request) -> web.Response:
        now = arrival(request)
        if not self._window.admit(now):
            self.counters["rateLimited"] += 1
            retry = self._window.retry_after(now)
            return web.json_response(
                {"error": {"code": "rate_limited", "message": f"more than {self.rate} calls in one second"}},
                status=429, headers={"Retry-After": str(max(1, round(retry)))},
            )
        self.counters["accepted"] += 1
        if len(self._accepted_times) < 5_000_000:
            bisect.insort(self._accepted_times, now)

        key = request.headers.get("Idempotency-Key", "")
        try:
            body = await request.json()
            customer_id, amount, currency = body["customerId"], body["amount"], body["currency"]
            valid = (key and len(key) <= 255 and isinstance(customer_id, int) and not isinstance(customer_id, bool)
                     and isinstance(amount, int) and not isinstance(amount, bool) and amount >= 0
                     and isinstance(currency, str) and len(currency) == 3 and currency.isalpha()
                     and currency.isupper())
        except (ValueError, KeyError, TypeError):
            valid = False
        if not valid:
            self.counters["badRequests"] += 1
            return web.json_response({"error": {"code": "invalid_request", "message":
                                      "Idempotency-Key header and integer customerId, amount >= 0, "
                                      "ISO currency are required"}}, status=400)

        calls = self._calls[key] = self._calls.get(key, 0) + 1
        latency = self._latency()
        existing = self._charges.get(key)
        if existing is not None:
            if (existing.customer_id, existing.amount, existing.currency) != (customer_id, amount, currency):
                self.counters["conflicts"] += 1
                return web.json_response({"error": {"code": "idempotency_conflict", "message":
                                          "this Idempotency-Key was used with other parameters"}}, status=409)
            self.counters["replays"] += 1
            await asyncio.sleep(latency)
            return web.json_response(existing.answer())

        if self.decisions.fails(key, calls):
            self.counters["errors"] += 1
            await asyncio.sleep(latency)
            return web.json_response({"error": {"code": "internal", "message": "simulated gateway failure"}},
                                     status=500)

        # No await between the lookup above and this insert: one key is charged once, however many
        # requests for it arrive at the same time.
        charge = self._new_charge(key, customer_id, amount, currency)
        self._charges[key] = charge
        self._announce(charge)
        if self.decisions.times_out(key, calls):
            self.counters["timeouts"] += 1
            await asyncio.sleep(self.timeout_hold_seconds)
        else:
            await asyncio.sleep(latency)
        return web.json_response(charge.answer())

    async def _lookup_checks(self, request: web.Request) -> tuple[str, web.Response | None]:
        """What every lookup by idempotency key does first (a charge's, a refund's): the key given (else
        400), counted, the simulated latency, a simulated failure when the decisions say so (500).
        Returns the key and the answer that ends the lookup there, or None to go on."""
        key = request.query.get("idempotencyKey", "")
        if not key or len(key) > 255:
            self.counters["badRequests"] += 1
            return key, web.json_response({"error": {"code": "invalid_request", "message":
                                           "the idempotencyKey query parameter is required"}}, status=400)
        self.counters["lookups"] += 1
        calls = self._lookups[key] = self._lookups.get(key, 0) + 1
        await asyncio.sleep(self._latency())
        if self.decisions.lookup_fails(key, calls):
            self.counters["errors"] += 1
            return key, web.json_response({"error": {"code": "internal", "message": "simulated gateway failure"}},
                                          status=500)
        return key, None

    async def _handle_lookup(self, request: web.Request) -> web.Response:
        """`GET /v1/charges?idempotencyKey=K`: the charge made for K (200, as the charge call
        answered it, plus amount, currency, customerId), or 404 when K was never charged."""
        key, refused = await self._lookup_checks(request)
        if refused is not None:
            return refused
        charge = self._charges.get(key)
        if charge is None:
            return web.json_response({"error": {"code": "not_found", "message": "no charge has this idempotency key"}},
                                     status=404)
        return web.json_response({**charge.answer(), "amount": charge.amount, "currency": charge.currency,
                                  "customerId": charge.customer_id, "idempotencyKey": key})

    async def _handle_health(self, request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    async def _handle_ledger(self, request: web.Request) -> web.Response:
        return web.json_response(self.ledger())

    async def _handle_stats(self, request: web.Request) -> web.Response:
        return web.json_response(self.stats())

    async def _handle_accepted(self, request: web.Request) -> web.Response:
        return web.json_response({"accepted": self.accepted_times()})

    # -- what tests and benchmarks read --------------------------------------------------------

    def ledger(self) -> dict:
        return {"charges": [c.ledger_entry() for c in self._charges.values()],
                "refunds": [r.ledger_entry() for r in self._refunds.values()],
                "rateLimited": self.counters["rateLimited"]}

    def accepted_times(self) -> list[float]:
        """Arrival instants (wall clock, seconds) of every accepted call, in order."""
        return list(self._accepted_times)

    def pending_webhooks(self) -> int:
        """Webhook deliveries not finished yet (waiting for their delay, in flight, or retrying)."""
        return len(self._tasks)

    def stats(self) -> dict:
        times = self._accepted_times
        per_second: list[int] = []
        if times:
            first = times[0]
            buckets = int(times[-1] - first) + 1
            per_second = [bisect.bisect_left(times, first + i + 1) - bisect.bisect_left(times, first + i)
                          for i in range(buckets)]
        return {**self.counters, "mode": self.mode, "rate": self.rate, "charged": len(self._charges),
                "refunded": len(self._refunds),
                "maxWindow": self._window.max_window, "excess": self._window.excess,
                "spanSeconds": (times[-1] - times[0]) if len(times) > 1 else 0.0, "perSecond": per_second,
                "webhooksPending": self.pending_webhooks()}


async def _serve(host: str, port: int, **options) -> None:
    sim = GatewaySimulator(**options)
    url = await sim.start(host, port)
    log.info("gateway simulator listening", extra={"url": url, "rate": sim.rate, "mode": sim.mode})
    print(url, flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):  # pragma: no cover - not the main thread
            pass
    try:
        await stop.wait()
    finally:
        await sim.close()


def main(*, host: str = "127.0.0.1", port: int = 8099, rate: int = 200, decline_rate: float = 0.0,
         timeout_rate: float = 0.0, error_rate: float = 0.0, latency_ms: str = "0-0",
         webhook_url: str | None = None, webhook_secret: str | None = None,
         webhook_duplicate_rate: float = 0.0, webhook_delay_ms: str = "0-2000", seed: int = 0,
         mode: str = "strict", timeout_hold_seconds: float = 30.0) -> None:
    """`billing gateway-sim`: serve until SIGINT/SIGTERM."""
    asyncio.run(_serve(host, port, rate=rate, decline_rate=decline_rate, timeout_rate=timeout_rate,
                       error_rate=error_rate, latency_ms=parse_latency(latency_ms), webhook_url=webhook_url,
                       webhook_secret=webhook_secret, webhook_duplicate_rate=webhook_duplicate_rate,
                       webhook_delay_ms=parse_latency(webhook_delay_ms), seed=seed, mode=mode,
                       timeout_hold_seconds=timeout_hold_seconds))
