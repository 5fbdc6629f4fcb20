"""The gateway protocol (docs/gateway.md) from the driver's side.

`POST /v1/charges` with `Idempotency-Key`, body `{"customerId", "amount", "currency"}`; the answer
`{"id", "status": "succeeded"|"declined", "declineCode"}` becomes SUCCEEDED or DECLINED.
`GET /v1/charges?idempotencyKey=` (`lookup`) asks what became of a key before it expires. Anything
that leaves the charge's fate open (timeout, 5xx, connection error, an answer we cannot read) is
UNKNOWN: the SQL API keeps the attempt count and retries with the same key, and the gateway's
idempotency turns that retry into the real result. A 429 is neither: `RateLimited` is raised and
the caller retries the same key after the rate limiter lets it.

aiohttp was chosen by measurement (bench/http_client): with 100 calls in flight it keeps every
call on its own keep-alive connection, where httpx's pool fell far behind (bench/README.md).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import aiohttp
from aiohttp import payload

from billing import metrics

log = logging.getLogger("billing.gateway")

SUCCEEDED, DECLINED, UNKNOWN, NOT_FOUND, FAILED = "SUCCEEDED", "DECLINED", "UNKNOWN", "NOT_FOUND", "FAILED"
# A key the gateway holds for a charge of other parameters, found by its look-up (the SQL API sends
# the invoice to REVIEW, reason KEY_CONFLICT: billing.worker.charging, docs/gateway.md).
CONFLICT = "CONFLICT"


@dataclass(frozen=True)
class ChargeResult:
    outcome: str  # SUCCEEDED | DECLINED | UNKNOWN | NOT_FOUND (the SQL API's payment outcomes)
    reference: str | None = None  # the gateway's charge id
    reason: str | None = None  # decline code, or why the outcome is unknown
    hard_decline: bool = False  # DECLINED and retrying the same method is pointless (docs/providers.md)
    # The gateway refused the key as used with other parameters (the look-up says what it holds).
    key_conflict: bool = False
    amount: int | None = None  # a look-up's answer: what the gateway charged under the key
    currency: str | None = None


@dataclass(frozen=True)
class RefundResult:
    outcome: str  # SUCCEEDED | FAILED | UNKNOWN | NOT_FOUND (a look-up found nothing) (the SQL API's refund outcomes)
    reference: str | None = None  # the gateway's refund id
    reason: str | None = None  # why it failed, or why the outcome is unknown


class NotSent(Exception):
    """The gate said no right before the request's bytes would have gone out: nothing was sent."""


class GatedBody(payload.BytesPayload):
    """The request body, written only once `gate()` says yes, in the same step as the write.

    aiohttp holds the request line and headers back until the first body bytes (to send them in
    one segment), so when the gate refuses nothing at all has reached the gateway; when it agrees,
    the bytes are handed to the kernel before anything else runs in this event loop: no other task
    can delay the call between the rate limiter's grant and the gateway."""

    def __init__(self, body: bytes, gate: Callable[[], Awaitable[bool]], content_type: str = "application/json") -> None:
        super().__init__(body, content_type=content_type)
        self._gate = gate
        self.asked = False
        self.passed = False  # until then, nothing has been sent

    def held_back(self) -> bool:
        """The connection was there, the gate was asked and did not open: nothing went out."""
        return self.asked and not self.passed

    async def write_with_length(self, writer, content_length) -> None:
        self.asked = True
        grant = await self._gate()
        if not grant:
            raise NotSent()
        self.passed = True
        await super().write_with_length(writer, content_length)
        # Handed to the kernel, nothing left in the transport's buffer: tell the limiter when
        # (a Grant's `sent`, billing.limiter.two_step), so that the call's entry can be shortened.
        sent = getattr(grant, "sent", None)
        transport = getattr(writer, "transport", None)
        if sent is not None and transport is not None and transport.get_write_buffer_size() == 0:
            sent()


class LookupFailed(Exception):
    """The gateway could not say what became of a key (timeout, 5xx, an unreadable answer).
    `status`: the HTTP status of the provider's answer when it was not a success (a 4xx: it refused
    or does not know the object; a 5xx: it failed); None for a timeout, a connection error or a 2xx
    it could not read. Callers tell them apart by it, never by the message's text."""

    def __init__(self, message: str = "", status: int | None = None) -> None:
        super().__init__(message)
        self.status = status if status is not None and status >= 300 else None


class RateLimited(Exception):
    """The gateway answered 429: nothing was charged and no attempt is to be counted."""

    def __init__(self, retry_after: float | None = None) -> None:
        super().__init__(f"gateway rate limit (retry after {retry_after})")
        self.retry_after = retry_after


