"""Issue 27, finding 5: the worker's deliverer never POSTs a signed event to a non-public address,
whatever form the endpoint's host takes (numeric IPv4 forms, IPv6 literals embedding IPv4, NAT64,
6to4) and whatever a name resolves to, independent of the HTTP library's version: each request is
pinned to the address billing.netguard checked. A real receiver on loopback counts what reaches it."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import psycopg
from psycopg.rows import dict_row

from billing.db import async_pool
from billing.worker.webhooks import WebhookDeliverer, WebhookOptions

from .test_outbound_webhooks import Receiver, make_events


def test_no_form_of_a_loopback_host_is_delivered_to(db_url):
    receiver = Receiver()
    resolved: list[str] = []

    async def resolve(host, port):
        resolved.append(host)
        return {"rebind.example.com": ["93.184.216.34", "127.0.0.1"]}.get(host, ["127.0.0.1"])

    async def run():
        await receiver.start()
        port = receiver.port
        hosts = ["2130706433", "127.1", "0", "017700000001", "0x7f.1", "[::ffff:127.0.0.1]", "[::127.0.0.1]",
                 "[64:ff9b::7f00:1]", "[2002:7f00:1::]", "hooks.example.com", "rebind.example.com"]
        with psycopg.connect(db_url, autocommit=True) as conn:
            for i, host in enumerate(hosts):  # in SQL: the API refuses them all (422)
                conn.execute("SELECT billing.create_webhook_endpoint(%s, '{SubscriptionCreated}', %s, now())",
                             (f"http://{host}:{port}/h{i}", "s" * 32))
        make_events(db_url, 1)
        stop = asyncio.Event()
        pool = await async_pool(db_url, max_size=2)
        deliverer = WebhookDeliverer(pool, stop, options=WebhookOptions(
            allow_private=False, backoff=timedelta(seconds=60), poll_interval=0.1, refresh_interval=0.1,
            resolve=resolve))
        task = asyncio.create_task(deliverer.run())
        deadline = asyncio.get_running_loop().time() + 10
        while asyncio.get_running_loop().time() < deadline:
            with psycopg.connect(db_url, autocommit=True) as conn:
                n = conn.execute("SELECT count(DISTINCT endpoint_id) FROM billing.webhook_attempt").fetchone()[0]
            if n == len(hosts):
                break
            await asyncio.sleep(0.2)
        stop.set()
        await task
        await pool.close()
        await receiver.runner.cleanup()
        with psycopg.connect(db_url, autocommit=True, row_factory=dict_row) as conn:
            return hosts, conn.execute(
                "SELECT w.url, a.status_code, a.error FROM billing.webhook_attempt a "
                "JOIN billing.webhook_endpoint w ON w.id = a.endpoint_id ORDER BY w.id").fetchall()

    hosts, attempts = asyncio.run(run())
    assert sum(receiver.requests.values()) == 0, dict(receiver.requests)  # nothing reached loopback
    assert {a["url"] for a in attempts} == {f"http://{h}:{receiver.port}/h{i}" for i, h in enumerate(hosts)}
    assert all(a["status_code"] is None and a["error"].startswith("blocked:") for a in attempts), attempts
    assert {"hooks.example.com", "rebind.example.com"} <= set(resolved)  # names resolved by the guard itself
