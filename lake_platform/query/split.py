"""Splitting a planned query into disjoint parts of its snapshot, and planning one part.

A query can be split when its result is a row-wise function of one table's rows: a scan,
filter or projection of exactly one table (after DataFusion's optimizer, so a subquery that
became a join is seen as one), with no aggregate, sort, limit, distinct, window, join or union.
Such a query run over a subset of the table's rows returns exactly the result rows that come
from those rows, so the results of parts that partition the rows add up to the whole result,
each row once.

Parts are cut by rows, not by fragments: ``count = ceil(rows / target)`` (or by bytes, at most
``max_parts``) parts of about equal live rows, whatever the fragment layout, so a one-fragment
table splits as well as a fragmented one. A part is a run of fragments of the *pinned* version
whose first and last fragment may be read in part (``Part.rows``: live-row offsets, cut where
the neighbouring part starts; such a part is read through Lance's scanner, ``_cut``). Both
are fixed by the immutable manifest, so a part selects the same rows on any replica at any
later time. Parts are sized from the manifest alone (live rows, data bytes).

A query with an equality (or IN-list) conjunct on a column is treated as a point or key lookup
and keeps one endpoint: its result is small, and one stream answers it with the latency of
today's single endpoint.
"""

from __future__ import annotations

import itertools
import math
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.dataset as pa_dataset
from datafusion.catalog import Table

from lake_platform.engine import fragments as lance_fragments
from lake_platform.engine import lance_engine as engine
from lake_platform.lru import BoundedLRU
from lake_platform.query.part import FRAGMENT_END, MAX_RANGES, Part
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
    """``ceil(rows / target)`` parts (or by bytes; at most ``max_parts``, at most one per live
    row) of about equal live rows, in manifest order; None when one part is enough. Every
    fragment is in exactly one part (empty ones too) unless parts cut it, and then the parts'
    row offsets tile it."""
    rows = sum(s.rows for s in sizes)
    size = sum(s.bytes for s in sizes)
    count = min(
        sizing.max_parts,
        rows,
        max(math.ceil(rows / sizing.target_rows), math.ceil(size / sizing.target_bytes)),
    )
    if count < 2:
        return None
    share = rows / count
    cuts, previous = [(0, 0)], 0
    for k in range(1, count):
        previous, cut = _cut_at(sizes, round(k * share), share, previous, rows)
        cuts.append(cut)
    cuts.append((len(sizes), 0))
    return [_part(table, sizes, start, end) for start, end in itertools.pairwise(cuts)]


def _cut_at(
    sizes: Sequence[lance_fragments.FragmentSize], row: int, share: float, previous: int, rows: int
) -> tuple[int, tuple[int, int]]:
    """(cut row, (fragment index, live-row offset)) of the cut nearest the ``row``-th live row
    (0 < row < rows), after the cut at row ``previous``: at the nearer end of its fragment
    when the fragment is no bigger than a part (whole fragments read through Lance's provider,
    batch for batch), inside it otherwise or when the end would leave a part empty."""
    before = 0
    for i, frag in enumerate(sizes):
        if row < before + frag.rows:
            if row > before and frag.rows <= share:
                end = before + frag.rows
                nearer = before if row - before <= end - row else end
                if previous < nearer < rows:
                    return nearer, (i, 0) if nearer == before else (i + 1, 0)
            return row, (i, row - before)
        before += frag.rows
    return rows, (len(sizes), 0)


def _part(
    table: str, sizes: Sequence[lance_fragments.FragmentSize], start: tuple[int, int], end: tuple[int, int]
) -> Part:
    """The part from ``start`` to ``end`` (fragment index, offset; end exclusive)."""
    (first, lo), (last, hi) = start, end
    if first == last:  # within one fragment
        return Part.of(table, [sizes[first].id], ((sizes[first].id, lo, hi),))
    ids = [s.id for s in sizes[first : last + 1 if hi else last]]
    cut = []
    if lo:
        cut.append((sizes[first].id, lo, FRAGMENT_END))
    if hi:
        cut.append((sizes[last].id, 0, hi))
    return Part.of(table, ids, tuple(cut))


def split(
    planned: PlannedQuery,
    sizes: Callable[[TableRef], list[lance_fragments.FragmentSize]],
    sizing: Sizing,
) -> list[Part] | None:
    """The parts ``planned`` is answered in, or None for one endpoint (not splittable, or
    small). ``sizes``: a ref's fragments (:class:`FragmentSizes`)."""
    if sizing.max_parts < 2 or len(planned.refs) != 1:
        return None
    ref = planned.refs[0]
    frags = sizes(ref)
    if (
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
        self._served = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        """Parts opened for a planning (each DoGet of a part ticket) so far."""
        with self._lock:
            return self._served

    def opener(self, part: Part) -> Callable[..., Table]:
        """An ``open_table`` for the planner: ``part``'s table restricted, any other as usual.

        A part never reads the snapshot cache: its fragments are a slice of the snapshot, and
        the cache holds whole snapshots (``cache_mode`` is taken and ignored)."""

        def open_table(ref: TableRef, verify: bool, cache_mode: str | None = None) -> Table:
            table = self._engine.table(ref, verify=verify)  # checks the snapshot exists
            if ref.name != part.table:
                return table
            with self._lock:
                self._served += 1
            return self._part(ref, part)

        return open_table

    def _part(self, ref: TableRef, part: Part) -> Table:
        if part.rows:  # a one-shot source: opened anew for each planning (each DoGet)
            return _cut(self._engine.dataset(ref), part)
        return self._opened.get_or_make((ref.key, part), lambda: self._open_part(ref, part))

    def _open_part(self, ref: TableRef, part: Part) -> Table:
        base = self._engine.dataset(ref)
        keep = [f.id for f in lance_fragments.fragment_sizes(base) if part.contains(f.id)]
        ds = lance_fragments.restricted(base, keep, self._engine.settings.storage_options(ref.location))
        return Table(engine.table_provider(ds))


def _cut(ds: Any, part: Part) -> Table:
    """A table over the part's rows of the pinned version ``ds``: its fragments in manifest
    order, each scanned by Lance with the part's live-row offset and limit where it cuts one.

    Lance's DataFusion provider takes no row range (and a filter on ``_rowaddr`` neither prunes
    rows nor stays out of ``SELECT *``), while its scanner takes ``offset``/``limit`` per
    fragment; DataFusion reads that stream as a pyarrow dataset (filters and projection applied
    as exactly as on the provider, after Lance reads every column of the part's rows). The
    stream is read once, so this table serves one planning and its one execution."""
    cut = {fid: (first, end) for fid, first, end in part.rows}

    def batches() -> Iterator[pa.RecordBatch]:
        for frag in lance_fragments.fragment_sizes(ds):
            if not part.contains(frag.id):
                continue
            first, end = cut.get(frag.id, (0, FRAGMENT_END))
            limit = None if end == FRAGMENT_END else end - first
            scan = engine.scanner(
                ds,
                fragments=[ds.get_fragment(frag.id)],
                offset=first or None,
                limit=limit,
                scan_in_order=True,
            )
            yield from scan.to_reader()

    reader = pa.RecordBatchReader.from_batches(ds.schema, batches())
    return Table(pa_dataset.dataset(reader))


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
