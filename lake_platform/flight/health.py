"""What the endpoint says of itself: whether it is ready (the gRPC health service's SERVING) and
the ``health`` action's report.

The report has two views. A tenant's principal (every Flight principal is one project's: the
local admin cannot sign in) sees liveness and its own project: status, version, uptime, the
snapshot's freshness and its project's table count. The server's figures (every tenant's table
count, cache, plan, early-start and running-query activity, refresh counts and the registry's
last error, which can name internal hosts) describe other tenants and the deployment, so they
go only to principals of ``LAKE_FLIGHT_OPERATOR_PROJECT`` and to in-process callers; operators
also have ``/metrics``.

Kept out of ``server``, the composition root: the report reads every part the server composes
(the snapshot cache and what the engine read past it, streams, caches, kept plans) and owns
none of them, and it grows with each figure a part learns to keep; the server stays its wiring,
lifecycle and RPCs.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Protocol

from lake_platform import __version__
from lake_platform.errors import ServiceUnavailable

if TYPE_CHECKING:
    from lake_platform.auth.tokens import Identity
    from lake_platform.flight.streams import Streams
    from lake_platform.query.engine import QueryEngine
    from lake_platform.query.snapshot_cache import SnapshotCache


class HealthHost(Protocol):
    """What the report reads of the server (``FlightSqlServer`` is one)."""

    snapshots: SnapshotCache
    engine: QueryEngine
    streams: Streams
    started_at: float


#: What a tenant is told of the snapshot: its freshness, not the refresh history or errors.
TENANT_SNAPSHOT = ("loaded", "age_seconds", "ttl_seconds", "max_stale_seconds")


def readiness(snapshots: SnapshotCache, draining: bool) -> tuple[str, str | None]:
    """ "ok", "draining" or "unavailable" (no fresh catalog snapshot), and why if unavailable."""
    try:
        snapshots.current()
    except ServiceUnavailable as exc:
        return "unavailable", exc.message
    return ("draining" if draining else "ok"), None


def tenant_report(server: HealthHost, draining: bool, project: str) -> dict[str, Any]:
    """What a principal of ``project`` is told: liveness and its own project, nothing about
    other tenants or internal errors (an unavailable status says only that)."""
    state, _ = readiness(server.snapshots, draining)
    status = server.snapshots.status()
    try:
        tables = len(server.snapshots.current().project(project).tables)
    except ServiceUnavailable:
        tables = None  # no snapshot fit to serve: the status says so
    return {
        "status": state,
        "version": __version__,
        "snapshot": {k: status[k] for k in TENANT_SNAPSHOT},
        "project": {"name": project, "tables": tables},
        "uptime_seconds": round(time.time() - server.started_at, 1),
    }


def health_report(server: HealthHost, draining: bool) -> dict[str, Any]:
    """The server's figures (JSON-ready): an operator's view (module docstring). ``snapshot``
    holds the snapshot cache's figures and, under ``misses``, the names it lacked that planning
    read from the registry (``query.snapshot_miss``)."""
    state, error = readiness(server.snapshots, draining)
    status = server.snapshots.status()
    if error is not None:
        status["error"] = error
    if server.engine.misses is not None:
        status["misses"] = server.engine.misses.stats()
    plans = server.engine.plans.stats()
    return {
        "status": state,
        "version": __version__,
        "snapshot": status,
        "running_queries": server.streams.running(),
        "early_starts": server.streams.early_stats(),
        "cache": server.engine.cache.stats(),
        "result_cache": server.engine.results.stats(),
        "plans": {"kept": plans["entries"], "hits": plans["hits"], "shaped": plans["shaped"]},
        "uptime_seconds": round(time.time() - server.started_at, 1),
    }


def report_for(
    server: HealthHost, draining: bool, identity: Identity, operator_project: str
) -> dict[str, Any]:
    """The ``health`` action's answer to ``identity``: the server's figures for a principal of
    the operator project (if one is set), else the tenant's view."""
    if operator_project and identity.project == operator_project:
        return health_report(server, draining)
    return tenant_report(server, draining, identity.project)


__all__ = ["HealthHost", "health_report", "readiness", "report_for", "tenant_report"]
