"""The independent checker of a chaos run.

It trusts nothing the driver says: it reads the tables as a superuser, the gateway simulator's
ledger (what the gateway really charged) and the whole Kafka topic from its first offset, and
checks the promises of docs/ against all three. Each invariant yields a `Check` with a
one-line result and, when it fails, the first offending rows.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from datetime import timedelta

import psycopg
from psycopg.rows import dict_row

from billing.checks import Check, TopicMessage

KEY_RE = re.compile(r"^[a-z0-9]+-inv-(\d+)-try-(\d+)$")  # <namespace>-inv-<id>-try-<n>
UTC_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|\+00:00)$")


def _rows(conn, query: str, params=None) -> list[dict]:
    return conn.execute(query, params or {}).fetchall()


def _fail_list(items, limit: int = 10) -> list:
    return list(items)[:limit]


def check_all(db_url: str, ledger: dict, messages: list[TopicMessage], *,
              created_keys: dict[str, set[int]] | None = None,
              gateway_rate: int | None = None) -> tuple[list[Check], dict]:
    """Every invariant of the chaos run; returns the checks and the figures."""
    checks: list[Check] = []
    figures: dict = {}
    with psycopg.connect(db_url, row_factory=dict_row, autocommit=True) as conn:
        db_now = conn.execute("SELECT now() AS now").fetchone()["now"]
        subs = {r["id"]: r for r in _rows(conn, "SELECT * FROM billing.subscription")}
        plans = {r["id"]: r for r in _rows(conn, "SELECT * FROM billing.plan")}
        invoices = {r["id"]: r for r in _rows(conn, "SELECT * FROM billing.invoice")}
        attempts = _rows(conn, "SELECT * FROM billing.payment_attempt")
        outbox = _rows(conn, "SELECT * FROM billing.outbox_event ORDER BY id")
        webhooks = _rows(conn, "SELECT * FROM billing.gateway_webhook")
        requests = _rows(conn, "SELECT * FROM billing.subscription_request")
        credit_entries = _rows(conn, "SELECT * FROM billing.credit_entry")
        balances = _rows(conn, "SELECT * FROM billing.credit_balance")
        refund_rows = _rows(conn, "SELECT * FROM billing.refund")

    charges = ledger.get("charges", [])
    by_status = Counter(i["status"] for i in invoices.values())
    figures.update(
        subscriptions=len(subs),
        subscriptions_by_status=dict(Counter(s["status"] for s in subs.values())),
        cancel_reasons=dict(Counter(s["cancel_reason"] for s in subs.values() if s["cancel_reason"])),
        invoices=len(invoices),
        invoices_by_status=dict(by_status),
        invoices_by_kind=dict(Counter(i["kind"] for i in invoices.values())),
        payment_attempts=len(attempts),
        attempt_outcomes=dict(Counter(a["outcome"] or "none" for a in attempts)),
        reclaimed_attempts=sum(1 for a in attempts if a["claim_count"] > 1),
        gateway_charges=len(charges),
        gateway_charges_by_status=dict(Counter(c.get("status") for c in charges)),
        gateway_rate_limited=ledger.get("rateLimited"),
        webhooks_stored=len(webhooks),
        outbox_events=len(outbox),
        outbox_by_type=dict(Counter(e["event_type"] for e in outbox)),
        kafka_messages=len(messages),
        refund_rows=len(refund_rows),
        refunds_by_status=dict(Counter(r["status"] for r in refund_rows)),
        refunds_by_reason=dict(Counter(r["reason"] for r in refund_rows)),
        gateway_refunds=len(ledger.get("refunds", [])),
    )

    # -- 1. no invoice charged twice (the gateway's own ledger) ---------------------------------
    key_counts = Counter(c["idempotencyKey"] for c in charges)
    dup_keys = [k for k, n in key_counts.items() if n > 1]
    succeeded_per_invoice: dict[int, list[dict]] = defaultdict(list)
    foreign = []
    for c in charges:
        m = KEY_RE.match(c["idempotencyKey"])
        if not m:
            foreign.append(c["idempotencyKey"])
            continue
        if c.get("status") == "succeeded":
            succeeded_per_invoice[int(m.group(1))].append(c)
    twice = {i: [c["idempotencyKey"] for c in cs] for i, cs in succeeded_per_invoice.items() if len(cs) > 1}
    checks.append(Check(
        "no invoice charged twice",
        not dup_keys and not twice and not foreign,
        f"{len(charges)} gateway charges over {len(key_counts)} keys, "
        f"{len(succeeded_per_invoice)} invoices charged successfully; keys seen twice: {len(dup_keys)}, "
        f"invoices with two successful charges: {len(twice)}, keys not of the invoice form: {len(foreign)}",
        _fail_list(dup_keys) + _fail_list(twice.items()) + _fail_list(foreign),
    ))

    # -- 2. what the gateway charged is what the database says --------------------------------
    attempt_by_key = {a["idempotency_key"]: a for a in attempts}
    bad = []
    for c in charges:
        a = attempt_by_key.get(c["idempotencyKey"])
        if a is None:
            bad.append(("charged key unknown to payment_attempt", c["idempotencyKey"]))
            continue
        inv = invoices[a["invoice_id"]]
        # What a key charges is its attempt's amount: the invoice's, less what a cancellation took off
        # as not served (docs/money.md, "Unpaid is unpaid"); a re-claim sends the attempt's first one.
        owed = inv["amount"] - min(inv.get("unserved") or 0, inv["amount"])
        if c.get("amount") != a["amount"] or c.get("currency") != inv["currency"].strip() \
                or not (owed <= a["amount"] <= inv["amount"]):
            bad.append(("amount/currency differ", c["idempotencyKey"], c.get("amount"), a["amount"], inv["amount"]))
        # A success on a VOID or FAILED invoice leaves it closed (RefundDue, checked below).
        if c.get("status") == "succeeded" and inv["status"] not in ("PAID", "VOID", "FAILED"):
            bad.append(("charged but not PAID", inv["id"], inv["status"]))
    for inv in invoices.values():
        if inv["status"] != "PAID":
            continue
        if inv["paid_attempt_id"] is None:
            # closed PAID with nothing owed: amount 0, or a cancellation took its whole amount off as
            # not served (unserved = amount, its UNSERVED credit note; a charge then in flight is
            # refunded: RefundDue, checked below)
            if inv["amount"] - min(inv.get("unserved") or 0, inv["amount"]) != 0:
                bad.append(("PAID without attempt but amount owed > 0", inv["id"]))
            continue
        paying = next((a for a in attempts if a["id"] == inv["paid_attempt_id"]), None)
        led = [c for c in charges if paying and c["idempotencyKey"] == paying["idempotency_key"]]
        if not led or led[0].get("status") != "succeeded":
            bad.append(("PAID but the gateway has no successful charge for its key", inv["id"]))
    checks.append(Check(
        "ledger and database agree (every success recorded, every PAID invoice really charged)",
        not bad, f"{len(bad)} disagreements", _fail_list(bad)))

    # -- 3. every due period invoiced exactly once, none skipped, none overlapping -------------
    period_invoices: dict[int, list[dict]] = defaultdict(list)
    for inv in invoices.values():
        if inv["kind"] in ("INITIAL", "RENEWAL"):
            period_invoices[inv["subscription_id"]].append(inv)
    bad = []
    periods_total = 0
    for sid, sub in subs.items():
        invs = sorted(period_invoices.get(sid, []), key=lambda i: i["period_start"])
        periods_total += len(invs)
        if not invs or invs[0]["kind"] != "INITIAL" or sum(i["kind"] == "INITIAL" for i in invs) != 1:
            bad.append((sid, "not exactly one INITIAL invoice first"))
            continue
        if invs[0]["period_start"] != sub["billing_anchor"]:
            bad.append((sid, "first period does not start at the anchor"))
        for a, b in zip(invs, invs[1:]):
            if a["period_end"] != b["period_start"]:
                kind = "overlap" if b["period_start"] < a["period_end"] else "gap"
                bad.append((sid, kind, a["id"], b["id"], a["period_end"], b["period_start"]))
        if invs[-1]["period_end"] != sub["current_period_end"] or invs[-1]["period_start"] != sub["current_period_start"]:
            bad.append((sid, "last invoiced period is not the current period"))
        plan = plans[sub["plan_id"]]
        if sub["status"] != "CANCELED":
            if sub["current_period_end"] <= db_now:
                bad.append((sid, "still due after the drain", sub["current_period_end"]))
            if plan["billing_interval"] == "DAY" and sub["timezone"] == "UTC" and plan["interval_count"] == 1:
                # Independent count: one period per started day since the anchor.
                expected = int((db_now - sub["billing_anchor"]) // timedelta(days=1)) + 1
                if len(invs) != expected:
                    bad.append((sid, "period count", len(invs), "expected", expected))
        else:
            late = [i["id"] for i in invs if i["period_start"] > sub["canceled_at"]]
            if late:
                bad.append((sid, "invoiced after its cancellation", late))
            if sub["cancel_reason"] == "PERIOD_END" and sub["canceled_at"] < sub["current_period_end"]:
                bad.append((sid, "canceled at period end before the period ended"))
    figures["periods_invoiced"] = periods_total
    checks.append(Check(
        "every due period invoiced exactly once, none skipped, none overlapping",
        not bad, f"{periods_total} periods over {len(subs)} subscriptions; {len(bad)} anomalies", _fail_list(bad)))

    # -- 4. the outbox drained: no DEAD event, nothing left PENDING ------------------------------
    dead = [e["id"] for e in outbox if e["status"] == "DEAD"]
    pending = [e["id"] for e in outbox if e["status"] == "PENDING"]
    checks.append(Check("no DEAD event", not dead, f"{len(dead)} dead", _fail_list(dead)))
    checks.append(Check("outbox drained", not pending, f"{len(pending)} pending", _fail_list(pending)))

    # -- 5. Kafka holds every event, intact, keyed, in per-aggregate order ------------------------
    first_seen: dict[str, TopicMessage] = {}
    malformed = []
    for m in messages:
        v = m.value
        if not isinstance(v, dict) or "id" not in v:
            malformed.append((m.partition, m.offset, (m.raw or b"")[:80]))
            continue
        if v["id"] not in first_seen:
            first_seen[v["id"]] = m
    redeliveries = sum(1 for m in messages if isinstance(m.value, dict)) - len(first_seen)
    figures["kafka_distinct_events"] = len(first_seen)
    figures["kafka_redeliveries"] = redeliveries
    bad = []
    for e in outbox:
        eid = str(e["event_id"])
        m = first_seen.get(eid)
        if m is None:
            if e["status"] == "PUBLISHED":
                bad.append(("PUBLISHED but not on Kafka", e["id"], e["event_type"]))
            continue
        if m.value != e["payload"]:
            bad.append(("value differs from the outbox payload", e["id"]))
        if m.key != str(e["aggregate_id"]):
            bad.append(("key is not the aggregate id", e["id"], m.key))
        v = m.value
        if not (v.get("specversion") == "1.0" and v.get("source") == "billing"
                and v.get("subject") == f"{e['aggregate_type']}/{e['aggregate_id']}"
                and v.get("datacontenttype") == "application/json"
                and isinstance(v.get("time"), str) and UTC_RE.match(v["time"])):
            bad.append(("not the CloudEvents envelope of docs/sql-api.md", e["id"], v))
    outbox_ids = {str(e["event_id"]) for e in outbox}
    strangers = [eid for eid in first_seen if eid not in outbox_ids]
    checks.append(Check(
        "every outbox event on Kafka, intact and keyed by its aggregate",
        not bad and not malformed and not strangers,
        f"{len(outbox)} outbox events, {len(first_seen)} distinct on Kafka ({redeliveries} redeliveries); "
        f"{len(bad)} problems, {len(malformed)} malformed, {len(strangers)} unknown ids",
        _fail_list(bad) + _fail_list(malformed) + _fail_list(strangers)))

    # Every event, as written and as read from Kafka, matches its schema in docs/events.
    from billing.events.schemas import catalogue
    n_checked, schema_bad = catalogue().check_all(
        [e["payload"] for e in outbox] + [m.value for m in messages if isinstance(m.value, dict)])
    checks.append(Check("every event matches its schema (docs/events)", not schema_bad,
                        f"{n_checked} envelopes validated", schema_bad))

    # Per aggregate, the first delivery of each event follows the outbox (commit) order.
    order_bad = []
    by_aggregate: dict[tuple, list[dict]] = defaultdict(list)
    for e in outbox:
        by_aggregate[(e["aggregate_type"], e["aggregate_id"])].append(e)
    for agg, evs in by_aggregate.items():
        seen = [first_seen.get(str(e["event_id"])) for e in evs]
        seen = [(m.partition, m.offset, e["id"]) for m, e in zip(seen, evs) if m is not None]
        if len({p for p, _, _ in seen}) > 1:
            order_bad.append((agg, "events of one aggregate on several partitions"))
            continue
        offsets = [o for _, o, _ in seen]
        if offsets != sorted(offsets):
            order_bad.append((agg, "out of commit order", [i for _, _, i in seen]))
    checks.append(Check(
        "events of one aggregate reach Kafka in commit order", not order_bad,
        f"{len(by_aggregate)} aggregates; {len(order_bad)} out of order", _fail_list(order_bad)))

    # -- 6. every PAID invoice announced once, every cancellation announced once ---------------
    on_kafka: dict[tuple[str, str], set[str]] = defaultdict(set)
    for eid, m in first_seen.items():
        on_kafka[(m.value.get("type"), m.value.get("subject"))].add(eid)
    bad = []
    for inv in invoices.values():
        n = len(on_kafka.get(("InvoicePaid", f"invoice/{inv['id']}"), ()))
        if inv["status"] == "PAID" and n != 1:
            bad.append(("PAID invoice announced", n, "times", inv["id"]))
        if inv["status"] != "PAID" and n:
            bad.append(("InvoicePaid for an invoice not PAID", inv["id"], inv["status"]))
    checks.append(Check(
        "every PAID invoice announced exactly once on Kafka (InvoicePaid, invoice/<id>)", not bad,
        f"{by_status.get('PAID', 0)} PAID invoices; {len(bad)} problems", _fail_list(bad)))
    bad = []
    for sub in subs.values():
        n = len(on_kafka.get(("SubscriptionCanceled", f"subscription/{sub['id']}"), ()))
        if sub["status"] == "CANCELED" and n != 1:
            bad.append(("canceled subscription announced", n, "times", sub["id"], sub["cancel_reason"]))
        if sub["status"] != "CANCELED" and n:
            bad.append(("SubscriptionCanceled for a live subscription", sub["id"]))
    dunning = sum(1 for s in subs.values() if s["cancel_reason"] == "DUNNING_EXHAUSTED")
    checks.append(Check(
        "every cancellation announced exactly once (SubscriptionCanceled, subscription/<id>)", not bad,
        f"{sum(s['status'] == 'CANCELED' for s in subs.values())} canceled ({dunning} by dunning); "
        f"{len(bad)} problems", _fail_list(bad)))

    # Each decline counted once: InvoicePaymentFailed events = attempt_count = the DECLINED
    # attempts, except declines that arrived after the invoice was closed (voided by a
    # cancellation, or paid), which change nothing.
    declined_attempts: dict[int, list[dict]] = defaultdict(list)
    for a in attempts:
        if a["outcome"] == "DECLINED":
            declined_attempts[a["invoice_id"]].append(a)
    bad = []
    for inv in invoices.values():
        n_events = len(on_kafka.get(("InvoicePaymentFailed", f"invoice/{inv['id']}"), ()))
        decl = declined_attempts.get(inv["id"], [])
        closed_at = inv["closed_at"] or inv["paid_at"]
        late = [a for a in decl if closed_at is not None and a["result_at"] >= closed_at
                and inv["status"] in ("VOID", "PAID")]
        if not (n_events == inv["attempt_count"] == len(decl) - len(late)):
            bad.append((inv["id"], inv["status"], "events", n_events, "declined attempts", len(decl),
                        "of which after closing", len(late), "attempt_count", inv["attempt_count"]))
    refunds = [(m.value.get("subject")) for m in first_seen.values() if m.value.get("type") == "RefundDue"]
    for subject in refunds:
        inv = invoices.get(int(subject.split("/")[1]))
        closed = inv is not None and inv["status"] in ("VOID", "FAILED")
        paid_on_canceled = (inv is not None and inv["status"] == "PAID"
                            and subs[inv["subscription_id"]]["status"] == "CANCELED")
        if not (closed or paid_on_canceled):
            bad.append(("RefundDue for an invoice neither closed nor PAID on a canceled subscription", subject))
    figures["refunds_due"] = len(refunds)
    checks.append(Check(
        "each decline counted once (InvoicePaymentFailed = DECLINED attempts = attempt_count)", not bad,
        f"{sum(map(len, declined_attempts.values()))} declines; {len(bad)} mismatches", _fail_list(bad)))

    # -- 7. state is consistent after the drain --------------------------------------------------
    bad = []
    for a in attempts:
        m = KEY_RE.match(a["idempotency_key"])
        if not m or int(m.group(1)) != a["invoice_id"] or int(m.group(2)) != a["attempt_number"]:
            bad.append(("attempt key form", a["idempotency_key"]))
    unpaid_by_sub = defaultdict(list)
    # An earlier period's invoice whose dunning ran out while the current period is paid is written
    # off (InvoiceWrittenOff) and its subscription left alone (docs/money.md, issue 26 #9).
    written_off = {e["aggregate_id"] for e in outbox if e["event_type"] == "InvoiceWrittenOff"}
    for inv in invoices.values():
        # A FAILED upgrade (PRORATION) was reverted: nothing is owed for it (docs/money.md).
        if inv["status"] == "OPEN" or (inv["status"] == "FAILED" and inv["kind"] != "PRORATION"
                                       and inv["id"] not in written_off):
            unpaid_by_sub[inv["subscription_id"]].append((inv["id"], inv["status"]))
    for sub in subs.values():
        if sub["status"] == "ACTIVE" and unpaid_by_sub.get(sub["id"]):
            bad.append(("ACTIVE with unpaid invoices", sub["id"], unpaid_by_sub[sub["id"]]))
        if sub["status"] == "PAST_DUE" and not unpaid_by_sub.get(sub["id"]):
            bad.append(("PAST_DUE with nothing unpaid", sub["id"]))
    for inv in invoices.values():
        if (inv["status"] == "FAILED" and inv["kind"] != "PRORATION" and inv["id"] not in written_off
                and subs[inv["subscription_id"]]["status"] != "CANCELED"):
            bad.append(("FAILED invoice on a live subscription", inv["id"]))
        if inv["status"] == "OPEN" and subs[inv["subscription_id"]]["status"] == "CANCELED":
            bad.append(("OPEN invoice on a canceled subscription", inv["id"]))
    sums = defaultdict(int)
    for ce in credit_entries:
        sums[(ce["customer_id"], ce["currency"])] += ce["amount"]
    for b in balances:
        if sums.get((b["customer_id"], b["currency"]), 0) != b["balance"]:
            bad.append(("credit balance != sum of entries", b["customer_id"], b["balance"],
                        sums.get((b["customer_id"], b["currency"]))))
    checks.append(Check("subscription, invoice, attempt and credit state consistent", not bad,
                        f"{len(bad)} inconsistencies", _fail_list(bad)))

    # -- 8. idempotent creation through the API --------------------------------------------------
    if created_keys is not None:
        req_by_key = {r["idempotency_key"]: r for r in requests}
        bad = []
        for key, answered in created_keys.items():
            r = req_by_key.get(key)
            if r is None or r["subscription_id"] is None:
                bad.append((key, "no subscription for a key the API acknowledged"))
            elif answered - {r["subscription_id"]}:
                bad.append((key, "API answered other ids", sorted(answered), r["subscription_id"]))
        checks.append(Check(
            "each Idempotency-Key made exactly one subscription, replays answered the same one", not bad,
            f"{len(created_keys)} keys created through the API; {len(bad)} problems", _fail_list(bad)))

    # -- 9. the gateway never saw a call over its limit -----------------------------------------
    limited = ledger.get("rateLimited")
    checks.append(Check(
        "no call over the gateway's limit", limited == 0,
        f"simulator answered 429 {limited} times" + (f" (limit {gateway_rate}/s)" if gateway_rate else "")))

    # -- 10. money: collected minus refunded is the PAID invoices' cash; no refund executed twice --
    from billing.checks import money_balances

    # A PAID invoice's cash is what the charge that paid it collected (its amount, or less once a
    # cancellation cut it; one paid by credit brought none) less what went back (as the demo counts).
    paid_cash: dict[str, int] = defaultdict(int)
    attempt_amount = {a["id"]: a["amount"] for a in attempts}
    for inv in invoices.values():
        if inv["status"] == "PAID":
            paid_cash[inv["currency"].strip()] += attempt_amount.get(inv["paid_attempt_id"], 0) - inv["amount_refunded"]
    checks.append(money_balances(ledger, dict(paid_cash), refund_rows))
    over = defaultdict(int)
    for r in refund_rows:
        if r["status"] != "FAILED":
            over[r["attempt_id"]] += r["amount"]
    beyond = [(a["id"], over[a["id"]], a["amount"]) for a in attempts if over.get(a["id"], 0) > a["amount"]]
    checks.append(Check("no charge refunded beyond what it collected (database)", not beyond,
                        f"{len(refund_rows)} refunds over {len(over)} charges; {len(beyond)} beyond", _fail_list(beyond)))

    # -- 11. webhooks stored once each, about real keys ------------------------------------------
    bad = [w["event_id"] for w in webhooks if w["idempotency_key"] not in attempt_by_key]
    checks.append(Check("every stored webhook is about a key the engine sent", not bad,
                        f"{len(webhooks)} webhooks stored; {len(bad)} about unknown keys", _fail_list(bad)))
    return checks, figures
