"""What every catalog service shares: settings, registry, write gate, clock, the default
principal and the test hook, plus the steps every operation takes (who and actor, reading a
table record, the parent and scope guards) and the one door to the registry: ``commit``, which
lands a change and its commit-log entry in one transaction.

Error classification of engine failures lives here too, so that every service reports the
same failure the same way.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Final

from lake_platform.catalog.clock import Clock
from lake_platform.catalog.gate import WriteGate
from lake_platform.catalog.lease import Lease
from lake_platform.catalog.principals import Principal
from lake_platform.catalog.replays import Wanted, answer, replayed_all
from lake_platform.catalog.results import CommitResult
from lake_platform.catalog.step_records import marker_branch
from lake_platform.errors import (
    ConcurrentModification,
    InvalidInput,
    LakeError,
    NamespaceNotFound,
    ServiceUnavailable,
    TableNotFound,
    TableSchemaValidationError,
    Throttling,
    Unauthenticated,
)
from lake_platform.naming import NamespaceName, ProjectName, TableName, WarehouseName
from lake_platform.registry import keys
from lake_platform.registry.records import (
    CommitLogEntry,
    CommitMarker,
    NamespaceRecord,
    TableRecord,
    WarehouseRecord,
    decode,
    log_ms,
    new_id,
)
from lake_platform.registry.store import ABSENT, Item, MetaStore, Op, Put
from lake_platform.settings import LakeSettings

log = logging.getLogger(__name__)


class _Unread(Enum):
    UNREAD = "unread"


#: "Not read yet": the default of the checks below that also take an item read ahead.
UNREAD: Final = _Unread.UNREAD
#: A registry item read ahead with ``store.get_many`` (None: the key is absent), or UNREAD.
Prefetched = Item | None | _Unread

#: Hook points tests use to pause or break an operation at an exact step.
Hook = Callable[[str], None]

#: Ops per registry transaction when one change sweeps many records (DynamoDB allows 100).
BATCH = 90


@dataclass(frozen=True)
class Log:
    """The commit-log entry of one change (and, unless ``marker`` is False, the commit marker
    that proves its commit id landed: invariant 5)."""

    target: str
    operation: str
    actor: str | None = None
    commit_id: str | None = None
    run_id: str | None = None
    incarnation: str | None = None
    from_version: int | None = None
    to_version: int | None = None
    detail: dict[str, object] = field(default_factory=dict)
    marker: bool = True
    at_ms: int | None = None
    files_removed: int = 0
    bytes_removed: int = 0


@dataclass(eq=False)  # identity equality: one context per catalog
class CatalogContext:
    """One per catalog; every service holds the same one."""

    settings: LakeSettings
    store: MetaStore
    clock: Clock
    gate: WriteGate
    principal: Principal
    hook: Hook | None

    def at(self, point: str) -> None:
        if self.hook is not None:
            self.hook(point)

    # -- identity ---------------------------------------------------------------------------

    def who(self, principal: Principal | None) -> Principal:
        who = principal if principal is not None else self.principal
        if not isinstance(who, Principal):
            raise Unauthenticated("no identity given")
        return who

    def actor(self, actor: str | None, who: Principal | None = None) -> str:
        if actor:
            return actor
        who = who or self.principal
        return self.settings.actor if who.kind == "local" else who.name

    def readable(self, who: Principal, tname: TableName) -> None:
        # Another tenant's table looks exactly like a missing one.
        if not who.can(tname.project, "read"):
            raise TableNotFound(f"table {tname} does not exist")

    def storage(self, location: str) -> dict[str, str]:
        return self.settings.storage_options(location)

    # -- reads and guards -------------------------------------------------------------------

    def table(
        self,
        tname: TableName,
        *,
        incarnation: str | None = None,
        declared: bool = False,
        item: Prefetched = UNREAD,
    ) -> tuple[TableRecord, int]:
        """The table's record and its revision. ``item``: the record's registry item if the
        caller read it already (with ``store.get_many``), else it is read here."""
        if item is UNREAD:
            item = self.store.get(keys.table(tname))
        if item is None:
            raise TableNotFound(f"table {tname} does not exist")
        record = decode(TableRecord, item.value, item.key)
        if incarnation is not None and record.incarnation != incarnation:
            raise TableNotFound(f"table {tname} was dropped or replaced (incarnation {incarnation} is gone)")
        if record.current_version == 0 and not declared:
            raise TableNotFound(f"table {tname} is declared but has no committed version")
        return record, item.revision

    def warehouse(self, name: WarehouseName, item: Prefetched = UNREAD) -> WarehouseRecord:
        """``item``: as ``table``'s."""
        if item is UNREAD:
            item = self.store.get(keys.warehouse(name))
        if item is None:
            raise NamespaceNotFound(f"warehouse {name} does not exist")
        return decode(WarehouseRecord, item.value, item.key)

    @staticmethod
    def parent_key(name: NamespaceName | TableName) -> str:
        """The registry key of ``name``'s parent container (what ``require_parent`` reads)."""
        parent = _parent_of(name)
        return keys.warehouse(parent) if isinstance(parent, WarehouseName) else keys.namespace(parent)

    def require_parent(
        self, name: NamespaceName | TableName, item: Prefetched = UNREAD, *, who: Principal
    ) -> Item:
        """The parent container must exist and be active, and ``who`` must be able to read its
        project; returns its registry item. ``item``: as ``table``'s.

        Every door checks the parent before the permission, so the caller's tenant is checked
        here, before anything is read: another tenant's container is answered as a missing one,
        in the same words, and a write door cannot tell it exists (PermissionDenied is for
        callers of the object's own project)."""
        parent = _parent_of(name)
        kind = "warehouse" if isinstance(parent, WarehouseName) else "namespace"
        if not who.can(name.project, "read"):
            item = None
        elif item is UNREAD:
            item = self.store.get(self.parent_key(name))
        if item is None:
            raise NamespaceNotFound(f"{kind} {parent} does not exist")
        record = decode(WarehouseRecord if kind == "warehouse" else NamespaceRecord, item.value, item.key)
        if record.state != "active":
            raise NamespaceNotFound(f"{kind} {parent} is being dropped")
        return item

    def scope(self, scope: str, kind: str | None = None, *, who: Principal | None) -> tuple[str, str]:
        """Resolve a dotted scope to (kind, registry key); tables win over same-named namespaces.
        A scope in a project ``who`` cannot read is answered as a missing one (None: the
        catalog's own lookups, for no caller)."""
        parts = scope.split(".") if isinstance(scope, str) else []
        if len(parts) == 1:
            pname = ProjectName.parse(scope)
            found = [("project", keys.project(pname))]
        elif len(parts) == 2:
            found = [("warehouse", keys.warehouse(WarehouseName.parse(scope)))]
        else:
            found = []
            if len(parts) >= 4:
                found.append(("table", keys.table(TableName.parse(scope))))
            found.append(("namespace", keys.namespace(NamespaceName.parse(scope))))
        if kind is not None:
            found = [f for f in found if f[0] == kind]
            if not found:
                raise InvalidInput(f"{scope!r} cannot name a {kind}")
        visible = who is None or who.can(parts[0], "read")
        for k, key in found:
            if visible and self.store.get(key) is not None:
                return k, key
        raise scope_not_found(scope, found[0][0] if found else "scope")

    # -- the commit log and the one door to the registry ---------------------------------------

    def log_ops(self, entry: Log) -> list[Op]:
        """The commit-log entry (and marker) as ops: for commits that land inside another
        transaction (Lance's, through the namespace) or that ``commit`` lands."""
        commit_id = entry.commit_id or new_id()
        at = entry.at_ms if entry.at_ms is not None else log_ms()
        log_key = keys.log_entry(entry.target, at, commit_id)
        record = CommitLogEntry(
            commit_id=commit_id,
            target=entry.target,
            operation=entry.operation,
            actor=self.actor(entry.actor),
            run_id=entry.run_id,
            at_ms=at,
            incarnation=entry.incarnation,
            from_version=entry.from_version,
            to_version=entry.to_version,
            files_removed=entry.files_removed,
            bytes_removed=entry.bytes_removed,
            detail=dict(entry.detail),
        )
        ops: list[Op] = [Put(log_key, record.encode(), ABSENT)]
        if entry.marker:
            proof = CommitMarker(
                commit_id=commit_id,
                target=entry.target,
                operation=entry.operation,
                branch=marker_branch(entry.detail),
                incarnation=entry.incarnation,
                from_version=entry.from_version,
                to_version=entry.to_version,
                log_key=log_key,
                at_ms=at,
            )
            ops.append(Put(keys.commit_marker(commit_id), proof.encode(), ABSENT))
        return ops

    def commit(
        self, ops: Sequence[Op], *, log: Log | None = None, chunked: bool = False
    ) -> list[Item | None]:
        """Land ``ops`` and the log entry in one registry transaction (ConditionFailed when a
        condition fails: nothing landed). ``chunked``: when it does not fit one transaction,
        the leading ops go first in batches and the last batch, with the log entry, lands whole
        (for sweeps whose leading ops are safe on their own)."""
        todo = [*ops, *(self.log_ops(log) if log is not None else [])]
        if chunked:
            while len(todo) > BATCH:
                self.store.transact(todo[:BATCH])
                todo = todo[BATCH:]
        return self.store.transact(todo)

    def record(self, entry: Log, *, ops: Sequence[Op] = (), lease: Lease | None = None) -> str:
        """Commit ``entry`` with ``ops``, fenced by ``lease`` when given; returns the commit id."""
        if entry.commit_id is None:
            entry = replace(entry, commit_id=new_id())
        assert entry.commit_id is not None
        if lease is None:
            self.commit(ops, log=entry)
        else:
            with lease.fenced() as fence:
                self.commit([*ops, fence], log=entry)
        return entry.commit_id

    def patch_log(self, log_key: str, patch: dict[str, object]) -> None:
        """Complete the figures of an entry that already landed with its commit."""
        for _ in range(3):
            item = self.store.get(log_key)
            if item is None:
                return
            entry = decode(CommitLogEntry, item.value, item.key)
            try:
                self.store.compare_and_swap(log_key, item.revision, entry.model_copy(update=patch).encode())
                return
            except ConcurrentModification:
                continue

    def commit_landed(self, commit_id: str, item: Prefetched = UNREAD) -> CommitMarker | None:
        """``item``: the marker's, as ``table``'s."""
        if item is UNREAD:
            item = self.store.get(keys.commit_marker(commit_id))
        return decode(CommitMarker, item.value, item.key) if item else None

    def replayed(
        self,
        commit_id: str,
        *,
        table: str,
        operation: str | None,
        branch: str | None = None,
        refuse: Callable[[str], LakeError] | None = None,
        marker: Prefetched = UNREAD,
    ) -> CommitResult | None:
        """The earlier result (its versions, rows and bytes added, from its log entry) when
        ``commit_id`` already landed as this same commit: ``operation``
        of ``table`` on ``branch`` (None: main; ``operation`` None: any, for a Lance client's
        commit, whose staged manifest says what it is). None when the id never landed. An id
        that landed as another commit is refused, nothing written: InvalidInput naming what it
        names, or ``refuse(what it names)`` (a batch's idempotency key: IdempotencyKeyReused).
        ``marker``: the id's marker item, as ``table``'s."""
        landed = self.commit_landed(commit_id, marker)
        if landed is None:
            return None
        item = self.store.get(landed.log_key) if landed.log_key else None
        entry = decode(CommitLogEntry, item.value, item.key) if item is not None else None
        return answer(Wanted(commit_id, table, operation, branch, refuse), landed, entry)

    def replayed_all(self, wanted: Sequence[Wanted]) -> list[CommitResult | None]:
        """``replayed`` of several distinct commit ids, in a few registry requests
        (``replays.replayed_all``)."""
        return replayed_all(self.store, wanted)


