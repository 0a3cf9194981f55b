"""A deadline for a request's headers, which uvicorn (pinned 0.54) does not have.

uvicorn starts no timer while a connection's headers arrive: a client that sends nothing, or
half its headers, holds a connection (and a LAKE_REST_MAX_CONNECTIONS slot) until it goes.
``HeaderDeadlines`` closes such a connection after LAKE_REST_HEADER_TIMEOUT_SECONDS through two
public surfaces only: ``Config(http=...)`` takes an asyncio.Protocol class, so ``protocol()`` is
a class that builds uvicorn's own protocol with the same arguments and forwards every
asyncio.Protocol call to it, arming a timer when the connection opens; and uvicorn calls the
ASGI app exactly when a request's headers are complete, so ``app()`` wraps the app to disarm
that connection's timer (found by the scope's ``client``/``server``, which uvicorn takes from the
transport's peer and local addresses). Once a request is answered, the next bytes on the
connection arm the timer again: an idle kept-alive connection is LAKE_REST_KEEP_ALIVE_SECONDS'
(uvicorn's), the next request's headers are timed from its first byte.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
Addresses = tuple[tuple[str, int], tuple[str, int]]


class HeaderDeadlines:
    """Open connections waiting for a request's headers, each with its timer, by address pair."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.connections: dict[Addresses, _Deadline] = {}

    def protocol(self, inner: type[asyncio.Protocol]) -> type[asyncio.Protocol]:
        """An asyncio.Protocol class for ``Config(http=...)`` that wraps ``inner`` (built with
        the arguments uvicorn passes) in this deadline."""
        deadlines = self

        class HeaderTimedProtocol(asyncio.Protocol):
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                self.inner = inner(*args, **kwargs)
                self.deadline: _Deadline | None = None

            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                self.inner.connection_made(transport)
                self.deadline = deadlines.watch(transport)

            def connection_lost(self, exc: Exception | None) -> None:
                if self.deadline is not None:
                    self.deadline.forget()
                self.inner.connection_lost(exc)

            def data_received(self, data: bytes) -> None:
                if self.deadline is not None:
                    self.deadline.received()
                self.inner.data_received(data)

            def eof_received(self) -> bool | None:
                return self.inner.eof_received()

            def pause_writing(self) -> None:
                self.inner.pause_writing()

            def resume_writing(self) -> None:
                self.inner.resume_writing()

        return HeaderTimedProtocol

    def app(self, app: ASGIApp) -> ASGIApp:
        """``app``, disarming its connection's timer from the request's start (its headers are
        complete) until the next request's first bytes."""

        async def timed(scope: Scope, receive: Receive, send: Send) -> None:
            deadline = self.connections.get(_scope_addresses(scope)) if scope["type"] != "lifespan" else None
            if deadline is None:
                await app(scope, receive, send)
                return
            deadline.disarm()
            try:
                await app(scope, receive, send)
            finally:
                deadline.answered()

        return timed

    def watch(self, transport: asyncio.BaseTransport) -> _Deadline | None:
        addresses = _transport_addresses(transport)
        if addresses is None:  # not TCP: nothing to match a request to
            return None
        deadline = _Deadline(self, addresses, transport)
        self.connections[addresses] = deadline
        deadline.arm()
        return deadline


class _Deadline:
    def __init__(
        self, owner: HeaderDeadlines, addresses: Addresses, transport: asyncio.BaseTransport
    ) -> None:
        self.owner = owner
        self.addresses = addresses
        self.transport = transport
        self.timer: asyncio.TimerHandle | None = None
        self.open = True
        self.idle = False  # answered; the next bytes start the next request's headers

    def arm(self) -> None:
        self.disarm()
        if self.open:
            self.timer = asyncio.get_running_loop().call_later(self.owner.seconds, self.expire)

    def answered(self) -> None:
        self.disarm()
        self.idle = True

    def received(self) -> None:
        if self.idle:
            self.idle = False
            self.arm()

    def disarm(self) -> None:
        self.idle = False
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def expire(self) -> None:
        self.timer = None
        # No answer is owed: the request never reached the app. abort, not close: nothing is
        # left to flush, and a client that never reads must not keep the socket.
        self.transport.abort()

    def forget(self) -> None:
        self.open = False
        self.disarm()
        if self.owner.connections.get(self.addresses) is self:
            del self.owner.connections[self.addresses]


def _transport_addresses(transport: asyncio.BaseTransport) -> Addresses | None:
    peer = transport.get_extra_info("peername")
    local = transport.get_extra_info("sockname")
    if not isinstance(peer, tuple) or not isinstance(local, tuple) or len(peer) < 2 or len(local) < 2:
        return None
    return (str(peer[0]), int(peer[1])), (str(local[0]), int(local[1]))


def _scope_addresses(scope: Scope) -> Addresses | None:
    client, server = scope.get("client"), scope.get("server")
    if client is None or server is None or server[1] is None:
        return None
    return (str(client[0]), int(client[1])), (str(server[0]), int(server[1]))
