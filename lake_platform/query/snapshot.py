"""The reader's cached catalog snapshot (invariant 7: the request path does no registry I/O).

One :class:`CatalogSnapshot` holds what readers need: every warehouse, namespace and table
registration, each table's decoded Arrow schema and the registry records of its versions: the
current one (so a query can open it without asking the registry) and every older one still
registered, with their tags (so time travel, ``"t@v12"`` / ``"t@tag:eod"``, resolves without
registry I/O too). :func:`load_snapshot` reads one from the registry; the process keeps the
current one in its ``snapshot_cache.SnapshotCache``.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa

from lake_platform.catalog.arrow_io import schema_from_ipc
from lake_platform.catalog.principals import TokenRecord, UserRecord
from lake_platform.errors import LakeError
from lake_platform.naming import TableName
from lake_platform.query.snapshot_transactions import complete_transactions
from lake_platform.registry import keys
from lake_platform.registry.records import (
    NamespaceRecord,
    TableRecord,
    TrashRecord,
    VersionRecord,
    WarehouseRecord,
    decode,
)
from lake_platform.registry.store import MetaStore

log = logging.getLogger(__name__)


#: Table engines this server can open (a snapshot of another engine is refused as unsupported).
ENGINES = frozenset({"lance"})
_REF_KEYS = frozenset({"n", "e", "l", "i", "v", "m", "s", "t", "c"})
#: A time-travel ref also carries ``a``: the selector the query wrote (``v12``, ``tag:eod``).
_AT_REF_KEYS = _REF_KEYS | {"a"}
_MAX_REF_TEXT = 4096
#: How a query names an older version or a tag after the table name: ``"t@v12"``, ``"t@tag:eod"``.
AT_SELECTOR = re.compile(r"v([1-9][0-9]{0,17})|tag:([a-z_][a-z0-9_]{0,62})")


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


@dataclass(frozen=True)
class CachedTable:
    name: TableName
    record: TableRecord
    ref: TableRef | None  # None: the current version's record was missing at refresh time
    schema_ipc: bytes  # b"" when the registration carries no schema
    schema: pa.Schema | None
    #: Every registered (not cleaned-up) version of this incarnation, for time travel.
    versions: Mapping[int, VersionRecord] = field(default_factory=dict)
    #: Tag name -> version, from the version records (the registry is the tags' authority).
    tags: Mapping[str, int] = field(default_factory=dict)
    #: The effective policy's ``cache`` field (``auto``, ``hot``, ``off``): the snapshot cache's
    #: admission for this table.
    cache: str = "auto"

    def ref_at(self, version: int, at: str) -> TableRef | None:
        """A ref to registered ``version`` of this incarnation, written as ``at``; None if the
        registry holds no such version (never committed, or cleaned up)."""
        ver = self.versions.get(version)
        if ver is None or version > self.record.current_version:
            return None
        return _ref(self.record, ver, at)

    @property
    def catalog(self) -> str:
        return self.name.warehouse

    @property
    def db_schema(self) -> str:
        return ".".join(self.name.namespace)


@dataclass(frozen=True)
class ProjectView:
    """One tenant's part of the snapshot, indexed the way Flight SQL asks for it."""

    project: str
    warehouses: tuple[str, ...] = ()
    #: (warehouse, namespace path joined by ".") in order
    namespaces: tuple[tuple[str, str], ...] = ()
    #: (warehouse, db_schema, table) -> CachedTable
    tables: dict[tuple[str, str, str], CachedTable] = field(default_factory=dict)

    def table(self, warehouse: str, db_schema: str, table: str) -> CachedTable | None:
        return self.tables.get((warehouse, db_schema, table))

    def namespaces_of(self, warehouse: str) -> list[str]:
        return [ns for wh, ns in self.namespaces if wh == warehouse]

    def tables_in(self, warehouse: str, db_schema: str) -> list[str]:
        return sorted(t for (wh, ns, t) in self.tables if wh == warehouse and ns == db_schema)


_EMPTY = ProjectView("")


def _same_view(before: ProjectView, now: ProjectView) -> bool:
    """Whether ``now`` holds exactly what ``before`` holds: the same names and, table by table,
    the very same ``CachedTable`` (a load reuses the previous one when its record, versions and
    cache mode are unchanged, so identity is the cheap and exact test)."""
    if before.warehouses != now.warehouses or before.namespaces != now.namespaces:
        return False
    if before.tables.keys() != now.tables.keys():
        return False
    return all(before.tables[key] is cached for key, cached in now.tables.items())


