"""Read-only SQL over registered table versions: the engine that plans and streams it.

This module composes the query layer: one DataFusion runtime and session configuration for the
process, the cache of opened snapshots (``providers``), planning through a request-local catalog
(``planner``) and streaming the result (``stream``). Executing later (DoGet, maybe on another
replica) plans the same SQL against exactly the refs captured at planning and nothing else,
never the registry's current pointer; it fails, never falls forward, when a pinned snapshot is
gone (its incarnation dropped, or its manifest cleaned up).

All contexts share one DataFusion runtime: one memory pool (fair, spilling) and one spill
folder for the whole process, so ``memory_limit_bytes`` bounds every query together.

Nothing here reads the registry: the snapshot carries the registrations, the refs carry the
manifests, and :class:`PinnedNamespace` answers Lance from them.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Hashable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
from datafusion import RuntimeEnvBuilder, SessionConfig, SessionContext
from datafusion.catalog import Table

from lake_platform.errors import Throttling
from lake_platform.lru import BoundedLRU
from lake_platform.query import planner
from lake_platform.query.access import IndexedColumns, prefer_index
from lake_platform.query.cache import DataCache
from lake_platform.query.limits import QueryLimits
from lake_platform.query.lookup import Lookup, lookup_of, stream_lookup
from lake_platform.query.planner import PlannedQuery, Resolver
from lake_platform.query.plans import PlanCache, bound_key, plan_key, shape_key, unbound_key, view_key
from lake_platform.query.providers import Providers
from lake_platform.query.result_cache import ResultCache
from lake_platform.query.sessions import Sessions
from lake_platform.query.shapes import TextShape, prekey, shape_of
from lake_platform.query.snapshot import ProjectView, TableRef
from lake_platform.query.stream import stream
from lake_platform.query.volatility import nondeterministic_functions
from lake_platform.settings import LakeSettings

#: ``PlannedQuery.derived`` key: the snapshot cache's generation when the query was planned.
_CACHE_GENERATION = "cache_generation"
#: ``PlannedQuery.derived`` key: (scope, the plan's key for :meth:`QueryEngine.plan_pinned`).
_PINNED_KEY = "pinned_key"
#: ``PlannedQuery.derived`` key: (scope, its result's key in the result cache).
_RESULT_KEY = "result_key"
#: ``PlannedQuery.derived`` key of a key lookup planned with bound parameters: which parameter
#: each of its terms takes its value from (``Lookup.parameters_of``).
_PARAMETERS = "lookup_parameters"
#: ``PlannedQuery.derived`` key of such a lookup: the plans of the values bound last, by value.
_BINDINGS = "lookup_bindings"
#: How many bindings' plans a kept prepared lookup keeps: a few clients of one principal running
#: the same statement at once, each binding between its DoPut and its GetFlightInfo.
_BINDINGS_KEPT = 16


def _values(params: pa.RecordBatch) -> list[Any]:
    """The values of a one-row parameter batch, in parameter order."""
    return [column[0].as_py() for column in params.columns]


class _PlannedOnUse:
    """A shaped plan's DataFusion frame (``QueryEngine._shaped``), planned from its own text the
    first time anything asks for it: a lookup's way never does, and any other use gets the
    real frame of exactly that text over the same view (the same snapshots)."""

    def __init__(self, plan: Callable[[], Any]) -> None:
        self._plan = plan
        self._df: Any = None

    def __getattr__(self, name: str) -> Any:
        if self._df is None:
            self._df = self._plan()
        return getattr(self._df, name)


class QueryEngine:
    """Plans and streams read-only SQL. Thread-safe; one per process."""

    def __init__(self, settings: LakeSettings, limits: QueryLimits | None = None) -> None:
        self.settings = settings
        self.limits = limits or QueryLimits()
        self._providers = Providers(settings, self.limits.dataset_cache_size)
        spill = self.limits.spill_dir or settings.home / "spill"
        self._spill_dir = Path(spill).expanduser()
        self._spill_dir.mkdir(parents=True, exist_ok=True)
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
        # Contexts are reused across requests, each bound to one request's catalogs at a time
        # (``sessions``); the factory is looked up late so a test may swap it.
        self.sessions = Sessions(lambda: self.context(), self.limits.session_pool_size)
        # Key lookups on indexed columns of cached snapshots read Lance's index (``access``).
        self._indexed = IndexedColumns(self.dataset, self.limits.dataset_cache_size or 1)
        self.index_lookups = 0  # plannings moved from the cache to a scalar index
        self.plans = PlanCache(self.limits.plan_cache_size)
        # The prekeys of the shapes kept (``shapes.prekey``): only a text with one of them is
        # scanned for its shape. One may outlive its shape in ``plans``: the text is then
        # scanned and planned as before.
        self._prekeys: BoundedLRU[str, bool] = BoundedLRU(self.limits.plan_cache_size)
        self.cache = DataCache(
            self.limits.cache_bytes,
            admit_after=self.limits.cache_admit_after,
            partitions=self.limits.target_partitions or os.cpu_count() or 1,
        )
        self.cache.on_evict = self.plans.drop_cached  # kept plans must not hold evicted batches
        self.results = ResultCache(self.limits.result_cache_bytes, self.limits.result_cache_entry_bytes)
        nondeterministic_functions()  # asked of DataFusion once, at start, not by a first query

    # -- opening table versions ------------------------------------------------------------

    def provider(self, ref: TableRef, *, verify: bool = False) -> Any:
        """A DataFusion table provider for exactly ``ref``'s snapshot (cached per snapshot, LRU).

        ``verify``: when the provider comes from the cache, first check that the snapshot still
        exists (its manifest is still on storage), so a cleaned-up version fails here as it
        would on a replica that never opened it."""
        return self._providers.entry(ref, verify)[1]

    def table(self, ref: TableRef, *, verify: bool = False) -> Table:
        """:meth:`provider` wrapped for a catalog (the wrapper is cached with it)."""
        return self._providers.entry(ref, verify)[2]

    def dataset(self, ref: TableRef) -> Any:
        """The opened dataset of exactly ``ref``'s version (opening it if needed)."""
        return self._providers.entry(ref, False)[0]

    @property
    def spill_dir(self) -> Path:
        """The folder queries spill into (shared by every context of this engine)."""
        return self._spill_dir

    def cached_snapshots(self) -> int:
        return len(self._providers)

    @property
    def opens(self) -> int:
        """How many snapshots were opened (cache misses) since the engine started."""
        return self._providers.opens

    def _open_table(self, ref: TableRef, verify: bool, cache_mode: str | None = None) -> Table:
        """The snapshot's in-memory table when the snapshot cache holds it, else Lance's provider
        (and, when planned from the catalog, the use counts toward admitting it)."""
        return self._opener()(ref, verify, cache_mode)

    def _opener(
        self,
        served: list[TableRef] | None = None,
        bypass: frozenset[Any] = frozenset(),
        misses: list[tuple[TableRef, Any, pa.Schema, str]] | None = None,
    ) -> Callable[[TableRef, bool, str | None], Table]:
        """An ``open_table`` for one planning: records in ``served`` the refs it answered from
        the snapshot cache; opens the refs whose key is in ``bypass`` from Lance, uncounted;
        with ``misses``, a miss is recorded there to be counted once the plan is known, rather
        than counted at once."""

        def open_table(ref: TableRef, verify: bool, cache_mode: str | None = None) -> Table:
            dataset, _, table = self._providers.entry(ref, verify)
            if not self.cache.enabled or ref.key in bypass:
                return table
            schema = table.schema
            cached = self.cache.get(ref, schema)
            if cached is not None:
                if served is not None:
                    served.append(ref)
                return cached
            if cache_mode is not None and not bypass:
                if misses is not None:
                    misses.append((ref, dataset, schema, cache_mode))
                else:
                    self.cache.consider(ref, dataset, schema, cache_mode)
            return table

        return open_table

    def _planned(self, plan: Callable[[Callable[..., Table]], PlannedQuery]) -> PlannedQuery:
        """``plan(open_table)``, planned again on Lance's providers when a key lookup in it can
        use a scalar index of a snapshot the cache served (``access``): the same snapshot, the
        same rows, read through the index rather than by scanning the cached batches."""
        served: list[TableRef] = []
        misses: list[tuple[TableRef, Any, pa.Schema, str]] = []
        generation = self.cache.generation  # read first: a load or eviction meanwhile makes it stale
        planned = plan(self._opener(served, misses=misses))
        bypass = prefer_index(planned.df.logical_plan(), served, self._indexed)
        if bypass:
            self.index_lookups += 1
            served = []
            planned = plan(self._opener(served, bypass))
        planned.cached = bool(served)
        planned.derived[_CACHE_GENERATION] = generation
        if misses:
            # An index lookup never reads the cache, so it does not count toward loading the
            # snapshot into it (a table queried only by key would be loaded for nothing).
            lookups = prefer_index(planned.df.logical_plan(), [m[0] for m in misses], self._indexed)
            for ref, dataset, schema, mode in misses:
                if ref.key not in lookups:
                    self.cache.consider(ref, dataset, schema, mode)
        return planned

    # -- planning ------------------------------------------------------------------------

    def context(self) -> SessionContext:
        """A new context on the process's runtime (the pool's factory)."""
        return SessionContext(self._config, self.runtime)

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
        ``scope``: who asks (the principal); with it, a parameterless statement planned for
        the same scope over this very ``view`` is planned once (``plans``), so is a prepared
        statement's with its placeholders unbound (``prepare``), and a key lookup
        that differs from a kept one only in the literals it compares (``shapes``,
        :meth:`_shaped`) or in the values bound to its parameters (:meth:`_plan_bound`) is
        not planned at all."""
        if scope is None:
            return self._plan_view(sql, view, params, prepare)
        if params is not None:
            return self._plan_bound(scope, sql, view, params, prepare)
        key = view_key(scope, sql, view)
        kept = self._fresh(self.plans.get(key, view))
        if kept is None and prepare:
            # A statement with placeholders prepared again (a JDBC statement or an ADBC cursor
            # per execution): its unbound plan, for the schemas CreatePreparedStatement returns.
            kept = self._fresh(self.plans.get(unbound_key(scope, sql, view), view))
        shape = None
        if kept is None and len(self._prekeys) and self._prekeys.peek(prekey(sql)):
            shape = shape_of(sql)  # a text that may be of a kept shape: scanned
            kept = self._shaped(scope, sql, shape, view)
            if kept is not None:
                self._keep(key, kept, view)
        if kept is not None:
            return self._checked(kept)
        planned = self._plan_view(sql, view, params, prepare)
        if planned.parameters == 0 and planned.deterministic:
            self._keep(key, planned, view)
            self._keep_shape(scope, planned, shape, view)
        elif prepare and planned.deterministic:
            self._keep(unbound_key(scope, sql, view), planned, view)
        return planned

    def _checked(self, kept: PlannedQuery) -> PlannedQuery:
        """``kept``, after what planning checks: an older version read by time travel still
        exists."""
        for ref in kept.refs:
            if ref.at is not None:
                self._providers.entry(ref, True)
        return kept

    def _plan_bound(
        self, scope: Hashable, sql: str, view: ProjectView, params: pa.RecordBatch, prepare: bool
    ) -> PlannedQuery:
        """``sql`` with ``params`` bound (a prepared statement executed again with new values:
        DoPut, GetFlightInfo, DoGet). A key lookup whose every term compares a column to a
        parameter is kept for this scope, text, parameter types and ``view`` (``bound_key``),
        and a binding of other values is answered from it with those values, as a text of a
        kept shape is (:meth:`_shaped`): DataFusion does not plan it. Anything else is planned."""
        kept = self.kept_binding(sql, view, params, scope=scope)
        if kept is not None:
            return kept
        planned = self._plan_view(sql, view, params, prepare)
        if params.num_rows == 1 and planned.deterministic:
            lookup = self._lookup(planned)
            order = None if lookup is None else lookup.parameters_of(_values(params))
            if order is not None:
                planned.derived[_PARAMETERS] = order
                planned.derived[_BINDINGS] = BoundedLRU[tuple[Any, ...], PlannedQuery](_BINDINGS_KEPT)
                self._keep(bound_key(scope, sql, params, view), planned, view)
        return planned

    def kept_binding(
        self, sql: str, view: ProjectView, params: pa.RecordBatch, *, scope: Hashable
    ) -> PlannedQuery | None:
        """``sql`` with ``params`` bound, answered from a kept prepared key lookup
        (:meth:`_plan_bound`) with these values; None when there is none, or it cannot take
        them: nothing is planned here. The plan of the last few values bound is kept with it,
        so binding the same values again (DoPut, then its GetFlightInfo) gets the very same
        plan (counted once in ``shaped``, when it is made)."""
        if params.num_rows != 1:
            return None
        template = self._fresh(self.plans.get(bound_key(scope, sql, params, view), view))
        if template is None:
            return None
        values = _values(params)
        bindings: BoundedLRU[tuple[Any, ...], PlannedQuery] = template.derived[_BINDINGS]
        known = tuple((type(v), v) for v in values)  # True and 1 are equal, and hash alike
        planned = bindings.get(known)
        if planned is None:
            lookup = template.derived["lookup"].with_parameters(values, template.derived[_PARAMETERS])
            if lookup is None:
                return None
            planned = self._from_template(
                template, sql, lookup, lambda: self._plan_view(sql, view, params, False).df, params
            )
            bindings.put(known, planned)
        return self._checked(planned)

    def _from_template(
        self,
        template: PlannedQuery,
        sql: str,
        lookup: Lookup,
        plan: Callable[[], Any],
        params: pa.RecordBatch | None = None,
    ) -> PlannedQuery:
        """A plan of ``sql`` (bound to ``params``) that is ``template``'s key lookup with other
        values (``lookup``): the same snapshots, columns and schema. Its DataFusion frame is
        planned (``plan``) only if something asks for it (nothing on a lookup's way:
        ``structure`` is shared with the template)."""
        planned = PlannedQuery(
            sql,
            _PlannedOnUse(plan),
            template.schema,
            template.refs,
            template.parameters,
            template.lookups,
            params=params,
            structure=template.structure,
        )
        planned.derived[_CACHE_GENERATION] = template.derived[_CACHE_GENERATION]
        planned.derived["lookup"] = lookup
        self.plans.count_shaped()
        return planned

    def _shaped(
        self, scope: Hashable, sql: str, shape: TextShape | None, view: ProjectView
    ) -> PlannedQuery | None:
        """``sql`` answered from a kept key lookup of the same shape (``shapes``) over this very
        ``view``, with its own literals: the same snapshot, columns and schema, read through
        Lance's index with this text's values; None when there is none, or a value does not
        fit (the text is then planned). Its DataFusion frame is planned only if something
        asks for it (nothing on a lookup's way: ``structure`` is shared with the kept plan)."""
        if shape is None:
            return None
        template = self._fresh(self.plans.get(shape_key(scope, shape.text, view), view))
        if template is None:
            return None
        lookup = template.derived["lookup"].rebound(shape.slots)
        if lookup is None:
            return None
        return self._from_template(template, sql, lookup, lambda: self._plan_view(sql, view, None, False).df)

    def _keep_shape(
        self, scope: Hashable, planned: PlannedQuery, shape: TextShape | None, view: ProjectView
    ) -> None:
        """Keep ``planned`` for texts of its text's shape (``shape``, if already scanned) when
        it is a key lookup whose literals are exactly the slots the shape takes out
        (``Lookup.matches``). Only a key lookup's text is scanned."""
        lookup = self._lookup(planned)
        if lookup is None:
            return
        shape = shape or shape_of(planned.sql)
        if shape is None or not lookup.matches(shape.slots):
            return
        self._keep(shape_key(scope, shape.text, view), planned, view)
        self._prekeys.put(prekey(planned.sql), True)

    def _plan_view(
        self, sql: str, view: ProjectView, params: pa.RecordBatch | None, prepare: bool
    ) -> PlannedQuery:
        namespaces = set(view.namespaces)

        def plan(open_table: Callable[..., Table]) -> PlannedQuery:
            return planner.plan_in(
                self.sessions.session,
                sql,
                list(view.warehouses),
                Resolver.over_view(open_table, self.limits, view),
                self.limits,
                params,
                prepare,
                lambda wh, ns: (wh, ns) in namespaces,
            )

        return self._planned(plan)

    def plan_pinned(
        self,
        sql: str,
        refs: tuple[TableRef, ...],
        params: pa.RecordBatch | None = None,
        *,
        is_dropped: Callable[[str], bool] | None = None,
        open_table: Callable[[TableRef, bool], Table] | None = None,
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
            kept = self._fresh(self.plans.get(plan_key(scope, sql, params, refs)))
            if kept is not None:
                # What planning checks of each pinned snapshot: it still exists.
                for ref in refs:
                    self._providers.entry(ref, True)
                return kept

        def plan(opener: Callable[..., Table]) -> PlannedQuery:
            resolver = Resolver.over_refs(opener, self.limits, by_key)
            return planner.plan_pinned_in(
                self.sessions.session, sql, resolver, self.limits, refs, by_key, params
            )

        if open_table is not None:  # a part: never from the cache, never a whole-table lookup
            planned = plan(open_table)
            planned.derived["part"] = True
            return planned
        return self._planned(plan)

    def _fresh(self, kept: PlannedQuery | None) -> PlannedQuery | None:
        """``kept``, unless the snapshot cache loaded or evicted an entry since it was planned: a
        plan made on Lance's provider before its snapshot was loaded would keep the query off
        the cached batches for as long as it is kept (a repeated query would never use the
        cache), and one over an evicted entry must not hold its batches. Planning again is
        right then, and rare (once per load or eviction)."""
        if kept is None or kept.derived.get(_CACHE_GENERATION) != self.cache.generation:
            return None
        return kept

    def _keep(self, key: tuple[Hashable, ...], planned: PlannedQuery, anchor: Any = None) -> None:
        """Keep ``planned`` unless the cache changed since it was planned. Checked after the
        put: an eviction either came first (seen here: dropped again) or comes later (its
        ``drop_cached`` drops it), so a kept plan never holds an evicted entry's batches."""
        self.plans.put(key, planned, anchor)
        if self._fresh(planned) is None:
            self.plans.drop(key, planned)

    def remember(self, scope: Hashable, planned: PlannedQuery, params: pa.RecordBatch | None) -> None:
        """Keep ``planned`` (planned for ``scope`` with ``params``) for :meth:`plan_pinned` of
        the same scope, SQL, parameters and refs. A plan that reads the clock is not kept: its
        DoGet plans again, and reads the clock then (``volatility``)."""
        if not planned.deterministic:
            return
        if params is not None:
            self._keep(plan_key(scope, planned.sql, params, planned.refs), planned)
            return
        # A kept plan is remembered on every GetFlightInfo that reuses it: its key (the same
        # scope, SQL and refs every time) is worked out once, and a plan still kept under it
        # stays as it is (DoGet's reuse is what keeps it recent).
        kept = planned.derived.get(_PINNED_KEY)
        if kept is None or (kept[0] is not scope and kept[0] != scope):
            kept = (scope, plan_key(scope, planned.sql, None, planned.refs))
            planned.derived[_PINNED_KEY] = kept
        elif self.plans.holds(kept[1], planned):
            return
        self._keep(kept[1], planned)

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
    ) -> Iterator[pa.RecordBatch]:
        """Batches of the result (see :func:`lake_platform.query.stream.stream`, also for
        ``coalesce``). A query refused for memory makes both caches give memory back.

        ``scope``: who asks (the principal); with it, the result of a deterministic query is
        kept in the result cache, and a run with the same scope, SQL, parameters and pinned
        snapshots streams the kept batches instead of running the query (``result_cache``)."""
        key = self._result_key(planned, scope)
        if key is None:
            yield from self._run(planned, cancelled, coalesce)
            return
        kept = self.results.get(key)
        if kept is not None:
            yield from kept
            return
        yield from self.results.record(key, self._run(planned, cancelled, coalesce), cancelled)

    def _run(
        self, planned: PlannedQuery, cancelled: Callable[[], bool], coalesce: bool
    ) -> Iterator[pa.RecordBatch]:
        lookup = self._lookup(planned)
        try:
            if lookup is not None:
                yield from stream_lookup(self.dataset(lookup.ref), lookup, planned, self.limits, cancelled)
            else:
                yield from stream(planned, self.limits, cancelled, coalesce=coalesce)
        except Throttling:
            self.cache.pressure()
            self.results.pressure()
            raise

    def _result_key(self, planned: PlannedQuery, scope: Hashable | None) -> tuple[Hashable, ...] | None:
        """``planned``'s key in the result cache for ``scope`` (worked out once per plan and
        scope), or None when its result is not to be kept: no scope, the cache off, a query
        that reads the clock or draws random values, or a part of a split result."""
        if (
            scope is None
            or not self.results.enabled
            or not planned.deterministic
            or planned.derived.get("part")
        ):
            return None
        kept = planned.derived.get(_RESULT_KEY)
        if kept is None or (kept[0] is not scope and kept[0] != scope):
            key = plan_key(scope, planned.sql, planned.params, planned.refs)
            kept = (scope, key)
            planned.derived[_RESULT_KEY] = kept
        return kept[1]

    def is_key_lookup(self, planned: PlannedQuery) -> bool:
        """Whether Lance answers ``planned`` from a scalar index (``lookup``): quick by nature,
        before any run of it has been timed."""
        return self._lookup(planned) is not None

    def _lookup(self, planned: PlannedQuery) -> Lookup | None:
        """``planned`` as a key lookup on an indexed column Lance answers directly (``lookup``),
        worked out once per plan; None: DataFusion executes it."""
        if "lookup" not in planned.derived:
            found = None
            if len(planned.refs) == 1 and not planned.cached and not planned.derived.get("part"):
                ref = planned.refs[0]
                found = lookup_of(planned, self.dataset(ref).schema)
                if found is not None and not found.keys & self._indexed(ref):
                    found = None
            planned.derived["lookup"] = found
        return planned.derived["lookup"]

    @property
    def shaped(self) -> int:
        """Key lookups answered from a kept plan of the same shape (``shapes``) or prepared
        statement with new bound values (:meth:`_plan_bound`), unplanned."""
        return self.plans.shaped

    def close(self) -> None:
        """Stop the snapshot cache's loader and drop its entries."""
        self.cache.close()
        self.cache.clear()
        self.results.clear()
        self.plans.clear()


__all__ = ["QueryEngine"]
