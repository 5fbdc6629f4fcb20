"""The portal's pages and actions (docs/customers.md, "The portal"), each for the session's
customer only:

  GET  /login?token=pl_..&next=/page   a page with one button (mail scanners that fetch links must
  POST /login                          not burn a single-use link): the link is used, a session opens
  POST /logout
  GET  /  (/invoices, /payment-methods, /subscriptions: the same page, its section first)
  GET  /invoices/{id}.html | .pdf      the invoice document in the customer's language
  POST /subscriptions/{id}/cancel | uncancel | change-plan
  GET  /invoices/{id}/pay, POST /invoices/{id}/pay, GET /invoices/{id}/pay/return   3-D Secure
  GET  /payment-methods/new, POST /payment-methods   a card through a SetupIntent (the provider)

Every action is a call of db/functions/37_portal.sql with the session's customer id and is
repeatable (the same form sent twice changes nothing more)."""

from __future__ import annotations

import asyncio
import secrets

import psycopg

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from billing import db, signing
from billing.invoices.documents import render_html, render_pdf
from billing.limiter.abuse import report_failure
from billing.notifications.links import parse_token
from billing.notifications.links import token_hash as link_hash
from billing.portal.web import (
    COOKIE, LOGIN_COOKIE, Portal, Refused, back, new_session_token, path_id, safe_next, token_hash,
)

SECTIONS = {"": "subscriptions", "subscriptions": "subscriptions", "invoices": "invoices",
            "payment-methods": "payment_methods"}


