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
import hashlib
import json
import logging
import random
import signal
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import AsyncContextManager

from aiohttp import ClientSession, ClientTimeout, web

from billing import signing
from billing.gateway.arrival import arrival, stamp_arrivals
from billing.gateway.decisions import DECLINE_CODES, DecisionModel, chance, charge_id

__all__ = ["DECLINE_CODES", "Charge", "DecisionModel", "GatewaySimulator", "chance", "charge_id", "main",
           "parse_latency"]

log = logging.getLogger("billing.gateway.simulator")

WEBHOOK_MAX_TRIES = 6


def parse_latency(text: str) -> tuple[int, int]:
    """'50-300' -> (50, 300); '100' -> (100, 100)."""
    parts = str(text).split("-")
    try:
        lo, hi = (int(parts[0]), int(parts[-1])) if len(parts) in (1, 2) else (None, None)
    except ValueError:
        lo = hi = None
    if lo is None or lo < 0 or hi < lo:
        raise ValueError(f"latency must be MIN-MAX milliseconds, got {text!r}")
    return lo, hi


@dataclass
class Charge:
    idempotency_key: str
    customer_id: int
    amount: int
    currency: str
    status: str  # succeeded | declined
    id: str
    decline_code: str | None
    created: str

    def answer(self) -> dict:
        return {"id": self.id, "status": self.status, "declineCode": self.decline_code}

    def ledger_entry(self) -> dict:
        return {"idempotencyKey": self.idempotency_key, "customerId": self.customer_id, "amount": self.amount,
                "currency": self.currency, "status": self.status, "id": self.id}


@dataclass
class Refund:
    idempotency_key: str
    charge_key: str
    amount: int
    currency: str
    id: str

    def answer(self) -> dict:
        return {"id": self.id, "status": "succeeded", "amount": self.amount, "chargeKey": self.charge_key,
                "failureReason": None}

    def ledger_entry(self) -> dict:
        return {"idempotencyKey": self.idempotency_key, "chargeKey": self.charge_key, "amount": self.amount,
                "currency": self.currency, "status": "succeeded", "id": self.id}


class _Window:
    """Accepted calls of the last second or so (sorted), the worst second seen, and the excess.

    Calls are stamped when their bytes are read from the socket, so two handlers can run in the
    other order than their stamps: admitting a call at t checks every window that contains t
    (the one ending at t, and those ending at the few later stamps already admitted).
    """

    def __init__(self, rate: int, strict: bool) -> None:
        self.rate = rate
        self.strict = strict
        self.times: list[float] = []
        self.max_window = 0
        self.excess = 0

    def _worst_with(self, t: float) -> int:
        times = self.times
        ends = [t] + times[bisect.bisect_right(times, t):]
        return max(bisect.bisect_right(times, x) - bisect.bisect_right(times, x - 1.0) + 1 for x in ends)

    def admit(self, now: float) -> bool:
        times = self.times
        if times and times[0] < times[-1] - 2.0:
            del times[:bisect.bisect_left(times, times[-1] - 2.0)]
        worst = self._worst_with(now)
        if self.rate > 0 and worst > self.rate:
            if self.strict:
                return False
            self.excess += 1
        bisect.insort(times, now)
        if worst > self.max_window:
            self.max_window = worst
        return True

    def retry_after(self, now: float) -> float:
        inside = [x for x in self.times if x > now - 1.0]
        return max(0.0, inside[0] + 1.0 - now) if inside else 1.0


