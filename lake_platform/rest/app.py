"""The Starlette application: one route per operation of the spec, plus the
control-plane routes (projects, warehouses, trash, undrop).

Every request runs the same steps in the same order, the check order of every catalog door:
identity (the token) → shape (content type, JSON/Arrow parsing, ids, path/body id agreement) →
the handler, where the catalog checks parent → permission → conflict → write. Only the body's
size comes first (413 before any other check): the server reads no more than the limit from
anyone.
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
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from lake_platform.catalog.principals import Principal
from lake_platform.errors import InvalidInput, RequestTooLarge, Unsupported
from lake_platform.observability import context
from lake_platform.rest import ids, spec
from lake_platform.rest.handlers import control, handler_for
from lake_platform.rest.observe import RequestContext
from lake_platform.rest.problems import problem
from lake_platform.rest.request import Reply, RestRequest
from lake_platform.rest.server import RestService

#: Who the server acted as, on every successful answer.
PRINCIPAL_HEADER = "x-lake-principal"
JSON = "application/json"
_BOOLS = {"true": True, "false": False, "1": True, "0": False}
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


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refused (413) past ``limit`` before or while reading it; a client gone
    mid-body is Starlette's ``ClientDisconnect``, raised by ``Request.stream``."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise RequestTooLarge(
            f"the body is {declared} bytes; the limit is {limit} (LAKE_REST_MAX_BODY_BYTES)"
        )
    body = bytearray()
    async for chunk in request.stream():
        if len(body) + len(chunk) > limit:
            raise RequestTooLarge(f"the body exceeds the limit of {limit} bytes (LAKE_REST_MAX_BODY_BYTES)")
        body += chunk
    return bytes(body)


def _query_value(name: str, value: str) -> Any:
    if name in _INTS:
        try:
            return int(value)
        except ValueError:
            raise InvalidInput(f"query parameter {name} must be an integer, got {value!r}") from None
    if name in _BOOL_PARAMS:
        if value.lower() not in _BOOLS:
            raise InvalidInput(f"query parameter {name} must be true or false, got {value!r}")
        return _BOOLS[value.lower()]
    return value


def parse_json(raw: bytes, content_type: str) -> dict[str, Any]:
    if not raw.strip():
        return {}
    media = content_type.split(";", 1)[0].strip().lower()
    if media and media != JSON:
        raise InvalidInput(f"this operation takes application/json, not {media!r}")
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"the body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise InvalidInput("the body must be a JSON object")
    return body


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
        query: tuple[str, ...] = (),
    ) -> None:
        self.service = service
        self.handler = handler
        self.name = name
        self.arrow = arrow
        self.query = query

    async def answer(self, request: Request) -> Response:
        try:
            # The body is read (up to the limit) on the event loop, before anything else; the
            # rest blocks (token checks, the catalog), so it runs on a worker thread.
            raw = await read_body(request, self.service.settings.rest_max_body_bytes)
            principal, result = await run_in_threadpool(
                self.handle, request.headers, request.query_params, request.path_params, raw
            )
            return respond(result, principal.name)
        except Exception as exc:  # noqa: BLE001 - every failure becomes a problem body
            return problem(exc, request.url.path)

    def handle(
        self,
        headers: Mapping[str, str],
        query_params: Mapping[str, str],
        path_params: Mapping[str, Any],
        raw: bytes,
    ) -> tuple[Principal, Any]:
        service = self.service
        principal = service.authenticate(headers)
        context.identify(principal.name, principal.project)
        delimiter = service.delimiter(query_params)
        path_id = ids.parse_path_id(path_params["id"], delimiter) if "id" in path_params else None
        if self.arrow:
            media = headers.get("content-type", "").split(";", 1)[0].strip().lower()
            if raw and media != spec.ARROW_STREAM:
                raise InvalidInput(f"this operation takes {spec.ARROW_STREAM}, not {media or 'no type'!r}")
            body: dict[str, Any] = {}
        else:
            body = parse_json(raw, headers.get("content-type", ""))
        for param in self.query:
            if param != "delimiter" and param in query_params and param not in body:
                body[param] = _query_value(param, query_params[param])
        for param, value in path_params.items():
            if param != "id":  # index_name, and the control routes' own parameters
                body[param] = value
        ident = ids.merge_ids(path_id, body, delimiter)
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
