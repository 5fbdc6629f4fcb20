"""How to call Stripe from the asyncio worker: our aiohttp calls (billing.providers.stripe) against the
official `stripe` package's async methods (`StripeClient(...).v1.payment_intents.create_async`) on
its aiohttp and its httpx clients. Same requests (a confirmed off-session payment intent with an
Idempotency-Key), same server (stripe-mock on loopback), `--in-flight` calls at a time.

Reports calls/s, the client process's CPU time per call and the threads alive during the run
(the question was whether the package needs a thread per call: it does not).

    python -m bench.stripe_client.run [--calls 600] [--in-flight 50] [--stripe-mock URL]

Without --stripe-mock it starts one with scripts/services/stripe-mock.sh.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import secrets
import subprocess
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

API_KEY = "sk_test_" + secrets.token_hex(16)


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


async def run(name: str, call, calls: int, in_flight: int) -> dict:
    semaphore = asyncio.Semaphore(in_flight)
    threads = [threading.active_count()]
    errors = 0

    async def one(i: int) -> None:
        nonlocal errors
        async with semaphore:
            try:
                await call(i)
            except Exception:  # noqa: BLE001 - counted
                errors += 1
            threads.append(threading.active_count())

    await call(-1)  # warm: the connection and the imports
    c0, t0 = cpu(), time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(calls)))
    wall, used = time.perf_counter() - t0, cpu() - c0
    return {"client": name, "calls/s": round(calls / wall), "CPU ms/call": round(1000 * used / calls, 3),
            "max threads": max(threads), "errors": errors}


async def main(calls: int, in_flight: int, base: str) -> list[dict]:
    import stripe
    from stripe._http_client import AIOHTTPClient, HTTPXClient

    from billing.providers import ChargeRequest
    from billing.providers.stripe import StripeProvider

    results = []
    ours = StripeProvider(API_KEY, api_base=base, timeout=10)
    run_id = secrets.token_hex(4)

    async def ours_call(i: int) -> None:
        # stripe-mock answers a canned intent (status requires_payment_method, no error): UNKNOWN
        # here, which is right for that answer; the HTTP work is what is measured.
        result = await ours.charge(ChargeRequest(f"b-{run_id}-ours-{i}", 1, 1, 2990, "BRL", "cus_1", "pm_card_visa"))
        if result.reference is None:
            raise RuntimeError(result)

    results.append(await run("aiohttp, billing.providers.stripe", ours_call, calls, in_flight))
    await ours.close()

    for label, http in (("stripe package + its AIOHTTPClient", AIOHTTPClient(timeout=10)),
                        ("stripe package + its HTTPXClient", HTTPXClient(timeout=10))):
        client = stripe.StripeClient(API_KEY, base_addresses={"api": base}, http_client=http, max_network_retries=0)

        async def package_call(i: int, client=client, label=label) -> None:
            await client.v1.payment_intents.create_async(
                {"amount": 2990, "currency": "brl", "customer": "cus_1", "payment_method": "pm_card_visa",
                 "off_session": True, "confirm": True,
                 "metadata": {"invoice_id": "1", "customer_id": "1", "idempotency_key": f"b-{run_id}-{label}-{i}"}},
                {"idempotency_key": f"b-{run_id}-{label[:20]}-{i}"})

        results.append(await run(label, package_call, calls, in_flight))
        await http.close_async()
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=600)
    parser.add_argument("--in-flight", type=int, default=50)
    parser.add_argument("--stripe-mock", default=None)
    args = parser.parse_args()
    base = args.stripe_mock or subprocess.run(["bash", str(ROOT / "scripts/services/stripe-mock.sh")], check=True,
                                              capture_output=True, text=True).stdout.strip().splitlines()[-1]
    rows = asyncio.run(main(args.calls, args.in_flight, base))
    print(f"{args.calls} calls, {args.in_flight} in flight, against stripe-mock at {base}")
    print(f"{'client':<40} {'calls/s':>8} {'CPU ms/call':>12} {'max threads':>12} {'errors':>7}")
    for r in rows:
        print(f"{r['client']:<40} {r['calls/s']:>8} {r['CPU ms/call']:>12} {r['max threads']:>12} {r['errors']:>7}")
