"""Stripe through its REST API: `BILLING_GATEWAY_PROVIDER=stripe` (docs/providers.md).

Calls (form-encoded, `Authorization: Bearer <BILLING_STRIPE_API_KEY>`, the attempt's key as
`Idempotency-Key`), made with the worker's aiohttp session (the official `stripe` package was
measured and not used: docs/providers.md says why):

* charge: `POST /v1/payment_intents` amount, currency (lower case), customer, payment_method,
  off_session=true, confirm=true, metadata[invoice_id], metadata[customer_id] and
  metadata[idempotency_key] (the webhook and the lookup find the attempt by them);
* refund: `POST /v1/refunds` payment_intent, amount, metadata[refund_key], metadata[invoice_id];
* lookup of a charge: `GET /v1/payment_intents?customer=<cus>&created[gte]=<two days ago>&limit=100`
  (pages followed), the intent whose metadata[idempotency_key] is the key (not the Search API:
  its index lags writes by up to a minute and it is not offered in every region; not the replay of
  the same key either: a replay of a key Stripe never saw would charge);
* lookup of a refund: `GET /v1/refunds?payment_intent=<pi>&limit=100`, the refund whose
  metadata[refund_key] is the key.

| Stripe answers | the SQL API gets |
|---|---|
| 200, status `succeeded` | SUCCEEDED, reference = the payment intent id |
| 402 `card_declined` with `decline_code` D | DECLINED, reason D (hard when D is in `HARD_DECLINES`) |
| 402 other card error code C (`expired_card`, `incorrect_cvc`, ...) | DECLINED, reason C (hard likewise) |
| 402 `authentication_required`, or 200 `requires_action` | DECLINED `authentication_required`, hard (the customer must act) |
| 200 `requires_payment_method` with `last_payment_error` | DECLINED like a 402 |
| 200 `processing` (or any other status) | UNKNOWN (the webhook or the lookup tells) |
| 429 | nothing: RateLimited (neither a decline nor an attempt) |
| 5xx, timeout, connection error | UNKNOWN |
| 400 `idempotency_error` | UNKNOWN with `key_conflict` (the key with other parameters): looked up at once |
| 409 | UNKNOWN, logged (the key in use by a concurrent request) |
| other 4xx | UNKNOWN, logged as an error |

Webhooks (`POST /webhooks/stripe`): `Stripe-Signature: t=<unix>,v1=<hex HMAC-SHA256(secret,
"<t>.<body>")>` (several v1 during a secret rotation; v0 ignored), 300 s tolerance.
`payment_intent.succeeded` / `payment_intent.payment_failed` are charge outcomes for the key in
the intent's metadata; `charge.refunded` settles each refund it lists that carries our
`refund_key` (a charge that does not list them, as from API version 2022-11-15: the refunds of its
payment intent are read, complete_webhook); `refund.created` / `refund.updated` / `refund.failed`
(and the older `charge.refund.updated`) settle the refund they carry: succeeded, or failed /
canceled (even after it had succeeded). Other events are acknowledged and ignored.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import urllib.parse
from collections.abc import Mapping

import aiohttp
from aiohttp import payload

from billing import metrics, signing
from billing.gateway.client import (DECLINED, FAILED, SUCCEEDED, UNKNOWN, ChargeResult, GatedBody, LookupFailed,
                                    NotSent, RateLimited, RefundResult, _retry_after)
from billing.providers.base import ChargeRequest, Gate, RefundRequest, WebhookOutcome, WebhookRejected

log = logging.getLogger("billing.providers.stripe")

DEFAULT_API_BASE = "https://api.stripe.com"
SIGNATURE_TOLERANCE = signing.SIGNATURE_TOLERANCE  # 300 s both ways (Stripe's libraries use the same default)
# A charge is looked up among the customer's payment intents created this long before the lookup:
# lookups come within the key's lifetime (23 hours by default, Stripe keeps keys 24 hours).
LOOKUP_WINDOW_SECONDS = 48 * 3600

# Decline codes that say the card (or the way it was used) will not work again: retrying on the
# schedule is pointless, the customer must give another method (Stripe's decline codes
# documentation: "the customer needs to use another card" / "do not retry"). Every other code
# (insufficient_funds, generic_decline, try_again_later, processing_error, do_not_honor, ...) is
# soft: the dunning schedule retries it.
HARD_DECLINES = frozenset({
    "authentication_required", "card_not_supported", "currency_not_supported", "do_not_try_again",
    "expired_card", "fraudulent", "incorrect_number", "invalid_account", "invalid_expiry_month",
    "invalid_expiry_year", "invalid_number", "lost_card", "merchant_blacklist", "new_account_information_available",
    "not_permitted", "pickup_card", "restricted_card", "revocation_of_all_authorizations",
    "revocation_of_authorization", "security_violation", "service_not_allowed", "stolen_card",
    "stop_payment_order", "transaction_not_allowed",
})


def decline(code: str | None, reference: str | None = None) -> ChargeResult:
    code = code or "card_declined"
    return ChargeResult(DECLINED, reference=reference, reason=code, hard_decline=code in HARD_DECLINES)


def _error_decline(error: dict) -> ChargeResult:
    """A card error (402, or an intent's last_payment_error) as a decline."""
    intent = error.get("payment_intent") if isinstance(error.get("payment_intent"), dict) else {}
    code = error.get("code")
    if code == "card_declined":
        code = error.get("decline_code") or code
    return decline(code, intent.get("id"))


class StripeProvider:
    name = "stripe"
    webhook_path = "/webhooks/stripe"

    def __init__(self, api_key: str, *, api_base: str = DEFAULT_API_BASE, webhook_secrets: list[str] | None = None,
                 timeout: float = 10.0, connect_timeout: float = 3.0) -> None:
        self.api_key = api_key
        self.api_base = api_base.rstrip("/")
        self.webhook_secrets = webhook_secrets or []
        self.timeout = timeout
        self._timeout = aiohttp.ClientTimeout(total=timeout, connect=min(connect_timeout, timeout))
        self._session: aiohttp.ClientSession | None = None

    @classmethod
    def from_settings(cls, settings, *, timeout: float) -> "StripeProvider":
        if not settings.stripe_api_key:
            raise ValueError("BILLING_STRIPE_API_KEY (or BILLING_STRIPE_API_KEY_FILE) is required with the stripe provider")
        return cls(settings.stripe_api_key or "", api_base=settings.stripe_api_base,
                   webhook_secrets=[s for s in (settings.stripe_webhook_secret or "").split(",") if s],
                   timeout=timeout)

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=30), timeout=self._timeout,
                headers={"Authorization": f"Bearer {self.api_key}"})
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    # -- calls -----------------------------------------------------------------------------------

    async def _post(self, path: str, key: str, form: list[tuple[str, str]], gate: Gate | None) -> tuple[int, dict | None, str]:
        """POST a form with `Idempotency-Key`; (status, JSON body or None, text). Raises RateLimited,
        NotSent, and asyncio.TimeoutError / aiohttp.ClientError / OSError for the caller to map."""
        body = urllib.parse.urlencode(form).encode()
        ctype = "application/x-www-form-urlencoded"
        data = GatedBody(body, gate, ctype) if gate is not None else payload.BytesPayload(body, content_type=ctype)
        try:
            async with self._get_session().post(f"{self.api_base}{path}", data=data,
                                                headers={"Idempotency-Key": key}) as resp:
                if resp.status == 429:
                    raise RateLimited(_retry_after(resp.headers.get("Retry-After")))
                text = await resp.text()
                status = resp.status
        except (asyncio.TimeoutError, aiohttp.ClientError, OSError):
            if isinstance(data, GatedBody) and data.held_back():
                raise NotSent() from None
            raise
        try:
            doc = json.loads(text)
            doc = doc if isinstance(doc, dict) else None
        except ValueError:
            doc = None
        return status, doc, text

    # -- the customer's authentication (3-D Secure), on session, from the portal ----------------

    async def confirm_intent(self, intent_id: str, *, return_url: str, key: str) -> dict:
        """Confirm a payment intent the customer must authenticate (docs/customers.md): Stripe answers
        `requires_action` with `next_action.redirect_to_url.url` (its 3-D Secure page, which sends the
        customer back to `return_url`), or a final status. The intent keeps its payment method."""
        status, doc, text = await self._post(f"/v1/payment_intents/{urllib.parse.quote(intent_id)}/confirm", key,
                                             [("return_url", return_url)], None)
        if doc is None or status >= 500:
            raise LookupFailed(f"confirm answered {status}: {text[:200]}", status)
        error = doc.get("error")
        if isinstance(error, dict):
            return error.get("payment_intent") if isinstance(error.get("payment_intent"), dict) else {"status": "error", "error": error}
        return doc

    # -- a card the customer adds on the portal: a SetupIntent (off-session use later) -------------

    async def _get(self, path: str) -> dict:
        async with self._get_session().get(f"{self.api_base}{path}") as resp:
            text = await resp.text()
            if resp.status != 200:
                raise LookupFailed(f"GET {path}: {resp.status}", resp.status)
        doc = json.loads(text)
        if not isinstance(doc, dict):
            raise LookupFailed(f"GET {path}: not an object")
        return doc

    async def create_customer(self, customer_id: int, email: str | None, *, key: str) -> str:
        """A Stripe customer for ours (its id is the payment method's customer reference)."""
        form = [("metadata[customer_id]", str(customer_id))] + ([("email", email)] if email else [])
        status, doc, text = await self._post("/v1/customers", key, form, None)
        if doc is None or status >= 300 or not isinstance(doc.get("id"), str):
            raise LookupFailed(f"create customer answered {status}: {text[:200]}", status)
        return doc["id"]

    async def setup_card(self, customer_ref: str, customer_id: int, payment_method: str, *, return_url: str,
                         key: str) -> dict:
        """Create and confirm a SetupIntent for off-session charges with `payment_method` (docs/customers.md):
        `succeeded`, `requires_action` (its `next_action.redirect_to_url`), or an error's setup intent."""
        form = [("customer", customer_ref), ("payment_method", payment_method), ("confirm", "true"),
                ("usage", "off_session"), ("payment_method_types[]", "card"), ("return_url", return_url),
                ("metadata[customer_id]", str(customer_id))]
        status, doc, text = await self._post("/v1/setup_intents", key, form, None)
        if doc is None or status >= 500:
            raise LookupFailed(f"setup intent answered {status}: {text[:200]}", status)
        error = doc.get("error")
        if isinstance(error, dict):
            found = error.get("setup_intent")
            return found if isinstance(found, dict) else {"status": "error", "error": error}
        return doc

    async def retrieve_setup_intent(self, setup_intent_id: str) -> dict:
        return await self._get(f"/v1/setup_intents/{urllib.parse.quote(setup_intent_id)}")

    async def retrieve_payment_method(self, payment_method_id: str) -> dict:
        return await self._get(f"/v1/payment_methods/{urllib.parse.quote(payment_method_id)}")

    async def retrieve_intent(self, intent_id: str) -> dict:
        """The payment intent as Stripe has it now (after the customer came back from its page)."""
        async with self._get_session().get(f"{self.api_base}/v1/payment_intents/{urllib.parse.quote(intent_id)}") as resp:
            text = await resp.text()
            if resp.status != 200:
                raise LookupFailed(f"payment intent {intent_id}: {resp.status}", resp.status)
        return json.loads(text)

    async def charge(self, request: ChargeRequest, *, gate: Gate | None = None) -> ChargeResult:
        if not isinstance(request.amount, int) or isinstance(request.amount, bool):
            raise TypeError("amount must be an int in the currency's smallest unit")
        if not request.payment_method_ref:
            # claim_charges never hands a real provider an invoice without a method; if it did,
            # nothing is sent and the invoice comes back after its lease.
            log.error("no payment method to charge", extra={"key": request.idempotency_key})
            return ChargeResult(UNKNOWN, reason="no payment method")
        form = [("amount", str(request.amount)), ("currency", request.currency.lower())]
        if request.customer_ref:
            form.append(("customer", request.customer_ref))
        form += [("payment_method", request.payment_method_ref), ("off_session", "true"), ("confirm", "true"),
                 ("metadata[invoice_id]", str(request.invoice_id)),
                 ("metadata[customer_id]", str(request.customer_id)),
                 ("metadata[idempotency_key]", request.idempotency_key)]
        started = time.monotonic()
        try:
            status, doc, text = await self._post("/v1/payment_intents", request.idempotency_key, form, gate)
        except NotSent:
            raise
        except RateLimited:
            metrics.GATEWAY_LATENCY.observe(time.monotonic() - started)
            metrics.CHARGES.labels("RATE_LIMITED").inc()
            raise
        except asyncio.TimeoutError:
            result = ChargeResult(UNKNOWN, reason=f"timeout after {self.timeout:g} s")
        except (aiohttp.ClientError, OSError) as exc:
            result = ChargeResult(UNKNOWN, reason=f"connection error: {type(exc).__name__}")
        else:
            result = self._charge_answer(request.idempotency_key, status, doc, text)
        metrics.GATEWAY_LATENCY.observe(time.monotonic() - started)
        metrics.CHARGES.labels(result.outcome).inc()
        return result

    def _charge_answer(self, key: str, status: int, doc: dict | None, text: str) -> ChargeResult:
        if status >= 500:
            return ChargeResult(UNKNOWN, reason=f"stripe answered {status}")
        if doc is None:
            return ChargeResult(UNKNOWN, reason="unreadable stripe answer")
        if status == 200:
            return intent_result(doc)
        error = doc.get("error") if isinstance(doc.get("error"), dict) else {}
        if status == 402 and error.get("type") == "card_error":
            return _error_decline(error)
        if error.get("type") == "idempotency_error" or status == 409:
            # The key was used with other parameters, or is in use by a concurrent request: the
            # charge's fate is not known from this answer; the same key later (or its lookup) tells.
            # Only the first is a conflict (400 idempotency_error): the look-up then says what the
            # key holds (billing.worker.charging); a key in use (409) is asked again later.
            log.warning("stripe idempotency error", extra={"key": key, "status": status, "body": text[:500]})
            return ChargeResult(UNKNOWN, reason=f"idempotency error: {error.get('message', status)}"[:300],
                                key_conflict=status != 409 and error.get("type") == "idempotency_error")
        log.error("stripe refused a charge", extra={"key": key, "status": status, "body": text[:500]})
        return ChargeResult(UNKNOWN, reason=f"stripe answered {status}: {error.get('code') or error.get('type')}")

    async def refund(self, request: RefundRequest, *, gate: Gate | None = None) -> RefundResult:
        if not request.charge_reference:
            log.error("refund without the charge's payment intent", extra={"key": request.idempotency_key})
            return RefundResult(FAILED, reason="no payment intent to refund")
        form = [("payment_intent", request.charge_reference), ("amount", str(request.amount)),
                ("metadata[refund_key]", request.idempotency_key), ("metadata[invoice_id]", str(request.invoice_id))]
        try:
            status, doc, text = await self._post("/v1/refunds", request.idempotency_key, form, gate)
        except (NotSent, RateLimited):
            raise
        except asyncio.TimeoutError:
            return RefundResult(UNKNOWN, reason=f"timeout after {self.timeout:g} s")
        except (aiohttp.ClientError, OSError) as exc:
            return RefundResult(UNKNOWN, reason=f"connection error: {type(exc).__name__}")
        if status >= 500 or doc is None:
            return RefundResult(UNKNOWN, reason=f"stripe answered {status}")
        if status == 200:
            return refund_result(doc)
        error = doc.get("error") if isinstance(doc.get("error"), dict) else {}
        if error.get("type") == "idempotency_error" or status == 409:
            log.warning("stripe idempotency error", extra={"key": request.idempotency_key, "body": text[:500]})
            return RefundResult(UNKNOWN, reason="idempotency error")
        # Refused for good (charge_already_refunded, amount too large, ...): FAILED, logged.
        log.error("stripe refused a refund", extra={"key": request.idempotency_key, "status": status, "body": text[:500]})
        return RefundResult(FAILED, reason=error.get("code") or error.get("type") or f"stripe answered {status}")

    async def _list(self, path: str, params: dict[str, str], *, pages: int = 20) -> list[dict]:
        """Every object of a Stripe list endpoint (`limit=100`, following `starting_after` while
        `has_more`, at most `pages` pages). Raises LookupFailed when Stripe cannot say."""
        found: list[dict] = []
        params = {**params, "limit": "100"}
        for _ in range(pages):
            try:
                async with self._get_session().get(f"{self.api_base}{path}", params=params) as resp:
                    text = await resp.text()
                    status = resp.status
            except (asyncio.TimeoutError, aiohttp.ClientError, OSError) as exc:
                raise LookupFailed(type(exc).__name__) from None
            try:
                if status != 200:
                    raise ValueError(f"stripe answered {status}: {text[:200]}")
                doc = json.loads(text)
                data = [o for o in doc["data"] if isinstance(o, dict)]
                more = bool(doc.get("has_more"))
            except (ValueError, KeyError, TypeError) as exc:
                raise LookupFailed(str(exc), status) from None
            found += data
            if not more or not data or not isinstance(data[-1].get("id"), str):
                return found
            params["starting_after"] = data[-1]["id"]
        raise LookupFailed(f"more than {pages * 100} objects to read at {path}")

    async def lookup(self, idempotency_key: str, *, customer_ref: str | None = None,
                     since: float | None = None) -> ChargeResult | None:
        """The payment intent made with `idempotency_key`, found by its metadata among the
        customer's payment intents of the last two days (`GET /v1/payment_intents?customer=&created[gte]=`,
        a list endpoint: no search index lag, and available where the Search API is not); None when
        there is none, LookupFailed when Stripe cannot say. Every charge of ours names the customer
        (a method without a customer reference cannot be charged off-session)."""
        if not customer_ref:
            metrics.KEY_LOOKUPS.labels("FAILED").inc()
            raise LookupFailed("no Stripe customer to list the payment intents of")
        since = int(since if since is not None else time.time() - LOOKUP_WINDOW_SECONDS)
        try:
            intents = await self._list("/v1/payment_intents", {"customer": customer_ref, "created[gte]": str(since)})
        except LookupFailed:
            metrics.KEY_LOOKUPS.labels("FAILED").inc()
            raise
        found = [pi for pi in intents if (pi.get("metadata") or {}).get("idempotency_key") == idempotency_key]
        if not found:
            metrics.KEY_LOOKUPS.labels("NOT_FOUND").inc()
            return None
        result = intent_result(found[0])
        if result.outcome == UNKNOWN:
            metrics.KEY_LOOKUPS.labels("FAILED").inc()
            raise LookupFailed(result.reason or "undecided")
        metrics.KEY_LOOKUPS.labels("FOUND").inc()
        return result

    async def refunds_of(self, payment_intent: str) -> list[dict]:
        """The refunds of a payment intent (`GET /v1/refunds?payment_intent=`)."""
        return await self._list("/v1/refunds", {"payment_intent": payment_intent})

    async def lookup_refund(self, request: RefundRequest) -> RefundResult | None:
        """The refund made with the request's key, found by its metadata (refund_key) among the
        refunds of the charge's payment intent; None when there is none (nothing was refunded with
        that key), LookupFailed when Stripe cannot say or the refund is still pending."""
        if not request.charge_reference:
            metrics.KEY_LOOKUPS.labels("FAILED").inc()
            raise LookupFailed("no payment intent to list the refunds of")
        try:
            refunds = await self.refunds_of(request.charge_reference)
        except LookupFailed:
            metrics.KEY_LOOKUPS.labels("FAILED").inc()
            raise
        found = [r for r in refunds if (r.get("metadata") or {}).get("refund_key") == request.idempotency_key]
        if not found:
            metrics.KEY_LOOKUPS.labels("NOT_FOUND").inc()
            return None
        result = refund_result(found[0])
        if result.outcome == UNKNOWN:
            metrics.KEY_LOOKUPS.labels("FAILED").inc()
            raise LookupFailed(result.reason or "pending")
        metrics.KEY_LOOKUPS.labels("FOUND").inc()
        return result

    async def complete_webhook(self, outcomes: list[WebhookOutcome]) -> list[WebhookOutcome]:
        """Outcomes that need Stripe's data (a `charge.refunded` whose refunds are not in the event,
        as with API versions from 2022-11-15): the refunds of its payment intent are read and each
        of ours settled. LookupFailed when Stripe cannot say (the webhook is answered 5xx and
        Stripe delivers it again)."""
        done: list[WebhookOutcome] = []
        for outcome in outcomes:
            if outcome.kind != "refund_lookup":
                done.append(outcome)
                continue
            for refund in await self.refunds_of(outcome.reference or ""):
                done += _refund_outcomes(outcome.event_id, refund)
        return done

    # -- webhooks --------------------------------------------------------------------------------

    def parse_webhook(self, headers: Mapping[str, str], body: bytes, now: float) -> list[WebhookOutcome]:
        verify_signature(headers.get("stripe-signature"), body, self.webhook_secrets, now)
        try:
            event = json.loads(body)
        except (ValueError, RecursionError):
            raise WebhookRejected("the body is not valid JSON", code="invalid_json") from None
        if not isinstance(event, dict) or not isinstance(event.get("id"), str) \
                or not isinstance((event.get("data") or {}).get("object"), dict):
            raise WebhookRejected("not a Stripe event (id, type, data.object)", code="invalid_json")
        return parse_event(event)


