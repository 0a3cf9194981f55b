"""The reader's catalog snapshot, as data (``query.snapshot`` loads it and re-exports these).

One :class:`CatalogSnapshot` holds what readers need: every warehouse, namespace and table
registration, each table's decoded Arrow schema and the registry record of its current version
(so a query can open it without asking the registry). Older versions and tags (time travel,
``"t@v12"`` / ``"t@tag:eod"``) are read per table, once, when a query first asks for one
(:class:`VersionHistory`), never in bulk. Tables are kept per namespace (:class:`TableIndex`) so
a refresh that changes a few copies only their namespaces' maps.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa

from lake_platform.catalog.arrow_io import schema_from_ipc
from lake_platform.errors import LakeError
from lake_platform.naming import TableName
from lake_platform.registry import keys
from lake_platform.registry.records import TableRecord, VersionRecord, decode
from lake_platform.registry.store import MetaStore

log = logging.getLogger(__name__)


#: Table engines this server can open (a snapshot of another engine is refused as unsupported).
ENGINES = frozenset({"lance"})
_REF_KEYS = frozenset({"n", "e", "l", "i", "v", "m", "s", "t", "c"})
#: A time-travel ref also carries ``a``: the selector the query wrote (``v12``, ``tag:eod``).
_AT_REF_KEYS = _REF_KEYS | {"a"}
_MAX_REF_TEXT = 4096
#: How a query names an older version or a tag after the table name: ``"t@v12"``, ``"t@tag:eod"``.
AT_SELECTOR = re.compile(
    r"v([1-9][0-9]{0,17})|tag:([a-z_][a-z0-9_]{0,62})|branch:([a-z_][a-z0-9_]{0,62})(?:@v([1-9][0-9]{0,17}))?"
)


@dataclass(frozen=True)
class TableRef:
    """An immutable reference to exactly one registered table version: the snapshot a query
    captured (the issue's ``TableSnapshot``): SQL name, engine kind, exact location,
    incarnation id and engine version, plus the version's manifest (path, size, e-tag) so it
    can be opened without the registry. Tickets carry these (see ``lake_platform.flight``), and
    the query layer's namespace answers Lance from them.
    """

    name: str  # project.warehouse.ns[.sub...].table
    engine: str
    location: str
    incarnation: str
    version: int
    manifest_path: str
    manifest_size: int | None = None
    e_tag: str | None = None
    committed_at_ms: int | None = None
    #: None: the table as the catalog holds it now; else the time-travel selector the query wrote
    #: after the name (``v12``, ``tag:eod``), resolved to ``version`` when planned.
    at: str | None = None

    @property
    def table_name(self) -> TableName:
        return TableName.parse(self.name)

    @property
    def written(self) -> str:
        """The name with its selector (``p.w.ns.t@v12``): what one query resolves once, and what a
        ticket's pins are keyed and ordered by (a query may read ``t`` and ``"t@v3"`` together)."""
        return self.name if self.at is None else f"{self.name}@{self.at}"

    @property
    def sql_name(self) -> str:
        """The name as the caller writes it in SQL: ``warehouse.ns[.sub].table``."""
        return self.name.split(".", 1)[1]

    @property
    def key(self) -> tuple[str, str, str, int]:
        """What identifies the exact snapshot (cache key). Not the manifest path: the catalog
        moves a committed version's manifest from its staging path to its canonical one."""
        return (self.engine, self.location, self.incarnation, self.version)

    @property
    def staging(self) -> bool:
        """Whether the manifest path is a staging one (``_versions/<n>.manifest-<uuid>``) that the
        catalog replaces by the canonical path moments after the commit."""
        return ".manifest-" in self.manifest_path.rpartition("/")[2]

    def to_json(self) -> dict[str, Any]:
        return {
            "n": self.name,
            "e": self.engine,
            "l": self.location,
            "i": self.incarnation,
            "v": self.version,
            "m": self.manifest_path,
            "s": self.manifest_size,
            "t": self.e_tag,
            "c": self.committed_at_ms,
        } | ({"a": self.at} if self.at is not None else {})

    @classmethod
    def from_json(cls, data: Any) -> TableRef:
        """Parse and validate (strictly: exact keys, types, a valid table name). ValueError if not."""
        if not isinstance(data, dict) or (set(data) != _REF_KEYS and set(data) != _AT_REF_KEYS):
            raise ValueError("malformed table snapshot")
        at = data.get("a")
        if at is not None and (not isinstance(at, str) or not AT_SELECTOR.fullmatch(at)):
            raise ValueError("malformed table snapshot")
        texts = [data["n"], data["e"], data["l"], data["i"], data["m"]]
        if not all(isinstance(t, str) and 0 < len(t) <= _MAX_REF_TEXT for t in texts):
            raise ValueError("malformed table snapshot")
        version = data["v"]
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise ValueError("malformed table snapshot")
        for key in ("s", "c"):
            value = data[key]
            if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
                raise ValueError("malformed table snapshot")
        if data["t"] is not None and (not isinstance(data["t"], str) or len(data["t"]) > _MAX_REF_TEXT):
            raise ValueError("malformed table snapshot")
        try:
            TableName.parse(data["n"])
        except LakeError:
            raise ValueError("malformed table snapshot") from None
        return cls(
            name=data["n"],
            engine=data["e"],
            location=data["l"],
            incarnation=data["i"],
            version=version,
            manifest_path=data["m"],
            manifest_size=data["s"],
            e_tag=data["t"],
            committed_at_ms=data["c"],
            at=at,
        )


class VersionHistory:
    """One table incarnation's registered versions (by number) and tags, read from the registry
    the first time a query asks for a version other than the current one or for a tag (one
    prefix read of that incarnation), then kept for as long as the snapshot keeps this table:
    a refresh that sees the incarnation's version records change gives the table a new one."""

    def __init__(
        self, store: MetaStore | None, incarnation: str, known: Mapping[int, VersionRecord] | None = None
    ) -> None:
        self._store = store
        self.incarnation = incarnation
        self._versions: Mapping[int, VersionRecord] | None = known
        self._tags: dict[str, int] | None = None
        self._lock = threading.Lock()

    def versions(self) -> Mapping[int, VersionRecord]:
        with self._lock:
            if self._versions is None:
                found: dict[int, VersionRecord] = {}
                if self._store is not None:
                    for item in self._store.scan_prefix(keys.versions(self.incarnation)):
                        ver = decode(VersionRecord, item.value, item.key)
                        found[ver.version] = ver
                self._versions = found
            return self._versions

    def tags(self) -> Mapping[str, int]:
        versions = self.versions()
        with self._lock:
            if self._tags is None:
                self._tags = {tag: v.version for v in versions.values() for tag in v.tags}
            return self._tags


@dataclass(frozen=True)
class CachedTable:
    name: TableName
    record: TableRecord
    ref: TableRef | None  # None: the current version's record was missing at refresh time
    schema_ipc: bytes  # b"" when the registration carries no schema
    schema: pa.Schema | None
    #: Every registered (not cleaned-up) version of this incarnation, read on first use.
    history: VersionHistory = field(default_factory=lambda: VersionHistory(None, ""), compare=False)
    #: The effective policy's ``cache`` field (``auto``, ``hot``, ``off``): the snapshot cache's
    #: admission for this table.
    cache: str = "auto"

    @property
    def versions(self) -> Mapping[int, VersionRecord]:
        """Every registered version (registry I/O on the first call for this table)."""
        return self.history.versions()

    @property
    def tags(self) -> Mapping[str, int]:
        """Tag name -> version, from the version records (the registry is the tags' authority);
        registry I/O on the first call for this table."""
        return self.history.tags()

    def ref_at(self, version: int, at: str) -> TableRef | None:
        """A ref to registered ``version`` of this incarnation, written as ``at``; None if the
        registry holds no such version (never committed, or cleaned up). The current version
        needs no registry read; another one reads the table's history once."""
        if version > self.record.current_version:
            return None
        if version == self.record.current_version and self.ref is not None:
            return replace(self.ref, at=at)
        ver = self.versions.get(version)
        return None if ver is None else _ref(self.record, ver, at)

    @property
    def catalog(self) -> str:
        return self.name.warehouse

    @property
    def db_schema(self) -> str:
        return ".".join(self.name.namespace)


TableKey = tuple[str, str, str]


class TableIndex(Mapping[TableKey, CachedTable]):
    """A project's tables by (warehouse, namespace, table), kept per namespace so that a refresh
    changing a few tables copies their namespaces' maps, not the whole project's."""

    def __init__(self, tables: Mapping[TableKey, CachedTable] | None = None) -> None:
        by_ns: dict[tuple[str, str], dict[str, CachedTable]] = {}
        for (wh, ns, t), cached in (tables or {}).items():
            by_ns.setdefault((wh, ns), {})[t] = cached
        self._by_ns = by_ns
        self._len = sum(len(m) for m in by_ns.values())

    def __getitem__(self, key: TableKey) -> CachedTable:
        return self._by_ns[key[:2]][key[2]]

    def get(self, key: TableKey, default: Any = None) -> Any:
        inner = self._by_ns.get(key[:2])
        return default if inner is None else inner.get(key[2], default)

    def __iter__(self) -> Iterator[TableKey]:
        for (wh, ns), inner in self._by_ns.items():
            for t in inner:
                yield (wh, ns, t)

    def __len__(self) -> int:
        return self._len

    def in_namespace(self, warehouse: str, db_schema: str) -> Mapping[str, CachedTable]:
        return self._by_ns.get((warehouse, db_schema), {})

    def groups(self) -> list[tuple[str, str]]:
        """Every (warehouse, namespace) holding a table, in order."""
        return sorted(self._by_ns)

    def changed(self, puts: Mapping[TableKey, CachedTable | None]) -> TableIndex:
        """A new index with ``puts`` applied (None: removed); this one is left as it is."""
        out = TableIndex()
        by_ns = dict(self._by_ns)
        copied: set[tuple[str, str]] = set()
        size = self._len
        for (wh, ns, t), cached in puts.items():
            where = (wh, ns)
            if where not in copied:
                by_ns[where] = dict(by_ns.get(where, {}))
                copied.add(where)
            inner = by_ns[where]
            size -= t in inner
            if cached is None:
                inner.pop(t, None)
            else:
                inner[t] = cached
                size += 1
            if not inner:
                del by_ns[where]
                copied.discard(where)
        out._by_ns, out._len = by_ns, size
        return out


@dataclass(frozen=True)
class ProjectView:
    """One tenant's part of the snapshot, indexed the way Flight SQL asks for it."""

    project: str
    warehouses: tuple[str, ...] = ()
    #: (warehouse, namespace path joined by ".") in order
    namespaces: tuple[tuple[str, str], ...] = ()
    #: (warehouse, db_schema, table) -> CachedTable
    tables: TableIndex = field(default_factory=TableIndex)

    def __post_init__(self) -> None:
        if not isinstance(self.tables, TableIndex):
            object.__setattr__(self, "tables", TableIndex(self.tables))

    def table(self, warehouse: str, db_schema: str, table: str) -> CachedTable | None:
        return self.tables.get((warehouse, db_schema, table))

    def namespaces_of(self, warehouse: str) -> list[str]:
        return [ns for wh, ns in self.namespaces if wh == warehouse]

    def tables_in(self, warehouse: str, db_schema: str) -> list[str]:
        return sorted(self.tables.in_namespace(warehouse, db_schema))


_EMPTY = ProjectView("")


@dataclass(frozen=True)
class Principals:
    """Who may still call, as the registry said when the snapshot's load began: users by name
    (project, role, user record id) and the unrevoked service tokens by id (name, project, role)."""

    users: dict[str, tuple[str, str, str]]
    tokens: dict[str, tuple[str, str, str]]


@dataclass(frozen=True)
class RefreshState:
    """What a refresh by change needs beyond the views: where it stopped reading the change
    feed, and the indexes that map a changed key to what it changes."""

    #: shard -> the last change read; None: the registry had no change feed yet at the load.
    feed: Mapping[int, int] | None
    #: trash key -> the dropped table's incarnation ("" for a dropped container)
    trash: Mapping[str, str]
    #: policy scope -> its ``cache`` field
    cache_modes: Mapping[str, str]
    #: incarnation -> table name. Only ever added to (by the refresh that reads the table): an
    #: entry whose table moved on is recognised by comparing incarnations, so older snapshots
    #: sharing it stay correct.
    incarnations: dict[str, str] = field(default_factory=dict)
    #: Tables whose head was at a staging manifest path: read again by every refresh until the
    #: catalog has moved the version to its canonical path.
    staging: frozenset[str] = frozenset()
    #: Committed multi-table commits held at their last published state (``snapshot_transactions``):
    #: their records are read again by every refresh until published or their heads moved.
    held: frozenset[str] = frozenset()


@dataclass(frozen=True)
class CatalogSnapshot:
    loaded_at: float  # time.monotonic() when the load finished
    loaded_at_wall: float
    projects: dict[str, ProjectView]
    load_seconds: float = 0.0
    #: Incarnations of dropped tables still in the trash (their data is still on storage, but a
    #: ticket pinned to one of them must fail rather than read a dropped table).
    dropped: frozenset[str] = frozenset()
    #: When the load began (time.monotonic() and wall clock): it saw every registry change
    #: committed before then, so a credential verified earlier can be judged against it.
    started_at: float = 0.0
    started_at_wall: float = 0.0
    #: None: not loaded (snapshots built by hand); no one is refused on its account.
    principals: Principals | None = None
    #: None: built by hand; the next load is a cold one.
    state: RefreshState | None = field(default=None, repr=False)

    def project(self, name: str) -> ProjectView:
        return self.projects.get(name, _EMPTY)

    def is_dropped(self, incarnation: str) -> bool:
        return incarnation in self.dropped

    @property
    def age(self) -> float:
        return time.monotonic() - self.loaded_at

    def table_count(self) -> int:
        return sum(len(p.tables) for p in self.projects.values())


def _ref(record: TableRecord, ver: VersionRecord, at: str | None = None) -> TableRef:
    return TableRef(
        name=record.name,
        engine=record.engine,
        location=ver.location or record.folder_uri,  # a published branch's versions: its root
        incarnation=record.incarnation,
        version=ver.version,
        manifest_path=ver.manifest_path,
        manifest_size=ver.manifest_size,
        e_tag=ver.e_tag,
        committed_at_ms=ver.committed_at_ms,
        at=at,
    )


def cache_table(
    record: TableRecord,
    head: VersionRecord | None,
    mode: str,
    history: VersionHistory | None = None,
    *,
    schema: tuple[bytes, pa.Schema | None] | None = None,
) -> CachedTable:
    """A table of the snapshot: ``record`` at its current version (``head``: that version's
    record), with the cache admission ``mode`` and its ``history`` (read on first use). A
    ``schema`` already decoded for the same registration is reused."""
    name = TableName.parse(record.name)
    ref = _ref(record, head) if head is not None and head.version == record.current_version else None
    if ref is None:
        log.warning("table %s: version %s has no registry record", record.name, record.current_version)
    if schema is None:
        schema = _schema_of(record)
    return CachedTable(
        name=name,
        record=record,
        ref=ref,
        schema_ipc=schema[0],
        schema=schema[1],
        history=history if history is not None else VersionHistory(None, record.incarnation),
        cache=mode,
    )


def _schema_of(record: TableRecord) -> tuple[bytes, pa.Schema | None]:
    ipc = record.schema_ipc
    if not ipc:
        return b"", None
    try:
        return ipc, schema_from_ipc(ipc)
    except Exception:  # noqa: BLE001 - a broken schema hides nothing else
        log.warning("table %s: unreadable schema in its registration", record.name)
        return b"", None
