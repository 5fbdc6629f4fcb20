"""The package stands alone: a wheel built from the sources, installed into a fresh virtual
environment outside the repository, serves POST /webhook-endpoints (it checks event types against
the packaged event schemas) and an invoice PDF, with nothing of the checkout on its path.

The dependencies come from this test's own environment (a .pth line), so nothing is downloaded;
the `billing` package is the wheel's (checked)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import psycopg

from billing.config import REPO_ROOT

from .conftest import create_test_key

SCRIPT = r'''
import asyncio, json, sys
import billing, httpx
from billing.api import create_app
from billing.config import Settings

url, key, invoice_id, repo = sys.argv[1:5]
assert not billing.__file__.startswith(repo), billing.__file__

async def main():
    app = create_app(Settings(database_url=url), rate_limit=False)
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(timeout=30, transport=httpx.ASGITransport(app=app), base_url="http://wheel.test") as c:
        created = await c.post("/webhook-endpoints", headers=headers,
                               json={"url": "https://hooks.example.com/billing", "eventTypes": ["InvoicePaid"]})
        unknown = await c.post("/webhook-endpoints", headers=headers,
                               json={"url": "https://hooks.example.com/b", "eventTypes": ["NoSuchEvent"]})
        pdf = await c.get(f"/invoices/{invoice_id}.pdf", headers=headers)
        page = await c.get("/console/static/console.css")
    await app.state.database.close()
    await app.state.stripe.close()
    print(json.dumps({"file": billing.__file__, "created": created.status_code, "unknown": unknown.status_code,
                      "pdf": pdf.status_code, "pdf_type": pdf.headers.get("content-type"),
                      "pdf_magic": pdf.content[:4].decode("latin-1"), "static": page.status_code}))

asyncio.run(main())
'''


def test_a_wheel_installed_elsewhere_serves_webhook_endpoints_and_an_invoice_pdf(db_url, tmp_path):
    # The sources a wheel is built from, copied out of the checkout (the build writes its own files).
    src = tmp_path / "src"
    (src / "driver").mkdir(parents=True)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO_ROOT / name, src / name)
    shutil.copytree(REPO_ROOT / "driver" / "billing", src / "driver" / "billing",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(dist),
                    str(src)], check=True, capture_output=True, text=True, timeout=300)
    (wheel,) = dist.glob("billing-*.whl")

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", str(wheel)],
                   check=True, capture_output=True, text=True, timeout=300)
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    # The dependencies: this environment's site-packages, after the wheel's own (no editable finder runs).
    Path(site, "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SELECT billing.upsert_plan('WHEEL_M', 1500, 'EUR', 'MONTH')")
        conn.execute("SELECT billing.create_subscription('wheel-1', 8101, 'WHEEL_M', now())")
        invoice_id = conn.execute("SELECT id FROM billing.invoice WHERE customer_id = 8101").fetchone()[0]
    key = create_test_key(db_url)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "BILLING_"))}
    out = subprocess.run([str(python), "-c", SCRIPT, db_url, key, str(invoice_id), str(REPO_ROOT)], cwd=tmp_path,
                         env=env, check=True, capture_output=True, text=True, timeout=120)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["file"].startswith(str(env_dir)), got["file"]
    assert (got["created"], got["unknown"]) == (201, 422)  # the packaged schemas know InvoicePaid, not NoSuchEvent
    assert (got["pdf"], got["pdf_type"], got["pdf_magic"]) == (200, "application/pdf", "%PDF")
    assert got["static"] == 200  # the console's static files, package data too