def intent_result(intent: dict) -> ChargeResult:
    """A payment intent's state as a charge outcome."""
    status, ref = intent.get("status"), intent.get("id")
    amount, currency = intent.get("amount"), intent.get("currency")
    if status == "succeeded":
        return ChargeResult(SUCCEEDED, reference=ref,
                            amount=amount if isinstance(amount, int) and not isinstance(amount, bool) else None,
                            currency=currency.upper() if isinstance(currency, str) else None)
    if status == "requires_action":
        return decline("authentication_required", ref)
    error = intent.get("last_payment_error")
    if status == "requires_payment_method" and isinstance(error, dict) and error.get("code"):
        result = _error_decline(error)
        return ChargeResult(result.outcome, ref, result.reason, result.hard_decline)
    return ChargeResult(UNKNOWN, reference=ref, reason=f"payment intent {status!r}")


def refund_result(refund: dict) -> RefundResult:
    status, ref = refund.get("status"), refund.get("id")
    if status == "succeeded":
        return RefundResult(SUCCEEDED, reference=ref)
    if status in ("failed", "canceled"):
        return RefundResult(FAILED, reference=ref, reason=refund.get("failure_reason") or status)
    return RefundResult(UNKNOWN, reference=ref, reason=f"refund {status!r}")  # pending, requires_action


