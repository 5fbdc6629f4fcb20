"""The gateway simulator's refunds (billing.gateway.simulator, docs/gateway.md): `POST /v1/refunds`
and `GET /v1/refunds?idempotencyKey=K`, mixed into GatewaySimulator (its state: `_charges`,
`_refunds`, `_refunded`, `_window`, `decisions`, `counters`)."""

from __future__ import annotations

import asyncio
import hashlib

from aiohttp import web

from billing.gateway.arrival import arrival
from billing.gateway.records import Refund


class RefundRoutes:
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

    async def _handle_refund_lookup(self, request: web.Request) -> web.Response:
        """`GET /v1/refunds?idempotencyKey=K`: the refund made with K (200, as the refund call
        answered it, plus its key), or 404 when K never refunded anything."""
        key, refused = await self._lookup_checks(request)
        if refused is not None:
            return refused
        refund = self._refunds.get(key)
        if refund is None:
            return web.json_response({"error": {"code": "not_found", "message": "no refund has this idempotency key"}},
                                     status=404)
        return web.json_response({**refund.answer(), "idempotencyKey": key})
