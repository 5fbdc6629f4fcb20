"""Security headers on every answer of `billing serve` (issue 27, finding 9; docs/security.md).

An ASGI middleware around the whole application (the API, its documents, the console): each
response gets, unless the handler set its own,

* `Content-Security-Policy`: nothing may load (`default-src 'none'`), the invoice's own inline
  `<style>` excepted on HTML documents; `frame-ancestors 'none'` (never framed), `base-uri 'none'`,
  `form-action 'none'`; the console's pages set a policy of their own (its scripts and styles from
  its origin), which is kept;
* `X-Frame-Options: DENY` (browsers without frame-ancestors), `X-Content-Type-Options: nosniff`,
  `Referrer-Policy: no-referrer`;
* `Cache-Control: no-store`: invoices, customers' data and the console are never kept by a
  browser or a proxy (the console's static assets, which hold nothing private, excepted).
"""

from __future__ import annotations

DOCUMENT_CSP = ("default-src 'none'; style-src 'unsafe-inline'; img-src data:; frame-ancestors 'none'; "
                "base-uri 'none'; form-action 'none'")
STRICT_CSP = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
_STATIC_PREFIX = "/console/static/"


def _policy_for(content_type: bytes) -> bytes:
    return (DOCUMENT_CSP if content_type.startswith(b"text/html") else STRICT_CSP).encode()


class SecurityHeaders:
    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        static = scope.get("path", "").startswith(_STATIC_PREFIX)

        async def send_with_headers(message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {name.lower() for name, _ in headers}
                content_type = next((v for n, v in headers if n.lower() == b"content-type"), b"")
                extra = [(b"content-security-policy", _policy_for(content_type)),
                         (b"x-frame-options", b"DENY"), (b"x-content-type-options", b"nosniff"),
                         (b"referrer-policy", b"no-referrer")]
                if not static:
                    extra.append((b"cache-control", b"no-store"))
                headers += [(n, v) for n, v in extra if n not in present]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)