# == shared checks and error classification ====================================================


def scope_not_found(scope: str, kind: str) -> LakeError:
    """What ``CatalogContext.scope`` answers for a dotted name that names nothing of ``kind``
    (the first kind it tried: ``table`` for four parts or more)."""
    if kind == "table":
        return TableNotFound(f"no table or namespace named {scope}")
    return NamespaceNotFound(f"{kind} {scope} does not exist")


def check_commit_id(commit_id: str | None) -> str:
    if commit_id is None:
        return new_id()
    if (
        not isinstance(commit_id, str)
        or not 8 <= len(commit_id) <= 128
        or not commit_id.replace("-", "").isalnum()
    ):
        raise InvalidInput("commit id must be 8-128 letters, digits or dashes")
    return commit_id


_THROTTLED = (
    "slowdown",
    "slow down",
    "throttl",
    "toomanyrequests",
    "429",
    "503 service unavailable",
    "request rate",
)
_UNAVAILABLE = (
    "timed out",
    "timeout",
    "connection reset",
    "connection refused",
    "broken pipe",
    "temporarily unavailable",
    "500 internal",
    "502",
    "503",
    "504",
    "dispatch failure",
    "io error",
)


def transient_storage_error(exc: BaseException) -> LakeError | None:
    """Storage trouble worth retrying (S3 throttling, timeouts, 5xx), as a retryable typed error.

    Lance surfaces object-store errors as OSError/RuntimeError text; nothing was committed (the
    caller has already checked its commit id), so a retry is safe."""
    if not isinstance(exc, (OSError, RuntimeError)):
        return None
    text = str(exc).lower()
    if any(t in text for t in _THROTTLED):
        return Throttling(f"storage throttled the write: {first_line(exc)}")
    if any(t in text for t in _UNAVAILABLE):
        return ServiceUnavailable(f"storage unavailable during the write: {first_line(exc)}")
    return None


