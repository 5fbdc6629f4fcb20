"""Synthetic events for tests that write the outbox directly (relay, races, metrics): valid
InvoicePaid data (docs/events/InvoicePaid.v1.json), so that every event a test leaves behind
passes the schema check of the `db_url` fixture like the engine's own."""

from __future__ import annotations


def invoice_paid_data(invoice_id: int, *, seq: int = 0, tag: str | None = None) -> dict:
    """InvoicePaid data for `invoice_id`; `seq` travels as attemptCount, `tag` as gatewayReference."""
    return {"invoiceId": invoice_id, "subscriptionId": invoice_id, "customerId": invoice_id, "kind": "RENEWAL",
            "status": "PAID", "periodStart": "2026-01-01T00:00:00.000000Z", "periodEnd": "2026-02-01T00:00:00.000000Z",
            "subtotal": 1000, "creditApplied": 0, "amount": 1000, "currency": "USD", "attemptCount": seq,
            "paidAt": "2026-01-01T00:00:00.000000Z", "gatewayReference": tag, "quantity": 1, "discountAmount": 0,
            "couponCode": None}


def invoice_paid_data_sql(id_expr: str) -> str:
    """The same as a SQL expression of the invoice id `id_expr` (for set-based inserts)."""
    return ("jsonb_build_object('invoiceId', {i}, 'subscriptionId', {i}, 'customerId', {i}, 'kind', 'RENEWAL', "
            "'status', 'PAID', 'periodStart', '2026-01-01T00:00:00.000000Z', 'periodEnd', '2026-02-01T00:00:00.000000Z', "
            "'subtotal', 1000, 'creditApplied', 0, 'amount', 1000, 'currency', 'USD', 'attemptCount', 0, "
            "'paidAt', '2026-01-01T00:00:00.000000Z', 'gatewayReference', NULL, 'quantity', 1, 'discountAmount', 0, "
            "'couponCode', NULL)").format(i=id_expr)
