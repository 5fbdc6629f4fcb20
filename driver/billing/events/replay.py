"""`billing events replay` and `billing events retry-dead`.

Replay republishes published events to Kafka as they were stored: the same CloudEvents ids (a
consumer that dedupes by id skips what it has seen), the same key (the aggregate id), in outbox id
order through one idempotent producer, so each aggregate's events reach its partition in commit
order again. It reads in pages of 1,000 and waits for every acknowledgement before it returns.
Only what retention has kept can be replayed.

Retry-dead requeues DEAD events; the relay then publishes them in id order per aggregate, holding
back the later pending events of their aggregates until they are out.
"""

from __future__ import annotations

from datetime import datetime, timezone

import psycopg

from billing import db
from billing.clock import SystemClock


def parse_from(value: str) -> tuple[int | None, datetime | None]:
    """`--from`: an outbox id (digits) or an ISO 8601 time (UTC when it has no offset)."""
    if value.isdigit():
        return int(value), None
    try:
        at = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"--from takes an outbox id or an ISO 8601 time, not {value!r}") from None
    return None, at if at.tzinfo else at.replace(tzinfo=timezone.utc)


def replay(database_url: str, sink, *, start: str, types: list[str] | None = None, page: int = 1000,
           flush_timeout: float = 60.0) -> int:
    """Republish into `sink` (an EventSink); how many events were acknowledged. Raises
    RuntimeError when some were not (nothing is marked anywhere: run it again)."""
    from_id, from_time = parse_from(start)
    produced, failed = 0, []

    def on_delivery(err) -> None:
        if err is not None:
            failed.append(err)

    after = 0
    with psycopg.connect(database_url, autocommit=True) as conn:
        while True:
            rows = conn.execute(db.OUTBOX_EVENTS_FROM, {"from_id": from_id, "from_time": from_time,
                                                        "types": types or None, "after": after, "limit": page}).fetchall()
            for id_, aggregate_id, payload in rows:
                while True:
                    try:
                        sink.produce(str(aggregate_id).encode(), payload.encode(), on_delivery)
                        break
                    except BufferError:
                        sink.poll(0.1)
                produced += 1
                after = id_
            sink.poll(0)
            if len(rows) < page:
                break
    left = sink.flush(flush_timeout)
    if left or failed:
        raise RuntimeError(f"{left + len(failed)} of {produced} replayed events were not acknowledged "
                           f"({failed[0] if failed else 'timeout'}); run the replay again")
    return produced


def retry_dead(database_url: str, *, types: list[str] | None = None, clock=None) -> int:
    """Requeue DEAD events; how many."""
    clock = clock or SystemClock()
    with psycopg.connect(database_url, autocommit=True) as conn:
        return conn.execute(db.RETRY_DEAD_OUTBOX_EVENTS, {"types": types or None, "now": clock.now()}).fetchone()[0]
