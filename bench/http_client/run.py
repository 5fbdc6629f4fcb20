"""Which async HTTP client for the gateway calls: aiohttp or httpx?

A server in its own process answers each POST after a uniform 50-300 ms (mean 175 ms); the client
keeps 100 calls in flight. Ceiling: 100 / 0.175 s = 571 calls/s. Each configuration makes the same
number of calls; we report calls/s, latency overhead (p50/p99 of observed minus served delay) and
the client process's CPU time.

    python -m bench.http_client.run [--calls 3000] [--in-flight 100]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import socket
import subprocess
import sys
import time

SERVER = r"""
import asyncio, random, sys
from aiohttp import web
async def handle(request):
    await request.read()
    delay = random.uniform(0.050, 0.300)
    await asyncio.sleep(delay)
    return web.json_response({"id": "ch_x", "status": "succeeded", "declineCode": None, "delay": delay})
app = web.Application()
app.router.add_post("/v1/charges", handle)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), access_log=None, print=None, backlog=4096)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def drive(call, calls: int, in_flight: int) -> tuple[float, list[float]]:
    overhead: list[float] = []
    remaining = iter(range(calls))

    async def lane():
        for i in remaining:
            started = time.perf_counter()
            delay = await call(i)
            overhead.append(time.perf_counter() - started - delay)

    started = time.perf_counter()
    await asyncio.gather(*(lane() for _ in range(in_flight)))
    return time.perf_counter() - started, overhead


async def bench_aiohttp(url: str, calls: int, in_flight: int, limit: int):
    import aiohttp

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=limit)) as session:
        async def call(i):
            async with session.post(url, json={"customerId": i, "amount": 100, "currency": "USD"},
                                    headers={"Idempotency-Key": f"k{i}"}) as resp:
                return (await resp.json())["delay"]
        await drive(call, min(in_flight, calls), in_flight)  # warm-up: open the connections
        return await drive(call, calls, in_flight)


async def bench_httpx(url: str, calls: int, in_flight: int, connections: int):
    import httpx

    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    async with httpx.AsyncClient(limits=limits, timeout=30) as client:
        async def call(i):
            resp = await client.post(url, json={"customerId": i, "amount": 100, "currency": "USD"},
                                     headers={"Idempotency-Key": f"k{i}"})
            return resp.json()["delay"]
        await drive(call, min(in_flight, calls), in_flight)
        return await drive(call, calls, in_flight)


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--in-flight", type=int, default=100)
    args = ap.parse_args()
    port = free_port()
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(port)])
    url = f"http://127.0.0.1:{port}/v1/charges"
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        ceiling = args.in_flight / 0.175
        configs = [
            ("aiohttp, connector limit 100 (default)", lambda: bench_aiohttp(url, args.calls, args.in_flight, 100)),
            ("aiohttp, no connector limit (shipped)", lambda: bench_aiohttp(url, args.calls, args.in_flight, 0)),
            ("httpx, 20 keep-alive connections", lambda: bench_httpx(url, args.calls, args.in_flight, 20)),
            ("httpx, 100 keep-alive connections", lambda: bench_httpx(url, args.calls, args.in_flight, 100)),
        ]
        rows = []
        print(f"{args.calls} calls, {args.in_flight} in flight, server 50-300 ms; ceiling {ceiling:.0f} calls/s")
        for name, factory in configs:
            before = cpu()
            elapsed, overhead = asyncio.run(factory())
            used = cpu() - before
            overhead.sort()
            row = {"client": name, "calls_per_s": round(args.calls / elapsed, 1),
                   "of_ceiling": round(args.calls / elapsed / ceiling, 3),
                   "overhead_p50_ms": round(overhead[len(overhead) // 2] * 1000, 1),
                   "overhead_p99_ms": round(overhead[int(len(overhead) * 0.99)] * 1000, 1),
                   "client_cpu_ms_per_call": round(used / (args.calls + args.in_flight) * 1000, 3)}
            rows.append(row)
            print(json.dumps(row))
    finally:
        server.terminate()
        server.wait(10)
    print("\n| client | calls/s | of ceiling | overhead p50 | overhead p99 | client CPU per call |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['client']} | {r['calls_per_s']} | {r['of_ceiling']:.0%} | {r['overhead_p50_ms']} ms | "
              f"{r['overhead_p99_ms']} ms | {r['client_cpu_ms_per_call']} ms |")


if __name__ == "__main__":
    main()
