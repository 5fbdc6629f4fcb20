"""Outbound webhooks end to end: endpoints created over HTTP (an admin API key), the worker's
deliverer posting to real HTTP receivers on loopback, signatures checked by an independent
verifier (hmac + hashlib, not the project's code), order per aggregate, a receiver that fails for
a while then recovers, one that never recovers (disabled, with an event), attempts visible
through the API, Kafka's relay not held back, redirects not followed, private targets refused."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
from collections import defaultdict
from datetime import timedelta

import httpx
import psycopg
from aiohttp import web
from psycopg.rows import dict_row

from billing.api import create_app
from billing.config import Settings
from billing.db import async_pool
from billing.events.schemas import catalogue
from billing.worker.relay import Relay, RelayOptions
from billing.worker.sinks import JsonlSink
from billing.worker.webhooks import WebhookDeliverer, WebhookOptions

from .conftest import create_test_key

def admin_headers(db_url: str, *scopes: str) -> dict:
    """An API key of this database (admin scope by default): the operator's routes need it."""
    return {"Authorization": f"Bearer {create_test_key(db_url, *(scopes or ('admin',)), name='webhooks')}"}


def independent_verify(secret: str, header: str, body: bytes, now: float) -> bool:
    """Billing-Signature as a receiver would check it, from the docs alone."""
    parts = dict(p.split("=", 1) for p in header.split(","))
    t = int(parts["t"])
    expected = hmac.new(secret.encode(), f"{t}.".encode() + body, hashlib.sha256).hexdigest()
    return abs(now - t) <= 300 and hmac.compare_digest(expected, parts["v1"])


class Receiver:
    """A real HTTP server on loopback with one path per behaviour. Records what it accepted."""

    def __init__(self) -> None:
        self.accepted: dict[str, list[dict]] = defaultdict(list)  # path -> envelopes, in arrival order
        self.requests: dict[str, int] = defaultdict(int)
        self.bad_signatures: list[str] = []
        self.secrets: dict[str, str] = {}
        self.fail_first: dict[str, int] = {}
        self.runner: web.AppRunner | None = None
        self.port = 0

    async def handle(self, request: web.Request) -> web.Response:
        path = request.match_info["name"]
        self.requests[path] += 1
        if path == "redirect":
            return web.Response(status=302, headers={"Location": f"http://127.0.0.1:{self.port}/ok"})
        if path == "dead":
            return web.Response(status=503, text="down for good")
        if self.requests[path] <= self.fail_first.get(path, 0):
            return web.Response(status=500, text="not yet")
        body = await request.read()
        if not independent_verify(self.secrets[path], request.headers["Billing-Signature"], body, time.time()):
            self.bad_signatures.append(path)
            return web.Response(status=400)
        assert request.headers["Content-Type"].startswith("application/cloudevents+json")
        envelope = json.loads(body)
        assert request.headers["Billing-Event-Id"] == envelope["id"]
        self.accepted[path].append(envelope)
        return web.Response(status=204)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/{name}", self.handle)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/{name}"


async def until(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not await predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.1)


def outbox(db_url: str, where: str = "TRUE") -> list[dict]:
    with psycopg.connect(db_url, autocommit=True, row_factory=dict_row) as conn:
        return conn.execute(f"SELECT id, event_id::text, event_type, aggregate_type, aggregate_id, status "
                            f"FROM billing.outbox_event WHERE {where} ORDER BY id").fetchall()


