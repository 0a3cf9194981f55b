"""What the registry names, read for the maintenance scans that compare storage with it (orphan
files of a table, orphan table folders of a warehouse) and for the commands that only list or
look up containers. Reads only: nothing here writes the registry."""

from __future__ import annotations

from dataclasses import dataclass, field

from lake_platform.catalog.context import CatalogContext
from lake_platform.catalog.principals import UserRecord
from lake_platform.naming import ProjectName, TableName
from lake_platform.registry import keys
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


@dataclass
class KnownStorage:
    """Every table location (without a trailing slash) and incarnation the registry names:
    registered tables (declared ones included) and table trash records."""

    locations: set[str] = field(default_factory=set)
    incarnations: set[str] = field(default_factory=set)

    def names(self, location: str, incarnation: str) -> bool:
        return location.rstrip("/") in self.locations or incarnation in self.incarnations


class Inventory:
    def __init__(self, ctx: CatalogContext) -> None:
        self.ctx = ctx

    def known_storage(self) -> KnownStorage:
        """Every location and incarnation the registry names, in any warehouse (tables, then
        the trash)."""
        known = KnownStorage()
        for item in self.ctx.store.scan_prefix(keys.tables_under()):
            record = decode(TableRecord, item.value, item.key)
            known.locations.update({record.location.rstrip("/"), record.folder_uri.rstrip("/")})
            known.incarnations.add(record.incarnation)
        for item in self.ctx.store.scan_prefix(keys.trash_prefix()):
            trash = decode(TrashRecord, item.value, item.key)
            if trash.table is not None:
                known.locations.update({trash.table.location.rstrip("/"), trash.table.folder_uri.rstrip("/")})
                known.incarnations.add(trash.table.incarnation)
        return known

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
