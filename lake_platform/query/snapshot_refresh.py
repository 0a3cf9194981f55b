"""A refresh by change: the snapshot brought up to the registry by the keys changed since.

The registry's change feed (``registry.changes``) names every catalog key a transaction wrote, in
that transaction. A refresh reads each feed shard after the previous snapshot's position (one
read per shard when nothing changed), reads the keys named since (``get_many``, a hundred per
request) and rebuilds just what they change: a table (its head version record comes with the
keys, being one of them), a warehouse or namespace name, a trash entry, a policy's cache mode
(every table under its scope), a user or token, a multi-table commit's commit point (its record
``txn/<id>`` flipped to committed: its tables are read too, and viewed at its versions while
their heads lag, ``snapshot_transactions``). A multi-table commit's keys are all in one change;
``snapshot_transactions`` still reads the siblings of a commit seen in part (keys read in
separate requests). A project nothing touched keeps its view object, so plans kept per view
survive the refresh. FeedBehind (a shard moved on by more than the feed retains) is the caller's
cue to load cold.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import replace

from lake_platform.naming import TableName
from lake_platform.query.snapshot_load import (
    cache_mode,
    namespace_of,
    policy_entry,
    reuse,
    token_entry,
    trash_entry,
    user_entry,
    warehouse_of,
)
from lake_platform.query.snapshot_model import (
    CachedTable,
    CatalogSnapshot,
    Principals,
    ProjectView,
    TableKey,
    VersionHistory,
    cache_table,
)
from lake_platform.query.snapshot_transactions import Published, complete_transactions, not_behind
from lake_platform.registry import keys
from lake_platform.registry.changes import changes_since, read_shards
from lake_platform.registry.records import TableRecord, TransactionRecord, VersionRecord, decode
from lake_platform.registry.store import Item, MetaStore, get_all


def refresh(
    store: MetaStore, previous: CatalogSnapshot, published: Published | None = None
) -> CatalogSnapshot:
    """``previous`` with every change the feed names since it. FeedBehind: load cold.
    ``published``: ``load_snapshot``'s."""
    assert previous.state is not None
    started, started_wall = time.monotonic(), time.time()
    state = previous.state
    feed = state.feed
    if feed is None:  # the registry had no feed at the load: has anything been written since?
        shards = read_shards(store)
        if shards is None:
            return _Apply(store, previous, None, {}, published=published).snapshot(started, started_wall)
        feed = dict.fromkeys(range(shards), 0)
    changes, positions = changes_since(store, feed)
    # A head at a staging manifest path is read again until the catalog has finalized it.
    staging = [_table_key(name) for name in state.staging]
    # A commit held at its last published state is read again until it is published (which
    # writes no registry record) or its heads moved.
    held = [keys.transaction(txn_id) for txn_id in state.held]
    changed = sorted({key for change in changes for key in change.keys} | set(staging) | set(held))
    items = _read(store, changed)
    # A commit point the feed names (a multi-table commit's record flipped to committed): its
    # tables are read with it, and viewed at its versions while their heads lag.
    committed = [txn for key, item in items.items() if (txn := _committed(key, item)) is not None]
    named = {keys.table(TableName.parse(t.name)) for txn in committed for t in txn.tables}
    items.update(_read(store, sorted(named - set(items))))
    return _Apply(store, previous, positions, items, committed, published).snapshot(started, started_wall)


def _committed(key: str, item: Item | None) -> TransactionRecord | None:
    if item is None or not key.startswith(keys.transaction("")):
        return None
    txn = decode(TransactionRecord, item.value, item.key)
    return txn if txn.state == "committed" else None


def _read(store: MetaStore, wanted: list[str]) -> dict[str, Item | None]:
    return dict(zip(wanted, get_all(store, wanted), strict=True))


def _where(table_key: str) -> tuple[str, TableKey]:
    _, project, warehouse, ns, table = table_key.split("/", 4)
    return project, (warehouse, ns, table)


