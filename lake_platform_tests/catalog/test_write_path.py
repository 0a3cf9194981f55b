"""The catalog write path: snapshot reads, commits through the registry, stale maintenance,
stale drops, lease expiry, multi-process concurrency and ambiguous outcomes."""

from __future__ import annotations

import threading
from typing import Any

import pyarrow as pa
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.catalog.provenance import Provenance
from lake_platform.engine import lance_engine as engine
from lake_platform.errors import (
    ConcurrentModification,
    LeaseExpired,
    ServiceUnavailable,
    TableNotFound,
)
from lake_platform.naming import TableName
from lake_platform.registry import keys
from lake_platform.registry.records import CommitLogEntry, LeaseRecord, decode
from lake_platform.registry.store import MetaStore
from lake_platform_tests.catalog.conftest import Lake, append_in_processes, ids_of, rows
from lake_platform_tests.catalog.registry_calls import RegistryCalls
from lake_platform_tests.doubles import ManualClock

T = "p.w.ns.t"


def registry_version(catalog: Catalog, name: str = T) -> int:
    return catalog.reads.describe_table(name, with_stats=False).current_version


def appends_logged(catalog: Catalog, name: str = T) -> list[CommitLogEntry]:
    return [e for e in catalog.reads.history(name) if e.operation == "append"]


def opts(lake: Lake, location: str) -> dict[str, str]:
    """Storage options for a table location (empty on local disk)."""
    return lake.settings.storage_options(location)


def test_snapshot_read_sees_only_its_version(lake: Lake) -> None:
    lake.catalog.tables.create_table(T, rows([1, 2, 3]))
    lake.catalog.tables.append(T, rows([4, 5]))
    assert ids_of(lake.catalog.reads.open_table(T, 1)) == [1, 2, 3]
    assert ids_of(lake.catalog.reads.open_table(T, 2)) == [1, 2, 3, 4, 5]
    assert ids_of(lake.catalog.reads.open_table(T)) == [1, 2, 3, 4, 5]


def test_open_follows_the_registry_not_the_disk(lake: Lake) -> None:
    """A version on disk that the registry never accepted is invisible (invariant 1)."""
    lake.catalog.tables.create_table(T, rows([1]))
    record = lake.catalog.reads.open_table(T).record
    # Simulate a rogue commit: a writer that bypasses the registry writes version 2 on disk.
    snap = lake.catalog.reads.open_table(T)
    import lance  # the test plays the rogue writer; the package never does this

    lance.write_dataset(
        rows([99]), record.location, mode="append", storage_options=opts(lake, record.location) or None
    )
    assert max(engine.versions_on_disk(record.location, opts(lake, record.location))) == 2
    assert registry_version(lake.catalog) == 1
    assert ids_of(lake.catalog.reads.open_table(T)) == [1]
    assert snap.version == 1


def test_every_commit_lands_in_registry_with_log_entry(lake: Lake) -> None:
    created = lake.catalog.tables.create_table(T, rows([1, 2]), by=Provenance(actor="alice", run_id="run-1"))
    appended = lake.catalog.tables.append(T, rows([3]))
    assert (created.from_version, created.to_version) == (0, 1)
    assert (appended.from_version, appended.to_version) == (1, 2)
    log = lake.catalog.reads.history(T)
    assert [(e.operation, e.from_version, e.to_version) for e in log] == [("create", 0, 1), ("append", 1, 2)]
    assert log[0].actor == "alice" and log[0].run_id == "run-1" and log[0].rows_added == 2
    assert log[1].rows_added == 1 and log[1].commit_id == appended.commit_id
    location = lake.catalog.reads.open_table(T).record.location
    assert engine.versions_on_disk(location, opts(lake, location))[-1] == registry_version(lake.catalog) == 2


