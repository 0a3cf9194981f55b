"""The REST app, observed: every HTTP request runs inside a request context (the request id, then
the principal once authenticated, for log and audit lines) and ends with its metrics (counted by
operation and status with its latency, surface ``rest``, the series Flight's requests count in)
and one access-log line on ``lake.request``, from one measurement of its status and duration.
QueryTable's audit line is written by its handler (``observability.query.observed``).

The ``method`` label is the spec's operation id (``DescribeTable``, ``QueryTable``; the control
routes' own names): a path that matched no route is ``unmatched``, so neither ids nor a caller's
made-up paths ever become label values. Headers are never logged (a bearer token lives there).
"""

from __future__ import annotations

import time

from lake_platform.observability import context
from lake_platform.observability.asgi import App, Receive, Scope, Send, StatusRecorder
from lake_platform.observability.logs import log_request
from lake_platform.observability.metrics import observe_request

SURFACE = "rest"
UNMATCHED = "unmatched"


def operation_of(scope: Scope) -> str:
    name = getattr(scope.get("route"), "name", None)
    return name if isinstance(name, str) and name else UNMATCHED


class RequestContext:
    """The request's context, then its metrics and access-log line: the app's outermost middleware
    of its own (``Starlette(middleware=[Middleware(RequestContext)])``)."""

    def __init__(self, app: App) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        info, token = context.begin(SURFACE, UNMATCHED)
        recorder = StatusRecorder(send)
        try:
            await self.app(scope, receive, recorder)
        finally:
            context.end(token)
            seconds = time.perf_counter() - started
            info.method = operation_of(scope)
            observe_request(SURFACE, info.method, recorder.status, seconds)
            log_request(info, str(recorder.status), seconds)
