"""A plain-Python model of the catalog's table lifecycle, for the randomized model test.

It knows namespaces, registered tables (incarnation, live versions and their rows, tags,
protection), trash-grace policies, trash records (table and namespace cascades) and purged
incarnations. A policy belongs to its object: a drop takes it away (its trash record keeps a copy
that an undrop puts back), so a later object of the same name never inherits it. Each
operation has two halves: ``*_error`` predicts the typed error the catalog must raise (None when
the call must succeed), and the mutator applies a successful call. Only what the catalog reports
and the model cannot know in advance (a new incarnation id, its location, how many versions a
Lance compaction commit takes) is fed back in.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lake_platform.errors import (
    LakeError,
    NamespaceAlreadyExists,
    NamespaceNotEmpty,
    NamespaceNotFound,
    Protected,
    TableAlreadyExists,
    TableNotFound,
    TableTagAlreadyExists,
    TableTagNotFound,
    TableVersionNotFound,
)

Expected = type[LakeError] | None

DAY_MS = 86_400_000
#: The platform's default trash grace, where no policy record on the path sets one.
GRACE_MS = 7 * DAY_MS


def namespace_of(table: str) -> str:
    return table.rsplit(".", 1)[0]


def scope_path(scope: str) -> list[str]:
    """``p.w.a.t`` → the scopes whose policy could apply, most specific first."""
    parts = scope.split(".")
    return [".".join(parts[:depth]) for depth in range(len(parts), 0, -1)]


@dataclass
class Incarnation:
    id: str
    location: str
    #: live (registered) version → the sorted ids it holds
    history: dict[int, tuple[int, ...]]
    current: int
    fragments: int
    tags: dict[str, int] = field(default_factory=dict)
    protected: bool = False

    @property
    def rows(self) -> tuple[int, ...]:
        return self.history[self.current]

    def commit(self, rows: tuple[int, ...], versions: int = 1) -> None:
        for _ in range(versions):
            self.current += 1
            self.history[self.current] = rows


@dataclass
class TableTrash:
    name: str
    inc: Incarnation
    dropped_at: int
    expires_at: int
    #: the table's own trash grace policy, if it had one when dropped
    policy: int | None = None


@dataclass
class NamespaceTrash:
    namespace: str
    dropped_at: int
    expires_at: int
    #: (incarnation id, drop time) of each table trash record the cascade filed: its undo list.
    #: A table undropped alone and dropped again has a new record, which is not on the list.
    tables: list[tuple[str, int]]
    policy: int | None = None


@dataclass
class CatalogModel:
    namespaces: set[str]
    tables: dict[str, Incarnation] = field(default_factory=dict)
    trash: list[TableTrash] = field(default_factory=list)
    ns_trash: list[NamespaceTrash] = field(default_factory=list)
    purged: list[Incarnation] = field(default_factory=list)
    #: scope → trash grace in ms, for the scopes that have a policy record
    policies: dict[str, int] = field(default_factory=dict)
    #: a namespace a cascade has marked and is detaching: it refuses every change under it
    dropping: str | None = None

    def _active(self, ns: str) -> bool:
        return ns in self.namespaces and ns != self.dropping

    # -- tables ---------------------------------------------------------------------------------

    def create_error(self, name: str) -> Expected:
        if not self._active(namespace_of(name)):
            return NamespaceNotFound
        if name in self.tables:
            return TableAlreadyExists
        return None

    def create(self, name: str, inc_id: str, location: str, ids: tuple[int, ...]) -> None:
        self.tables[name] = Incarnation(inc_id, location, {1: tuple(sorted(ids))}, 1, 1)

    def append_error(self, name: str) -> Expected:
        if not self._active(namespace_of(name)):
            return NamespaceNotFound
        if name not in self.tables:
            return TableNotFound
        return None

    def append(self, name: str, ids: tuple[int, ...]) -> None:
        inc = self.tables[name]
        inc.commit(tuple(sorted(inc.rows + ids)))
        inc.fragments += 1

    def drop_error(self, name: str) -> Expected:
        error = self.append_error(name)
        if error is None and self.tables[name].protected:
            return Protected
        return error

    def grace(self, scope: str) -> int:
        return next((self.policies[s] for s in scope_path(scope) if s in self.policies), GRACE_MS)

    def drop(self, name: str, now: int, *, purge: bool, cascade_grace: int | None = None) -> None:
        """A zero grace destroys the data at once, like ``purge``. A cascade passes its
        namespace's grace, which applies to every table in it, and always files trash records."""
        cascade = cascade_grace is not None
        grace = cascade_grace if cascade_grace is not None else self.grace(name)
        inc = self.tables.pop(name)
        policy = self.policies.pop(name, None)
        if not cascade and (purge or grace == 0):
            self.purged.append(inc)
        else:
            self.trash.append(TableTrash(name, inc, now, now + grace, policy))

    def _newest_trash(self, name: str) -> TableTrash | None:
        found = [t for t in self.trash if t.name == name]
        return max(found, key=lambda t: t.dropped_at) if found else None

    def undrop_error(self, name: str, target: str) -> Expected:
        if not self._active(namespace_of(target)):
            return NamespaceNotFound
        if self._newest_trash(name) is None:
            return TableNotFound
        if target in self.tables:
            return TableAlreadyExists
        return None

    def undrop(self, name: str, target: str) -> None:
        record = self._newest_trash(name)
        assert record is not None
        self._restore(record, target)

    def _restore(self, record: TableTrash, target: str) -> None:
        self.trash.remove(record)
        self.tables[target] = record.inc
        if record.policy is not None:
            self.policies[target] = record.policy

    def protect_error(self, name: str) -> Expected:
        return None if name in self.tables else TableNotFound

    def protect(self, name: str, on: bool) -> None:
        self.tables[name].protected = on

    def tag_error(self, name: str, tag: str, version: int | None) -> Expected:
        if name not in self.tables:
            return TableNotFound
        if version is not None and version not in self.tables[name].history:
            return TableVersionNotFound  # never committed, or cleaned up
        return TableTagAlreadyExists if tag in self.tables[name].tags else None

    def tag(self, name: str, tag: str, version: int | None) -> None:
        inc = self.tables[name]
        inc.tags[tag] = version or inc.current

    def untag_error(self, name: str, tag: str) -> Expected:
        if name not in self.tables:
            return TableNotFound
        return None if tag in self.tables[name].tags else TableTagNotFound

    def untag(self, name: str, tag: str) -> None:
        del self.tables[name].tags[tag]

    # -- maintenance ----------------------------------------------------------------------------

    def maintain_error(self, name: str) -> Expected:
        return None if name in self.tables else TableNotFound

    def compacts(self, name: str) -> bool:
        """Lance rewrites small fragments when there is more than one of them."""
        return self.tables[name].fragments > 1

    def compact(self, name: str, versions: int) -> None:
        inc = self.tables[name]
        inc.commit(inc.rows, versions)
        inc.fragments = 1

    def doomed(self, name: str, retain: int) -> list[int]:
        """What cleanup may remove once every superseded version is older than the window:
        all but the current one, the newest ``retain`` and the tagged ones."""
        inc = self.tables[name]
        ordered = sorted(inc.history)
        keep = {inc.current, *ordered[-retain:], *inc.tags.values()}
        return [v for v in ordered if v not in keep]

    def cleanup(self, name: str, retain: int) -> None:
        inc = self.tables[name]
        for v in self.doomed(name, retain):
            del inc.history[v]

    # -- namespaces -----------------------------------------------------------------------------

    def create_namespace_error(self, ns: str) -> Expected:
        return NamespaceAlreadyExists if ns in self.namespaces else None

    def create_namespace(self, ns: str) -> None:
        self.namespaces.add(ns)

    def drop_namespace_error(self, ns: str, *, cascade: bool) -> Expected:
        if ns not in self.namespaces:
            return NamespaceNotFound
        inside = [n for n in self.tables if namespace_of(n) == ns]
        if any(self.tables[n].protected for n in inside):
            return Protected
        if inside and not cascade:
            return NamespaceNotEmpty
        return None

    def drop_namespace(self, ns: str, now: int) -> None:
        self.namespaces.remove(ns)
        grace = self.grace(ns)
        policy = self.policies.pop(ns, None)
        inside = sorted(n for n in self.tables if namespace_of(n) == ns)
        if not inside:
            return  # nothing to undo: a drop over no tables files no record, and its policy goes
        filed = [(self.tables[name].id, now) for name in inside]
        for name in inside:
            self.drop(name, now, purge=False, cascade_grace=grace)
        self.ns_trash.append(NamespaceTrash(ns, now, now + grace, filed, policy))

    def undrop_namespace_error(self, ns: str) -> Expected:
        records = [r for r in self.ns_trash if r.namespace == ns]
        if not records:
            return NamespaceNotFound
        record = max(records, key=lambda r: r.dropped_at)
        trashed = [t for t in self.trash if (t.inc.id, t.dropped_at) in record.tables]
        # A table it would bring back whose name a newer table took: refused whole.
        return TableAlreadyExists if any(t.name in self.tables for t in trashed) else None

    def undrop_namespace(self, ns: str) -> None:
        record = max((r for r in self.ns_trash if r.namespace == ns), key=lambda r: r.dropped_at)
        if ns not in self.namespaces and record.policy is not None:
            self.policies[ns] = record.policy  # only a namespace it rebuilds gets its policy back
        self.namespaces.add(ns)
        for key in record.tables:
            trashed = next((t for t in self.trash if (t.inc.id, t.dropped_at) == key), None)
            if trashed is not None:
                self._restore(trashed, trashed.name)
        self.ns_trash.remove(record)

    # -- policies -------------------------------------------------------------------------------

    def set_policy_error(self, scope: str) -> Expected:
        if scope.count(".") == 3:
            return None if scope in self.tables else TableNotFound
        if scope.count(".") == 2:
            return None if scope in self.namespaces else NamespaceNotFound
        return None

    def set_policy(self, scope: str, grace: int) -> None:
        self.policies[scope] = grace

    # -- time -----------------------------------------------------------------------------------

    def expire(self, now: int) -> list[TableTrash]:
        gone = [t for t in self.trash if t.expires_at <= now]
        for t in gone:
            self.trash.remove(t)
            self.purged.append(t.inc)
        left = {(t.inc.id, t.dropped_at) for t in self.trash}
        self.ns_trash = [r for r in self.ns_trash if r.expires_at > now or left.intersection(r.tables)]
        return gone
