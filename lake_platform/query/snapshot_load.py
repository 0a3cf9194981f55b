"""A cold load of the catalog snapshot: the registry's current heads, page by page.

Where a replica starts, and where a refresh lands when the change feed cannot tell it what
changed (a first load, a replica further behind than the feed retains). It reads the change
feed's position first, so every change committed after that is read again by the next refresh
(reading a key twice is harmless; missing one is not). Then, one prefix scan per record kind, the
current registrations (warehouses, namespaces, trash, policies, users, tokens, tables), the
committed multi-table commits whose heads may lag (``snapshot_transactions``) and each table's
current version record (``get_many``, a hundred at a time): never the version history, which
``snapshot.VersionHistory`` reads per table when a query asks for it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import replace

from lake_platform.catalog.principals import TokenRecord, UserRecord
from lake_platform.errors import LakeError
from lake_platform.query.snapshot_model import (
    CachedTable,
    CatalogSnapshot,
    Principals,
    ProjectView,
    RefreshState,
    TableIndex,
    TableKey,
    VersionHistory,
    cache_table,
)
from lake_platform.query.snapshot_transactions import (
    Published,
    committed_transactions,
    complete_transactions,
)
from lake_platform.registry import keys
from lake_platform.registry.changes import feed_heads, read_shards
from lake_platform.registry.records import (
    NamespaceRecord,
    TableRecord,
    TrashRecord,
    VersionRecord,
    WarehouseRecord,
    decode,
)
from lake_platform.registry.store import Item, MetaStore

log = logging.getLogger(__name__)


def cold_load(
    store: MetaStore, previous: CatalogSnapshot | None = None, published: Published | None = None
) -> CatalogSnapshot:
    """Every current registration; a table of ``previous`` whose registration and head are
    unchanged is kept as it was (its object, and so its history if read). ``published``:
    ``load_snapshot``'s."""
    started, started_wall = time.monotonic(), time.time()
    shards = read_shards(store)
    feed = feed_heads(store, shards) if shards is not None else None
    users = dict(user_entry(item) for item in store.scan_prefix(keys.users()))
    tokens = {}
    for item in store.scan_prefix(keys.tokens()):
        token_id, entry = token_entry(item)
        if entry is not None:
            tokens[token_id] = entry
    principals = Principals(users=users, tokens=tokens)
    warehouses: dict[str, set[str]] = {}
    namespaces: dict[str, set[tuple[str, str]]] = {}
    for item in store.scan_prefix(keys.warehouses()):
        project, warehouse = warehouse_of(item)
        warehouses.setdefault(project, set()).add(warehouse)
    for item in store.scan_prefix(keys.namespaces()):
        project, where = namespace_of(item)
        namespaces.setdefault(project, set()).add(where)
    trash = dict(trash_entry(item) for item in store.scan_prefix(keys.trash_prefix()))
    modes = dict(e for e in (policy_entry(i) for i in store.scan_prefix(keys.policies())) if e is not None)
    scanned = [decode(TableRecord, i.value, i.key) for i in store.scan_prefix(keys.tables_under())]
    # After the tables: a commit past its commit point whose heads did not move yet is seen.
    committed = committed_transactions(store)
    heads: dict[str, dict[int, VersionRecord]] = {}
    held: set[str] = set()  # committed, not published: read again by every refresh
    records = complete_transactions(store, scanned, heads, committed, published, held)  # 100 a request
    old = _tables_of(previous)
    tables: dict[str, dict[TableKey, CachedTable]] = {}
    incarnations: dict[str, str] = {}
    staging: dict[str, bool] = {}
    for record in records:
        if record.current_version <= 0:
            continue  # declared, nothing committed: not visible to readers
        incarnations[record.incarnation] = record.name
        head = heads.get(record.incarnation, {}).get(record.current_version)
        cached = reuse(old.get(record.name), record, cache_mode(modes, record.name))
        if cached is None:
            history = VersionHistory(store, record.incarnation)
            cached = cache_table(record, head, cache_mode(modes, record.name), history)
        tables.setdefault(cached.name.project, {})[(cached.catalog, cached.db_schema, cached.name.table)] = (
            cached
        )
        staging[record.name] = cached.ref is not None and cached.ref.staging
    projects = {}
    for project in set(warehouses) | set(namespaces) | set(tables):
        view = ProjectView(
            project=project,
            warehouses=tuple(sorted(warehouses.get(project, ()))),
            namespaces=tuple(sorted(namespaces.get(project, ()))),
            tables=TableIndex(tables.get(project, {})),
        )
        before = previous.projects.get(project) if previous is not None else None
        # An unchanged project keeps its view object: plans kept per view then outlive a load
        # that changed nothing there.
        projects[project] = before if before is not None and same_view(before, view) else view
    done = time.monotonic()
    live = set(incarnations)
    return CatalogSnapshot(
        loaded_at=done,
        loaded_at_wall=time.time(),
        projects=projects,
        load_seconds=done - started,
        dropped=frozenset(inc for inc in trash.values() if inc and inc not in live),
        started_at=started,
        started_at_wall=started_wall,
        principals=principals,
        state=RefreshState(
            feed=feed,
            trash=trash,
            cache_modes=modes,
            incarnations=incarnations,
            staging=frozenset(n for n, c in staging.items() if c),
            held=frozenset(held),
        ),
    )


