"""A name the replica's snapshot does not hold yet, read from the registry once before NOT_FOUND.

The cached snapshot (``snapshot_cache``) lags the registry by up to its refresh interval, so a
query naming what another process committed moments ago (a version above the head the snapshot
holds, ``"t@v7"``; a tag or branch it does not know; a table it does not hold, even in a
warehouse or namespace it does not know: the planner resolves those names too) would be told
"does not exist" until the next refresh. On such a miss the planner asks :class:`SnapshotMisses`
for that one table as the registry holds it now (``snapshot_head.registry_table``: its record,
then its head; a tag or an older version then reads its history) and resolves the name again
on it; only a name still missing is NOT_FOUND, with the message it always had. A version at or
below the head the snapshot holds is not a lag (never committed, or cleaned up): no read. A
registry that cannot be read makes the query UNAVAILABLE (the name may exist), never NOT_FOUND.

Bounded: what a read answered (the table, or that there is none) is kept for the written name
(``t@v7``, ``t@tag:eod``, ``t``) and the project view it missed in, so the same name asked again
over that view, one that really does not exist asked under load, reads nothing more. A refresh
that changes the project makes a new view (one nothing touched keeps its view, and then the
registry holds nothing new for it either), so a name costs at most one read per distinct name
per view, and at most :data:`CAPACITY` names are kept. A name missed before its commit is
therefore seen at the next refresh, as before. :meth:`SnapshotMisses.stats` counts the reads,
those that found a table, and the misses answered "no such table" from what a read kept (the
endpoint's health action and ``/metrics`` report them).

The snapshot itself is left as it is: a query's names still resolve once each, and a plain name
(the table's current version) is not answered from a head that is part of a multi-table commit
whose other tables the view holds at older versions, so no query sees part of such a commit.
"""

from __future__ import annotations

import threading

from lake_platform.errors import LakeError
from lake_platform.lru import BoundedLRU
from lake_platform.naming import TableName
from lake_platform.query.snapshot_head import registry_table
from lake_platform.query.snapshot_model import AT_SELECTOR, CachedTable, ProjectView
from lake_platform.registry.records import VersionRecord
from lake_platform.registry.store import MetaStore

#: Written names whose registry read is kept (the table read, or its absence), least recent out.
CAPACITY = 4096

#: (project view's id, warehouse, namespace, written table name)
_Key = tuple[int, str, str, str]


class SnapshotMisses:
    """Reads the table of a name the snapshot misses, once per name and view. Thread-safe (two
    first misses of one name may both read; the later answer is kept)."""

    def __init__(self, store: MetaStore, capacity: int = CAPACITY) -> None:
        self.store = store
        self._read: BoundedLRU[_Key, tuple[ProjectView, CachedTable | None]] = BoundedLRU(capacity)
        self._counts = {"reads": 0, "found": 0, "known_absent": 0}
        self._counts_lock = threading.Lock()

    def stats(self) -> dict[str, int]:
        """``reads``: registry reads of a missed name's table; ``found``: those that answered a
        table; ``known_absent``: misses answered "no such table" from a kept read, unread."""
        with self._counts_lock:
            return dict(self._counts)

    def _count(self, figure: str) -> None:
        with self._counts_lock:
            self._counts[figure] += 1

    def table(
        self, view: ProjectView, where: tuple[str, str, str], at: str | None, cached: CachedTable | None
    ) -> CachedTable | None:
        """The table ``where`` (warehouse, namespace, table) names in ``view`` as the registry
        holds it now, for the name written with selector ``at`` that missed on ``cached`` (the
        snapshot's table, or None); None when the miss cannot be the snapshot lagging or the
        registry holds no such table."""
        if not may_lag(cached, at):
            return None
        written = where[2] if at is None else f"{where[2]}@{at}"
        key = (id(view), where[0], where[1], written)
        kept = self._read.get(key, only_if=lambda kept: kept[0] is view)
        if kept is not None:
            if kept[1] is None:
                self._count("known_absent")
            return kept[1]
        fresh = self._read_table(view, where, at, cached)
        self._read.put(key, (view, fresh))  # the view is kept with it, so its id stays its own
        return fresh

    def _read_table(
        self, view: ProjectView, where: tuple[str, str, str], at: str | None, cached: CachedTable | None
    ) -> CachedTable | None:
        try:
            tname = TableName.parse(f"{view.project}.{where[0]}.{where[1]}.{where[2]}")
        except LakeError:
            return None  # not a name a table can have: nothing to read
        self._count("reads")
        found = registry_table(self.store, tname, cached)
        if found is None:
            return None
        fresh, head = found
        if at is None and head is not None and not _whole(view, tname, head):
            return None  # the next refresh brings the whole multi-table commit
        self._count("found")
        return fresh


def may_lag(cached: CachedTable | None, at: str | None) -> bool:
    """Whether a name missing from the snapshot may be there in the registry: a table the
    snapshot does not hold, a tag or branch (a branch's head is read per query, but of the
    incarnation the snapshot holds), or a version above the head it holds."""
    if cached is None:
        return True
    m = AT_SELECTOR.fullmatch(at) if at is not None else None
    if m is None:
        return False  # the current version of a table it holds: no miss
    return m.group(1) is None or int(m.group(1)) > cached.record.current_version


def _whole(view: ProjectView, tname: TableName, head: VersionRecord) -> bool:
    """Whether ``view`` holds every other table of the multi-table commit that made ``tname``'s
    ``head`` (if one did) at least at the version it got there."""
    for name, version in head.transaction.items():
        other = TableName.parse(name)
        if other == tname:
            continue
        sibling = view.table(other.warehouse, ".".join(other.namespace), other.table)
        if other.project != view.project or sibling is None or sibling.record.current_version < version:
            return False
    return True


__all__ = ["CAPACITY", "SnapshotMisses", "may_lag"]
