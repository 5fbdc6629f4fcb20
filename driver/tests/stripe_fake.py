"""A thin fake of Stripe's outcomes in front of stripe-mock.

stripe-mock (Stripe's own mock, a Go program the services scripts install) validates every request
against Stripe's OpenAPI description but answers canned objects: it cannot decline, time out or
rate limit. This fake forwards every request to stripe-mock first, so stripe-mock stays the judge
of each request's shape: a request it rejects is kept in `rejected` (a test asserts there is
none) and answered with stripe-mock's error. An accepted request is then answered by the fake with
stripe-mock's object, patched to the outcome the test asked for:

* by payment method (Stripe's test payment methods): `pm_card_visa` succeeds;
  `pm_card_chargeDeclinedInsufficientFunds` is a soft decline (402 card_declined /
  insufficient_funds); `pm_card_chargeDeclinedStolenCard` a hard one (stolen_card);
  `pm_card_authenticationRequired` answers 402 authentication_required; `pm_card_timeout`
  succeeds but holds the answer past the client's timeout;
* `rate_limit_next = n`: the next n POSTs answer 429 (nothing done); `fail_next_refund = n`: the
  next n refunds answer 500 (nothing done); `hold_next_refund = n`: the next n refunds are made and
  their answers held past the client's timeout;
* idempotency as Stripe's: the same key with the same parameters replays the first answer, with
  other parameters 400 idempotency_error;
* refunds never exceed what the payment intent has left (400 amount_too_large);
* `GET /v1/payment_intents?customer=C&created[gte]=T` lists the customer's intents made (the
  charge look-up), `GET /v1/refunds?payment_intent=P` the refunds of an intent (the refund look-up
  and a charge.refunded without its refunds); `GET /v1/payment_intents/search` still answers.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import time
import urllib.parse

import aiohttp
from aiohttp import web

CARDS = {"pm_card_visa": ("visa", "4242"), "pm_card_mastercard": ("mastercard", "4444"),
         "pm_card_amex": ("amex", "8431")}
DECLINES = {
    "pm_card_chargeDeclinedInsufficientFunds": ("card_declined", "insufficient_funds"),
    "pm_card_chargeDeclinedStolenCard": ("card_declined", "stolen_card"),
    "pm_card_authenticationRequired": ("authentication_required", None),
}
_QUERY = re.compile(r"^metadata\['idempotency_key'\]:'([^']+)'$")


class StripeFake:
    def __init__(self, mock_url: str, *, hold_seconds: float = 3.0) -> None:
        self.mock_url = mock_url.rstrip("/")
        self.hold_seconds = hold_seconds
        self.rate_limit_next = 0
        self.rejected: list[tuple[str, int, str]] = []  # (method path, status, stripe-mock's answer)
        self.requests: list[tuple[str, str, dict, str | None]] = []  # (method, path, form, Idempotency-Key)
        self.intents: dict[str, dict] = {}  # by idempotency key: the intent as answered
        self.answers: dict[str, tuple[tuple, int, dict]] = {}  # idempotency key -> (params, status, body)
        self.refunds: dict[str, dict] = {}
        self.refunded: dict[str, int] = {}  # payment intent id -> amount refunded
        self.rate_limited = 0
        self.list_calls = 0
        self.confirms = 0  # payment intents confirmed on session (the portal's payment page)
        self.setups: dict[str, dict] = {}  # SetupIntents by id (a card the customer adds on the portal)
        self.fail_next_refund = 0  # the next n refund POSTs answer 500 without refunding
        self.hold_next_refund = 0  # the next n refund POSTs refund, then hold their answer past the timeout
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self.url: str | None = None

    async def start(self) -> str:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
        return self.url

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    async def __aenter__(self) -> "StripeFake":
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    # -- the judge -------------------------------------------------------------------------------

    async def _judge(self, request: web.Request, body: bytes) -> tuple[int, dict | None]:
        headers = {k: v for k, v in request.headers.items()
                   if k.lower() in ("authorization", "content-type", "idempotency-key", "stripe-version")}
        async with self._session.request(request.method, f"{self.mock_url}{request.path_qs}", data=body or None,
                                         headers=headers) as resp:
            text = await resp.text()
            status = resp.status
        if status >= 300:
            self.rejected.append((f"{request.method} {request.path}", status, text[:500]))
            return status, None
        try:
            return status, await asyncio.to_thread(_json, text)
        except ValueError:
            self.rejected.append((f"{request.method} {request.path}", status, "stripe-mock answered no JSON"))
            return 500, None

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        form = {k: v[-1] for k, v in urllib.parse.parse_qs(body.decode(), keep_blank_values=True).items()}
        key = request.headers.get("Idempotency-Key")
        self.requests.append((request.method, request.path, form, key))
        status, mocked = await self._judge(request, body)
        if mocked is None:
            return web.json_response({"error": {"type": "invalid_request_error",
                                                "message": "stripe-mock rejected the request"}}, status=status)
        if request.method == "POST" and self.rate_limit_next > 0:
            self.rate_limit_next -= 1
            self.rate_limited += 1
            return web.json_response({"error": {"type": "rate_limit_error", "message": "Too many requests"}},
                                     status=429, headers={"Retry-After": "1"})
        if request.method == "POST" and request.path == "/v1/payment_intents":
            return await self._idempotent(key, form, lambda: self._intent(key, form, mocked))
        confirm = re.match(r"^/v1/payment_intents/([^/]+)/confirm$", request.path)
        if request.method == "POST" and confirm:
            # On session (the portal): 3-D Secure asked (its page), or the final status once done.
            intent = next((i for i in self.intents.values() if i["id"] == confirm.group(1)), None)
            if intent is None:
                return web.json_response({"error": {"type": "invalid_request_error", "code": "resource_missing"}}, status=404)
            if intent["status"] != "succeeded":
                intent.update(status="requires_action", last_payment_error=None,
                              next_action={"type": "redirect_to_url", "redirect_to_url": {
                                  "url": f"{self.url}/3ds/{intent['id']}", "return_url": form.get("return_url")}})
            self.confirms += 1
            return web.json_response(intent)
        if request.method == "POST" and request.path == "/v1/setup_intents":
            return await self._idempotent(key, form, lambda: self._setup(key, form, mocked))
        setup = re.match(r"^/v1/setup_intents/(seti_[^/]+)$", request.path)
        if request.method == "GET" and setup:
            found = self.setups.get(setup.group(1))
            return web.json_response(found) if found else web.json_response({"error": {"code": "resource_missing"}}, status=404)
        method = re.match(r"^/v1/payment_methods/(pm_[^/]+)$", request.path)
        if request.method == "GET" and method:
            brand, last4 = CARDS.get(method.group(1), ("visa", "4242"))
            return web.json_response({**mocked, "id": method.group(1),
                                      "card": {**(mocked.get("card") or {}), "brand": brand, "last4": last4,
                                               "exp_month": 12, "exp_year": 2034}})
        fetch = re.match(r"^/v1/payment_intents/(pi_[^/]+)$", request.path)
        if request.method == "GET" and fetch:
            intent = next((i for i in self.intents.values() if i["id"] == fetch.group(1)), None)
            return web.json_response(intent) if intent else web.json_response({"error": {"code": "resource_missing"}}, status=404)
        if request.method == "POST" and request.path == "/v1/refunds":
            if self.fail_next_refund > 0:  # a 500 that did nothing (not stored: the key is unused)
                self.fail_next_refund -= 1
                return web.json_response({"error": {"type": "api_error", "message": "simulated failure"}}, status=500)
            hold = self.hold_next_refund > 0
            self.hold_next_refund -= hold
            return await self._idempotent(key, form, lambda: (*self._refund(key, form, mocked)[:2], hold))
        if request.method == "GET" and request.path == "/v1/payment_intents":
            # The list, filtered as Stripe does (customer, created[gte]); newest first, one page.
            since = int(request.query.get("created[gte]", "0") or 0)
            found = [i for i in reversed(list(self.intents.values()))
                     if i.get("customer") == request.query.get("customer") and i.get("created", since) >= since]
            self.list_calls += 1
            return web.json_response({**mocked, "data": found, "has_more": False})
        if request.method == "GET" and request.path == "/v1/refunds":
            found = [r for r in reversed(list(self.refunds.values()))
                     if r.get("payment_intent") == request.query.get("payment_intent")]
            return web.json_response({**mocked, "data": found, "has_more": False})
        if request.method == "GET" and request.path == "/v1/payment_intents/search":
            m = _QUERY.match(request.query.get("query", ""))
            found = [self.intents[m.group(1)]] if m and m.group(1) in self.intents else []
            return web.json_response({**mocked, "data": found, "has_more": False})
        return web.json_response(mocked, status=status)

    def authenticate(self, intent_id: str) -> dict:
        """The customer passes 3-D Secure on the provider's page: the intent succeeds."""
        intent = next(i for i in self.intents.values() if i["id"] == intent_id)
        intent.update(status="succeeded", next_action=None, last_payment_error=None)
        return intent

    async def _idempotent(self, key: str | None, form: dict, make) -> web.Response:
        params = tuple(sorted(form.items()))
        if key is not None and key in self.answers:
            first, status, doc = self.answers[key]
            if first != params:
                return web.json_response({"error": {"type": "idempotency_error", "message":
                                          "Keys for idempotent requests can only be used with the same parameters"}},
                                         status=400)
            return web.json_response(doc, status=status)
        status, doc, hold = make()
        if key is not None:
            self.answers[key] = (params, status, doc)
        if hold:
            await asyncio.sleep(self.hold_seconds)
        return web.json_response(doc, status=status)

    # -- outcomes --------------------------------------------------------------------------------

    def _intent(self, key: str | None, form: dict, mocked: dict) -> tuple[int, dict, bool]:
        pm = form.get("payment_method", "")
        key = key or f"no-key-{len(self.requests)}"
        intent = {**mocked, "id": "pi_" + hashlib.sha256(key.encode()).hexdigest()[:20], "created": int(time.time()),
                  "amount": int(form["amount"]), "currency": form["currency"], "customer": form.get("customer"),
                  "payment_method": pm, "last_payment_error": None, "next_action": None,
                  "metadata": {k[len("metadata["):-1]: v for k, v in form.items() if k.startswith("metadata[")}}
        if pm in DECLINES:
            code, decline_code = DECLINES[pm]
            intent.update(status="requires_payment_method",
                          last_payment_error={"type": "card_error", "code": code, "decline_code": decline_code})
            self.intents[key] = intent
            error = {"type": "card_error", "code": code, "message": "Your card was declined.",
                     "payment_intent": intent}
            if decline_code:
                error["decline_code"] = decline_code
            return 402, {"error": error}, False
        intent["status"] = "succeeded"
        self.intents[key] = intent
        return 200, intent, pm == "pm_card_timeout"

    def _setup(self, key: str | None, form: dict, mocked: dict) -> tuple[int, dict, bool]:
        """A SetupIntent created and confirmed at once: a declining test card fails (402 with the
        setup intent), pm_card_authenticationRequired asks for 3-D Secure, any other succeeds."""
        pm = form.get("payment_method", "")
        key = key or f"no-key-{len(self.requests)}"
        setup = {**mocked, "id": "seti_" + hashlib.sha256(key.encode()).hexdigest()[:20], "customer": form.get("customer"),
                 "payment_method": pm, "usage": form.get("usage"), "last_setup_error": None, "next_action": None,
                 "metadata": {k[len("metadata["):-1]: v for k, v in form.items() if k.startswith("metadata[")}}
        self.setups[setup["id"]] = setup
        if pm == "pm_card_authenticationRequired":
            setup.update(status="requires_action", next_action={"type": "redirect_to_url", "redirect_to_url": {
                "url": f"{self.url}/3ds-setup/{setup['id']}", "return_url": form.get("return_url")}})
            return 200, setup, False
        if pm in DECLINES:
            code, decline_code = DECLINES[pm]
            setup.update(status="requires_payment_method", last_setup_error={"type": "card_error", "code": code})
            return 402, {"error": {"type": "card_error", "code": code, "decline_code": decline_code,
                                   "setup_intent": setup}}, False
        setup["status"] = "succeeded"
        return 200, setup, False

    def authenticate_setup(self, setup_id: str) -> dict:
        """The customer passes 3-D Secure for a SetupIntent: it succeeds."""
        self.setups[setup_id].update(status="succeeded", next_action=None)
        return self.setups[setup_id]

    def _refund(self, key: str | None, form: dict, mocked: dict) -> tuple[int, dict, bool]:
        pi = form.get("payment_intent")
        key = key or f"no-key-{len(self.requests)}"
        intent = next((i for i in self.intents.values() if i["id"] == pi), None)
        amount = int(form.get("amount") or (intent or {}).get("amount", 0))
        if intent is None or intent["status"] != "succeeded":
            return 400, {"error": {"type": "invalid_request_error", "code": "resource_missing",
                                   "message": f"No such payment_intent: '{pi}'"}}, False
        left = intent["amount"] - self.refunded.get(pi, 0)
        if amount > left:
            return 400, {"error": {"type": "invalid_request_error", "code": "amount_too_large",
                                   "message": f"Refund amount is greater than the unrefunded amount ({left})"}}, False
        self.refunded[pi] = self.refunded.get(pi, 0) + amount
        refund = {**mocked, "id": "re_" + hashlib.sha256(key.encode()).hexdigest()[:20], "amount": amount,
                  "currency": intent["currency"], "payment_intent": pi, "status": "succeeded",
                  "metadata": {k[len("metadata["):-1]: v for k, v in form.items() if k.startswith("metadata[")}}
        self.refunds[key] = refund
        return 200, refund, False


def _json(text: str) -> dict:
    import json

    doc = json.loads(text)
    if not isinstance(doc, dict):
        raise ValueError("not an object")
    return doc
