"""The Starlette application: one route per operation of the spec, plus the
control-plane routes (projects, warehouses, trash, undrop).

Every request runs the same steps in the same order, the check order of every catalog door:
identity (the token) → shape (content type, JSON/Arrow parsing, ids, path/body id agreement) →
the handler, where the catalog checks parent → permission → conflict → write. Only a declared
body size over the limit comes first (413 before any other check); the body itself is read
after the token is checked, within the size and time limits (``body.py``): an unidentified
client gets its 401 without the server reading, let alone keeping, its body, and a refused
request whose body was not read ends its connection.
Any failure at any step is a problem body (``problems.py``); nothing is written before the
handler's catalog call, so a refused request changes nothing.

Handlers are synchronous (catalog, registry and Lance calls block): after the body is read on the
event loop, everything else runs in Starlette's thread pool (``run_in_threadpool``: anyio's
worker threads, at most 40 at once, the request context carried in).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from lake_platform.catalog.principals import Principal
from lake_platform.errors import InvalidInput, Unsupported
from lake_platform.observability import context
from lake_platform.rest import ids, spec
from lake_platform.rest.body import check_declared_length, check_encoding, parse_json, query_value, read_body
from lake_platform.rest.handlers import control, handler_for
from lake_platform.rest.observe import RequestContext
from lake_platform.rest.problems import problem
from lake_platform.rest.request import Reply, RestRequest
from lake_platform.rest.server import RestService

#: Who the server acted as, on every successful answer.
PRINCIPAL_HEADER = "x-lake-principal"
JSON = "application/json"
#: The operations whose id ends with a commit id rather than a name (``ids.parse_transaction_id``).
TRANSACTION = frozenset({"DescribeTransaction", "AlterTransaction"})
#: Query parameters the spec types as integers or booleans (everything else stays a string).
_INTS = {"limit", "version", "timeout"}
_BOOL_PARAMS = {
    "include_declared",
    "descending",
    "with_table_uri",
    "load_detailed_metadata",
    "check_declared",
    "when_matched_update_all",
    "when_not_matched_insert_all",
    "when_not_matched_by_source_delete",
    "use_index",
}


class Endpoint:
    """One operation: its handler, whether its body is Arrow, and which query parameters it reads.
    ``answer`` is the Starlette endpoint."""

    def __init__(
        self,
        service: RestService,
        handler: Callable[[RestRequest], Any],
        *,
        name: str,
        arrow: bool = False,
        bodyless: bool = False,
        query: tuple[str, ...] = (),
    ) -> None:
        self.service = service
        self.handler = handler
        self.name = name
        self.arrow = arrow
        #: The spec gives the operation no body: whatever type a client labels one with is not
        #: checked (``body.parse_json``).
        self.bodyless = bodyless
        self.query = query

    def body_limit(self) -> tuple[int, str]:
        """The largest body this operation reads, and the setting that says so: a JSON body is
        also held to LAKE_REST_MAX_JSON_BYTES, since parsing one costs several times its size
        (a Python object per value) and seconds of CPU per 10 MiB."""
        settings = self.service.settings
        if self.arrow or settings.rest_max_body_bytes <= settings.rest_max_json_bytes:
            return settings.rest_max_body_bytes, "LAKE_REST_MAX_BODY_BYTES"
        return settings.rest_max_json_bytes, "LAKE_REST_MAX_JSON_BYTES"

    async def answer(self, request: Request) -> Response:
        settings = self.service.settings
        has_body = bool(request.headers.get("content-length", "0").strip("0")) or (
            "transfer-encoding" in request.headers
        )
        read = not has_body
        try:
            principal: Principal | None = None
            raw = b""
            if has_body:
                # A declared size over the limit is refused first, then the caller is identified
                # (token checks block: a worker thread), and only then is the body read, on the
                # event loop, within the size and time limits: nobody unidentified costs memory.
                limit, setting = self.body_limit()
                check_declared_length(request, limit, setting)
                principal = await run_in_threadpool(self.service.authenticate, request.headers)
                raw = await read_body(request, limit, settings.rest_body_timeout_seconds, setting)
                read = True
            principal, result = await run_in_threadpool(
                self.handle, principal, request.headers, request.query_params, request.path_params, raw
            )
            return respond(result, principal.name)
        except ClientDisconnect:
            return problem(InvalidInput("the client went away before its body arrived"), request.url.path)
        except Exception as exc:  # noqa: BLE001 - every failure becomes a problem body
            answer = problem(exc, request.url.path)
            if not read:  # the rest of the body is not read: the connection ends with the answer
                answer.headers["connection"] = "close"
            return answer

    def handle(
        self,
        principal: Principal | None,
        headers: Mapping[str, str],
        query_params: Mapping[str, str],
        path_params: Mapping[str, Any],
        raw: bytes,
    ) -> tuple[Principal, Any]:
        """The request after its body is read: ``principal`` is None when the request had no
        body (identified here, on the same worker thread as the handler)."""
        service = self.service
        if principal is None:
            principal = service.authenticate(headers)
        context.identify(principal.name, principal.project)
        delimiter = service.delimiter(query_params)
        parse = ids.parse_transaction_id if self.name in TRANSACTION else ids.parse_path_id
        path_id = parse(path_params["id"], delimiter) if "id" in path_params else None
        check_encoding(raw, headers.get("content-encoding", ""))
        if self.arrow:
            media = headers.get("content-type", "").split(";", 1)[0].strip().lower()
            if raw and media != spec.ARROW_STREAM:
                raise InvalidInput(f"this operation takes {spec.ARROW_STREAM}, not {media or 'no type'!r}")
            body: dict[str, Any] = {}
        else:
            body = parse_json(
                raw,
                headers.get("content-type", ""),
                service.settings.rest_max_json_depth,
                bodyless=self.bodyless,
            )
        for param in _BOOL_PARAMS & body.keys():  # a JSON string "false" would read as true
            if body[param] is not None and not isinstance(body[param], bool):
                raise InvalidInput(f"{param} must be true or false, got {body[param]!r:.40}")
        for param in self.query:
            if param != "delimiter" and param in query_params and param not in body:
                body[param] = query_value(param, query_params[param], _INTS, _BOOL_PARAMS)
        for param, value in path_params.items():
            if param != "id":  # index_name, and the control routes' own parameters
                body[param] = value
        ident = ids.merge_ids(path_id, body, delimiter, transaction=self.name in TRANSACTION)
        call = RestRequest(
            service=service,
            operation=self.name,
            principal=principal,
            id=ident,
            body=body,
            query=dict(query_params),
            raw=raw if self.arrow else b"",
            headers=headers,
        )
        return principal, self.handler(call)


def respond(result: Any, principal: str) -> Response:
    """The answer, naming who the server acted as: Lance clients turn response headers into the
    answer's context (``header.x-lake-principal``). JSON goes out compact (no spaces)."""
    if isinstance(result, Response):
        result.headers[PRINCIPAL_HEADER] = principal
        return result
    named = {PRINCIPAL_HEADER: principal}
    if isinstance(result, Reply):
        return Response(
            result.content, status_code=result.status, media_type=result.media_type, headers=named
        )
    if result is None:
        return Response(b"", headers=named)
    return Response(json.dumps(result, separators=(",", ":")), media_type=JSON, headers=named)


