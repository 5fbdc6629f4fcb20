"""Two rating workers at once (issue 29, docs/usage.md "Two rating workers and the due index")
against the real PostgreSQL: a rate_usage call takes the due cursors no other call holds (FOR UPDATE
SKIP LOCKED), so a second worker rates other subscriptions while the first holds its batch, and
every subscription is rated exactly once whatever the interleaving; the worker's renewal step runs
BILLING_USAGE_RATING_WORKERS loops at once (billing.worker.renewal.rate_due_usage). Per shard group
(docs/usage.md "Per shard group"; billing.worker.renewal.rate_due_usage_in_shards), on a single
PostgreSQL (group 0) and on the Citus cluster: every subscription rated once, and a customer whose
ingestion holds its usage lock on the coordinator is left for the next call."""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from datetime import datetime, timedelta, timezone

import psycopg
import pytest
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from billing.clock import SimulatedClock
from billing.worker.renewal import rate_due_usage, rate_due_usage_in_shards
from billing.worker.shards import ShardLeases

START = datetime(2026, 10, 1, tzinfo=timezone.utc)
END = datetime(2026, 11, 1, tzinfo=timezone.utc)
RATE_AT = END + timedelta(hours=1, seconds=1)
N = 240
RATE = "SELECT customer_id, subscription_id, invoice_id FROM billing.rate_usage(%s, %s, interval '1 hour')"


def world(url: str, n: int = N, *, citus: bool = False) -> None:
    """n customers, each a subscription of October on a plan of 2 charges, 1 + c % 4 requests each
    (ingested), renewed at the month's end: n ratings due."""
    with psycopg.connect(url, autocommit=True) as conn:
        if citus:  # (the imports write a reference table after reading distributed ones: one connection per node)
            conn.execute("SET citus.multi_shard_modify_mode TO 'sequential'")
        conn.execute("SELECT billing.upsert_meter('requests', 'api.request', 'count', NULL, '{}', %s)", (START,))
        conn.execute("SELECT billing.upsert_meter('tokens', 'api.request', 'sum', '{tokens}', '{}', %s)", (START,))
        conn.execute("SELECT billing.upsert_plan('API', 900, 'USD', 'MONTH', 1, %s)", (START - timedelta(days=1),))
        conn.execute("SELECT billing.upsert_plan_charge('API', 'requests', 'per_unit', 3, NULL, '[]', 0, NULL, NULL, %s)",
                     (START,))
        conn.execute("SELECT billing.upsert_plan_charge('API', 'tokens', 'per_unit', 1, NULL, '[]', 0, NULL, NULL, %s)",
                     (START,))
        at = START + timedelta(hours=1)
        conn.execute("SELECT count(*) FROM billing.import_customers(%s::jsonb, %s)",
                     (json.dumps([{"external_id": f"c{c}", "id": c} for c in range(1, n + 1)]), at))
        conn.execute("SELECT count(*) FROM billing.import_subscriptions(%s::jsonb, %s)",
                     (json.dumps([{"external_id": f"s{c}", "customer_id": c, "plan_code": "API", "status": "ACTIVE",
                                   "current_period_start": START.isoformat(), "current_period_end": END.isoformat()}
                                  for c in range(1, n + 1)]), at))
        events = [{"specversion": "1.0", "id": f"e{c}-{k}", "source": "gw", "type": "api.request",
                   "time": (START + timedelta(days=3, minutes=c)).isoformat().replace("+00:00", "Z"),
                   "subject": str(c), "data": {"tokens": k + 1}}
                  for c in range(1, n + 1) for k in range(1 + c % 4)]
        for lo in range(0, len(events), 1000):
            rows = conn.execute("SELECT status FROM billing.ingest_usage(%s::jsonb, %s)",
                                (json.dumps(events[lo:lo + 1000]), START + timedelta(days=5))).fetchall()
            assert {r[0] for r in rows} == {"accepted"}
        while conn.execute("SELECT billing.create_due_invoices(1000, %s)", (END + timedelta(seconds=1),)).fetchone()[0]:
            pass


