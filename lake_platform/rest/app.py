"""The Starlette application: one route per operation of the spec, plus the
control-plane routes (projects, warehouses, trash, undrop).

Every request runs the same steps in the same order, the check order of every catalog door:
identity (the token) → shape (content type, JSON/Arrow parsing, ids, path/body id agreement) →
the handler, where the catalog checks parent → permission → conflict → write. Only the body's
size comes first (413 before any other check): the server reads no more than the limit from
anyone.
Any failure at any step is a problem body (``problems.py``); nothing is written before the
handler's catalog call, so a refused request changes nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any
from urllib.parse import parse_qsl

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import URL
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from lake_platform.catalog.principals import Principal
from lake_platform.errors import InvalidInput, RequestTooLarge, Unsupported
from lake_platform.observability import context
from lake_platform.observability.asgi import Receive, Scope, Send
from lake_platform.rest import ids, spec
from lake_platform.rest.dispatch import HotRoutes
from lake_platform.rest.handlers import control, handler_for
from lake_platform.rest.observe import observed_app
from lake_platform.rest.problems import problem
from lake_platform.rest.request import Reply, RestRequest
from lake_platform.rest.server import RestService

#: Who the server acted as, on every successful answer.
PRINCIPAL_HEADER = "x-lake-principal"
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


async def read_body(headers: Mapping[str, str], receive: Receive, limit: int) -> bytes:
    """The request body, refused (413) past ``limit`` before or while reading it; a client gone
    mid-body is Starlette's ``ClientDisconnect``, as ``Request.stream`` raises it."""
    declared = headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise RequestTooLarge(
            f"the body is {declared} bytes; the limit is {limit} (LAKE_REST_MAX_BODY_BYTES)"
        )
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect()
        if message["type"] != "http.request":
            continue
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise RequestTooLarge(f"the body exceeds the limit of {limit} bytes (LAKE_REST_MAX_BODY_BYTES)")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def header_map(scope: Any) -> dict[str, str]:
    """The request's headers as a dict, built once (Starlette's ``Headers`` scans its list on
    every lookup; a request looks up a dozen). ASGI names are lowercase already; the first of a
    repeated header wins, as with ``Headers.get``."""
    return {k.decode("latin-1"): v.decode("latin-1") for k, v in reversed(scope["headers"])}


#: Parsed query strings by their exact bytes: a Lance client sends the same few on every call
#: (``delimiter=%24&limit=1&descending=true``). Read-only views, so no request changes another's.
_QUERIES: dict[bytes, Mapping[str, str]] = {}
_QUERY_CACHE_SIZE = 256
_QUERY_CACHE_MAX_BYTES = 512


def query_map(scope: Any) -> Mapping[str, str]:
    """The query parameters as Starlette's ``request.query_params`` reads them (blank values
    kept; the last of a repeated name wins)."""
    raw: bytes = scope.get("query_string", b"")
    found = _QUERIES.get(raw)
    if found is None:
        found = MappingProxyType(dict(parse_qsl(raw.decode("latin-1"), keep_blank_values=True)))
        if len(raw) <= _QUERY_CACHE_MAX_BYTES:
            if len(_QUERIES) >= _QUERY_CACHE_SIZE:
                _QUERIES.clear()
            _QUERIES[raw] = found
    return found


def request_path(scope: Any) -> str:
    """The problem body's ``instance``: the path as Starlette's ``request.url.path`` gives it."""
    return URL(scope=scope).path


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
    if media and media != "application/json":
        raise InvalidInput(f"this operation takes application/json, not {media!r}")
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"the body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise InvalidInput("the body must be a JSON object")
    return body


#: Registry reads (no lease, no storage I/O but in a recovery case): on a SQLite registry (a local
#: file in WAL mode, so a read never waits for a writer) they run on the event loop, saving the two
#: thread wake-ups of a worker-thread hop, which dominate their latency on a busy host. The
#: version reads finish a version left at its staging manifest by a writer killed between its
#: transaction and the link (a rare, bounded write; normally the commit links it). On DynamoDB
#: every read is a network round trip, so they hop like everything else.
INLINE_OPERATIONS = frozenset(
    {
        "DescribeTable",
        "TableExists",
        "ListNamespaces",
        "DescribeNamespace",
        "NamespaceExists",
        "ListTables",
        "ListTableVersions",
        "DescribeTableVersion",
    }
)
#: A Lance client's commit is DescribeTable, ListTableVersions, CreateTableVersion: their routes are
#: matched first (the router tries routes in order), and ``dispatch.HotRoutes`` finds them without
#: the router at all.
HOT_OPERATIONS = ("DescribeTable", "ListTableVersions", "CreateTableVersion", "DescribeTableVersion")


def inline_reads(service: RestService) -> bool:
    catalog = getattr(service, "catalog", None)
    return str(getattr(getattr(catalog, "store", None), "url", "")).startswith("sqlite:")


def operation_endpoint(service: RestService, op: spec.Operation) -> Endpoint:
    return Endpoint(
        service,
        handler_for(op.operation_id),
        name=op.operation_id,
        arrow=op.request_type == spec.ARROW_STREAM,
        query=op.query,
        inline=op.operation_id in INLINE_OPERATIONS and inline_reads(service),
    )


