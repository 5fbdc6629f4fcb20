"""Issue 27, finding 3: idle anonymous TCP connections must not make legitimate requests answer
503. A real `billing serve` on loopback; the attackers' sockets come from other loopback
addresses (127.0.0.2, 127.0.1.x: all of 127/8 is loopback on Linux), the legitimate client from
127.0.0.1. Bounded: ~600 sockets, a few seconds."""

from __future__ import annotations

import os
import socket
import time

import httpx
import pytest

from .chaos.harness import BILLING, Proc, free_ports, wait_port


@pytest.fixture
def served(db_url, tmp_path):
    port, = free_ports(1)
    env = {k: v for k, v in os.environ.items() if not k.startswith("BILLING_")}
    env.update(BILLING_DATABASE_URL=db_url, BILLING_LOG_LEVEL="WARNING")
    proc = Proc("serve", [BILLING, "serve", "--port", str(port)], env, tmp_path)
    proc.start()
    try:
        assert wait_port(port, 30), proc.tail()
        yield port
    finally:
        proc.stop(timeout=10)


def idle_sockets(port: int, sources: list[str], per_source: int) -> list[socket.socket]:
    opened = []
    for source in sources:
        for _ in range(per_source):
            s = socket.socket()
            s.bind((source, 0))
            s.settimeout(2)
            try:
                s.connect(("127.0.0.1", port))
            except OSError:
                s.close()
                continue
            opened.append(s)
    return opened


def legit(port: int) -> tuple[int, float]:
    start = time.monotonic()
    r = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5)
    return r.status_code, time.monotonic() - start


def refused_with_429(sock: socket.socket) -> bool:
    sock.settimeout(0.5)
    try:
        data = sock.recv(4096)
    except (socket.timeout, ConnectionResetError):
        return False
    return data.startswith(b"HTTP/1.1 429") and b"Retry-After:" in data


def test_idle_connections_from_one_address_are_capped(served):
    port = served
    sockets = idle_sockets(port, ["127.0.0.2"], 300)
    try:
        assert len(sockets) >= 257
        status, seconds = legit(port)
        assert status == 200 and seconds < 2, (status, seconds)
        # the 33rd connection of that address on was answered 429 with Retry-After and closed
        assert sum(refused_with_429(s) for s in sockets[32:40]) == 8
    finally:
        for s in sockets:
            s.close()


def test_idle_connections_from_many_addresses_are_shed_oldest_first(served):
    port = served
    sources = [f"127.0.1.{i}" for i in range(1, 41)]  # 40 addresses x 8: 320 idle sockets, none over its cap
    sockets = idle_sockets(port, sources, 8)
    try:
        assert len(sockets) >= 300
        for _ in range(3):
            status, seconds = legit(port)
            assert status == 200 and seconds < 2, (status, seconds)
    finally:
        for s in sockets:
            s.close()
