"""QueryTable: a plain scan (columns, filter, k/offset, version) of a table's registered
version, through the same query engine, catalog snapshot and limits as Flight SQL
(``LAKE_FLIGHT_*`` limits: memory pool, timeout, result size; the result cache, scoped to the
principal); the filter is parsed as one expression over the table's columns and applied with
DataFusion's DataFrame API (``scan.py``), never spliced into SQL. Vector and full-text search
are not served.

The answer is one Arrow IPC file of any size, streamed as the query runs (``rest/arrow_file.py``).
A client that asks for the handle protocol (:data:`HANDLE_HEADER` or ``?result=handle``) gets
the older answer instead: inline up to ``LAKE_REST_INLINE_MAX_*``, else the result spooled into
the lake's results area (``rest/results.py``) and a JSON handle to its segments."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

import lake_platform.rest.handlers.branches as branches
import lake_platform.rest.handlers.scan as scan
from lake_platform.errors import InvalidInput, TableNotFound, Unsupported
from lake_platform.naming import SEGMENT, TableName
from lake_platform.observability.query import QueryInfo, failed, observed
from lake_platform.query.snapshot_head import latest_view
from lake_platform.rest import arrow_file, results
from lake_platform.rest.handlers.common import scoped
from lake_platform.rest.request import Reply, RestRequest

ARROW_FILE = arrow_file.ARROW_FILE
SURFACE = "rest"
#: How a client asks for the handle protocol instead of the streamed Arrow file: this header, or
#: the query parameter, with the value ``handle``.
HANDLE_HEADER = "x-lake-result"
HANDLE_PARAM = "result"
HANDLE = "handle"
#: A segment's number in its URL: ASCII digits (results have fewer than 100,000 segments).
SEGMENT_NUMBER = re.compile(r"[0-9]{1,5}")


def _int(body: dict[str, Any], name: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0 or value > scan.MAX_ROWS:
        raise InvalidInput(f"{name} must be an integer from 0 to {scan.MAX_ROWS}, got {value!r}")
    return value


@dataclass(frozen=True)
class ScanRequest:
    """What QueryTable asked for, checked for shape; the filter is parsed when planned."""

    table: TableName
    columns: list[str] | None
    filter: str | None
    k: int | None
    offset: int | None
    version: int | None = None  # None: the current registered version (of main or the branch)
    branch: str | None = None  # None: main


def scan_request(request: RestRequest) -> ScanRequest:
    tname = request.table_name()
    body = request.body
    vector = body.get("vector")
    values = vector.get("single_vector") or vector.get("multi_vector") if isinstance(vector, dict) else vector
    if values or body.get("full_text_query"):
        raise Unsupported(
            "vector and full-text search are not served; send a plain scan (filter, columns, k)"
        )
    if body.get("with_row_id") not in (None, False):
        raise Unsupported("with_row_id: row ids are not served; leave it unset or false")
    version = body.get("version")
    if version is not None and (not isinstance(version, int) or isinstance(version, bool) or version < 0):
        raise InvalidInput(f"version must be a non-negative integer, got {version!r}")
    branch = branches.branch_of(request)
    if branch is not None and not SEGMENT.fullmatch(branch):
        raise InvalidInput(f"invalid branch name {branch[:80]!r}: lower case letters, digits and _")
    columns = body.get("columns")
    if isinstance(columns, dict):
        if columns.get("column_aliases"):
            raise Unsupported("column aliases are not served; name the columns")
        columns = columns.get("column_names")
    if columns is not None and (
        not isinstance(columns, list) or not all(isinstance(c, str) and c for c in columns)
    ):
        raise InvalidInput("columns must be a list of column names")
    where = body.get("filter")
    if where is not None and (not isinstance(where, str) or not where.strip()):
        raise InvalidInput("filter must be a SQL boolean expression")
    # Version 0 is the current one, as DescribeTable takes it (Lance numbers versions from 1).
    version = version or None
    return ScanRequest(tname, columns or None, where, _int(body, "k"), _int(body, "offset"), version, branch)


def wants_handle(request: RestRequest) -> bool:
    """The client asked for the handle protocol (header or query parameter, case-insensitive)."""
    asked = request.headers.get(HANDLE_HEADER) or request.query.get(HANDLE_PARAM) or ""
    if asked and asked.lower() != HANDLE:
        raise InvalidInput(f"{HANDLE_HEADER} / ?{HANDLE_PARAM}= takes only {HANDLE!r}, got {asked[:40]!r}")
    return bool(asked)


def query_table(request: RestRequest) -> Any:
    asked = scan_request(request)  # a malformed request is not a query (not audited)
    handle = wants_handle(request)
    tname = asked.table
    namespace = ".".join(tname.namespace)
    sql = scan.table_sql(tname.warehouse, namespace, tname.table, asked.version, asked.branch)
    service = request.service
    principal = request.principal
    started = time.perf_counter()
    engine = service.query_engine()
    try:
        scoped(request, table=True)
        # "Latest" is the registry's head now (one read), not the snapshot's: read-your-writes.
        # An older version is resolved in the same view (its registered versions).
        view = latest_view(service.snapshots, service.catalog.store, tname)
        if view.table(tname.warehouse, namespace, tname.table) is None:
            raise TableNotFound(f"table {tname} does not exist")
        scan.check_version(tname, asked.version, asked.branch)
        planned = scan.plan_scan(
            engine,
            view,
            sql,
            filter_text=asked.filter,
            columns=asked.columns,
            k=asked.k,
            offset=asked.offset,
        )
    except Exception as exc:
        # Refused at planning (another tenant's or a missing table, a bad filter): audited as
        # Flight audits a refused GetFlightInfo.
        asked_sql = sql if asked.filter is None else f"{sql} WHERE {asked.filter}"  # audited text only
        failed(QueryInfo.of(SURFACE, principal, asked_sql), service.audit, exc, time.perf_counter() - started)
        raise
    info = QueryInfo.of(SURFACE, principal, planned.sql, None, planned.refs)
    # One audit line when the stream ends, however it ends (the pins, rows, bytes, status). The
    # principal is the scope: a repeated scan over the same version by the same principal is
    # answered from the result cache when small and deterministic.
    stream = observed(engine.stream(planned, scope=principal), info, service.audit)
    if not handle:
        return answer(planned.schema, stream)
    return _handle_answer(request, tname.project, planned.schema, stream)


def _handle_answer(
    request: RestRequest, project: str, schema: pa.Schema, stream: Iterator[pa.RecordBatch]
) -> Any:
    """The handle protocol: inline up to the inline limits, else spooled, with segment URLs."""
    settings = request.service.settings
    collector = results.Collector(
        schema=schema,
        max_rows=settings.rest_inline_max_rows,
        max_bytes=settings.rest_inline_max_bytes,
        area=results.area(settings),
        project=project,
        ttl=settings.results_ttl_seconds,
    )
    try:
        for batch in stream:
            collector.add(batch)
        answer = collector.finish()
    except BaseException as exc:
        collector.abort()
        try:  # a failure of the spool (not of the stream) is the query's status too, not CANCELLED
            stream.throw(exc)
        except BaseException:  # noqa: BLE001, S110 - the same error, re-raised below
            pass
        raise
    if isinstance(answer, bytes):
        return Reply(answer, ARROW_FILE)
    return {
        "result_handle": answer.handle,
        "rows": answer.rows,
        "segments": [f"/v1/results/{answer.handle}/{n}" for n in range(answer.segments)],
        "media_type": ARROW_FILE,
        "expires_at": int(answer.expires_at),
    }


def result_segment(request: RestRequest) -> Any:
    """GET /v1/results/{handle}/{n}: one spooled segment, streamed from the results area."""
    handle = str(request.body.get("handle", ""))
    project, job = results.parse_handle(handle, request.principal.project)
    segment = str(request.body.get("segment", ""))
    if not SEGMENT_NUMBER.fullmatch(segment):  # not str.isdigit: "²" is one, and int() raised
        raise InvalidInput("segment must be a number")
    area = results.area(request.service.settings)
    path = results.segment_path(area, project, job, int(segment), time.time())
    from starlette.responses import StreamingResponse

    return StreamingResponse(results.read_segment(area, path), media_type=ARROW_FILE)


def answer(schema: pa.Schema, batches: Iterator[pa.RecordBatch]) -> Reply | arrow_file.ArrowFileResponse:
    """The result as one Arrow IPC file: whole when it ends within :data:`arrow_file.BUFFERED_BYTES`,
    else streamed. Batches up to that size are taken here, on the request's thread, so a query
    that fails early fails as an ordinary answer."""
    head: list[pa.RecordBatch] = []
    held = 0
    for batch in batches:
        head.append(batch)
        held += batch.nbytes
        if held >= arrow_file.BUFFERED_BYTES:
            return arrow_file.ArrowFileResponse(arrow_file.file_chunks(schema, head, batches))
    return Reply(arrow_file.whole_file(schema, head), ARROW_FILE)


HANDLERS = {"QueryTable": query_table}
