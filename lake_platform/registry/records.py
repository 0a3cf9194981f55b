"""Registry records: versioned JSON that older and newer readers tolerate.

Rules that keep old records readable: every field added after version 1 is optional with a
default; unknown fields are ignored (a newer writer's extra fields do not break an older
reader); ``record_version`` says which shape wrote the record.
"""

from __future__ import annotations

import base64
import threading
import time
import uuid
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from lake_platform.errors import Internal


def now_ms() -> int:
    return int(time.time() * 1000)


_log_lock = threading.Lock()
_last_log_ms = 0


def log_ms() -> int:
    """The time of a commit-log entry: the wall clock, but strictly after the last entry this
    process stamped. Log keys sort by it (then by the random commit id), so two commits of one
    object in the same millisecond (a drop and its purge, say) keep their order in its history.
    Entries of different processes within one millisecond can still tie."""
    global _last_log_ms
    with _log_lock:
        _last_log_ms = max(now_ms(), _last_log_ms + 1)
        return _last_log_ms


def new_id() -> str:
    return uuid.uuid4().hex


class Record(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    record_version: int = 1

    def encode(self) -> bytes:
        return self.model_dump_json(exclude_none=False).encode()


R = TypeVar("R", bound=Record)


def decode(cls: type[R], raw: bytes, key: str = "") -> R:
    try:
        return cls.model_validate_json(raw)
    except ValidationError as exc:
        raise Internal(f"registry record {key!r} is unreadable as {cls.__name__}") from exc


class ProjectRecord(Record):
    name: str
    created_at_ms: int = Field(default_factory=now_ms)
    created_by: str = ""
    state: Literal["active", "dropping"] = "active"


ContainerState = Literal["active", "dropping"]


class WarehouseRecord(Record):
    name: str  # project.warehouse
    root: str  # storage root URI: a local folder or s3://bucket/prefix
    created_at_ms: int = Field(default_factory=now_ms)
    created_by: str = ""
    protected: bool = False
    #: "dropping" while a drop checks emptiness: creates under it are refused meanwhile.
    state: ContainerState = "active"


class NamespaceRecord(Record):
    name: str  # project.warehouse.ns[.sub...]
    created_at_ms: int = Field(default_factory=now_ms)
    created_by: str = ""
    protected: bool = False
    state: ContainerState = "active"


class TableRecord(Record):
    """A table's registration: the one pointer readers follow (invariant 1)."""

    name: str  # project.warehouse.ns[.sub...].table
    incarnation: str  # new for every create; names the location and scopes versions and lease
    location: str  # unique per incarnation
    engine: Literal["lance"] = "lance"
    current_version: int  # 0 while only declared (no committed version yet)
    schema_ipc_b64: str = ""  # Arrow schema as IPC bytes, base64 (keeps the registry Arrow-free)
    created_at_ms: int = Field(default_factory=now_ms)
    created_by: str = ""
    protected: bool = False
    #: The table's folder, when main's line lives in a sub-folder of it: a published branch's
    #: dataset root (``<folder>/tree/<lance branch>``) is then ``location``. None: ``location``
    #: is the folder. Drops, purges and orphan scans work on the folder.
    folder: str | None = None

    @property
    def folder_uri(self) -> str:
        """The table's whole folder: what a purge removes and an orphan scan lists."""
        return self.folder or self.location

    @property
    def schema_ipc(self) -> bytes:
        return base64.b64decode(self.schema_ipc_b64) if self.schema_ipc_b64 else b""

    @staticmethod
    def encode_schema(ipc: bytes) -> str:
        return base64.b64encode(ipc).decode()


class VersionRecord(Record):
    """One committed engine version: where its manifest lives (managed versioning)."""

    incarnation: str
    version: int
    manifest_path: str
    manifest_size: int | None = None
    e_tag: str | None = None
    naming_scheme: str | None = None
    committed_at_ms: int = Field(default_factory=now_ms)
    commit_id: str = ""
    #: The staging manifest a commit registered at its canonical path in the same transaction
    #: (``manifest_path`` is then canonical before the file is there; the writer publishes it
    #: right after). Set only by such commits; a writer stopped in between leaves the canonical
    #: file missing, and the next writer or ``finish_versions`` publishes it from here.
    staged_from: str | None = None
    #: Tags on this version. Written under the table's lease, so cleanup (which deletes a
    #: version record only while it is untagged) and readers need no engine call to see them.
    tags: list[str] = Field(default_factory=list)
    #: Set on a version an atomic multi-table commit made (``catalog.transaction``): the other
    #: tables it committed, by name, with the version each got. A reader holding this version
    #: must hold those tables at those versions or later (``query.snapshot_transactions``).
    transaction: dict[str, int] = Field(default_factory=dict)
    #: Set on the versions a multi-table commit larger than one registry write registers ABOVE
    #: the tables' heads (``catalog.transaction_chunks``): its transaction record's id
    #: (``TransactionRecord``), which says whether they are committed.
    transaction_id: str | None = None
    #: The dataset root this version is read from when it is not the table's folder: a
    #: branch's versions, and main's versions since a branch was published into it.
    location: str | None = None


class BranchRecord(TableRecord):
    """A branch of a table: a version chain of its own (``incarnation`` is the chain id keying its
    version records and write lease), read and written at ``location`` (Lance's branch dataset
    ``<table folder>/tree/<lance_branch>``; ``folder`` is the table's). ``name`` is the table's."""

    branch: str
    #: The table incarnation the branch belongs to: a dropped and recreated table has none.
    table_incarnation: str
    #: Lance's name of the branch dataset (``<branch>-<short id>``: unique per creation, so a
    #: branch deleted and made again never shares a folder with its predecessor).
    lance_branch: str
    #: Where it was made from: main or another branch's chain id, and that line's version.
    parent_chain: str | None = None
    parent_version: int
    #: Main's version this branch's line descends from: publishing fast-forwards main only
    #: while main is still at this version.
    main_version: int
    state: Literal["active", "trashed", "purging"] = "active"
    dropped_at_ms: int | None = None
    expires_at_ms: int | None = None
    dropped_by: str | None = None


class CommitLogEntry(Record):
    """Who changed what, when: one per registry commit."""

    commit_id: str
    target: str  # dotted name of the object changed
    operation: str  # create, append, overwrite, compact, cleanup, drop, ...
    actor: str
    run_id: str | None = None
    at_ms: int = Field(default_factory=now_ms)
    incarnation: str | None = None
    from_version: int | None = None
    to_version: int | None = None
    rows_added: int = 0
    rows_removed: int = 0
    bytes_added: int = 0
    bytes_removed: int = 0
    files_added: int = 0
    files_removed: int = 0
    detail: dict[str, object] = Field(default_factory=dict)


class CommitMarker(Record):
    """Proof that a commit id landed: looked up after an ambiguous failure (invariant 5), and
    when the id comes again (a retry replays only as the same table, operation and branch).

    ``branch`` (record_version 2) names the branch the commit was made on, as its log entry's
    ``detail.branch`` does; None is main. A record_version 1 marker has none and decodes as main,
    though a branch's commit may have written it (its log entry says which)."""

    record_version: int = 2
    commit_id: str
    target: str
    operation: str
    incarnation: str | None = None
    from_version: int | None = None
    to_version: int | None = None
    log_key: str = ""
    at_ms: int = Field(default_factory=now_ms)
    #: For a marker that lands inside another commit's transaction (an ingested file's): that
    #: commit's id, whose own marker has the versions.
    part_of: str | None = None
    branch: str | None = None
    #: The call that landed it (a mark of its own), and a digest of what it wrote (its
    #: operation, options and rows; None: not known): a caller that passed the same id at the
    #: same time learns whether this commit is its own write.
    attempt: str | None = None
    digest: str | None = None
    #: A write under a caller's key that had nothing to commit (no version, no log entry,
    #: ``no_ops``): its request's digest (``detail.request_digest``), which a retry under the key
    #: compares as it compares a commit's log entry's.
    request_digest: str | None = None


class LeaseRecord(Record):
    """A per-table write lease: holder, fencing token, wall-clock deadline (for campaigners).

    The holder's process (record_version 2) lets an acquirer on the same host take over at once
    when that process is provably gone; records without it wait for the deadline.
    """

    record_version: int = 2
    incarnation: str
    holder: str
    token: int
    deadline_ms: int
    released: bool = False
    #: Hostname, for people reading the record.
    host: str | None = None
    #: Boot id and pid namespace: a pid means the same process only where both match.
    host_id: str | None = None
    pid: int | None = None
    #: The process's start time (clock ticks since boot), so a reused pid is not the holder.
    pid_started: int | None = None


class OddFolderRecord(Record):
    """A table whose folder is not of the shape the catalog gives one
    (``<root>/<ns>/.../<table>-<id>.lance``): RegisterTable adopted it where it lay. Only such a
    folder can hold, or lie in, another table's (``catalog/folder_claims``), so a purge looks at
    these records, not at every table. Kept after the table is purged until a check finds its
    incarnation gone."""

    incarnation: str
    name: str  # as registered (a rename does not move the folder)
    folder: str


class TrashRecord(Record):
    """A dropped table, kept (data and version records intact) until ``expires_at_ms``."""

    kind: Literal["table", "namespace"] = "table"
    target: str  # dotted name it had when dropped
    dropped_at_ms: int
    expires_at_ms: int
    dropped_by: str
    #: kind == "table": the registration to restore (incarnation, location, schema, version).
    table: TableRecord | None = None
    #: kind == "namespace": the subtree a cascade detached, shallowest first, and its tables'
    #: trash keys; undrop rebuilds from this, expiry purges through the table records.
    namespaces: list[NamespaceRecord] = Field(default_factory=list)
    table_trash_keys: list[str] = Field(default_factory=list)
    cascade_id: str | None = None
    #: The policy records that went with the dropped objects (scope → policy record as JSON),
    #: put back by an undrop; purged with this record, so a recreate never inherits them.
    policies: dict[str, dict[str, Any]] = Field(default_factory=dict)
    #: "purging" once expiry has claimed it: undrop refuses, a rerun of expiry finishes it.
    #: "restoring" (kind == "namespace") once an undrop has claimed it: expiry leaves it and its
    #: tables alone, a rerun of the undrop finishes it.
    state: Literal["trashed", "purging", "restoring"] = "trashed"


class TransactionTable(Record):
    """One table's part of a multi-table commit spanning several registry writes: what moving
    its head takes, so whoever completes the commit (its writer, or the next one) needs nothing
    else (``catalog.transaction_recovery``)."""

    name: str
    incarnation: str
    from_version: int
    to_version: int
    #: Every version it registers above the head (held schema steps, then ``to_version``).
    versions: list[int]
    #: The table record's new schema, when the commit changes it.
    schema_ipc_b64: str | None = None
    #: Its commit-log entries by key, and its commit marker: written as the head moves.
    logs: dict[str, CommitLogEntry] = Field(default_factory=dict)
    marker: CommitMarker


class TransactionRecord(Record):
    """A multi-table commit spanning several registry writes (``catalog.transaction_chunks``).
    Its versions sit above the tables' heads until ``state`` is ``committed`` (the commit point:
    one conditional update from ``pending``); then they are visible, and the heads move to them.
    ``aborted`` (or the record gone while a version naming it still sits above a head): never
    visible, cleared. The record is deleted once every head moved or every version was cleared."""

    txn_id: str
    commit_id: str
    state: Literal["pending", "committed", "aborted"] = "pending"
    #: Past it (wall clock), a pending commit's writer can no longer commit it.
    deadline_ms: int
    created_at_ms: int = Field(default_factory=now_ms)
    tables: list[TransactionTable] = Field(default_factory=list)