def test_a_create_logs_its_files_in_the_commit_and_writes_the_entry_once(lake: Lake) -> None:
    """A create's log entry lands complete (the files and file bytes Lance's transaction
    records) with the version, which also releases the lease: no table open, entry read and
    rewrite, or lease release after it (a table open and five registry requests less a table)."""
    calls = RegistryCalls(lake.catalog.store)
    with Catalog(lake.settings, calls) as writer:
        writer.tables.create_table(T, rows([1, 2, 3]))
    touched = [(method, k) for method, ks in calls.calls for k in ks if k.startswith(keys.log_prefix(T))]
    assert [method for method, _ in touched] == ["transact"]
    [(method, committed)] = [call for call in calls.calls if call[0] != "get_many"][1:]  # after the lease
    assert method == "transact" and keys.lease(lake.catalog.reads.describe_table(T).incarnation) in committed
    [entry] = lake.catalog.reads.history(T)
    change = engine.change_stats(lake.catalog.reads.open_table(T).dataset, 1)
    assert (entry.files_added, entry.bytes_added) == (change.files_added, change.bytes_added)
    assert entry.files_added == 1 and entry.bytes_added > 0
    assert (entry.files_removed, entry.bytes_removed, entry.rows_added) == (0, 0, 3)


def test_compaction_commits_through_the_catalog(lake: Lake) -> None:
    lake.catalog.tables.create_table(T, rows([0]))
    for i in range(1, 6):
        lake.catalog.tables.append(T, rows([i]))
    before = lake.catalog.reads.describe_table(T)
    result = lake.catalog.versions.compact(T)
    assert result.status == "committed"
    after = lake.catalog.reads.describe_table(T)
    assert after.current_version == result.version > before.current_version
    assert after.fragments == 1 and after.rows == 6
    assert engine.versions_on_disk(after.location, opts(lake, after.location))[-1] == after.current_version
    assert lake.catalog.reads.open_table(T).dataset.version == after.current_version
    ops = [e.operation for e in lake.catalog.reads.history(T)]
    assert ops[-2:] == ["compact", "compact#1"]  # Lance commits ReserveFragments, then Rewrite
    rewrite = lake.catalog.reads.history(T)[-1]
    assert rewrite.files_removed == 6 and rewrite.files_added == 1
    assert lake.catalog.versions.compact(T).status == "nothing-to-do"


def test_stale_compaction_is_rebased_over_an_append(lake: Lake) -> None:
    lake.catalog.tables.create_table(T, rows([0]))
    for i in range(1, 4):
        lake.catalog.tables.append(T, rows([i]))
    planned = lake.catalog.versions.plan_compaction(T)
    results = lake.catalog.versions.execute_compaction(planned)
    lake.catalog.tables.append(T, rows([100, 101]))  # lands after the plan
    result = lake.catalog.versions.commit_compaction(planned, results)
    assert result.status == "committed"
    assert result.version == registry_version(lake.catalog) > planned.read_version + 1
    assert ids_of(lake.catalog.reads.open_table(T)) == [0, 1, 2, 3, 100, 101]


def test_stale_compaction_conflicting_with_a_delete_is_skipped(lake: Lake) -> None:
    lake.catalog.tables.create_table(T, rows([0]))
    for i in range(1, 4):
        lake.catalog.tables.append(T, rows([i]))
    planned = lake.catalog.versions.plan_compaction(T)
    results = lake.catalog.versions.execute_compaction(planned)
    deleted = lake.catalog.tables.delete_rows(T, "id = 2")  # touches the fragments being compacted
    result = lake.catalog.versions.commit_compaction(planned, results)
    assert result.status == "skipped-stale"
    # Lance's ReserveFragments step may have landed (a version that changes no data); the
    # rewrite did not, so the delete's effect stands.
    assert registry_version(lake.catalog) == result.version >= deleted.to_version  # type: ignore[operator]
    assert ids_of(lake.catalog.reads.open_table(T)) == [0, 1, 3]
    last = lake.catalog.reads.history(T)[-1]
    assert (
        last.operation == "compact" and last.detail["status"] == "skipped-stale" and last.to_version is None
    )