def cache_mode(modes: Mapping[str, str], name: str) -> str:
    """The most specific policy record on the table's path wins, whole (as ``Policies`` resolves)."""
    parts = name.split(".")
    for depth in range(len(parts), 0, -1):
        mode = modes.get(".".join(parts[:depth]))
        if mode is not None:
            return mode
    return "auto"


def reuse(cached: CachedTable | None, record: TableRecord, mode: str) -> CachedTable | None:
    """``cached`` when it is still ``record`` at the same head, with ``mode`` (None: build anew).
    A staging manifest path goes away once the catalog finalizes the version: built anew."""
    if cached is None or cached.record != record or cached.ref is None or cached.ref.staging:
        return None
    return cached if cached.cache == mode else replace(cached, cache=mode)


def same_view(before: ProjectView, now: ProjectView) -> bool:
    """Whether ``now`` holds exactly what ``before`` holds: the same names and, table by table,
    the very same ``CachedTable`` (identity is the cheap and exact test)."""
    if before.warehouses != now.warehouses or before.namespaces != now.namespaces:
        return False
    if len(before.tables) != len(now.tables):
        return False
    return all(before.tables.get(key) is cached for key, cached in now.tables.items())


def _tables_of(previous: CatalogSnapshot | None) -> dict[str, CachedTable]:
    if previous is None:
        return {}
    return {c.record.name: c for view in previous.projects.values() for c in view.tables.values()}


# -- one record of each kind, as the snapshot keeps it (shared with the refresh by change) --------


def warehouse_of(item: Item) -> tuple[str, str]:
    project, warehouse = decode(WarehouseRecord, item.value, item.key).name.split(".", 1)
    return project, warehouse


def namespace_of(item: Item) -> tuple[str, tuple[str, str]]:
    parts = decode(NamespaceRecord, item.value, item.key).name.split(".")
    return parts[0], (parts[1], ".".join(parts[2:]))


def trash_entry(item: Item) -> tuple[str, str]:
    """Trash key -> the dropped table's incarnation ("" when a container was dropped)."""
    trash = decode(TrashRecord, item.value, item.key)
    dropped = trash.table.incarnation if trash.kind == "table" and trash.table is not None else ""
    return item.key, dropped


def policy_entry(item: Item) -> tuple[str, str] | None:
    """Scope -> the ``cache`` field of the policy record there."""
    from lake_platform.catalog.policies import PolicyRecord

    try:
        record = decode(PolicyRecord, item.value, item.key)
    except LakeError:  # a record a newer release wrote: it cannot hide the tables
        log.warning("unreadable policy record %s", item.key)
        return None
    return record.scope, record.policy.cache


def user_entry(item: Item) -> tuple[str, tuple[str, str, str]]:
    """User name -> (project, role, user record id)."""
    user = decode(UserRecord, item.value, item.key)
    return user.name, (user.project, str(user.role), user.user_id)


def token_entry(item: Item) -> tuple[str, tuple[str, str, str] | None]:
    """Token id -> (name, project, role); None when revoked."""
    token = decode(TokenRecord, item.value, item.key)
    return token.token_id, None if token.revoked else (token.name, token.project, str(token.role))
