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


def money_balances(ledger: dict, paid_cash: dict[str, int], refund_rows: list[dict] | None = None,
                   key_pattern: str = r"^[a-z0-9]+-ref-(\d+)(-try-\d+)?$") -> Check:
    """Money collected minus money refunded, per currency, from the gateway's own ledger, equals the
    cash of the PAID invoices (amount - amount_refunded) from the database; and no refund was
    executed twice (each refund key once at the gateway, no refund of a charge beyond what it
    collected). `paid_cash`: currency -> sum over PAID invoices; `refund_rows`: the refund table
    (its keys must be the only refunds the gateway made, each SUCCEEDED)."""
    import re

    collected: dict[str, int] = {}
    refunded: dict[str, int] = {}
    charges = {c["idempotencyKey"]: c for c in ledger.get("charges", [])}
    for c in charges.values():
        if c.get("status") == "succeeded":
            collected[c["currency"]] = collected.get(c["currency"], 0) + c["amount"]
    examples: list[str] = []
    keys = [r["idempotencyKey"] for r in ledger.get("refunds", [])]
    twice = sorted({k for k in keys if keys.count(k) > 1})
    examples += [f"refund key {k} executed twice" for k in twice[:5]]
    per_charge: dict[str, int] = {}
    for r in ledger.get("refunds", []):
        refunded[r["currency"]] = refunded.get(r["currency"], 0) + r["amount"]
        per_charge[r["chargeKey"]] = per_charge.get(r["chargeKey"], 0) + r["amount"]
    over = [k for k, amount in per_charge.items() if k not in charges or amount > charges[k]["amount"]]
    examples += [f"charge {k} refunded beyond what it collected" for k in over[:5]]
    unknown = []
    if refund_rows is not None:
        rows = {r["idempotency_key"]: r for r in refund_rows}
        unknown = [k for k in keys if k not in rows or rows[k]["status"] != "SUCCEEDED"
                   or not re.match(key_pattern, k)]
        examples += [f"gateway refund {k} is not a SUCCEEDED refund row" for k in unknown[:5]]
    currencies = sorted(set(collected) | set(refunded) | set(paid_cash))
    net = {cur: collected.get(cur, 0) - refunded.get(cur, 0) for cur in currencies}
    differ = [cur for cur in currencies if net[cur] != paid_cash.get(cur, 0)]
    examples += [f"{cur}: collected {collected.get(cur, 0)} - refunded {refunded.get(cur, 0)} = {net[cur]}, "
                 f"PAID invoices' cash {paid_cash.get(cur, 0)}" for cur in differ[:5]]
    return Check(
        "collected minus refunded equals the cash of PAID invoices",
        ok=not differ and not twice and not over and not unknown,
        figures=f"{len(charges)} charges, {len(keys)} refunds at the gateway ({sum(refunded.values())} minor units "
                f"in {len(refunded)} currencies); {len(currencies)} currencies balance"
                + (f", {len(differ)} do not" if differ else "") + f"; refunds executed twice: {len(twice)}",
        examples=examples,
        promise="per currency, what the gateway collected less what it refunded is what the PAID invoices keep; "
                "no refund executed twice, none beyond its charge")
