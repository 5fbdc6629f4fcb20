"""Usage ingestion (issue 29, docs/usage.md): one SQL call per batch (`billing.ingest_usage`), and
`billing usage consume`, the Kafka consumer group on `BILLING_USAGE_TOPIC`.

The consumer's exactly-once effect: a batch of messages is ingested in ONE database transaction,
and the partitions' offsets are committed to Kafka only after that transaction committed. A crash
between the two re-delivers the batch; every event in it is then a duplicate of its
(customer, source, id) key, stored in the same transaction as its counts, so nothing is counted
twice and nothing is lost. Messages the engine cannot accept (not JSON, not a CloudEvent, an
unknown customer, a time out of the window, a non-numeric value for a numeric meter) go to the
dead-letter topic with the reason in a header, before the offsets that passed them are committed.
"""

from __future__ import annotations

import gc
import logging
import operator
import signal
import time
from dataclasses import dataclass, field
from datetime import timedelta
from itertools import chain

import orjson
import psycopg
from psycopg.types.json import Jsonb

from billing import db
from billing.clock import Clock
from billing.config import Settings

log = logging.getLogger("billing.usage")

MAX_BATCH = 1000  # billing.ingest_usage's limit, and POST /usage-events'
KAFKA_MAX_BATCH = 50000  # billing.ingest_usage_batch's and ingest_usage_columns' limit
# the consumer's transactions by default (ingest7: 20,000 cost one backend ~2 µs an event less than 10,000,
# fewer rollup rows and per-batch steps; end to end on a quiet host no gain; bench/README.md "Issue 29's Kafka door, seventh pass")
KAFKA_BATCH = 20000

def windows(settings: Settings) -> dict:
    return {"grace": timedelta(seconds=settings.usage_grace),
            "skew": timedelta(seconds=settings.usage_max_skew),
            "retention": timedelta(days=settings.usage_retention)}


def message_text(value) -> str | None:
    """A Kafka message's value as the text ingest_usage_batch parses, or None when it cannot be
    JSON (no value, not UTF-8, a NUL character): dead-lettered as invalid_json without asking the
    database. Whether the text is JSON, and a CloudEvent, is the database's call."""
    if value is None:
        return None
    try:
        text = value.decode("utf-8") if isinstance(value, (bytes, bytearray)) else str(value)
    except UnicodeDecodeError:
        return None
    return None if "\x00" in text else text


_ATTRIBUTES = ("specversion", "subject", "id", "source", "type", "time")


def _exact(value) -> bool:
    """True when `value` (parsed JSON) holds no float: re-serialized, it is the same JSON value to
    PostgreSQL's jsonb (orjson reads a number with a fraction or an exponent, or an integer past 64
    bits, as a float, which may not print back as the digits that came)."""
    kind = type(value)
    if kind is dict:
        return all(_exact(v) for v in value.values())
    if kind is list:
        return all(_exact(v) for v in value)
    return kind is not float


def event_columns(values: list) -> tuple[tuple, list, list]:
    """The Kafka door's parse (billing.ingest_usage_columns): the messages' values, each one's
    envelope attributes read here, so the database parses no envelope, only each event's data.

    Returns (columns, kept, dead): columns = the eight lists of ingest_usage_columns (specversion,
    subject, id, source, type, time, data, raw), kept = the indexes in `values` of the events sent,
    dead = the indexes of the values that cannot be JSON (no value, not UTF-8, a NUL): invalid_json
    without asking the database. An event is sent as its attributes only when they are exactly what
    the database's `e ->> 'x'` and `e -> 'data'` would read: the attributes strings or null, data an
    object without floats (or null, or absent), no \\u0000 escape; anything else is sent as its raw
    text (p_raw) and read by the database as the JSON doors read it, so both doors answer alike."""
    fast = _batch_columns(values)
    if fast is not None:
        return fast, list(range(len(values))), []
    return _each_columns(values)