def input_error(exc: BaseException) -> LakeError:
    """The input stream broke: report what broke it, not the engine's wrapper."""
    # Imported here, as everywhere in the catalog: registry-only commands start without pyarrow.
    import pyarrow as pa

    if isinstance(exc, LakeError):
        return exc
    if isinstance(exc, (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError)):
        return TableSchemaValidationError(f"data does not fit the table: {first_line(exc)}")
    return InvalidInput(f"the input could not be read: {first_line(exc)}")


#: Where in Lance's Rust sources an error was raised (``, /home/.../merge_insert.rs:461:40``,
#: ``location: ...schema.rs:213:17``): the engine's internals, not what the user did wrong.
RUST_LOCATION = re.compile(r",?\s*(?:location:\s*)?[^\s,]*\.rs:\d+(?::\d+)?")


#: Lance's label of its InvalidInput kind, nested once per layer that wraps the error ("Invalid
#: user input: Failed to parse ...: Invalid user input: Error parsing ..."): the typed error the
#: catalog raises says it once.
LANCE_KIND = re.compile(r"Invalid user input: ")

#: DataFusion's list of the columns a name could have been, which names each one twice for a
#: join (a merge's target and source sides): ``Valid fields are a, b, a, b.``
VALID_FIELDS = re.compile(r"(Valid fields are )([^.]*(?:\.[^ .][^.]*)*)")


def first_line(exc: BaseException) -> str:
    """The first line of ``exc``'s text, without Lance's source locations and error-kind labels,
    each valid field named once, at most 300 chars."""
    text = str(exc).strip().splitlines()
    if not text:
        return type(exc).__name__
    line = LANCE_KIND.sub("", RUST_LOCATION.sub("", text[0])).strip().rstrip(",")
    line = VALID_FIELDS.sub(lambda m: m.group(1) + ", ".join(dict.fromkeys(m.group(2).split(", "))), line)
    return (line or type(exc).__name__)[:300]


def _parent_of(name: NamespaceName | TableName) -> NamespaceName | WarehouseName:
    return name.namespace_name if isinstance(name, TableName) else name.parent
