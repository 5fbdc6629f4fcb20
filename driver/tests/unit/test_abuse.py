"""Per-address limits and the throttle of failed authentications (billing.api.abuse; issue 27 #3, #7),
the security headers (billing.api.headers; #9) and the customer token's form (#4). Pure logic."""

from __future__ import annotations

import asyncio

from billing.limiter.abuse import AddressLimiter, FailureThrottle
from billing.api.customer_sessions import new_customer_token, parse_customer_token
from billing.api.headers import SecurityHeaders


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_address_limiter_refuses_past_the_burst_and_says_how_long():
    clock = Clock()
    limiter = AddressLimiter(rate=10, burst=5, clock=clock)
    assert [limiter.check("a") for _ in range(5)] == [0.0] * 5
    wait = limiter.check("a")
    assert 0 < wait <= 0.1 + 1e-9
    assert limiter.check("b") == 0.0  # another address is not held back
    clock.t += 1
    assert limiter.check("a") == 0.0


def test_failures_back_off_doubling_per_address():
    clock = Clock()
    throttle = FailureThrottle(free=3, window=60, max_block=8, clock=clock)
    assert [throttle.failed("x") for _ in range(3)] == [0.0] * 3
    assert throttle.failed("x") == 1.0
    assert throttle.failed("x") == 2.0  # from now: the block doubles
    assert throttle.failed("x") == 4.0
    assert throttle.failed("x") == 8.0 and throttle.failed("x") == 8.0  # capped
    assert throttle.blocked_for("y") == 0.0
    clock.t += 8.5
    assert throttle.blocked_for("x") == 0.0


def test_customer_tokens_name_their_customer():
    token = new_customer_token(42)
    assert token.token.startswith("cs_42_") and parse_customer_token(token.token) == 42
    assert len(token.token_hash) == 32
    for bad in ("cs_0_" + "a" * 43, "cs_42_short", "bk_abcdefghij_" + "a" * 43, "cs_42_" + "a" * 43 + "=", "cs_x_" + "a" * 43):
        assert parse_customer_token(bad) is None


def _headers_of(content_type: bytes, path: str = "/invoices/1.html", preset=()) -> dict:
    sent = []

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", content_type), *preset]})
        await send({"type": "http.response.body", "body": b"x"})

    async def send(message):
        sent.append(message)

    asyncio.run(SecurityHeaders(app)({"type": "http", "path": path}, None, send))
    return {k.decode(): v.decode() for k, v in sent[0]["headers"]}


def test_documents_and_pages_carry_the_security_headers():
    html = _headers_of(b"text/html; charset=utf-8")
    assert "frame-ancestors 'none'" in html["content-security-policy"] and "default-src 'none'" in html["content-security-policy"]
    assert html["x-content-type-options"] == "nosniff" and html["cache-control"] == "no-store"
    assert html["x-frame-options"] == "DENY"
    pdf = _headers_of(b"application/pdf", "/invoices/1.pdf")
    assert pdf["content-security-policy"].startswith("default-src 'none'") and pdf["cache-control"] == "no-store"
    own = _headers_of(b"text/html", "/console/", preset=[(b"content-security-policy", b"default-src 'self'")])
    assert own["content-security-policy"] == "default-src 'self'"  # a page's own policy is kept
    assert "cache-control" not in _headers_of(b"text/css", "/console/static/console.css")
