"""The commit the catalog has in flight, shared by the write path and the namespace Lance calls.

Its own module so that code which only names it (the manifests, versions and tables services)
does not import ``lance_namespace``: registry-only commands must start without it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field

from lake_platform.registry.records import CommitLogEntry, VersionRecord, new_id
from lake_platform.registry.store import ABSENT, Op

#: Operations whose write is its data as well as its options: their rows are not hashed (that
#: would cost every write with a caller's own id a pass over its bytes), so without the caller's
#: digest of its request nobody can tell two of them apart.
DATA_OPERATIONS = frozenset({"create", "append", "overwrite", "merge", "replace"})


@dataclass
class PendingCommit:
    """What the catalog is committing; the namespace turns each Lance version into a registry commit."""

    commit_id: str
    operation: str
    actor: str
    run_id: str | None = None
    schema_ipc: bytes | None = None  # set when the commit may change the schema (create, overwrite)
    detail: dict[str, object] = field(default_factory=dict)
    #: Called at commit time for (rows_added, bytes_added): the stream is drained by then.
    stream_totals: Callable[[], tuple[int, int]] | None = None
    #: Data files the commit adds, when known before it lands (a Lance client's commit, from
    #: its transaction); the catalog's own operations count theirs afterwards or not at all.
    files_added: int = 0
    #: A create's (files, file bytes) as its staged transaction records them, counted before it
    #: registers (``step_records.count_created_files``): its log entry lands complete, with no
    #: reopen and rewrite of the entry afterwards. None: not counted (``enrich`` completes it).
    file_totals: tuple[int, int] | None = None
    #: The files (data, deletion and index files, relative to the table's root) a Lance
    #: client's manifest adds: the namespace checks, under the lease, that each is still there
    #: before it registers the version.
    must_exist: tuple[str, ...] = ()
    rows_removed: int = 0
    #: More conditions for the first version's transaction (a create checks that its parent
    #: namespace is still there and not being dropped).
    extra_ops: list[Op] = field(default_factory=list)
    #: Filled in as versions land: (version, log key).
    landed: list[tuple[int, str]] = field(default_factory=list)
    #: The registered version before the first landed one, and each landed version's record
    #: with its registry revision (so the catalog need not read them back).
    from_version: int | None = None
    versions: dict[int, tuple[VersionRecord, int]] = field(default_factory=dict)
    marker_revision: int = ABSENT
    #: The registered current version's record as ``settle`` read it under the lease: the
    #: namespace answers Lance's "latest version" from it instead of reading it again.
    base: VersionRecord | None = None
    #: Each landed version's staging manifest: garbage once the canonical one is registered.
    staged: dict[int, str] = field(default_factory=dict)
    #: How many of this commit's first Lance versions the namespace holds back instead of
    #: registering (a schema change an append builds on): they land in the registry in one
    #: transaction with the version after them, so nobody ever sees the schema step alone.
    #: The commit-log operation of each held step ("add-columns", "widen-columns").
    hold: list[str] = field(default_factory=list)
    #: The operation makes exactly one registry commit under its lease (an append, an
    #: overwrite, a REST client's commit): that commit also releases the lease, in the same
    #: transaction, instead of a separate write after it.
    release_lease: bool = False
    #: The held versions so far: (version record, its log key, its log entry), in order.
    held: list[tuple[VersionRecord, str, CommitLogEntry]] = field(default_factory=list)
    #: This call's mark on the marker its commit writes: a marker of its commit id found with
    #: another mark is another caller's commit under the same id (``commit_ids``).
    attempt: str = field(default_factory=new_id)
    #: Set when the id landed meanwhile as this same write, made by another caller: nothing of
    #: this one landed, and it is answered with that commit.
    replayed: bool = False
    #: The write as asked (operation and detail as given), fixed before anything is written.
    asked: str = field(init=False, default="")

    def __post_init__(self) -> None:
        self.asked = json.dumps([self.operation, self.detail], sort_keys=True, default=str)

    def write_digest(self) -> str | None:
        """What this commit writes: the write as asked, which for one that carries rows includes
        the caller's digest of its request (``detail.request_digest``: a REST body, a Lance
        client's change); None without one (no other write can be told the same)."""
        if self.operation in DATA_OPERATIONS and "request_digest" not in self.detail:
            return None
        return hashlib.sha256(self.asked.encode()).hexdigest()[:40]
