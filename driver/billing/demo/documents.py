"""The demo's sample invoices: a few finalized invoices of the run, each kind worth seeing (exclusive
VAT with a coupon, tax included in JPY, reverse charge, a plan change, a voided and a refunded one
with their credit notes), written as HTML and PDF next to the report (docs/invoices.md)."""

from __future__ import annotations

import re
from pathlib import Path

import psycopg
from psycopg.rows import dict_row

from billing import db
from billing.invoices.documents import Issuer, render_html, render_pdf

SAMPLES = (  # (what it shows, the condition on billing.invoice i)
    ("exclusive VAT and a coupon", "i.tax_amount > 0 AND i.discount_amount > 0 AND i.status = 'PAID'"),
    ("tax included (JPY)", "i.tax_included > 0 AND i.currency = 'JPY'"),
    ("reverse charge", "i.tax_detail->>'treatment' = 'REVERSE_CHARGE' AND i.status = 'PAID'"),
    ("plan change (proration)", "i.kind = 'PRORATION' AND i.tax_amount > 0"),
    ("refunded: a REFUND credit note", "EXISTS (SELECT 1 FROM billing.credit_note n WHERE n.invoice_id = i.id AND n.reason = 'REFUND')"),
    ("voided: a VOID credit note", "EXISTS (SELECT 1 FROM billing.credit_note n WHERE n.invoice_id = i.id AND n.reason = 'VOID')"),
)


def write_samples(url: str, settings, report_path: Path) -> list[dict]:
    """Renders the samples into <report>-invoices/; returns what was written (what, number, files)."""
    out_dir = report_path.parent / f"{report_path.stem}-invoices"
    out_dir.mkdir(parents=True, exist_ok=True)
    issuer = Issuer.from_settings(settings)
    written = []
    with psycopg.connect(url, autocommit=True, row_factory=dict_row) as conn:
        for what, condition in SAMPLES:
            row = conn.execute(f"SELECT i.id FROM billing.invoice i WHERE i.number IS NOT NULL AND {condition} "
                               "ORDER BY i.id LIMIT 1").fetchone()
            if row is None:
                continue
            doc = conn.execute(db.GET_INVOICE_DOCUMENT, {"invoice_id": row["id"]}).fetchone()["document"]
            stem = re.sub(r"[^A-Za-z0-9-]", "_", doc["number"])
            html, pdf = out_dir / f"invoice-{stem}.html", out_dir / f"invoice-{stem}.pdf"
            html.write_text(render_html(doc, issuer), encoding="utf-8")
            pdf.write_bytes(render_pdf(doc, issuer))
            written.append({"what": what, "number": doc["number"], "currency": doc["currency"],
                            "total": doc["total"], "html": str(html), "pdf": str(pdf)})
    return written
