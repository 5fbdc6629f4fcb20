"""The outbox relay on the three-node Citus cluster (docs/scaling.md, "Events, webhooks and reads on
Citus"): relays lease shard groups, claim and mark on the node holding each group, and publish to a
real Kafka broker, one partition key per aggregate.

The events are written with billing._emit_event (the SQL API's writer; create_subscription and the
other writers are being made to run on Citus by other branches), for 240 aggregates of as many
customers, so they spread over the 8 shard groups. Each aggregate's events are written in turn on
worker 2, worker 1 and the coordinator: each node takes ids from its own range of the sequence, so
the later events of an aggregate get *smaller* ids. The relays must still publish them in the
order they were written (the order key of db/schema/0090), each at least once, also when a relay
process is SIGKILLed mid-batch."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import timedelta

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from billing.worker.relay import RelayOptions, ShardRelay, is_distributed, run_relay
from billing.worker.sinks import KafkaSink
from .synthetic import invoice_paid_data
from .test_relay import consume_all, until

AGGREGATES = range(1001, 1241)  # 240 customers, one invoice aggregate each
PER_AGGREGATE = 3


def node_urls(url: str) -> list[str]:
    """Worker 2, worker 1, then the coordinator (ids of decreasing ranges)."""
    with psycopg.connect(url, autocommit=True) as conn:
        workers = conn.execute("SELECT nodename, nodeport FROM pg_dist_node WHERE groupid > 0 AND noderole = 'primary' "
                               "ORDER BY groupid DESC").fetchall()
    return [make_conninfo(url, host=h, port=p) for h, p in workers] + [url]


def write_events(url: str) -> None:
    conns = [psycopg.connect(u, autocommit=True) for u in node_urls(url)]
    try:
        for n in range(PER_AGGREGATE):
            conn = conns[n % len(conns)]
            for agg in AGGREGATES:
                conn.execute("SELECT billing._emit_event('invoice', %s, 'InvoicePaid', %s::jsonb, now())",
                             (agg, json.dumps(invoice_paid_data(agg, seq=n, tag="citus"))))
    finally:
        for conn in conns:
            conn.close()


def rows(url: str) -> list[dict]:
    with psycopg.connect(url, autocommit=True, row_factory=psycopg.rows.dict_row) as conn:
        return conn.execute("SELECT id, event_id::text, aggregate_id, status, customer_id FROM billing.outbox_event "
                            "ORDER BY id").fetchall()


def unpublished(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM billing.outbox_event WHERE status <> 'PUBLISHED'").fetchone()[0]


def check(rows_: list[dict], messages: list) -> int:
    """Every event in Kafka under its aggregate's key; per key, first deliveries in the order the
    events were written (attemptCount). Returns the number of redeliveries (at least once)."""
    by_event = {r["event_id"]: r for r in rows_}
    seen: set[str] = set()
    last: dict[bytes, int] = {}
    duplicates = 0
    for msg in messages:
        envelope = json.loads(msg.value())
        row = by_event[envelope["id"]]
        assert msg.key() == str(row["aggregate_id"]).encode()
        if envelope["id"] in seen:
            duplicates += 1
            continue
        seen.add(envelope["id"])
        n = envelope["data"]["attemptCount"]
        assert n == last.get(msg.key(), -1) + 1, f"aggregate {msg.key()!r}: event {n} after {last.get(msg.key())}"
        last[msg.key()] = n
    assert seen == set(by_event), f"missing from Kafka: {len(set(by_event) - seen)} events"
    return duplicates


def test_written_on_three_nodes_ids_do_not_follow_commit_order(citus_db_url):
    write_events(citus_db_url)
    with psycopg.connect(citus_db_url, autocommit=True) as conn:
        inverted = conn.execute(
            """SELECT count(*) FILTER (WHERE a.id > b.id) FROM billing.outbox_event a
                 JOIN billing.outbox_event b ON b.customer_id = a.customer_id AND b.aggregate_id = a.aggregate_id
                  AND (b.payload -> 'data' ->> 'attemptCount')::int = (a.payload -> 'data' ->> 'attemptCount')::int + 1
            """).fetchone()[0]
        seq_ok = conn.execute(
            """SELECT bool_and(b.aggregate_seq > a.aggregate_seq) FROM billing.outbox_event a
                 JOIN billing.outbox_event b ON b.customer_id = a.customer_id AND b.aggregate_id = a.aggregate_id
                  AND (b.payload -> 'data' ->> 'attemptCount')::int = (a.payload -> 'data' ->> 'attemptCount')::int + 1
            """).fetchone()[0]
    assert inverted == len(AGGREGATES) * (PER_AGGREGATE - 1), "each later event took an id of a lower range"
    assert seq_ok, "the order key follows the order of writing"


def test_two_relays_share_the_groups_and_keep_each_aggregates_order(citus_db_url, kafka_bootstrap, kafka_topic):
    write_events(citus_db_url)
    assert asyncio.run(is_distributed(citus_db_url))
    with psycopg.connect(citus_db_url, autocommit=True) as conn:
        groups = conn.execute("SELECT count(*) FROM billing.shard_lease").fetchone()[0]
        spread = conn.execute(
            "SELECT count(DISTINCT get_shard_id_for_distribution_column('billing.outbox_event', customer_id)) "
            "FROM billing.outbox_event").fetchone()[0]
    assert groups == 8 and spread == 8

    async def run():
        stop = asyncio.Event()
        sinks = [KafkaSink(kafka_bootstrap, kafka_topic) for _ in range(2)]
        opts = [RelayOptions(batch_size=50, poll_interval=0.2, worker_name=f"relay-{i}") for i in range(2)]
        relays = [ShardRelay(citus_db_url, s, stop, options=o) for s, o in zip(sinks, opts)]
        tasks = [asyncio.create_task(r.run()) for r in relays]
        await until(lambda: unpublished(citus_db_url) == 0, 90, "both relays to drain the outbox")
        shares = [sorted(r.groups) for r in relays]
        stop.set()
        await asyncio.gather(*tasks)
        for s in sinks:
            s.close()
        return relays, shares

    relays, shares = asyncio.run(run())
    assert all(r.published > 0 for r in relays), "both relays published"
    assert sorted(shares[0] + shares[1]) == list(range(1, 9)), f"the groups shared, each to one relay: {shares}"
    rows_ = rows(citus_db_url)
    assert len(rows_) == len(AGGREGATES) * PER_AGGREGATE
    messages = consume_all(kafka_bootstrap, kafka_topic, len(rows_), timeout=60)
    assert check(rows_, messages) == 0, "no failure, no redelivery"


class HangingSink:
    """A real KafkaSink that sends the events of half the keys and never reports on the others:
    a relay stuck mid-batch (some of it acknowledged by Kafka, none of it marked)."""

    def __init__(self, inner: KafkaSink) -> None:
        self.inner = inner
        self.held = 0

    def produce(self, key, value, on_delivery):
        if int(key) % 2:
            self.held += 1
        else:
            self.inner.produce(key, value, on_delivery)

    def poll(self, timeout):
        return self.inner.poll(timeout)

    def flush(self, timeout):
        return self.inner.flush(timeout) + self.held


def test_a_relay_killed_mid_batch_loses_nothing(citus_db_url, kafka_bootstrap, kafka_topic):
    write_events(citus_db_url)

    async def run():
        stop_a, stop_b = asyncio.Event(), asyncio.Event()
        inner_a, sink_b = KafkaSink(kafka_bootstrap, kafka_topic), KafkaSink(kafka_bootstrap, kafka_topic)
        fast = dict(batch_size=40, poll_interval=0.2, lease=timedelta(seconds=3))
        a = ShardRelay(citus_db_url, HangingSink(inner_a), stop_a, options=RelayOptions(worker_name="relay-a", **fast))
        task_a = asyncio.create_task(a.run())
        await until(lambda: len(a.groups) == 8, 20, "relay A to lease every group")
        await asyncio.sleep(1.0)  # A is mid-batch: its claimed rows leased, half of them sent, none marked
        assert a.published == 0 and unpublished(citus_db_url) == len(AGGREGATES) * PER_AGGREGATE
        task_a.cancel()  # stopped dead: its sessions end (its group locks with them), its row leases stay
        await asyncio.gather(task_a, return_exceptions=True)
        b = ShardRelay(citus_db_url, sink_b, stop_b, options=RelayOptions(worker_name="relay-b", **fast))
        started = time.monotonic()
        task_b = asyncio.create_task(b.run())
        await until(lambda: unpublished(citus_db_url) == 0, 90, "relay B to take A's groups over and drain")
        took = time.monotonic() - started
        groups = sorted(b.groups)
        stop_b.set()
        await task_b
        inner_a.close()
        sink_b.close()
        return groups, took

    groups, took = asyncio.run(run())
    assert groups == list(range(1, 9))
    rows_ = rows(citus_db_url)
    messages = consume_all(kafka_bootstrap, kafka_topic, len(rows_), timeout=60)
    duplicates = check(rows_, messages)
    # What A sent before dying comes again from B (at least once): at most A's first batches.
    assert duplicates <= 8 * 40


def test_run_relay_detects_citus(citus_db_url, kafka_bootstrap, kafka_topic):
    from billing.config import Settings

    write_events(citus_db_url)
    settings = Settings(database_url=citus_db_url, kafka_bootstrap=kafka_bootstrap, kafka_topic=kafka_topic)

    async def run():
        stop = asyncio.Event()
        task = asyncio.create_task(run_relay(settings, stop, options=RelayOptions(poll_interval=0.2, batch_size=200)))
        await until(lambda: unpublished(citus_db_url) == 0, 90, "the detected per-group relay to drain")
        stop.set()
        await task

    asyncio.run(run())
    messages = consume_all(kafka_bootstrap, kafka_topic, len(AGGREGATES) * PER_AGGREGATE, timeout=60)
    assert check(rows(citus_db_url), messages) == 0


_KILLED_RELAY = r"""
import asyncio, sys
from billing.worker.relay import RelayOptions, ShardRelay
from billing.worker.sinks import KafkaSink