def parse_event(event: dict) -> list[WebhookOutcome]:
    """A verified Stripe event as the SQL API's outcomes (none for events we do not act on)."""
    kind, obj, event_id = event.get("type"), event["data"]["object"], event["id"]
    if kind in ("payment_intent.succeeded", "payment_intent.payment_failed"):
        metadata = obj.get("metadata") or {}
        key = metadata.get("idempotency_key")
        if not isinstance(key, str) or not key:
            return []  # not a charge of ours
        payload = {"stripeEventType": kind, "id": obj.get("id")}
        if isinstance(obj.get("amount"), int):
            payload["amount"] = obj["amount"]
        if isinstance(obj.get("currency"), str):
            payload["currency"] = obj["currency"].upper()
        if str(metadata.get("customer_id", "")).isdigit():
            payload["customerId"] = int(metadata["customer_id"])
        if kind == "payment_intent.succeeded":
            return [WebhookOutcome("charge", event_id, key, SUCCEEDED, obj.get("id"), None, False, payload)]
        error = obj.get("last_payment_error") if isinstance(obj.get("last_payment_error"), dict) else {}
        result = _error_decline(error) if error.get("code") else decline("card_declined")
        payload["declineCode"] = result.reason
        return [WebhookOutcome("charge", event_id, key, DECLINED, obj.get("id"), result.reason,
                               result.hard_decline, payload)]
    if kind == "charge.refunded":
        refunds = (obj.get("refunds") or {}).get("data") if isinstance(obj.get("refunds"), dict) else None
        if not isinstance(refunds, list):
            # Since API version 2022-11-15 a charge does not list its refunds (and an event's object
            # cannot be expanded): they are read from Stripe (complete_webhook).
            intent = obj.get("payment_intent")
            intent = intent.get("id") if isinstance(intent, dict) else intent
            if not isinstance(intent, str) or not intent:
                return []  # not a charge of a payment intent: not ours
            return [WebhookOutcome("refund_lookup", event_id, "", UNKNOWN, intent)]
        outcomes = []
        intent = obj.get("payment_intent")
        parent = {"payment_intent": intent.get("id") if isinstance(intent, dict) else intent,
                  "currency": obj.get("currency")}
        for refund in refunds:
            # a refund listed by its charge: the charge's intent and currency where it omits them
            if isinstance(refund, dict):
                refund = {**{k: v for k, v in parent.items() if v is not None}, **refund}
            outcomes += _refund_outcomes(event_id, refund)
        return outcomes
    if kind in ("refund.created", "refund.updated", "refund.failed", "charge.refund.updated"):
        # The refund itself: its status changed (failed or canceled after it was pending, or even
        # after it succeeded: the bank returned it).
        return _refund_outcomes(event_id, obj)
    return []


