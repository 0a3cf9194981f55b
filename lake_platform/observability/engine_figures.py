"""What ``/metrics`` reads of a query engine at scrape time (``metrics._Watched``): each counted
part (the snapshot and result caches, the plan cache, snapshot miss reads, key lookups' Lance
scanners, the engine's plannings and runs), and the metric families made of its ``stats()``:
(metric, help, type, stats field) per figure, grouped with the label that tells parts apart."""

from __future__ import annotations

from typing import Any

#: The two query caches' figures: (metric, help, type, stats field).
_CACHE_FIGURES = (
    ("lake_query_cache_bytes", "Bytes the cache holds now.", "gauge", "used_bytes"),
    ("lake_query_cache_budget_bytes", "The cache's budget.", "gauge", "budget_bytes"),
    ("lake_query_cache_entries", "Entries the cache holds now.", "gauge", "entries"),
    ("lake_query_cache_hits", "Lookups the cache answered.", "counter", "hits"),
    ("lake_query_cache_misses", "Lookups the cache could not answer.", "counter", "misses"),
    ("lake_query_cache_evictions", "Entries evicted to stay within the budget.", "counter", "evictions"),
)


#: The plan cache's figures (``query.plans``), by the same rules.
_PLAN_FIGURES = (
    (
        "lake_query_plans_kept",
        "Plans kept for reuse now (LAKE_FLIGHT_PLAN_CACHE_SIZE): per principal, SQL and snapshot.",
        "gauge",
        "entries",
    ),
    (
        "lake_query_plan_hits",
        "Plan lookups that found a kept plan (of the same text, or a prepared key lookup of the same "
        "parameter types).",
        "counter",
        "hits",
    ),
    (
        "lake_query_plans_shaped",
        "Prepared key lookups bound to new values answered from the kept plan of an earlier binding, "
        "with their own values, unplanned.",
        "counter",
        "shaped",
    ),
)
#: Names a query asked for that the catalog snapshot lacked (``query.snapshot_miss``), by the same rules.
_MISS_FIGURES = (
    (
        "lake_snapshot_miss_reads",
        "Registry reads of a table a query named that the catalog snapshot lacked (once per name and view).",
        "counter",
        "reads",
    ),
    ("lake_snapshot_miss_found", "Of those reads, the ones that found the table.", "counter", "found"),
    (
        "lake_snapshot_miss_known_absent",
        "Names the snapshot lacked answered not found from an earlier read, without reading again.",
        "counter",
        "known_absent",
    ),
)
#: Lance's scanners of kept key lookups (``query.lookup.Scanners``), by the same rules.
_SCANNER_FIGURES = (
    (
        "lake_query_lookup_scanners_kept",
        "Lance scanners of key lookups kept for reuse now.",
        "gauge",
        "entries",
    ),
    ("lake_query_lookup_scanners_built", "Lance scanners made for key lookups.", "counter", "built"),
    (
        "lake_query_lookup_scanners_reused",
        "Key lookup runs that read through a kept Lance scanner instead of making one.",
        "counter",
        "reused",
    ),
)
#: What the engine did (``query.work``), by the same rules.
_WORK_FIGURES = (
    (
        "lake_query_plannings",
        "Queries planned by DataFusion: plan lookups that found no kept plan, and tickets whose plan "
        "this replica did not keep.",
        "counter",
        "plannings",
    ),
    (
        "lake_query_runs",
        "Query plans run (a result streamed from the result cache runs none).",
        "counter",
        "runs",
    ),
)
#: The caches of an engine; the metric families over them: (caches, figures, label name).
ENGINE_GROUPS: tuple[tuple[tuple[str, ...], tuple[tuple[str, str, str, str], ...], str | None], ...] = (
    (("snapshot", "result"), _CACHE_FIGURES, "cache"),
    (("plan",), _PLAN_FIGURES, None),
    (("miss",), _MISS_FIGURES, None),
    (("scanner",), _SCANNER_FIGURES, None),
    (("work",), _WORK_FIGURES, None),
)
#: Each cache's figures.
FIGURES = {cache: figures for group, figures, _ in ENGINE_GROUPS for cache in group}


def counted_parts(engine: Any) -> dict[str, Any]:
    """What of ``engine`` keeps figures (``misses``: only an engine that reads its misses)."""
    caches = {
        "snapshot": engine.cache,
        "result": engine.results,
        "plan": engine.plans,
        "scanner": engine.scanners,
        "work": engine.work,
    }
    if engine.misses is not None:
        caches["miss"] = engine.misses
    return caches


__all__ = ["ENGINE_GROUPS", "FIGURES", "counted_parts"]