class Hanging:
    # Sends the events of even keys, never reports on the odd ones: stuck mid-batch.
    def __init__(self, inner):
        self.inner, self.held = inner, 0
    def produce(self, key, value, on_delivery):
        if int(key) % 2:
            self.held += 1
        else:
            self.inner.produce(key, value, on_delivery)
    def poll(self, timeout):
        return self.inner.poll(timeout)
    def flush(self, timeout):
        return self.inner.flush(timeout) + self.held

url, bootstrap, topic = sys.argv[1:4]
opts = RelayOptions(batch_size=40, poll_interval=0.2, worker_name="relay-killed")
asyncio.run(ShardRelay(url, Hanging(KafkaSink(bootstrap, topic)), asyncio.Event(), options=opts).run())
"""


def test_a_relay_process_sigkilled_mid_batch_loses_nothing(citus_db_url, kafka_bootstrap, kafka_topic, tmp_path):
    import os
    import signal
    import subprocess
    import sys

    from billing.config import REPO_ROOT

    write_events(citus_db_url)
    script = tmp_path / "killed_relay.py"
    script.write_text(_KILLED_RELAY)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "driver")}
    proc = subprocess.Popen([sys.executable, str(script), citus_db_url, kafka_bootstrap, kafka_topic], env=env)

    def leased() -> int:
        with psycopg.connect(citus_db_url, autocommit=True) as conn:
            return conn.execute("SELECT count(*) FROM billing.outbox_event WHERE status = 'PENDING' "
                                "AND lease_until IS NOT NULL").fetchone()[0]

    async def run():
        try:
            await until(lambda: leased() >= 8 * 20, 60, "the relay process to claim in every group")
            await asyncio.sleep(1.0)  # half of its batches sent to Kafka, nothing marked
            assert unpublished(citus_db_url) == len(AGGREGATES) * PER_AGGREGATE
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        stop = asyncio.Event()
        sink = KafkaSink(kafka_bootstrap, kafka_topic)
        b = ShardRelay(citus_db_url, sink, stop, options=RelayOptions(worker_name="relay-b", batch_size=40,
                                                                     poll_interval=0.2, lease=timedelta(seconds=3)))
        task = asyncio.create_task(b.run())
        await until(lambda: unpublished(citus_db_url) == 0, 90, "another relay to take over and drain")
        groups = sorted(b.groups)
        stop.set()
        await task
        sink.close()
        return groups

    groups = asyncio.run(run())
    assert groups == list(range(1, 9)), "the killed relay's groups were free at once (its locks died with it)"
    rows_ = rows(citus_db_url)
    messages = consume_all(kafka_bootstrap, kafka_topic, len(rows_), timeout=60)
    duplicates = check(rows_, messages)
    # What the killed relay had sent (and Kafka kept) comes again: at least once, never lost.
    assert 0 < duplicates <= 8 * 40


def test_a_single_postgresql_is_not_distributed(db_url):
    # No Citus catalog there: the detection must not even plan a query of it (run_relay then runs
    # the single-node relay of the advisory lock).
    assert asyncio.run(is_distributed(db_url)) is False


# -- One outbox order (issue 25): the same rule, billing._outbox_order, on one node and on Citus -----
def _claimed_in_order(url: str) -> tuple[list[int], list[int]]:
    """Claims every event with claim_outbox_events (one claim: the set path on one PostgreSQL, the
    per-row path on Citus) and, in a rolled-back transaction, with claim_outbox_events_in_shard per
    group; marks them published. Returns the ids in the claim's order and the replay's order."""
    in_shard: list[list[int]] = []
    with psycopg.connect(url, autocommit=True) as conn:
        groups = conn.execute("SELECT shard_group, node_name, node_port FROM billing.relay_shard_groups()").fetchall()
    for group, host, port in groups:  # each on the node holding it, rolled back
        with psycopg.connect(make_conninfo(url, host=host, port=port) if host else url) as node:
            in_shard.append([r[0] for r in node.execute(
                "SELECT id FROM billing.claim_outbox_events_in_shard('t', %s, 10000) WITH ORDINALITY ORDER BY ordinality",
                (group,)).fetchall()])
            node.rollback()
    # The relay's call: every group of a node in one claim_outbox_events_in_shards (rolled back): each
    # group's events exactly as its own claim's, in the same order.
    by_node: dict[tuple, list[int]] = {}
    for group, host, port in groups:
        by_node.setdefault((host, port), []).append(group)
    in_shards: dict[int, list[int]] = {}
    for (host, port), node_groups in by_node.items():
        with psycopg.connect(make_conninfo(url, host=host, port=port) if host else url) as node:
            for group, id_ in node.execute(
                    "SELECT c.shard_group, (c.event).id FROM billing.claim_outbox_events_in_shards('t', %s, 10000) "
                    "WITH ORDINALITY AS c(shard_group, event, k) ORDER BY c.k", (node_groups,)).fetchall():
                in_shards.setdefault(group, []).append(id_)
            node.rollback()
    assert [in_shards.get(group, []) for group, _h, _p in groups] == in_shard, \
        "one claim per node hands out each group's events as the group's own claim"
    with psycopg.connect(url) as conn:
        claimed = [r[0] for r in conn.execute(
            "SELECT id FROM billing.claim_outbox_events(10000) WITH ORDINALITY ORDER BY ordinality").fetchall()]
        conn.execute("SELECT billing.mark_outbox_published(%s)", (claimed,))
        conn.commit()
        replayed, after = [], 0
        while True:  # pages of 100, as `billing events replay` reads them
            page = [r[0] for r in conn.execute(
                "SELECT id FROM billing.outbox_events_from(1, NULL, NULL, %s, 100)", (after,)).fetchall()]
            if not page:
                break
            replayed += page
            after = page[-1]
        rule = [r[0] for r in conn.execute(
            "SELECT id FROM billing.outbox_event ORDER BY billing._outbox_order(aggregate_seq, id), id").fetchall()]
        written = conn.execute("SELECT id, aggregate_id, (payload -> 'data' ->> 'attemptCount')::int FROM billing.outbox_event"
                               ).fetchall()
    assert claimed == rule, "the claim hands events out in the rule's order"
    assert replayed == rule, "the replay reads them back in the same order"
    position = {id_: n for n, id_ in enumerate(claimed)}
    assert all(sorted(ids, key=position.get) == ids for ids in in_shard), "each group's claim: the same order"
    assert sorted(i for ids in in_shard for i in ids) == sorted(claimed)
    per_aggregate: dict[int, list[int]] = {}
    for id_, agg, n in sorted(written, key=lambda r: position[r[0]]):
        per_aggregate.setdefault(agg, []).append(n)
    assert all(ns == list(range(PER_AGGREGATE)) for ns in per_aggregate.values()), \
        "every aggregate's events in the order they were written"
    return claimed, replayed


def test_one_outbox_order_on_one_node_and_on_citus(db_url, citus_db_url):
    """The same events written on one PostgreSQL (ids in commit order, no key) and on Citus (written in
    turn on three nodes: a later event of an aggregate gets a smaller id, and a key): each database's
    claim, per-group claim and replay follow billing._outbox_order, ties by id, and give every
    aggregate's events in the order they were written; on one node that order is the ids'."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        for n in range(PER_AGGREGATE):
            for agg in AGGREGATES:
                conn.execute("SELECT billing._emit_event('invoice', %s, 'InvoicePaid', %s::jsonb, now())",
                             (agg, json.dumps(invoice_paid_data(agg, seq=n, tag="one"))))
    write_events(citus_db_url)
    single, _ = _claimed_in_order(db_url)
    assert single == sorted(single), "on one PostgreSQL the order is the ids'"
    citus, _ = _claimed_in_order(citus_db_url)
    assert citus != sorted(citus), "on Citus the ids alone would have broken it"
    assert len(single) == len(citus) == len(AGGREGATES) * PER_AGGREGATE


