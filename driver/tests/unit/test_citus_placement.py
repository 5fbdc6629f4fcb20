"""Which declared-distributed tables `billing db migrate --citus` can distribute now (billing.citus)."""

from __future__ import annotations

from billing.citus import distributable

P = [("plan", "reference", None, ""), ("customer", "distributed", "id", ""),
     ("subscription", "distributed", "customer_id", ""), ("invoice", "distributed", "customer_id", ""),
     ("outbox_event", "pending", "customer_id", "")]


def test_everything_distributed_when_nothing_pending_is_tied_to_it():
    ready, held = distributable(P, [("subscription", "customer"), ("subscription", "plan"), ("invoice", "subscription")])
    assert ready == ["customer", "subscription", "invoice"] and held == {}


def test_a_foreign_key_to_a_pending_table_holds_the_whole_chain_back():
    ready, held = distributable(P, [("subscription", "customer"), ("invoice", "subscription"),
                                    ("outbox_event", "invoice")])
    assert ready == []
    assert set(held) == {"customer", "subscription", "invoice"}
    assert "outbox_event" in held["invoice"]


def test_reference_tables_never_hold_anything_back():
    ready, held = distributable(P, [("invoice", "plan"), ("subscription", "plan")])
    assert ready == ["customer", "subscription", "invoice"] and held == {}
