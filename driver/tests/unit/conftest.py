"""The fast tier: pure logic, no services. `make test` runs it first, so a broken pure function
fails in seconds, before any server starts. Nothing here may open a socket to PostgreSQL, Redis or
Kafka (the fixture below makes sure)."""

from __future__ import annotations

import socket

import pytest


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the fast tier must not open network connections")

    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