class Endpoint:
    """One operation as a plain ASGI app (Starlette calls a non-function endpoint as ASGI, with
    no ``Request`` object and no exception wrapper: this catches everything itself), so that
    ``HotRoutes`` can call the very same object without Starlette's router."""

    def __init__(
        self,
        service: RestService,
        handler: Callable[[RestRequest], Any],
        *,
        name: str,
        arrow: bool = False,
        query: tuple[str, ...] = (),
        inline: bool = False,
    ) -> None:
        self.service = service
        self.handler = handler
        self.name = name
        self.arrow = arrow
        self.query = query
        self.inline = inline

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            headers = header_map(scope)
            # The body is read (up to the limit) before anything else: the one step that must be
            # async. Everything after runs in one worker thread (``rest/workers.py``; or, for a
            # pure registry read on SQLite, right here), in the door's order.
            raw = await read_body(headers, receive, self.service.settings.rest_max_body_bytes)
            args = (headers, query_map(scope), scope.get("path_params", {}), raw)
            if self.inline:
                principal, result = self.handle(*args)
            else:
                principal, result = await self.service.workers.run(self.handle, *args)
            response = respond(result, principal.name)
        except Exception as exc:  # noqa: BLE001 - every failure becomes a problem body
            response = problem(exc, request_path(scope))
        await response(scope, receive, send)

    def handle(
        self, headers: Mapping[str, str], query_params: Mapping[str, str], path_params: Any, raw: bytes
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


def respond(result: Any, principal: str) -> Response | Answer:
    """The answer, naming who the server acted as: Lance clients turn response headers into the
    answer's context (``header.x-lake-principal``)."""
    if isinstance(result, Response):
        result.headers[PRINCIPAL_HEADER] = principal
        return result
    if isinstance(result, Reply):
        return Answer(result.status, result.content, result.media_type, principal)
    if result is None:
        return Answer(200, b"", None, principal)
    return Answer(200, json.dumps(result, separators=_COMPACT), JSON, principal)


JSON = "application/json"
_PRINCIPAL_KEY = PRINCIPAL_HEADER.encode("latin-1")


class Answer:
    """A whole answer in one body, sent exactly as Starlette's ``Response(content, status_code,
    headers={x-lake-principal: ...}, media_type=...)`` sends it (the same two ASGI messages, the
    same header list in the same order: the principal, then ``content-length`` but for a status
    without a body, then ``content-type`` with ``charset=utf-8`` added to a ``text/`` type),
    without building a ``Response`` and its header machinery on every request.
    ``test_app.py`` holds the two side by side."""

    __slots__ = ("status_code", "body", "raw_headers")

    def __init__(self, status: int, content: bytes | str, media_type: str | None, principal: str) -> None:
        body = content if isinstance(content, bytes) else content.encode("utf-8")
        headers = [(_PRINCIPAL_KEY, principal.encode("latin-1"))]
        if not (status < 200 or status in (204, 304)):
            headers.append((b"content-length", str(len(body)).encode("latin-1")))
        if media_type is not None:
            if media_type.startswith("text/") and "charset=" not in media_type.lower():
                media_type += "; charset=utf-8"
            headers.append((b"content-type", media_type.encode("latin-1")))
        self.status_code = status
        self.body = body
        self.raw_headers = headers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        await send({"type": "http.response.body", "body": self.body})


_COMPACT = (",", ":")


def routes(service: RestService) -> list[Route]:
    hot = {name: n for n, name in enumerate(HOT_OPERATIONS)}
    ordered = sorted(spec.operations(), key=lambda op: hot.get(op.operation_id, len(hot)))
    found = [
        Route(op.path, operation_endpoint(service, op), methods=[op.method], name=op.operation_id)
        for op in ordered
    ]
    extra = [
        Route(path, Endpoint(service, fn, name=name, query=params), methods=[method], name=name)
        for name, method, path, fn, params in control.ROUTES
    ]
    # The commit path's routes first, then the control routes (as before), then the rest.
    return found[: len(HOT_OPERATIONS)] + extra + found[len(HOT_OPERATIONS) :]


def build_app(service: RestService) -> Any:
    """The Starlette app, observed (``rest/observe.py``: metrics, request context, access log)."""

    async def http_error(request: Request, exc: Exception) -> Response:
        status = getattr(exc, "status_code", 500)
        if status in (404, 405):
            error: Exception = Unsupported(
                f"unknown operation: {request.method} {request.url.path} is not a route of this server"
            )
        else:
            error = InvalidInput(str(getattr(exc, "detail", "bad request")))
        return problem(error, request.url.path)

    async def lifespan(_app: Starlette) -> Any:
        await run_in_threadpool(service.start)
        yield
        await run_in_threadpool(service.close)

    from contextlib import asynccontextmanager

    table = routes(service)
    app = Starlette(
        routes=table,
        exception_handlers={HTTPException: http_error},
        lifespan=asynccontextmanager(lifespan),
    )
    return observed_app(HotRoutes(app, table, HOT_OPERATIONS))