class _Apply:
    """The changed keys' current values, applied to ``previous`` (no registry I/O but the
    heads and siblings ``complete_transactions`` reads)."""

    def __init__(
        self,
        store: MetaStore,
        previous: CatalogSnapshot,
        positions: dict[int, int] | None,
        items: dict[str, Item | None],
        committed: list[TransactionRecord] | None = None,
        published: Published | None = None,
    ) -> None:
        assert previous.state is not None
        self.store, self.previous, self.state = store, previous, previous.state
        self.positions = positions
        self.items = items
        self.committed = committed or []
        self.published = published
        #: Commits held at their last published state (``RefreshState.held``).
        self.held: set[str] = set()
        self.projects = dict(previous.projects)
        self.touched: set[str] = set()

    def of(self, prefix: str) -> Iterable[tuple[str, Item | None]]:
        return ((k, v) for k, v in self.items.items() if k.startswith(prefix))

    def snapshot(self, started: float, started_wall: float) -> CatalogSnapshot:
        if not self.items:
            return replace(
                self.previous,
                loaded_at=time.monotonic(),
                loaded_at_wall=time.time(),
                load_seconds=time.monotonic() - started,
                started_at=started,
                started_at_wall=started_wall,
                state=replace(self.state, feed=self.positions),
            )
        principals = self._principals()
        trash = dict(self.state.trash)
        for key, item in self.of("trs/"):
            if item is None:
                trash.pop(key, None)
            else:
                trash[key] = trash_entry(item)[1]
        modes, scopes = self._modes()
        self._containers()
        added, staging = self._tables(modes, scopes)
        self.state.incarnations.update(added)  # after every read: a failed refresh adds nothing
        for project in self.touched:
            view = self.projects.get(project)
            if view is not None and not (view.warehouses or view.namespaces or len(view.tables)):
                del self.projects[project]
        done = time.monotonic()
        return CatalogSnapshot(
            loaded_at=done,
            loaded_at_wall=time.time(),
            projects=self.projects,
            load_seconds=done - started,
            dropped=frozenset(inc for inc in trash.values() if inc and not self._live(inc, added)),
            started_at=started,
            started_at_wall=started_wall,
            principals=principals,
            state=replace(
                self.state,
                feed=self.positions,
                trash=trash,
                cache_modes=modes,
                staging=staging,
                held=frozenset(self.held),
            ),
        )

    def _principals(self) -> Principals | None:
        before = self.previous.principals
        if before is None or not any(k.startswith(("usr/", "tok/")) for k in self.items):
            return before
        users, tokens = dict(before.users), dict(before.tokens)
        for key, item in self.of("usr/"):
            if item is None:
                users.pop(key.removeprefix("usr/"), None)
            else:
                name, entry = user_entry(item)
                users[name] = entry
        for key, item in self.of("tok/"):
            found = token_entry(item) if item is not None else (key.removeprefix("tok/"), None)
            if found[1] is None:
                tokens.pop(found[0], None)
            else:
                tokens[found[0]] = found[1]
        return Principals(users=users, tokens=tokens)

    def _modes(self) -> tuple[dict[str, str], set[str]]:
        modes = dict(self.state.cache_modes)
        scopes: set[str] = set()
        for key, item in self.of("pol/"):
            scope = key.removeprefix("pol/")
            entry = policy_entry(item) if item is not None else None
            if entry is None:
                modes.pop(scope, None)
            else:
                modes[entry[0]] = entry[1]
            scopes.add(scope)
        return modes, scopes

    def _view(self, project: str) -> ProjectView:
        self.touched.add(project)
        return self.projects.get(project) or ProjectView(project)

    def _containers(self) -> None:
        for key, item in self.of("whs/"):
            _, project, warehouse = key.split("/", 2)
            view = self._view(project)
            names = set(view.warehouses) - {warehouse}
            if item is not None:
                names.add(warehouse_of(item)[1])
            self.projects[project] = replace(view, warehouses=tuple(sorted(names)))
        for key, item in self.of("nsp/"):
            _, project, warehouse, path = key.split("/", 3)
            view = self._view(project)
            names = set(view.namespaces) - {(warehouse, path)}
            if item is not None:
                names.add(namespace_of(item)[1])
            self.projects[project] = replace(view, namespaces=tuple(sorted(names)))

    def _tables(self, modes: dict[str, str], scopes: set[str]) -> tuple[dict[str, str], frozenset[str]]:
        """Apply the changed tables; the incarnations read (incarnation -> table name) and the
        tables whose head is still at a staging manifest path."""
        staging = set(self.state.staging)
        records: dict[str, TableRecord] = {}
        gone: list[str] = []
        for key, item in self.of("tbl/"):
            if item is None:
                gone.append(key)
            else:
                record = decode(TableRecord, item.value, item.key)
                old = self._cached(record.name)
                records[record.name] = not_behind(old.record, record) if old is not None else record
        heads: dict[str, dict[int, VersionRecord]] = {}
        touched_incarnations: set[str] = set()
        for key, item in self.of("ver/"):
            touched_incarnations.add(key.split("/")[1])
            if item is not None:
                ver = decode(VersionRecord, item.value, item.key)
                heads.setdefault(ver.incarnation, {})[ver.version] = ver
        # A table whose version records or policy changed is rebuilt from its cached record,
        # unless its own record is gone (dropped): that one leaves the snapshot.
        dropped = {_name_of(key) for key in gone}
        for incarnation in touched_incarnations:
            name = self.state.incarnations.get(incarnation)
            cached = self._cached(name) if name is not None else None
            if cached is not None and cached.record.incarnation == incarnation and name not in records:
                if name not in dropped:
                    records[cached.record.name] = cached.record
        for cached in self._under(scopes):
            if cached.record.name not in dropped:
                records.setdefault(cached.record.name, cached.record)
        puts: dict[str, dict[TableKey, CachedTable | None]] = {}
        for key in gone:
            project, where = _where(key)
            puts.setdefault(project, {})[where] = None
        added: dict[str, str] = {}
        done = complete_transactions(
            self.store, list(records.values()), heads, self.committed, self.published, self.held
        )
        for record in done:
            project, where = _where(_table_key(record.name))
            staging.discard(record.name)
            if record.current_version <= 0:
                puts.setdefault(project, {})[where] = None
                continue
            mode = cache_mode(modes, record.name)
            old = self._cached(record.name)
            cached = None if record.incarnation in touched_incarnations else reuse(old, record, mode)
            if cached is None:
                same_schema = old is not None and old.record.schema_ipc == record.schema_ipc
                cached = cache_table(
                    record,
                    heads.get(record.incarnation, {}).get(record.current_version),
                    mode,
                    VersionHistory(self.store, record.incarnation),
                    schema=(old.schema_ipc, old.schema) if same_schema and old is not None else None,
                )
            puts.setdefault(project, {})[where] = cached
            added[record.incarnation] = record.name
            if cached.ref is not None and cached.ref.staging:
                staging.add(record.name)
        for key in gone:
            staging.discard(_name_of(key))
        for project, changes in puts.items():
            view = self._view(project)
            self.projects[project] = replace(view, tables=view.tables.changed(changes))
        return added, frozenset(staging)

    def _cached(self, name: str) -> CachedTable | None:
        project, where = _where(_table_key(name))
        view = self.previous.projects.get(project)
        return view.tables.get(where) if view is not None else None

    def _under(self, scopes: set[str]) -> Iterable[CachedTable]:
        """The tables a changed policy scope covers (its project, warehouse, namespace or table)."""
        for scope in scopes:
            view = self.previous.projects.get(scope.split(".", 1)[0])
            if view is None:
                continue
            for cached in view.tables.values():
                if cached.record.name == scope or cached.record.name.startswith(scope + "."):
                    yield cached

    def _live(self, incarnation: str, added: dict[str, str]) -> bool:
        name = added.get(incarnation) or self.state.incarnations.get(incarnation)
        if name is None:
            return False
        project, where = _where(_table_key(name))
        view = self.projects.get(project)
        cached = view.tables.get(where) if view is not None else None
        return cached is not None and cached.record.incarnation == incarnation


def _name_of(table_key: str) -> str:
    return ".".join(table_key.split("/")[1:])


def _table_key(name: str) -> str:
    project, warehouse, rest = name.split(".", 2)
    ns, _, table = rest.rpartition(".")
    return f"tbl/{project}/{warehouse}/{ns}/{table}"
