"""What the registry names, read for the maintenance scans that compare storage with it (orphan
files of a table, orphan table folders of a warehouse) and for the commands that only list or
look up containers. Reads only: nothing here writes the registry."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from lake_platform.catalog.context import CatalogContext
from lake_platform.catalog.principals import UserRecord
from lake_platform.naming import ProjectName, TableName
from lake_platform.registry import changes, keys
from lake_platform.registry.records import (
    BranchRecord,
    LeaseRecord,
    ProjectRecord,
    TableRecord,
    TrashRecord,
    VersionRecord,
    WarehouseRecord,
    decode,
)
from lake_platform.registry.store import Item, MetaStore

#: Records read per multi-get when a watch reads what changed.
_GET_BATCH = 100


@dataclass
class KnownStorage:
    """Every table location (without a trailing slash) and incarnation the registry names:
    registered tables (declared ones included) and table trash records."""

    locations: set[str] = field(default_factory=set)
    incarnations: set[str] = field(default_factory=set)

    def names(self, location: str, incarnation: str) -> bool:
        return location.rstrip("/") in self.locations or incarnation in self.incarnations

    def add(self, item: Item) -> None:
        """What a table record (``tbl/``) or a trash record (``trs/``) names; other keys add nothing."""
        if item.key.startswith(keys.tables_under()):
            table: TableRecord | None = decode(TableRecord, item.value, item.key)
        elif item.key.startswith(keys.trash_prefix()):
            table = decode(TrashRecord, item.value, item.key).table
        else:
            return
        if table is not None:
            self.locations.update({table.location.rstrip("/"), table.folder_uri.rstrip("/")})
            self.incarnations.add(table.incarnation)


class StorageWatch:
    """``KnownStorage`` kept current through a long run (the orphan-folder reclaim) without
    reading the whole lake again: read once, then brought up to date from the registry's change
    feed (``registry/changes``), which announces every table and trash record written in the
    same transaction as the write. The feed's positions are taken before the first read, so
    whatever commits during that read is in one or the other. What the registry stopped naming
    stays named (a folder is kept one run longer). A feed that moved on further than its ring
    retains, or a registry that never announced a change, is read whole again, as before."""

    def __init__(self, store: MetaStore, read_all: Callable[[], KnownStorage]) -> None:
        self._store, self._read_all = store, read_all
        self._positions = self._feed_heads()
        self.known = read_all()

    def _feed_heads(self) -> dict[int, int] | None:
        shards = changes.read_shards(self._store)
        return None if shards is None else changes.feed_heads(self._store, shards)

    def current(self) -> KnownStorage:
        """Every location and incarnation the registry names now (and any it named since the
        first read)."""
        if self._positions is not None:
            try:
                found, self._positions = changes.changes_since(self._store, self._positions)
            except changes.FeedBehind:
                pass
            else:
                wanted = (keys.tables_under(), keys.trash_prefix())
                changed = sorted({k for change in found for k in change.keys if k.startswith(wanted)})
                for start in range(0, len(changed), _GET_BATCH):
                    for item in self._store.get_many(changed[start : start + _GET_BATCH]):
                        if item is not None:  # deleted since: still named (kept, never wrongly deleted)
                            self.known.add(item)
                return self.known
        self._positions = self._feed_heads()
        self.known = self._read_all()
        return self.known


class Inventory:
    def __init__(self, ctx: CatalogContext) -> None:
        self.ctx = ctx

    def known_storage(self) -> KnownStorage:
        """Every location and incarnation the registry names, in any warehouse (tables, then
        the trash)."""
        known = KnownStorage()
        for prefix in (keys.tables_under(), keys.trash_prefix()):
            for item in self.ctx.store.scan_prefix(prefix):
                known.add(item)
        return known

    def watch_storage(self) -> StorageWatch:
        """``known_storage`` read now, kept current by ``StorageWatch.current`` at the cost of
        what changed since, not of the lake."""
        return StorageWatch(self.ctx.store, self.known_storage)

    def lease_held(self, incarnation: str) -> bool:
        """Whether ``incarnation``'s write lease is held and not expired (a create in flight
        holds its new incarnation's lease until it commits or fails)."""
        item = self.ctx.store.get(keys.lease(incarnation))
        if item is None:
            return False
        lease = decode(LeaseRecord, item.value, item.key)
        return not lease.released and lease.deadline_ms > self.ctx.clock.wall_ms()

    def versions(self, incarnation: str) -> list[VersionRecord]:
        """The version records the registry lists for one table incarnation, oldest first."""
        return [
            decode(VersionRecord, i.value, i.key)
            for i in self.ctx.store.scan_prefix(keys.versions(incarnation))
        ]

    def named_lance_branches(self, name: TableName, record: TableRecord) -> set[str]:
        """The Lance branches (``<folder>/tree/<name>``) of the table folder the registry names:
        every branch record of the table (any incarnation, live, in the trash or being purged),
        and the published lines main's record and its versions are read from. A Lance branch
        none of them names was left by a create killed before its registry commit."""
        tree = record.folder_uri.rstrip("/") + "/tree/"
        roots = {record.location, *(v.location or "" for v in self.versions(record.incarnation))}
        named = set()
        for item in self.ctx.store.scan_prefix(keys.branches_of(name)):
            branch = decode(BranchRecord, item.value, item.key)
            named.add(branch.lance_branch)
            roots.add(branch.location)
        named |= {r.rstrip("/").removeprefix(tree).split("/", 1)[0] for r in roots if r.startswith(tree)}
        return named

    def version_registered(self, incarnation: str, version: int) -> bool:
        return self.ctx.store.get(keys.version(incarnation, version)) is not None

    def incarnation(self, name: TableName) -> str | None:
        """The incarnation registered under ``name`` now (None: no table of that name)."""
        item = self.ctx.store.get(keys.table(name))
        return decode(TableRecord, item.value, item.key).incarnation if item is not None else None

    def warehouses(self, project: str | None = None) -> list[str]:
        """Every registered warehouse (``project.warehouse``), or every one of ``project``, in
        key order."""
        return [
            decode(WarehouseRecord, i.value, i.key).name
            for i in self.ctx.store.scan_prefix(keys.warehouses(project))
        ]

    def projects(self) -> list[str]:
        """Every registered project's name, in key order."""
        return [
            decode(ProjectRecord, i.value, i.key).name for i in self.ctx.store.scan_prefix(keys.projects())
        ]

    def project(self, name: ProjectName) -> ProjectRecord | None:
        """The project's record, None when there is no such project."""
        item = self.ctx.store.get(keys.project(name))
        return decode(ProjectRecord, item.value, item.key) if item is not None else None

    def user(self, name: str) -> UserRecord | None:
        """The user record of ``name`` (a checked segment), None when there is none."""
        item = self.ctx.store.get(keys.user(name))
        return decode(UserRecord, item.value, item.key) if item is not None else None