@dataclass(frozen=True)
class Principals:
    """Who may still call, as the registry said when the snapshot's load began: users by name
    (project, role) and the unrevoked service tokens by id (name, project, role)."""

    users: dict[str, tuple[str, str]]
    tokens: dict[str, tuple[str, str, str]]


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
    #: Every version record by registry key, with its revision (the next load decodes only
    #: the changed ones).
    version_items: Mapping[str, tuple[int, VersionRecord]] = field(default_factory=dict, repr=False)

    def project(self, name: str) -> ProjectView:
        return self.projects.get(name, _EMPTY)

    def is_dropped(self, incarnation: str) -> bool:
        return incarnation in self.dropped

    @property
    def age(self) -> float:
        return time.monotonic() - self.loaded_at

    def table_count(self) -> int:
        return sum(len(p.tables) for p in self.projects.values())


def load_snapshot(store: MetaStore, previous: CatalogSnapshot | None = None) -> CatalogSnapshot:
    """Read every registration from the registry: one scan per record kind. The version records
    (every registered version of every table, for time travel and tags) are decoded again only
    where their revision changed since ``previous``."""
    started = time.monotonic()
    started_wall = time.time()
    principals = _load_principals(store)
    warehouses: dict[str, list[str]] = {}
    namespaces: dict[str, list[tuple[str, str]]] = {}
    for item in store.scan_prefix(keys.warehouses()):
        rec = decode(WarehouseRecord, item.value, item.key)
        project, warehouse = rec.name.split(".", 1)
        warehouses.setdefault(project, []).append(warehouse)
    for item in store.scan_prefix(keys.namespaces()):
        rec_ns = decode(NamespaceRecord, item.value, item.key)
        parts = rec_ns.name.split(".")
        namespaces.setdefault(parts[0], []).append((parts[1], ".".join(parts[2:])))
    old: dict[tuple[str, str, int], CachedTable] = {}
    if previous is not None:
        for view in previous.projects.values():
            for cached in view.tables.values():
                old[(cached.record.name, cached.record.incarnation, cached.record.current_version)] = cached
    dropped: set[str] = set()
    for item in store.scan_prefix(keys.trash_prefix()):
        trash = decode(TrashRecord, item.value, item.key)
        if trash.kind == "table" and trash.table is not None:
            dropped.add(trash.table.incarnation)
    decoded, by_incarnation = _load_versions(store, previous.version_items if previous else {})
    cache_modes = _load_cache_modes(store)
    tables: dict[str, dict[tuple[str, str, str], CachedTable]] = {}
    scanned = [decode(TableRecord, item.value, item.key) for item in store.scan_prefix(keys.tables_under())]
    # The scan pages: a multi-table commit landing meanwhile is read whole, never in part.
    for record in complete_transactions(store, scanned, by_incarnation):
        if record.current_version <= 0:
            continue  # declared, nothing committed: not visible to readers
        versions = by_incarnation.get(record.incarnation, {})
        mode = _cache_mode(cache_modes, record.name)
        cached = old.get((record.name, record.incarnation, record.current_version))
        if cached is None or cached.record != record or cached.ref is None or cached.ref.staging:
            # (A staging manifest path goes away once the catalog finalizes the version: re-read.)
            cached = cache_table(record, versions, mode)
        elif cached.versions != versions or cached.cache != mode:
            cached = _with_versions(cached, versions, mode)
        tables.setdefault(cached.name.project, {})[(cached.catalog, cached.db_schema, cached.name.table)] = (
            cached
        )
    projects = {}
    for project in set(warehouses) | set(namespaces) | set(tables):
        view = ProjectView(
            project=project,
            warehouses=tuple(sorted(warehouses.get(project, []))),
            namespaces=tuple(sorted(namespaces.get(project, []))),
            tables=tables.get(project, {}),
        )
        before = previous.projects.get(project) if previous is not None else None
        # An unchanged project keeps its view object: plans kept per view (``plans``) then
        # outlive a refresh that changed nothing there, instead of being planned again after
        # every refresh interval.
        projects[project] = before if before is not None and _same_view(before, view) else view
    done = time.monotonic()
    live = {c.record.incarnation for view in projects.values() for c in view.tables.values()}
    return CatalogSnapshot(
        loaded_at=done,
        loaded_at_wall=time.time(),
        projects=projects,
        load_seconds=done - started,
        dropped=frozenset(dropped - live),
        started_at=started,
        started_at_wall=started_wall,
        principals=principals,
        version_items=decoded,
    )


