"""After a point-in-time restore (docs/operations.md, "Backups and point-in-time recovery").

A restored database is the past, and the gateway remembers the future: between the restore instant
and the disaster the lost database created invoices, sent keys and was paid. `after_restore` makes
the restored database safe to run again, before any worker or API touches it:

- every sequence of schema billing moves a margin past its value (billing.after_failover): ids the
  lost future issued are never issued again for something else;
- a new idempotency-key namespace (billing.new_key_namespace): keys sent from now on cannot collide
  with keys the lost future sent; keys already stored keep theirs, so an attempt in doubt is sent
  again with its own key and the gateway answers its stored result;
- every lease of the past lapses (outbox, webhook deliveries, notifications, shard groups, charges
  claimed without a result): what the lost processes held is taken again at once.

What it cannot do alone is the gap: a charge the gateway made after the restore instant for an
invoice the restored database does not know (created after the instant) or for a known invoice
whose result it lacks. `unmatched_charges` finds them from the gateway's list of charges (the
simulator's ledger; with Stripe, the PaymentIntents created since the instant, whose
metadata[idempotency_key], metadata[invoice_id] and metadata[customer_id] name them): every
succeeded charge whose key no attempt of the restored database holds. Each is reported with what it
paid for as far as the restored database can tell, and the invoices of the same customer and amount
issued after the restore (the period charged a second time): docs/operations.md says how they are
reconciled.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone

import psycopg

from billing import db
from billing.after_failover import DEFAULT_MARGIN, Advanced, advance_sequences

KEY = re.compile(r"^(?P<namespace>[a-z0-9]+)-inv-(?P<invoice>\d+)-try-(?P<try>\d+)$")


@dataclass(frozen=True)
class Restored:
    sequences: list[Advanced]
    old_namespace: str
    new_namespace: str
    leases_lapsed: dict[str, int]
    attempts_in_doubt: int  # without a result, or UNKNOWN: sent again with their own key
    first_new_invoice_id: int  # every invoice from this id on was made after the restore

    def summary(self) -> str:
        lapsed = ", ".join(f"{t} {n}" for t, n in self.leases_lapsed.items() if n) or "none"
        return (f"sequences advanced: {len(self.sequences)}; key namespace {self.old_namespace} -> "
                f"{self.new_namespace}; leases lapsed: {lapsed}; attempts in doubt (sent again with their "
                f"key): {self.attempts_in_doubt}; invoices made after the restore start at id "
                f"{self.first_new_invoice_id}")


def after_restore(database_url: str, *, margin: int = DEFAULT_MARGIN, now: datetime | None = None) -> Restored:
    """The steps above, as the database owner (or a superuser), before the first worker starts.
    `now`: the engine's clock (default the wall clock; a simulation passes its own)."""
    now = now or datetime.now(timezone.utc)
    with psycopg.connect(database_url) as conn, conn.transaction():
        old = conn.execute(db.KEY_NAMESPACE).fetchone()[0]
        new = conn.execute(db.NEW_KEY_NAMESPACE).fetchone()[0]
        lapsed = {table: conn.execute(stmt, {"now": now}).rowcount for table, stmt in db.LAPSE_LEASES}
        doubt = conn.execute(db.ATTEMPTS_IN_DOUBT).fetchone()[0]
    moved = advance_sequences(database_url, margin=margin)
    invoice_seq = next((m for m in moved if m.sequence.endswith(".invoice_id_seq")), None)
    return Restored(moved, old, new, lapsed, doubt, (invoice_seq.after + 1) if invoice_seq else 1)


@dataclass
class Unmatched:
    """A succeeded charge at the gateway that no attempt of the restored database made."""

    key: str
    customer_id: int
    amount: int
    currency: str
    reference: str | None
    # KNOWN_INVOICE: its key names an invoice the restored database holds (same customer, amount
    #   and currency): the lost future was paid for it; the restored one would charge it again.
    # LOST_INVOICE: the invoice it paid was made after the restore instant (or the key is not ours):
    #   its period is invoiced again by the restored database.
    kind: str
    invoice: dict | None = None
    charged_again: list[dict] = field(default_factory=list)  # same customer and amount, made after the restore


