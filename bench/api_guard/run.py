"""The HTTP API's guard (billing.api.security.ApiGuard) per request, side by side with a baseline.

    python -m bench.api_guard.run --baseline c38faea [--rounds 6] [--requests 20000]

What the middleware itself costs on a request head, without a database (the key and customer
session look-ups are stubbed): a server key's GET and POST, and a customer session's POST. Each
round runs the current tree and the baseline in their own processes (the order swapped every
round), each process timing `--requests` requests five times and keeping the best; every round is
printed with the load beside it. No database, no network: the figure is CPU only.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

from bench.baseline import baseline_tree, tree_env

CHILD = r'''
import asyncio, sys, time
from billing.api.security import ApiGuard, Principal, new_api_key
from billing.api.customer_sessions import new_customer_token

made = new_api_key()
key = made.key if hasattr(made, "key") else made
token = new_customer_token(42).token
server = Principal(key_id="bk_abcdefghij", scopes=("subscriptions:read", "subscriptions:write"))
customer = Principal(key_id="bk_abcdefghij", scopes=("subscriptions:read", "subscriptions:write"), customer_id=42)


async def authenticate(_hash):
    return server


async def session(_customer, _hash):
    return customer

guard = ApiGuard(None, authenticate=authenticate, limiter=None, customer_session=session)


def scope(method, path, bearer):
    return {"type": "http", "method": method, "path": path, "client": ("127.0.0.1", 1),
            "headers": [(b"authorization", f"Bearer {bearer}".encode()), (b"content-type", b"application/json"),
                        (b"content-length", b"20")]}

CASES = (("key GET", scope("GET", "/v1/subscriptions/1", key)),
         ("key POST", scope("POST", "/v1/subscriptions/1/cancel", key)),
         ("cs POST", scope("POST", "/v1/subscriptions/1/cancel", token)))


async def once(n):
    out = {}
    for name, sc in CASES:
        started = time.perf_counter()
        for _ in range(n):
            sc.pop("state", None)
            assert await guard._refusal(sc) is None
        out[name] = (time.perf_counter() - started) / n * 1e6
    return out

best = {}
for _ in range(5):
    for name, us in asyncio.run(once(int(sys.argv[1]))).items():
        best[name] = min(best.get(name, 1e9), us)
print("  ".join(f"{name} {us:5.1f} us" for name, us in best.items()))
'''


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", default="c38faea", help="the commit to compare with (default c38faea)")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--requests", type=int, default=20000)
    args = parser.parse_args()
    trees = {"this tree": None, args.baseline: baseline_tree(args.baseline)}
    for r in range(1, args.rounds + 1):
        order = list(trees) if r % 2 else list(reversed(trees))
        for name in order:
            load = os.getloadavg()[0]
            out = subprocess.run([sys.executable, "-c", CHILD, str(args.requests)], env=tree_env(trees[name]),
                                 check=True, capture_output=True, text=True).stdout.strip()
            print(f"round {r}  {name:>10}  load {load:5.2f}  {out}", flush=True)


if __name__ == "__main__":
    main()