def _each_columns(values: list) -> tuple[tuple, list, list]:
    """event_columns value by value, every case (its rules)."""
    rows, kept, dead = [], [], []
    loads, dumps, get_all, text = orjson.loads, orjson.dumps, _ALL_ATTRIBUTES, str
    for n, value in enumerate(values):
        if type(value) is not bytes or b"\\u0000" in value:  # (orjson refuses a NUL byte: _by_rule then)
            row = _by_rule(value)
        else:
            # the common case: every attribute present and a string, data a flat object of no float
            try:
                event = loads(value)
                spec, subject, id_, source, kind, time_ = got = get_all(event)
                body = event["data"]
            except (orjson.JSONDecodeError, KeyError, TypeError):
                row = _by_rule(value)
            else:
                if (type(spec) is text and type(subject) is text and type(id_) is text and type(source) is text
                        and type(kind) is text and type(time_) is text and type(body) is dict
                        and _FLAT.issuperset(map(type, body.values()))):
                    row = (*got, dumps(body).decode(), None)
                else:
                    row = _by_rule(value, event)
        if row is None:
            dead.append(n)
        else:
            rows.append(row)
            kept.append(n)
    columns = tuple(map(list, zip(*rows))) if rows else ([], [], [], [], [], [], [], [])
    return columns, kept, dead


_ALL_ATTRIBUTES = operator.itemgetter(*_ATTRIBUTES)
_FLAT = frozenset((str, int, bool, type(None)))  # values of a data object that print back exactly
_EACH_ATTRIBUTE = tuple(operator.itemgetter(k) for k in _ATTRIBUTES)
_DATA = operator.itemgetter("data")


def _batch_columns(values: list) -> tuple | None:
    """event_columns' common case, the batch at once: every value bytes without a NUL byte or a \\u0000
    escape, JSON orjson reads as an object with the six attributes as strings and data a flat object
    of no float; then the columns are the very ones the loop (_each_columns) builds, a list per
    column, each step one C loop over the batch (~0.5 µs a message less than the loop on a lightly
    loaded host). None: some value is not; the loop then reads each one by its rules."""
    if not values or set(map(type, values)) != _BYTES:
        return None
    blob = b"\x00".join(values)
    if blob.count(b"\x00") != len(values) - 1 or b"\\u0000" in blob:
        return None
    # the batch's ~20,000 dicts alive at once would start ~30 collections of the young generations
    # (and now and then of the whole heap) that find nothing to free: the collector waits until they go
    collecting = gc.isenabled()
    gc.disable()
    try:
        events = list(map(orjson.loads, values))
        columns = [list(map(get, events)) for get in _EACH_ATTRIBUTE]
        bodies = list(map(_DATA, events))
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return None
    finally:
        if collecting:
            gc.enable()
    if any(set(map(type, column)) != _STR for column in columns) or set(map(type, bodies)) != _DICT \
            or not _FLAT.issuperset(map(type, chain.from_iterable(map(dict.values, bodies)))):
        return None
    columns.append(list(map(bytes.decode, map(orjson.dumps, bodies))))
    columns.append([None] * len(values))
    return tuple(columns)


_BYTES, _STR, _DICT = {bytes}, {str}, {dict}
_NOT_PARSED = object()


def _by_rule(value, event=_NOT_PARSED) -> tuple | None:
    """event_columns' row for one value, every case: its attributes, or its raw text, or None (dead)."""
    if value is None or (type(value) is bytes and b"\x00" in value):
        return None
    if type(value) is bytes and b"\\u0000" not in value:
        if event is _NOT_PARSED:
            try:
                event = orjson.loads(value)
            except orjson.JSONDecodeError:
                event = _NOT_PARSED
        if type(event) is dict:
            got = tuple(event.get(k) for k in _ATTRIBUTES)
            body = event.get("data", _NOT_PARSED)
            if all(type(v) is str or v is None for v in got) and (
                    body is _NOT_PARSED or body is None or (type(body) is dict and _exact(body))):
                return (*got, None if body is _NOT_PARSED else orjson.dumps(body).decode(), None)
    text = message_text(value)
    return None if text is None else (None, None, None, None, None, None, None, text)


