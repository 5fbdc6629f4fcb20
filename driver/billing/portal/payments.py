"""The portal's payment page for an invoice whose payment needs the customer's authentication
(3-D Secure; docs/customers.md): confirm the provider's payment on session, send the customer to
the provider's page, and when they come back report a success exactly as the provider's webhook
does (`billing.apply_gateway_webhook` with the attempt's key), so that whichever of the two comes
first pays the invoice and the other is a duplicate.

    action = await start(db_conn, provider, customer_id, invoice_id, return_url=..., now=now)
    # action.redirect_url: the provider's 3-D Secure page (None when nothing is left to do)
    outcome = await finish(db_conn, provider, customer_id, invoice_id, now=now)   # APPLIED, DUPLICATE, PENDING, ...
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from billing import db



@dataclass
class Action:
    invoice_id: int
    key: str
    reference: str
    amount: int
    currency: str
    redirect_url: str | None = None
    status: str | None = None


async def _action(conn, customer_id: int, invoice_id: int, now) -> Action:
    cur = await conn.execute(db.INVOICE_ACTION, {"customer": customer_id, "invoice": invoice_id, "now": now})
    row = await cur.fetchone()
    row = row if isinstance(row, dict) else dict(zip(("invoice_id", "idempotency_key", "payment_reference", "provider",
                                                      "amount", "currency", "action_required_until"), row))
    return Action(row["invoice_id"], row["idempotency_key"], row["payment_reference"], row["amount"],
                  row["currency"].strip())


async def start(conn, provider, customer_id: int, invoice_id: int, *, return_url: str, now) -> Action:
    """Confirm the payment on session; the provider's page to send the customer to (BL404 from the
    SQL API when the invoice is not this customer's or waits for nothing)."""
    action = await _action(conn, customer_id, invoice_id, now)
    intent = await provider.confirm_intent(action.reference, return_url=return_url,
                                           key=f"{action.key}-confirm-{int(now.timestamp())}")
    action.status = intent.get("status")
    nxt = intent.get("next_action") or {}
    action.redirect_url = (nxt.get("redirect_to_url") or {}).get("url")
    return action


async def finish(conn, provider, customer_id: int, invoice_id: int, *, now) -> str:
    """After the provider's page: the payment as the provider has it; a success is applied with the
    attempt's key (APPLIED, or DUPLICATE when the webhook came first). PENDING otherwise."""
    action = await _action(conn, customer_id, invoice_id, now)
    intent = await provider.retrieve_intent(action.reference)
    if intent.get("status") != "succeeded":
        return "PENDING"
    detail = {"amount": intent.get("amount"), "currency": str(intent.get("currency") or "").upper(),
              "customerId": customer_id}
    cur = await conn.execute(db.APPLY_PORTAL_PAYMENT, {"event": f"portal-{action.reference}", "key": action.key,
                                     "reference": action.reference, "now": now, "detail": json.dumps(detail)})
    row = await cur.fetchone()
    return row["outcome"] if isinstance(row, dict) else row[0]