def _refund_outcomes(event_id: str, refund) -> list[WebhookOutcome]:
    """A refund object as the SQL API's outcome, if it is ours (metadata refund_key) and settled."""
    key = (refund.get("metadata") or {}).get("refund_key") if isinstance(refund, dict) else None
    if not isinstance(key, str) or not key:
        return []
    result = refund_result(refund)
    if result.outcome == UNKNOWN:
        return []  # pending: a later event (or the worker's look-up) settles it
    # What the SQL API compares with the refund the key names (apply_refund_webhook): the
    # provider's refund id, amount, currency and charge (the payment intent we refunded). A field
    # missing or of another type is sent as null: the refund is then held for review, not applied.
    intent = refund.get("payment_intent")
    intent = intent.get("id") if isinstance(intent, dict) else intent
    payload = {"refundId": refund.get("id") if isinstance(refund.get("id"), str) else None,
               "amount": refund.get("amount") if isinstance(refund.get("amount"), int)
               and not isinstance(refund.get("amount"), bool) else None,
               "currency": refund["currency"].upper() if isinstance(refund.get("currency"), str) else None,
               "charge": intent if isinstance(intent, str) else None}
    return [WebhookOutcome("refund", event_id, key, result.outcome, result.reference, result.reason,
                           payload=payload)]


def verify_signature(header: str | None, body: bytes, secrets: list[str], now: float,
                     tolerance: int = SIGNATURE_TOLERANCE) -> None:
    """Raises WebhookRejected unless a v1 of the `Stripe-Signature` header is the HMAC-SHA256 of
    "<t>.<body>" by one of `secrets`, with t within `tolerance` seconds of `now` (billing.signing)."""
    try:
        signing.verify(header, body, secrets, now, scheme=signing.STRIPE, tolerance=tolerance)
    except signing.SignatureError as exc:
        raise WebhookRejected(exc.message) from None