def test_stale_drop_never_touches_the_replacement(lake: Lake) -> None:
    lake.catalog.tables.create_table(T, rows([1]))
    paused, resume = threading.Event(), threading.Event()

    def hook(point: str) -> None:
        if point == "drop:resolved":
            paused.set()
            assert resume.wait(30)

    stale = lake.new_catalog(hook=hook)
    outcome: list[BaseException | object] = []

    def stale_drop() -> None:
        try:
            outcome.append(stale.trash.drop_table(T, purge=True))
        except BaseException as exc:  # noqa: BLE001
            outcome.append(exc)

    worker = threading.Thread(target=stale_drop)
    worker.start()
    assert paused.wait(30)
    lake.catalog.trash.drop_table(T, purge=True)
    lake.catalog.tables.create_table(T, rows([7, 8]))
    replacement = lake.catalog.reads.open_table(T).record
    resume.set()
    worker.join(30)
    assert isinstance(outcome[0], TableNotFound)
    assert ids_of(lake.catalog.reads.open_table(T)) == [7, 8]
    assert lake.catalog.reads.open_table(T).record.incarnation == replacement.incarnation
    stale.close()


def test_drop_removes_registration_before_data(lake: Lake) -> None:
    lake.catalog.tables.create_table(T, rows([1]))
    location = lake.catalog.reads.open_table(T).record.location
    seen: dict[str, Any] = {}

    def hook(point: str) -> None:
        if point == "drop:after-commit":
            seen["registered"] = lake.catalog.store.get(keys.table(_tn()))
            seen["files"] = list(engine.list_files(location, opts(lake, location)))

    dropper = lake.new_catalog(hook=hook)
    dropper.trash.drop_table(T, purge=True)
    assert seen["registered"] is None and seen["files"]  # deregistered while the data still existed
    assert list(engine.list_files(location, opts(lake, location))) == []
    with pytest.raises(TableNotFound):
        lake.catalog.reads.open_table(T)
    dropper.close()


def _tn() -> Any:
    from lake_platform.naming import TableName

    return TableName.parse(T)


