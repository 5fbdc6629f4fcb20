"""The browser forms of the operator console and the customer portal, in one place (issue 25: the
two had each their own copy, already apart): a POST is taken only from the page's own origin, and
its body is read as a bounded `application/x-www-form-urlencoded` form, never more than `max_bytes`
(declared or streamed) nor `max_fields` fields. Each caller turns a `FormRefused` into its own
answer (the console's message, the portal's translated one); the CSRF token is checked after
(billing.signing.csrf_token, same)."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

from starlette.requests import Request


class FormRefused(Exception):
    """415: not a urlencoded form; 413: too large; 400: not readable as UTF-8 form fields."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


def same_origin(request: Request) -> bool:
    """False for a browser's cross-site POST: its Origin names another host than the request's."""
    origin = request.headers.get("origin")
    if origin is None:
        return True  # browsers send Origin with every cross-site POST; its absence is not one
    return urlsplit(origin).netloc == request.headers.get("host", "")


async def read_form(request: Request, *, max_bytes: int, max_fields: int) -> dict[str, str]:
    """The form's fields (the first value of each), or FormRefused."""
    ctype = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if ctype != "application/x-www-form-urlencoded":
        raise FormRefused(415)
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > max_bytes):
        raise FormRefused(413)
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > max_bytes:
            raise FormRefused(413)
    try:
        parsed = parse_qs(body.decode("utf-8"), keep_blank_values=True, max_num_fields=max_fields)
    except (UnicodeDecodeError, ValueError):
        raise FormRefused(400) from None
    return {k: v[0] for k, v in parsed.items()}