def routes(service: RestService) -> list[Route]:
    """The spec's operations, then the control-plane routes (no path of one matches the other's)."""
    found = [
        Route(
            op.path,
            Endpoint(
                service,
                handler_for(op.operation_id),
                name=op.operation_id,
                arrow=op.request_type == spec.ARROW_STREAM,
                bodyless=op.request_type is None,
                query=op.query,
            ).answer,
            methods=[op.method],
            name=op.operation_id,
        )
        for op in spec.operations()
    ]
    found += [
        Route(path, Endpoint(service, fn, name=name, query=params).answer, methods=[method], name=name)
        for name, method, path, fn, params in control.ROUTES
    ]
    return found


async def http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own refusals as problem bodies: no route (404) or no such method (405) is
    Unsupported, anything else the router raises is InvalidInput."""
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    if status in (404, 405):
        error: Exception = Unsupported(
            f"unknown operation: {request.method} {request.url.path} is not a route of this server"
        )
    else:
        error = InvalidInput(str(getattr(exc, "detail", "bad request")))
    return problem(error, request.url.path)


def build_app(service: RestService) -> Starlette:
    """The Starlette app, observed (``rest/observe.py``: metrics, request context, access log);
    its lifespan starts and closes the service."""

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        await run_in_threadpool(service.start)
        yield
        await run_in_threadpool(service.close)

    return Starlette(
        routes=routes(service),
        middleware=[Middleware(RequestContext)],
        exception_handlers={HTTPException: http_error},
        lifespan=lifespan,
    )
