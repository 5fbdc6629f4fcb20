"""What a reader without `customers:read` (or `admin`) sees of a customer's personal data in the
documents and payment methods that other scopes may read (docs/security.md, "Personal data"): ids
only. One home for every door: the HTTP API's invoice document (JSON, HTML, PDF) and payment
methods, the console's invoice documents and customer page. Allow-lists: a field added to the
bill-to or to a payment method stays hidden from such a reader until it is named here."""

from __future__ import annotations

# The bill-to of an invoice document: its customer's id, and the tax treatment the document's tax
# lines already state (exempt, reverse charge); never a name, address, tax id or e-mail.
PUBLIC_BILL_TO_KEYS = ("customerId", "taxStatus")
# A payment method: which one, whose, from which provider, whether it is the default and usable;
# never the card (brand, last 4 digits, expiry) nor the provider's references.
PUBLIC_PAYMENT_METHOD_KEYS = ("id", "customer_id", "provider", "is_default", "status", "created_at", "updated_at")


def sees_people(scopes, customer_session: bool = False) -> bool:
    """Whether a caller with these scopes reads customers' personal data: `admin` or `customers:read`;
    a customer session reads its own customer's (the routes have already bound it to that customer)."""
    return customer_session or "admin" in scopes or "customers:read" in scopes


def document_for(doc: dict, sees: bool) -> dict:
    """The invoice document as a reader sees it: whole, or with its bill-to cut to ids."""
    if sees:
        return doc
    bill_to = doc.get("billTo") or {}
    return {**doc, "billTo": {k: bill_to.get(k) for k in PUBLIC_BILL_TO_KEYS if k in bill_to}}


def payment_method_for(row: dict, sees: bool) -> dict:
    """A payment method's row as a reader sees it: whole, or its other fields None."""
    if sees:
        return row
    return {k: (v if k in PUBLIC_PAYMENT_METHOD_KEYS else None) for k, v in row.items()}