def _columns_call(columns: tuple, now, settings: Settings) -> tuple[bool, dict]:
    """ingest_usage_columns' parameters for event_columns' lists: (joined, params), joined when each
    attribute column goes as one text (see _joined), else every column as a list."""
    if len(columns[7]) > KAFKA_MAX_BATCH:
        raise ValueError(f"at most {KAFKA_MAX_BATCH} events a batch, got {len(columns[7])}")
    names = ("spec", "subject", "id", "source", "type", "time", "data", "raw")
    joined = [_joined(c) for c in columns[:7]] if len(columns[7]) > 1 else [None]
    if None in joined:
        return False, {**dict(zip(names, columns)), "now": now, **windows(settings)}
    return True, {**dict(zip(names, joined)), "raw": columns[7], "now": now, **windows(settings)}


def ingest_columns(conn: psycopg.Connection, columns: tuple, now, settings: Settings) -> list[tuple[int, str, str | None]]:
    """Ingests up to KAFKA_MAX_BATCH events given as event_columns' lists
    (billing.ingest_usage_columns) in the caller's transaction: (ord, status, reason) per event."""
    joined, params = _columns_call(columns, now, settings)
    rows = conn.execute(db.INGEST_USAGE_COLUMNS_JOINED if joined else db.INGEST_USAGE_COLUMNS, params).fetchall()
    return [(r[0], r[1], r[2]) for r in rows]


def ingest_columns_counts(conn: psycopg.Connection, columns: tuple, now,
                          settings: Settings) -> tuple[int, int, list[tuple[int, str | None]]]:
    """ingest_columns' answers as the consumer needs them, read by the database in one row: (accepted,
    duplicate, [(ord, reason) of each event rejected, in ord order]): the client reads no row per
    event (~0.9 µs an event of the consumer's CPU)."""
    return _counts(conn, _columns_call(columns, now, settings))


def _counts(conn: psycopg.Connection, call: tuple[bool, dict], **now) -> tuple[int, int, list[tuple[int, str | None]]]:
    """ingest_columns_counts for _columns_call's (joined, params) (now= overrides its instant)."""
    joined, params = call
    accepted, duplicate, ords, reasons = conn.execute(
        db.INGEST_USAGE_COLUMNS_JOINED_COUNTS if joined else db.INGEST_USAGE_COLUMNS_COUNTS, {**params, **now}).fetchone()
    return accepted, duplicate, list(zip(ords, reasons))


_SEP, _NULL = "\x1f", "\x1e"  # ASCII unit and record separators: a column's elements, a NULL element


def _joined(column: list) -> str | None:
    """A column as one text for string_to_array(text, E'\\x1f', E'\\x1e') (psycopg dumps a list of
    10,000 texts at ~0.25 µs each, a joined text at a fraction of that; the database splits either
    as fast), or None when an element holds a separator (the column then goes as a list)."""
    text = _SEP.join(column if None not in column else [_NULL if v is None else v for v in column])
    if text.count(_SEP) != len(column) - 1 or text.count(_NULL) != column.count(None):
        return None
    return text


def ingest_texts(conn: psycopg.Connection, texts: list[str], now, settings: Settings) -> list[tuple[int, str, str | None]]:
    """Ingests up to KAFKA_MAX_BATCH events given as JSON texts (billing.ingest_usage_batch) in the
    caller's transaction: (ord, status, reason) per event."""
    if len(texts) > KAFKA_MAX_BATCH:
        raise ValueError(f"at most {KAFKA_MAX_BATCH} events a batch, got {len(texts)}")
    rows = conn.execute(db.INGEST_USAGE_BATCH, {"events": texts, "now": now, **windows(settings)}).fetchall()
    return [(r[0], r[1], r[2]) for r in rows]


def ingest(conn: psycopg.Connection, events: list, now, settings: Settings) -> list[tuple[int, str, str | None]]:
    """Ingests up to MAX_BATCH events in the caller's transaction: (ord, status, reason) per event,
    ord its 1-based position."""
    if len(events) > MAX_BATCH:
        raise ValueError(f"at most {MAX_BATCH} events a batch, got {len(events)}")
    rows = conn.execute(db.INGEST_USAGE, {"events": Jsonb(events), "now": now, **windows(settings)}).fetchall()
    return [(r[0], r[1], r[2]) for r in rows]


@dataclass
class ConsumeStats:
    batches: int = 0
    accepted: int = 0
    duplicate: int = 0
    rejected: int = 0
    dead_lettered: int = 0
    reasons: dict = field(default_factory=dict)