def unmatched_charges(database_url: str, charges: Iterable[dict], *, since_invoice_id: int | None = None
                      ) -> list[Unmatched]:
    """`charges`: the gateway's charges since the restore instant, as the simulator's ledger lists
    them (idempotencyKey, customerId, amount, currency, status, id). `since_invoice_id`: the
    `first_new_invoice_id` of `after_restore` (invoices from it on were made after the restore)."""
    paid = [c for c in charges if c.get("status") == "succeeded"]
    with psycopg.connect(database_url) as conn:
        known = {r[0] for r in conn.execute(db.KNOWN_KEYS, {"keys": [c["idempotencyKey"] for c in paid]})}
        lost = [c for c in paid if c["idempotencyKey"] not in known]
        ids = [int(m["invoice"]) for c in lost if (m := KEY.match(c["idempotencyKey"]))]
        cols = ("id", "customer_id", "subscription_id", "kind", "period_start", "amount", "currency", "status")
        invoices = {r[0]: dict(zip(cols, r)) for r in conn.execute(db.INVOICES_BY_ID, {"ids": ids})}
        later: dict[int, list[dict]] = {}
        if since_invoice_id is not None:
            for r in conn.execute(db.INVOICES_OF_CUSTOMERS, {"customers": sorted({int(c["customerId"]) for c in lost}),
                                                             "since": since_invoice_id}):
                later.setdefault(r[1], []).append(dict(zip(cols, r)))
    out = []
    for c in lost:
        m = KEY.match(c["idempotencyKey"])
        inv = invoices.get(int(m["invoice"])) if m else None
        same = bool(inv and inv["customer_id"] == int(c["customerId"]) and inv["amount"] == c["amount"]
                    and inv["currency"] == c["currency"])
        again = [i for i in later.get(int(c["customerId"]), [])
                 if i["amount"] == c["amount"] and i["currency"] == c["currency"]]
        out.append(Unmatched(c["idempotencyKey"], int(c["customerId"]), c["amount"], c["currency"], c.get("id"),
                             "KNOWN_INVOICE" if same else "LOST_INVOICE", inv if same else None, again))
    return out


# -- the outbox against Kafka ------------------------------------------------------------------


@dataclass(frozen=True)
class OutboxCheck:
    read: int  # messages read from Kafka (from `since` on)
    marked: list[str]  # PENDING in the restored outbox, already on Kafka: marked published, not announced again
    kafka_only: list[str]  # on Kafka, unknown to the restored outbox: announced by the lost future
    not_on_kafka: list[str]  # PUBLISHED since `since` but absent from Kafka (Kafka lost them): reported

    def summary(self) -> str:
        return (f"outbox against Kafka: {self.read} messages read; {len(self.marked)} pending events already on "
                f"Kafka marked published; {len(self.kafka_only)} events on Kafka the restored outbox does not hold "
                f"(announced by the lost future); {len(self.not_on_kafka)} published events missing from Kafka")


def kafka_event_ids(bootstrap: str, topic: str, since: datetime, *, config: dict | None = None,
                    timeout: float = 60.0) -> tuple[int, set[str]]:
    """The CloudEvents ids of every message of `topic` whose timestamp is `since` or later, read
    from each partition's offset at that time up to its end (the high watermark when asked)."""
    import json
    import time
    import uuid

    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"billing-after-restore-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest", **(config or {})})
    try:
        partitions = consumer.list_topics(topic, timeout=timeout).topics[topic].partitions
        at = int(since.timestamp() * 1000)
        starts = consumer.offsets_for_times([TopicPartition(topic, p, at) for p in partitions], timeout=timeout)
        todo: dict[int, int] = {}
        assign = []
        for tp in starts:
            high = consumer.get_watermark_offsets(TopicPartition(topic, tp.partition), timeout=timeout)[1]
            if tp.offset >= 0 and tp.offset < high:
                todo[tp.partition] = high
                assign.append(TopicPartition(topic, tp.partition, tp.offset))
        ids: set[str] = set()
        read = 0
        if not assign:
            return 0, ids
        consumer.assign(assign)
        deadline = time.monotonic() + timeout
        while todo:
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading {topic} took over {timeout} s (partitions left: {sorted(todo)})")
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            read += 1
            try:
                ids.add(str(json.loads(msg.value())["id"]))
            except (ValueError, KeyError, TypeError):
                pass  # not one of ours
            if msg.offset() + 1 >= todo.get(msg.partition(), 0):
                todo.pop(msg.partition(), None)
        return read, ids
    finally:
        consumer.close()


def check_outbox(database_url: str, bootstrap: str, topic: str, since: datetime, *, config: dict | None = None,
                 now: datetime | None = None, timeout: float = 60.0) -> OutboxCheck:
    """After a restore, before the relay starts: every PENDING event Kafka already holds is marked
    published (its consumers saw it; it is not announced again); the events Kafka holds that the
    restored outbox does not are counted (the lost future announced them: nothing can take them
    back), and so are the events marked published since `since` that Kafka lacks (it lost them; the
    relay does not republish a published event: replay them with billing.replay_outbox_event if
    consumers need them). `since`: a while before the restore instant (the relay publishes within
    seconds of a commit; an hour is ample)."""
    now = now or datetime.now(timezone.utc)
    read, ids = kafka_event_ids(bootstrap, topic, since, config=config, timeout=timeout)
    listed = sorted(ids)
    with psycopg.connect(database_url) as conn, conn.transaction():
        marked = [r[0] for r in conn.execute(db.OUTBOX_MARK_ON_KAFKA, {"ids": listed, "now": now})]
        known = {r[0] for r in conn.execute(db.OUTBOX_KNOWN_EVENTS, {"ids": listed})}
        missing = [r[0] for r in conn.execute(db.OUTBOX_PUBLISHED_NOT_ON_KAFKA, {"ids": listed, "since": since})]
    return OutboxCheck(read, sorted(marked), sorted(ids - known), missing)
