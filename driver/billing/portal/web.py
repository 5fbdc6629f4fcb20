"""What every page and action of the customer portal shares (`Portal`): its session cookie, its
forms and their CSRF checks, the customer's language, and the `handler` that turns a failure into
an error page (docs/customers.md, "The portal").

Who may call what: a page or action needs a session cookie (`billing_portal`, HttpOnly,
SameSite=Strict, Path=/portal, Secure over TLS) that only a single-use portal link opens
(`billing.portal_open_session`); the session names ONE customer, and every SQL call passes that
customer's id (db/functions/37_portal.sql), so another customer's ids are "not found". Every POST
is same-origin and carries the session's CSRF token (an HMAC of the cookie token)."""

from __future__ import annotations

import logging
import re
import secrets
from datetime import timedelta
from urllib.parse import urlencode

import psycopg
from jinja2 import Environment, PackageLoader, select_autoescape
from psycopg_pool import PoolTimeout
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from billing import db, signing, web_forms
from billing.clock import Clock
from billing.invoices.documents import Issuer
from billing.limiter.abuse import FailureThrottle
from billing.notifications.i18n import LOCALES, Translator

log = logging.getLogger("billing.portal")

COOKIE = "billing_portal"
LOGIN_COOKIE = "billing_portal_login"
MAX_FORM_BYTES = 8 * 1024
_SESSION = re.compile(r"^ps_([1-9][0-9]{0,17})_([A-Za-z0-9_-]{43})$")
_NEXT = re.compile(r"^/[A-Za-z0-9/_-]{0,199}$")
SECURITY_HEADERS = {
    # No script at all; no framing; forms post to this origin only.
    "Content-Security-Policy": "default-src 'none'; style-src 'self'; img-src 'self' data:; "
                               "frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    # same-origin: the login URL's token never leaves for another site; and with no-referrer a
    # browser sends "Origin: null" on a form's POST, which the same-origin check must refuse
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
# Flash messages by code (a link shows one of these, never free text): the catalog key of each.
FLASH = {"canceled": "portal.flash.canceled", "uncanceled": "portal.flash.uncanceled",
         "plan_changed": "portal.flash.plan_changed", "plan_scheduled": "portal.flash.plan_scheduled",
         "paid": "portal.flash.paid", "pending": "portal.flash.pending", "card_added": "portal.flash.card_added",
         "card_declined": "portal.flash.card_declined"}


class Refused(Exception):
    def __init__(self, status: int, key: str) -> None:
        super().__init__(key)
        self.status = status
        self.key = key  # a catalog key: the message is in the customer's language


def new_session_token(customer_id: int) -> str:
    return f"ps_{int(customer_id)}_{secrets.token_urlsafe(32)}"


def parse_session_token(token: str | None) -> int | None:
    match = _SESSION.match(token or "")
    return int(match.group(1)) if match else None


def token_hash(token: str) -> bytes:
    return signing.token_hash(token)


def csrf_for(token: str) -> str:
    return signing.csrf_token(token, "billing-portal-csrf")


def safe_next(value: str | None) -> str:
    """A page of the portal only (a path such as /invoices), never another site."""
    if value and _NEXT.match(value) and "//" not in value:
        return "/portal" + (value if value != "/" else "/")
    return "/portal/"


def path_id(request: Request, name: str = "id") -> int:
    raw = request.path_params[name]
    if not raw.isascii() or not raw.isdigit() or len(raw) > 18:
        raise Refused(404, "portal.error.not_found")
    return int(raw)


def back(to: str, **query) -> RedirectResponse:
    return RedirectResponse(to + ("?" + urlencode(query) if query else ""), status_code=303)


def pick_locale(request: Request, fallback: str | None = None) -> str:
    """Before login: the browser's Accept-Language among the five; after: the customer's own."""
    if fallback in LOCALES:
        return fallback
    for part in request.headers.get("accept-language", "").split(","):
        tag = part.split(";", 1)[0].strip()
        for known in LOCALES:
            if tag.lower() == known.lower() or tag.split("-")[0].lower() == known.split("-")[0].lower():
                return known
    return "en"


class Portal:
    def __init__(self, database, settings, clock: Clock, provider_factory=None) -> None:
        self.database = database
        self.settings = settings
        self.clock = clock
        self.provider_factory = provider_factory  # the card provider (Stripe) for SetupIntents and 3-D Secure
        self.ttl = timedelta(minutes=settings.portal_session_minutes)
        self.issuer = Issuer.from_settings(settings)
        self.failures = FailureThrottle(free=getattr(settings, "api_auth_failures_free", 10))
        self.env = Environment(loader=PackageLoader("billing.portal", "templates"),
                               autoescape=select_autoescape(["html"]), trim_blocks=True, lstrip_blocks=True)

    def secure(self, request: Request) -> bool:
        mode = self.settings.console_cookie_secure
        return request.url.scheme == "https" if mode == "auto" else mode == "true"

    # -- sessions -----------------------------------------------------------------------------

    async def session_of(self, request: Request) -> dict | None:
        token = request.cookies.get(COOKIE, "")
        customer_id = parse_session_token(token)
        if customer_id is None:
            return None
        # The engine's clock (the wall clock in production), the one the link and the session were made at.
        row = await self.database.one(db.PORTAL_SESSION, {"customer": customer_id, "hash": token_hash(token),
                                                          "now": self.clock.now()})
        if row is None:
            return None
        return {"customer_id": row["customer_id"], "locale": row["locale"], "token": token, "csrf": csrf_for(token)}

    @staticmethod
    def actor(session: dict) -> db.Actor:
        """The audit actor: portal-session:<customer>, proven by the cookie's hash (billing._actor)."""
        name = db.Actor(f"portal-session:{session['customer_id']}")
        name.proof = f"portal:{session['customer_id']}:{token_hash(session['token']).hex()}"
        return name

    # -- forms --------------------------------------------------------------------------------

    @staticmethod
    def same_origin(request: Request) -> bool:
        return web_forms.same_origin(request)

    @staticmethod
    async def read_form(request: Request) -> dict[str, str]:
        try:
            return await web_forms.read_form(request, max_bytes=MAX_FORM_BYTES, max_fields=20)
        except web_forms.FormRefused as exc:
            raise Refused(exc.status, "portal.error.form") from None

    async def guarded_form(self, request: Request, session: dict) -> dict[str, str]:
        if not self.same_origin(request):
            raise Refused(403, "portal.error.csrf")
        form = await self.read_form(request)
        if not signing.same(form.get("csrf", ""), session["csrf"]):
            raise Refused(403, "portal.error.csrf")
        return form

    # -- rendering ----------------------------------------------------------------------------

    def page(self, request: Request, template: str, session: dict | None, code: int = 200, *,
             locale: str | None = None, **context) -> HTMLResponse:
        t = Translator.get(pick_locale(request, locale or (session or {}).get("locale")))
        flash_key = FLASH.get(request.query_params.get("ok", ""))
        html = self.env.get_template(template).render(
            t=t, session=session, brand=self.issuer.name or "Billing", message=t(flash_key) if flash_key else "",
            **context)
        return HTMLResponse(html, status_code=code, headers=SECURITY_HEADERS)

    def handler(self, fn=None, *, public: bool = False):
        """A page or action `fn(request, session)`; without a session: the "sign in by the link in
        your email" page (401), unless `public`. Every failure is a page in the customer's language."""
        if fn is None:
            return lambda f: self.handler(f, public=public)

        async def endpoint(request: Request) -> Response:
            session = None
            try:
                session = await self.session_of(request)
                if session is None and not public:
                    raise Refused(401, "portal.error.signed_out")
                return await fn(request, session)
            except Refused as exc:
                return self.page(request, "error.html", session, code=exc.status, problem=exc.key)
            except (psycopg.OperationalError, PoolTimeout):
                log.warning("portal: database unavailable")
                return self.page(request, "error.html", session, code=503, problem="portal.error.unavailable")
            except psycopg.Error as exc:
                err = db.contract_error(exc)
                if err is not None:
                    status = {"BL404": 404, "BL409": 409}.get(err.code, 422)
                    key = {404: "portal.error.not_found", 409: "portal.error.conflict"}.get(status, "portal.error.refused")
                    return self.page(request, "error.html", session, code=status, problem=key)
                log.exception("portal: unexpected database error")
                return self.page(request, "error.html", session, code=500, problem="portal.error.unexpected")
            except Exception:  # noqa: BLE001 - a page, never a stack trace
                log.exception("portal: unexpected error")
                return self.page(request, "error.html", session, code=500, problem="portal.error.unexpected")

        endpoint.__name__ = fn.__name__
        return endpoint
