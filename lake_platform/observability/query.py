"""One executed query, observed: rows and bytes streamed, queries in flight, final status, and
its audit record. Surfaces wrap their result stream in :func:`observed` (Flight's DoGet does;
the REST catalog's QueryTable can) and report failures before streaming with :func:`failed`."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from lake_platform.errors import LakeError
from lake_platform.observability import context
from lake_platform.observability.audit import AuditTrail, query_record
from lake_platform.observability.metrics import (
    observe_admission_rejected,
    observe_query,
    query_in_flight,
)

CLIENT_GONE = "the client went away or the server ended the stream"


@dataclass(frozen=True)
class QueryInfo:
    """What the audit says about a query besides its outcome."""

    surface: str
    principal: str
    project: str
    sql: str
    params: int
    tables: tuple[dict[str, Any], ...]

    @classmethod
    def of(
        cls, surface: str, identity: Any, sql: str, params: Any = None, refs: Iterable[Any] = ()
    ) -> QueryInfo:
        """From an identity (``name``, ``project``), bound parameters (a record batch or None) and
        the snapshot refs planned against."""
        count = params.num_columns if params is not None else 0
        return cls(surface, identity.name, identity.project, sql, count, pins(refs))


def pins(refs: Iterable[Any]) -> tuple[dict[str, Any], ...]:
    """The snapshots a query read: name, incarnation, version (no storage paths)."""
    return tuple({"table": r.name, "incarnation": r.incarnation, "version": r.version} for r in refs)


def status_of(exc: BaseException) -> tuple[str, str]:
    """The gRPC code name and client-facing message an error is answered with."""
    if isinstance(exc, LakeError):
        return exc.grpc_status, exc.message
    return "INTERNAL", "internal error"


def observed(
    batches: Iterator[Any],
    info: QueryInfo,
    trail: AuditTrail,
    client_gone: Callable[[], bool] = lambda: False,
) -> Iterator[Any]:
    """``batches`` (Arrow record batches), counted; one audit record when the stream ends,
    however it ends (exhausted, failed, or closed because the client went away). A stream that
    ends quietly because ``client_gone()`` is CANCELLED, not OK."""
    # Read now: the stream's body runs later, outside the request's context.
    request = context.current()
    request_id = request.request_id if request is not None else None
    return _observe(batches, info, trail, client_gone, request_id, time.perf_counter())


def _observe(
    batches: Iterator[Any],
    info: QueryInfo,
    trail: AuditTrail,
    client_gone: Callable[[], bool],
    request_id: str | None,
    started: float,
) -> Iterator[Any]:
    rows = nbytes = 0
    status, error = "OK", None
    try:
        with query_in_flight(info.surface):
            for batch in batches:
                rows += batch.num_rows
                nbytes += batch.nbytes
                yield batch
        if client_gone():
            status, error = "CANCELLED", CLIENT_GONE
    except GeneratorExit:
        status, error = "CANCELLED", CLIENT_GONE
        raise
    except BaseException as exc:
        status, error = status_of(exc)
        if status == "RESOURCE_EXHAUSTED" and rows == 0:
            observe_admission_rejected(info.surface)
        raise
    finally:
        close = getattr(batches, "close", None)
        if close is not None:
            close()
        _finish(info, trail, request_id, rows, nbytes, status, error, time.perf_counter() - started)


def failed(info: QueryInfo, trail: AuditTrail, exc: BaseException, seconds: float) -> None:
    """A query that failed before it streamed anything (planning, a pinned snapshot gone)."""
    request = context.current()
    status, error = status_of(exc)
    _finish(info, trail, request.request_id if request else None, 0, 0, status, error, seconds)


def _finish(
    info: QueryInfo,
    trail: AuditTrail,
    request_id: str | None,
    rows: int,
    nbytes: int,
    status: str,
    error: str | None,
    seconds: float,
) -> None:
    observe_query(info.surface, status, rows, nbytes)
    trail.write(
        query_record(
            request_id=request_id,
            surface=info.surface,
            principal=info.principal,
            project=info.project,
            sql=info.sql,
            params=info.params,
            tables=list(info.tables),
            rows=rows,
            nbytes=nbytes,
            status=status,
            error=error,
            seconds=seconds,
        )
    )
