"""One wipe for the tests that reset a world between examples (the model, the money adversary).

A hand-kept list of tables went stale the day the ledger added `billing.service_line`: the model's
reset left the previous example's lines behind, and with identities restarted, subscription 1 of the
next example inherited the lines of the one before (wrong prorations, a flaky data generation).
The list is therefore read from the catalogue: every table of schema `billing` that holds a
`customer_id` column, plus the ones each caller names (customers themselves, coupons, plans).
"""
from __future__ import annotations


def customer_tables(conn, *extra: str) -> str:
    rows = conn.execute(
        "SELECT format('%I.%I', n.nspname, c.relname) FROM pg_class c"
        " JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = 'billing' AND c.relkind IN ('r', 'p') AND NOT c.relispartition"
        "   AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'customer_id'"
        "               AND NOT a.attisdropped)"
        " ORDER BY 1").fetchall()
    names = [r[0] if isinstance(r, tuple) else next(iter(r.values())) for r in rows]
    return ", ".join(sorted(set(names) | set(extra)))


def wipe(conn, *extra: str) -> None:
    """Empties the customers' world in one transaction, identities restarted, triggers off."""
    tables = customer_tables(conn, *extra)
    with conn.transaction():
        conn.execute("SET LOCAL session_replication_role = replica")
        conn.execute(f"TRUNCATE {tables} RESTART IDENTITY CASCADE")
