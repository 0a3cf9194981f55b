"""Splitting a planned query into disjoint parts of its snapshot, and planning one part.

A query can be split when its result is a row-wise function of one table's rows: a scan,
filter or projection of exactly one table (after DataFusion's optimizer, so a subquery that
became a join is seen as one), with no aggregate, sort, limit, distinct, window, join or union.
Such a query run over a subset of the table's fragments returns exactly the result rows that
come from those fragments, so the results of parts that partition the fragments add up to the
whole result, each row once.

A part is a set of fragment ids of the *pinned* version (inclusive id ranges, sorted, disjoint):
the version is immutable, so the same ranges select the same fragments on any replica at any
later time. Parts are sized from the manifest alone (rows after deletions, data bytes).

A query with an equality (or IN-list) conjunct on a column is treated as a point or key lookup
and keeps one endpoint: its result is small, and one stream answers it with the latency of
today's single endpoint.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from datafusion.catalog import Table

from lake_platform.engine import fragments as lance_fragments
from lake_platform.engine import lance_engine as engine
from lake_platform.lru import BoundedLRU
from lake_platform.query.part import MAX_RANGES, Part
from lake_platform.query.planner import PlannedQuery
from lake_platform.query.snapshot import TableRef


def ordered(planned: PlannedQuery) -> bool:
    """Whether the result's order is part of the answer (a sort at the top of the plan)."""
    return planned.facts.ordered


@dataclass(frozen=True)
class Sizing:
    """How big a part should be, and how many there may be."""

    target_rows: int
    target_bytes: int
    max_parts: int


def partition(table: str, sizes: Sequence[lance_fragments.FragmentSize], sizing: Sizing) -> list[Part] | None:
    """Contiguous runs of fragments (manifest order) with about equal rows, one per part;
    None when one part is enough. Every fragment is in exactly one part (empty ones too)."""
    rows = sum(s.rows for s in sizes)
    size = sum(s.bytes for s in sizes)
    count = min(
        sizing.max_parts,
        len(sizes),
        max(math.ceil(rows / sizing.target_rows), math.ceil(size / sizing.target_bytes)),
    )
    if count < 2:
        return None
    share = rows / count
    groups: list[list[int]] = [[]]
    done = 0
    for i, frag in enumerate(sizes):
        left = len(sizes) - i  # fragments still to place, this one included
        room = count - len(groups)  # groups still to open after the current one
        if groups[-1] and room and (done >= share * len(groups) or left <= room):
            groups.append([])
        groups[-1].append(frag.id)
        done += frag.rows
    return [Part.of(table, ids) for ids in groups if ids]


def split(
    planned: PlannedQuery, sizes: Callable[[TableRef], list[lance_fragments.FragmentSize]], sizing: Sizing
) -> list[Part] | None:
    """The parts ``planned`` is answered in, or None for one endpoint (not splittable, or
    small). ``sizes``: a ref's fragments (:class:`FragmentSizes`)."""
    if sizing.max_parts < 2 or len(planned.refs) != 1:
        return None
    ref = planned.refs[0]
    frags = sizes(ref)
    if len(frags) < 2 or (
        sum(s.rows for s in frags) <= sizing.target_rows
        and sum(s.bytes for s in frags) <= sizing.target_bytes
    ):
        return None  # small: no need to look at the plan
    if planned.facts.point or not planned.facts.row_wise:
        return None  # a point query (decided without running the optimizer), or not row-wise
    return partition(ref.name, frags, sizing)


class FragmentSizes:
    """Fragment sizes per exact snapshot, read once from its manifest (an LRU; versions are
    immutable). Thread-safe."""

    def __init__(self, dataset: Callable[[TableRef], Any], capacity: int = 256) -> None:
        self._dataset = dataset
        self._sizes: BoundedLRU[Any, list[lance_fragments.FragmentSize]] = BoundedLRU(capacity)

    def __call__(self, ref: TableRef) -> list[lance_fragments.FragmentSize]:
        return self._sizes.get_or_make(ref.key, lambda: lance_fragments.fragment_sizes(self._dataset(ref)))


class PartTables:
    """DataFusion tables over parts of pinned snapshots (an LRU: parts are immutable too)."""

    def __init__(self, query_engine: Any, capacity: int = 64) -> None:
        self._engine = query_engine
        self._opened: BoundedLRU[tuple[Any, Part], Table] = BoundedLRU(capacity)

    def __len__(self) -> int:
        return len(self._opened)

    def opener(self, part: Part) -> Callable[..., Table]:
        """An ``open_table`` for the planner: ``part``'s table restricted, any other as usual.

        A part never reads the snapshot cache: its fragments are a slice of the snapshot, and
        the cache holds whole snapshots (``cache_mode`` is taken and ignored)."""

        def open_table(ref: TableRef, verify: bool, cache_mode: str | None = None) -> Table:
            table = self._engine.table(ref, verify=verify)  # checks the snapshot exists
            if ref.name != part.table:
                return table
            return self._part(ref, part)

        return open_table

    def _part(self, ref: TableRef, part: Part) -> Table:
        return self._opened.get_or_make((ref.key, part), lambda: self._open_part(ref, part))

    def _open_part(self, ref: TableRef, part: Part) -> Table:
        base = self._engine.dataset(ref)
        keep = [f.id for f in lance_fragments.fragment_sizes(base) if part.contains(f.id)]
        ds = lance_fragments.restricted(base, keep, self._engine.settings.storage_options(ref.location))
        return Table(engine.table_provider(ds))


__all__ = [
    "MAX_RANGES",
    "FragmentSizes",
    "Part",
    "PartTables",
    "Sizing",
    "ordered",
    "partition",
    "split",
]