class GatewayClient:
    """One aiohttp session per process; no connection limit, so a granted slot never queues."""

    def __init__(self, base_url: str, *, timeout: float = 10.0, connect_timeout: float | None = 3.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self._timeout = aiohttp.ClientTimeout(total=timeout, connect=min(connect_timeout or timeout, timeout))
        self._session: aiohttp.ClientSession | None = None

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=30),
                timeout=self._timeout,
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> "GatewayClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def charge(self, idempotency_key: str, customer_id: int, amount: int, currency: str, *,
                     gate: Callable[[], Awaitable[bool]] | None = None,
                     payment_method: str | None = None) -> ChargeResult:
        """Charge once per key; raises RateLimited on 429. Money is an int, never a float.

        `gate`: awaited right before the request's bytes go out (the rate limiter's `use`); when
        it answers False nothing is sent and NotSent is raised."""
        if not isinstance(amount, int) or isinstance(amount, bool):
            raise TypeError("amount must be an int in the currency's smallest unit")
        started = time.monotonic()
        try:
            result = await self._post(idempotency_key, customer_id, amount, currency, gate, payment_method)
        except NotSent:
            raise
        except RateLimited:
            metrics.GATEWAY_LATENCY.observe(time.monotonic() - started)
            metrics.CHARGES.labels("RATE_LIMITED").inc()
            raise
        metrics.GATEWAY_LATENCY.observe(time.monotonic() - started)
        metrics.CHARGES.labels(result.outcome).inc()
        return result

    async def _look_up(self, kind: str, idempotency_key: str) -> dict | None:
        """`GET /v1/<kind>?idempotencyKey=`: the gateway's document about the key (with a "status"),
        None on 404 (nothing was done with the key), LookupFailed when the gateway cannot say."""
        session = self._get_session()
        try:
            async with session.get(f"{self.base_url}/v1/{kind}", params={"idempotencyKey": idempotency_key}) as resp:
                text = await resp.text()
                status = resp.status
        except (asyncio.TimeoutError, aiohttp.ClientError, OSError) as exc:
            metrics.KEY_LOOKUPS.labels("FAILED").inc()
            raise LookupFailed(f"{type(exc).__name__}") from None
        if status == 404:
            metrics.KEY_LOOKUPS.labels("NOT_FOUND").inc()
            return None
        try:
            if status != 200:
                raise ValueError(f"gateway answered {status}")
            doc = _loads(text)
            if not isinstance(doc, dict) or "status" not in doc:
                raise ValueError("the answer has no status")
            if doc.get("idempotencyKey", idempotency_key) != idempotency_key:
                raise ValueError("the answer is about another key")
        except (ValueError, KeyError, TypeError) as exc:
            metrics.KEY_LOOKUPS.labels("FAILED").inc()
            raise LookupFailed(str(exc), status) from None
        return doc

    async def lookup(self, idempotency_key: str) -> ChargeResult | None:
        """What became of the charge sent with `idempotency_key`: `GET /v1/charges?idempotencyKey=`.

        Returns its result (SUCCEEDED or DECLINED), None when the gateway never charged that key
        (404: a new key is safe), and raises LookupFailed when the gateway cannot say."""
        doc = await self._look_up("charges", idempotency_key)
        if doc is None:
            return None
        charge_status, reference = doc["status"], doc.get("id")
        if charge_status not in ("succeeded", "declined"):
            metrics.KEY_LOOKUPS.labels("FAILED").inc()
            raise LookupFailed(f"unknown status {charge_status!r}")
        metrics.KEY_LOOKUPS.labels("FOUND").inc()
        amount, currency = doc.get("amount"), doc.get("currency")
        amount = amount if isinstance(amount, int) and not isinstance(amount, bool) else None
        currency = currency.upper() if isinstance(currency, str) else None
        if charge_status == "succeeded":
            return ChargeResult(SUCCEEDED, reference=reference, amount=amount, currency=currency)
        return ChargeResult(DECLINED, reference=reference, reason=doc.get("declineCode") or "declined",
                            amount=amount, currency=currency)

    async def lookup_refund(self, idempotency_key: str) -> RefundResult | None:
        """What became of the refund sent with `idempotency_key`: `GET /v1/refunds?idempotencyKey=`.

        Returns its result (SUCCEEDED or FAILED), None when the gateway never refunded with that key
        (404: a new key is safe), and raises LookupFailed when the gateway cannot say."""
        doc = await self._look_up("refunds", idempotency_key)
        if doc is None:
            return None
        refund_status, reference = doc["status"], doc.get("id")
        if refund_status == "succeeded":
            metrics.KEY_LOOKUPS.labels("FOUND").inc()
            return RefundResult(SUCCEEDED, reference=reference)
        if refund_status == "failed":
            metrics.KEY_LOOKUPS.labels("FOUND").inc()
            return RefundResult(FAILED, reference=reference, reason=doc.get("failureReason") or "failed")
        metrics.KEY_LOOKUPS.labels("FAILED").inc()
        raise LookupFailed(f"refund status {refund_status!r}")

    async def refund(self, idempotency_key: str, charge_key: str, amount: int, *,
                     gate: Callable[[], Awaitable[bool]] | None = None) -> RefundResult:
        """`POST /v1/refunds` `{"chargeKey", "amount"}` with `Idempotency-Key`: refund (part of) the
        charge made with `charge_key`, once per key. Raises RateLimited on 429 and NotSent when the
        gate said no; 5xx, timeouts, connection errors and unreadable answers are UNKNOWN."""
        if not isinstance(amount, int) or isinstance(amount, bool):
            raise TypeError("amount must be an int in the currency's smallest unit")
        session = self._get_session()
        body = json.dumps({"chargeKey": charge_key, "amount": amount}, separators=(",", ":")).encode()
        data = GatedBody(body, gate) if gate is not None else payload.BytesPayload(
            body, content_type="application/json")
        try:
            async with session.post(f"{self.base_url}/v1/refunds", headers={"Idempotency-Key": idempotency_key},
                                    data=data) as resp:
                if resp.status == 429:
                    raise RateLimited(_retry_after(resp.headers.get("Retry-After")))
                text = await resp.text()
                status = resp.status
        except RateLimited:
            raise
        except (asyncio.TimeoutError, aiohttp.ClientError, OSError) as exc:
            if isinstance(data, GatedBody) and data.held_back():
                raise NotSent() from None
            return RefundResult(UNKNOWN, reason=f"refund call failed: {type(exc).__name__}")
        if status >= 500:
            return RefundResult(UNKNOWN, reason=f"gateway answered {status}")
        try:
            doc = _loads(text)
        except ValueError:
            return RefundResult(UNKNOWN, reason="unreadable gateway answer")
        if status != 200:
            # Refused for good (more than the charge has left, a charge that did not succeed):
            # FAILED, and a person reads the log.
            code = (doc.get("error") or {}).get("code") if isinstance(doc.get("error"), dict) else None
            log.error("gateway refused a refund", extra={"key": idempotency_key, "status": status, "body": text[:500]})
            return RefundResult(FAILED, reason=code or f"gateway answered {status}")
        refund_status = doc.get("status")
        if refund_status == "succeeded":
            return RefundResult(SUCCEEDED, reference=doc.get("id"))
        if refund_status == "failed":
            return RefundResult(FAILED, reference=doc.get("id"), reason=doc.get("failureReason") or "failed")
        return RefundResult(UNKNOWN, reference=doc.get("id"), reason=f"refund status {refund_status!r}")

    async def _post(self, key: str, customer_id: int, amount: int, currency: str,
                    gate: Callable[[], Awaitable[bool]] | None, payment_method: str | None = None) -> ChargeResult:
        session = self._get_session()
        doc = {"customerId": customer_id, "amount": amount, "currency": currency}
        if payment_method is not None:  # a recorded method; without one, the customer id is charged
            doc["paymentMethod"] = payment_method
        body = json.dumps(doc, separators=(",", ":")).encode()
        data = GatedBody(body, gate) if gate is not None else payload.BytesPayload(
            body, content_type="application/json")
        try:
            async with session.post(f"{self.base_url}/v1/charges", headers={"Idempotency-Key": key},
                                    data=data) as resp:
                if resp.status == 429:
                    raise RateLimited(_retry_after(resp.headers.get("Retry-After")))
                text = await resp.text()
                status = resp.status
        except RateLimited:
            raise
        except asyncio.TimeoutError:
            if isinstance(data, GatedBody) and data.held_back():
                raise NotSent() from None
            return ChargeResult(UNKNOWN, reason=f"timeout after {self.timeout:g} s")
        except (aiohttp.ClientError, OSError) as exc:
            if isinstance(data, GatedBody) and data.held_back():
                raise NotSent() from None
            return ChargeResult(UNKNOWN, reason=f"connection error: {type(exc).__name__}")
        if status >= 500:
            return ChargeResult(UNKNOWN, reason=f"gateway answered {status}")
        if status != 200:
            # A 4xx other than 429 should never happen (we send well-formed requests, one key per
            # try); UNKNOWN keeps the invoice and its key, and the log says what to look at. A 409
            # `idempotency_conflict` says the key names a charge of other parameters (a standby
            # promoted without the primary's last writes, a restored backup): the charger looks
            # the key up at once instead of resending it forever.
            log.error("gateway refused a charge", extra={"key": key, "status": status, "body": text[:500]})
            conflict = status == 409 and _error_code(text) == "idempotency_conflict"
            return ChargeResult(UNKNOWN, reason=f"gateway answered {status}"
                                + (": the key was used with other parameters" if conflict else ""),
                                key_conflict=conflict)
        try:
            doc = _loads(text)
            charge_status, reference = doc["status"], doc.get("id")
        except (ValueError, KeyError, TypeError):
            return ChargeResult(UNKNOWN, reason="unreadable gateway answer")
        if charge_status == "succeeded":
            return ChargeResult(SUCCEEDED, reference=reference)
        if charge_status == "declined":
            return ChargeResult(DECLINED, reference=reference, reason=doc.get("declineCode") or "declined")
        return ChargeResult(UNKNOWN, reference=reference, reason=f"unknown status {charge_status!r}")


def _error_code(text: str) -> str | None:
    """The `error.code` of a refusal's body, if it has one."""
    try:
        error = _loads(text).get("error")
    except (ValueError, TypeError):
        return None
    return error.get("code") if isinstance(error, dict) else None


def _loads(text: str) -> dict:
    doc = json.loads(text)
    if not isinstance(doc, dict):
        raise ValueError("not an object")
    return doc


def _retry_after(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None