class GatewaySimulator:
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

    async def _handle_refund(self, request: web.Request) -> web.Response:
        """`POST /v1/refunds` `{"chargeKey", "amount"}` with `Idempotency-Key`: refunds part of a
        succeeded charge, once per key (the same key again answers the stored refund; other
        parameters: 409). Never more than the charge has left (400 `amount_too_large`)."""
        now = arrival(request)
        if not self._window.admit(now):
            self.counters["rateLimited"] += 1
            return web.json_response(
                {"error": {"code": "rate_limited", "message": f"more than {self.rate} calls in one second"}},
                status=429, headers={"Retry-After": str(max(1, round(self._window.retry_after(now))))})
        self.counters["accepted"] += 1
        key = request.headers.get("Idempotency-Key", "")
        try:
            body = await request.json()
            charge_key, amount = body["chargeKey"], body["amount"]
            valid = (key and len(key) <= 255 and isinstance(charge_key, str) and isinstance(amount, int)
                     and not isinstance(amount, bool) and amount > 0)
        except (ValueError, KeyError, TypeError):
            valid = False
        if not valid:
            self.counters["badRequests"] += 1
            return web.json_response({"error": {"code": "invalid_request", "message":
                                      "Idempotency-Key header, chargeKey and a positive integer amount are required"}},
                                     status=400)
        calls = self._calls[key] = self._calls.get(key, 0) + 1
        latency = self._latency()
        existing = self._refunds.get(key)
        if existing is not None:
            if (existing.charge_key, existing.amount) != (charge_key, amount):
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
        charge = self._charges.get(charge_key)
        if charge is None or charge.status != "succeeded":
            self.counters["refundsRefused"] += 1
            return web.json_response({"error": {"code": "charge_not_refundable", "message":
                                      "no succeeded charge has this key"}}, status=400)
        left = charge.amount - self._refunded.get(charge_key, 0)
        if amount > left:
            self.counters["refundsRefused"] += 1
            return web.json_response({"error": {"code": "amount_too_large", "message":
                                      f"the charge has {left} left to refund"}}, status=400)
        # No await between the checks above and these writes: one key refunds once.
        refund = Refund(key, charge_key, amount, charge.currency,
                        "re_" + hashlib.sha256(f"{self.seed}:{key}:refund".encode()).hexdigest()[:20])
        self._refunds[key] = refund
        self._refunded[charge_key] = self._refunded.get(charge_key, 0) + amount
        if self.decisions.times_out(key, calls):
            self.counters["timeouts"] += 1
            await asyncio.sleep(self.timeout_hold_seconds)
        else:
            await asyncio.sleep(latency)
        return web.json_response(refund.answer())

    async def _handle_lookup(self, request: web.Request) -> web.Response:
        """`GET /v1/charges?idempotencyKey=K`: the charge made for K (200, as the charge call
        answered it, plus amount, currency, customerId), or 404 when K was never charged."""
        key = request.query.get("idempotencyKey", "")
        if not key or len(key) > 255:
            self.counters["badRequests"] += 1
            return web.json_response({"error": {"code": "invalid_request", "message":
                                      "the idempotencyKey query parameter is required"}}, status=400)
        self.counters["lookups"] += 1
        calls = self._lookups[key] = self._lookups.get(key, 0) + 1
        await asyncio.sleep(self._latency())
        if self.decisions.lookup_fails(key, calls):
            self.counters["errors"] += 1
            return web.json_response({"error": {"code": "internal", "message": "simulated gateway failure"}},
                                     status=500)
        charge = self._charges.get(key)
        if charge is None:
            return web.json_response({"error": {"code": "not_found", "message": "no charge has this idempotency key"}},
                                     status=404)
        return web.json_response({**charge.answer(), "amount": charge.amount, "currency": charge.currency,
                                  "customerId": charge.customer_id, "idempotencyKey": key})

    async def _handle_refund_lookup(self, request: web.Request) -> web.Response:
        """`GET /v1/refunds?idempotencyKey=K`: the refund made with K (200, as the refund call
        answered it, plus its key), or 404 when K never refunded anything."""
        key = request.query.get("idempotencyKey", "")
        if not key or len(key) > 255:
            self.counters["badRequests"] += 1
            return web.json_response({"error": {"code": "invalid_request", "message":
                                      "the idempotencyKey query parameter is required"}}, status=400)
        self.counters["lookups"] += 1
        calls = self._lookups[key] = self._lookups.get(key, 0) + 1
        await asyncio.sleep(self._latency())
        if self.decisions.lookup_fails(key, calls):
            self.counters["errors"] += 1
            return web.json_response({"error": {"code": "internal", "message": "simulated gateway failure"}},
                                     status=500)
        refund = self._refunds.get(key)
        if refund is None:
            return web.json_response({"error": {"code": "not_found", "message": "no refund has this idempotency key"}},
                                     status=404)
        return web.json_response({**refund.answer(), "idempotencyKey": key})

    # -- the customer's authentication (3-D Secure) ----------------------------------------------

    def _by_id(self, charge_id_: str) -> Charge | None:
        return next((c for c in self._charges.values() if c.id == charge_id_), None)

    async def _handle_confirm(self, request: web.Request) -> web.Response:
        charge = self._by_id(request.match_info["id"])
        if charge is None:
            return web.json_response({"error": {"code": "not_found", "message": "no such charge"}}, status=404)
        try:
            body = await request.json()
            return_url = body.get("returnUrl") if isinstance(body, dict) else None
        except ValueError:
            return_url = None
        if not isinstance(return_url, str) or not return_url.startswith(("http://", "https://")) or len(return_url) > 2000:
            return web.json_response({"error": {"code": "invalid_request", "message": "returnUrl (http or https) is required"}},
                                     status=400)
        if charge.status == "declined" and charge.decline_code == "authentication_required":
            from urllib.parse import urlencode

            url = f"{self.url}/authenticate/{charge.id}?{urlencode({'returnUrl': return_url})}"
            return web.json_response({**charge.answer(), "status": "requires_action",
                                      "nextAction": {"redirectUrl": url}})
        return web.json_response(charge.answer())

    async def _handle_charge_by_id(self, request: web.Request) -> web.Response:
        charge = self._by_id(request.match_info["id"])
        if charge is None:
            return web.json_response({"error": {"code": "not_found", "message": "no such charge"}}, status=404)
        return web.json_response({**charge.answer(), "amount": charge.amount, "currency": charge.currency,
                                  "customerId": charge.customer_id})

    async def _handle_auth_page(self, request: web.Request) -> web.Response:
        import html

        charge = self._by_id(request.match_info["id"])
        if charge is None or charge.decline_code != "authentication_required":
            return web.Response(status=404, text="no payment waits for authentication here")
        back = html.escape(request.query.get("returnUrl", ""))
        page = (f"<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>Authenticate the payment</title>"
                f"</head><body><main><h1>Authenticate the payment</h1><p>The simulated bank asks you to confirm "
                f"the payment of {charge.amount} (minor units) {html.escape(charge.currency)}.</p>"
                f"<form method=\"post\"><input type=\"hidden\" name=\"returnUrl\" value=\"{back}\">"
                f"<button name=\"decision\" value=\"approve\" type=\"submit\">Approve</button> "
                f"<button name=\"decision\" value=\"fail\" type=\"submit\">Fail authentication</button>"
                f"</form></main></body></html>")
        return web.Response(text=page, content_type="text/html")

    async def _handle_auth_decision(self, request: web.Request) -> web.Response:
        charge = self._by_id(request.match_info["id"])
        if charge is None or charge.decline_code != "authentication_required":
            return web.Response(status=404, text="no payment waits for authentication here")
        form = await request.post()
        if form.get("decision") == "approve" and charge.status == "declined":
            charge.status = "succeeded"  # the decline code stays: it says why it waited
            self.counters["authenticated"] += 1
            self._announce(charge, suffix="authenticated")
        back = str(form.get("returnUrl") or "")
        if back.startswith(("http://", "https://")):
            raise web.HTTPSeeOther(back)
        return web.Response(text="done", content_type="text/plain")

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

    # -- webhooks ------------------------------------------------------------------------------

    def _announce(self, charge: Charge, suffix: str = "") -> None:
        if not self.webhook_url:
            return
        self._event_seq += 1
        event = {"eventId": "evt_" + hashlib.sha256(f"{self.seed}:{charge.idempotency_key}:event{suffix}".encode())
                 .hexdigest()[:24],
                 "type": f"charge.{charge.status}", "idempotencyKey": charge.idempotency_key,
                 "status": charge.status, "id": charge.id, "declineCode": charge.decline_code,
                 "amount": charge.amount, "currency": charge.currency, "customerId": charge.customer_id,
                 "created": charge.created}
        copies = 2 if self._rng.random() < self.webhook_duplicate_rate else 1
        for _ in range(copies):
            lo, hi = self.webhook_delay_ms
            delay = self._rng.uniform(lo, hi) / 1000
            task = asyncio.get_running_loop().create_task(self._deliver(event, delay))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _deliver(self, event: dict, delay: float) -> None:
        await asyncio.sleep(delay)
        if self.webhook_gate is None:
            await self._send(event)
        else:
            async with self.webhook_gate:
                await self._send(event)

    async def _send(self, event: dict) -> None:
        body = json.dumps(event, separators=(",", ":")).encode()
        backoff = 0.5
        for attempt in range(1, WEBHOOK_MAX_TRIES + 1):
            self.counters["webhookAttempts"] += 1
            headers = {"Content-Type": "application/json",
                       "Billing-Signature": signing.signature_header(self.webhook_secret, body)}
            try:
                assert self._session is not None
                async with self._session.post(self.webhook_url, data=body, headers=headers) as resp:
                    await resp.read()
                    if 200 <= resp.status < 300:
                        self.counters["webhooksDelivered"] += 1
                        return
                    log.debug("webhook refused", extra={"status": resp.status, "eventId": event["eventId"]})
            except Exception as exc:  # noqa: BLE001 - any failure is retried
                log.debug("webhook delivery failed", extra={"error": repr(exc), "attempt": attempt})
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 30)
        self.counters["webhooksFailed"] += 1
        log.warning("webhook given up", extra={"eventId": event["eventId"]})


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
