"""Mailpit for the tests: the shared one `make services` starts (BILLING_TEST_SMTP_URL,
BILLING_TEST_MAILPIT_URL, BILLING_TEST_SMTP_CA_FILE), or one started here by
scripts/services/mailpit.sh; and a private one a test can stop and start again."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "services" / "mailpit.sh"


def shared() -> tuple[str, str, str]:
    smtp, http, ca = os.environ.get("BILLING_TEST_SMTP_URL"), os.environ.get("BILLING_TEST_MAILPIT_URL"), \
        os.environ.get("BILLING_TEST_SMTP_CA_FILE")
    if smtp and http and ca:
        return smtp, http, ca
    out = subprocess.run(["bash", str(SCRIPT)], check=True, capture_output=True, text=True, timeout=600).stdout
    smtp, http, ca = out.split()
    return smtp, http, ca


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listens on {port}")


class PrivateMailpit:
    """A Mailpit of the test's own, on free ports, that it can stop and start again (same ports, same store)."""

    def __init__(self, tmp: Path) -> None:
        self.smtp_port, self.http_port = free_port(), free_port()
        self.db = tmp / "mailpit.db"
        self.proc: subprocess.Popen | None = None
        self.smtp_url = f"smtp://127.0.0.1:{self.smtp_port}"
        self.http_url = f"http://127.0.0.1:{self.http_port}"

    def start(self) -> None:
        self.proc = subprocess.Popen(["bash", str(SCRIPT), "serve", str(self.smtp_port), str(self.http_port), str(self.db)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(self.smtp_port)
        wait_port(self.http_port)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None


class Inbox:
    """Mailpit's HTTP API (/api/v1)."""

    def __init__(self, base: str) -> None:
        self.http = httpx.Client(base_url=base, timeout=10)

    def messages_to(self, address: str) -> list[dict]:
        found = self.http.get("/api/v1/search", params={"query": f'to:"{address}"', "limit": 200}).json()
        return found.get("messages") or []

    def message(self, message_id: str) -> dict:
        return self.http.get(f"/api/v1/message/{message_id}").json()

    def headers(self, message_id: str) -> dict:
        return self.http.get(f"/api/v1/message/{message_id}/headers").json()

    def part(self, message_id: str, part_id: str) -> bytes:
        return self.http.get(f"/api/v1/message/{message_id}/part/{part_id}").content

    def count(self) -> int:
        return self.http.get("/api/v1/messages", params={"limit": 1}).json()["messages_count"]