def check_rated_once(url: str, n: int = N) -> None:
    """Every subscription rated exactly once for October: one USAGE invoice, one rating per meter,
    each billing exactly its requests x 3 + tokens x 1."""
    with psycopg.connect(url) as conn:
        per_sub = conn.execute("""
            SELECT s.customer_id,
                   (SELECT count(*) FROM billing.invoice i
                     WHERE i.customer_id = s.customer_id AND i.subscription_id = s.id AND i.kind = 'USAGE'),
                   (SELECT count(*) FROM billing.usage_rating r WHERE r.customer_id = s.customer_id AND r.subscription_id = s.id),
                   (SELECT sum(i.subtotal) FROM billing.invoice i
                     WHERE i.customer_id = s.customer_id AND i.subscription_id = s.id AND i.kind = 'USAGE'),
                   (SELECT u.rated_until FROM billing.usage_cursor u WHERE u.customer_id = s.customer_id AND u.subscription_id = s.id)
              FROM billing.subscription s ORDER BY s.customer_id""").fetchall()
    assert len(per_sub) == n
    for c, invoices, ratings, subtotal, rated_until in per_sub:
        k = 1 + c % 4
        assert (invoices, ratings, subtotal, rated_until) == (1, 2, k * 3 + k * (k + 1) // 2, END), c


def test_a_second_worker_rates_other_subscriptions_while_the_first_holds_its_batch(db_url):
    world(db_url)
    with psycopg.connect(db_url) as first, psycopg.connect(db_url, autocommit=True) as second:
        # the first worker's call, its transaction left open: its batch's cursors stay locked
        held = first.execute(RATE, (60, RATE_AT)).fetchall()
        assert len(held) == 60 and all(r[2] is not None for r in held)
        second.execute("SET statement_timeout = '60s'")  # a wait on the first's locks fails instead of hanging
        other = second.execute(RATE, (60, RATE_AT)).fetchall()
        # not the same batch found locked and skipped (what one worker beside another did before):
        # 60 other subscriptions, each rated
        assert len(other) == 60 and all(r[2] is not None for r in other)
        assert not {r[1] for r in held} & {r[1] for r in other}
        first.commit()
    # then both at once until nothing is due, each in its own thread and connection
    barrier = threading.Barrier(2)
    seen: list[list[tuple]] = [[], []]
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        try:
            with psycopg.connect(db_url, autocommit=True) as conn:
                conn.execute("SET statement_timeout = '60s'")
                barrier.wait(timeout=30)
                while True:
                    rows = conn.execute(RATE, (25, RATE_AT)).fetchall()
                    seen[k].extend(rows)
                    if len(rows) < 25:
                        return
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    invoiced = [r[1] for rows in seen for r in rows if r[2] is not None]
    assert len(invoiced) == len(set(invoiced)) == N - 120  # the rest, each invoiced by one worker only
    check_rated_once(db_url)
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert conn.execute(RATE, (500, RATE_AT + timedelta(hours=1))).fetchall() == []  # nothing due, nothing twice


def test_the_renewal_step_runs_its_rating_loops_at_once(db_url):
    world(db_url)

    async def body() -> int:
        pool = AsyncConnectionPool(db_url, min_size=2, max_size=4, open=False, kwargs={"row_factory": dict_row})
        await pool.open()
        try:
            return await rate_due_usage(pool, SimulatedClock(RATE_AT), batch=20, grace=3600.0, workers=2)
        finally:
            await pool.close()

    assert asyncio.run(body()) == N
    check_rated_once(db_url)


def test_the_due_scan_reads_the_due_index(db_url):
    """The cursors say when their rating can be due: rated up to the current period, its end; a
    cancellation brings it down to its instant; rated to the end, finished: none."""
    world(db_url, n=3)
    with psycopg.connect(db_url, autocommit=True) as conn:
        due = dict(conn.execute("SELECT customer_id, due_at FROM billing.usage_cursor").fetchall())
        assert due == {1: END, 2: END, 3: END}  # followed at the import: due when October ends
        assert len(conn.execute(RATE, (10, END + timedelta(minutes=30))).fetchall()) == 0  # within the grace
        assert len(conn.execute(RATE, (10, RATE_AT)).fetchall()) == 3
        due = dict(conn.execute("SELECT customer_id, due_at FROM billing.usage_cursor").fetchall())
        assert due == {1: datetime(2026, 12, 1, tzinfo=timezone.utc)} | {2: due[1], 3: due[1]}
        sub = conn.execute("SELECT id FROM billing.subscription WHERE customer_id = 2").fetchone()[0]
        canceled_at = END + timedelta(days=10)
        conn.execute("SELECT billing.cancel_subscription(%s, false, %s)", (sub, canceled_at))
        assert conn.execute("SELECT due_at FROM billing.usage_cursor WHERE customer_id = 2").fetchone()[0] == canceled_at
        rated = conn.execute(RATE, (10, canceled_at + timedelta(hours=1))).fetchall()
        assert [r[0] for r in rated] == [2]
        assert conn.execute("SELECT finished, due_at FROM billing.usage_cursor WHERE customer_id = 2").fetchone() == (True, None)
        # the scan's plan: the due index, not every cursor
        conn.execute("SET enable_seqscan = off")  # (a 3-row table: the planner would rather scan it)
        plan = "\n".join(r[0] for r in conn.execute("""
            EXPLAIN SELECT u.customer_id FROM billing.usage_cursor u
             WHERE NOT u.finished AND u.due_at <= now() ORDER BY u.due_at LIMIT 10""").fetchall())
        assert "usage_cursor_due_idx" in plan, plan


def test_following_skips_a_subscription_another_transaction_holds(db_url):
    """rate_usage's follow step (the cursors of subscriptions not followed yet) does not wait for a
    subscription another transaction holds FOR UPDATE (a payment result, a change): it skips it and
    follows it at the next call. Waiting (the cursor's foreign key, in key order) deadlocked with a
    transaction holding two subscriptions in another order (the demo's charge workers)."""
    world(db_url, 0)  # the meters and the plan
    with psycopg.connect(db_url, autocommit=True) as conn:
        for c in range(1, 5):  # four signups, not followed yet (as right after signups)
            conn.execute("SELECT billing.upsert_customer(%s)", (c,))
            conn.execute("SELECT billing.create_subscription(%s, %s, 'API', %s)", (f"k{c}", c, START))
            event = {"specversion": "1.0", "id": f"e{c}", "source": "gw", "type": "api.request",
                     "time": (START + timedelta(days=3)).isoformat().replace("+00:00", "Z"), "subject": str(c),
                     "data": {"tokens": 2}}
            conn.execute("SELECT billing.ingest_usage(%s::jsonb, %s)", (json.dumps([event]), START + timedelta(days=4)))
        conn.execute("SELECT billing.create_due_invoices(100, %s)", (END + timedelta(seconds=1),))
        assert conn.execute("SELECT count(*) FROM billing.usage_cursor").fetchone()[0] == 0
    with psycopg.connect(db_url) as holder, psycopg.connect(db_url, autocommit=True) as rater:
        holder.execute("SELECT 1 FROM billing.subscription WHERE customer_id = 3 FOR UPDATE")
        rater.execute("SET statement_timeout = '60s'")  # a bound: before the fix it waited for the holder
        rated = rater.execute(RATE, (100, RATE_AT)).fetchall()
        followed = {r[0] for r in rater.execute("SELECT customer_id FROM billing.usage_cursor").fetchall()}
        assert followed == {1, 2, 4} and {r[0] for r in rated if r[2] is not None} == {1, 2, 4}
        holder.rollback()
    with psycopg.connect(db_url, autocommit=True) as rater:
        rated = rater.execute(RATE, (100, RATE_AT)).fetchall()
        assert [(r[0], r[2] is not None) for r in rated] == [(3, True)]
        usage = rater.execute("SELECT customer_id, subtotal FROM billing.invoice WHERE kind = 'USAGE' "
                              "ORDER BY customer_id").fetchall()
    assert usage == [(c, 3 + 2) for c in range(1, 5)]  # one request x 3 + 2 tokens x 1, each once


def rate_in_shards(url: str, at: datetime, *, batch: int = 50, workers: int = 2) -> int:
    """The worker's rating step on Citus (rate_due_usage_in_shards, its groups shared by two loops)
    once, leasing every group first."""

    async def body() -> int:
        pool = AsyncConnectionPool(url, min_size=1, max_size=4, open=False, kwargs={"row_factory": dict_row})
        await pool.open()
        shards = ShardLeases(pool, url, "rater-1", clock=SimulatedClock(at), lease_seconds=60)
        try:
            await shards.lease()
            assert shards.held()
            return await rate_due_usage_in_shards(pool, shards, SimulatedClock(at), batch=batch, grace=3600.0,
                                                  workers=workers)
        finally:
            await shards.close()
            await pool.close()

    return asyncio.run(body())


def rate_per_group_around_an_ingestion(url: str, n: int) -> None:
    """Customer 1's ingestion in flight (its usage lock held shared on the configured database, as
    the ingestion holds it): every other subscription is rated per group, customer 1 is not; once the
    ingestion is over, the next call rates it; then nothing is due."""
    with psycopg.connect(url) as ingestion:
        ingestion.execute("SELECT pg_advisory_xact_lock_shared(29, hashint8(1::bigint))")
        assert rate_in_shards(url, RATE_AT) == n - 1
        ingestion.rollback()
    assert rate_in_shards(url, RATE_AT + timedelta(minutes=1)) == 1
    check_rated_once(url, n)
    assert rate_in_shards(url, RATE_AT + timedelta(hours=1)) == 0  # nothing due, nothing billed twice


def test_the_rating_per_shard_group_on_a_single_postgresql(db_url):
    world(db_url)
    rate_per_group_around_an_ingestion(db_url, N)


def test_the_rating_per_shard_group_on_citus(citus_db_url):
    world(citus_db_url, 60, citus=True)
    rate_per_group_around_an_ingestion(citus_db_url, 60)


# A batch of usage committed on the coordinator but still PREPARED on a Citus node (docs/usage.md
# "Exactly once", docs/scaling.md "The usage rating per shard group"): Citus commits a batch spanning
# nodes in two phases; when a node's COMMIT PREPARED fails (the node unreachable, the coordinator gone
# after its own commit) the node keeps the batch prepared, its rows unseen, until Citus' recovery
# commits it, while the coordinator's usage locks are already released. The batch holds its
# customers' rows FOR SHARE on their node (83_usage_ingest) and a prepared transaction keeps its row
# locks: every rating (per shard group on the node, rate_usage on the coordinator) skips such a
# customer, then bills the batch's events once it is committed, never twice. The node's part of the
# batch is made by the engine's own ingestion run on the node holding the customer (Citus' metadata
# is on every node), then PREPAREd there: what the node holds in that window (the customer's row FOR
# SHARE, its events, dedup keys and rollups; also the node's usage lock, which the coordinator's path
# never sees). The same on one PostgreSQL (an ingestion in flight), and the rating's row-lock step
# alone (a customer row held FOR SHARE, no usage lock).
RATE_ALL = "SELECT customer_id, subscription_id, invoice_id FROM billing.rate_usage(500, %s, interval '1 hour')"


def events(customer: int, n: int, tag: str) -> str:
    """n requests of 5 tokens each in the middle of October (each: 3 + 5 in the world's plan)."""
    return json.dumps([{"specversion": "1.0", "id": f"{tag}-{customer}-{k}", "source": "late-gw", "type": "api.request",
                        "time": (START + timedelta(days=20, minutes=k)).isoformat().replace("+00:00", "Z"),
                        "subject": str(customer), "data": {"tokens": 5}} for k in range(n)])


def usage_billed(conn, customer: int) -> list[int]:
    """The customer's USAGE invoices' subtotals, oldest first."""
    return [r[0] for r in conn.execute(
        "SELECT subtotal FROM billing.invoice WHERE customer_id = %s AND kind = 'USAGE' ORDER BY id", (customer,))]


def world_subtotal(c: int) -> int:
    """What the world's own events of customer c come to (requests x 3 + tokens x 1)."""
    k = 1 + c % 4
    return k * 3 + k * (k + 1) // 2


def node_url(url: str, customer: int) -> str:
    """The URL of the Citus node holding the customer's shard group."""
    with psycopg.connect(url) as conn:
        host, port = conn.execute("""
            SELECT p.nodename, p.nodeport FROM pg_dist_shard_placement p
             WHERE p.shardid = get_shard_id_for_distribution_column('billing.customer', %s)""", (customer,)).fetchone()
    return psycopg.conninfo.make_conninfo(url, host=host, port=port)


def test_a_batch_left_prepared_on_a_node_is_rated_once_it_commits(citus_db_url):
    url = citus_db_url
    world(url, 12, citus=True)
    # customer 13 signs up without a cursor yet (followed by the rating's claim, in the same call)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT billing.upsert_customer(13)")
        conn.execute("SELECT billing.create_subscription('k13', 13, 'API', %s)", (START,))
        conn.execute("SELECT billing.create_due_invoices(100, %s)", (END + timedelta(seconds=1),))
        assert conn.execute("SELECT count(*) FROM billing.usage_cursor WHERE customer_id = 13").fetchone()[0] == 0
    # the coordinator's ingestion holds the customer's row FOR SHARE on its node until it commits
    with psycopg.connect(url) as ingestion, psycopg.connect(url, autocommit=True) as other:
        rows = ingestion.execute("SELECT status FROM billing.ingest_usage(%s::jsonb, %s)",
                                 (events(2, 1, "open"), END - timedelta(days=1))).fetchall()
        assert [r[0] for r in rows] == ["accepted"]
        with pytest.raises(psycopg.errors.LockNotAvailable):
            other.execute("SELECT 1 FROM billing.customer WHERE id = 2 FOR NO KEY UPDATE NOWAIT")
        ingestion.rollback()
    gid = f"usage2pc-{uuid.uuid4().hex[:12]}"
    gid13 = gid + "-13"
    try:
        # the node's part of two batches, prepared: 4 more October requests of customer 1 (it has a
        # cursor) and 2 of customer 13 (none yet), sent 30 minutes into the grace
        for customer, n, g in ((1, 4, gid), (13, 2, gid13)):
            # (as the coordinator's own connection to the node: Citus lets only those PREPARE)
            with psycopg.connect(node_url(url, customer), application_name="citus_internal gpid=10000000777") as node:
                rows = node.execute("SELECT status FROM billing.ingest_usage(%s::jsonb, %s)",
                                    (events(customer, n, g), END + timedelta(minutes=30))).fetchall()
                assert [r[0] for r in rows] == ["accepted"] * n
                node.execute(f"PREPARE TRANSACTION '{g}'")
        with psycopg.connect(url, autocommit=True) as conn:
            # unseen on the coordinator, no usage lock of theirs held there
            assert conn.execute("SELECT count(*) FROM billing.usage_event WHERE source = 'late-gw'").fetchone()[0] == 0
            assert conn.execute("SELECT pg_try_advisory_xact_lock(29, hashint8(1::bigint))").fetchone()[0]
        # the worker's rating per shard group: every subscription but 1's and 13's
        assert rate_in_shards(url, RATE_AT) == 11
        with psycopg.connect(url, autocommit=True) as conn:
            assert usage_billed(conn, 1) == [] and usage_billed(conn, 13) == []
            # rate_usage on the coordinator (admin, the demo): skips them too
            rated = conn.execute(RATE_ALL, (RATE_AT + timedelta(minutes=1),)).fetchall()
            assert [r for r in rated if r[2] is not None] == []
            assert usage_billed(conn, 1) == [] and usage_billed(conn, 13) == []
        # Citus' recovery commits the batches on their nodes
        for customer, g in ((1, gid), (13, gid13)):
            with psycopg.connect(node_url(url, customer), autocommit=True) as node:
                node.execute(f"COMMIT PREPARED '{g}'")
        gid = gid13 = None
        assert rate_in_shards(url, RATE_AT + timedelta(minutes=2)) == 2
        with psycopg.connect(url, autocommit=True) as conn:
            # the batch's events billed with the period's, once: 4 x (3 + 5) and 2 x (3 + 5)
            assert usage_billed(conn, 1) == [world_subtotal(1) + 4 * 8]
            assert usage_billed(conn, 13) == [2 * 8]
            assert all(usage_billed(conn, c) == [world_subtotal(c)] for c in range(2, 13))
            assert conn.execute("SELECT count(*) FROM billing.usage_cursor WHERE late_since IS NOT NULL").fetchone()[0] == 0
            assert [r for r in conn.execute(RATE_ALL, (RATE_AT + timedelta(hours=2),)).fetchall() if r[2] is not None] == []
        assert rate_in_shards(url, RATE_AT + timedelta(hours=2)) == 0  # nothing due, nothing billed twice
    finally:
        for customer, g in ((1, gid), (13, gid13)):
            if g is not None:
                with psycopg.connect(node_url(url, customer), autocommit=True) as node:
                    if node.execute("SELECT 1 FROM pg_prepared_xacts WHERE gid = %s", (g,)).fetchone():
                        node.execute(f"ROLLBACK PREPARED '{g}'")


def test_an_ingestion_in_flight_on_one_postgresql_is_rated_once_it_commits(db_url):
    world(db_url, 6)
    with psycopg.connect(db_url) as ingestion:
        rows = ingestion.execute("SELECT status FROM billing.ingest_usage(%s::jsonb, %s)",
                                 (events(1, 3, "open"), END + timedelta(minutes=30))).fetchall()
        assert [r[0] for r in rows] == ["accepted"] * 3
        with psycopg.connect(db_url, autocommit=True) as conn:
            conn.execute("SET statement_timeout = '60s'")  # skipped, not waited for
            rated = conn.execute(RATE_ALL, (RATE_AT,)).fetchall()
            assert sorted(r[0] for r in rated if r[2] is not None) == [2, 3, 4, 5, 6]
        ingestion.commit()
    with psycopg.connect(db_url, autocommit=True) as conn:
        rated = conn.execute(RATE_ALL, (RATE_AT + timedelta(minutes=1),)).fetchall()
        assert [r[0] for r in rated if r[2] is not None] == [1]
        assert usage_billed(conn, 1) == [world_subtotal(1) + 3 * 8]
        assert [r for r in conn.execute(RATE_ALL, (RATE_AT + timedelta(hours=2),)).fetchall() if r[2] is not None] == []


def test_the_rating_per_group_skips_a_customer_row_held_for_share(db_url):
    """rate_usage_in_shard's row-lock step alone (group 0): a customer whose row another transaction
    holds FOR SHARE (what a batch prepared on a node holds there, its usage lock long gone) is left
    to the next call, then rated once."""
    world(db_url, 4)
    with psycopg.connect(db_url) as holder:
        holder.execute("SELECT 1 FROM billing.customer WHERE id = 2 FOR SHARE")
        assert rate_in_shards(db_url, RATE_AT) == 3
        holder.rollback()
    assert rate_in_shards(db_url, RATE_AT + timedelta(minutes=1)) == 1
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert all(usage_billed(conn, c) == [world_subtotal(c)] for c in range(1, 5))
    assert rate_in_shards(db_url, RATE_AT + timedelta(hours=1)) == 0
