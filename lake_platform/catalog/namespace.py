"""The registry as Lance's external manifest store ("managed versioning").

Lance calls ``create_table_version(N)`` for every commit. Here that call *is* the registry's
compare-and-swap: one ``transact`` writes the version record, moves the table's current version
from N-1 to N, appends the commit-log entry and the commit-id marker, all conditional on the
writer's lease. If version N already exists Lance gets ConcurrentModification, rebases, and
retries with N+1.

Lance numbers a commit after the newest manifest it finds *on storage*, and builds it on that
manifest. So the registry also checks what a commit is built on: version N is accepted only if
N-1 is the registered current version; anything else was built on a manifest written around the
registry and is refused (the manifests above the registered version are moved to quarantine
first, so the next write lands where it should). Right after the registry accepts a staging
manifest, the namespace publishes it at its canonical path and points the version record there,
so no reader ever has to finish a commit (which, in Lance, means writing to storage).

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

from lake_platform.catalog.lease import Lease, LeaseRaced
from lake_platform.catalog.pending import PendingCommit as PendingCommit
from lake_platform.engine import lance_engine as engine
from lake_platform.errors import (
    ConcurrentModification,
    ConditionFailed,
    Internal,
    InvalidTableState,
    LakeError,
    LeaseExpired,
    ServiceUnavailable,
    TableAlreadyExists,
    TableNotFound,
    TableVersionNotFound,
)
from lake_platform.naming import TableName
from lake_platform.registry import keys
from lake_platform.registry.records import (
    CommitLogEntry,
    CommitMarker,
    TableRecord,
    VersionRecord,
    decode,
    log_ms,
    new_id,
)
from lake_platform.registry.store import ABSENT, Item, MetaStore, Op, Put

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
        # Under an unacquired lease: what refused the write for want of an acquired one.
        self._raced: LeaseRaced | None = None
        # The staging manifests Lance wrote for this namespace alone (the catalog's own write,
        # which writes again if refused; a REST client's commit retries the same manifest).
        self._tidy_refused = tidy_refused
        self._fault = fault
        # The catalog read the record under the lease just before the write: Lance's first
        # "latest version?" question needs no second read. After that, always re-read.
        self._fresh = fresh
        # With ``fresh``: the current version's record, when the caller read it too.
        self._base = base
        self._lock = threading.Lock()
        # Versions registered at their canonical path whose file could not be put there: their
        # staging manifest is the only copy and must stay until they are finished.
        self._unpublished: set[int] = set()
        self._id = f"lake:{store.url}:{record.incarnation}:{new_id()}"

    def namespace_id(self) -> str:
        return self._id

    @property
    def failure(self) -> LakeError | None:
        return self._raced or self._commit_failure or self._read_failure

    # -- table discovery -------------------------------------------------------------------

    def _check_id(self, request: Any) -> None:
        table_id = _field(request, "id")
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
        limit = _field(request, "limit")
        descending = bool(_field(request, "descending"))
        held = self._held()
        if limit == 1 and descending and held:
            return ListTableVersionsResponse(versions=[_table_version(held[-1])])
        if limit == 1 and descending:
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
                self._unacquired
                and not engine.is_staging_manifest(rec.manifest_path)
                and not engine.manifest_exists(self.record.location, rec.manifest_path, self.storage_options)
            ):
                # No settle ran (it needs the lease): its one check a stat can make, here.
                self._refuse_unacquired(f"the manifest of version {current} of {self.name} is missing")
            return ListTableVersionsResponse(versions=[self._answer(rec)])
        items = list(self.store.scan_prefix(keys.versions(self.record.incarnation)))
        records = [decode(VersionRecord, i.value, i.key) for i in items] + held
        if descending:
            records.reverse()
        if limit:
            records = records[: int(limit)]
        return ListTableVersionsResponse(versions=[self._answer(r) for r in records])

    def describe_table_version(self, request: Any) -> DescribeTableVersionResponse:
        self._check_id(request)
        version = int(_field(request, "version"))
        for rec in self._held():
            if rec.version == version:
                return DescribeTableVersionResponse(version=_table_version(rec))
        return self._guard(lambda: DescribeTableVersionResponse(version=self._answer(self._version(version))))

    def create_table_version(self, request: Any) -> CreateTableVersionResponse:
        self._check_id(request)
        try:
            if self._raced is not None:
                raise self._raced  # Lance retries a conflict: nothing more lands under this lease
            response = self._create_version(request)
            self._commit_failure = None  # an earlier conflict was retried by Lance and resolved
            return response
        except LeaseRaced as exc:
            self._commit_failure = exc
            self._remove_refused(str(_field(request, "manifest_path")))
            raise ns_errors.from_error_code(int(exc.code), exc.message) from None
        except LakeError as exc:
            self._commit_failure = exc
            raise ns_errors.from_error_code(int(exc.code), exc.message) from None

    def _remove_refused(self, staging: str) -> None:
        """The staging manifest of a commit refused under an unacquired lease: certainly not
        registered (the refusal came before the transaction, or as its definite condition
        failure), and named for this write alone, so removed like any finalized one. Its data
        files are left to the orphan scan, as for any refused write."""
        if not self._tidy_refused or not engine.is_staging_manifest(staging):
            return
        try:
            engine.remove_files(self.record.location, [staging], self.storage_options)
        except Exception:  # noqa: BLE001 - only tidying: the orphan scan finds it otherwise
            log.warning("could not remove the refused staging manifest %s", staging, exc_info=True)

    def _create_version(self, request: Any) -> CreateTableVersionResponse:
        pending = self.pending
        if pending is None or self.lease is None:
            raise Internal("this table handle is read-only: writes go through the catalog")
        version = int(_field(request, "version"))
        staging = str(_field(request, "manifest_path"))
        if self._fault is not None:
            self._fault("staged")  # data files and the staging manifest are written, nothing registered
        # Register the version at its canonical path in the commit itself (the file is put there
        # right after, see _publish): one registry write instead of commit + re-point. Only
        # when that path is free; a manifest squatting there (written around the registry)
        # keeps the old form, staging path first, which readers check against the squatter.
        canonical = (
            engine.canonical_manifest_path(staging, version) if engine.is_staging_manifest(staging) else None
        )
        if canonical is not None and engine.manifest_exists(
            self.record.location, canonical, self.storage_options
        ):
            self._refuse_unacquired(f"a manifest written around the registry sits at {canonical}")
            canonical = None
        with self._lock, self.lease.fenced() as lease_check:
            held = self._held()
            if held:
                if version != held[-1].version + 1:
                    raise ConcurrentModification(f"version {version} of {self.name} is already committed")
            else:
                self._require_next(version)
            step = len(pending.landed) + len(held)
            at = log_ms()
            log_key = keys.log_entry(str(self.name), at, pending.commit_id, step)
            ver = VersionRecord(
                incarnation=self.record.incarnation,
                version=version,
                manifest_path=staging if canonical is None or len(held) < len(pending.hold) else canonical,
                staged_from=None if canonical is None or len(held) < len(pending.hold) else staging,
                manifest_size=_field(request, "manifest_size"),
                e_tag=_field(request, "e_tag"),
                naming_scheme=_field(request, "naming_scheme"),
                committed_at_ms=at,
                commit_id=pending.commit_id,
            )
            if len(held) < len(pending.hold):
                # A schema step the rest of this commit builds on: registered with the last step.
                entry = CommitLogEntry(
                    commit_id=pending.commit_id,
                    target=str(self.name),
                    operation=pending.hold[len(held)],
                    actor=pending.actor,
                    run_id=pending.run_id,
                    at_ms=at,
                    incarnation=self.record.incarnation,
                    from_version=held[-1].version if held else self.record.current_version,
                    to_version=version,
                    detail=dict(pending.detail),
                )
                pending.held.append((ver, log_key, entry))
                return CreateTableVersionResponse(version=_table_version(ver))
            updates: dict[str, object] = {"current_version": version}
            if pending.schema_ipc is not None:
                updates["schema_ipc_b64"] = TableRecord.encode_schema(pending.schema_ipc)
            new_record = self.record.model_copy(update=updates)
            first = step == len(held)  # the first step this transaction registers for this commit
            rows, nbytes = pending.stream_totals() if pending.stream_totals and first else (0, 0)
            entry = CommitLogEntry(
                commit_id=pending.commit_id,
                target=str(self.name),
                operation=pending.operation if first else f"{pending.operation}#{step}",
                actor=pending.actor,
                run_id=pending.run_id,
                at_ms=at,
                incarnation=self.record.incarnation,
                from_version=held[-1].version if held else self.record.current_version,
                to_version=version,
                rows_added=rows,
                bytes_added=nbytes,
                files_added=pending.files_added if first else 0,
                rows_removed=pending.rows_removed if first else 0,
                detail=dict(pending.detail),
            )
            marker = CommitMarker(
                commit_id=pending.commit_id,
                target=str(self.name),
                operation=pending.operation,
                incarnation=self.record.incarnation,
                from_version=(self.record.current_version if first else None),
                to_version=version,
                log_key=log_key,
                at_ms=at,
            )
            if pending.marker_revision != ABSENT:
                # A later step of this commit, or the continuation of an interrupted one: the
                # commit still starts where its first step did.
                first = self.store.get(keys.commit_marker(pending.commit_id))
                if first is not None:
                    marker = marker.model_copy(
                        update={"from_version": decode(CommitMarker, first.value).from_version}
                    )
            releases = pending.release_lease
            ops: list[Op] = [
                Put(keys.version(self.record.incarnation, version), ver.encode(), ABSENT),
                Put(keys.table(self.name), new_record.encode(), self.record_revision),
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
                results = self.store.transact(ops)
                assert results[0] is not None
                if releases:
                    released = results[4]
                    self.lease.released_by_commit(released.revision if released is not None else None)
                if self._fault is not None:
                    self._fault("registered")  # the version is committed; its manifest is not published yet
                published = self._publish(ver, results[0].revision)
                if self._fault is not None:
                    self._fault("after-commit")
            except ConditionFailed as exc:
                self._fresh = False
                raise self._explain_conflict(exc, version) from None
            except ServiceUnavailable:
                # Unknown outcome: look for our own version record before anyone retries.
                results = self._resolve_unknown(version, pending.commit_id)
                if releases:
                    self.lease.released_by_commit()  # it landed, so did the release with it
            assert results[0] is not None and results[1] is not None and results[3] is not None
            if published is None:
                landed = decode(VersionRecord, results[0].value, results[0].key)
                published = self._publish(landed, results[0].revision)
            for h_ver, h_key, _ in pending.held:
                h_item = self.store.get(keys.version(self.record.incarnation, h_ver.version))
                if h_item is not None:
                    h_landed = decode(VersionRecord, h_item.value, h_item.key)
                    pending.versions[h_ver.version] = self._publish(h_landed, h_item.revision)
                pending.staged[h_ver.version] = h_ver.manifest_path
                pending.landed.append((h_ver.version, h_key))
            pending.held.clear()
            if first:
                pending.from_version = self.record.current_version
            ver = published[0]
            pending.versions[version] = published
            if engine.is_staging_manifest(ver.manifest_path) or ver.version not in self._unpublished:
                pending.staged[version] = staging  # removed once the version is finished
            self.record = new_record
            self.record_revision = results[1].revision
            pending.marker_revision = results[3].revision
            pending.landed.append((version, log_key))
        return CreateTableVersionResponse(version=_table_version(ver))

    def _publish(self, ver: VersionRecord, revision: int) -> tuple[VersionRecord, int]:
        """Right after the registry accepted a staging manifest: put it at its canonical path
        (and, for a version registered at its staging path, point the record there), so that
        nobody ever opens a staging manifest (Lance "finishes the commit" on open, writing to
        storage each time). Only after the commit: a writer whose commit is refused (a lost
        lease) must leave no canonical manifest. A failure leaves the version committed but
        unpublished; the next writer (settle) or ``finish_versions`` publishes it."""
        if ver.staged_from is not None and not engine.is_staging_manifest(ver.manifest_path):
            return self._publish_registered(ver, revision)
        if not engine.is_staging_manifest(ver.manifest_path):
            return ver, revision  # resolved after an unknown outcome: already published
        try:
            final = engine.finalize_manifest(
                self.record.location, ver.version, ver.manifest_path, self.storage_options
            )
            if self._fault is not None:
                self._fault("finalize-copied")
            done = ver.model_copy(update={"manifest_path": final})
            item = self.store.compare_and_swap(
                keys.version(self.record.incarnation, ver.version), revision, done.encode()
            )
            if self._fault is not None:
                self._fault("finalize-swapped")
            return done, item.revision
        except Exception:  # noqa: BLE001 - the commit stands either way
            log.warning(
                "could not publish the manifest of %s version %s", self.name, ver.version, exc_info=True
            )
            return ver, revision

    def _publish_registered(self, ver: VersionRecord, revision: int) -> tuple[VersionRecord, int]:
        """Publish a version the commit registered at its canonical path: copy (locally: hard
        link) the staging manifest there. No registry write."""
        assert ver.staged_from is not None
        try:
            try:
                engine.finalize_manifest(
                    self.record.location, ver.version, ver.staged_from, self.storage_options
                )
            except (engine.ManifestConflict, OSError):
                # The lease went with the commit: a next writer or a reader may have published
                # it already (and removed the staging manifest).
                if not engine.manifest_exists(self.record.location, ver.manifest_path, self.storage_options):
                    raise
                if engine.manifest_exists(self.record.location, ver.staged_from, self.storage_options):
                    raise  # both there and different: a squatter
            if self._fault is not None:
                self._fault("finalize-copied")
            return ver, revision
        except engine.ManifestConflict:
            # A manifest written around the registry took the path after our check: register
            # the staging path after all (the old form; readers compare it with the squatter,
            # and the next writer quarantines the squatter and publishes).
            log.warning(
                "%s version %s: a manifest written around the registry took its canonical path; "
                "the version stays at its staging manifest",
                self.name,
                ver.version,
            )
            back = ver.model_copy(update={"manifest_path": ver.staged_from, "staged_from": None})
            try:
                item = self.store.compare_and_swap(
                    keys.version(self.record.incarnation, ver.version), revision, back.encode()
                )
            except Exception:  # noqa: BLE001 - left for settle / finish_versions
                self._unpublished.add(ver.version)
                log.warning("could not re-point %s version %s", self.name, ver.version, exc_info=True)
                return ver, revision
            return back, item.revision
        except Exception:  # noqa: BLE001 - the commit stands either way
            self._unpublished.add(ver.version)
            log.warning(
                "could not publish the manifest of %s version %s", self.name, ver.version, exc_info=True
            )
            return ver, revision

    def _require_next(self, version: int) -> None:
        """Accept version N only on top of the registered N-1 (Lance builds on whatever it
        found newest on storage, registered or not)."""
        if version == self.record.current_version + 1:
            return
        self._refresh_record()  # Lance may be retrying after a conflict: compare with the latest
        current = self.record.current_version
        if version == current + 1:
            return
        if version <= current:
            raise ConcurrentModification(f"version {version} of {self.name} is already committed")
        on_disk = engine.canonical_manifests(self.record.location, self.storage_options)
        rogue = sorted(p for v, paths in on_disk.items() if v > current for p in paths)
        if rogue:
            self._refuse_unacquired(
                f"manifests written around the registry sit above version {current} of {self.name}"
            )
        moved: list[str] = []
        if rogue and self._lease_is_current():  # a writer that lost its lease moves nothing
            moved = engine.quarantine_files(
                self.record.location, rogue, f"refused-{new_id()}", self.storage_options
            )
        raise InvalidTableState(
            f"commit of version {version} of {self.name} refused: it was not built on the registered version "
            f"{current} but on manifests written around the registry "
            f"({', '.join(rogue) or 'since removed'}); "
            f"nothing was committed{'; they were moved to ' + engine.QUARANTINE_DIR + '/' if moved else ''}. "
            "Retry the write."
        )

    @property
    def _unacquired(self) -> bool:
        """Writing under an unacquired lease (``WriteGate.hold_for_commit``, ``hold_unacquired``)."""
        return self.lease is not None and self.lease.optimistic

    def _refuse_unacquired(self, why: str) -> None:
        """LeaseRaced under an unacquired lease: what ``why`` says needs storage changed or a
        typed refusal, both the work of a writer holding the lease; nothing landed, so the
        caller retries under an acquired one (whose settle sees the same and acts on it)."""
        if self._unacquired:
            raise self._raced_by(LeaseRaced(f"{why}; nothing was committed"))

    def _raced_by(self, exc: LeaseRaced) -> LeaseRaced:
        """Note the first LeaseRaced: it is the write's outcome, whatever Lance's retries meet
        after it, and nothing more is committed under the lease."""
        if self.lease is not None:
            self.lease.mark_lost()
        if self._raced is None:
            self._raced = exc
        return exc

    def _lease_is_current(self) -> bool:
        if self.lease is None or self.lease.optimistic:
            # An unacquired lease guards one commit, not storage: never quarantine under it
            # (another writer may acquire, commit and publish at any moment).
            return False
        item = self.store.get(self.lease.key)
        return item is not None and item.revision == self.lease.revision

    def _answer(self, rec: VersionRecord) -> TableVersion:
        """The version as Lance should open it. A record still naming a staging manifest (a
        writer stopped before finalizing it, or from before manifests were published first)
        is answered with the canonical manifest when that exists: given a staging path, Lance
        "finishes the commit" by writing to storage, on every open. A reader never does that."""
        if not engine.is_staging_manifest(rec.manifest_path):
            return _table_version(rec)
        canonical = engine.canonical_manifest_path(rec.manifest_path, rec.version)
        size = engine.manifest_size(self.record.location, canonical, self.storage_options)
        if size is not None and rec.manifest_size in (None, size):  # a different size: not ours
            return _table_version(rec.model_copy(update={"manifest_path": canonical, "e_tag": None}))
        if self.pending is None:
            raise InvalidTableState(
                f"version {rec.version} of {self.name} is committed but not finalized (its writer stopped "
                "before publishing the manifest); the next write or `repair` finishes it"
            )
        # Lance would finish it, writing to storage: only a writer holding the lease may.
        self._refuse_unacquired(f"version {rec.version} of {self.name} is not finalized")
        return _table_version(rec)  # a writer under the lease: Lance may finish it

    def _resolve_unknown(self, version: int, commit_id: str) -> list[Item | None]:
        item = self.store.get(keys.version(self.record.incarnation, version))
        if item is None or decode(VersionRecord, item.value).commit_id != commit_id:
            raise ServiceUnavailable(
                f"registry unavailable while committing version {version} of {self.name}"
            )
        table = self.store.get(keys.table(self.name))
        marker = self.store.get(keys.commit_marker(commit_id))
        if table is None or marker is None:
            raise Internal(f"commit {commit_id} landed partially")  # transact is atomic: cannot happen
        return [item, table, None, marker, None]

    def _explain_conflict(self, exc: ConditionFailed, version: int) -> LakeError:
        lease_key = self.lease.key if self.lease else None
        if exc.key == lease_key:
            if self.lease is not None:
                self.lease.mark_lost()
            if self._unacquired:
                return self._raced_by(
                    LeaseRaced(
                        f"another writer took the lease on {self.name} meanwhile; version {version} "
                        "was not committed, retry"
                    )
                )
            return LeaseExpired(
                f"write lease on {self.name} was taken over; commit of version {version} refused"
            )
        if exc.key == keys.table(self.name) and self.record_revision == ABSENT:
            return TableAlreadyExists(f"table {self.name} already exists")
        if self.pending is not None and exc.key in {
            op.key for op in self.pending.extra_ops if isinstance(op, Put)
        }:
            return ConcurrentModification(
                f"part of this commit to {self.name} (a marker it carries) landed "
                f"concurrently; version {version} was not committed"
            )
        if self.pending is not None and exc.key in {op.key for op in self.pending.extra_ops}:
            from lake_platform.errors import NamespaceNotFound

            return NamespaceNotFound(f"namespace {self.name.namespace_name} was dropped during the create")
        if exc.key == keys.table(self.name) or exc.key is None:
            # Find out whether our incarnation is still the registered one.
            item = self.store.get(keys.table(self.name))
            if item is None or decode(TableRecord, item.value).incarnation != self.record.incarnation:
                return TableNotFound(f"table {self.name} was dropped or replaced while being written")
            if self._unacquired and exc.key is not None:
                # The record was read before the lease, not under it: nothing landed, and the
                # write made again under an acquired lease reads what changed.
                return self._raced_by(
                    LeaseRaced(
                        f"the record of {self.name} changed since it was read; version {version} "
                        "was not committed, retry"
                    )
                )
        return ConcurrentModification(f"version {version} of {self.name} was committed concurrently")

    # -- helpers ---------------------------------------------------------------------------

    def _refresh_record(self) -> None:
        if self.record_revision == ABSENT:
            return  # not registered yet: a create in progress
        item = self.store.get(keys.table(self.name))
        if item is None:
            raise TableNotFound(f"table {self.name} no longer exists")
        record = decode(TableRecord, item.value, item.key)
        if record.incarnation != self.record.incarnation:
            raise TableNotFound(f"table {self.name} was dropped and recreated")
        self.record, self.record_revision = record, item.revision

    def _version(self, version: int) -> VersionRecord:
        item = self.store.get(keys.version(self.record.incarnation, version))
        if item is None:
            raise TableVersionNotFound(f"version {version} of {self.name} is not registered")
        return decode(VersionRecord, item.value, item.key)

    def _guard(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run a callback; translate our typed errors into the namespace spec's errors for Lance."""
        try:
            return fn(*args)
        except LakeError as exc:
            self._read_failure = exc
            raise ns_errors.from_error_code(int(exc.code), exc.message) from None


def _field(request: Any, name: str) -> Any:
    # Lance passes plain dicts for some calls and pydantic models for others.
    if isinstance(request, dict):
        return request.get(name)
    return getattr(request, name, None)


def _table_version(rec: VersionRecord) -> TableVersion:
    return TableVersion(
        version=rec.version,
        manifest_path=rec.manifest_path,
        manifest_size=rec.manifest_size,
        e_tag=rec.e_tag,
        timestamp_millis=rec.committed_at_ms,
    )
