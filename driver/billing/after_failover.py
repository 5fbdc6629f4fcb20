"""After a promotion that may have lost writes: move every sequence of the engine past what the lost
primary could have issued (docs/operations.md, "Synchronous or asynchronous standby").

Sequences are replicated like the rows: a standby promoted without the primary's last seconds hands
out again the ids the lost primary had already used. An invoice id used again makes its gateway key
(`<namespace>-inv-<id>-try-<n>`) name a charge of the lost invoice: the gateway refuses it (same key,
other parameters) and the invoice stays unpaid. Moving each sequence `margin` past its value on the
new primary makes every id issued from now on new. Run it as the database owner (or a superuser)
right after the promotion, before the workers resume if the failover manager allows (Patroni's
`on_role_change` callback), with `billing db after-failover`. Harmless after a synchronous failover
(a gap in the ids); safe to run twice (a second gap).
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

from billing import db

DEFAULT_MARGIN = 1_000_000


@dataclass(frozen=True)
class Advanced:
    sequence: str
    before: int | None
    after: int


def advance_sequences(database_url: str, *, margin: int = DEFAULT_MARGIN, schema: str = "billing"
                      ) -> list[Advanced]:
    """setval(each sequence of `schema`, its last value + `margin`), in one transaction."""
    if margin < 1:
        raise ValueError("margin must be positive")
    out: list[Advanced] = []
    with psycopg.connect(database_url) as conn, conn.transaction():
        rows = conn.execute(db.SEQUENCES_OF_SCHEMA, {"schema": schema}).fetchall()
        for nsp, name, last, max_value in rows:
            target = min((last or 0) + margin, max_value)
            conn.execute(db.ADVANCE_SEQUENCE, {"schema": nsp, "name": name, "value": target})
            out.append(Advanced(f"{nsp}.{name}", last, target))
    return out