class UsageConsumer:
    """A member of the consumer group: poll up to `batch` messages, ingest them in one
    transaction (their envelopes parsed here: one statement, billing.ingest_usage_columns; see
    event_columns), dead-letter the rejected ones, then commit the offsets (synchronously)."""

    def __init__(self, settings: Settings, clock: Clock, *, batch: int = KAFKA_BATCH, poll_seconds: float = 0.5,
                 kafka_config: dict | None = None) -> None:
        from confluent_kafka import Consumer, Producer

        if not settings.kafka_bootstrap:
            raise ValueError("billing usage consume needs BILLING_KAFKA_BOOTSTRAP")
        self.settings, self.clock = settings, clock
        self.batch = max(1, min(batch, KAFKA_MAX_BATCH))
        self.poll_seconds = poll_seconds
        common = {"bootstrap.servers": settings.kafka_bootstrap}
        for key, value in (("security.protocol", settings.kafka_security_protocol),
                           ("sasl.mechanism", settings.kafka_sasl_mechanism),
                           ("sasl.username", settings.kafka_username),
                           ("sasl.password", settings.kafka_password)):
            if value:
                common[key] = value
        common.update(kafka_config or {})
        # A member that dies (SIGKILL) keeps its partitions until its session times out: 10 s, then
        # the others take them over from the last committed offsets.
        self.consumer = Consumer({**common, "group.id": settings.usage_group, "enable.auto.commit": False,
                                  "auto.offset.reset": "earliest", "enable.partition.eof": False,
                                  "isolation.level": "read_committed", "session.timeout.ms": 10000,
                                  "heartbeat.interval.ms": 1000})
        self.dead = Producer({**common, "enable.idempotence": True, "acks": "all", "linger.ms": 5})
        # autocommit: a batch is one statement, so one transaction (an event is counted if and only if its
        # key is stored: the statement writes both); no BEGIN / COMMIT round trips
        self.conn = psycopg.connect(settings.database_url, autocommit=True)
        self.stats = ConsumeStats()
        self._stop = False
        self._pending = None  # (the batch taken, the future of its statement) on the database thread

    def stop(self, *_args) -> None:
        self._stop = True

    def close(self) -> None:
        try:
            self.consumer.close()
        finally:
            self.dead.flush(10)
            self.conn.close()

    def _dead_letter(self, msg, reason: str) -> None:
        self.dead.produce(self.settings.usage_dead_letter_topic, value=msg.value(), key=msg.key(),
                          headers=[("billing-reason", reason.encode()), ("billing-topic", msg.topic().encode()),
                                   ("billing-partition", str(msg.partition()).encode()),
                                   ("billing-offset", str(msg.offset()).encode())])

    def _take(self) -> tuple | None:
        """Polls up to `batch` messages and reads them (consumer side only, no database): None when
        nothing came, else (messages, the statement's parameters or None, the events sent (their
        messages, by ord), the dead letters so far, the partitions' offsets to commit once done)."""
        from confluent_kafka import KafkaException, Message

        msgs = self.consumer.consume(self.batch, self.poll_seconds)
        if not msgs:
            return None
        # the positions right after this poll: what commit() without offsets would commit for this
        # batch (every earlier batch is settled before it), read now because the next poll moves them
        offsets = [tp for tp in self.consumer.position(self.consumer.assignment()) if tp.offset >= 0]
        good, dead = msgs, []
        if any(map(Message.error, msgs)):  # (one C loop over the batch: the common case has no error)
            good = []
            for msg in msgs:
                if msg.error():
                    if msg.error().fatal():
                        raise KafkaException(msg.error())
                    log.warning("kafka: %s", msg.error())
                    continue
                good.append(msg)
        columns, kept, unreadable = event_columns(list(map(Message.value, good)))
        dead.extend((good[n], "invalid_json") for n in unreadable)
        origin = good if len(kept) == len(good) else [good[n] for n in kept]
        call = _columns_call(columns, None, self.settings) if origin else None
        return msgs, call, origin, dead, offsets

    def _store(self, call: tuple) -> tuple[int, int, list[tuple[int, str | None]]]:
        """The batch's one statement (autocommit: the statement is its own transaction, no BEGIN or
        COMMIT round trip); may run on the consumer's database thread (self.conn is used there alone)."""
        return _counts(self.conn, call, now=self.clock.now())

    def _settle(self, taken: tuple, counts: tuple | None) -> None:
        """After the batch's database commit: its dead letters written and flushed, then its offsets
        committed (synchronously)."""
        msgs, _call, origin, dead, offsets = taken
        stats = self.stats
        if counts is not None:
            accepted, duplicate, rejected = counts
            stats.accepted += accepted
            stats.duplicate += duplicate
            for ord_, reason in rejected:
                dead.append((origin[ord_ - 1], reason or "rejected"))
                stats.rejected += 1
                stats.reasons[reason] = stats.reasons.get(reason, 0) + 1
        for msg, reason in dead:
            self._dead_letter(msg, reason)
        if dead:
            # the dead letters are written before the offsets that passed them are committed
            if self.dead.flush(30) != 0:
                raise RuntimeError("the dead-letter topic did not take every rejected event; not committing")
            stats.dead_lettered += len(dead)
        if offsets:  # after the database commit: a crash re-delivers, deduped
            self.consumer.commit(offsets=offsets, asynchronous=False)
        stats.batches += 1

    def step(self) -> int:
        """One batch, start to end: returns the messages handled (0: nothing came)."""
        taken = self._take()
        if taken is None:
            return 0
        self._settle(taken, self._store(taken[1]) if taken[1] is not None else None)
        return len(taken[0])

    def _settle_pending(self) -> None:
        """Waits for the batch on the database thread and settles it (its offsets committed)."""
        pending, self._pending = self._pending, None
        if pending is not None:
            taken, future = pending
            self._settle(taken, future.result() if future is not None else None)

    def run(self, *, max_idle_seconds: float | None = None, pipeline: bool = True) -> ConsumeStats:
        """Until stopped; with max_idle_seconds, until that long without a message once partitions
        were assigned (a group rebalancing after a member died takes its session timeout first).

        Pipelined: batch N+1 is polled and read here while batch N's statement runs on a database
        thread (the backend and this process busy at once, not in turn); N+1 is handed over once N's
        statement is sent, then N is settled (dead letters, offsets): offsets are still committed
        batch by batch, in order, each only after its own batch's database commit. Before partitions
        are revoked (a rebalance) the batch in flight is settled, so its offsets go to the generation
        that read it. pipeline=False: step() after step(), nothing in flight."""
        from concurrent.futures import ThreadPoolExecutor

        assigned = []
        self.consumer.subscribe([self.settings.usage_topic],
                                on_assign=lambda _c, parts: assigned.append(len(parts)),
                                on_revoke=lambda _c, _parts: self._settle_pending())
        idle_since = time.monotonic()
        pool = ThreadPoolExecutor(1, thread_name_prefix="usage-db")
        failed = True
        try:
            while not self._stop:
                if not pipeline:
                    if self.step():
                        idle_since = time.monotonic()
                        continue
                    taken = None
                else:
                    taken = self._take()
                if taken is not None:
                    future = pool.submit(self._store, taken[1]) if taken[1] is not None else None
                    self._settle_pending()
                    self._pending = (taken, future)
                    idle_since = time.monotonic()
                    continue
                self._settle_pending()
                if not assigned:
                    idle_since = time.monotonic()
                elif max_idle_seconds is not None and time.monotonic() - idle_since >= max_idle_seconds:
                    break
            self._settle_pending()
            failed = False
        finally:
            if failed and self._pending is not None and self._pending[1] is not None:
                self._pending[1].cancel()  # (its offsets not committed: re-delivered, deduped)
            self._pending = None
            pool.shutdown(wait=True)
        return self.stats


def consume(settings: Settings, clock: Clock, *, batch: int = KAFKA_BATCH,
            max_idle_seconds: float | None = None, pipeline: bool = True) -> ConsumeStats:
    consumer = UsageConsumer(settings, clock, batch=batch)
    signal.signal(signal.SIGTERM, consumer.stop)
    signal.signal(signal.SIGINT, consumer.stop)
    try:
        return consumer.run(max_idle_seconds=max_idle_seconds, pipeline=pipeline)
    finally:
        consumer.close()
