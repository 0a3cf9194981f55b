"""ASGI middleware recording every HTTP request of a surface (the REST catalog): count and
errors by route and status, and latency. Plain ASGI, so it wraps a Starlette app (or any other)
without importing Starlette:

    app = MetricsMiddleware(app, surface="rest")

The method label is the route's template when the framework put one in the scope (Starlette:
``scope["route"].path``), else the path with its id segment replaced (``/v1/table/{id}/describe``):
ids never become label values.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from lake_platform.observability.metrics import observe_request

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


def route_of(scope: Scope) -> str:
    route = scope.get("route")
    template = getattr(route, "path", None)
    if isinstance(template, str):
        return f"{scope.get('method', '')} {template}"
    parts = str(scope.get("path", "")).split("/")
    # /v1/<object>/<id>/<action>: the Lance Namespace REST layout.
    if len(parts) > 3 and parts[1] == "v1":
        parts[3] = "{id}"
    return f"{scope.get('method', '')} {'/'.join(parts)}"


class StatusRecorder:
    """Wraps an ASGI ``send``, remembering the response's status: 500 until the app answers, so
    an app that raises before answering counts as an error."""

    def __init__(self, send: Send) -> None:
        self.send = send
        self.status = 500

    async def __call__(self, message: Message) -> None:
        if message.get("type") == "http.response.start":
            self.status = int(message["status"])
        await self.send(message)


class MetricsMiddleware:
    def __init__(self, app: App, *, surface: str = "rest", route: Callable[[Scope], str] = route_of) -> None:
        self.app = app
        self.surface = surface
        self.route = route

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        recorder = StatusRecorder(send)
        try:
            await self.app(scope, receive, recorder)
        finally:
            observe_request(self.surface, self.route(scope), recorder.status, time.perf_counter() - started)