def test_a_moved_group_is_refused_at_once_by_a_session_that_kept_its_statements(citus_db_url):
    """The relay's claim and mark keep each group's statements prepared per session (issue 32): the
    place of a group is still read from Citus' catalog at every call, so when the group moves to the
    other worker, the very next claim and mark of the session that prepared them on the old node are
    refused (BL409, "is on node"), whether or not the old shard is dropped yet; the new node claims
    the group's events; and once the group is back, the old session claims there again (its
    statements re-planned on the shard made anew)."""
    write_events(citus_db_url)
    coord = psycopg.connect(citus_db_url, autocommit=True)
    try:
        groups = coord.execute("SELECT shard_group, node_name, node_port FROM billing.relay_shard_groups() "
                               "ORDER BY shard_group").fetchall()
        group, host, port = groups[0]
        other = next((h, p) for _g, h, p in groups if (h, p) != (host, port))
        shardid = coord.execute("SELECT shardid FROM (SELECT shardid, row_number() OVER (ORDER BY shardminvalue::bigint) "
                                "AS g FROM pg_dist_shard WHERE logicalrelid = 'billing.customer'::regclass) s "
                                "WHERE s.g = %s", (group,)).fetchone()[0]
        claim = ("SELECT (c.event).id FROM billing.claim_outbox_events_in_shards('t-move', ARRAY[%s], 5, "
                 "interval '10 minutes', now()) c")
        mark = "SELECT billing.mark_outbox_published_in_shards(%s, %s, now())"
        old = psycopg.connect(make_conninfo(citus_db_url, host=host, port=port), autocommit=True)
        try:
            ids = [r[0] for r in old.execute(claim, (group,)).fetchall()]
            assert len(ids) == 5
            assert old.execute(mark, ([group] * len(ids), ids)).fetchone()[0] == 5
            assert old.execute("SELECT count(*) FROM pg_prepared_statements WHERE name ~ '^billing_relay_'"
                               ).fetchone()[0] == 3, "the session kept the group's claim, lease and mark"

            coord.execute("SELECT citus_move_shard_placement(%s, %s, %s, %s, %s, shard_transfer_mode => 'block_writes')",
                          (shardid, host, port, other[0], other[1]))
            for statement, args in ((claim, (group,)), (mark, ([group], [ids[0]]))):
                with pytest.raises(psycopg.Error) as refused:
                    old.execute(statement, args)
                assert refused.value.sqlstate == "BL409" and "is on node" in str(refused.value)
            with psycopg.connect(make_conninfo(citus_db_url, host=other[0], port=other[1]), autocommit=True) as new:
                moved = [r[0] for r in new.execute(claim, (group,)).fetchall()]
            assert len(moved) == 5 and not set(moved) & set(ids), "the new node claims the group's next events"

            coord.execute("CALL citus_cleanup_orphaned_resources()")
            coord.execute("SELECT citus_move_shard_placement(%s, %s, %s, %s, %s, shard_transfer_mode => 'block_writes')",
                          (shardid, other[0], other[1], host, port))
            back = [r[0] for r in old.execute(claim, (group,)).fetchall()]
            assert len(back) == 5 and not set(back) & (set(ids) | set(moved)), "back home, the old session claims again"
            assert old.execute(mark, ([group] * len(back), back)).fetchone()[0] == 5
        finally:
            old.close()
    finally:
        coord.close()