class LaggingClock:
    """``clock``, its monotonic time ``lag`` seconds behind: a holder whose clock lies."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock, self.lag = clock, 0.0

    def monotonic(self) -> float:
        return self.clock.monotonic() - self.lag

    def wall_ms(self) -> int:
        return self.clock.wall_ms()


def test_expired_lease_is_rejected_and_fenced(lake: Lake) -> None:
    clock = ManualClock()
    first_clock = LaggingClock(clock)
    first = lake.new_catalog(clock=first_clock, heartbeat=False)
    first.tables.create_table(T, rows([1]))
    incarnation = first.reads.open_table(T).record.incarnation
    lease = first.gate.acquire(incarnation)
    lease.check()
    clock.advance(lake.settings.lease_ttl_seconds - lake.settings.lease_safety_margin_seconds + 0.001)
    # Nobody else campaigned, but the holder's own deadline (minus margin) has passed.
    with pytest.raises(LeaseExpired):
        lease.check()
    clock.advance(lake.settings.lease_safety_margin_seconds)  # now expired for everyone
    second = lake.new_catalog(clock=clock, heartbeat=False)
    taken = second.gate.acquire(incarnation)
    assert taken.token == lease.token + 1
    # The first holder's late commit is refused by the registry condition, even if it ignores its
    # own clock and tries to write anyway.
    from lake_platform.catalog.namespace import BoundTableNamespace
    from lake_platform.catalog.pending import PendingCommit

    record, revision = first.ctx.table(_tn())
    pending = PendingCommit(commit_id="late-commit-0001", operation="append", actor="late")
    first_clock.lag = 100.0  # a lying clock: the first holder believes its lease has time left
    lease.check()
    ns = BoundTableNamespace(
        first.store,
        _tn(),
        record,
        revision,
        pending=pending,
        lease=lease,
        storage_options=opts(lake, record.location),
    )
    # lance reports the refused commit as an OSError ("commit result ... is unknown"); the typed
    # cause is what the namespace recorded, checked below.
    with pytest.raises(OSError):
        engine.write(
            rows([666]),
            namespace=ns,
            table_id=_tn().parts,
            mode="append",
            storage_options=opts(lake, record.location),
        )
    assert isinstance(ns.failure, LeaseExpired)
    assert registry_version(lake.catalog) == 1 and ids_of(lake.catalog.reads.open_table(T)) == [1]
    # The new holder commits fine.
    pending2 = PendingCommit(commit_id="new-commit-0001", operation="append", actor="second")
    ns2 = BoundTableNamespace(
        second.store,
        _tn(),
        record,
        revision,
        pending=pending2,
        lease=taken,
        storage_options=opts(lake, record.location),
    )
    engine.write(
        rows([2]),
        namespace=ns2,
        table_id=_tn().parts,
        mode="append",
        storage_options=opts(lake, record.location),
    )
    assert ids_of(lake.catalog.reads.open_table(T)) == [1, 2]
    stored = decode(LeaseRecord, lake.catalog.store.get(keys.lease(incarnation)).value)  # type: ignore[union-attr]
    assert stored.token == taken.token and stored.holder == taken.holder
    first.close()
    second.close()


def test_writer_waits_for_a_held_lease(lake: Lake) -> None:
    lake.catalog.tables.create_table(T, rows([1]))
    incarnation = lake.catalog.reads.open_table(T).record.incarnation
    impatient = Catalog(lake.settings.model_copy(update={"lease_wait_seconds": 0.0}))
    with lake.catalog.gate.hold(incarnation):
        from lake_platform.errors import LeaseUnavailable

        with pytest.raises(LeaseUnavailable):
            impatient.tables.append(T, rows([2]))
    impatient.tables.append(T, rows([2]))
    assert ids_of(lake.catalog.reads.open_table(T)) == [1, 2]
    impatient.close()


@pytest.mark.slow
def test_four_processes_appending_lose_no_commit(lake: Lake) -> None:
    lake.catalog.tables.create_table(T, rows([-1]))
    append_in_processes(T, lake.settings, 4, 50)
    snap = lake.catalog.reads.open_table(T)
    assert snap.version == registry_version(lake.catalog) == 201
    assert engine.versions_on_disk(snap.record.location, opts(lake, snap.record.location))[-1] == 201
    assert len(appends_logged(lake.catalog)) == 200
    expected = sorted([-1] + [w * 1000 + i for w in range(4) for i in range(50)])
    assert ids_of(snap) == expected
    versions = [e.to_version for e in lake.catalog.reads.history(T)]
    assert sorted(versions) == list(range(1, 202))  # no gaps, no duplicates


class _FailAfterCommit:
    """Raises once, right after the registry commit landed: the caller cannot know it did."""

    def __init__(self) -> None:
        self.fired = False

    def __call__(self, point: str) -> None:
        if point.endswith(":after-commit") and not self.fired:
            self.fired = True
            raise ServiceUnavailable("connection reset after the commit was sent")


def test_ambiguous_outcome_is_resolved_by_commit_id(lake: Lake) -> None:
    lake.catalog.tables.create_table(T, rows([1]))
    flaky = lake.new_catalog(hook=_FailAfterCommit())
    first = flaky.tables.append(T, rows([2]), by=Provenance(commit_id="ingest-batch-0001"))
    assert first.to_version == 2 and not first.replayed
    retry = flaky.tables.append(T, rows([2]), by=Provenance(commit_id="ingest-batch-0001"))
    assert retry.replayed and retry.to_version == 2
    assert ids_of(lake.catalog.reads.open_table(T)) == [1, 2]
    assert len(appends_logged(lake.catalog)) == 1
    flaky.close()


def test_retry_with_same_commit_id_after_error_does_not_double_append(lake: Lake) -> None:
    """The caller saw an error; it retries with the same commit id; nothing is written twice."""
    lake.catalog.tables.create_table(T, rows([1]))

    class Broken:
        def __call__(self, point: str) -> None:
            if point == "append:after-write":
                raise ConnectionError("client lost the answer")

    flaky = lake.new_catalog(hook=Broken())
    with pytest.raises(ConnectionError):
        flaky.tables.append(T, rows([2]), by=Provenance(commit_id="ingest-batch-0002"))
    retry = lake.catalog.tables.append(T, rows([2]), by=Provenance(commit_id="ingest-batch-0002"))
    assert retry.replayed
    assert ids_of(lake.catalog.reads.open_table(T)) == [1, 2]
    flaky.close()


def test_concurrent_modification_is_retryable_type() -> None:
    assert ConcurrentModification.retryable and LeaseExpired.retryable


def test_store_is_shared_by_namespace_and_catalog(lake: Lake) -> None:
    assert isinstance(lake.catalog.store, MetaStore)
    lake.catalog.tables.create_table(T, pa.table({"id": pa.array([1], pa.int64()), "tag": ["a"]}).to_reader())
    assert registry_version(lake.catalog) == 1


def test_heartbeat_keeps_a_long_write_alive(lake: Lake) -> None:
    """A lease held past its TTL stays valid because the gate's heartbeat renews it."""
    import time

    quick = lake.settings.model_copy(
        update={"lease_ttl_seconds": 0.6, "lease_safety_margin_seconds": 0.2, "lease_io_timeout_seconds": 0.1}
    )
    catalog = Catalog(quick)
    catalog.tables.create_table(T, rows([1]))
    incarnation = catalog.reads.open_table(T).record.incarnation
    with catalog.gate.hold(incarnation) as lease:
        first = lease.revision
        deadline = time.monotonic() + 20
        while lease.revision < first + 3 and time.monotonic() < deadline:  # observe renewals
            time.sleep(0.05)
        assert lease.revision >= first + 3  # renewed several times, well past one TTL
        lease.check()
    catalog.close()


