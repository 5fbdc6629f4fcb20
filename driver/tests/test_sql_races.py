"""Races on the SQL API, with several real connections at once (threads released by a barrier).

* several sessions running create_due_invoices together, with several missed periods to catch up:
  exactly one invoice per due period, periods contiguous, none skipped;
* several charge workers claiming together: no invoice is ever claimed by two of them;
* cancels racing the renewal job: every subscription ends consistent (CANCELED, nothing OPEN,
  no invoice for a period after the cancel, version strictly increasing);
* the same idempotency key sent by several sessions at once: one subscription;
* a bulk signup whose key another call takes meanwhile: that key replayed, the others created;
* the same payment result recorded by several sessions at once: one InvoicePaid;
* the outbox wakes the relay with one NOTIFY per statement, carrying the row count;
* an operator's void racing a charge worker's claim: never a VOID invoice with a charge in flight.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter
from datetime import datetime, timedelta, timezone

import psycopg
import pytest

from .synthetic import invoice_paid_data_sql

T0 = datetime(2026, 1, 31, 15, 0, tzinfo=timezone.utc)
ZONES = ["UTC", "America/Sao_Paulo", "America/New_York", "Asia/Tokyo", "Australia/Lord_Howe"]


def connect(url: str) -> psycopg.Connection:
    return psycopg.connect(url, autocommit=True)


def run_together(n: int, target, *args) -> list:
    """Runs target(i, *args) in n threads started at the same instant; re-raises the first error."""
    barrier = threading.Barrier(n)
    results: list = [None] * n
    errors_: list[BaseException] = []

    def body(i: int) -> None:
        try:
            barrier.wait(timeout=30)
            results[i] = target(i, *args)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors_.append(exc)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    if errors_:
        raise errors_[0]
    return results


def seed_subscriptions(url: str, count: int, *, price: int = 1000) -> list[int]:
    """count subscriptions on a monthly plan, signed up over two weeks in several zones."""
    rng = random.Random(7)
    ids = []
    with connect(url) as conn:
        conn.execute("SELECT billing.upsert_plan('RACE_M', %s, 'USD', 'MONTH')", (price,))
        for i in range(count):
            conn.execute("SELECT billing.upsert_customer(%s, %s)", (10_000 + i, ZONES[i % len(ZONES)]))
            at = T0 + timedelta(seconds=rng.randrange(14 * 86400))
            row = conn.execute(
                "SELECT id FROM billing.create_subscription(%s, %s, 'RACE_M', %s)", (f"race-{i}", 10_000 + i, at)
            ).fetchone()
            ids.append(row[0])
    return ids


def test_concurrent_renewal_bills_each_due_period_exactly_once(db_url):
    ids = seed_subscriptions(db_url, 120)
    now = T0 + timedelta(days=130)  # four to five missed periods each: catch-up under contention

    def renew(i: int) -> int:
        handled = 0
        with connect(db_url) as conn:
            while True:
                n = conn.execute("SELECT billing.create_due_invoices(%s, %s)", (3 + i * 4, now)).fetchone()[0]
                handled += n
                if n == 0:
                    return handled

    handled = run_together(6, renew)
    with connect(db_url) as conn:
        assert conn.execute("SELECT billing.create_due_invoices(500, %s)", (now,)).fetchone()[0] == 0
        subs = conn.execute(
            "SELECT id, billing_anchor, timezone, period_number, current_period_start, current_period_end, version"
            " FROM billing.subscription ORDER BY id"
        ).fetchall()
        invoices = conn.execute(
            "SELECT subscription_id, kind, period_start, period_end FROM billing.invoice ORDER BY subscription_id, period_start"
        ).fetchall()
        expected_total = 0
        for sid, anchor, tz, number, start, end, version in subs:
            # Every boundary up to now was billed: the current period contains now.
            assert start <= now < end, sid
            own = [(k, s, e) for (i, k, s, e) in invoices if i == sid]
            assert own[0][0] == "INITIAL" and all(k == "RENEWAL" for k, _, _ in own[1:])
            # Contiguous: each period starts where the previous ended; exactly one per boundary.
            for (_, _, prev_end), (_, nxt_start, _) in zip(own, own[1:]):
                assert nxt_start == prev_end
            assert own[-1][2] == end
            assert len(own) == number
            for n, (_, s, e) in enumerate(own):
                want = conn.execute(
                    "SELECT billing.period_end(%s, 'MONTH', 1, %s, %s), billing.period_end(%s, 'MONTH', 1, %s, %s)",
                    (anchor, n, tz, anchor, n + 1, tz),
                ).fetchone()
                assert (s, e) == want
            assert version == number  # one version per renewal
            expected_total += number - 1
    assert sum(handled) == expected_total
    assert len(ids) == len(subs)


def test_two_workers_never_claim_the_same_charge(db_url):
    seed_subscriptions(db_url, 200)

    def claim(i: int) -> list[tuple[int, str]]:
        got = []
        with connect(db_url) as conn:
            while True:
                rows = conn.execute(
                    "SELECT invoice_id, idempotency_key FROM billing.claim_charges(%s, %s, '5 minutes', %s)",
                    (f"w{i}", 7, T0 + timedelta(days=20)),
                ).fetchall()
                if not rows:
                    return got
                got.extend(rows)

    claimed = [row for rows in run_together(4, claim) for row in rows]
    counts = Counter(inv for inv, _ in claimed)
    assert len(counts) == 200 and set(counts.values()) == {1}, "an invoice was claimed twice or never"
    with connect(db_url) as conn:
        namespace = conn.execute("SELECT key_namespace FROM billing.installation").fetchone()[0]
    assert all(key == f"{namespace}-inv-{inv}-try-0" for inv, key in claimed)
    with connect(db_url) as conn:
        assert conn.execute("SELECT count(*), max(claim_count) FROM billing.payment_attempt").fetchone() == (200, 1)


def test_cancel_racing_renewal_leaves_a_consistent_state(db_url):
    ids = seed_subscriptions(db_url, 150)
    now = T0 + timedelta(days=75)
    cancel_at = {sid: now for sid in ids}
    order = list(ids)
    random.Random(3).shuffle(order)

    def work(i: int) -> None:
        with connect(db_url) as conn:
            if i < 2:  # renewal workers
                while conn.execute("SELECT billing.create_due_invoices(4, %s)", (now,)).fetchone()[0]:
                    pass
                return
            for sid in order[i - 2 :: 3]:  # three cancel sessions, every third subscription
                version = conn.execute("SELECT version FROM billing.get_subscription(%s)", (sid,)).fetchone()[0]
                try:  # half of them with an expected version that the renewal may make stale
                    conn.execute(
                        "SELECT billing.cancel_subscription(%s, false, %s, %s)",
                        (sid, now, version if sid % 2 else None),
                    )
                except psycopg.Error as exc:
                    assert exc.sqlstate == "BL409", exc
                    conn.execute("SELECT billing.cancel_subscription(%s, false, %s)", (sid, now))

    run_together(5, work)
    with connect(db_url) as conn:
        assert conn.execute("SELECT billing.create_due_invoices(500, %s)", (now,)).fetchone()[0] == 0
        rows = conn.execute(
            "SELECT s.id, s.status, s.version, s.period_number, s.current_period_end,"
            # Unpaid is unpaid (docs/money.md, section 4): what stays OPEN bills time served only,
            # an invoice serving past the cancellation has the rest taken off (unserved).
            "       count(i.*) FILTER (WHERE i.status = 'OPEN' AND i.period_end > %s AND i.unserved = 0),"
            "       count(i.*), max(i.period_start), bool_and(i.status IN ('VOID', 'PAID', 'OPEN'))"
            "  FROM billing.subscription s JOIN billing.invoice i ON i.subscription_id = s.id"
            " GROUP BY s.customer_id, s.id ORDER BY s.id", (now,)
        ).fetchall()
        for sid, status, version, number, end, open_, n_inv, last_start, settled in rows:
            assert status == "CANCELED", sid
            assert open_ == 0 and settled, f"subscription {sid} kept an OPEN invoice of time not served after its cancel"
            assert n_inv == number, f"subscription {sid}: one invoice per period it went through"
            assert last_start < cancel_at[sid]
            assert version == number + 1  # renewals plus the cancel, nothing lost
        events = conn.execute(
            "SELECT aggregate_id, count(*) FROM billing.outbox_event WHERE event_type = 'SubscriptionCanceled' GROUP BY 1"
        ).fetchall()
        assert sorted(events) == [(sid, 1) for sid in sorted(ids)]


def test_same_idempotency_key_at_once_creates_one_subscription(db_url):
    with connect(db_url) as conn:
        conn.execute("SELECT billing.upsert_plan('RACE_M', 1000, 'USD', 'MONTH')")

    def create(i: int):
        with connect(db_url) as conn:
            return conn.execute("SELECT id FROM billing.create_subscription('same-key', 1, 'RACE_M', %s)", (T0,)).fetchone()[0]

    got = run_together(8, create)
    assert len(set(got)) == 1
    with connect(db_url) as conn:
        assert conn.execute("SELECT count(*) FROM billing.subscription").fetchone()[0] == 1
        assert conn.execute("SELECT count(*) FROM billing.invoice").fetchone()[0] == 1


def test_same_key_at_once_with_and_without_a_coupon_never_deadlocks(db_url):
    # A signup without a coupon writes everything in one statement, one with a coupon row by row:
    # both take the new customer before the key, so concurrent first uses never wait crosswise.
    with connect(db_url) as conn:
        conn.execute("SELECT billing.upsert_plan('RACE_C', 1000, 'USD', 'MONTH')")
        conn.execute("SELECT billing.upsert_coupon('RACE_TEN', 10, NULL, NULL, 'repeating', 2)")

    def create(i: int):
        with connect(db_url) as conn:
            try:
                return conn.execute("SELECT id FROM billing.create_subscription('mixed-key', 7, 'RACE_C', %s, 0, %s)",
                                    (T0, "RACE_TEN" if i % 2 else None)).fetchone()[0]
            except psycopg.Error as exc:
                return exc.sqlstate

    got = run_together(8, create)
    ids = {g for g in got if isinstance(g, int)}
    assert len(ids) == 1 and all(g == "BL409" for g in got if not isinstance(g, int)), got
    with connect(db_url) as conn:
        assert conn.execute("SELECT count(*) FROM billing.subscription WHERE customer_id = 7").fetchone()[0] == 1


@pytest.mark.parametrize("customer_known", [False, True], ids=["new-customer", "known-customer"])
def test_a_batch_whose_key_is_taken_meanwhile_replays_it_and_creates_the_rest(db_url, customer_known):
    # create_subscriptions writes its usual rows set-based with plain inserts; a key another call took
    # after the batch read its keys (and, for a new customer, that customer) makes the insert wait for
    # that call, then fail on the unique key (customer_pkey, or subscription_request_pkey when the
    # customer was known): the set-based part is undone and every row goes through
    # create_subscription, which replays that key.
    with connect(db_url) as conn:
        conn.execute("SELECT billing.upsert_plan('RACE_K', 1000, 'USD', 'MONTH')")
        if customer_known:
            conn.execute("SELECT billing.upsert_customer(801, 'UTC')")
    first = psycopg.connect(db_url)  # one open transaction holding the key 'taken-1'
    taken = first.execute("SELECT id FROM billing.create_subscription('taken-1', 801, 'RACE_K', %s)", (T0,)).fetchone()[0]
    rows = [{"idempotency_key": f"taken-{i}", "customer_id": 800 + i, "plan_code": "RACE_K"} for i in range(3)]
    outcome: dict = {}
    bulk = connect(db_url)
    bulk_pid = bulk.execute("SELECT pg_backend_pid()").fetchone()[0]

    def create() -> None:
        try:
            outcome["rows"] = bulk.execute("SELECT idempotency_key, subscription_id, customer_id, outcome "
                                           "FROM billing.create_subscriptions(%s::jsonb, %s)", (json.dumps(rows), T0)).fetchall()
        except psycopg.Error as exc:
            outcome["error"] = exc.sqlstate

    waiter = threading.Thread(target=create)
    waiter.start()
    with connect(db_url) as watch:  # the batch waits on the open transaction's key (bounded, by condition)
        for _ in range(600):
            if watch.execute("SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s", (bulk_pid,)).fetchone()[0]:
                break
            waiter.join(timeout=0.05)
        else:
            pytest.fail("the batch never waited for the concurrent key")
    first.commit()
    first.close()
    waiter.join(timeout=60)
    bulk.close()
    assert "error" not in outcome, outcome
    got = outcome["rows"]
    assert [(r[0], r[3]) for r in got] == [("taken-0", "created"), ("taken-1", "replayed"), ("taken-2", "created")], got
    assert got[1][1] == taken
    with connect(db_url) as conn:
        subs = conn.execute("SELECT customer_id, id FROM billing.subscription WHERE customer_id BETWEEN 800 AND 802 "
                            "ORDER BY 1").fetchall()
        assert subs == [(r[2], r[1]) for r in got]
        assert conn.execute("SELECT count(*) FROM billing.invoice WHERE customer_id BETWEEN 800 AND 802").fetchone()[0] == 3
        assert conn.execute("SELECT count(*) FROM billing.outbox_event WHERE customer_id BETWEEN 800 AND 802 "
                            "AND event_type = 'SubscriptionCreated'").fetchone()[0] == 3


def _retry_one(conn, key: str, customer: int, plan: str, bulk: bool):
    """A retry of one signup, through create_subscription or as a batch of one: (id, customer_id)."""
    if not bulk:
        return conn.execute("SELECT id, customer_id FROM billing.create_subscription(%s, %s, %s, %s)",
                            (key, customer, plan, T0)).fetchone()
    rows = [{"idempotency_key": key, "customer_id": customer, "plan_code": plan}]
    (sub, owner, outcome), = conn.execute("SELECT subscription_id, customer_id, outcome FROM billing.create_subscriptions(%s::jsonb, %s)",
                                           (json.dumps(rows), T0)).fetchall()
    assert outcome == "replayed"
    return sub, owner


@pytest.mark.parametrize("bulk", [False, True], ids=["create_subscription", "create_subscriptions"])
def test_one_key_first_used_for_two_customers_at_once_replays_each_ones_own(db_url, bulk):
    """A request's idempotency key is unique per customer (subscription_request_pkey, customer-keyed for
    Citus): two first uses of one key for two customers at once both create (neither waits for the
    other). Each one's retry must replay its own subscription: it was refused with BL409 naming the
    other customer when the lookup by key found the other's row first (create_subscription), or met
    both rows and refused the whole batch (create_subscriptions' join on the key alone), and a client
    told 409 for its own signup may sign up again under a new key (charged twice). review6."""
    base = 831 if bulk else 821
    with connect(db_url) as conn:
        conn.execute("SELECT billing.upsert_plan('RACE_T', 1000, 'USD', 'MONTH')")
    first, second = psycopg.connect(db_url), psycopg.connect(db_url)
    try:
        mine = first.execute("SELECT id FROM billing.create_subscription('twice', %s, 'RACE_T', %s)", (base, T0)).fetchone()[0]
        theirs = second.execute("SELECT id FROM billing.create_subscription('twice', %s, 'RACE_T', %s)", (base + 1, T0)).fetchone()[0]
        first.commit()
        second.commit()
    finally:
        first.close()
        second.close()
    with connect(db_url) as conn:
        for customer, sub in ((base, mine), (base + 1, theirs)) * 2:
            assert _retry_one(conn, "twice", customer, "RACE_T", bulk) == (sub, customer)
        # a third customer is still refused the key (used by others), as before
        with pytest.raises(psycopg.Error) as refused:
            _retry_one(conn, "twice", base + 2, "RACE_T", bulk)
        assert refused.value.sqlstate == "BL409"
        conn.rollback()
        assert conn.execute("SELECT count(*) FROM billing.subscription WHERE customer_id BETWEEN %s AND %s",
                            (base, base + 2)).fetchone()[0] == 2


def test_same_payment_result_at_once_is_applied_once(db_url):
    seed_subscriptions(db_url, 1)
    with connect(db_url) as conn:
        key = conn.execute("SELECT idempotency_key FROM billing.claim_charges('w', 1, '5 minutes', %s)", (T0 + timedelta(days=20),)).fetchone()[0]

    def report(i: int):
        with connect(db_url) as conn:
            if i % 2:
                return conn.execute(
                    "SELECT status FROM billing.record_payment_result(%s, 'SUCCEEDED', 'ch', NULL, %s)", (key, T0 + timedelta(days=20))
                ).fetchone()[0]
            return conn.execute(
                "SELECT billing.apply_gateway_webhook(%s, %s, 'SUCCEEDED', 'ch', (SELECT jsonb_build_object("
                "'amount', a.amount, 'currency', btrim(a.currency), 'customerId', a.customer_id) "
                "FROM billing.payment_attempt a WHERE a.idempotency_key = %s), %s)",
                (f"evt-{i // 4}", key, key, T0 + timedelta(days=20))
            ).fetchone()[0]

    run_together(8, report)
    with connect(db_url) as conn:
        assert conn.execute("SELECT status FROM billing.invoice").fetchone()[0] == "PAID"
        assert conn.execute("SELECT event_type, count(*) FROM billing.outbox_event "
                            "WHERE aggregate_type = 'invoice' AND event_type <> 'InvoiceCreated' GROUP BY 1").fetchall() \
            == [("InvoicePaid", 1)]
        assert conn.execute("SELECT count(*) FROM billing.gateway_webhook").fetchone()[0] == 2


def test_outbox_notifies_once_per_statement_with_the_count(db_url):
    ids = seed_subscriptions(db_url, 5)
    with connect(db_url) as listener, connect(db_url) as conn:
        for sid in ids:
            conn.execute("SELECT billing.cancel_subscription(%s, true, %s)", (sid, T0 + timedelta(days=1)))
        listener.execute("LISTEN billing_outbox")
        # One renewal statement cancels all five at period end: five events, one notification.
        with conn.transaction():
            assert conn.execute("SELECT billing.create_due_invoices(500, %s)", (T0 + timedelta(days=60),)).fetchone()[0] == 5
        notes = list(listener.notifies(timeout=2, stop_after=10))
        assert [(n.channel, json.loads(n.payload)) for n in notes] == [("billing_outbox", {"count": 5})]
        assert conn.execute("SELECT count(*) FROM billing.outbox_event WHERE event_type = 'SubscriptionCanceled'").fetchone()[0] == 5


@pytest.mark.parametrize("batch", [1, 50])
def test_outbox_relays_never_share_an_event_and_keep_aggregate_order(db_url, batch):
    """Three relays claim at once; none gets an event another holds, nor one whose predecessor it lacks."""
    with connect(db_url) as conn:
        conn.execute(
            f"SELECT billing._emit_event('invoice', a, 'InvoicePaid', {invoice_paid_data_sql('a')}, %s)"
            "  FROM generate_series(1, 300) g, LATERAL (SELECT 1 + g %% 40 AS a) x",
            (T0,),
        )
        first_of = dict(conn.execute("SELECT aggregate_id, min(id) FROM billing.outbox_event GROUP BY 1").fetchall())

    def relay(i: int) -> list[tuple[int, int]]:
        with connect(db_url) as conn:
            return conn.execute(
                "SELECT id, aggregate_id FROM billing.claim_outbox_events(%s, '1 minute', %s)", (batch, T0 + timedelta(seconds=1))
            ).fetchall()

    claims = run_together(3, relay)
    all_ids = [eid for rows in claims for eid, _ in rows]
    assert len(all_ids) == len(set(all_ids))
    for rows in claims:
        mine = {eid for eid, _ in rows}
        for eid, agg in rows:
            # Every earlier event of the aggregate is in this same claim.
            with connect(db_url) as conn:
                earlier = {r[0] for r in conn.execute(
                    "SELECT id FROM billing.outbox_event WHERE aggregate_id = %s AND id < %s", (agg, eid)).fetchall()}
            assert earlier <= mine, (eid, agg)
            assert eid >= first_of[agg]


def test_change_plan_waiting_for_a_renewal_decides_on_the_row_it_locked(db_url):
    """A plan change whose p_now was taken before a renewal committed (it waited for the row lock)
    applies from the period the renewal started, instead of failing with BL422."""
    with connect(db_url) as conn:
        conn.execute("SELECT billing.upsert_plan('RACE_B', 1000, 'USD', 'MONTH')")
        conn.execute("SELECT billing.upsert_plan('RACE_P', 3000, 'USD', 'MONTH')")
        sub = conn.execute("SELECT id FROM billing.create_subscription('race-cp', 77, 'RACE_B', %s)", (T0,)).fetchone()[0]
        end = conn.execute("SELECT current_period_end FROM billing.subscription WHERE id = %s", (sub,)).fetchone()[0]
    renewal = psycopg.connect(db_url)  # one open transaction holding the renewed row
    renewal.execute("SELECT billing.create_due_invoices(500, %s)", (end + timedelta(seconds=5),))
    outcome: dict = {}

    def change() -> None:
        with connect(db_url) as conn:
            try:
                outcome["row"] = conn.execute("SELECT current_period_start FROM billing.change_plan(%s, 'RACE_P', %s)",
                                              (sub, end - timedelta(seconds=1))).fetchone()
            except psycopg.Error as exc:
                outcome["error"] = exc.sqlstate

    waiter = threading.Thread(target=change)
    waiter.start()
    waiter.join(timeout=1.0)
    assert waiter.is_alive(), "change_plan should wait for the renewal's row lock"
    renewal.commit()
    renewal.close()
    waiter.join(timeout=30)
    assert outcome == {"row": (end,)}, outcome
    with connect(db_url) as conn:
        got = conn.execute("SELECT period_start, subtotal FROM billing.invoice WHERE subscription_id = %s "
                           "AND kind = 'PRORATION'", (sub,)).fetchall()
    assert got == [(end, 2000)]  # the whole new period, 3000 - 1000


def test_a_void_waiting_on_a_claim_sees_the_charge_in_flight_and_refuses(db_url):
    """void_invoice and a charge worker's claim on the same invoice: the void waits for the claim's
    transaction, then sees its charge in flight and refuses (BL409); a claim after a void finds
    nothing. Never a VOID invoice whose charge is out at the gateway."""
    with connect(db_url) as conn:
        conn.execute("SELECT billing.upsert_plan('RACE_V', 1000, 'USD', 'MONTH', 1)")
        subs = [conn.execute("SELECT id FROM billing.create_subscription(%s, %s, 'RACE_V', %s)",
                             (f"race-void-{i}", 9100 + i, T0)).fetchone()[0] for i in range(2)]
        claimed_first, voided_first = (conn.execute("SELECT id FROM billing.invoice WHERE subscription_id = %s",
                                                    (s,)).fetchone()[0] for s in subs)
        conn.execute("SELECT billing.void_invoice(%s, 'before any claim', %s)", (voided_first, T0))
    worker = psycopg.connect(db_url)  # a transaction held open: the claim made, not yet committed
    claimed = worker.execute("SELECT invoice_id FROM billing.claim_charges('w', 10, '5 minutes', %s)",
                             (T0,)).fetchall()
    assert claimed == [(claimed_first,)]  # the voided one is never claimed
    outcome: dict = {}

    def void() -> None:
        with connect(db_url) as conn:
            try:
                conn.execute("SELECT billing.void_invoice(%s, 'raced', %s)", (claimed_first, T0))
                outcome["result"] = "voided"
            except psycopg.Error as exc:
                outcome["result"] = exc.sqlstate

    t = threading.Thread(target=void)
    t.start()
    t.join(timeout=2)
    assert t.is_alive(), "the void must wait for the claim's row lock"
    worker.commit()
    worker.close()
    t.join(timeout=30)
    assert outcome["result"] == "BL409"
    with connect(db_url) as conn:
        assert conn.execute("SELECT status FROM billing.invoice WHERE id = %s", (claimed_first,)).fetchone()[0] == "OPEN"


@pytest.mark.parametrize("second", ["apply_coupon", "create_subscription"])
def test_two_redemptions_of_a_once_per_customer_coupon_at_once_one_wins(db_url, second):
    # max_redemptions_per_customer (migration 0830): two redemptions by one customer on two of its
    # subscriptions, the first still uncommitted when the second comes: the second waits on the
    # customer's row lock (seen waiting, not by timing), then counts the first's redemption: BL409.
    with connect(db_url) as conn:
        conn.execute("SELECT billing.upsert_plan('RACE_P', 1000, 'USD', 'MONTH')")
        conn.execute("SELECT billing.upsert_coupon('RACE_ONCE_EACH', 50, NULL, NULL, 'forever', NULL, NULL, NULL, NULL, 1)")
        other = conn.execute("SELECT id FROM billing.create_subscription('rp-0', 830, 'RACE_P', %s)", (T0,)).fetchone()[0]
    first = psycopg.connect(db_url)  # an open transaction holding the first redemption
    first.execute("SELECT billing.create_subscription('rp-1', 830, 'RACE_P', %s, 0, 'RACE_ONCE_EACH')", (T0,))
    later = connect(db_url)
    later_pid = later.execute("SELECT pg_backend_pid()").fetchone()[0]
    outcome: dict = {}

    def redeem() -> None:
        try:
            if second == "apply_coupon":
                later.execute("SELECT billing.apply_coupon(%s, 'RACE_ONCE_EACH', %s)", (other, T0))
            else:
                later.execute("SELECT billing.create_subscription('rp-2', 830, 'RACE_P', %s, 0, 'RACE_ONCE_EACH')", (T0,))
            outcome["done"] = True
        except psycopg.Error as exc:
            outcome["error"] = exc.sqlstate

    waiter = threading.Thread(target=redeem)
    waiter.start()
    with connect(db_url) as watch:
        for _ in range(600):
            if watch.execute("SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s",
                             (later_pid,)).fetchone()[0]:
                break
            time.sleep(0.05)
        else:
            raise AssertionError("the second redemption never waited for the first")
    first.commit()
    first.close()
    waiter.join(30)
    later.close()
    assert outcome == {"error": "BL409"}, outcome
    with connect(db_url) as conn:
        assert conn.execute("SELECT count(*) FROM billing.coupon_redemption WHERE customer_id = 830").fetchone()[0] == 1
        assert conn.execute("SELECT times_redeemed FROM billing.coupon WHERE code = 'RACE_ONCE_EACH'").fetchone()[0] == 1


def _wait_until_waiting(db_url: str, pid: int, what: str) -> None:
    with connect(db_url) as watch:
        for _ in range(600):
            if watch.execute("SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s",
                             (pid,)).fetchone()[0]:
                return
            time.sleep(0.05)
    raise AssertionError(f"{what} never waited")


SIGNUP_TO_RACE_A = {
    "create_subscription": "SELECT 1 FROM billing.create_subscription(%s, 2851, 'RACE_A', %s)",
    "create_subscriptions": ("SELECT 1 FROM billing.create_subscriptions(jsonb_build_array(jsonb_build_object("
                             "'idempotency_key', %s::text, 'customer_id', 2851, 'plan_code', 'RACE_A')), %s)"),
    "change_plan": None,  # a plan change to it (the subscription on RACE_B made first)
}


def _signup_to_race_a(conn, how: str, key: str, sub_b: int):
    if how == "change_plan":
        return conn.execute("SELECT 1 FROM billing.change_plan(%s, 'RACE_A', %s)", (sub_b, T0))
    return conn.execute(SIGNUP_TO_RACE_A[how], (key, T0))


@pytest.mark.parametrize("how", sorted(SIGNUP_TO_RACE_A))
def test_an_archive_waits_for_a_signup_in_flight_and_a_signup_for_an_archive(db_url, how):
    # adv11: a plan archived while a signup (or a plan change) to it was in flight: the signup had read
    # the plan offered, the archive committed, then the signup did: a subscription on an archived plan.
    # Now the signup holds the plan code's lock shared from before its read, the archive takes it
    # exclusive: (1) an archive arriving during a signup waits for it (seen waiting, not by timing), the
    # subscription made before the archive; (2) a signup arriving during an archive waits for it, then
    # reads the plan archived: BL422, nothing made.
    with connect(db_url) as conn:
        conn.execute("SELECT billing.upsert_plan('RACE_A', 1000, 'USD', 'MONTH')")
        conn.execute("SELECT billing.upsert_plan('RACE_B', 2000, 'USD', 'MONTH')")
        sub_b = [conn.execute("SELECT id FROM billing.create_subscription(%s, 2851, 'RACE_B', %s)", (f"ra-b{i}", T0)).fetchone()[0]
                 for i in (1, 2)]

    # (1) the signup first, uncommitted; the archive waits for it.
    first = psycopg.connect(db_url)
    _signup_to_race_a(first, how, "ra-1", sub_b[0])
    archiver = connect(db_url)
    archiver_pid = archiver.execute("SELECT pg_backend_pid()").fetchone()[0]
    done: dict = {}
    thread = threading.Thread(target=lambda: done.update(
        plan=archiver.execute("SELECT archived_at FROM billing.archive_plan('RACE_A', %s)", (T0,)).fetchone()))
    thread.start()
    _wait_until_waiting(db_url, archiver_pid, "the archive")
    assert "plan" not in done
    first.commit()
    first.close()
    thread.join(30)
    assert done.get("plan") is not None
    archiver.close()
    with connect(db_url) as conn:
        on_a = conn.execute("SELECT count(*) FROM billing.subscription s JOIN billing.plan p ON p.id = s.plan_id "
                            "WHERE p.code = 'RACE_A'").fetchone()[0]
        assert on_a == 1  # made before the archive: it stands, as any subscription on a plan archived later
        conn.execute("UPDATE billing.plan SET archived_at = NULL WHERE code = 'RACE_A'")  # (no API un-archives)

    # (2) the archive first, uncommitted; the signup waits for it and is refused.
    archive = psycopg.connect(db_url)
    archive.execute("SELECT billing.archive_plan('RACE_A', %s)", (T0,))
    later = connect(db_url)
    later_pid = later.execute("SELECT pg_backend_pid()").fetchone()[0]
    outcome: dict = {}

    def sign_up() -> None:
        try:
            _signup_to_race_a(later, how, "ra-2", sub_b[1])
            outcome["done"] = True
        except psycopg.Error as exc:
            outcome["error"] = exc.sqlstate

    waiter = threading.Thread(target=sign_up)
    waiter.start()
    _wait_until_waiting(db_url, later_pid, "the signup")
    archive.commit()
    archive.close()
    waiter.join(30)
    later.close()
    assert outcome == {"error": "BL422"}, outcome
    with connect(db_url) as conn:
        on_a = conn.execute("SELECT count(*) FROM billing.subscription s JOIN billing.plan p ON p.id = s.plan_id "
                            "WHERE p.code = 'RACE_A'").fetchone()[0]
        assert on_a == 1
