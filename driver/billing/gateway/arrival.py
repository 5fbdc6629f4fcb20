"""When each request to the gateway simulator arrived: the kernel's receive time of its bytes.

The simulator's rate-limit window must stamp a call when it reached the machine, not when its
handler ran (a busy event loop would shift the stamps and hide or invent bursts). aiohttp has no
public hook for this: `web.Server` is documented as the protocol factory for
`loop.create_server`, but an `Application` is only served through `AppRunner`, whose server
class and request handler (`aiohttp.web_protocol.RequestHandler`) are not a documented
extension point, and asyncio does not expose the transport's socket for reading with `recvmsg`.

So this module, and only this module, reaches into those internals, in one place:
* `stamp_arrivals(runner, site)` swaps the runner's `web_server.Server` for a subclass whose
  protocol notes when each request's bytes arrived, and turns on SO_TIMESTAMPNS on the listener;
* the protocol wraps the transport's socket (`transport._sock`) to read with `recvmsg` and take
  the kernel's stamp from the ancillary data.
Every step degrades: if an internal is missing (another aiohttp or asyncio), requests are
stamped when their bytes are read, or when the handler runs (`arrival` falls back to
`time.time()`). The simulator's tests check the kernel stamping (test_gateway_sim.py,
test_arrivals_are_stamped_by_the_kernel_not_by_a_stalled_loop).
"""

from __future__ import annotations

import socket
import struct
import time

from aiohttp import web, web_protocol, web_server

# Linux: SO_TIMESTAMPNS (SCM_TIMESTAMPNS in the ancillary data) has the same number on every
# architecture but a few old ones; Python's socket module does not name it.
SO_TIMESTAMPNS = 35


class _KernelStampedSocket:
    """The transport's socket, read with recvmsg so that each read brings the kernel's receive
    time of its data: the simulator's own scheduling delays cannot move a call's arrival."""

    __slots__ = ("_sock", "_handler")

    def __init__(self, sock, handler: "_StampingHandler") -> None:
        self._sock = sock
        self._handler = handler

    def recv(self, size: int) -> bytes:
        data, ancillary, _flags, _addr = self._sock.recvmsg(size, 64)
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(payload) >= 16:
                seconds, nanos = struct.unpack_from("qq", payload)
                self._handler.kernel_stamp = seconds + nanos / 1e9
        return data

    def __getattr__(self, name):
        return getattr(self._sock, name)


class _StampingHandler(web_protocol.RequestHandler):
    """aiohttp's connection protocol, noting when each request's bytes arrived (kernel time when
    the socket gives it, else when they were read)."""

    __slots__ = ("received_at", "kernel_stamp")

    def connection_made(self, transport) -> None:
        self.kernel_stamp = None
        sock = getattr(transport, "_sock", None)
        if sock is not None and hasattr(sock, "recvmsg"):
            try:
                sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
                transport._sock = _KernelStampedSocket(sock, self)
            except (OSError, AttributeError):
                pass
        super().connection_made(transport)

    def data_received(self, data: bytes) -> None:
        stamp, self.kernel_stamp = self.kernel_stamp, None
        self.received_at = stamp if stamp is not None else time.time()
        super().data_received(data)


class _StampingServer(web_server.Server):
    __slots__ = ()

    def __call__(self) -> web_protocol.RequestHandler:
        return _StampingHandler(self, loop=self._loop, **self._kwargs)


async def stamp_arrivals(runner: web.AppRunner, site: web.TCPSite) -> None:
    """Start `site` (of a set-up `runner`) with each request stamped on arrival."""
    server = runner.server
    if type(server) is web_server.Server and hasattr(server, "_kwargs") and hasattr(server, "_loop"):
        server.__class__ = _StampingServer
    await site.start()
    for listener in getattr(site._server, "sockets", None) or ():  # accepted sockets inherit it
        try:
            listener.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        except OSError:
            pass


def arrival(request: web.Request) -> float:
    """When the request's bytes arrived (wall clock, seconds): the handler may run later."""
    return getattr(request.protocol, "received_at", None) or time.time()
