"""/console/login and /console/logout: a session opened with an API key of the admin or
subscriptions:read scope, through the HTTP API's own key check (docs/console.md)."""

from __future__ import annotations

import secrets

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from billing import db, signing
from billing.api_keys import hash_key, key_id_of, looks_like_key
from billing.console.web import COOKIE, LOGIN_COOKIE, Console, Refused, back, safe_next, token_hash, wall
from billing.limiter.abuse import report_failure


def routes(console: Console) -> list[BaseRoute]:
    database = console.database

    @console.handler(public=True)
    async def login_form(request: Request, session) -> Response:
        if session is not None:
            return RedirectResponse("/console/", status_code=303)
        nonce = secrets.token_urlsafe(24)
        response = console.page(request, "login.html", None, login_csrf=nonce,
                                next=safe_next(request.query_params.get("next")))
        response.set_cookie(LOGIN_COOKIE, nonce, max_age=3600, path="/console", httponly=True, samesite="strict",
                            secure=console.secure(request))
        return response

    @console.handler(public=True)
    async def login(request: Request, session) -> Response:
        if not console.same_origin(request):
            raise Refused(403, "this form was sent from another site")
        form = await console.read_form(request)
        expected = request.cookies.get(LOGIN_COOKIE, "")
        if not expected or not signing.same(form.get("csrf", ""), expected):
            raise Refused(403, "the login form's CSRF token is missing or wrong: reload the page")
        key = form.get("key", "").strip()
        address = request.client.host if request.client else "-"
        if console.failures.blocked_for(address) > 0:  # too many failures: not even looked up
            report_failure("throttled", address=address, route="/console/login", key_id=key_id_of(key) or None)
            return back("/console/login", error="login_throttled")
        found = await database.authenticate(hash_key(key)) if looks_like_key(key) else None
        if found is None:
            # logged (never the key), counted, backed off per address; a real key id with a wrong
            # secret is audited (issue 27, finding 7)
            report_failure("unknown" if looks_like_key(key) else "malformed", address=address,
                           route="/console/login", key_id=key_id_of(key) or None)
            console.failures.failed(address)
            if looks_like_key(key):
                await database.record_failure(key_id_of(key), address, "/console/login")
            return back("/console/login", error="login_unknown_key")
        scopes = found.scopes
        if "admin" not in scopes and "subscriptions:read" not in scopes:
            return back("/console/login", error="login_scope")
        token = secrets.token_urlsafe(32)
        await database.mutate("console-login", db.CONSOLE_OPEN_SESSION, {
            "hash": token_hash(token), "key_hash": hash_key(key), "ttl": console.ttl, "now": wall()})
        response = RedirectResponse(safe_next(form.get("next")), status_code=303)
        response.set_cookie(COOKIE, token, max_age=int(console.ttl.total_seconds()), path="/console", httponly=True,
                            samesite="strict", secure=console.secure(request))
        response.delete_cookie(LOGIN_COOKIE, path="/console")
        return response

    @console.handler
    async def logout(request: Request, session) -> Response:
        await console.guarded_form(request, session)
        await database.mutate(console.actor(session), db.CONSOLE_CLOSE_SESSION, {
            "hash": token_hash(session["token"]), "now": wall()})
        response = RedirectResponse("/console/login", status_code=303)
        response.delete_cookie(COOKIE, path="/console")
        return response

    return [
        Route("/login", login_form, methods=["GET"]),
        Route("/login", login, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
    ]
