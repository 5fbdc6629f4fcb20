"""The operator console: server-rendered pages under /console of `billing serve` (docs/console.md).

* Login with an API key of the admin or subscriptions:read scope. The key is checked by the HTTP
  API's own check (billing.authenticate_api_key through `Database.authenticate`), then a session
  is opened in the database (billing.console_open_session): the browser holds a random token in a
  cookie (HttpOnly, SameSite=Strict, Path=/console, Secure over TLS), the database its SHA-256.
  Every request reads the session with its key (billing.console_session), so revoking the key or
  logging out ends it at once.
* Every POST carries a CSRF token (an HMAC of the session token: a page of another site can
  neither read it nor the cookie) and, for the login form, a double-submit token; a POST without
  a valid one is refused (403), and so is one whose Origin is another site.
* A read-scope session sees everything and may do nothing (403 on every action); an admin session
  acts through the SQL API's functions (billing.console.actions), audited with actor
  api-key:<key id>, like the HTTP API.
* Pages call one read function each (db/functions/86_console.sql); the overview's figures are
  refreshed every few seconds by htmx (vendored in static/, no CDN, no build step).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import secrets
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from urllib.parse import parse_qs, quote, urlencode, urlsplit

import psycopg
from jinja2 import Environment, FileSystemLoader, select_autoescape
from psycopg_pool import PoolTimeout
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from billing import db
from billing.invoices.documents import Issuer, render_html as render_invoice_html, render_pdf as render_invoice_pdf
from billing.api.security import hash_key, looks_like_key
from billing.clock import Clock, SystemClock
from billing.console import actions as actions_mod
from billing.console import render

log = logging.getLogger("billing.console")

HERE = Path(__file__).parent
COOKIE = "billing_console"
LOGIN_COOKIE = "billing_console_login"
MAX_FORM_BYTES = 16 * 1024
REFRESH_SECONDS = 5
PAGE = 50

# The console's SQL: one function call each (db/functions/86_console.sql).
OPEN_SESSION = "SELECT * FROM billing.console_open_session(%(hash)s, %(key_id)s, %(ttl)s::interval, %(now)s)"
READ_SESSION = "SELECT * FROM billing.console_session(%(hash)s, %(now)s)"
CLOSE_SESSION = "SELECT billing.console_close_session(%(hash)s, %(now)s) AS closed"
FUNCTIONS = "SELECT * FROM billing.console_functions(%(names)s::text[])"
OVERVIEW = "SELECT billing.console_overview(%(now)s) AS doc"
MRR = "SELECT * FROM billing.console_mrr(%(now)s, %(days)s)"
CUSTOMERS = "SELECT * FROM billing.console_customers(%(q)s, %(limit)s)"
CUSTOMER = "SELECT billing.console_customer(%(id)s, %(limit)s) AS doc"
SUBSCRIPTION = "SELECT billing.console_subscription(%(id)s) AS doc"
INVOICES = "SELECT * FROM billing.console_invoices(%(status)s, %(before)s, %(limit)s)"
EVENTS = "SELECT * FROM billing.console_events(%(subject)s, %(type)s, %(before)s, %(limit)s)"


class Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def csrf_for(token: str) -> str:
    return hmac.new(token.encode(), b"billing-console-csrf", hashlib.sha256).hexdigest()


def _wall() -> datetime:
    return datetime.now(timezone.utc)


def create_console(database, settings, *, clock: Clock | None = None, limiter=None) -> Starlette:
    """The console's ASGI app, mounted at /console by billing.api.app.create_app. `database` is the
    API's pool (billing.api.app.Database); `clock` gives p_now to the reads and actions (the wall
    clock for sessions)."""
    clock = clock or SystemClock()
    ttl = timedelta(hours=settings.console_session_hours)
    env = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape(["html"]),
                      trim_blocks=True, lstrip_blocks=True)
    env.filters.update(render.FILTERS)
    env.globals.update(refresh_seconds=REFRESH_SECONDS, htmx=render.HTMX_FILE)

    def secure(request: Request) -> bool:
        mode = settings.console_cookie_secure
        return request.url.scheme == "https" if mode == "auto" else mode == "true"

    # -- sessions ----------------------------------------------------------------------------

    async def session_of(request: Request) -> dict | None:
        token = request.cookies.get(COOKIE, "")
        if not token or len(token) > 100:
            return None
        row = await database.one(READ_SESSION, {"hash": hashlib.sha256(token.encode()).digest(), "now": _wall()})
        if row is None:
            return None
        return {"key_id": row["key_id"], "scopes": list(row["scopes"]), "can_act": "admin" in row["scopes"],
                "csrf": csrf_for(token), "token": token}

    async def check_rate(session: dict) -> None:
        if limiter is not None and await limiter.check(session["key_id"]) > 0:
            raise Refused(429, "too many requests for this API key; wait a moment")

    def same_origin(request: Request) -> bool:
        origin = request.headers.get("origin")
        if origin is None:
            return True  # not a browser's cross-site form (browsers send Origin with every POST)
        host = request.headers.get("host", "")
        return urlsplit(origin).netloc == host

    async def read_form(request: Request) -> dict[str, str]:
        ctype = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if ctype != "application/x-www-form-urlencoded":
            raise Refused(415, "forms only (application/x-www-form-urlencoded)")
        declared = request.headers.get("content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > MAX_FORM_BYTES):
            raise Refused(413, "the form is too large")
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_FORM_BYTES:
                raise Refused(413, "the form is too large")
        try:
            parsed = parse_qs(body.decode("utf-8"), keep_blank_values=True, max_num_fields=50, strict_parsing=False)
        except (UnicodeDecodeError, ValueError):
            raise Refused(400, "the form could not be read") from None
        return {k: v[0] for k, v in parsed.items()}

    async def guarded_form(request: Request, session: dict) -> dict[str, str]:
        """The form of a POST from a logged-in page: same origin and a valid CSRF token."""
        if not same_origin(request):
            raise Refused(403, "this form was sent from another site")
        form = await read_form(request)
        sent = form.get("csrf", "") or request.headers.get("x-csrf-token", "")
        if not sent or not hmac.compare_digest(sent, session["csrf"]):
            raise Refused(403, "the form's CSRF token is missing or wrong: reload the page and try again")
        return form

    # -- rendering ---------------------------------------------------------------------------

    def page(request: Request, template: str, session: dict | None, code: int = 200, **context) -> HTMLResponse:
        html = env.get_template(template).render(
            request=request, session=session, base="/console", now=clock.now(),
            message=request.query_params.get("ok", "")[:300], error=request.query_params.get("error", "")[:300],
            **context)
        return HTMLResponse(html, status_code=code, headers=SECURITY_HEADERS)

    def back(to: str, **query) -> RedirectResponse:
        sep = "&" if "?" in to else "?"
        return RedirectResponse(to + (sep + urlencode(query) if query else ""), status_code=303)

    def handler(fn):
        async def endpoint(request: Request) -> Response:
            try:
                session = await session_of(request)
                if session is None and fn.__name__ not in ("login_form", "login"):
                    if request.method == "GET" and "hx-request" not in request.headers:
                        return RedirectResponse(f"/console/login?next={quote(request.url.path)}", status_code=303)
                    raise Refused(401, "log in first")
                if session is not None:
                    await check_rate(session)
                return await fn(request, session)
            except Refused as exc:
                return page(request, "error.html", None if exc.status == 401 else locals().get("session"),
                            code=exc.status, problem=exc.message)
            except (psycopg.OperationalError, PoolTimeout):
                log.warning("console: database unavailable")
                return page(request, "error.html", None, code=503, problem="the database is not reachable; retry")
            except psycopg.Error as exc:
                err = db.contract_error(exc)
                if err is not None:
                    status = {"BL404": 404, "BL409": 409}.get(err.code, 422)
                    return page(request, "error.html", locals().get("session"), code=status, problem=err.message)
                log.exception("console: unexpected database error")
                return page(request, "error.html", None, code=500, problem="unexpected database error")
            except Exception:  # noqa: BLE001 - a page, not a stack trace
                log.exception("console: unexpected error")
                return page(request, "error.html", None, code=500, problem="unexpected error")

        endpoint.__name__ = fn.__name__
        return endpoint

    async def signatures() -> dict[str, actions_mod.Signature]:
        rows = await database.all(FUNCTIONS, {"names": actions_mod.CANDIDATE_FUNCTIONS})
        return actions_mod.available(rows)

    def forms_for(sigs, target: str, status: str | None) -> list[dict]:
        return [{"action": a, "fields": s.fields(a), "nonce": uuid.uuid4().hex}
                for a, s in actions_mod.offered(sigs, target, status)]

    # -- login -------------------------------------------------------------------------------

    @handler
    async def login_form(request: Request, session) -> Response:
        if session is not None:
            return RedirectResponse("/console/", status_code=303)
        nonce = secrets.token_urlsafe(24)
        response = page(request, "login.html", None, login_csrf=nonce, next=_safe_next(request.query_params.get("next")))
        response.set_cookie(LOGIN_COOKIE, nonce, max_age=3600, path="/console", httponly=True, samesite="strict",
                            secure=secure(request))
        return response

    @handler
    async def login(request: Request, session) -> Response:
        if not same_origin(request):
            raise Refused(403, "this form was sent from another site")
        form = await read_form(request)
        expected = request.cookies.get(LOGIN_COOKIE, "")
        if not expected or not hmac.compare_digest(form.get("csrf", ""), expected):
            raise Refused(403, "the login form's CSRF token is missing or wrong: reload the page")
        key = form.get("key", "").strip()
        found = await database.authenticate(hash_key(key)) if looks_like_key(key) else None
        if found is None:
            return back("/console/login", error="unknown or revoked API key")
        key_id, scopes = found
        if "admin" not in scopes and "subscriptions:read" not in scopes:
            return back("/console/login", error="this key has neither the admin nor the subscriptions:read scope")
        token = secrets.token_urlsafe(32)
        await database.mutate(f"api-key:{key_id}", OPEN_SESSION, {
            "hash": hashlib.sha256(token.encode()).digest(), "key_id": key_id, "ttl": ttl, "now": _wall()})
        response = RedirectResponse(_safe_next(form.get("next")), status_code=303)
        response.set_cookie(COOKIE, token, max_age=int(ttl.total_seconds()), path="/console", httponly=True,
                            samesite="strict", secure=secure(request))
        response.delete_cookie(LOGIN_COOKIE, path="/console")
        return response

    @handler
    async def logout(request: Request, session) -> Response:
        await guarded_form(request, session)
        await database.mutate(f"api-key:{session['key_id']}", CLOSE_SESSION, {
            "hash": hashlib.sha256(session["token"].encode()).digest(), "now": _wall()})
        response = RedirectResponse("/console/login", status_code=303)
        response.delete_cookie(COOKIE, path="/console")
        return response

    # -- pages -------------------------------------------------------------------------------

    async def overview_context() -> dict:
        now = clock.now()
        doc = (await database.one(OVERVIEW, {"now": now}))["doc"]
        mrr = await database.all(MRR, {"now": now, "days": 30})
        return {"o": doc, "mrr": render.mrr_series(mrr), "gateway_rate": settings.gateway_rate,
                "funnel_svg": render.funnel_svg(doc["dunning"])}

    @handler
    async def overview(request: Request, session) -> Response:
        return page(request, "overview.html", session, **await overview_context())

    @handler
    async def overview_figures(request: Request, session) -> Response:
        return page(request, "_overview_figures.html", session, **await overview_context())

    @handler
    async def customers(request: Request, session) -> Response:
        q = request.query_params.get("q", "")[:200]
        rows = await database.all(CUSTOMERS, {"q": q, "limit": PAGE})
        columns = sorted({k for r in rows for k in r["customer"]} - {"id", "timezone", "created_at", "updated_at"})
        return page(request, "customers.html", session, q=q, rows=rows, extra_columns=columns)

    @handler
    async def customer(request: Request, session) -> Response:
        doc = (await database.one(CUSTOMER, {"id": _path_id(request), "limit": 200}))["doc"]
        sigs = await signatures()
        for inv in doc["invoices"]:
            inv["forms"] = forms_for(sigs, "invoice", inv["status"])
        return page(request, "customer.html", session, c=doc)

    @handler
    async def subscription(request: Request, session) -> Response:
        doc = (await database.one(SUBSCRIPTION, {"id": _path_id(request)}))["doc"]
        sigs = await signatures()
        sub = doc["subscription"]
        forms = forms_for(sigs, "subscription", sub["status"])
        # A pending cancellation is undone, not asked again; a subscription that ends at its
        # period end is not paused (pause_subscription refuses it).
        hidden = {"cancel-at-period-end", "pause"} if sub["cancel_at_period_end"] else {"uncancel"}
        forms = [f for f in forms if f["action"].name not in hidden]
        for inv in doc["invoices"]:
            inv["forms"] = forms_for(sigs, "invoice", inv["status"])
        return page(request, "subscription.html", session, s=doc, forms=forms)

    @handler
    async def invoices(request: Request, session) -> Response:
        status = request.query_params.get("status", "").upper() or None
        if status not in (None, "OPEN", "PAID", "FAILED", "VOID", "REVIEW"):
            raise Refused(422, "filter by OPEN, PAID, FAILED, VOID or REVIEW")
        before = _opt_int(request.query_params.get("before"))
        rows = await database.all(INVOICES, {"status": status, "before": before, "limit": PAGE})
        sigs = await signatures()
        for inv in rows:
            inv["forms"] = forms_for(sigs, "invoice", inv["status"])
        return page(request, "invoices.html", session, rows=rows, status=status or "",
                    next_before=rows[-1]["id"] if len(rows) == PAGE else None)

    issuer = Issuer.from_settings(settings)

    @handler
    async def invoice_document(request: Request, session) -> Response:
        # /console/invoices/12.html and .pdf: the invoice document (docs/invoices.md) for a logged-in
        # operator (the API's /invoices/{id}.html needs a bearer key, which a link cannot carry).
        stem, _, suffix = request.path_params["ref"].partition(".")
        if suffix not in ("html", "pdf") or not stem.isascii() or not stem.isdigit() or len(stem) > 18:
            raise Refused(404, "an invoice document is /console/invoices/{id}.html or /console/invoices/{id}.pdf")
        row = await database.one(db.GET_INVOICE_DOCUMENT, {"invoice_id": int(stem)})
        doc = row["document"]
        if suffix == "html":
            return HTMLResponse(render_invoice_html(doc, issuer))
        pdf = await asyncio.get_running_loop().run_in_executor(None, render_invoice_pdf, doc, issuer)
        return Response(pdf, media_type="application/pdf",
                        headers={"Content-Disposition": f'inline; filename="invoice-{doc.get("number") or stem}.pdf"'})

    @handler
    async def events(request: Request, session) -> Response:
        subject = request.query_params.get("subject", "")[:100]
        type_ = request.query_params.get("type", "")[:100]
        before = _opt_int(request.query_params.get("before"))
        rows = await database.all(EVENTS, {"subject": subject or None, "type": type_ or None, "before": before,
                                           "limit": PAGE})
        sigs = await signatures()
        for e in rows:
            e["forms"] = forms_for(sigs, "event", e["status"])
        back_url = "/console/events" + ("?" + urlencode({"subject": subject, "type": type_}) if subject or type_ else "")
        return page(request, "events.html", session, rows=rows, subject=subject, type=type_, back_url=back_url,
                    next_before=rows[-1]["id"] if len(rows) == PAGE else None)

    # -- actions -----------------------------------------------------------------------------

    @handler
    async def act(request: Request, session) -> Response:
        form = await guarded_form(request, session)
        if not session["can_act"]:
            raise Refused(403, "this session may look but not act: log in with a key of the admin scope")
        action = actions_mod.BY_NAME.get(request.path_params["name"])
        if action is None:
            raise Refused(404, "no such action")
        target = form.get("id", "")
        if not target.isdigit() or len(target) > 18:
            raise Refused(422, "the form names no target")
        to = _safe_next(form.get("back"))
        sigs = await signatures()
        sig = next((sigs[f] for f in action.functions if f in sigs), None)
        if sig is None:
            raise Refused(404, f"{action.label}: the SQL API of this database has no such function")
        try:
            query, params = actions_mod.build_call(action, sig, int(target), form, clock.now(), session["key_id"])
            await database.mutate(f"api-key:{session['key_id']}", query, params)
        except actions_mod.ActionInputError as exc:
            return back(to, error=f"{action.label}: {exc}")
        except psycopg.Error as exc:
            err = db.contract_error(exc)
            if err is None and not (exc.sqlstate or "").startswith(("22", "23", "40")):
                raise
            text = err.message if err else (
                f"breaks the rule {exc.diag.constraint_name}" if exc.diag.constraint_name else
                "a concurrent change won; retry" if (exc.sqlstate or "").startswith("40") else "refused by the database")
            return back(to, error=f"{action.label} {action.target} {target}: {text}")
        return back(to, ok=f"{action.label}: done ({action.target} {target})")

    routes = [
        Route("/", overview, methods=["GET"]),
        Route("/overview/figures", overview_figures, methods=["GET"]),
        Route("/login", login_form, methods=["GET"]),
        Route("/login", login, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/customers", customers, methods=["GET"]),
        Route("/customers/{id}", customer, methods=["GET"]),
        Route("/subscriptions/{id}", subscription, methods=["GET"]),
        Route("/invoices", invoices, methods=["GET"]),
        Route("/invoices/{ref}", invoice_document, methods=["GET"]),
        Route("/events", events, methods=["GET"]),
        Route("/actions/{name}", act, methods=["POST"]),
        Mount("/static", app=StaticFiles(directory=HERE / "static"), name="static"),
    ]
    return Starlette(routes=routes)


SECURITY_HEADERS = {
    # Scripts only from this origin (the vendored htmx), nothing inline; no framing.
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                               "frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def _safe_next(value: str | None) -> str:
    """A redirect target inside the console only."""
    if value and (value == "/console" or value.startswith(("/console/", "/console?"))) and "//" not in value \
            and "\\" not in value:
        return value
    return "/console/"


def _path_id(request: Request) -> int:
    raw = request.path_params["id"]
    if not raw.isdigit() or len(raw) > 18:
        raise Refused(404, "no such id")
    return int(raw)


def _opt_int(value: str | None) -> int | None:
    return int(value) if value and value.isdigit() and len(value) <= 18 else None