def test_transient_storage_failures_are_retryable(lake: Lake) -> None:
    """A storage hiccup during the write (nothing committed) surfaces as a retryable error."""
    from lake_platform.errors import Throttling

    lake.catalog.tables.create_table(T, rows([1]))

    class Hiccup:
        def __init__(self, message: str) -> None:
            self.message = message

        def __call__(self, point: str) -> None:
            if point == "append:before-write":
                raise OSError(self.message)

    for message, expected in (
        ("Generic S3 error: 503 Slow Down", Throttling),
        ("Generic S3 error: connection reset by peer", ServiceUnavailable),
    ):
        flaky = lake.new_catalog(hook=Hiccup(message))
        with pytest.raises(expected) as err:
            flaky.tables.append(T, rows([2]))
        assert err.value.retryable
        flaky.close()
    assert ids_of(lake.catalog.reads.open_table(T)) == [1]


@pytest.mark.parametrize("small", [True, False], ids=["small", "streamed"])
def test_an_append_reads_the_registry_in_one_or_two_requests(lake: Lake, small: bool) -> None:
    """Each registry request is a round trip on DynamoDB. A small append to a table whose
    current version this process landed reads the parent, the table, its lease, its current
    version and the version key above it in one request (and takes no lease:
    test_small_appends.py). Any other
    append reads the parent and the table together, then (under the lease) the table, its
    current version and the version key above it (a multi-table commit's, to complete first)
    together; the lease is taken from the released record the last append left, with no read.
    The old path made five reads."""
    calls = RegistryCalls(lake.catalog.store)
    settings = lake.settings if small else lake.settings.model_copy(update={"small_append_bytes": 0})
    with Catalog(settings, calls) as writer:
        writer.tables.create_table(T, rows([1]))
        writer.tables.append(T, rows([2]))  # leaves the released lease record this gate knows
        record = writer.reads.open_table(T).record
        calls.calls.clear()
        writer.tables.append(T, rows([3]))
    reads = calls.reads()
    name = TableName.parse(T)
    first = [keys.namespace(name.namespace_name), keys.table(name)]
    last = [keys.lease(record.incarnation), *(keys.version(record.incarnation, v) for v in (2, 3))]
    assert reads == (
        [("get_many", first + last)]
        if small
        else [
            ("get_many", first + last),
            ("get_many", [keys.table(name), *(keys.version(record.incarnation, v) for v in (2, 3))]),
        ]
    )
    assert ids_of(lake.catalog.reads.open_table(T)) == [1, 2, 3]
    assert registry_version(lake.catalog) == 3
