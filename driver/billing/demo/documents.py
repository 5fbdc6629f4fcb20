"""The demo's sample invoices: a few finalized invoices of the run, each kind worth seeing (exclusive
VAT with a coupon, tax included in JPY, reverse charge, a plan change, a voided and a refunded one
with their credit notes, a month of the API product's usage), written as HTML and PDF next to the report (docs/invoices.md)."""

from __future__ import annotations

import re
from pathlib import Path

import psycopg
from psycopg.rows import dict_row

from billing import db
from billing.invoices.documents import Issuer, render_html, render_pdf

SAMPLES = (  # (what it shows, its name in billing.witness_sample_invoices: db/functions/78_witness.sql)
    ("exclusive VAT and a coupon", "exclusive_vat_coupon"),
    ("tax included (JPY)", "tax_included_jpy"),
    ("reverse charge", "reverse_charge"),
    ("plan change (proration)", "proration"),
    ("refunded: a REFUND credit note", "refunded"),
    ("voided: a VOID credit note", "voided"),
    ("usage: the API product's requests of a month (graduated tiers)", "usage"),
)


def write_samples(url: str, settings, report_path: Path) -> list[dict]:
    """Renders the samples into <report>-invoices/; returns what was written (what, number, files)."""
    out_dir = report_path.parent / f"{report_path.stem}-invoices"
    out_dir.mkdir(parents=True, exist_ok=True)
    issuer = Issuer.from_settings(settings)
    written = []
    with psycopg.connect(url, autocommit=True, row_factory=dict_row) as conn:
        found = {r["sample"]: r["invoice_id"] for r in conn.execute(db.WITNESS_SAMPLE_INVOICES).fetchall()}
        for what, sample in SAMPLES:
            if sample not in found:
                continue
            doc = conn.execute(db.GET_INVOICE_DOCUMENT, {"invoice_id": found[sample]}).fetchone()["document"]
            stem = re.sub(r"[^A-Za-z0-9-]", "_", doc["number"])
            html, pdf = out_dir / f"invoice-{stem}.html", out_dir / f"invoice-{stem}.pdf"
            html.write_text(render_html(doc, issuer), encoding="utf-8")
            pdf.write_bytes(render_pdf(doc, issuer))
            written.append({"what": what, "number": doc["number"], "currency": doc["currency"],
                            "total": doc["total"], "html": str(html), "pdf": str(pdf)})
    return written