def make_events(db_url: str, subscriptions: int) -> None:
    """Several events per aggregate: signups, a decline and recovery, plan changes, cancellations."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SELECT billing.upsert_plan('W_BASIC', 1000, 'EUR', 'MONTH', 1)")
        conn.execute("SELECT billing.upsert_plan('W_PRO', 3000, 'EUR', 'MONTH', 1)")
        for i in range(subscriptions):
            sid = conn.execute("SELECT id FROM billing.create_subscription(%s, %s, 'W_BASIC', now())",
                               (f"w-{i}", 500 + i)).fetchone()[0]
            conn.execute("SELECT billing.change_plan(%s, 'W_PRO', now())", (sid,))
            if i % 3 == 0:
                conn.execute("SELECT billing.cancel_subscription(%s, true, now())", (sid,))
            if i % 3 == 1:
                conn.execute("SELECT billing.cancel_subscription(%s, false, now())", (sid,))


def assert_in_commit_order(received: list[dict], rows: list[dict]) -> None:
    """Per aggregate, the first arrival of each event follows the outbox id order, and every
    event arrived."""
    first: dict[str, int] = {}
    for n, envelope in enumerate(received):
        first.setdefault(envelope["id"], n)
    assert set(first) == {r["event_id"] for r in rows}
    by_aggregate: dict[tuple, list[int]] = defaultdict(list)
    for r in rows:
        by_aggregate[(r["aggregate_type"], r["aggregate_id"])].append(first[r["event_id"]])
    for aggregate, arrivals in by_aggregate.items():
        assert arrivals == sorted(arrivals), f"{aggregate} out of order"


def test_endpoints_need_an_admin_key_and_valid_input(db_url):
    ADMIN = admin_headers(db_url)
    writer = admin_headers(db_url, "subscriptions:write")

    async def run():
        settings = Settings(database_url=db_url)
        transport = httpx.ASGITransport(app=create_app(settings))
        async with httpx.AsyncClient(timeout=30, transport=transport, base_url="http://t") as client:
            body = {"url": "https://hooks.example.com/billing", "eventTypes": ["InvoicePaid"]}
            assert (await client.get("/webhook-endpoints")).status_code == 401
            assert (await client.post("/webhook-endpoints", json=body)).status_code == 401
            assert (await client.post("/webhook-endpoints", json=body,
                                      headers={"Authorization": "Bearer wrong"})).status_code == 401
            assert (await client.post("/webhook-endpoints", json=body, headers=writer)).status_code == 403
            for bad, status in [({"url": "http://127.0.0.1:9/x", "eventTypes": ["*"]}, 422),  # loopback
                                ({"url": "http://10.1.2.3/x", "eventTypes": ["*"]}, 422),      # private
                                ({"url": "http://localhost/x", "eventTypes": ["*"]}, 422),
                                ({"url": "ftp://example.com/x", "eventTypes": ["*"]}, 422),
                                ({"url": "https://u:p@example.com/x", "eventTypes": ["*"]}, 422),
                                ({"url": "https://example.com/x", "eventTypes": ["NoSuchEvent"]}, 422),
                                ({"url": "https://example.com/x", "eventTypes": []}, 400),
                                ({"url": "https://example.com/x", "eventTypes": ["*"], "secret": "short"}, 422)]:
                r = await client.post("/webhook-endpoints", json=bad, headers=ADMIN)
                assert r.status_code == status, (bad, r.text)
            r = await client.post("/webhook-endpoints", json=body, headers=ADMIN)
            assert r.status_code == 201, r.text
            created = r.json()
            assert created["secret"].startswith("whsec_") and created["status"] == "ENABLED"
            listed = (await client.get("/webhook-endpoints", headers=ADMIN)).json()["data"]
            assert [e["id"] for e in listed] == [created["id"]] and "secret" not in listed[0]
            got = (await client.get(f"/webhook-endpoints/{created['id']}", headers=ADMIN)).json()
            assert got["url"] == body["url"] and got["eventTypes"] == ["InvoicePaid"] and "secret" not in got
            assert (await client.get(f"/webhook-endpoints/{created['id']}/attempts", headers=ADMIN)).json()["data"] == []
            assert (await client.delete(f"/webhook-endpoints/{created['id']}", headers=ADMIN)).json()["deleted"] is True
            assert (await client.get(f"/webhook-endpoints/{created['id']}", headers=ADMIN)).status_code == 404
            assert (await client.delete(f"/webhook-endpoints/{created['id']}", headers=ADMIN)).status_code == 404

    asyncio.run(run())


def test_delivery_end_to_end_in_order_signed_with_failing_and_dead_receivers(db_url, tmp_path):
    receiver = Receiver()
    receiver.fail_first["flaky"] = 7  # fails its first seven requests, then recovers
    settings = Settings(database_url=db_url, webhook_allow_private=True)
    ADMIN = admin_headers(db_url)
    options = WebhookOptions(allow_private=True, timeout_seconds=2, backoff=timedelta(milliseconds=100),
                             backoff_cap=timedelta(milliseconds=500), give_up_after=timedelta(seconds=3),
                             poll_interval=0.2, refresh_interval=0.2, batch_size=20)

    async def run():
        await receiver.start()
        transport = httpx.ASGITransport(app=create_app(settings))
        async with httpx.AsyncClient(timeout=30, transport=transport, base_url="http://t", headers=ADMIN) as api:
            ids = {}
            for name, types in [("ok", ["*"]), ("flaky", ["*"]), ("dead", ["*"]),
                                ("invoices", ["InvoiceCreated", "InvoicePaid", "InvoiceVoided"])]:
                r = await api.post("/webhook-endpoints", json={"url": receiver.url(name), "eventTypes": types})
                assert r.status_code == 201, r.text
                ids[name] = r.json()["id"]
                receiver.secrets[name] = r.json()["secret"]

            make_events(db_url, 12)
            stop = asyncio.Event()
            pool = await async_pool(db_url, max_size=4)
            deliverer = WebhookDeliverer(pool, stop, options=options)
            sink = JsonlSink(tmp_path / "events.jsonl")
            relay = Relay(db_url, sink, stop, options=RelayOptions(poll_interval=0.2))
            tasks = [asyncio.create_task(deliverer.run()), asyncio.create_task(relay.run())]

            # Kafka's side is not held back by the dead endpoint: the outbox drains meanwhile.
            async def drained():
                return not outbox(db_url, "status <> 'PUBLISHED'")
            await until(drained, 20, "the relay to publish everything")
            with psycopg.connect(db_url, autocommit=True) as conn:
                assert conn.execute("SELECT status FROM billing.webhook_endpoint WHERE id = %s",
                                    (ids["dead"],)).fetchone()[0] == "ENABLED"

            everything = outbox(db_url)

            async def all_in():
                return (len({e["id"] for e in receiver.accepted["ok"]}) >= len(everything)
                        and len({e["id"] for e in receiver.accepted["flaky"]}) >= len(everything))
            await until(all_in, 30, "ok and flaky to receive every event")

            async def disabled():
                r = await api.get(f"/webhook-endpoints/{ids['dead']}")
                return r.json()["status"] == "DISABLED"
            await until(disabled, 30, "the dead endpoint to be disabled")
            dead = (await api.get(f"/webhook-endpoints/{ids['dead']}")).json()
            flaky_attempts = (await api.get(f"/webhook-endpoints/{ids['flaky']}/attempts?limit=1000")).json()["data"]
            dead_attempts = (await api.get(f"/webhook-endpoints/{ids['dead']}/attempts?limit=1000")).json()["data"]
            await until(all_in, 10, "still everything")

            async def settled():  # the disable event itself reaches ok and flaky (flaky may be backing off)
                with psycopg.connect(db_url, autocommit=True) as conn:
                    return not conn.execute("SELECT 1 FROM billing.webhook_delivery WHERE status = 'PENDING' "
                                            "AND endpoint_id <> %s", (ids["dead"],)).fetchall()
            await until(settled, 30, "every delivery but the dead endpoint's to be done")
            stop.set()
            await asyncio.gather(*tasks)
            await pool.close()
            sink.close()
        await receiver.runner.cleanup()
        return ids, dead, flaky_attempts, dead_attempts

    ids, dead, flaky_attempts, dead_attempts = asyncio.run(run())
    rows = [r for r in outbox(db_url) if r["event_type"] != "WebhookEndpointDisabled"]
    assert not receiver.bad_signatures
    # Every event, once at least, in commit order per aggregate, and each valid against its schema.
    assert_in_commit_order([e for e in receiver.accepted["ok"] if e["type"] != "WebhookEndpointDisabled"], rows)
    assert_in_commit_order([e for e in receiver.accepted["flaky"] if e["type"] != "WebhookEndpointDisabled"], rows)
    for envelope in receiver.accepted["ok"]:
        assert catalogue().errors(envelope) == []
    # Only the types asked for.
    wanted = [r for r in rows if r["event_type"] in ("InvoiceCreated", "InvoicePaid", "InvoiceVoided")]
    assert_in_commit_order(receiver.accepted["invoices"], wanted)
    # The flaky one's failures are visible, and it recovered.
    assert sum(1 for a in flaky_attempts if a["statusCode"] == 500) == 7
    assert all(a["error"] == "HTTP 500: not yet" for a in flaky_attempts if a["statusCode"] == 500)
    assert {a["deliveryStatus"] for a in flaky_attempts} == {"DELIVERED"}
    # The dead one: retried with backoff, then disabled with an event.
    assert dead["status"] == "DISABLED" and "503" in dead["disabledReason"]
    assert len(dead_attempts) >= 4 and {a["statusCode"] for a in dead_attempts} == {503}
    assert receiver.requests["dead"] == len(dead_attempts)
    disabled = outbox(db_url, "event_type = 'WebhookEndpointDisabled'")
    assert [(r["aggregate_type"], r["aggregate_id"]) for r in disabled] == [("webhook_endpoint", ids["dead"])]
    assert disabled[0]["event_id"] in {e["id"] for e in receiver.accepted["ok"]}
    with psycopg.connect(db_url, autocommit=True) as conn:
        left = conn.execute("SELECT endpoint_id, status, count(*) FROM billing.webhook_delivery "
                            "GROUP BY 1, 2 ORDER BY 1, 2").fetchall()
    assert (ids["dead"], "PENDING") not in {(e, s) for e, s, _ in left}
    assert {(e, s) for e, s, _ in left if e != ids["dead"]} == {(ids[n], "DELIVERED") for n in ("ok", "flaky", "invoices")}


def test_redirects_are_not_followed_and_private_targets_are_refused(db_url):
    receiver = Receiver()

    async def run():
        await receiver.start()
        with psycopg.connect(db_url, autocommit=True) as conn:
            # Created in SQL: the API itself refuses a loopback url without the setting.
            for name in ("redirect", "ok"):
                conn.execute("SELECT billing.create_webhook_endpoint(%s, '{SubscriptionCreated}', %s, now())",
                             (receiver.url(name), "s" * 32))
        receiver.secrets["ok"] = "s" * 32
        make_events(db_url, 2)
        results = {}
        for allow in (False, True):
            stop = asyncio.Event()
            pool = await async_pool(db_url, max_size=2)
            deliverer = WebhookDeliverer(pool, stop, options=WebhookOptions(
                allow_private=allow, backoff=timedelta(seconds=60), poll_interval=0.1, refresh_interval=0.1))
            task = asyncio.create_task(deliverer.run())
            await asyncio.sleep(1.5)
            stop.set()
            await task
            await pool.close()
            results[f"requests {allow}"] = sum(receiver.requests.values())
            with psycopg.connect(db_url, autocommit=True, row_factory=dict_row) as conn:
                results[allow] = conn.execute(
                    "SELECT w.url, a.status_code, a.error FROM billing.webhook_attempt a "
                    "JOIN billing.webhook_endpoint w ON w.id = a.endpoint_id ORDER BY a.attempted_at").fetchall()
                conn.execute("UPDATE billing.webhook_delivery SET available_at = now() WHERE status = 'PENDING'")
        await receiver.runner.cleanup()
        return results

    results = asyncio.run(run())
    blocked = results[False]
    assert blocked and all(r["status_code"] is None and r["error"].startswith("blocked:") for r in blocked)
    assert results["requests False"] == 0  # nothing reached loopback
    redirected = [r for r in results[True][len(blocked):] if r["url"].endswith("/redirect") and r["status_code"] == 302]
    assert redirected and all("not followed" in r["error"] for r in redirected)
    assert receiver.requests["ok"] == 2 and len(receiver.accepted["ok"]) == 2  # its own two, never the redirect's
