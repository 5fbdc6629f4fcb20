"""Where the engine may send a request of its own (outbound webhooks): the SSRF guard.

It trusts no HTTP library's idea of what a host is (issue 27, finding 5: aiohttp's handling of
numeric hosts changed between versions, and the worker POSTed signed events to 127.0.0.1):

* `parse_ip(host)` reads every form a resolver or a socket library may take for an IPv4 address:
  the dotted quad, but also `2130706433`, `127.1`, `0`, octal `017700000001` / `0177.0.0.1`, hex
  `0x7f000001` / `0x7f.1`, with or without a trailing dot; and every IPv6 literal, with its zone.
* `refusal(ip)` says why an address is not a public unicast one: loopback, private, link-local,
  shared (CGNAT), multicast, reserved, unspecified; an IPv6 address that embeds an IPv4 one
  (IPv4-mapped `::ffff:a.b.c.d`, IPv4-compatible `::a.b.c.d`, IPv4-translated `::ffff:0:a.b.c.d`)
  is judged as that IPv4 address; the translation and tunnel ranges (NAT64 `64:ff9b::/96` and
  `64:ff9b:1::/48`, 6to4 `2002::/16`, Teredo `2001::/32`) are refused whatever they embed, since
  a relay on the path decides where they go.
* `check_url(url, allow_private=...)` at registration (the API answers 422): http(s), a host, no
  credentials, and a host that is a public address written as a dotted quad or an IPv6 literal,
  or a name (judged when it resolves); an IPv4 address in another numeric form is refused even
  when public, because parsers disagree on those.
* `pin(url, allow_private=...)` at delivery: resolves the name once (`getaddrinfo`), refuses the
  URL unless every address is public (a name that answers one public and one private address is
  refused: DNS rebinding), and returns the URL rewritten to the chosen address plus the `Host`
  header and the TLS server name to send: the request connects to exactly the address checked,
  whatever the HTTP library would have resolved.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from dataclasses import dataclass
from typing import Awaitable, Callable
from urllib.parse import urlsplit, urlunsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class BlockedAddress(OSError):
    """The target's address is not public and private targets are not allowed."""


# Ranges refused whatever they embed: a translator or a relay on the path picks the real target.
_TRANSLATED = (
    ("NAT64", ipaddress.ip_network("64:ff9b::/96")),
    ("NAT64 (local use)", ipaddress.ip_network("64:ff9b:1::/48")),
    ("6to4", ipaddress.ip_network("2002::/16")),
    ("Teredo", ipaddress.ip_network("2001::/32")),
)
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")
_IPV4_TRANSLATED = ipaddress.ip_network("::ffff:0:0:0/96")

_PART = re.compile(r"^(?:0[xX][0-9a-fA-F]*|0[0-7]*|[1-9][0-9]*)$")


def _numeric_ipv4(host: str) -> ipaddress.IPv4Address | None:
    """The IPv4 address of an inet_aton-style numeric host (1 to 4 parts, each decimal, octal with
    a leading 0 or hex with 0x; the last part fills the remaining bytes), else None."""
    parts = host.split(".")
    if not 1 <= len(parts) <= 4 or not all(_PART.match(p) for p in parts):
        return None
    values = []
    for p in parts:
        if p[:2].lower() == "0x":
            values.append(int(p[2:] or "0", 16))
        elif len(p) > 1 and p[0] == "0":
            values.append(int(p, 8))
        else:
            values.append(int(p))
    *head, last = values
    if any(v > 255 for v in head) or last >= 256 ** (4 - len(head)):
        return None
    number = 0
    for v in head:
        number = number * 256 + v
    number = number * 256 ** (4 - len(head)) + last
    return ipaddress.IPv4Address(number)


def parse_ip(host: str) -> tuple[IPAddress | None, bool]:
    """(the address a host names as a literal, whether it is written canonically), or (None, True)
    for a name. Canonical: a dotted quad of decimal bytes, or an IPv6 literal."""
    bare = host.strip("[]").split("%", 1)[0]
    if bare.endswith(".") and not bare.endswith(".."):
        bare = bare[:-1]
    try:
        return ipaddress.ip_address(bare), True
    except ValueError:
        pass
    v4 = _numeric_ipv4(bare)
    if v4 is not None:
        return v4, False
    return None, True


def embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries as mapped, compatible or translated, else None."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip in _IPV4_TRANSLATED:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip in _IPV4_COMPATIBLE and int(ip) > 1:  # not :: nor ::1
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def refusal(ip: IPAddress) -> str | None:
    """Why `ip` is not a public unicast address, or None when it is."""
    if isinstance(ip, ipaddress.IPv6Address):
        for name, network in _TRANSLATED:
            if ip in network:
                return f"{ip} is in the {name} range {network}"
        inner = embedded_ipv4(ip)
        if inner is not None:
            why = refusal(inner)
            return f"{ip} embeds {inner}: {why}" if why else None
    for flag, what in (("is_unspecified", "unspecified"), ("is_loopback", "loopback"),
                       ("is_link_local", "link-local"), ("is_multicast", "multicast"),
                       ("is_private", "private"), ("is_reserved", "reserved")):
        if getattr(ip, flag):
            return f"{ip} is a {what} address"
    if isinstance(ip, ipaddress.IPv4Address) and ip in ipaddress.ip_network("100.64.0.0/10"):
        return f"{ip} is a shared (carrier-grade NAT) address"
    if not ip.is_global:
        return f"{ip} is not a globally routable address"
    return None


def is_public(address: str) -> bool:
    ip, _ = parse_ip(address)
    return ip is not None and refusal(ip) is None


def _split(url: str):
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("the url must be http(s)://host/...")
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise ValueError("the url must not carry credentials")
    try:
        parts.port
    except ValueError:
        raise ValueError("the url's port is not a number from 0 to 65535") from None
    return parts


def check_url(url: str, *, allow_private: bool) -> None:
    """Raises ValueError for a URL that is not http(s) with a host or that carries credentials,
    BlockedAddress for a host that is a non-public address (in any numeric form), an IPv4 address
    not written as a dotted quad, or a loopback name. Other names are judged when they resolve."""
    parts = _split(url)
    if allow_private:
        return
    host = parts.hostname
    ip, canonical = parse_ip(host)
    if ip is None:
        name = host.rstrip(".").lower()
        if name == "localhost" or name.endswith(".localhost"):
            raise BlockedAddress(f"{host} is a loopback name")
        return
    why = refusal(ip)
    if why:
        raise BlockedAddress(f"{host}: {why}")
    if not canonical:
        raise BlockedAddress(f"{host} is an IPv4 address in a numeric form other than a dotted quad")


Resolve = Callable[[str, int], Awaitable[list[str]]]


async def system_resolve(host: str, port: int) -> list[str]:
    """The addresses the system resolver gives for host (TCP), in its order."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [info[4][0] for info in infos]


@dataclass(frozen=True)
class Pinned:
    url: str  # the URL with its host replaced by the address checked
    address: str
    host_header: str | None  # the Host header to send (None: the URL's own)
    server_hostname: str | None  # the TLS server name (https to a name), else None


async def pin(url: str, *, allow_private: bool, resolve: Resolve = system_resolve) -> Pinned:
    """The URL bound to one checked address (see the module's docstring). Raises BlockedAddress
    or ValueError as check_url does, and BlockedAddress for a name that resolves to no address or
    to any non-public one. With allow_private the URL is returned as it is."""
    check_url(url, allow_private=allow_private)
    parts = _split(url)
    if allow_private:
        return Pinned(url, parts.hostname, None, None)
    host = parts.hostname
    port = parts.port or (443 if parts.scheme == "https" else 80)
    ip, _ = parse_ip(host)
    if ip is not None:
        return Pinned(url, str(ip), None, None)
    try:
        addresses = await resolve(host, port)
    except OSError as exc:
        raise BlockedAddress(f"{host} does not resolve: {exc}") from None
    if not addresses:
        raise BlockedAddress(f"{host} resolves to no address")
    for address in addresses:
        found, _ = parse_ip(address)
        why = refusal(found) if found is not None else f"{address} is not an address"
        if why:
            raise BlockedAddress(f"{host} resolves to a non-public address ({why})")
    chosen = ipaddress.ip_address(addresses[0].split("%", 1)[0])
    literal = f"[{chosen}]" if chosen.version == 6 else str(chosen)
    netloc = literal if parts.port is None else f"{literal}:{parts.port}"
    host_header = host if parts.port is None else f"{host}:{parts.port}"
    return Pinned(urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, "")), str(chosen),
                  host_header, host if parts.scheme == "https" else None)
