"""Reads: the catalog's read path. Open exactly a registered version (never "latest on disk"),
describe and list tables, and read the commit log.

Shares the ``CatalogContext`` with the write path (``tables``); ``Tables`` opens its snapshots
through this service, so the read path has no dependency on the write path.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lake_platform.catalog import transaction_recovery as recovery
from lake_platform.catalog.context import CatalogContext, check_commit_id, first_line, scope_not_found
from lake_platform.catalog.manifests import Manifests
from lake_platform.catalog.provenance import UNSTATED, Provenance
from lake_platform.catalog.results import PlannedCompaction, TableInfo
from lake_platform.engine import lance_engine as engine
from lake_platform.errors import Internal, InvalidInput, TableNotFound
from lake_platform.naming import NamespaceName, TableName, check_segment
from lake_platform.registry import keys
from lake_platform.registry.records import CommitLogEntry, TableRecord, VersionRecord, decode
from lake_platform.registry.store import ABSENT

if TYPE_CHECKING:
    import pyarrow as pa


@dataclass(frozen=True)
class TableSnapshot:
    """An open, immutable view of one registered table version."""

    name: TableName
    record: TableRecord
    version: int
    dataset: Any  # lance.LanceDataset, opaque above the engine

    @property
    def schema(self) -> pa.Schema:
        return self.dataset.schema

    def to_reader(self, **scan: Any) -> pa.RecordBatchReader:
        return engine.scanner(self.dataset, **scan).to_reader()

    def count_rows(self) -> int:
        return int(self.dataset.count_rows())

    def table_provider(self) -> Any:
        return engine.table_provider(self.dataset)


class Reads:
    def __init__(self, ctx: CatalogContext, manifests: Manifests) -> None:
        self.ctx = ctx
        self.manifests = manifests
        #: How an open waits between checks for a manifest being published (tests replace it).
        self.pause: Callable[[float], None] = time.sleep

    def open_table(
        self, name: str, version: int | None = None, *, by: Provenance = UNSTATED
    ) -> TableSnapshot:
        """Open exactly the registered version (current by default); never "latest on disk"."""
        who = self.ctx.who(by.principal)
        tname = TableName.parse(name)
        self.ctx.readable(who, tname)
        record, _ = self.ctx.table(tname)
        if version is not None and not keys.valid_version(version):
            raise InvalidInput(f"invalid version {version!r}")
        record, known = self._as_read(record, version or record.current_version, current=version is None)
        return self.snapshot(tname, record, version or record.current_version, known=known)

    def head(self, tname: TableName, *, declared: bool = False) -> TableRecord:
        """The table's record as a single-table reader sees it: its head, or the version a
        multi-table commit whose writer died moving heads committed just above it
        (``transaction_recovery.committed_head``, which completes that commit). Costs one more
        get (the version key above the head: its key needs the head's incarnation and number;
        an open folds it into its read of the version it opens, ``_as_read``); a transaction
        record is read only when that version exists and names one."""
        record, _ = self.ctx.table(tname, declared=declared)
        return self._as_read(record, None)[0]

    def _as_read(
        self, record: TableRecord, version: int | None, *, current: bool = False
    ) -> tuple[TableRecord, VersionRecord | None]:
        """``record`` as a reader sees it (``head``), and the record of ``version``, the one
        about to be opened, read in the same multi-get as the version key above the head: the
        open does not read it again (``BoundTableNamespace(known=)``), so an open makes as many
        round trips as before. ``current``: the version wanted is the current one, wherever a
        committed multi-table commit puts it."""
        above = keys.version(record.incarnation, record.current_version + 1)
        if version is None:
            return recovery.committed_head(self.ctx.store, record, self.ctx.store.get(above)), None
        items = self.ctx.store.get_many(
            list(dict.fromkeys([keys.version(record.incarnation, version), above]))
        )
        seen = recovery.committed_head(self.ctx.store, record, items[-1])
        wanted = seen.current_version if current else version
        found = [decode(VersionRecord, i.value, i.key) for i in items if i is not None]
        return seen, next((v for v in found if v.version == wanted), None)

    def snapshot(
        self, tname: TableName, record: TableRecord, version: int, *, known: VersionRecord | None = None
    ) -> TableSnapshot:
        """``known``: the record of ``version``, when the caller read it with the head."""
        if record.folder is not None and version != record.current_version:
            record = self._line_of(record, version)
        storage = self.ctx.storage(record.location)
        ds = self._open(tname, record, version, storage, known)
        if ds is None and self._being_published(record, version, storage):
            ds = self._open(tname, record, version, storage)  # its writer has just linked it
        if ds is None:
            raise self._unreadable(tname, record, version)
        return TableSnapshot(tname, record, version, ds)

    def _line_of(self, record: TableRecord, version: int) -> TableRecord:
        """``record`` as read at ``version``: a line that moved (main after a branch was
        published into it) has older versions in another dataset root than its current one."""
        item = self.ctx.store.get(keys.version(record.incarnation, version))
        if item is None:
            return record  # not registered: the open says so
        where = decode(VersionRecord, item.value, item.key).location or record.folder_uri
        return record if where == record.location else record.model_copy(update={"location": where})

    def _open(
        self,
        tname: TableName,
        record: TableRecord,
        version: int,
        storage: dict[str, str],
        known: VersionRecord | None = None,
    ) -> Any:
        """The dataset at exactly ``version``, or None when its manifest is not found."""
        # Imported here: lance_namespace is heavy, and registry-only commands never open a table.
        from lake_platform.catalog.namespace import BoundTableNamespace

        ns = BoundTableNamespace(self.ctx.store, tname, record, ABSENT, storage_options=storage, known=known)
        try:
            return engine.open_version(
                namespace=ns, table_id=tname.parts, version=version, storage_options=storage
            )
        except Exception as exc:  # noqa: BLE001
            if ns.failure is not None:
                raise ns.failure from None
            if "not found" in str(exc).lower():
                return None
            raise Internal(f"cannot open {tname} at version {version}: {first_line(exc)}") from None

    def _being_published(self, record: TableRecord, version: int, storage: dict[str, str]) -> bool:
        """Whether the version's manifest appeared while waiting for its writer to link it (a
        version registered at its canonical path moments ago: the writer links the file right
        after the registry commit); False at once for an older version."""
        item = self.ctx.store.get(keys.version(record.incarnation, version))
        if item is None:
            return False
        ver = decode(VersionRecord, item.value, item.key)
        if ver.staged_from is None or engine.is_staging_manifest(ver.manifest_path):
            return False
        return engine.await_published(
            record.location, ver.manifest_path, ver.committed_at_ms, storage, pause=self.pause
        )

    def _unreadable(self, tname: TableName, record: TableRecord, version: int) -> Exception:
        """``Manifests.unreadable`` of ``version``, its record read here: only on this error
        path, so an open that succeeds pays nothing for it."""
        item = self.ctx.store.get(keys.version(record.incarnation, version))
        ver = decode(VersionRecord, item.value, item.key) if item is not None else None
        return self.manifests.unreadable(tname, record, version, ver)

    def snapshot_of(self, planned: PlannedCompaction) -> TableSnapshot:
        tname = TableName.parse(planned.table)
        record, _ = self.ctx.table(tname, incarnation=planned.incarnation)
        return self.snapshot(tname, record, planned.read_version)

    def describe_table(self, name: str, *, with_stats: bool = True, by: Provenance = UNSTATED) -> TableInfo:
        import pyarrow as pa

        from lake_platform.catalog.arrow_io import schema_from_ipc

        who = self.ctx.who(by.principal)
        tname = TableName.parse(name)
        self.ctx.readable(who, tname)
        record, _ = self.ctx.table(tname)
        stats_of = with_stats and record.current_version > 0
        record, known = self._as_read(record, record.current_version if stats_of else None, current=True)
        rows = fragments = size = indexes = None
        if stats_of:
            from lake_platform.engine.indexes import list_indexes

            ds = (
                self._stats_view(record, known)
                or self.snapshot(tname, record, record.current_version, known=known).dataset
            )
            stats = engine.version_stats(ds)
            rows, fragments, size = stats.rows, stats.fragments, stats.data_bytes
            indexes = [i.to_dict() for i in list_indexes(ds)]
        schema = schema_from_ipc(record.schema_ipc) if record.schema_ipc else pa.schema([])
        return TableInfo(
            name=str(tname),
            incarnation=record.incarnation,
            location=record.location,
            engine=record.engine,
            current_version=record.current_version,
            created_at_ms=record.created_at_ms,
            protected=record.protected,
            rows=rows,
            fragments=fragments,
            data_bytes=size,
            schema=[{"name": f.name, "type": str(f.type), "nullable": f.nullable} for f in schema],
            indexes=indexes,
        )

    def _stats_view(self, record: TableRecord, known: VersionRecord | None) -> Any:
        """The current version opened by location and number when its record names its
        canonical manifest (``engine.pinned``): statistics need no namespace, and a process that
        only describes tables never imports the namespace client. None in every other case (a
        staging manifest, a line that moved, a manifest not there yet): ``snapshot`` handles those."""
        if (
            known is None
            or known.version != record.current_version
            or engine.is_staging_manifest(known.manifest_path)
        ):
            return None
        if (known.location or record.location) != record.location:
            return None
        from lake_platform.engine.pinned import open_pinned

        try:
            return open_pinned(record.location, known.version, self.ctx.storage(record.location))
        except Exception:  # noqa: BLE001  (``snapshot`` opens it again and names what is wrong)
            return None

    def list_tables(
        self, prefix: str = "", *, declared: bool = False, by: Provenance = UNSTATED
    ) -> Iterator[TableRecord]:
        """Registered tables whose dotted name starts with ``prefix`` (whole segments), among
        those the principal may read. ``declared``: tables not yet written too."""
        who = self.ctx.who(by.principal)
        parts = prefix.split(".") if prefix else []
        for part in parts:
            check_segment(part, "name prefix")
        # A listing reads what its prefix names, never a sibling sharing its first letters
        # (``p.w2`` for ``p.w``, ``ns10`` for ``ns1``): a namespace's nested namespaces' tables
        # (``ns.``) and its own (``ns/``) are one key range (one query per DynamoDB bucket).
        head = keys.tables_under(parts)
        store = self.ctx.store
        if len(parts) < 3:
            scanned = store.scan_prefix(head + "/" if parts else head)
        else:
            scanned = store.scan_range(*keys.nested_and_own(head))
        # Four parts or more may also name a table itself (``p.w.ns.t``): its key is no prefix's.
        itself = [store.get(keys.table(TableName.parse(prefix)))] if len(parts) > 3 else []
        for item in itertools.chain(itself, scanned):
            if item is not None:
                record = decode(TableRecord, item.value, item.key)
                if not prefix or record.name == prefix or record.name.startswith(prefix + "."):
                    if (record.current_version > 0 or declared) and who.can(
                        record.name.split(".")[0], "read"
                    ):
                        yield record

    def all_tables(
        self,
        *,
        after: str | None = None,
        limit: int | None = None,
        declared: bool = False,
        by: Provenance = UNSTATED,
    ) -> list[TableRecord]:
        """The tables the principal may read, in key order (namespace by namespace), the page
        after table ``after`` (a dotted name), at most ``limit``: read from the registry as far
        as the page goes, a tenant's from its own project's keys only."""
        who = self.ctx.who(by.principal)
        head = keys.tables_under() if who.project == "*" else keys.tables_under([who.project]) + "/"
        try:
            cursor = keys.table(TableName.parse(after)) if after is not None else None
        except InvalidInput:
            raise InvalidInput(f"page_token {after!r:.40} is not one this server handed out") from None
        found: list[TableRecord] = []
        while True:
            want = None if limit is None else limit - len(found)
            items = list(self.ctx.store.scan_prefix(head, start_after=cursor, limit=want))
            for item in items:
                record = decode(TableRecord, item.value, item.key)
                if (record.current_version > 0 or declared) and who.can(record.name.split(".")[0], "read"):
                    found.append(record)
            if want is None or len(items) < want or len(found) == limit:
                return found
            cursor = items[-1].key

    def tables_in(
        self,
        namespace: str,
        *,
        after: str | None = None,
        limit: int | None = None,
        declared: bool = False,
        by: Provenance = UNSTATED,
    ) -> list[TableRecord]:
        """The tables directly in ``namespace`` in name order, the page after table name
        ``after``, at most ``limit`` of them, read page by page from the registry (a listing
        never reads more of the lake than it answers). ``declared``: tables not yet written too."""
        who = self.ctx.who(by.principal)
        nname = NamespaceName.parse(namespace)
        if not who.can(nname.project, "read"):
            return []
        head = keys.tables_in_namespace(nname)
        if after is not None and not isinstance(after, str):
            raise InvalidInput("page_token must be a string")
        found: list[TableRecord] = []
        cursor = head + after if after else None
        while True:
            want = None if limit is None else limit - len(found)
            items = list(self.ctx.store.scan_prefix(head, start_after=cursor, limit=want))
            for item in items:
                record = decode(TableRecord, item.value, item.key)
                if record.current_version > 0 or declared:
                    found.append(record)
            if want is None or len(items) < want or len(found) == limit:
                return found
            cursor = items[-1].key

    def namespaces_in(
        self, parent: str, *, after: str | None = None, limit: int | None = None, by: Provenance = UNSTATED
    ) -> list[str]:
        """The names (last segment) of the namespaces directly in ``parent`` (a warehouse or a
        namespace) in name order, the page after ``after``, at most ``limit``: read from the
        registry as far as the page goes (the caller checks that ``parent`` exists)."""
        who = self.ctx.who(by.principal)
        parts = parent.split(".")
        for part in parts:
            check_segment(part, "namespace")
        if len(parts) < 2:
            raise InvalidInput("namespaces live in warehouses: give project and warehouse")
        if not who.can(parts[0], "read"):
            return []
        head = keys.namespaces(parts[0], parts[1], parts[2:])
        # After a child, its own descendants' keys (``child.x``) sort before ``child/``: the scan
        # starts again there, so a page never reads the namespaces nested in the ones it lists.
        cursor = head + str(after) + "/" if after else None
        found: list[str] = []
        while True:
            want = None if limit is None else limit - len(found)
            for item in self.ctx.store.scan_prefix(head, start_after=cursor, limit=want):
                child = item.key[len(head) :]
                if "." in child:
                    cursor = head + child.split(".", 1)[0] + "/"
                    break
                found.append(child)
                if limit is not None and len(found) >= limit:
                    return found
            else:
                return found

    def history(
        self, target: str, *, limit: int | None = None, by: Provenance = UNSTATED
    ) -> list[CommitLogEntry]:
        """The commit log of one object (table, namespace, warehouse or project), oldest first."""
        who = self.ctx.who(by.principal)
        for part in target.split(".") if isinstance(target, str) else [target]:
            check_segment(part, "name")
        if not who.can(target.split(".")[0], "read"):
            raise TableNotFound(f"{target} does not exist")
        return [
            decode(CommitLogEntry, i.value, i.key)
            for i in self.ctx.store.scan_prefix(keys.log_prefix(target), limit=limit)
        ]

    def readable_versions(self, name: str, *, by: Provenance = UNSTATED) -> tuple[str, dict[int, list[str]]]:
        """The table's incarnation and its versions a query can still read (``"t@v<N>"``) with
        their tags: those the registry still records. Version cleanup takes a version out of the
        registry before deleting its files, so a listed version may be a moment from gone, never
        the other way round. Registry only (no engine call); the version just above the head
        comes with the scan, so a committed multi-table commit its head lags is seen (and
        completed, ``transaction_recovery.committed_head``) at no extra read."""
        who = self.ctx.who(by.principal)
        tname = TableName.parse(name)
        self.ctx.readable(who, tname)
        record, _ = self.ctx.table(tname)
        registered = [
            (decode(VersionRecord, item.value, item.key), item)
            for item in self.ctx.store.scan_prefix(keys.versions(record.incarnation))
        ]
        ahead = next((i for v, i in registered if v.version == record.current_version + 1), None)
        head = recovery.committed_head(self.ctx.store, record, ahead).current_version
        return record.incarnation, {v.version: list(v.tags) for v, _ in registered if v.version <= head}

    def made_by(self, name: str, version: int, *, by: Provenance = UNSTATED) -> str | None:
        """The commit id that made main's ``version`` (a published branch's versions keep the
        ids they were committed with on the branch); None when main has no such version (never
        registered, removed, or above its head). One get beyond the head's."""
        who = self.ctx.who(by.principal)
        tname = TableName.parse(name)
        self.ctx.readable(who, tname)
        record = self.head(tname)
        if not keys.valid_version(version) or version > record.current_version:
            return None
        item = self.ctx.store.get(keys.version(record.incarnation, version))
        return decode(VersionRecord, item.value, item.key).commit_id if item is not None else None

    def commit(self, name: str, commit_id: str, *, by: Provenance = UNSTATED) -> CommitLogEntry | None:
        """The commit-log entry of the commit ``commit_id`` made on table ``name`` (None when no
        such commit landed on it): its marker, then the entry the marker names."""
        who = self.ctx.who(by.principal)
        tname = TableName.parse(name)
        self.ctx.readable(who, tname)
        marker = self.ctx.commit_landed(check_commit_id(commit_id))
        if marker is None or marker.target != str(tname) or not marker.log_key:
            return None
        item = self.ctx.store.get(marker.log_key)
        return decode(CommitLogEntry, item.value, item.key) if item is not None else None

    def log(
        self, prefix: str = "", *, limit: int | None = None, by: Provenance = UNSTATED
    ) -> list[CommitLogEntry]:
        """Every commit-log entry of objects under a dotted prefix (all of them without one). A
        prefix with no entries that names no live object (a typo, another tenant's name) is the
        NotFound ``scope`` answers for it."""
        who = self.ctx.who(by.principal)
        if prefix:
            for part in prefix.split("."):
                check_segment(part, "name prefix")
        # The entries of the objects in it (``t.``) and its own (``t/``), one key range: never
        # those of a sibling sharing its first letters (``t2`` for ``t``). Sorted below.
        scanned = (
            self.ctx.store.scan_range(*keys.nested_and_own(keys.log_under(prefix)))
            if prefix
            else self.ctx.store.scan_prefix(keys.log_under())
        )
        entries = []
        for item in scanned:
            entry = decode(CommitLogEntry, item.value, item.key)
            if prefix and not (entry.target == prefix or entry.target.startswith(prefix + ".")):
                continue
            if who.can(entry.target.split(".")[0], "read"):
                entries.append(entry)
        if prefix and not entries:
            # A typo is not an empty log: it is the NotFound a describe of the name gives (another
            # tenant's name looks the same); an existing object may have no entries (older registry).
            parts = prefix.split(".")
            if not who.can(parts[0], "read"):
                raise scope_not_found(
                    prefix, ("project", "warehouse", "namespace", "table")[min(len(parts), 4) - 1]
                )
            self.ctx.scope(prefix, who=who)
        entries.sort(key=lambda e: (e.at_ms, e.target))
        return entries[-limit:] if limit else entries
