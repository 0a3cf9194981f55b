"""Prometheus metrics of the serving surfaces (Flight SQL, REST) and the layers under them.

One process-wide registry (:data:`REGISTRY`, not prometheus_client's global one, so importing a
library that registers its own metrics cannot collide with ours). Surfaces report through small
functions (:func:`observe_request`, :func:`observe_query`) so the REST catalog records exactly
what Flight records; ``surface`` is ``"flight"`` or ``"rest"``. Things that already keep their own
counts (the catalog snapshot cache, the query engine's caches, spill folder, snapshot miss
reads, key lookups' Lance scanners, plannings and runs: ``engine_figures``) are read at scrape
time by :class:`_Watched`, never copied on the request path.

``exposition`` serves :data:`REGISTRY` at ``/metrics``.

Names and labels are listed in docs/operations.md.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from lake_platform.observability import hooks
from lake_platform.observability.engine_figures import ENGINE_GROUPS, FIGURES, counted_parts

REGISTRY = CollectorRegistry(auto_describe=True)
ProcessCollector(registry=REGISTRY)  # process_resident_memory_bytes, CPU, open fds

#: Request latency buckets (seconds): point lookups are milliseconds, scans can be minutes.
_LATENCY = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
_REGISTRY_LATENCY = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)
_LEASE_WAIT = (0.001, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 120)

REQUESTS = Counter(
    "lake_requests",
    "Requests answered, by surface, RPC or route, and status (gRPC code name or HTTP status).",
    ["surface", "method", "code"],
    registry=REGISTRY,
)
ERRORS = Counter(
    "lake_request_errors",
    "Requests answered with an error status (the subset of lake_requests_total with code != OK/2xx/3xx).",
    ["surface", "method", "code"],
    registry=REGISTRY,
)
LATENCY = Histogram(
    "lake_request_duration_seconds",
    "Time from a request's arrival to its last response byte (streams: to the end of the stream).",
    ["surface", "method"],
    buckets=_LATENCY,
    registry=REGISTRY,
)
QUERY_ROWS = Counter("lake_query_rows", "Result rows streamed to clients.", ["surface"], registry=REGISTRY)
QUERY_BYTES = Counter(
    "lake_query_bytes",
    "Result bytes streamed to clients (Arrow buffer bytes of the record batches).",
    ["surface"],
    registry=REGISTRY,
)
QUERIES = Counter(
    "lake_queries", "Queries executed, by final status.", ["surface", "status"], registry=REGISTRY
)
IN_FLIGHT = Gauge("lake_queries_in_flight", "Queries streaming now.", ["surface"], registry=REGISTRY)
ADMISSION_REJECTIONS = Counter(
    "lake_admission_rejections",
    "Queries refused because every admission slot stayed busy (RESOURCE_EXHAUSTED).",
    ["surface"],
    registry=REGISTRY,
)
EARLY_STARTS = Counter(
    "lake_early_starts",
    "Queries started at GetFlightInfo, CreatePreparedStatement or DoPut, by outcome: claimed (taken over by "
    "their DoGet) or dropped "
    "(stopped unclaimed: the window passed, the ticket was cancelled, another replica or plan served it).",
    ["outcome"],
    registry=REGISTRY,
)
REGISTRY_OPS = Counter(
    "lake_registry_operations",
    "Registry (MetaStore) calls, by backend, operation and outcome (ok or the error's class).",
    ["backend", "op", "outcome"],
    registry=REGISTRY,
)
REGISTRY_LATENCY = Histogram(
    "lake_registry_operation_duration_seconds",
    "Registry call latency (scan_prefix: time spent producing items, not the caller's).",
    ["backend", "op"],
    buckets=_REGISTRY_LATENCY,
    registry=REGISTRY,
)
LEASE_WAIT = Histogram(
    "lake_lease_wait_seconds",
    "Time a writer waited for a table's write lease, by outcome (acquired, gave_up).",
    ["outcome"],
    buckets=_LEASE_WAIT,
    registry=REGISTRY,
)

_OK_GRPC = "OK"


def is_error(code: str | int) -> bool:
    """gRPC code names other than OK, and HTTP statuses from 400 up, are errors."""
    if isinstance(code, int) or code.isdigit():
        return int(code) >= 400
    return code != _OK_GRPC


def observe_request(surface: str, method: str, status: str | int, seconds: float) -> None:
    """Record one answered request. ``method``: the RPC name (Flight) or the route's template
    (REST, never a path with ids in it: labels must stay few). ``status``: a gRPC code name
    (``"OK"``, ``"INVALID_ARGUMENT"``) or an HTTP status."""
    key = (surface, method, status)
    children = _REQUEST_CHILDREN.get(key)
    if children is None:
        code = str(status)
        children = (
            REQUESTS.labels(surface, method, code),
            ERRORS.labels(surface, method, code) if is_error(status) else None,
            LATENCY.labels(surface, method),
        )
        _REQUEST_CHILDREN[key] = children
    requests, errors, latency = children
    requests.inc()
    if errors is not None:
        errors.inc()
    latency.observe(seconds)


#: Labelled children by (surface, method, status): labels() validates and locks on every call,
#: a dict lookup does not (the request path calls this twice per query).
_REQUEST_CHILDREN: dict[tuple[str, str, str | int], tuple[Any, Any, Any]] = {}


def observe_query(surface: str, status: str, rows: int, nbytes: int) -> None:
    """Record one finished query (``status``: ok or the error's gRPC code name)."""
    QUERIES.labels(surface, status).inc()
    if rows:
        QUERY_ROWS.labels(surface).inc(rows)
    if nbytes:
        QUERY_BYTES.labels(surface).inc(nbytes)


def observe_early_start(outcome: str) -> None:
    EARLY_STARTS.labels(outcome).inc()


def observe_admission_rejected(surface: str) -> None:
    ADMISSION_REJECTIONS.labels(surface).inc()


@contextmanager
def query_in_flight(surface: str) -> Iterator[None]:
    gauge = IN_FLIGHT.labels(surface)
    gauge.inc()
    try:
        yield
    finally:
        gauge.dec()


def observe_registry(backend: str, op: str, outcome: str, seconds: float) -> None:
    # Every registry call comes here (a commit makes a dozen): labels() validates and locks on
    # every call (~40 us for the two), the cached children are a dict lookup.
    key = (backend, op, outcome)
    children = _REGISTRY_CHILDREN.get(key)
    if children is None:
        children = _REGISTRY_CHILDREN.setdefault(
            key, (REGISTRY_OPS.labels(backend, op, outcome), REGISTRY_LATENCY.labels(backend, op))
        )
    children[0].inc()
    children[1].observe(seconds)


_REGISTRY_CHILDREN: dict[tuple[str, str, str], tuple[Any, Any]] = {}


def observe_lease_wait(outcome: str, seconds: float) -> None:
    LEASE_WAIT.labels(outcome).observe(seconds)


BYPASSED_VERSIONS = Counter(
    "lake_bypassed_versions",
    "Table versions found committed around the registry (a manifest no registry commit made), moved "
    "to quarantine and reported in the table's history, by project; counted by the process that found "
    "them.",
    ["project"],
    registry=REGISTRY,
)


def observe_bypass(project: str, versions: int) -> None:
    BYPASSED_VERSIONS.labels(project).inc(versions)


hooks.install(observe_registry, observe_lease_wait, observe_bypass)


# -- read at scrape time -------------------------------------------------------------------------


class SnapshotSource(Protocol):
    def status(self) -> dict[str, Any]: ...


class _Watched(Collector):
    """Figures other objects keep, read when Prometheus scrapes: catalog snapshot caches and
    query engines (by weak reference, so a stopped server's objects go away)."""

    def __init__(self) -> None:
        self._snapshots: weakref.WeakSet[Any] = weakref.WeakSet()
        #: What the caches of stopped servers counted (one entry adds them all up).
        self._stopped = _Counted({})
        self._engines: dict[int, tuple[weakref.ref[Any], Path, int]] = {}
        # Reentrant: a gone engine's finalizer (``_retire``) may run on the very thread that
        # holds it, when a scrape's allocations set off the garbage collector.
        self._lock = threading.RLock()
        #: (metric, cache) -> what engines that are gone had counted, and what was last reported:
        #: a counter summed over the live engines alone would drop when one goes away.
        self._retired: dict[tuple[str, str], float] = {}
        self._reported: dict[tuple[str, str], float] = {}

    def watch_snapshots(self, cache: SnapshotSource) -> None:
        with self._lock:
            self._snapshots.add(cache)

    def unwatch_snapshots(self, cache: SnapshotSource) -> None:
        """Stop reporting ``cache`` (its server stopped). Not left to the weak reference: a
        stopped server something still refers to would report an ever older snapshot. Its
        counts stay in the counters (a sum over the live caches alone would drop)."""
        with self._lock:
            if cache in self._snapshots:
                self._snapshots.discard(cache)
                self._stopped.add(_Counted(cache.status()))

    def watch_engine(self, engine: Any, spill_dir: Path, pool_bytes: int) -> None:
        """Report ``engine``'s pool size and spill folder while it lives."""
        with self._lock:
            self._engines[id(engine)] = (weakref.ref(engine), spill_dir, pool_bytes)
        weakref.finalize(engine, self._retire, counted_parts(engine))

    def _retire(self, caches: dict[str, Any]) -> None:
        """Keep the counts of a gone engine's caches in the totals."""
        with self._lock:
            for cache, stats in ((name, c.stats()) for name, c in caches.items()):
                for metric, _, kind, key in FIGURES[cache]:
                    if kind == "counter":
                        self._retired[metric, cache] = self._retired.get((metric, cache), 0) + stats[key]

    def _cache_families(self, engines: list[Any]) -> Iterator[Any]:
        """The snapshot cache's and the result cache's figures over the engines, labelled
        ``cache="snapshot"`` / ``cache="result"``, the plan cache's, the snapshot miss reads' and
        the lookup scanners' (no label). Gauges sum the live engines; counters add what gone
        engines counted and never go down."""
        stats: dict[str, list[dict[str, Any]]] = {name: [] for name in FIGURES}
        for engine in engines:
            for name, cache in counted_parts(engine).items():
                stats[name].append(cache.stats())
        for group, figures, label in ENGINE_GROUPS:
            for metric, text, kind, key in figures:
                labels = [label] if label else []
                family: Any = (
                    GaugeMetricFamily(metric, text, labels=labels)
                    if kind == "gauge"
                    else CounterMetricFamily(metric, text, labels=labels)
                )
                for cache in group:
                    total = float(sum(f[key] for f in stats[cache]))
                    if kind == "counter":
                        with self._lock:
                            total = max(
                                total + self._retired.get((metric, cache), 0),
                                self._reported.get((metric, cache), 0),
                            )
                            self._reported[metric, cache] = total
                    elif not stats[cache]:
                        continue
                    family.add_metric([cache] if label else [], total)
                yield family

    def describe(self) -> list[Any]:
        return []  # dynamic: nothing to check at registration

    def collect(self) -> Iterator[Any]:
        with self._lock:
            caches = list(self._snapshots)
            stopped = self._stopped.status()
            for key in [k for k, (ref, _, _) in self._engines.items() if ref() is None]:
                del self._engines[key]
            engines = [(spill, pool) for _, spill, pool in self._engines.values()]
            live = [e for e in (ref() for ref, _, _ in self._engines.values()) if e is not None]
        running = [c.status() for c in caches]
        statuses = [*running, stopped]
        ages = [s["age_seconds"] for s in statuses if s.get("age_seconds") is not None]
        age = GaugeMetricFamily(
            "lake_snapshot_age_seconds", "Age of the catalog snapshot requests are served from (oldest)."
        )
        if ages:
            age.add_metric([], max(ages))
        yield age
        loaded = GaugeMetricFamily("lake_snapshot_tables", "Tables in the catalog snapshot.")
        if running:
            loaded.add_metric([], max(s.get("tables", 0) for s in running))
        yield loaded
        refreshes = CounterMetricFamily("lake_snapshot_refreshes", "Catalog snapshot loads that succeeded.")
        refreshes.add_metric([], sum(s.get("loads", 0) for s in statuses))
        yield refreshes
        coalesced = CounterMetricFamily(
            "lake_snapshot_refreshes_coalesced",
            "Catalog snapshot refresh requests that joined the load in flight instead of loading.",
        )
        coalesced.add_metric([], sum(s.get("coalesced", 0) for s in statuses))
        yield coalesced
        failures = CounterMetricFamily(
            "lake_snapshot_refresh_failures",
            "Catalog snapshot refreshes that failed (the last good snapshot kept serving).",
        )
        failures.add_metric([], sum(s.get("failures", 0) for s in statuses))
        yield failures
        pool = GaugeMetricFamily(
            "lake_query_memory_pool_limit_bytes",
            "The DataFusion memory pool's size (LAKE_FLIGHT_MEMORY_LIMIT_BYTES); beyond it queries spill.",
        )
        spill = GaugeMetricFamily(
            "lake_query_spill_bytes", "Bytes of spill files on disk now (DataFusion's spill folder)."
        )
        if engines:
            pool.add_metric([], sum(size for _, size in engines))
            spill.add_metric([], sum(_folder_bytes(folder) for folder in {folder for folder, _ in engines}))
        yield pool
        yield spill
        yield from self._cache_families(live)


class _Counted:
    """The counters of stopped servers' snapshot caches (``status()``'s numbers but the gauges'),
    summed as caches stop."""

    _GAUGES = frozenset({"age_seconds", "tables", "ttl_seconds", "max_stale_seconds"})

    def __init__(self, status: dict[str, Any]) -> None:
        self._counts: dict[str, float] = {
            k: v
            for k, v in status.items()
            if k not in self._GAUGES and isinstance(v, int | float) and not isinstance(v, bool)
        }

    def add(self, other: _Counted) -> None:
        for key, count in other._counts.items():
            self._counts[key] = self._counts.get(key, 0) + count

    def status(self) -> dict[str, Any]:
        return dict(self._counts)


def _folder_bytes(root: Path) -> int:
    total = 0
    try:
        for path in root.rglob("*"):
            try:
                if path.is_file():
                    total += path.stat().st_size
            except OSError:
                continue  # a spill file removed while we walk
    except OSError:
        return 0
    return total


WATCHED = _Watched()
REGISTRY.register(WATCHED)


def watch_snapshots(cache: SnapshotSource) -> None:
    WATCHED.watch_snapshots(cache)


def unwatch_snapshots(cache: SnapshotSource) -> None:
    WATCHED.unwatch_snapshots(cache)


def watch_engine(engine: Any, spill_dir: Path, pool_bytes: int) -> None:
    WATCHED.watch_engine(engine, spill_dir, pool_bytes)