def _load_cache_modes(store: MetaStore) -> dict[str, str]:
    """Scope -> the ``cache`` field of the policy record there (one scan of the policies)."""
    from lake_platform.catalog.policies import PolicyRecord

    modes = {}
    for item in store.scan_prefix(keys.policies()):
        try:
            record = decode(PolicyRecord, item.value, item.key)
        except LakeError:  # a record a newer release wrote: it cannot hide the tables
            log.warning("unreadable policy record %s", item.key)
            continue
        modes[record.scope] = record.policy.cache
    return modes


def _cache_mode(modes: Mapping[str, str], name: str) -> str:
    """The most specific policy record on the table's path wins, whole (as ``Policies`` resolves)."""
    parts = name.split(".")
    for depth in range(len(parts), 0, -1):
        mode = modes.get(".".join(parts[:depth]))
        if mode is not None:
            return mode
    return "auto"


def _load_versions(
    store: MetaStore, previous: Mapping[str, tuple[int, VersionRecord]]
) -> tuple[dict[str, tuple[int, VersionRecord]], dict[str, dict[int, VersionRecord]]]:
    """Every version record (one scan), by key with its revision, and by incarnation and number.
    A record whose revision is unchanged since the previous load is not decoded again."""
    decoded: dict[str, tuple[int, VersionRecord]] = {}
    by_incarnation: dict[str, dict[int, VersionRecord]] = {}
    for item in store.scan_prefix(keys.all_versions()):
        hit = previous.get(item.key)
        if hit is not None and hit[0] == item.revision:
            ver = hit[1]
        else:
            ver = decode(VersionRecord, item.value, item.key)
        decoded[item.key] = (item.revision, ver)
        by_incarnation.setdefault(ver.incarnation, {})[ver.version] = ver
    return decoded, by_incarnation


def _load_principals(store: MetaStore) -> Principals:
    users = {}
    for item in store.scan_prefix(keys.users()):
        user = decode(UserRecord, item.value, item.key)
        users[user.name] = (user.project, str(user.role))
    tokens = {}
    for item in store.scan_prefix(keys.tokens()):
        token = decode(TokenRecord, item.value, item.key)
        if not token.revoked:
            tokens[token.token_id] = (token.name, token.project, str(token.role))
    return Principals(users=users, tokens=tokens)


def _ref(record: TableRecord, ver: VersionRecord, at: str | None = None) -> TableRef:
    return TableRef(
        name=record.name,
        engine=record.engine,
        location=record.location,
        incarnation=record.incarnation,
        version=ver.version,
        manifest_path=ver.manifest_path,
        manifest_size=ver.manifest_size,
        e_tag=ver.e_tag,
        committed_at_ms=ver.committed_at_ms,
        at=at,
    )


def _tags(versions: Mapping[int, VersionRecord]) -> dict[str, int]:
    return {tag: v.version for v in versions.values() for tag in v.tags}


def _with_versions(cached: CachedTable, versions: Mapping[int, VersionRecord], mode: str) -> CachedTable:
    return replace(cached, versions=versions, tags=_tags(versions), cache=mode)


def cache_table(record: TableRecord, versions: Mapping[int, VersionRecord], mode: str) -> CachedTable:
    """A table of the snapshot: ``record`` at its current version, with every registered version
    (``versions``) and the cache admission ``mode``."""
    name = TableName.parse(record.name)
    ver = versions.get(record.current_version)
    ref = _ref(record, ver) if ver is not None else None
    if ver is None:
        log.warning("table %s: version %s has no registry record", record.name, record.current_version)
    ipc = record.schema_ipc
    schema = None
    if ipc:
        try:
            schema = schema_from_ipc(ipc)
        except Exception:  # noqa: BLE001 - a broken schema hides nothing else
            log.warning("table %s: unreadable schema in its registration", record.name)
            ipc = b""
    return CachedTable(
        name=name,
        record=record,
        ref=ref,
        schema_ipc=ipc,
        schema=schema,
        versions=versions,
        tags=_tags(versions),
        cache=mode,
    )