def routes(portal: Portal) -> list[BaseRoute]:
    database, clock = portal.database, portal.clock

    # -- login by link ---------------------------------------------------------------------------

    @portal.handler(public=True)
    async def login_form(request: Request, session) -> Response:
        token = request.query_params.get("token", "")
        if parse_token(token) is None:
            raise Refused(404, "portal.error.link")
        nonce = secrets.token_urlsafe(24)
        response = portal.page(request, "login.html", None, token=token, login_csrf=nonce,
                               next=request.query_params.get("next", "/"))
        response.set_cookie(LOGIN_COOKIE, nonce, max_age=3600, path="/portal", httponly=True, samesite="strict",
                            secure=portal.secure(request))
        return response

    @portal.handler(public=True)
    async def login(request: Request, session) -> Response:
        if not portal.same_origin(request):
            raise Refused(403, "portal.error.csrf")
        form = await portal.read_form(request)
        expected = request.cookies.get(LOGIN_COOKIE, "")
        if not expected or not signing.same(form.get("csrf", ""), expected):
            raise Refused(403, "portal.error.csrf")
        address = request.client.host if request.client else "-"
        if portal.failures.blocked_for(address) > 0:
            report_failure("throttled", address=address, route="/portal/login", key_id=None)
            raise Refused(429, "portal.error.throttled")
        token = form.get("token", "")
        customer_id = parse_token(token)

        def refused() -> Refused:
            # unknown, used, expired, revoked: one answer; counted per address (a guesser is slowed)
            portal.failures.failed(address)
            report_failure("unknown", address=address, route="/portal/login", key_id=None)
            return Refused(404, "portal.error.link")

        if customer_id is None:
            raise refused()
        session_token = new_session_token(customer_id)
        try:
            await database.mutate(f"portal-link:{customer_id}", db.PORTAL_OPEN_SESSION, {
                "customer": customer_id, "link_hash": link_hash(token), "session_hash": token_hash(session_token),
                "ttl": portal.ttl, "now": clock.now()})
        except psycopg.Error as exc:
            err = db.contract_error(exc)
            if err is None or err.code != "BL404":
                raise
            raise refused() from None
        response = RedirectResponse(safe_next(form.get("next")), status_code=303)
        response.set_cookie(COOKIE, session_token, max_age=int(portal.ttl.total_seconds()), path="/portal",
                            httponly=True, samesite="strict", secure=portal.secure(request))
        response.delete_cookie(LOGIN_COOKIE, path="/portal")
        return response

    @portal.handler
    async def logout(request: Request, session) -> Response:
        await portal.guarded_form(request, session)
        await database.mutate(portal.actor(session), db.PORTAL_CLOSE_SESSION, {
            "customer": session["customer_id"], "hash": token_hash(session["token"]), "now": clock.now()})
        response = portal.page(request, "error.html", None, code=200, problem="portal.signed_out",
                               locale=session["locale"])
        response.delete_cookie(COOKIE, path="/portal")
        return response

    # -- reading ---------------------------------------------------------------------------------

    @portal.handler
    async def home(request: Request, session) -> Response:
        section = SECTIONS.get(request.url.path.removeprefix("/portal").strip("/"), "subscriptions")
        row = await database.one(db.PORTAL_HOME, {"customer": session["customer_id"], "now": clock.now()})
        return portal.page(request, "home.html", session, home=row["home"], section=section,
                           zone=row["home"]["customer"].get("timezone"))

    @portal.handler
    async def invoice_document(request: Request, session) -> Response:
        stem, _, suffix = request.path_params["ref"].partition(".")
        if suffix not in ("html", "pdf") or not stem.isascii() or not stem.isdigit() or len(stem) > 18:
            raise Refused(404, "portal.error.not_found")
        row = await database.one(db.PORTAL_INVOICE_DOCUMENT, {"customer": session["customer_id"], "invoice": int(stem)},
                                 heavy=True)
        doc, locale = row["document"], session["locale"]
        if suffix == "html":
            return HTMLResponse(render_html(doc, portal.issuer, locale))
        pdf = await asyncio.get_running_loop().run_in_executor(None, render_pdf, doc, portal.issuer, locale)
        return Response(pdf, media_type="application/pdf", headers={
            "Content-Disposition": f'attachment; filename="invoice-{doc.get("number") or stem}.pdf"'})

    # -- acting ----------------------------------------------------------------------------------

    def subscription_action(query: str, done: str):
        @portal.handler
        async def action(request: Request, session) -> Response:
            sub_id = path_id(request)
            form = await portal.guarded_form(request, session)
            params = {"customer": session["customer_id"], "id": sub_id, "now": clock.now()}
            ok = done
            if query is db.PORTAL_CHANGE_PLAN:
                plan = form.get("plan", "")
                if not plan or len(plan) > 100:
                    raise Refused(422, "portal.error.refused")
                params["plan"] = plan
                home = (await database.one(db.PORTAL_HOME, {"customer": session["customer_id"], "now": clock.now()}))["home"]
                sub = next((s for s in home["subscriptions"] if s["id"] == sub_id), None)
                option = next((o for o in (sub or {}).get("options", []) if o["plan_code"] == plan), None)
                ok = "plan_scheduled" if option and option["change_at"] == "period_end" else done
            await database.mutate(portal.actor(session), query, params)
            return back("/portal/", ok=ok)
        return action

    # -- 3-D Secure: the payment page of an invoice that waits for the customer ------------------

    def provider(name: str = "stripe"):
        found = portal.provider_factory(name) if portal.provider_factory is not None else None
        if found is None:
            raise Refused(503, "portal.error.unavailable")
        return found

    @portal.handler
    async def pay_page(request: Request, session) -> Response:
        invoice_id = path_id(request)
        action = await database.one(db.INVOICE_ACTION, {"customer": session["customer_id"], "invoice": invoice_id,
                                                        "now": clock.now()})
        return portal.page(request, "pay.html", session, action=action, invoice_id=invoice_id)

    @portal.handler
    async def pay(request: Request, session) -> Response:
        from billing.portal import payments
        invoice_id = path_id(request)
        await portal.guarded_form(request, session)
        # this customer's invoice that waits for them, or 404, before anything reaches the provider
        waiting = await database.one(db.INVOICE_ACTION, {"customer": session["customer_id"], "invoice": invoice_id,
                                                         "now": clock.now()})
        return_url = f"{str(request.base_url).rstrip('/')}/portal/invoices/{invoice_id}/pay/return"
        pool = await database.pool()
        async with pool.connection() as conn:
            action = await payments.start(conn, provider(waiting["provider"]), session["customer_id"], invoice_id,
                                          return_url=return_url, now=clock.now())
        if action.redirect_url:
            return RedirectResponse(action.redirect_url, status_code=303)
        return RedirectResponse(f"/portal/invoices/{invoice_id}/pay/return", status_code=303)

    @portal.handler
    async def pay_return(request: Request, session) -> Response:
        from billing.portal import payments
        invoice_id = path_id(request)
        try:
            waiting = await database.one(db.INVOICE_ACTION, {"customer": session["customer_id"], "invoice": invoice_id,
                                                             "now": clock.now()})
        except psycopg.Error as exc:
            err = db.contract_error(exc)
            if err is None or err.code != "BL404":
                raise
            # Nothing waits any more: paid already (the provider's webhook came first), or not theirs.
            home = (await database.one(db.PORTAL_HOME, {"customer": session["customer_id"], "now": clock.now()}))["home"]
            if any(i["id"] == invoice_id and i["status"] == "PAID" for i in home["invoices"]):
                return back("/portal/invoices", ok="paid")
            raise
        pool = await database.pool()
        async with pool.connection() as conn:
            outcome = await payments.finish(conn, provider(waiting["provider"]), session["customer_id"], invoice_id,
                                            now=clock.now())
        return back("/portal/invoices", ok="pending" if outcome == "PENDING" else "paid")

    # -- a card through a SetupIntent ----------------------------------------------------------

    def test_mode() -> bool:
        return (portal.settings.stripe_api_key or "").startswith("sk_test_")

    @portal.handler
    async def card_form(request: Request, session) -> Response:
        from billing.portal.cards import TEST_CARDS
        return portal.page(request, "card.html", session, cards=TEST_CARDS if test_mode() else (),
                           nonce=secrets.token_urlsafe(16))

    @portal.handler
    async def add_card(request: Request, session) -> Response:
        from billing.portal import cards
        form = await portal.guarded_form(request, session)
        choice, nonce = form.get("payment_method", ""), form.get("nonce", "")
        if not test_mode() or choice not in cards.TEST_CARDS or not (8 <= len(nonce) <= 64) or not nonce.isascii():
            raise Refused(422, "portal.error.refused")
        home = (await database.one(db.PORTAL_HOME, {"customer": session["customer_id"], "now": clock.now()}))["home"]
        known = next((m.get("customer_ref") for m in home["payment_methods"] if m.get("provider") == "stripe"
                      and m.get("customer_ref")), None)
        outcome, url = await cards.add(
            database, provider(), session["customer_id"], choice, nonce=nonce, email=home["customer"].get("email"),
            customer_ref=known, return_url=f"{str(request.base_url).rstrip('/')}/portal/payment-methods/return",
            now=clock.now(), actor=portal.actor(session))
        if outcome == "action":
            return RedirectResponse(url, status_code=303)
        return back("/portal/payment-methods", ok="card_added" if outcome == "added" else "card_declined")

    @portal.handler
    async def card_return(request: Request, session) -> Response:
        from billing.portal import cards
        setup_id = request.query_params.get("setup_intent", "")
        if not setup_id.startswith("seti_") or len(setup_id) > 100 or not setup_id.isascii():
            raise Refused(404, "portal.error.not_found")
        outcome = await cards.finish(database, provider(), session["customer_id"], setup_id, now=clock.now(),
                                     actor=portal.actor(session))
        if outcome == "not_found":
            raise Refused(404, "portal.error.not_found")
        return back("/portal/payment-methods",
                    ok={"added": "card_added", "pending": "pending"}.get(outcome, "card_declined"))

    return [
        Route("/login", login_form, methods=["GET"]),
        Route("/login", login, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/", home, methods=["GET"]),
        Route("/subscriptions", home, methods=["GET"]),
        Route("/invoices", home, methods=["GET"]),
        Route("/payment-methods", home, methods=["GET"]),
        Route("/invoices/{ref}", invoice_document, methods=["GET"]),
        Route("/payment-methods/new", card_form, methods=["GET"]),
        Route("/payment-methods", add_card, methods=["POST"]),
        Route("/payment-methods/return", card_return, methods=["GET"]),
        Route("/invoices/{id}/pay", pay_page, methods=["GET"]),
        Route("/invoices/{id}/pay", pay, methods=["POST"]),
        Route("/invoices/{id}/pay/return", pay_return, methods=["GET"]),
        Route("/subscriptions/{id}/cancel", subscription_action(db.PORTAL_CANCEL, "canceled"), methods=["POST"]),
        Route("/subscriptions/{id}/uncancel", subscription_action(db.PORTAL_UNCANCEL, "uncanceled"), methods=["POST"]),
        Route("/subscriptions/{id}/change-plan", subscription_action(db.PORTAL_CHANGE_PLAN, "plan_changed"),
              methods=["POST"]),
    ]
