"""Where the outbox relay publishes: the `EventSink` protocol and its two implementations.

* `KafkaSink`: confluent-kafka's idempotent producer, tuned for an ordered, at-least-once relay
  (`billing.worker.relay` explains why each setting matters for the order);
* `JsonlSink`: one JSON object per line in a file, fsynced before each event is reported
  delivered: the stand-in for Kafka when none is configured (the demo without Kafka, tests).

A sink reports each produced event once, through the `on_delivery` callback given to `produce`,
from `poll` or `flush`: None once the event is durably stored, else the error. Optional methods
the relay uses when present: `purge()` (drop what is queued or in flight; their reports come back
with an error) and `recover()` (rebuild after a fatal error).
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Callable, Protocol

log = logging.getLogger("billing.relay")

DeliveryCallback = Callable[[BaseException | object | None], None]


class EventSink(Protocol):
    """Where the relay publishes. `on_delivery(err)` is called once per produced event, from
    `poll`/`flush`, with None once the event is durably stored, else with the error."""

    def produce(self, key: bytes, value: bytes, on_delivery: DeliveryCallback) -> None: ...

    def poll(self, timeout: float) -> int: ...

    def flush(self, timeout: float) -> int:
        """Deliver what is queued, waiting up to `timeout`; returns how many are still pending."""
        ...


class KafkaSink:
    """confluent-kafka's idempotent producer, tuned for an ordered, at-least-once relay."""

    def __init__(self, bootstrap: str, topic: str, *, config: dict | None = None) -> None:
        from confluent_kafka import Producer

        self.topic = topic
        conf = {
            "bootstrap.servers": bootstrap,
            "client.id": "billing-relay",
            "enable.idempotence": True,
            "acks": "all",
            # Never fail a message because the broker is away: it waits, in order, until the
            # broker is back (see the module docstring). The relay watches its own progress.
            "message.timeout.ms": 0,
            "linger.ms": 5,
            "batch.num.messages": 10000,
            "batch.size": 1_000_000,
            "compression.type": "lz4",
            "queue.buffering.max.messages": 500_000,
            "queue.buffering.max.kbytes": 512 * 1024,
            "reconnect.backoff.ms": 100,
            "reconnect.backoff.max.ms": 2000,
            "socket.keepalive.enable": True,
            "error_cb": self._on_error,
        }
        conf.update(config or {})
        self._conf = conf
        self.fatal: object | None = None
        self._last_error_log = float("-inf")
        self._suppressed = 0
        self._producer = Producer(conf)

    def recover(self) -> None:
        """After a fatal error (idempotence broken) the producer is unusable: start a new one."""
        from confluent_kafka import Producer

        if self.fatal is not None:
            log.warning("rebuilding the kafka producer after a fatal error", extra={"error": str(self.fatal)})
            self._producer.purge(in_queue=True, in_flight=True, blocking=False)
            self._producer.poll(0)
            self.fatal = None
            self._producer = Producer(self._conf)

    def _on_error(self, err) -> None:
        if err.fatal():
            self.fatal = err
            log.error("kafka producer fatal error", extra={"error": str(err)})
            return
        # Broker down, connection refused...: librdkafka retries by itself. It says so several
        # times a second; one line every 10 s is enough.
        now = time.monotonic()
        self._suppressed += 1
        if now - self._last_error_log >= 10:
            log.warning("kafka: %s", err.str(), extra={"similar_errors": self._suppressed})
            self._last_error_log, self._suppressed = now, 0

    def produce(self, key: bytes, value: bytes, on_delivery: DeliveryCallback) -> None:
        self._producer.produce(self.topic, value=value, key=key, on_delivery=lambda err, _msg: on_delivery(err))

    def poll(self, timeout: float) -> int:
        return self._producer.poll(timeout)

    def flush(self, timeout: float) -> int:
        return self._producer.flush(timeout)

    def purge(self) -> None:
        """Drop what is queued or in flight; their reports come back with a _PURGE_* error."""
        self._producer.purge(in_queue=True, in_flight=True, blocking=False)
        self._producer.poll(0)

    def close(self, timeout: float = 5.0) -> None:
        left = self._producer.flush(timeout)
        if left:
            log.warning("kafka producer closed with %d messages unacknowledged (they stay in the outbox)", left)


class JsonlSink:
    """One JSON object per line in a file: the stand-in for Kafka when none is configured.

    Each line is `{"key": "<aggregate id>", "value": <the CloudEvents envelope>}`. Events are
    buffered by `produce`, written and fsynced by `poll`/`flush`, and only then reported
    delivered, so a crash never reports an event that is not on disk."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "ab")  # noqa: SIM115 - kept open for the sink's lifetime
        self._buffer: list[tuple[bytes, DeliveryCallback]] = []

    def produce(self, key: bytes, value: bytes, on_delivery: DeliveryCallback) -> None:
        line = b'{"key": ' + json.dumps(key.decode()).encode() + b', "value": ' + value + b"}\n"
        self._buffer.append((line, on_delivery))

    def _write(self) -> int:
        batch, self._buffer = self._buffer, []
        if not batch:
            return 0
        try:
            self._file.write(b"".join(line for line, _ in batch))
            self._file.flush()
            os.fsync(self._file.fileno())
        except OSError as exc:
            for _, cb in batch:
                cb(exc)
            return len(batch)
        for _, cb in batch:
            cb(None)
        return len(batch)

    def poll(self, timeout: float) -> int:
        return self._write()

    def flush(self, timeout: float) -> int:
        self._write()
        return 0

    def purge(self) -> None:
        self._buffer.clear()

    def close(self, timeout: float = 5.0) -> None:
        self._write()
        self._file.close()
