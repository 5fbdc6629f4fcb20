"""The gateway simulator's 3-D Secure (billing.gateway.simulator, docs/gateway.md): a charge declined
`authentication_required` confirmed on session, the simulated bank's page and its decision, mixed
into GatewaySimulator (its state: `_charges`, `url`, `counters`; `_announce` sends the webhook)."""

from __future__ import annotations

from aiohttp import web

from billing.gateway.records import Charge


class AuthenticationRoutes:
    def _by_id(self, charge_id_: str) -> Charge | None:
        return next((c for c in self._charges.values() if c.id == charge_id_), None)

    async def _handle_confirm(self, request: web.Request) -> web.Response:
        charge = self._by_id(request.match_info["id"])
        if charge is None:
            return web.json_response({"error": {"code": "not_found", "message": "no such charge"}}, status=404)
        try:
            body = await request.json()
            return_url = body.get("returnUrl") if isinstance(body, dict) else None
        except ValueError:
            return_url = None
        if not isinstance(return_url, str) or not return_url.startswith(("http://", "https://")) or len(return_url) > 2000:
            return web.json_response({"error": {"code": "invalid_request", "message": "returnUrl (http or https) is required"}},
                                     status=400)
        if charge.status == "declined" and charge.decline_code == "authentication_required":
            from urllib.parse import urlencode

            url = f"{self.url}/authenticate/{charge.id}?{urlencode({'returnUrl': return_url})}"
            return web.json_response({**charge.answer(), "status": "requires_action",
                                      "nextAction": {"redirectUrl": url}})
        return web.json_response(charge.answer())

    async def _handle_charge_by_id(self, request: web.Request) -> web.Response:
        charge = self._by_id(request.match_info["id"])
        if charge is None:
            return web.json_response({"error": {"code": "not_found", "message": "no such charge"}}, status=404)
        return web.json_response({**charge.answer(), "amount": charge.amount, "currency": charge.currency,
                                  "customerId": charge.customer_id})

    async def _handle_auth_page(self, request: web.Request) -> web.Response:
        import html

        charge = self._by_id(request.match_info["id"])
        if charge is None or charge.decline_code != "authentication_required":
            return web.Response(status=404, text="no payment waits for authentication here")
        back = html.escape(request.query.get("returnUrl", ""))
        page = (f"<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>Authenticate the payment</title>"
                f"</head><body><main><h1>Authenticate the payment</h1><p>The simulated bank asks you to confirm "
                f"the payment of {charge.amount} (minor units) {html.escape(charge.currency)}.</p>"
                f"<form method=\"post\"><input type=\"hidden\" name=\"returnUrl\" value=\"{back}\">"
                f"<button name=\"decision\" value=\"approve\" type=\"submit\">Approve</button> "
                f"<button name=\"decision\" value=\"fail\" type=\"submit\">Fail authentication</button>"
                f"</form></main></body></html>")
        return web.Response(text=page, content_type="text/html")

    async def _handle_auth_decision(self, request: web.Request) -> web.Response:
        charge = self._by_id(request.match_info["id"])
        if charge is None or charge.decline_code != "authentication_required":
            return web.Response(status=404, text="no payment waits for authentication here")
        form = await request.post()
        if form.get("decision") == "approve" and charge.status == "declined":
            charge.status = "succeeded"  # the decline code stays: it says why it waited
            self.counters["authenticated"] += 1
            self._announce(charge, suffix="authenticated")
        back = str(form.get("returnUrl") or "")
        if back.startswith(("http://", "https://")):
            raise web.HTTPSeeOther(back)
        return web.Response(text="done", content_type="text/plain")
