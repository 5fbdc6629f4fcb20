"""PDF library choice for the invoice documents: rendering time and install weight, measured here.

    python -m bench.pdf.run             # both candidates, 50 documents each
    python -m bench.pdf.run --docs 200

Candidates, each in a throwaway virtual environment under .cache/bench-pdf/ (created with pip
when missing; jinja2 added to both, as the project has it already):
* fpdf2 (pure Python; draws billing.invoices.documents.render_pdf's layout), with DejaVu Sans
  embedded (any script) and, as fpdf2-core, with the PDF core font Helvetica (Latin-1 only);
* WeasyPrint (HTML/CSS to PDF through Debian's Pango): renders billing.invoices.documents.render_html.

Measured: the time to render one invoice (median of --docs renderings after a warm-up, in the
candidate's own interpreter), the first rendering including the import, and the install weight:
the bytes the candidate adds to a fresh virtual environment (its package and dependencies, jinja2
excluded) plus, for WeasyPrint, the Debian libraries it loads that a slim image lacks (Pango and
its closure, from dpkg's Installed-Size). Each rendering is checked with pdftotext.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import venv
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache" / "bench-pdf"
CANDIDATES = {"fpdf2": ["fpdf2"], "weasy": ["weasyprint"]}
# WeasyPrint's native closure on Debian (what `apt-get install weasyprint` would pull besides Python).
PANGO_PACKAGES = ["libpango-1.0-0", "libpangoft2-1.0-0", "libharfbuzz0b", "libfontconfig1", "libfreetype6",
                  "libfribidi0", "libthai0", "libdatrie1", "libgraphite2-3", "libglib2.0-0", "fontconfig-config",
                  "libpng16-16", "libbrotli1"]

SAMPLE = {
    "id": 42, "number": "2026-000123", "status": "PAID", "kind": "RENEWAL", "customerId": 7, "subscriptionId": 9,
    "currency": "EUR", "periodStart": "2026-03-01T00:00:00.000000Z", "periodEnd": "2026-04-01T00:00:00.000000Z",
    "issuedAt": "2026-03-01T00:05:00.000000Z", "dueAt": "2026-03-01T00:00:00.000000Z",
    "paidAt": "2026-03-01T00:07:00.000000Z", "finalizedAt": "2026-03-01T00:05:00.000000Z",
    "billTo": {"customerId": 7, "name": "Zoë Łukasiewicz GmbH", "email": "billing@zoe.example", "address": "Hauptstraße 5",
               "city": "Berlin", "postalCode": "10115", "country": "DE", "taxId": "DE123456789", "taxStatus": "TAXABLE"},
    "subtotal": 8997, "taxAmount": 1709, "taxIncluded": 0, "total": 10706, "creditApplied": 500, "amountDue": 10206,
    "amountRefunded": 0,
    "lines": [
        {"line_no": 1, "kind": "PLAN", "description": "PRO_MONTHLY (3 seats), 2026-03-01 to 2026-04-01", "quantity": 3,
         "unit_amount": 2999, "amount": 8997},
        {"line_no": 2, "kind": "TAX", "description": "VAT 19%", "amount": 1709, "tax_rate_code": "DE_VAT",
         "tax_rate_bp": 1900, "tax_inclusive": False},
        {"line_no": 3, "kind": "CREDIT", "description": "Customer credit applied", "amount": -500},
    ],
    "creditNotes": [],
}

CHILD = r"""
import json, statistics, sys, time
t0 = time.perf_counter()
from billing.invoices.documents import Issuer, render_html, render_pdf
doc = json.loads(sys.argv[3]); issuer = Issuer("Billing Engine Demo Ltd", "1 Example Street\n75001 Paris", "FR00123", None)
if sys.argv[2] == "fpdf2-core":
    import billing.invoices.documents as d, pathlib
    d.DEJAVU = pathlib.Path("/nonexistent")  # the PDF core font Helvetica: Latin-1 only
if sys.argv[2] == "weasy":
    from weasyprint import HTML
    render = lambda: HTML(string=render_html(doc, issuer)).write_pdf()
else:
    render = lambda: render_pdf(doc, issuer)
first = render(); first_s = time.perf_counter() - t0
times = []
for _ in range(int(sys.argv[4])):
    t = time.perf_counter(); out = render(); times.append(time.perf_counter() - t)
open(sys.argv[5], "wb").write(out)
print(json.dumps({"first_s": first_s, "median_ms": statistics.median(times) * 1000, "bytes": len(out)}))
"""


def ensure_venv(name: str) -> Path:
    path = CACHE / name
    if not (path / "bin" / "python").exists():
        venv.EnvBuilder(with_pip=True, clear=True).create(path)
        subprocess.run([path / "bin" / "pip", "install", "-q", *CANDIDATES[name]], check=True)
    subprocess.run([path / "bin" / "pip", "install", "-q", "jinja2"], check=True)
    return path


def site_bytes(path: Path, exclude: tuple[str, ...]) -> int:
    site = next((path / "lib").glob("python3*/site-packages"))
    total = 0
    for entry in site.iterdir():
        low = entry.name.lower()
        if low.startswith(exclude):
            continue
        files = [entry] if entry.is_file() else [p for p in entry.rglob("*") if p.is_file()]
        total += sum(p.stat().st_size for p in files)
    return total


def dpkg_bytes(packages: list[str]) -> int:
    out = subprocess.run(["dpkg-query", "-W", "-f=${Installed-Size}\n", *packages], capture_output=True, text=True)
    return sum(int(x) * 1024 for x in out.stdout.split() if x.isdigit())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=50)
    args = ap.parse_args()
    CACHE.mkdir(parents=True, exist_ok=True)
    base = ("pip", "setuptools", "_distutils_hack", "distutils-precedence", "jinja2", "markupsafe", "__pycache__", "pkg_resources")
    results = {}
    for name in ("fpdf2", "fpdf2-core", "weasy"):
        path = ensure_venv(name.split("-")[0])
        out_pdf = CACHE / f"{name}.pdf"
        # The candidate's own venv, `billing` from this checkout's driver/ (PYTHONPATH).
        run = subprocess.run([path / "bin" / "python", "-c", CHILD, str(REPO / "driver"), name, json.dumps(SAMPLE),
                              str(args.docs), str(out_pdf)], capture_output=True, text=True, check=True,
                             env={**os.environ, "PYTHONPATH": str(REPO / "driver")})
        r = json.loads(run.stdout.strip().splitlines()[-1])
        r["python_mb"] = site_bytes(path, base) / 1e6
        r["native_mb"] = dpkg_bytes(PANGO_PACKAGES) / 1e6 if name == "weasy" else 0.0
        text = subprocess.run(["pdftotext", "-layout", str(out_pdf), "-"], capture_output=True, text=True).stdout
        r["pdftotext_ok"] = all(s in text for s in ("2026-000123", "VAT 19%", "102.06 EUR"))
        results[name] = r
    print(f"{'candidate':<10} {'render ms (median)':>19} {'first incl. import s':>21} {'PDF bytes':>10} "
          f"{'Python MB':>10} {'Debian libs MB':>15} {'pdftotext':>10}")
    for name, r in results.items():
        print(f"{name:<10} {r['median_ms']:>19.1f} {r['first_s']:>21.2f} {r['bytes']:>10} {r['python_mb']:>10.1f} "
              f"{r['native_mb']:>15.1f} {'ok' if r['pdftotext_ok'] else 'MISSING':>10}")


if __name__ == "__main__":
    sys.exit(main())
