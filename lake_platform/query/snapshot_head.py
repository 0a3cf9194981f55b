"""Read-your-writes for a request that names one table at its latest version (REST QueryTable).

The process's catalog snapshot (``snapshot_cache``) is refreshed every TTL, so on its own it can
be up to that old: a ``lake ingest`` by another process was invisible to a REST query for up
to 5 s. :func:`latest_view` makes one consistent read of the table's registry record (its
head) per request, with the version key just above the head the snapshot holds (one multi-get
of two keys, cheap on SQLite and DynamoDB); when the snapshot already holds that record (the
common case) and no version of a committed multi-table commit sits above it, the snapshot's
view is answered as it is, so plans and results cached over it stay valid. When the registry has
moved on (a commit, a new table, a drop) the table is brought up to the head (its current
version record and the one above: one more multi-get) and the patched snapshot is put in the
cache (``SnapshotCache.advance``), so the next request over that head pays only the one read
again. A committed multi-table commit whose writer died moving heads is completed and its
version shown (``transaction_recovery.committed_head``): a snapshot that viewed the table there
(``snapshot_transactions``) is never put back to the old head. Flight SQL's pinned tickets never
come here: they carry their refs. :func:`registry_table` is the same read of one table for a
name a query's snapshot lacks (``snapshot_miss``), which leaves the cached snapshot as it is.
"""

from __future__ import annotations

from dataclasses import replace

from lake_platform.catalog.transaction_recovery import committed_head
from lake_platform.naming import TableName
from lake_platform.query.snapshot_cache import SnapshotCache
from lake_platform.query.snapshot_model import (
    CachedTable,
    CatalogSnapshot,
    ProjectView,
    VersionHistory,
    cache_table,
)
from lake_platform.registry import keys
from lake_platform.registry.records import TableRecord, VersionRecord, decode
from lake_platform.registry.store import MetaStore


def latest_view(cache: SnapshotCache, store: MetaStore, tname: TableName) -> ProjectView:
    """The project view of ``tname``'s project in which ``tname`` is exactly what the registry
    holds now (absent if it holds no committed version), every other table as the snapshot has it."""
    snap = cache.current()
    view = snap.project(tname.project)
    where = (tname.warehouse, ".".join(tname.namespace), tname.table)
    cached = view.table(*where)
    wanted = [keys.table(tname)]
    if cached is not None:
        # The version just above the head the snapshot holds, in the same multi-get: what a
        # multi-table commit whose writer died moving heads left above this table's head.
        wanted.append(keys.version(cached.record.incarnation, cached.record.current_version + 1))
    item, *ahead = store.get_many(wanted)
    record = decode(TableRecord, item.value, item.key) if item is not None else None
    if record is not None and record.current_version <= 0:
        record = None  # declared, nothing committed: not visible to readers
    if record is None and cached is None:
        return view
    if record is not None and cached is not None and cached.record == record and cached.ref is not None:
        if committed_head(store, record, ahead[0]) is record:
            return view
    fresh = None if record is None else _at_head(store, record, cached)[0]
    patched = _with_table(snap, tname.project, view, where, fresh)
    cache.advance(snap, patched)
    return patched.project(tname.project)


def registry_table(
    store: MetaStore, tname: TableName, cached: CachedTable | None = None
) -> tuple[CachedTable, VersionRecord | None] | None:
    """``tname`` as the registry holds it now (``cached``: as the snapshot holds it, if it does),
    with its head's version record; None if the registry holds no committed version of it. Two
    registry requests: the record, then its head and the version above (``_at_head``)."""
    item = store.get(keys.table(tname))
    record = decode(TableRecord, item.value, item.key) if item is not None else None
    if record is None or record.current_version <= 0:
        return None  # absent, or declared with nothing committed: not visible to readers
    return _at_head(store, record, cached)


def _at_head(
    store: MetaStore, record: TableRecord, cached: CachedTable | None
) -> tuple[CachedTable, VersionRecord | None]:
    """``record``'s table at its head, or at the version a committed multi-table commit put
    just above it (``committed_head``; a snapshot views it there, ``snapshot_transactions``),
    with that version's record."""
    at, above = store.get_many(
        [keys.version(record.incarnation, v) for v in (record.current_version, record.current_version + 1)]
    )
    seen = committed_head(store, record, above)
    if seen is not record:
        record, at = seen, (above if seen.current_version == record.current_version + 1 else None)
        if at is None:  # the heads moved meanwhile, past this one: its version read as it is
            at = store.get(keys.version(record.incarnation, record.current_version))
    head = decode(VersionRecord, at.value, at.key) if at is not None else None
    # The cache admission comes from the policies, which the next refresh applies again.
    mode = cached.cache if cached is not None else "auto"
    return cache_table(record, head, mode, VersionHistory(store, record.incarnation)), head


def _with_table(
    snap: CatalogSnapshot,
    project: str,
    view: ProjectView,
    where: tuple[str, str, str],
    table: CachedTable | None,
) -> CatalogSnapshot:
    tables = view.tables.changed({where: table})
    warehouses, namespaces = view.warehouses, view.namespaces
    if table is not None:
        if where[0] not in warehouses:
            warehouses = tuple(sorted({*warehouses, where[0]}))
        if where[:2] not in namespaces:
            namespaces = tuple(sorted({*namespaces, where[:2]}))
    patched = replace(view, project=project, warehouses=warehouses, namespaces=namespaces, tables=tables)
    return replace(snap, projects={**snap.projects, project: patched})


__all__ = ["latest_view", "registry_table"]
