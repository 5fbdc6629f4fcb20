"""Where outbound webhooks may go: public addresses only, unless private ones are allowed.

`check_target` refuses a URL whose host is a literal non-public address (or a loopback name) up
front; `PublicOnlyResolver` refuses, at connect time, names that resolve to no public address, so
a DNS answer cannot smuggle a loopback, private, link-local, multicast or reserved address in.
"""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

from aiohttp.abc import AbstractResolver
from aiohttp.resolver import DefaultResolver


class BlockedAddress(OSError):
    """The endpoint's address is not public and private targets are not allowed."""


def is_public(address: str) -> bool:
    """True for a globally routable unicast address (IPv4-mapped IPv6 judged as its IPv4)."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


def check_target(url: str, *, allow_private: bool) -> None:
    """Raises BlockedAddress for a URL whose host is a literal non-public address or a loopback
    name (other names are checked when they resolve), ValueError for a URL that is not http(s)
    with a host, or that carries credentials."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("the url must be http(s)://host/...")
    if parts.username is not None or parts.password is not None:
        raise ValueError("the url must not carry credentials")
    if allow_private:
        return
    host = parts.hostname
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        name = host.rstrip(".").lower()
        if name == "localhost" or name.endswith(".localhost"):
            raise BlockedAddress(f"{host} is a loopback name") from None
        return
    if not is_public(host):
        raise BlockedAddress(f"{host} is not a public address")


class PublicOnlyResolver(AbstractResolver):
    """Resolves like aiohttp's default resolver, then keeps public addresses only."""

    def __init__(self) -> None:
        self._inner = DefaultResolver()

    async def resolve(self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET):
        infos = await self._inner.resolve(host, port, family)
        public = [i for i in infos if is_public(i["host"])]
        if not public:
            raise BlockedAddress(f"{host} resolves to no public address "
                                 f"({', '.join(sorted({i['host'] for i in infos}))})")
        return public

    async def close(self) -> None:
        await self._inner.close()
