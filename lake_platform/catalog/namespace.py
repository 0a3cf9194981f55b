"""The registry as Lance's external manifest store ("managed versioning").

Lance calls ``create_table_version(N)`` for every commit. Here that call *is* the registry's
compare-and-swap: one ``transact`` writes the version record, moves the table's current version
from N-1 to N, appends the commit-log entry and the commit-id marker, all conditional on the
writer's lease. If version N already exists Lance gets ConcurrentModification, rebases, and
retries with N+1.

Lance numbers a commit after the newest manifest it finds *on storage*, and builds it on that
manifest. So the registry also checks what a commit is built on: version N is accepted only if N-1
is the registered current version; anything else was built on a manifest written around the
registry and is refused (the manifests above the registered version are moved to quarantine first,
so the next write lands where it should; ``commit_conflicts`` says why a commit did not land).
Right after the registry accepts a staging manifest, the namespace publishes it at its canonical
path (``manifest_publisher``): no reader finishes a commit (a write to storage). A staged manifest
references only the table's files (``table_files``); no version above the head is ever read.

Lance calls back from its own threads, where context variables are not set, so each write gets
its own namespace instance bound to one table incarnation and one pending commit.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import lance_namespace.errors as ns_errors
from lance_namespace import LanceNamespace
from lance_namespace_urllib3_client.models import (
    CreateTableVersionResponse,
    DeclareTableResponse,
    DescribeTableResponse,
    DescribeTableVersionResponse,
    ListTableVersionsResponse,
    TableVersion,
)

from lake_platform.catalog.commit_conflicts import CommitConflicts
from lake_platform.catalog.lease import Lease, LeaseRaced
from lake_platform.catalog.manifest_publisher import ManifestPublisher
from lake_platform.catalog.pending import PendingCommit
from lake_platform.catalog.step_records import count_created_files, held_step_entry, step_entry, step_marker
from lake_platform.catalog.table_files import check_manifest, require_added, require_version
from lake_platform.catalog.version_pages import page_after, version_page
from lake_platform.engine import lance_engine as engine
from lake_platform.errors import (
    ConcurrentModification,
    ConditionFailed,
    Internal,
    InvalidInput,
    InvalidTableState,
    LakeError,
    ServiceUnavailable,
    TableNotFound,
    TableVersionNotFound,
)
from lake_platform.naming import TableName
from lake_platform.registry import keys
from lake_platform.registry.records import (
    TableRecord,
    VersionRecord,
    decode,
    log_ms,
    new_id,
)
from lake_platform.registry.store import ABSENT, MetaStore, Op, Put

log = logging.getLogger(__name__)


class BoundTableNamespace(LanceNamespace):
    """A namespace for exactly one table incarnation, optionally carrying one pending commit."""

    def __init__(
        self,
        store: MetaStore,
        name: TableName,
        record: TableRecord,
        record_revision: int,
        *,
        pending: PendingCommit | None = None,
        lease: Lease | None = None,
        storage_options: dict[str, str] | None = None,
        fault: Callable[[str], None] | None = None,
        fresh: bool = False,
        base: VersionRecord | None = None,
        tidy_refused: bool = False,
        checked_manifest: str | None = None,
        head_key: str | None = None,
        known: VersionRecord | None = None,
    ) -> None:
        self.store = store
        self.name = name
        self.record = record
        self.record_revision = record_revision
        self.pending = pending
        self.lease = lease
        self.storage_options = storage_options or None
        # The typed errors behind failed callbacks: Lance wraps them, the catalog re-raises them.
        # A failed commit outranks the lookups Lance makes afterwards.
        self._commit_failure: LakeError | None = None
        self._read_failure: LakeError | None = None
        self._fault = fault
        # The catalog read the record under the lease just before the write: Lance's first
        # "latest version?" question needs no second read. After that, always re-read.
        self._fresh = fresh
        # With ``fresh``: the current version's record, when the caller read it too.
        self._base = base
        # A registered version's record a reader read with the head (``Reads``): not read again.
        self._known = known
        self._lock = threading.Lock()
        # The staged manifest the caller already checked (``table_files``) from its own read.
        self._checked_manifest = checked_manifest
        self.head_key = head_key or keys.table(name)  # or a branch's record (its own chain)
        where = (store, name, record.incarnation, record.location, self.storage_options)
        self.conflicts = CommitConflicts(
            *where, pending=pending, lease=lease, tidy_refused=tidy_refused, head_key=self.head_key
        )
        self.publisher = ManifestPublisher(*where, fault=fault)
        self._id = f"lake:{store.url}:{record.incarnation}:{new_id()}"

    def namespace_id(self) -> str:
        return self._id

    @property
    def failure(self) -> LakeError | None:
        return self.conflicts.raced or self._commit_failure or self._read_failure

    # -- table discovery -------------------------------------------------------------------

    def _check_id(self, request: Any) -> None:
        table_id = request_field(request, "id")
        if table_id is not None and list(table_id) != self.name.parts:
            raise ns_errors.InvalidInputError(f"this namespace serves {self.name}, not {'.'.join(table_id)}")

    def declare_table(self, request: Any) -> DeclareTableResponse:
        self._check_id(request)
        return DeclareTableResponse(
            location=self.record.location, managed_versioning=True, storage_options=self.storage_options
        )

    def describe_table(self, request: Any) -> DescribeTableResponse:
        self._check_id(request)
        held = self._held()
        return DescribeTableResponse(
            location=self.record.location,
            managed_versioning=True,
            version=(held[-1].version if held else self.record.current_version) or None,
            storage_options=self.storage_options,
        )

    def _held(self) -> list[VersionRecord]:
        """Versions of the pending commit held back from the registry until its last step."""
        return [h[0] for h in self.pending.held] if self.pending is not None else []

    # -- versions --------------------------------------------------------------------------

    def list_table_versions(self, request: Any) -> ListTableVersionsResponse:
        self._check_id(request)
        return self._guard(self._list_versions, request)

    def _list_versions(self, request: Any) -> ListTableVersionsResponse:
        limit = int_field(request, "limit", required=False)
        descending = bool(request_field(request, "descending"))
        after = page_after(request_field(request, "page_token"))
        held = self._held()
        if limit == 1 and descending and after is None and held:
            return ListTableVersionsResponse(versions=[table_version(held[-1])])
        if limit == 1 and descending and after is None:
            # Lance asks for "latest" before every commit: answer from the table record, one read.
            base = None
            if self._fresh:
                self._fresh = False
                # The writer's settle read the current version's record under the lease.
                base = self.pending.base if self.pending is not None else self._base
            else:
                self._refresh_record()
            current = self.record.current_version
            if current == 0:
                return ListTableVersionsResponse(versions=[])
            rec = base if base is not None and base.version == current else self._version(current)
            if (
                self.conflicts.unacquired
                and not engine.is_staging_manifest(rec.manifest_path)
                and not engine.manifest_exists(self.record.location, rec.manifest_path, self.storage_options)
            ):
                # No settle ran (it needs the lease): its one check a stat can make, here.
                self.conflicts.refuse_unacquired(
                    f"the manifest of version {current} of {self.name} is missing"
                )
            return ListTableVersionsResponse(versions=[self._answer(rec)])
        head, incarnation = self.record.current_version, self.record.incarnation
        records, token = version_page(
            self.store, incarnation, head, held, limit=limit or None, after=after, descending=descending
        )
        return ListTableVersionsResponse(versions=[self._answer(r) for r in records], page_token=token)

    def describe_table_version(self, request: Any) -> DescribeTableVersionResponse:
        self._check_id(request)
        version = int_field(request, "version")
        for rec in self._held():
            if rec.version == version:
                return DescribeTableVersionResponse(version=table_version(rec))
        return self._guard(lambda: DescribeTableVersionResponse(version=self._answer(self._version(version))))

    def create_table_version(self, request: Any) -> CreateTableVersionResponse:
        self._check_id(request)
        try:
            if self.conflicts.raced is not None:
                raise self.conflicts.raced  # Lance retries a conflict: nothing more lands under this lease
            response = self._create_version(request)
            self._commit_failure = None  # an earlier conflict was retried by Lance and resolved
            return response
        except LeaseRaced as exc:
            self._commit_failure = exc
            self.conflicts.remove_refused(str(request_field(request, "manifest_path")))
            raise ns_errors.from_error_code(int(exc.code), exc.message) from None
        except LakeError as exc:
            self._commit_failure = exc
            raise ns_errors.from_error_code(int(exc.code), exc.message) from None

    def _create_version(self, request: Any) -> CreateTableVersionResponse:
        pending = self.pending
        if pending is None or self.lease is None:
            raise Internal("this table handle is read-only: writes go through the catalog")
        version = int_field(request, "version")
        staging = str(request_field(request, "manifest_path"))
        if self._fault is not None:
            self._fault("staged")  # data files and the staging manifest are written, nothing registered
        require_version(staging, version)
        raw = count_created_files(pending, self.record.location, staging, self.storage_options)
        if staging != self._checked_manifest:
            # Before anything is registered: the version's files must all lie in this table.
            check_manifest(
                self.record.location,
                staging,
                self.storage_options,
                raw=raw,
                folder=self.record.folder,
                version=version,
            )
        # Under the lease, which an orphan reclaim holds while it deletes: the files it adds are there.
        require_added(self.record.location, pending.must_exist, staging, self.storage_options)
        # Register the version at its canonical path in the commit itself (the file is put there
        # right after, see ManifestPublisher): one registry write instead of commit + re-point. Only
        # when that path is free; a manifest squatting there (written around the registry)
        # keeps the old form, staging path first, which readers check against the squatter.
        canonical = (
            engine.canonical_manifest_path(staging, version) if engine.is_staging_manifest(staging) else None
        )
        if canonical is not None and engine.manifest_exists(
            self.record.location, canonical, self.storage_options
        ):
            self.conflicts.refuse_unacquired(f"a manifest written around the registry sits at {canonical}")
            canonical = None
        with self._lock, self.lease.fenced() as lease_check:
            held = self._held()
            if held:
                if version != held[-1].version + 1:
                    raise ConcurrentModification(f"version {version} of {self.name} is already committed")
            else:
                self.conflicts.require_next(version, self.record.current_version, self._refreshed_version)
            step = len(pending.landed) + len(held)
            at = log_ms()
            log_key = keys.log_entry(str(self.name), at, pending.commit_id, step)
            start = held[-1].version if held else self.record.current_version  # this step's from_version
            ver = VersionRecord(
                incarnation=self.record.incarnation,
                version=version,
                manifest_path=staging if canonical is None or len(held) < len(pending.hold) else canonical,
                staged_from=None if canonical is None or len(held) < len(pending.hold) else staging,
                manifest_size=request_field(request, "manifest_size"),
                e_tag=request_field(request, "e_tag"),
                naming_scheme=request_field(request, "naming_scheme"),
                committed_at_ms=at,
                commit_id=pending.commit_id,
                location=self.record.location if self.record.folder else None,
            )
            if len(held) < len(pending.hold):
                # A schema step the rest of this commit builds on: registered with the last step.
                entry = held_step_entry(
                    pending, self.record, str(self.name), from_version=start, version=version, at=at
                )
                pending.held.append((ver, log_key, entry))
                return CreateTableVersionResponse(version=table_version(ver))
            updates: dict[str, object] = {"current_version": version}
            if pending.schema_ipc is not None:
                updates["schema_ipc_b64"] = TableRecord.encode_schema(pending.schema_ipc)
            new_record = self.record.model_copy(update=updates)
            first = step == len(held)  # the first step this transaction registers for this commit
            target = str(self.name)
            entry = step_entry(
                pending,
                self.record,
                target,
                from_version=start,
                version=version,
                at=at,
                step=step,
                first=first,
            )
            marker = step_marker(
                self.store, pending, self.record, target, version=version, first=first, log_key=log_key, at=at
            )
            releases = pending.release_lease
            ops: list[Op] = [
                Put(keys.version(self.record.incarnation, version), ver.encode(), ABSENT),
                Put(self.head_key, new_record.encode(), self.record_revision),
                Put(log_key, entry.encode(), ABSENT),
                Put(keys.commit_marker(pending.commit_id), marker.encode(), pending.marker_revision),
                self.lease.release_op() if releases else lease_check,
            ]
            for h_ver, h_key, h_entry in pending.held:
                ops += [
                    Put(keys.version(self.record.incarnation, h_ver.version), h_ver.encode(), ABSENT),
                    Put(h_key, h_entry.encode(), ABSENT),
                ]
            if first:
                ops += pending.extra_ops
            published: tuple[VersionRecord, int] | None = None
            try:
                results = self.conflicts.transact(ops, version)  # over an unfinished publish's record
                assert results[0] is not None
                if releases:
                    released = results[4]
                    self.lease.released_by_commit(released.revision if released is not None else None)
                if self._fault is not None:
                    self._fault("registered")  # the version is committed; its manifest is not published yet
                published = self.publisher.publish(ver, results[0].revision)
                if self._fault is not None:
                    self._fault("after-commit")
            except ConditionFailed as exc:
                self._fresh = False
                raise self.conflicts.explain(exc, version, self.record_revision) from None
            except ServiceUnavailable:
                # Unknown outcome: look for our own version record before anyone retries.
                results = self.conflicts.resolve_unknown(version, pending.commit_id)
                if releases:
                    self.lease.released_by_commit()  # it landed, so did the release with it
            assert results[0] is not None and results[1] is not None and results[3] is not None
            if published is None:
                landed = decode(VersionRecord, results[0].value, results[0].key)
                published = self.publisher.publish(landed, results[0].revision)
            for h_ver, h_key, _ in pending.held:
                h_item = self.store.get(keys.version(self.record.incarnation, h_ver.version))
                if h_item is not None:
                    h_landed = decode(VersionRecord, h_item.value, h_item.key)
                    pending.versions[h_ver.version] = self.publisher.publish(h_landed, h_item.revision)
                pending.staged[h_ver.version] = h_ver.manifest_path
                pending.landed.append((h_ver.version, h_key))
            pending.held.clear()
            if first:
                pending.from_version = self.record.current_version
            ver = published[0]
            pending.versions[version] = published
            if engine.is_staging_manifest(ver.manifest_path) or ver.version not in self.publisher.unpublished:
                pending.staged[version] = staging  # removed once the version is finished
            self.record = new_record
            self.record_revision = results[1].revision
            pending.marker_revision = results[3].revision
            pending.landed.append((version, log_key))
        return CreateTableVersionResponse(version=table_version(ver))

    def _answer(self, rec: VersionRecord) -> TableVersion:
        """The version as Lance should open it. A record still naming a staging manifest (a
        writer stopped before finalizing it, or from before manifests were published first)
        is answered with the canonical manifest when that exists: given a staging path, Lance
        "finishes the commit" by writing to storage, on every open. A reader never does that."""
        if not engine.is_staging_manifest(rec.manifest_path):
            return table_version(rec)
        canonical = engine.canonical_manifest_path(rec.manifest_path, rec.version)
        size = engine.manifest_size(self.record.location, canonical, self.storage_options)
        if size is not None and rec.manifest_size in (None, size):  # a different size: not ours
            return table_version(rec.model_copy(update={"manifest_path": canonical, "e_tag": None}))
        if self.pending is None:
            raise InvalidTableState(
                f"version {rec.version} of {self.name} is committed but not finalized (its writer stopped "
                "before publishing the manifest); the next write or `repair` finishes it"
            )
        # Lance would finish it, writing to storage: only a writer holding the lease may.
        self.conflicts.refuse_unacquired(f"version {rec.version} of {self.name} is not finalized")
        return table_version(rec)  # a writer under the lease: Lance may finish it

    # -- helpers ---------------------------------------------------------------------------

    def _refreshed_version(self) -> int:
        self._refresh_record()
        return self.record.current_version

    def _refresh_record(self) -> None:
        if self.record_revision == ABSENT:
            return  # not registered yet: a create in progress
        item = self.store.get(self.head_key)
        if item is None:
            raise TableNotFound(f"table {self.name} (or its branch) no longer exists")
        record = decode(type(self.record), item.value, item.key)
        if record.incarnation != self.record.incarnation:
            raise TableNotFound(f"table {self.name} was dropped and recreated")
        self.record, self.record_revision = record, item.revision

    def _version(self, version: int) -> VersionRecord:
        if self._known is not None and self._known.version == version <= self.record.current_version:
            return self._known
        if version > self.record.current_version:  # above the head: an unfinished publish's
            self._refresh_record()  # (branch_publish), which no reader reaches
        item = self.store.get(keys.version(self.record.incarnation, version))
        if item is None or version > self.record.current_version:
            raise TableVersionNotFound(f"version {version} of {self.name} is not registered")
        return decode(VersionRecord, item.value, item.key)

    def _guard(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run a callback; translate our typed errors into the namespace spec's errors for Lance."""
        try:
            return fn(*args)
        except LakeError as exc:
            self._read_failure = exc
            raise ns_errors.from_error_code(int(exc.code), exc.message) from None


def request_field(request: Any, name: str) -> Any:
    # Lance passes plain dicts for some calls and pydantic models for others.
    if isinstance(request, dict):
        return request.get(name)
    return getattr(request, name, None)


def int_field(request: Any, name: str, *, required: bool = True) -> int | None:
    """An integer field of a request (Lance passes ints; a string of digits is taken too);
    InvalidInput naming the field for anything else, a negative number included."""
    value = request_field(request, name)
    if value is None and not required:
        return None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInput(f"invalid {name} {value!r}: expected a non-negative integer")
    return value


def table_version(rec: VersionRecord) -> TableVersion:
    return TableVersion(
        version=rec.version,
        manifest_path=rec.manifest_path,
        manifest_size=rec.manifest_size,
        e_tag=rec.e_tag,
        timestamp_millis=rec.committed_at_ms,
    )
