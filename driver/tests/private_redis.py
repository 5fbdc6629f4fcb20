"""A redis-server of a test's own, so stopping it (fail-closed tests) disturbs nobody else."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time

import pytest
import redis


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PrivateRedis:
    def __init__(self) -> None:
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen([shutil.which("redis-server"), "--bind", "127.0.0.1", "--port", str(self.port),
                                      "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                if redis.Redis.from_url(self.url).ping():
                    return
            except redis.ConnectionError:
                time.sleep(0.05)
        raise RuntimeError("private redis-server did not start")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None


@pytest.fixture
def private_redis():
    if not shutil.which("redis-server"):
        pytest.skip("redis-server is not installed")
    server = PrivateRedis()
    server.start()
    yield server
    server.stop()
