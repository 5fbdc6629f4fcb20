"""POST /webhooks/payments: only a correctly signed, fresh body is applied, and only once.

Forged, tampered, stale, future and malformed signatures are refused before anything is parsed
or stored; a replayed delivery (same eventId) is acknowledged but changes nothing."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from datetime import datetime, timezone

import httpx
import psycopg
from prometheus_client import REGISTRY

from billing.api import create_app
from billing.clock import SimulatedClock
from billing.config import Settings
from billing.signing import sign, signature_header

SECRET = "whsec_current"
OLD_SECRET = "whsec_previous"
T0 = datetime(2026, 10, 1, 12, 0, tzinfo=timezone.utc)


@contextlib.asynccontextmanager
async def client_for(db_url: str, secret: str = SECRET):
    app = create_app(Settings(database_url=db_url, webhook_secret=secret), clock=SimulatedClock(T0))
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    try:
        async with httpx.AsyncClient(timeout=30, transport=transport, base_url="http://billing.test") as client:
            yield client
    finally:
        await app.state.database.close()


def open_charge(db_url: str) -> tuple[int, str]:
    """A subscription whose INITIAL invoice has been claimed: (invoice id, idempotency key)."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SELECT billing.upsert_plan('PRO_MONTHLY', 300000, 'USD', 'MONTH', 1)")
        conn.execute("SELECT billing.create_subscription('wh-1', 7, 'PRO_MONTHLY', %s)", (T0,))
        row = conn.execute("SELECT invoice_id, idempotency_key FROM billing.claim_charges('test', 10, '5 minutes', %s)",
                           (T0,)).fetchone()
    return row[0], row[1]


def state(db_url: str, invoice_id: int) -> dict:
    with psycopg.connect(db_url, autocommit=True) as conn:
        return {
            "invoice": conn.execute("SELECT status FROM billing.invoice WHERE id = %s", (invoice_id,)).fetchone()[0],
            "webhooks": conn.execute("SELECT count(*) FROM billing.gateway_webhook").fetchone()[0],
            "paid_events": conn.execute(
                "SELECT count(*) FROM billing.outbox_event WHERE event_type = 'InvoicePaid'").fetchone()[0],
        }


def webhook_body(key: str, event_id: str = "evt_1", status: str = "succeeded") -> bytes:
    # As docs/gateway.md describes it: compact JSON, unknown fields ignored by the receiver.
    return json.dumps({
        "eventId": event_id, "type": f"charge.{status}", "idempotencyKey": key, "status": status,
        "id": "ch_123", "declineCode": None if status == "succeeded" else "insufficient_funds",
        "amount": 300000, "currency": "USD", "customerId": 7, "created": "2026-10-01T12:00:01.000000Z",
    }, separators=(",", ":")).encode()


async def post(client, body: bytes, signature: str | None):
    headers = {"Content-Type": "application/json"}
    if signature is not None:
        headers["Billing-Signature"] = signature.encode("utf-8")
    return await client.post("/webhooks/payments", content=body, headers=headers)


def assert_refused(r: httpx.Response) -> None:
    assert r.status_code == 400, (r.status_code, r.text)
    assert r.json()["error"]["code"] == "invalid_signature", r.text


def test_rejected_webhooks_change_nothing(db_url):
    invoice_id, key = open_charge(db_url)
    body = webhook_body(key)
    now = int(time.time())

    async def run():
        async with client_for(db_url) as client:
            # Forged: signed with another secret.
            assert_refused(await post(client, body, signature_header("whsec_attacker", body, now)))
            # Tampered: a valid signature of another body.
            tampered = body.replace(b'"succeeded"', b'"declined"')
            assert_refused(await post(client, tampered, signature_header(SECRET, body, now)))
            # Stale and future: valid signatures outside the 300 s tolerance.
            assert_refused(await post(client, body, signature_header(SECRET, body, now - 400)))
            assert_refused(await post(client, body, signature_header(SECRET, body, now + 400)))
            # The timestamp is signed: moving it breaks the signature.
            v1 = sign(SECRET, now - 1000, body)
            assert_refused(await post(client, body, f"t={now},v1={v1}"))
            # Missing or malformed headers.
            assert_refused(await post(client, body, None))
            assert_refused(await post(client, body, ""))
            assert_refused(await post(client, body, f"v1={sign(SECRET, now, body)}"))
            assert_refused(await post(client, body, f"t={now}"))
            assert_refused(await post(client, body, f"t={now},v1="))
            assert_refused(await post(client, body, f"t={now},v1={'0' * 64}"))
            assert_refused(await post(client, body, f"t=-{now},v1={sign(SECRET, now, body)}"))
            assert_refused(await post(client, body, f"t={now},v1=\u00e9\u00e9"))

    asyncio.run(run())
    assert state(db_url, invoice_id) == {"invoice": "OPEN", "webhooks": 0, "paid_events": 0}


