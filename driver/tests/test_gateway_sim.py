"""The gateway simulator and the gateway client, over real HTTP on loopback."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from aiohttp import ClientSession, web

from billing.gateway.client import DECLINED, SUCCEEDED, UNKNOWN, GatewayClient, RateLimited
from billing.gateway.simulator import DecisionModel, GatewaySimulator, parse_latency
from billing.signing import signature_header

pytestmark = pytest.mark.timeout(60)


def run(coro):
    return asyncio.run(coro)


async def _post(url: str, key: str, body: dict) -> tuple[int, dict]:
    async with ClientSession() as session:
        async with session.post(f"{url}/v1/charges", json=body, headers={"Idempotency-Key": key}) as resp:
            return resp.status, await resp.json()


def test_parse_latency():
    assert parse_latency("50-300") == (50, 300)
    assert parse_latency("7") == (7, 7)
    for bad in ("300-50", "a-b", "-5", "1-2-3"):
        with pytest.raises(ValueError):
            parse_latency(bad)


def test_same_key_is_charged_once_even_concurrently():
    async def scenario():
        async with GatewaySimulator(rate=0, latency_ms=(20, 60)) as sim:
            client = GatewayClient(sim.url)
            results = await asyncio.gather(*(client.charge("inv-1-try-0", 7, 1990, "BRL") for _ in range(10)))
            again = await client.charge("inv-1-try-0", 7, 1990, "BRL")
            other = await client.charge("inv-2-try-0", 7, 1990, "BRL")
            await client.close()
            # Same key, other parameters: refused, nothing charged.
            status, _ = await _post(sim.url, "inv-1-try-0", {"customerId": 7, "amount": 1, "currency": "BRL"})
            return results, again, other, status, sim.ledger(), sim.stats()

    results, again, other, conflict, ledger, stats = run(scenario())
    assert {r for r in results} == {again}
    assert again.outcome == SUCCEEDED and again.reference.startswith("ch_")
    assert other.reference != again.reference
    assert conflict == 409
    assert sorted(c["idempotencyKey"] for c in ledger["charges"]) == ["inv-1-try-0", "inv-2-try-0"]
    assert ledger["charges"][0] == {"idempotencyKey": "inv-1-try-0", "customerId": 7, "amount": 1990,
                                    "currency": "BRL", "status": "succeeded", "id": again.reference}
    assert stats["replays"] == 10 and stats["charged"] == 2


def test_strict_sliding_window_refuses_and_counts():
    async def scenario():
        async with GatewaySimulator(rate=5) as sim:
            client = GatewayClient(sim.url)
            outcomes = await asyncio.gather(*(client.charge(f"k{i}", 1, 100, "USD") for i in range(12)),
                                            return_exceptions=True)
            refused_now = sum(isinstance(o, RateLimited) for o in outcomes)
            await asyncio.sleep(1.05)  # the window slides: room again
            later = await client.charge("k-later", 1, 100, "USD")
            await client.close()
            return refused_now, later, sim.ledger(), sim.stats()

    refused, later, ledger, stats = run(scenario())
    assert refused == 7
    assert later.outcome == SUCCEEDED
    assert ledger["rateLimited"] == 7 and len(ledger["charges"]) == 6
    assert stats["maxWindow"] == 5 and stats["accepted"] == 6


def test_observe_mode_accepts_and_counts_the_excess():
    async def scenario():
        async with GatewaySimulator(rate=5, mode="observe") as sim:
            client = GatewayClient(sim.url)
            outcomes = await asyncio.gather(*(client.charge(f"k{i}", 1, 100, "USD") for i in range(12)))
            await client.close()
            return outcomes, sim.stats()

    outcomes, stats = run(scenario())
    assert all(o.outcome == SUCCEEDED for o in outcomes)
    assert stats["excess"] == 7 and stats["maxWindow"] == 12 and stats["rateLimited"] == 0


def test_declines_are_deterministic_for_seed_and_key():
    async def outcomes(seed: int):
        async with GatewaySimulator(rate=0, decline_rate=0.5, seed=seed) as sim:
            async with GatewayClient(sim.url) as client:
                return [await client.charge(f"inv-{i}-try-0", i, 500, "EUR") for i in range(40)]

    first, second, other_seed = run(outcomes(3)), run(outcomes(3)), run(outcomes(4))
    assert first == second
    assert [r.outcome for r in first] != [r.outcome for r in other_seed]
    declined = [r for r in first if r.outcome == DECLINED]
    assert 8 <= len(declined) <= 32
    assert all(r.reason in ("insufficient_funds", "card_declined", "try_again_later", "do_not_honor") for r in declined)


def test_errors_are_unknown_and_not_charged():
    async def scenario():
        async with GatewaySimulator(rate=0, error_rate=1.0) as sim:
            async with GatewayClient(sim.url) as client:
                result = await client.charge("inv-1-try-0", 1, 100, "USD")
            return result, sim.ledger(), sim.stats()

    result, ledger, stats = run(scenario())
    assert result.outcome == UNKNOWN and "500" in result.reason
    assert ledger["charges"] == [] and stats["errors"] == 1


def test_timeout_after_charging_then_the_replay_tells_the_truth():
    async def scenario():
        async with GatewaySimulator(rate=0, timeout_rate=1.0, timeout_hold_seconds=1.0, latency_ms=(5, 5)) as sim:
            async with GatewayClient(sim.url, timeout=0.3) as client:
                started = time.monotonic()
                first = await client.charge("inv-9-try-0", 1, 100, "USD")
                elapsed = time.monotonic() - started
                replay = await client.charge("inv-9-try-0", 1, 100, "USD")
            return first, elapsed, replay, sim.ledger(), sim.stats()

    first, elapsed, replay, ledger, stats = run(scenario())
    assert first.outcome == UNKNOWN and "timeout" in first.reason
    assert elapsed < 0.9
    assert replay.outcome == SUCCEEDED
    assert len(ledger["charges"]) == 1 and stats["timeouts"] == 1 and stats["replays"] == 1


def test_connection_refused_is_unknown():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    async def scenario():
        async with GatewayClient(f"http://127.0.0.1:{port}", timeout=1) as client:
            return await client.charge("k", 1, 1, "USD")

    assert run(scenario()).outcome == UNKNOWN


def test_latency_and_bad_requests():
    async def scenario():
        async with GatewaySimulator(rate=0, latency_ms=(150, 150)) as sim:
            started = time.monotonic()
            async with GatewayClient(sim.url) as client:
                await client.charge("k1", 1, 1, "USD")
                with pytest.raises(TypeError):
                    await client.charge("k2", 1, 1.5, "USD")  # money is never a float
            elapsed = time.monotonic() - started
            bad = [await _post(sim.url, "k3", body) for body in (
                {"customerId": 1, "amount": 1.5, "currency": "USD"},
                {"customerId": 1, "amount": -1, "currency": "USD"},
                {"customerId": 1, "amount": 1, "currency": "usd"},
                {"customerId": "1", "amount": 1, "currency": "USD"},
                {"amount": 1, "currency": "USD"})]
            missing_key = await _post(sim.url, "", {"customerId": 1, "amount": 1, "currency": "USD"})
            return elapsed, bad, missing_key

    elapsed, bad, missing_key = run(scenario())
    assert elapsed >= 0.15
    assert all(status == 400 for status, _ in bad) and missing_key[0] == 400


def _verify(secret: str, header: str, body: bytes) -> bool:
    fields = dict(part.split("=", 1) for part in header.split(","))
    expected = hmac.new(secret.encode(), f"{fields['t']}.".encode() + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, fields["v1"]) and abs(int(fields["t"]) - time.time()) < 300


def test_signed_webhooks_duplicated_late_and_retried():
    secret = "whsec_test"
    received: list[tuple[dict, bool]] = []
    refused_once: set[str] = set()

    async def receiver(request: web.Request) -> web.Response:
        body = await request.read()
        event = json.loads(body)
        if event["idempotencyKey"] == "inv-3-try-0" and event["eventId"] not in refused_once:
            refused_once.add(event["eventId"])
            return web.Response(status=503)  # the gateway retries
        received.append((event, _verify(secret, request.headers["Billing-Signature"], body)))
        return web.Response(status=204)

    async def scenario():
        app = web.Application()
        app.router.add_post("/webhooks/payments", receiver)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        sim = GatewaySimulator(rate=0, decline_rate=0.3, seed=1, webhook_url=f"http://127.0.0.1:{port}/webhooks/payments",
                               webhook_secret=secret, webhook_duplicate_rate=1.0, webhook_delay_ms=(0, 300))
        await sim.start()
        async with GatewayClient(sim.url) as client:
            answers = {f"inv-{i}-try-0": await client.charge(f"inv-{i}-try-0", 100 + i, 1000 + i, "BRL")
                       for i in range(6)}
        deadline = time.monotonic() + 10
        while len(received) < 12 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        stats = sim.stats()
        await sim.close()
        await runner.cleanup()
        return answers, stats

    answers, stats = run(scenario())
    assert len(received) == 12 and all(ok for _, ok in received)
    by_event: dict[str, list[dict]] = {}
    for event, _ in received:
        by_event.setdefault(event["eventId"], []).append(event)
    assert len(by_event) == 6 and all(len(v) == 2 and v[0] == v[1] for v in by_event.values())
    for events in by_event.values():
        event = events[0]
        answer = answers[event["idempotencyKey"]]
        assert set(event) == {"eventId", "type", "idempotencyKey", "status", "id", "declineCode", "amount",
                              "currency", "customerId", "created"}
        assert event["id"] == answer.reference and event["status"].upper() == answer.outcome
        assert event["type"] == f"charge.{event['status']}"
        assert isinstance(event["amount"], int) and event["currency"] == "BRL"
    assert stats["webhooksDelivered"] == 12 and stats["webhookAttempts"] == 13


def test_extension_points_decide_and_gate_and_the_accepted_calls_are_readable():
    """A decision model of one's own (declines, 5xx, timeouts), a webhook gate around each
    delivery, and the read API: /v1/accepted and webhooksPending."""

    class Picky(DecisionModel):
        def decline_code(self, key, customer_id, amount, currency):
            return "do_not_honor" if customer_id == 13 else None

        def fails(self, key, calls):
            return key == "flaky" and calls == 1

        def times_out(self, key, calls):
            return key == "slow"

    class Gate:
        def __init__(self):
            self.entered = self.inside = self.most = 0

        async def __aenter__(self):
            self.entered += 1
            self.inside += 1
            self.most = max(self.most, self.inside)

        async def __aexit__(self, *exc):
            self.inside -= 1

    received: list[str] = []

    async def receiver(request: web.Request) -> web.Response:
        received.append(json.loads(await request.read())["idempotencyKey"])
        return web.Response(status=204)

    async def scenario():
        app = web.Application()
        app.router.add_post("/hook", receiver)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        gate = Gate()
        sim = GatewaySimulator(rate=0, decisions=Picky(), webhook_gate=gate, timeout_hold_seconds=0.3,
                               webhook_url=f"http://127.0.0.1:{runner.addresses[0][1]}/hook", webhook_secret="s",
                               webhook_delay_ms=(200, 200))
        await sim.start()
        async with GatewayClient(sim.url, timeout=5) as client:
            slow = await client.charge("slow", 1, 100, "USD")
            declined = await client.charge("k13", 13, 100, "USD")
            ok = await client.charge("k1", 1, 100, "USD")
            first = await _post(sim.url, "flaky", {"customerId": 1, "amount": 100, "currency": "USD"})
            again = await client.charge("flaky", 1, 100, "USD")
        pending = sim.stats()["webhooksPending"]
        async with ClientSession() as session:
            async with session.get(f"{sim.url}/v1/accepted") as resp:
                accepted = (await resp.json())["accepted"]
        deadline = time.monotonic() + 10
        while sim.pending_webhooks() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        stats = sim.stats()
        await sim.close()
        await runner.cleanup()
        return declined, ok, first, again, slow, pending, accepted, stats, gate

    declined, ok, first, again, slow, pending, accepted, stats, gate = run(scenario())
    assert declined.outcome == DECLINED and ok.outcome == SUCCEEDED and again.outcome == SUCCEEDED
    assert first[0] == 500 and stats["errors"] == 1
    assert slow.outcome == SUCCEEDED and stats["timeouts"] == 1
    assert pending > 0 and stats["webhooksPending"] == 0
    assert len(accepted) == 5 and accepted == sorted(accepted)  # the 500 was accepted too
    assert sorted(received) == ["flaky", "k1", "k13", "slow"]
    assert gate.entered == 4 and gate.inside == 0


def test_signature_header_format():
    header = signature_header("s", b'{"a":1}', timestamp=1700000000)
    assert header == "t=1700000000,v1=" + hmac.new(b"s", b'1700000000.{"a":1}', hashlib.sha256).hexdigest()


def test_cli_serves_ledger_and_stats():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "billing.cli", "gateway-sim", "--port", str(port), "--rate", "3",
                             "--latency-ms", "1-2", "--seed", "5"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        url = proc.stdout.readline().decode().strip()
        assert url == f"http://127.0.0.1:{port}"

        async def calls():
            async with GatewayClient(url) as client:
                return await asyncio.gather(*(client.charge(f"c{i}", 1, 10, "USD") for i in range(5)),
                                            return_exceptions=True)

        outcomes = run(calls())
        assert sum(isinstance(o, RateLimited) for o in outcomes) == 2
        ledger = json.load(urllib.request.urlopen(f"{url}/v1/ledger"))
        stats = json.load(urllib.request.urlopen(f"{url}/v1/stats"))
        assert len(ledger["charges"]) == 3 and ledger["rateLimited"] == 2
        assert stats["maxWindow"] == 3 and stats["perSecond"] == [3]
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0


def test_arrivals_are_stamped_by_the_kernel_not_by_a_stalled_loop():
    """A call that arrives while the simulator's event loop is stalled counts when it arrived."""
    async def scenario():
        async with GatewaySimulator(rate=0) as sim:
            async with GatewayClient(sim.url) as client:
                await client.charge("warm-up", 1, 1, "USD")  # the connection is open
                call = asyncio.create_task(client.charge("stalled", 1, 1, "USD"))
                await asyncio.sleep(0.05)  # the request is on the wire
                sent_before = time.time()
                time.sleep(0.3)  # the simulator (same loop) reads it only now
                await call
            return sim.accepted_times()[-1], sent_before

    arrived, sent_before = run(scenario())
    assert arrived <= sent_before


def test_the_gate_runs_right_before_the_bytes_and_a_closed_gate_sends_nothing():
    from billing.gateway.client import NotSent

    opened_at: list[float] = []

    async def slow_yes() -> bool:
        await asyncio.sleep(0.2)
        opened_at.append(time.time())
        return True

    async def no() -> bool:
        return False

    async def scenario():
        async with GatewaySimulator(rate=0) as sim:
            async with GatewayClient(sim.url) as client:
                with pytest.raises(NotSent):
                    await client.charge("held", 1, 1, "USD", gate=no)
                result = await client.charge("sent", 1, 1, "USD", gate=slow_yes)
            return result, sim.accepted_times(), sim.stats()

    result, arrivals, stats = run(scenario())
    assert result.outcome == SUCCEEDED
    assert stats["accepted"] == 1 and stats["badRequests"] == 0  # the held-back call never reached it
    assert 0 <= arrivals[0] - opened_at[0] < 0.05  # the bytes left as the gate opened
