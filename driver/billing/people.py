"""What a reader without `customers:read` (or `admin`) sees of a customer's personal data in the
documents and payment methods that other scopes may read (docs/security.md, "Personal data"): ids
only. One home for every door: the HTTP API's invoice document (JSON, HTML, PDF) and payment
methods, the console's invoice documents and customer page. Allow-lists: a field added to the
bill-to or to a payment method stays hidden from such a reader until it is named here."""

from __future__ import annotations

# The bill-to of an invoice document: its customer's id, and the tax treatment the document's tax
# lines already state (exempt, reverse charge); never a name, address, tax id or e-mail.
PUBLIC_BILL_TO_KEYS = ("customerId", "taxStatus")
# A tax entry of an invoice document (`taxes`): the tax charged, by the operator's rate (its code,
# name, rate, whether inside the price), on which base, how much; never the jurisdiction it was computed
# for (`country`, `region`: the customer's billing address, where they live; adv11).
PUBLIC_TAX_ENTRY_KEYS = ("code", "name", "rateBp", "inclusive", "base", "amount")
# A payment method: which one, whose, from which provider, whether it is the default and usable;
# never the card (brand, last 4 digits, expiry) nor the provider's references.
PUBLIC_PAYMENT_METHOD_KEYS = ("id", "customer_id", "provider", "is_default", "status", "created_at", "updated_at")


def sees_people(scopes, customer_session: bool = False) -> bool:
    """Whether a caller with these scopes reads customers' personal data: `admin` or `customers:read`;
    a customer session reads its own customer's (the routes have already bound it to that customer)."""
    return customer_session or "admin" in scopes or "customers:read" in scopes


def document_for(doc: dict, sees: bool) -> dict:
    """The invoice document as a reader sees it: whole, or with its bill-to cut to ids and its tax
    entries to the tax charged (no jurisdiction: the customer's country and region)."""
    if sees:
        return doc
    bill_to = doc.get("billTo") or {}
    cut = {**doc, "billTo": {k: bill_to.get(k) for k in PUBLIC_BILL_TO_KEYS if k in bill_to}}
    if "taxes" not in doc:
        return cut
    taxes = doc.get("taxes") or []
    cut["taxes"] = [{k: t.get(k) for k in PUBLIC_TAX_ENTRY_KEYS if k in t} for t in taxes]
    # A change's TAX line of another address than the invoice's names it after the rate's name
    # ("Sales tax CA-QC 10%", 60_invoices' _invoice_lines): the name and rate stay.
    named = {f"{t['name']} {t['country']}{'-' + t['region'] if t.get('region') else ''} ": f"{t['name']} "
             for t in taxes if t.get("name") and t.get("country")}

    def unplaced(line: dict) -> dict:
        text = line.get("description") or ""
        for placed, plain in named.items():
            if line.get("kind") == "TAX" and text.startswith(placed):
                return {**line, "description": plain + text[len(placed):]}
        return line

    if named:
        cut["lines"] = [unplaced(x) for x in doc.get("lines") or []]
        cut["creditNotes"] = [{**n, "lines": [unplaced(x) for x in n.get("lines") or []]} if n.get("lines") else n
                              for n in doc.get("creditNotes") or []]
    return cut


def payment_method_for(row: dict, sees: bool) -> dict:
    """A payment method's row as a reader sees it: whole, or its other fields None."""
    if sees:
        return row
    return {k: (v if k in PUBLIC_PAYMENT_METHOD_KEYS else None) for k, v in row.items()}
