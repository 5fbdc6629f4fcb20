"""Where outbound webhooks may go: the SSRF guard lives in billing.netguard (issue 27); these names
stay for existing callers. `check_target` is `netguard.check_url`; `PublicOnlyResolver` is kept for
a connector that still resolves names itself, but the deliverer pins each request to an address
checked by `netguard.pin` and never lets the HTTP library resolve."""

from __future__ import annotations

import socket

from aiohttp.abc import AbstractResolver
from aiohttp.resolver import DefaultResolver

from billing.netguard import BlockedAddress, check_url, is_public, pin  # noqa: F401

# What this module offers: its own names and those it hands on from the imports above.
__all__ = ["PublicOnlyResolver", "check_target", "pin"]


def check_target(url: str, *, allow_private: bool) -> None:
    check_url(url, allow_private=allow_private)


class PublicOnlyResolver(AbstractResolver):
    """Resolves like aiohttp's default resolver, then keeps public addresses only."""

    def __init__(self) -> None:
        self._inner = DefaultResolver()

    async def resolve(self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET):
        infos = await self._inner.resolve(host, port, family)
        public = [i for i in infos if is_public(i["host"])]
        if not public or len(public) != len(infos):
            raise BlockedAddress(f"{host} resolves to a non-public address "
                                 f"({', '.join(sorted({i['host'] for i in infos}))})")
        return public

    async def close(self) -> None:
        await self._inner.close()
