"""The REST app, observed: every HTTP request is counted by operation and status with its latency
(``observability.asgi.MetricsMiddleware``, surface ``rest``), runs inside a request context (the
request id, then the principal once authenticated, for log and audit lines) and ends with one
access-log line on ``lake.request``. QueryTable's audit line is written by its handler
(``observability.query.observed``).

The ``method`` label is the spec's operation id (``DescribeTable``, ``QueryTable``; the control
routes' own names): a path that matched no route is ``unmatched``, so neither ids nor a caller's
made-up paths ever become label values. Headers are never logged (a bearer token lives there).
"""

from __future__ import annotations

import time
from typing import Any

from lake_platform.observability import context
from lake_platform.observability.asgi import App, MetricsMiddleware, Receive, Scope, Send
from lake_platform.observability.logs import log_request

SURFACE = "rest"
UNMATCHED = "unmatched"


def operation_of(scope: Scope) -> str:
    name = getattr(scope.get("route"), "name", None)
    return name if isinstance(name, str) and name else UNMATCHED


class RequestContext:
    """The request's context and its access-log line (inside the metrics middleware)."""

    def __init__(self, app: App) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        info, token = context.begin(SURFACE, UNMATCHED)
        status = 500

        async def send_status(message: Any) -> None:
            nonlocal status
            if message.get("type") == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            context.end(token)
            info.method = operation_of(scope)
            log_request(info, str(status), time.perf_counter() - started)


def observed_app(app: App) -> App:
    return MetricsMiddleware(RequestContext(app), surface=SURFACE, route=operation_of)
