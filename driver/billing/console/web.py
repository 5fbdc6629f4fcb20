"""What every page and action of the console shares (`Console`): its session, its forms and their
CSRF checks, the rendering of a page, and the `handler` that turns a failure into an error page.

`billing.console.app.create_console` builds one `Console` and hands it to each router's
`routes(console)` (billing.console.routes)."""

from __future__ import annotations

import logging
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any
from urllib.parse import quote, urlencode

import psycopg
from jinja2 import Environment, PackageLoader, select_autoescape
from psycopg_pool import PoolTimeout
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from billing import db, signing, web_forms
from billing.clock import Clock
from billing.console import actions as actions_mod
from billing.console import render
from billing.invoices.documents import Issuer

log = logging.getLogger("billing.console")

COOKIE = "billing_console"
LOGIN_COOKIE = "billing_console_login"
MAX_FORM_BYTES = 16 * 1024
_FORM_REFUSED = {415: "forms only (application/x-www-form-urlencoded)", 413: "the form is too large",
                 400: "the form could not be read"}
REFRESH_SECONDS = 5
PAGE = 50
SECURITY_HEADERS = {
    # Scripts only from this origin (the vendored htmx), nothing inline; no framing.
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                               "frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


# Flash messages by code, never by free text (issue 27, finding 9): a link can only show one of
# these, whatever its query says. `action` and `id` name the action (one of billing.console.actions)
# and its target (digits) for the action codes.
FLASH = {
    "login_unknown_key": "unknown or revoked API key",
    "login_scope": "this key has neither the admin nor the subscriptions:read scope",
    "login_throttled": "too many failed logins from this address: wait a moment",
    "action_done": "{label}: done ({target} {id})",
    "action_input": "{label}: the form's values were refused",
    "action_conflict": "{label} {target} {id}: refused: its version moved on since the page was read, or its state "
                       "does not allow it (reload the page)",
    "action_not_found": "{label} {target} {id}: no such {target}",
    "action_invalid": "{label} {target} {id}: refused by the database's rules",
    "action_retry": "{label} {target} {id}: a concurrent change won; retry",
}


def flash(request: Request, name: str) -> str:
    code = request.query_params.get(name, "")
    text = FLASH.get(code)
    if text is None:
        return ""
    action = actions_mod.BY_NAME.get(request.query_params.get("action", ""))
    target_id = request.query_params.get("id", "")
    if "{label}" in text:
        if action is None or not target_id.isdigit() or len(target_id) > 18:
            return ""
        return text.format(label=action.label, target=action.target, id=target_id)
    return text


class Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def csrf_for(token: str) -> str:
    return signing.csrf_token(token, "billing-console-csrf")


def wall() -> datetime:
    return datetime.now(timezone.utc)


def token_hash(token: str) -> bytes:
    return signing.token_hash(token)


def safe_next(value: str | None) -> str:
    """A redirect target inside the console only."""
    if value and (value == "/console" or value.startswith(("/console/", "/console?"))) and "//" not in value \
            and "\\" not in value:
        return value
    return "/console/"


def path_id(request: Request) -> int:
    raw = request.path_params["id"]
    if not raw.isdigit() or len(raw) > 18:
        raise Refused(404, "no such id")
    return int(raw)


def opt_int(value: str | None) -> int | None:
    return int(value) if value and value.isdigit() and len(value) <= 18 else None


def back(to: str, **query) -> RedirectResponse:
    sep = "&" if "?" in to else "?"
    return RedirectResponse(to + (sep + urlencode(query) if query else ""), status_code=303)


class Console:
    """The console's parts: `database` is the API's pool (billing.api.database.Database), `clock`
    gives p_now to the reads and actions (the wall clock is for sessions)."""

    def __init__(self, database, settings, clock: Clock, limiter=None) -> None:
        from billing.limiter.abuse import AddressLimiter, FailureThrottle

        self.failures = FailureThrottle(free=getattr(settings, "api_auth_failures_free", 10))
        # the expensive pages' budget per key (the overview 10, a search 5: docs/security.md)
        cost = getattr(settings, "api_cost_per_key", 20.0)
        self.costs = AddressLimiter(rate=cost, burst=max(1, int(cost * 2)))
        self.cache: dict = {}
        self.database = database
        self.settings = settings
        self.clock = clock
        self.limiter = limiter
        self.ttl = timedelta(hours=settings.console_session_hours)
        self.issuer = Issuer.from_settings(settings)
        # The templates are package data (importlib.resources through Jinja's PackageLoader).
        self.env = Environment(loader=PackageLoader("billing.console", "templates"),
                               autoescape=select_autoescape(["html"]), trim_blocks=True, lstrip_blocks=True)
        self.env.filters.update(render.FILTERS)
        self.env.globals.update(refresh_seconds=REFRESH_SECONDS, htmx=render.HTMX_FILE)

    def secure(self, request: Request) -> bool:
        mode = self.settings.console_cookie_secure
        return request.url.scheme == "https" if mode == "auto" else mode == "true"

    # -- sessions ----------------------------------------------------------------------------

    async def session_of(self, request: Request) -> dict | None:
        token = request.cookies.get(COOKIE, "")
        if not token or len(token) > 100:
            return None
        row = await self.database.one(db.CONSOLE_READ_SESSION, {"hash": token_hash(token), "now": wall()})
        if row is None:
            return None
        scopes = list(row["scopes"])
        # customers' personal data (names, emails, addresses, tax ids, events' payloads) as /v1 keeps
        # them: behind customers:read (or admin); a subscriptions:read login sees ids and external ids
        return {"key_id": row["key_id"], "scopes": scopes, "can_act": "admin" in scopes,
                "sees_people": "admin" in scopes or "customers:read" in scopes,
                "csrf": csrf_for(token), "token": token}

    async def check_rate(self, session: dict) -> None:
        if self.limiter is not None and await self.limiter.check(session["key_id"]) > 0:
            raise Refused(429, "too many requests for this API key; wait a moment")

    def spend(self, session: dict, cost: int) -> None:
        """An expensive page spends `cost` of its key's budget (issue 27, finding 2): 429 past it."""
        if self.costs.check(session["key_id"], cost) > 0:
            from billing.metrics import COST_REFUSALS

            COST_REFUSALS.labels(limit="key").inc()
            raise Refused(429, "this API key's budget for expensive pages is spent; wait a moment")

    async def cached(self, key, seconds: float, make):
        """`make()`'s answer, reused for `seconds` (wall clock); an action clears the cache."""
        import time as _time

        hit = self.cache.get(key)
        now = _time.monotonic()
        if hit is not None and hit[0] > now:
            return hit[1]
        value = await make()
        if len(self.cache) > 64:
            self.cache.clear()
        self.cache[key] = (now + seconds, value)
        return value

    @staticmethod
    def actor(session: dict):
        """The audit actor of a session's call, with the proof of its token (billing._actor)."""
        name = db.Actor(f"api-key:{session['key_id']}")
        name.proof = "console:" + token_hash(session["token"]).hex()
        return name

    # -- forms -------------------------------------------------------------------------------

    @staticmethod
    def same_origin(request: Request) -> bool:
        return web_forms.same_origin(request)

    @staticmethod
    async def read_form(request: Request) -> dict[str, str]:
        try:
            return await web_forms.read_form(request, max_bytes=MAX_FORM_BYTES, max_fields=50)
        except web_forms.FormRefused as exc:
            raise Refused(exc.status, _FORM_REFUSED[exc.status]) from None

    async def guarded_form(self, request: Request, session: dict) -> dict[str, str]:
        """The form of a POST from a logged-in page: same origin and a valid CSRF token."""
        if not self.same_origin(request):
            raise Refused(403, "this form was sent from another site")
        form = await self.read_form(request)
        sent = form.get("csrf", "") or request.headers.get("x-csrf-token", "")
        if not sent or not signing.same(sent, session["csrf"]):
            raise Refused(403, "the form's CSRF token is missing or wrong: reload the page and try again")
        return form

    # -- rendering ---------------------------------------------------------------------------

    def page(self, request: Request, template: str, session: dict | None, code: int = 200, **context) -> HTMLResponse:
        html = self.env.get_template(template).render(
            request=request, session=session, base="/console", now=self.clock.now(),
            message=flash(request, "ok"), error=flash(request, "error"),
            **context)
        return HTMLResponse(html, status_code=code, headers=SECURITY_HEADERS)

    def handler(self, fn=None, *, public: bool = False):
        """A page or action `fn(request, session)`: without a session it is sent to the login page
        (or refused, 401) unless `public`; the session's key is rate limited; every failure is an
        error page, never a stack trace."""
        if fn is None:
            return lambda f: self.handler(f, public=public)

        async def endpoint(request: Request) -> Response:
            session = None
            try:
                session = await self.session_of(request)
                if session is None and not public:
                    if request.method == "GET" and "hx-request" not in request.headers:
                        return RedirectResponse(f"/console/login?next={quote(request.url.path)}", status_code=303)
                    raise Refused(401, "log in first")
                if session is not None:
                    await self.check_rate(session)
                return await fn(request, session)
            except Refused as exc:
                response = self.page(request, "error.html", None if exc.status == 401 else session,
                                     code=exc.status, problem=exc.message)
                if exc.status == 429:
                    response.headers["Retry-After"] = "2"
                return response
            except (psycopg.OperationalError, PoolTimeout):
                log.warning("console: database unavailable")
                return self.page(request, "error.html", None, code=503, problem="the database is not reachable; retry")
            except psycopg.Error as exc:
                err = db.contract_error(exc)
                if err is not None:
                    status = {"BL404": 404, "BL409": 409}.get(err.code, 422)
                    return self.page(request, "error.html", session, code=status, problem=err.message)
                log.exception("console: unexpected database error")
                return self.page(request, "error.html", None, code=500, problem="unexpected database error")
            except Exception:  # noqa: BLE001 - a page, not a stack trace
                log.exception("console: unexpected error")
                return self.page(request, "error.html", None, code=500, problem="unexpected error")

        endpoint.__name__ = fn.__name__
        return endpoint

    # -- the actions a page offers -----------------------------------------------------------

    async def signatures(self) -> dict[str, actions_mod.Signature]:
        rows = await self.database.all(db.CONSOLE_FUNCTIONS, {"names": actions_mod.CANDIDATE_FUNCTIONS})
        return actions_mod.available(rows)

    @staticmethod
    def forms_for(sigs, target: str, status: str | None) -> list[dict[str, Any]]:
        return [{"action": a, "fields": s.fields(a), "nonce": uuid.uuid4().hex}
                for a, s in actions_mod.offered(sigs, target, status)]
