"""Portal links: `pl_<customer id>_<43 characters>` (32 random bytes, URL-safe base64).

Only the SHA-256 of the whole token is stored (`billing.portal_link`), with its expiry; the
customer id in the token says which shard holds it (Citus) and is covered by the hash, so a token
edited to name another customer matches nothing. A link is used once (`billing.use_portal_link`),
expires, and can be revoked (`billing.revoke_portal_links`).
"""

from __future__ import annotations

import hashlib
import re
import secrets
from urllib.parse import quote, urlencode

_TOKEN = re.compile(r"^pl_([1-9][0-9]{0,18})_([A-Za-z0-9_-]{43})$")


def new_token(customer_id: int) -> str:
    return f"pl_{int(customer_id)}_{secrets.token_urlsafe(32)}"


def token_hash(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def parse_token(token: str | None) -> int | None:
    """The customer id a well-formed token names, else None (nothing is looked up for a malformed one)."""
    match = _TOKEN.match(token or "")
    return int(match.group(1)) if match else None


def login_url(portal_url: str, token: str, next_path: str = "/") -> str:
    """The link an email carries: the portal's login with the token and where to go after it."""
    query = {"token": token}
    if next_path and next_path != "/":
        query["next"] = next_path
    return f"{portal_url.rstrip('/')}/login?{urlencode(query, quote_via=quote, safe='/')}"
