"""What the endpoint says of itself: whether it is ready (the gRPC health service's SERVING) and
the ``health`` action's report.

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
    from lake_platform.flight.streams import Streams
    from lake_platform.query.engine import QueryEngine
    from lake_platform.query.snapshot_cache import SnapshotCache


class HealthHost(Protocol):
    """What the report reads of the server (``FlightSqlServer`` is one)."""

    snapshots: SnapshotCache
    engine: QueryEngine
    streams: Streams
    started_at: float


def readiness(snapshots: SnapshotCache, draining: bool) -> tuple[str, str | None]:
    """ "ok", "draining" or "unavailable" (no fresh catalog snapshot), and why if unavailable."""
    try:
        snapshots.current()
    except ServiceUnavailable as exc:
        return "unavailable", exc.message
    return ("draining" if draining else "ok"), None


def health_report(server: HealthHost, draining: bool) -> dict[str, Any]:
    """The ``health`` action's answer (JSON-ready). ``snapshot`` holds the snapshot cache's
    figures and, under ``misses``, the names it lacked that planning read from the registry
    (``query.snapshot_miss``)."""
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


__all__ = ["HealthHost", "health_report", "readiness"]