def test_valid_webhook_is_applied_once(db_url):
    invoice_id, key = open_charge(db_url)
    body = webhook_body(key)

    async def run():
        async with client_for(db_url) as client:
            signature = signature_header(SECRET, body)  # the simulator's own signer
            r = await post(client, body, signature)
            assert r.status_code == 200, r.text
            assert r.json() == {"received": True, "applied": True, "duplicate": False, "review": False}
            # The same delivery replayed (within the tolerance) and a fresh signature of the same
            # event: acknowledged, not applied again.
            for sig in (signature, signature_header(SECRET, body)):
                again = await post(client, body, sig)
                assert again.status_code == 200 and again.json()["applied"] is False

    asyncio.run(run())
    assert state(db_url, invoice_id) == {"invoice": "PAID", "webhooks": 1, "paid_events": 1}


def test_rotation_several_v1_and_tolerance_edges(db_url):
    invoice_id, key = open_charge(db_url)
    body = webhook_body(key, event_id="evt_rot", status="declined")
    now = int(time.time())

    async def run():
        # The sender signs with the old and the new secret during a rotation.
        async with client_for(db_url, secret=SECRET) as client:
            header = f"t={now - 290},v1={sign(OLD_SECRET, now - 290, body)},v1={sign(SECRET, now - 290, body)}"
            r = await post(client, body, header)
            assert r.status_code == 200 and r.json()["applied"] is True, r.text

    asyncio.run(run())
    with psycopg.connect(db_url, autocommit=True) as conn:
        status, attempts = conn.execute("SELECT status, attempt_count FROM billing.invoice WHERE id = %s",
                                        (invoice_id,)).fetchone()
    assert (status, attempts) == ("OPEN", 1)  # declined once, back in dunning


def test_receiver_accepts_any_configured_secret(db_url):
    """BILLING_WEBHOOK_SECRET may list several secrets (comma-separated) while rotating."""
    invoice_id, key = open_charge(db_url)
    body = webhook_body(key, event_id="evt_multi")

    async def run():
        async with client_for(db_url, secret=f"{SECRET},{OLD_SECRET}") as client:
            r = await post(client, body, signature_header(OLD_SECRET, body))
            assert r.status_code == 200 and r.json()["applied"] is True, r.text

    asyncio.run(run())
    assert state(db_url, invoice_id)["invoice"] == "PAID"


def test_signed_but_invalid_bodies(db_url):
    invoice_id, key = open_charge(db_url)

    async def run():
        async with client_for(db_url) as client:
            async def signed(raw: bytes):
                return await post(client, raw, signature_header(SECRET, raw))

            assert (await signed(b"{nope")).status_code == 400
            assert (await signed(b"[1]")).status_code == 400
            assert (await signed(json.dumps({"eventId": "e"}).encode())).status_code == 400
            r = await signed(json.dumps({"eventId": "e", "idempotencyKey": key, "status": "refunded"}).encode())
            assert r.status_code == 422
            r = await signed(json.dumps({"eventId": 5, "idempotencyKey": key, "status": "succeeded"}).encode())
            assert r.status_code == 400
            # A key the engine never issued: 404, nothing stored (the gateway will retry).
            r = await signed(webhook_body("inv-999-try-0", event_id="evt_unknown"))
            assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"

    asyncio.run(run())
    assert state(db_url, invoice_id) == {"invoice": "OPEN", "webhooks": 0, "paid_events": 0}


def test_no_secret_configured_refuses_everything(db_url):
    invoice_id, key = open_charge(db_url)
    body = webhook_body(key)

    async def run():
        app = create_app(Settings(database_url=db_url, webhook_secret=None))
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(timeout=30, transport=transport, base_url="http://t") as client:
            assert_refused(await post(client, body, signature_header("", body)))
        await app.state.database.close()

    asyncio.run(run())
    assert state(db_url, invoice_id)["webhooks"] == 0


def test_a_success_for_another_amount_is_kept_for_review_and_counted(db_url):
    """A signed success whose amount disagrees with the attempt (another installation's key, a
    gateway mix-up) is stored with its reason, not applied; event and metric say so."""
    invoice_id, key = open_charge(db_url)
    doc = json.loads(webhook_body(key, event_id="evt_other_amount"))
    doc["amount"] = 1  # the attempt asked for 300000
    body = json.dumps(doc, separators=(",", ":")).encode()
    before = REGISTRY.get_sample_value("billing_webhooks_review_total") or 0.0

    async def run():
        async with client_for(db_url) as client:
            r = await post(client, body, signature_header(SECRET, body))
            assert r.status_code == 200, r.text
            assert r.json() == {"received": True, "applied": False, "duplicate": False, "review": True}

    asyncio.run(run())
    assert REGISTRY.get_sample_value("billing_webhooks_review_total") == before + 1
    assert state(db_url, invoice_id) == {"invoice": "OPEN", "webhooks": 1, "paid_events": 0}
    with psycopg.connect(db_url, autocommit=True) as conn:
        reason = conn.execute("SELECT review_reason FROM billing.gateway_webhook").fetchone()[0]
        review = conn.execute("SELECT count(*) FROM billing.outbox_event WHERE event_type = 'PaymentReviewRequired' "
                              "AND aggregate_id = %s", (invoice_id,)).fetchone()[0]
    assert "amount 1" in reason and review == 1
