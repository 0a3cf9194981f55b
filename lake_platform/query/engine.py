"""Read-only SQL over registered table versions: the engine that plans and streams it.

This module composes the query layer: one DataFusion runtime and session configuration for the
process, the cache of opened snapshots (``providers``), planning through a request-local catalog
(``planner``) on the quickest access path (``access``), the plans kept (``plans``, ``bound``)
and streaming the result (``stream``, or ``lookup`` for a key lookup Lance answers). Executing
later (DoGet, maybe on another replica) plans the same SQL against exactly the refs captured at
planning and nothing else, never the registry's current pointer; it fails, never falls forward,
when a pinned snapshot is gone (its incarnation dropped, or its manifest cleaned up).

All contexts share one DataFusion runtime: one memory pool (fair, spilling) and one spill
folder for the whole process, so ``memory_limit_bytes`` bounds every query together.

Planning reads the registry only for what the snapshot cannot answer: a branch's head
(``branch_refs``) and a name the snapshot misses (``snapshot_miss``). Otherwise the snapshot
carries the registrations and the refs the versions, which Lance opens by location and number
(``engine.pinned``); executing a ticket reads no registry at all.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Hashable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
from datafusion import RuntimeEnvBuilder, ScalarUDF, SessionConfig, SessionContext
from datafusion.catalog import Table

from lake_platform import owner_only
from lake_platform.errors import Throttling
from lake_platform.lru import BoundedLRU
from lake_platform.query import planner, timetravel
from lake_platform.query.access import AccessPaths
from lake_platform.query.bound import BoundLookup
from lake_platform.query.branch_refs import BranchRefs
from lake_platform.query.cache import DataCache
from lake_platform.query.capped import capped_functions
from lake_platform.query.column_sizes import average_bytes
from lake_platform.query.join_bounds import check_joins
from lake_platform.query.limits import QueryLimits
from lake_platform.query.lookup import Lookup, Scanners, stream_lookup
from lake_platform.query.planner import OpenTable, PlannedQuery, Resolver
from lake_platform.query.plans import Key, PlanCache, bound_key, pinned_key, text_key
from lake_platform.query.providers import Providers
from lake_platform.query.result_cache import ResultCache
from lake_platform.query.sessions import Sessions
from lake_platform.query.snapshot import ProjectView, TableRef
from lake_platform.query.snapshot_miss import SnapshotMisses
from lake_platform.query.stream import FirstBatches, stream
from lake_platform.query.volatility import names_any, nondeterministic_functions
from lake_platform.query.work import WorkCounts
from lake_platform.settings import LakeSettings


class QueryEngine:
    """Plans and streams read-only SQL. Thread-safe; one per process."""

    def __init__(
        self, settings: LakeSettings, limits: QueryLimits | None = None, *, branches: BranchRefs | None = None
    ) -> None:
        self.settings = settings
        self.limits = limits or QueryLimits()
        #: Reads ``"t@branch:dev"`` from the registry, per query; None: branches cannot be named.
        self.branches = branches
        #: Reads a name the snapshot misses (a version, tag, branch or table committed since it
        #: was loaded) from the same registry once (``snapshot_miss``); None: the snapshot's
        #: answer stands.
        self.misses = SnapshotMisses(branches.store) if branches is not None else None
        #: The opened snapshots (``providers``; ``pause``: how a read waits for a manifest).
        self.providers = Providers(settings, self.limits.dataset_cache_size)
        spill = self.limits.spill_dir or settings.home / "spill"
        self._spill_dir = Path(spill).expanduser()
        own = self._spill_dir.absolute() == (settings.home / "spill").expanduser().absolute()
        owner_only.make_dir(self._spill_dir, narrow=own)
        # One builder for every context: they share its memory pool (an Arc inside the builder),
        # so the pool bounds the process, not each query. Each context's disk manager spills
        # into the same folder.
        self.runtime = (
            RuntimeEnvBuilder()
            .with_fair_spill_pool(self.limits.memory_limit_bytes)
            .with_disk_manager_specified(str(self._spill_dir))
        )
        config = (
            SessionConfig()
            .with_batch_size(self.limits.batch_size)
            .with_information_schema(False)
            .with_create_default_catalog_and_schema(True)
            .set("datafusion.execution.spill_compression", self.limits.spill_compression)
        )
        if self.limits.target_partitions:
            config = config.with_target_partitions(self.limits.target_partitions)
        self._config = config
        self._capped = capped_functions(self.limits.max_value_bytes)
        #: Scalar functions added with :meth:`register_function`, by name.
        self._functions: dict[str, ScalarUDF] = {}
        # Contexts are reused across requests, each bound to one request's catalogs at a time
        # (``sessions``); the factory is looked up late so a test may swap it.
        #: Plannings and runs, for ``/metrics`` (``work.stats()``).
        self.work = WorkCounts()
        self.sessions = Sessions(lambda: self.context(), self.limits.session_pool_size, self.work)
        self.plans = PlanCache(self.limits.plan_cache_size)
        self.cache = DataCache(
            self.limits.cache_bytes,
            admit_after=self.limits.cache_admit_after,
            partitions=self.limits.target_partitions or os.cpu_count() or 1,
        )
        self.cache.on_evict = self.plans.drop_cached  # kept plans must not hold evicted batches
        self.access = AccessPaths(self.providers, self.cache, self.limits.dataset_cache_size or 1)
        self.results = ResultCache(self.limits.result_cache_bytes, self.limits.result_cache_entry_bytes)
        #: Lance's scanner of each kept key lookup, made once and read again (``stats()``: made,
        #: reused, for ``/metrics``).
        self.scanners = Scanners(self.limits.plan_cache_size)
        self._first_batches = FirstBatches()
        self._row_counts: BoundedLRU[TableRef, int] = BoundedLRU(max(self.limits.dataset_cache_size, 1))
        self._column_bytes: BoundedLRU[TableRef, dict[str, float]] = BoundedLRU(
            max(self.limits.dataset_cache_size, 1)
        )
        # Runs each plan in a DataFrame of its own (see ``stream``'s ``frame``); the context
        # only makes DataFrames: the plans bring their tables and functions.
        self._runner = self.context()
        nondeterministic_functions()  # asked of DataFusion once, at start, not by a first query

    # -- opening table versions ------------------------------------------------------------

    def provider(self, ref: TableRef, *, verify: bool = False) -> Any:
        """A DataFusion table provider for exactly ``ref``'s snapshot (cached per snapshot, LRU).

        ``verify``: when the provider comes from the cache, first check that the snapshot still
        exists (its manifest is still on storage), so a cleaned-up version fails here as it
        would on a replica that never opened it."""
        return self.providers.entry(ref, verify)[1]

    def table(self, ref: TableRef, *, verify: bool = False) -> Table:
        """:meth:`provider` wrapped for a catalog (the wrapper is cached with it)."""
        return self.providers.entry(ref, verify)[2]

    def dataset(self, ref: TableRef) -> Any:
        """The opened dataset of exactly ``ref``'s version (opening it if needed)."""
        return self.providers.entry(ref, False)[0]

    @property
    def spill_dir(self) -> Path:
        """The folder queries spill into (shared by every context of this engine)."""
        return self._spill_dir

    def cached_snapshots(self) -> int:
        return len(self.providers)

    @property
    def opens(self) -> int:
        """How many snapshots were opened (cache misses) since the engine started."""
        return self.providers.opens

    @property
    def index_lookups(self) -> int:
        """Plannings moved from the snapshot cache to a scalar index (``access``)."""
        return self.access.index_lookups

    # -- planning ------------------------------------------------------------------------

    def context(self) -> SessionContext:
        """A new context on the process's runtime (the pool's factory)."""
        context = SessionContext(self._config, self.runtime)
        for function in (*self._capped, *self._functions.values()):
            context.register_udf(function)
        return context

    def register_function(self, function: ScalarUDF) -> None:
        """Make ``function`` callable by its name in every query planned from now on (one of
        the deployment's own; DataFusion's functions of that name are shadowed). Pooled
        contexts, made without it, are dropped; plans kept or planning now are unchanged.
        It is taken as volatile: a plan that calls it is neither kept nor its result reused."""
        self._functions[function.name] = function
        self.sessions.clear()

    def deregister_function(self, name: str) -> None:
        """Undo :meth:`register_function` of ``name`` (nothing if none is registered)."""
        if self._functions.pop(name, None) is not None:
            self.sessions.clear()

    def plan(
        self,
        sql: str,
        view: ProjectView,
        params: pa.RecordBatch | None = None,
        *,
        prepare: bool = False,
        scope: Hashable | None = None,
    ) -> PlannedQuery:
        """Plan against the snapshot's current versions, capturing each table it reads.

        ``prepare``: parameters may stay unbound (a prepared statement's first planning).
        ``scope``: who asks (the principal); with it, a statement planned for the same scope
        over this very ``view`` is planned once (``plans``; with its placeholders unbound, for
        another prepare only), and a prepared key lookup bound to new values is answered from
        the plan of an earlier binding (``bound``)."""
        if scope is None:
            return self._plan_view(sql, view, params, prepare)
        if params is not None:
            return self._plan_bound(scope, sql, view, params, prepare)
        key = text_key(scope, sql, view)
        kept = self.plans.get(key, view, self.cache.generation)  # fresh: see _fresh
        if kept is not None and (prepare or not kept.parameters):
            return self._checked(kept)
        planned = self._plan_view(sql, view, None, prepare)
        if planned.deterministic and not any(timetravel.reads_branch_head(r.at) for r in planned.refs):
            self._keep(key, planned, view)  # a branch's head moves without the view: read it again
        return planned

    def _checked(self, kept: PlannedQuery) -> PlannedQuery:
        """``kept``, after what planning checks: an older version read by time travel still
        exists."""
        for ref in kept.refs:
            if ref.at is not None:
                self.providers.entry(ref, True)
        return kept

    def _plan_bound(
        self, scope: Hashable, sql: str, view: ProjectView, params: pa.RecordBatch, prepare: bool
    ) -> PlannedQuery:
        """``sql`` with ``params`` bound: answered from a kept prepared key lookup of this scope,
        text, parameter types and ``view`` (``bound``), else planned (and kept as one, if it is
        such a lookup)."""
        kept = self.plans.get_bound(bound_key(scope, sql, params, view), view)
        # A lookup never reads the snapshot cache's batches, so a kept one stays right whatever
        # the cache loads or evicts.
        if kept is not None:
            planned = kept.bind(params, lambda: self._plan_view(sql, view, params, False).df)
            if planned is not None:
                self.plans.count_rebound()
                return self._checked(planned)
        planned = self._plan_view(sql, view, params, prepare)
        bound = BoundLookup.of(planned, params)
        if bound is not None:
            self.plans.put_bound(bound_key(scope, sql, params, view), bound, view)
        return planned

    def _plan_view(
        self, sql: str, view: ProjectView, params: pa.RecordBatch | None, prepare: bool
    ) -> PlannedQuery:
        namespaces = set(view.namespaces)

        def plan(open_table: OpenTable) -> PlannedQuery:
            return planner.plan_in(
                self.sessions.session,
                sql,
                list(view.warehouses),
                Resolver.over_view(open_table, self.limits, view, self.branches, self.misses),
                self.limits,
                params,
                prepare,
                lambda wh, ns: (wh, ns) in namespaces,
            )

        return self._bounded(self.access.plan(plan))

    def plan_pinned(
        self,
        sql: str,
        refs: tuple[TableRef, ...],
        params: pa.RecordBatch | None = None,
        *,
        is_dropped: Callable[[str], bool] | None = None,
        open_table: OpenTable | None = None,
        scope: Hashable | None = None,
    ) -> PlannedQuery:
        """Plan against exactly ``refs`` (from a ticket): nothing else is visible, and the
        query must read exactly these snapshots.

        A snapshot that is gone fails with TableVersionNotFound, never falls forward: its
        incarnation is known dropped (``is_dropped``, from the process's cached catalog), or
        its manifest is no longer on storage (cleaned up, purged).

        ``open_table``: opens a ref in place of the cache (a part of a snapshot: ``split``).
        ``scope``: who asks (the principal); with it, a plan :meth:`remember` kept for exactly
        this scope, SQL, parameters and refs is reused (``plans``)."""
        by_key = planner.pinned_keys(refs, is_dropped)
        if scope is not None and open_table is None:
            kept = self.plans.get(pinned_key(scope, sql, params, refs), generation=self.cache.generation)
            if kept is not None:
                # What planning checks of each pinned snapshot: it still exists.
                for ref in refs:
                    self.providers.entry(ref, True)
                return kept

        def plan(opener: OpenTable) -> PlannedQuery:
            resolver = Resolver.over_refs(opener, self.limits, by_key)
            return planner.plan_pinned_in(
                self.sessions.session, sql, resolver, self.limits, refs, by_key, params
            )

        if open_table is not None:  # a part: never from the cache, never a whole-table lookup
            return self._bounded(replace(plan(open_table), part=True))
        return self._bounded(self.access.plan(plan))

    def _bounded(self, planned: PlannedQuery) -> PlannedQuery:
        """``planned``, unless a join of it without an equality key may compare more than
        ``max_join_pairs`` row pairs: such a join cannot be stopped once it runs (``join_bounds``).
        Checked once per planning; a kept plan was checked when it was made."""
        tables = {ref.written.split(".", 1)[1]: ref for ref in planned.refs}

        def rows_of(fqn: tuple[str, ...]) -> int | None:
            ref = tables.get(".".join(fqn))
            if ref is None:
                return None
            # Lance counts from the manifest's fragment metadata (no data read).
            return self._row_counts.get_or_make(ref, lambda: self.dataset(ref).count_rows())

        def sizes_of(fqn: tuple[str, ...]) -> dict[str, float]:
            ref = tables.get(".".join(fqn))
            if ref is None:
                return {}
            # Lance's statistics: the data files' column metadata, no data page (``column_sizes``).
            return self._column_bytes.get_or_make(
                ref, lambda: average_bytes(self.dataset(ref), rows_of(fqn) or 0)
            )

        check_joins(planned.df, rows_of, self.limits, sizes_of)
        if planned.deterministic and names_any(planned.sql, self._functions):
            return replace(planned, deterministic=False)  # a registered function: volatile
        return planned

    def _fresh(self, kept: PlannedQuery | None) -> PlannedQuery | None:
        """``kept``, unless the snapshot cache loaded or evicted an entry since it was planned: a
        plan made on Lance's provider before its snapshot was loaded would keep the query off
        the cached batches for as long as it is kept (a repeated query would never use the
        cache), and one over an evicted entry must not hold its batches. Planning again is
        right then, and rare (once per load or eviction)."""
        if kept is None or kept.cache_generation != self.cache.generation:
            return None
        return kept

    def _keep(self, key: Key, planned: PlannedQuery, anchor: Any = None) -> None:
        """Keep ``planned`` unless the cache changed since it was planned. Checked after the
        put: an eviction either came first (seen here: dropped again) or comes later (its
        ``drop_cached`` drops it), so a kept plan never holds an evicted entry's batches."""
        self.plans.put(key, planned, anchor)
        if self._fresh(planned) is None:
            self.plans.drop(key, planned)

    def remember(self, scope: Hashable, planned: PlannedQuery, params: pa.RecordBatch | None) -> None:
        """Keep ``planned`` (planned for ``scope`` with ``params``) for :meth:`plan_pinned` of
        the same scope, SQL, parameters and refs. A plan that reads the clock is not kept: its
        DoGet plans again, and reads the clock then (``volatility``). A plan still kept under
        its key stays as it is (DoGet's reuse is what keeps it recent)."""
        if not planned.deterministic:
            return
        key = pinned_key(scope, planned.sql, params, planned.refs)
        if not self.plans.holds(key, planned):
            self._keep(key, planned)

    # -- time limit ------------------------------------------------------------------------

    def deadline(self) -> float | None:
        """The monotonic time by which work started now must end (None: no limit)."""
        return planner.deadline(self.limits)

    def check_deadline(self, deadline: float | None, doing: str = "the query") -> None:
        """QueryTimeout (DEADLINE_EXCEEDED) once ``deadline`` has passed."""
        planner.check_deadline(self.limits, deadline, doing)

    # -- execution -----------------------------------------------------------------------

    def stream(
        self,
        planned: PlannedQuery,
        cancelled: Callable[[], bool] = lambda: False,
        *,
        coalesce: bool = True,
        scope: Hashable | None = None,
        blocking: bool = False,
    ) -> Iterator[pa.RecordBatch]:
        """Batches of the result (see :func:`lake_platform.query.stream.stream`, also for
        ``coalesce`` and ``blocking``). A query refused for memory makes both caches give
        memory back.

        ``scope``: who asks (the principal); with it, the result of a deterministic query is
        kept in the result cache, and a run with the same scope, SQL, parameters and pinned
        snapshots streams the kept batches instead of running the query (``result_cache``).
        A part of a split result is never kept."""
        if scope is None or not self.results.enabled or not planned.deterministic or planned.part:
            yield from self._run(planned, cancelled, coalesce, blocking)
            return
        key = pinned_key(scope, planned.sql, planned.params, planned.refs)
        kept = self.results.get(key)
        if kept is not None:
            yield from kept
            return
        yield from self.results.record(key, self._run(planned, cancelled, coalesce, blocking), cancelled)

    def _run(
        self, planned: PlannedQuery, cancelled: Callable[[], bool], coalesce: bool, blocking: bool = False
    ) -> Iterator[pa.RecordBatch]:
        self.work.ran()
        try:
            if planned.lookup is not None:
                yield from self._run_lookup(planned, planned.lookup, cancelled)
            else:
                yield from stream(
                    planned,
                    self.limits,
                    cancelled,
                    coalesce=coalesce,
                    first_batches=self._first_batches,
                    blocking=blocking,
                    frame=self._runner.create_dataframe_from_logical_plan(planned.df.logical_plan()),
                )
        except Throttling:
            self.cache.pressure()
            self.results.pressure()
            raise

    def _run_lookup(
        self, planned: PlannedQuery, lookup: Lookup, cancelled: Callable[[], bool]
    ) -> Iterator[pa.RecordBatch]:
        def scanner() -> Any:
            return self.scanners.scanner(self.dataset(lookup.ref), lookup, self.limits.batch_size)

        return stream_lookup(scanner, planned.schema, planned.refs, self.limits, cancelled)

    def first_batch_seconds(self, planned: PlannedQuery) -> float | None:
        """Seconds ``planned``'s last run through DataFusion took to its first batch (None: not
        run yet, or a key lookup Lance answers)."""
        return self._first_batches.get(planned)

    @property
    def rebound(self) -> int:
        """Bindings of a kept prepared key lookup answered from it, unplanned (``bound``)."""
        return self.plans.rebound

    def close(self) -> None:
        """Stop the snapshot cache's loader and drop its entries."""
        self.cache.close()
        self.cache.clear()
        self.results.clear()
        self.plans.clear()


__all__ = ["QueryEngine"]
