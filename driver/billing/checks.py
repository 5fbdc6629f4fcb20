"""What the demo's invariants and the chaos checker share: the `Check` a promise yields, and a
reader of the whole event topic as a consumer sees it (from offset 0 to each partition's end)."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field


@dataclass
class Check:
    """One invariant checked after a run: its name, whether it holds, one line of figures, the
    first counter-examples when it does not, and (for the report) the promise in one sentence."""

    name: str
    ok: bool
    figures: str
    examples: list = field(default_factory=list)
    promise: str = ""

    def line(self) -> str:
        return f"  [{'PASS' if self.ok else 'FAIL'}] {self.name}: {self.figures}"


def all_hold(checks: list[Check]) -> bool:
    """True when there is at least one check and every one holds."""
    return bool(checks) and all(c.ok for c in checks)


@dataclass
class TopicMessage:
    partition: int
    offset: int
    key: str | None
    value: dict | None  # the JSON value, None when it is not JSON
    raw: bytes | None


def read_topic(bootstrap: str, topic: str, *, timeout: float = 60.0, group_prefix: str = "billing-check"
               ) -> list[TopicMessage]:
    """Every message of `topic`, from offset 0 to the high watermark of each partition (read
    committed), by a consumer group of its own. Raises when the end is not reached in `timeout`."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"{group_prefix}-{uuid.uuid4().hex}",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": True,
        "isolation.level": "read_committed",
    })
    try:
        meta = consumer.list_topics(topic, timeout=timeout)
        tmeta = meta.topics.get(topic)
        if tmeta is None or tmeta.error is not None:
            return []
        parts = sorted(tmeta.partitions)
        ends = {}
        for p in parts:
            _low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)
            ends[p] = high
        todo = {p for p in parts if ends[p] > 0}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
        out: list[TopicMessage] = []
        deadline = time.monotonic() + timeout
        while todo and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:  # read to the end of this partition
                    todo.discard(msg.partition())
                continue
            raw = msg.value()
            try:
                value = json.loads(raw) if raw is not None else None
            except ValueError:
                value = None
            key = msg.key().decode() if msg.key() is not None else None
            out.append(TopicMessage(msg.partition(), msg.offset(), key, value, raw))
            if msg.offset() + 1 >= ends[msg.partition()]:
                todo.discard(msg.partition())
        if todo:
            raise RuntimeError(f"could not read partitions {sorted(todo)} of {topic} to their end within {timeout:g} s")
        return out
    finally:
        consumer.close()
