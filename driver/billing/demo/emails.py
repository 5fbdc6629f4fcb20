"""The demo's emails (docs/demo.md, docs/customers.md): after the run, a sample of its customers,
one per language, get the emails the run owed them, sent by the worker's notifier to a Mailpit the
demo starts itself (scripts/services/mailpit.sh); every other customer's are marked SKIPPED (a run
of thousands of customers would otherwise send tens of thousands of PDFs). The report links to
each message on Mailpit's web page."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import psycopg
from psycopg.rows import dict_row

from billing import db

log = logging.getLogger("billing.demo")

SAMPLE_LOCALES = ("en", "pt-BR", "es", "de", "zh-CN")
SEND_SECONDS = 90.0


async def start_mailpit(repo_root: Path) -> tuple[str, str, str] | None:
    """(SMTP URL, web URL, CA file) of a Mailpit on loopback, started (installed on first use) by
    the project's script; None when it cannot be (no checkout, no Go): the demo then sends nothing."""
    script = repo_root / "scripts" / "services" / "mailpit.sh"
    if not script.exists():
        return None
    proc = await asyncio.create_subprocess_exec("bash", str(script), stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), 900)
    except asyncio.TimeoutError:
        proc.kill()
        return None
    parts = out.decode().split()
    if proc.returncode != 0 or len(parts) < 3:
        log.warning("mailpit did not start: %s", err.decode()[-300:])
        return None
    return parts[-3], parts[-2], parts[-1]


async def send_sample(settings, clock, url: str, web_url: str) -> list[dict]:
    """Send the sample's emails; the messages as Mailpit has them: subject, recipient, language, link."""
    import httpx

    from billing.worker.notifications import run_notifications

    started = time.time()
    async with await psycopg.AsyncConnection.connect(url, autocommit=True, row_factory=dict_row) as conn:
        # the yearly renewal notices of now first, so that skipping the others covers them too
        await conn.execute(db.ANNOUNCE_UPCOMING_RENEWALS, {"days": settings.renewal_notice_days, "now": clock.now()})
        cur = await conn.execute(db.DEMO_EMAIL_SAMPLE, {"n": len(SAMPLE_LOCALES)})
        ids = [r["customer_id"] for r in await cur.fetchall()]
        locales = dict(zip(ids, SAMPLE_LOCALES))
        for customer_id, locale in locales.items():
            await conn.execute(db.DEMO_EMAIL_LOCALE, {"id": customer_id, "locale": locale, "now": clock.now()})
        await conn.execute(db.DEMO_EMAIL_SKIP_OTHERS, {"ids": ids})
        stop = asyncio.Event()
        task = asyncio.create_task(run_notifications(settings, stop, clock=clock), name="demo-emails")
        deadline = time.monotonic() + SEND_SECONDS
        while time.monotonic() < deadline and not task.done():
            cur = await conn.execute(db.DEMO_EMAILS_PENDING, {"ids": ids})
            if (await cur.fetchone())["n"] == 0:
                break
            await asyncio.sleep(0.3)
        stop.set()
        await asyncio.gather(task, return_exceptions=True)
        cur = await conn.execute(db.DEMO_EMAIL_RECIPIENTS, {"ids": ids})
        recipients = {r["email"].lower(): locales[r["id"]] for r in await cur.fetchall() if r["email"]}
    async with httpx.AsyncClient(timeout=10) as client:
        r = await client.get(f"{web_url}/api/v1/messages", params={"limit": 500})
        r.raise_for_status()
        messages = r.json().get("messages") or []
    found = []
    for m in messages:
        to = ((m.get("To") or [{}])[0].get("Address") or "").lower()
        if to in recipients and _epoch(m.get("Created")) >= started - 5:
            found.append({"subject": m.get("Subject", ""), "to": to, "locale": recipients[to],
                          "url": f"{web_url}/view/{m['ID']}"})
    return sorted(found, key=lambda e: (SAMPLE_LOCALES.index(e["locale"]), e["subject"]))


def _epoch(value: str | None) -> float:
    from datetime import datetime

    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0
