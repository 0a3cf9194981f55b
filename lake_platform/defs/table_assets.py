"""Registered tables as Dagster assets: what lineage from a user's assets into the lake's tables
is drawn through.

- ``table_observation_sensor`` observes every registered table whose version moved since its
  last tick: one ``AssetObservation`` per table version, under the key the ``lake`` resource's
  ``namespaces`` give it (``asset_tables.key_for_table``), carrying its version, schema and row
  count (Dagster's ``dagster/table_name``, ``dagster/column_schema``, ``dagster/row_count``).
  The asset catalog lists every table so, and an input the IO manager loads from a table no
  asset materializes reads the version last observed.
- ``table_specs`` declares named tables as external assets (kind ``lance``), so they appear in
  the asset graph with their lineage to the assets that read them, before any observation.
- ``table_observation`` is the one observation of a table version: the sensor's, and the table
  maintenance runs' (``defs/maintenance.py``), which add what they rewrote or removed, so a
  table's Events tab shows its maintenance.
- ``TickTables``: which tables a per-table sensor tick visits (the compaction and check sensors).

Nothing is read when the code location loads: the set of tables comes from the registry on each
tick, never at import.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import dagster as dg

from lake_platform.defs.asset_tables import key_for_table, table_metadata
from lake_platform.defs.io_manager import IO_MANAGER_KEY
from lake_platform.defs.resources import LakeResource

if TYPE_CHECKING:
    from lake_platform.catalog.catalog import Catalog
    from lake_platform.catalog.reads import TableSnapshot

#: Tables (whose version moved) a tick opens for their row count: the rest wait for the next
#: tick, in name order after the last one observed.
OBSERVED_PER_TICK = 50
GROUP = "lake_tables"


def table_specs(
    tables: Iterable[str],
    namespaces: Mapping[str, str] | None = None,
    *,
    io_manager_key: str = IO_MANAGER_KEY,
) -> list[dg.AssetSpec]:
    """External assets for the named tables (their data is written through the catalog, never
    materialized by this code location): kind ``lance``, group ``lake_tables``; an asset that
    takes one as an input loads it through the Lake IO manager under ``io_manager_key``."""
    return [
        dg.AssetSpec(
            key=key_for_table(table, namespaces or {}),
            group_name=GROUP,
            kinds={"lance"},
            description=f"Lance table {table}, governed by the lake's registry.",
            metadata={"dagster/table_name": table},
        ).with_io_manager_key(io_manager_key)
        for table in tables
    ]


def table_observation(
    snapshot: TableSnapshot, namespaces: Mapping[str, str], extra: Mapping[str, object] | None = None
) -> dg.AssetObservation:
    """An observation of main's version ``snapshot`` of its table: version, schema and row count
    (manifest metadata, no data read), plus ``extra`` (what a maintenance run did)."""
    table = str(snapshot.name)
    metadata = table_metadata(table, snapshot.version, snapshot.schema, snapshot.count_rows())
    return dg.AssetObservation(
        asset_key=key_for_table(table, namespaces),
        metadata={**metadata, **(extra or {})},
        tags={"dagster/data_version": f"{snapshot.record.incarnation}:{snapshot.version}"},
    )


@dataclass
class TickTables:
    """The tables one sensor tick visits: those whose head moved since the cursor last saw them
    (``moved``, in name order, at most ``moved_limit``), then ``sweep_limit`` others round-robin
    (``swept``: what a moved head does not show, such as a changed policy, a branch write or time
    passing). Reads the registry's table records only."""

    heads: dict[str, str]  # table -> "incarnation:version"
    seen: dict[str, str]
    moved: list[str]
    swept: list[str]
    sweep_from: str

    @classmethod
    def of(cls, catalog: Catalog, cursor: str | None, moved_limit: int, sweep_limit: int) -> TickTables:
        state = json.loads(cursor) if cursor else {}
        seen, sweep_from = dict(state.get("seen", {})), str(state.get("sweep", ""))
        heads = {r.name: f"{r.incarnation}:{r.current_version}" for r in catalog.reads.list_tables()}
        moved = sorted(t for t, at in heads.items() if seen.get(t) != at)[:moved_limit]
        ring = sorted(t for t in heads if t > sweep_from) + sorted(t for t in heads if t <= sweep_from)
        skip = set(moved)
        return cls(heads, seen, moved, [t for t in ring if t not in skip][:sweep_limit], sweep_from)

    def visit(self) -> list[str]:
        """The tables to visit, each marked seen at its current head."""
        for table in self.moved + self.swept:
            self.seen[table] = self.heads[table]
        return self.moved + self.swept

    def version(self, table: str) -> int:
        return int(self.heads[table].rsplit(":", 1)[1])

    def cursor(self) -> str:
        return json.dumps(
            {
                "seen": {t: at for t, at in self.seen.items() if t in self.heads},
                "sweep": self.swept[-1] if self.swept else self.sweep_from,
            },
            sort_keys=True,
        )


@dg.sensor(
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Observes each registered table whose version moved: its version, schema and row count "
    "(one registry scan per tick; only moved tables are opened).",
)
def table_observation_sensor(context: dg.SensorEvaluationContext, lake: LakeResource) -> dg.SensorResult:
    seen: dict[str, str] = json.loads(context.cursor) if context.cursor else {}
    with lake.catalog() as catalog:
        # Registry only: name, incarnation and current version of every table (no storage I/O).
        current = {r.name: f"{r.incarnation}:{r.current_version}" for r in catalog.reads.list_tables()}
        moved = sorted(name for name, at in current.items() if seen.get(name) != at)
        events: list[dg.AssetObservation] = []
        for name in moved[:OBSERVED_PER_TICK]:
            snapshot = catalog.reads.open_table(name, int(current[name].rsplit(":", 1)[1]))
            events.append(table_observation(snapshot, lake.namespaces))
            seen[name] = current[name]
    cursor = json.dumps({name: at for name, at in seen.items() if name in current}, sort_keys=True)
    if not events:
        return dg.SensorResult(skip_reason=dg.SkipReason(f"{len(current)} tables, none moved"), cursor=cursor)
    context.log.info("observed %d tables, %d left for later ticks", len(events), len(moved) - len(events))
    return dg.SensorResult(asset_events=events, cursor=cursor)
