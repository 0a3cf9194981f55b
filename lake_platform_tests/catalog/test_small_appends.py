"""Small appends by the table's last writer, under an unacquired lease (architecture.md, "Small
appends without acquiring the lease"): one registry read and one commit, and whenever that is
not enough (another writer took the lease, storage needs settling, a manifest is missing) the
rows are written again under an acquired lease, exactly once in the table."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest

from lake_platform.catalog.arrow_io import read_small
from lake_platform.catalog.catalog import Catalog
from lake_platform.catalog.transaction import Transaction
from lake_platform.catalog.transaction_ops import OPS_PER_TABLE
from lake_platform.engine import lance_engine as engine
from lake_platform.engine import manifests as engine_manifests
from lake_platform.errors import InvalidTableState
from lake_platform.naming import TableName
from lake_platform.registry import keys
from lake_platform.registry.records import TableRecord, VersionRecord, decode
from lake_platform_tests.catalog.conftest import Lake, ids_of, rows
from lake_platform_tests.catalog.registry_calls import RegistryCalls
from lake_platform_tests.doubles import ManualClock

T = "p.w.ns.t"
U = "p.w.ns.u"
V = "p.w.ns.v"
AGAIN = "writing the append again under the lease"


def counted(lake: Lake, **settings: Any) -> tuple[Catalog, RegistryCalls]:
    """A catalog over ``lake``'s registry (``settings`` changed) whose registry calls are
    listed: its lease acquires are the lease keys it compare-and-swaps on their own."""
    calls = RegistryCalls(lake.catalog.store)
    return Catalog(lake.settings.model_copy(update=settings), calls), calls


def table_record(lake: Lake) -> TableRecord:
    item = lake.catalog.store.get(keys.table(TableName.parse(T)))
    assert item is not None
    return decode(TableRecord, item.value, item.key)


def current_record(lake: Lake, version: int) -> VersionRecord:
    record = table_record(lake)
    item = lake.catalog.store.get(keys.version(record.incarnation, version))
    assert item is not None
    return decode(VersionRecord, item.value, item.key)


def test_a_small_append_raced_by_another_writer_lands_once_under_the_lease(
    lake: Lake, caplog: pytest.LogCaptureFixture
) -> None:
    """Another process appends (taking and releasing the lease) while this writer's unacquired
    append is staged: that commit is refused, nothing of it lands, and its rows are written
    again under the lease: in the table once, after the other writer's."""
    lake.catalog.tables.create_table(T, rows([1]))
    other = lake.new_catalog()
    raced: list[int] = []
    armed: list[bool] = []

    def race(point: str) -> None:
        if point == "append:staged" and armed and not raced:
            raced.append(other.tables.append(T, rows([3])).to_version or 0)

    writer = lake.new_catalog(hook=race)
    try:
        writer.tables.append(T, rows([2]))  # the last writer now
        armed.append(True)
        with caplog.at_level(logging.INFO, logger="lake_platform.catalog.tables"):
            result = writer.tables.append(T, rows([4], "mine"))
    finally:
        writer.close()
        other.close()
    assert raced == [3]
    assert AGAIN in caplog.text
    assert result.to_version == 4 and result.rows_added == 1
    assert sorted(ids_of(lake.catalog.reads.open_table(T))) == [1, 2, 3, 4]
    mine = [e for e in lake.catalog.reads.history(T) if e.commit_id == result.commit_id]
    assert [(e.to_version, e.rows_added) for e in mine] == [(4, 1)]


def test_a_small_append_over_a_record_changed_meanwhile_lands_once_under_the_lease(
    lake: Lake, caplog: pytest.LogCaptureFixture
) -> None:
    """The table's record changes (deletion protection turned on, which leaves the lease alone)
    while this writer's unacquired append is staged: the commit, conditional on the record it
    read, is refused with nothing landed, and the rows are written again under the lease, over
    the changed record."""
    lake.catalog.tables.create_table(T, rows([1]))
    other = lake.new_catalog()
    changed: list[bool] = []
    armed: list[bool] = []

    def change(point: str) -> None:
        if point == "append:staged" and armed and not changed:
            other.containers.set_protected(T)
            changed.append(True)

    writer = lake.new_catalog(hook=change)
    try:
        writer.tables.append(T, rows([2]))  # the last writer now
        armed.append(True)
        with caplog.at_level(logging.INFO, logger="lake_platform.catalog.tables"):
            result = writer.tables.append(T, rows([3], "mine"))
    finally:
        writer.close()
        other.close()
    assert changed == [True]
    assert AGAIN in caplog.text
    assert result.to_version == 3 and result.rows_added == 1
    assert sorted(ids_of(lake.catalog.reads.open_table(T))) == [1, 2, 3]
    assert table_record(lake).protected


def test_the_writer_that_landed_last_does_not_acquire_the_lease(lake: Lake) -> None:
    writer, calls = counted(lake)
    with writer:
        writer.tables.create_table(T, rows([1]))
        calls.calls.clear()
        for i in range(2, 5):
            writer.tables.append(T, rows([i]))
    assert calls.swapped("lse/") == []
    assert ids_of(lake.catalog.reads.open_table(T)) == [1, 2, 3, 4]


def test_an_unacquired_lease_past_its_ttl_writes_the_rows_again_under_the_lease(
    lake: Lake, caplog: pytest.LogCaptureFixture
) -> None:
    """A small append that took longer than the lease TTL to reach its commit: no one held the
    lease, so it is not a lost lease (LeaseExpired) but a refusal, and the rows are written
    again, under an acquired lease (whose deadline counts from its own acquire)."""
    clock = ManualClock()
    slow: list[bool] = []

    def stall(point: str) -> None:
        if point == "append:staged" and slow and len(slow) == 1:
            slow.append(True)
            clock.advance(lake.settings.lease_ttl_seconds)

    writer = lake.new_catalog(clock=clock, heartbeat=False, hook=stall)
    try:
        writer.tables.create_table(T, rows([1]))
        slow.append(True)
        with caplog.at_level(logging.INFO, logger="lake_platform.catalog.tables"):
            assert writer.tables.append(T, rows([2])).to_version == 2
    finally:
        writer.close()
    assert len(slow) == 2 and AGAIN in caplog.text
    assert ids_of(lake.catalog.reads.open_table(T)) == [1, 2]


def test_an_append_above_the_small_size_takes_the_lease(lake: Lake) -> None:
    """Rows that are not kept in memory to be written twice (a stream above the small-append
    size, ``LAKE_SMALL_APPEND_BYTES``) go under an acquired lease, as do the first append of
    a writer that did not land the current version."""
    large, calls = counted(lake, small_append_bytes=0)
    with large:
        large.tables.create_table(T, rows([1]))
        calls.calls.clear()
        large.tables.append(T, rows([2]))  # it landed version 1: only the size takes the lease
        assert len(calls.swapped("lse/")) == 1
    first, second = Catalog(lake.settings, calls), Catalog(lake.settings, calls)
    with first, second:
        calls.calls.clear()
        first.tables.append(T, rows([3]))  # it did not land version 2
        assert calls.swapped("lse/")
        second.tables.append(T, rows([4]))  # nor did this one land version 3
        calls.calls.clear()
        first.tables.append(T, rows([5]))  # nor did this one land version 4
        assert calls.swapped("lse/")
        calls.calls.clear()
        first.tables.append(T, rows([6]))  # it did land version 5
        assert calls.swapped("lse/") == []
    assert ids_of(lake.catalog.reads.open_table(T)) == [1, 2, 3, 4, 5, 6]


def test_an_unpublished_version_is_finished_under_the_lease_first(
    lake: Lake, caplog: pytest.LogCaptureFixture
) -> None:
    """The last writer's own version was registered but its manifest is not published (only
    its staging manifest is there, as when the publish after the commit failed): the next
    small append must not let Lance finish it (a write to storage) without the lease; it is
    refused, and the append under the lease settles (publishes) and then writes."""
    lake.catalog.tables.create_table(T, rows([1]))
    lake.catalog.tables.append(T, rows([2]))
    record = table_record(lake)
    storage = lake.settings.storage_options(record.location)
    ver = current_record(lake, 2)
    assert ver.staged_from is not None  # registered at its canonical path, published there
    canonical = ver.manifest_path
    fs, _ = engine.filesystem(record.location, storage)
    published = engine_manifests.filesystem_path(record.location, canonical)
    fs.copy_file(published, engine_manifests.filesystem_path(record.location, ver.staged_from))
    fs.delete_file(published)
    assert not engine.manifest_exists(record.location, canonical, storage)  # unpublished
    with caplog.at_level(logging.INFO, logger="lake_platform.catalog.tables"):
        assert lake.catalog.tables.append(T, rows([3])).to_version == 3
    assert AGAIN in caplog.text
    assert current_record(lake, 2).manifest_path == canonical
    assert engine.manifest_exists(record.location, canonical, storage)
    assert ids_of(lake.catalog.reads.open_table(T)) == [1, 2, 3]


def test_a_missing_manifest_is_the_typed_refusal_and_changes_nothing(lake: Lake) -> None:
    lake.catalog.tables.create_table(T, rows([1]))
    lake.catalog.tables.append(T, rows([2]))
    record = lake.catalog.reads.open_table(T).record
    storage = lake.settings.storage_options(record.location)
    ver = current_record(lake, 2)
    fs, _ = engine.filesystem(record.location, storage)
    fs.delete_file(engine_manifests.filesystem_path(record.location, ver.manifest_path))
    before = lake.catalog.store.get(keys.table(TableName.parse(T)))
    with pytest.raises(InvalidTableState, match="manifest is missing"):
        lake.catalog.tables.append(T, rows([3]))
    assert lake.catalog.store.get(keys.table(TableName.parse(T))) == before


def test_a_squatter_above_the_table_is_quarantined_under_the_lease(
    lake: Lake, caplog: pytest.LogCaptureFixture
) -> None:
    """A manifest written around the registry at the next version's path: the unacquired
    append is refused before its commit; the append under the lease moves the squatter aside
    and lands at the canonical path."""
    lake.catalog.tables.create_table(T, rows([1]))
    lake.catalog.tables.append(T, rows([2]))
    record = lake.catalog.reads.open_table(T).record
    storage = lake.settings.storage_options(record.location)
    current = current_record(lake, 2).manifest_path
    squat = engine.canonical_manifest_path(current, 3)
    fs, _ = engine.filesystem(record.location, storage)
    fs.copy_file(
        engine_manifests.filesystem_path(record.location, current),
        engine_manifests.filesystem_path(record.location, squat),
    )
    with caplog.at_level(logging.INFO, logger="lake_platform.catalog.tables"):
        assert lake.catalog.tables.append(T, rows([3])).to_version == 3
    assert AGAIN in caplog.text
    landed = current_record(lake, 3)
    assert landed.manifest_path == squat and landed.staged_from is not None
    assert ids_of(lake.catalog.reads.open_table(T)) == [1, 2, 3]
    assert ids_of(lake.catalog.reads.open_table(T, 2)) == [1, 2]


def stopped_after_its_commit_point(writer: Catalog, tables: list[str], stop: list[str]) -> None:
    """A multi-table commit of one row to each of ``tables`` over two registry writes, by
    ``writer`` (whose hook raises at ``stop``'s point), stopped right after its commit point:
    committed, no head moved, its leases released by this process's gate."""
    stop.append("transaction:committed")
    with pytest.raises(SystemExit), Transaction(writer.tables, max_ops=OPS_PER_TABLE) as tx:
        for i, name in enumerate(tables):
            tx.append(name, rows([100 + i], "tx"))
    stop.clear()
    assert [table_record_of(writer, n).current_version for n in tables] == [1] * len(tables)


def recording(points: list[str], stop: list[str]) -> Callable[[str], None]:
    """A hook recording every point the writer passes, and stopping it (as a kill would) at
    the points in ``stop``."""

    def hook(point: str) -> None:
        points.append(point)
        if point in stop:
            raise SystemExit(f"stopped at {point}")

    return hook


def table_record_of(c: Catalog, name: str) -> TableRecord:
    return c.ctx.table(TableName.parse(name))[0]


def test_a_small_append_meeting_a_committed_multi_table_commit_writes_its_rows_once(lake: Lake) -> None:
    """The last writer's small append to a table whose head lags a committed multi-table commit
    (its writer stopped after the commit point, leases released) sees the commit's version above
    the head in the read it makes anyway, so it takes the lease at once: the commit completed
    under it, the rows written once, on top of the commit's version."""
    points: list[str] = []
    stop: list[str] = []
    writer = lake.new_catalog(hook=recording(points, stop))
    try:
        for i, name in enumerate([T, U]):
            writer.tables.create_table(name, rows([i + 1]))  # this process wrote both last
        stopped_after_its_commit_point(writer, [T, U], stop)
        points.clear()
        result = writer.tables.append(T, rows([5], "mine"))
    finally:
        writer.close()
    assert points.count("append:before-write") == 1  # twice before: refused once, then leased
    assert result.to_version == 3
    assert [table_record_of(lake.catalog, n).current_version for n in (T, U)] == [3, 2]
    assert [(e.operation, e.to_version) for e in lake.catalog.reads.history(T)][1:] == [
        ("append", 2),
        ("append", 3),
    ]
    assert sorted(ids_of(lake.catalog.reads.open_table(T))) == [1, 5, 100]


def test_a_small_multi_table_append_meeting_a_committed_commit_stages_once(lake: Lake) -> None:
    """A transaction of small appends (one registry write, leases tried unacquired) over a table
    whose head lags a committed multi-table commit sees the commit's version above the head in
    its read of the leases, so it takes the leases at once: every table staged once, the
    commit completed under the lease, the transaction on top of it."""
    points: list[str] = []
    stop: list[str] = []
    writer = lake.new_catalog(hook=recording(points, stop))
    try:
        for i, name in enumerate([T, U, V]):
            writer.tables.create_table(name, rows([i + 1]))
        stopped_after_its_commit_point(writer, [T, U], stop)
        points.clear()
        with writer.transaction() as tx:
            tx.append(T, rows([7], "mine"))
            tx.append(V, rows([8], "mine"))
    finally:
        writer.close()
    # Each table's data written once, staged once; twice before: refused once, then leased.
    assert (points.count("transaction:before-write"), points.count("transaction:staged")) == (2, 1)
    assert [table_record_of(lake.catalog, n).current_version for n in (T, U, V)] == [3, 2, 2]
    assert sorted(ids_of(lake.catalog.reads.open_table(T))) == [1, 7, 100]
    assert sorted(ids_of(lake.catalog.reads.open_table(V))) == [3, 8]


# == read_small ================================================================================


def _batch(ids: list[int]) -> pa.RecordBatch:
    return pa.record_batch({"id": pa.array(ids, pa.int64())})


def test_read_small_keeps_a_stream_that_ends_within_its_limits() -> None:
    batches = [_batch([1, 2]), _batch([3])]
    kept, reader = read_small(pa.RecordBatchReader.from_batches(batches[0].schema, batches), 1 << 20, 2)
    assert kept is not None and [b.to_pylist() for b in kept] == [b.to_pylist() for b in batches]
    assert reader.read_all().column("id").to_pylist() == [1, 2, 3]


@pytest.mark.parametrize(("max_bytes", "max_batches"), [(1 << 20, 2), (8, 16)])
def test_read_small_passes_a_longer_stream_on_whole(max_bytes: int, max_batches: int) -> None:
    """Above either limit: nothing kept, and the reader gives every row, in order, from the
    batches read ahead and then the rest."""
    batches = [_batch([i]) for i in range(5)]
    kept, reader = read_small(
        pa.RecordBatchReader.from_batches(batches[0].schema, batches), max_bytes, max_batches
    )
    assert kept is None
    assert reader.read_all().column("id").to_pylist() == [0, 1, 2, 3, 4]


def test_read_small_leaves_an_input_error_to_the_reader() -> None:
    def broken() -> Any:
        yield _batch([1])
        raise ValueError("bad input (test)")

    kept, reader = read_small(pa.RecordBatchReader.from_batches(_batch([0]).schema, broken()), 1 << 20, 16)
    assert kept is None
    assert reader.read_next_batch().to_pylist() == [{"id": 1}]
    with pytest.raises(ValueError, match="bad input"):
        reader.read_next_batch()


def test_threads_of_one_process_appending_small_rows_lose_nothing(lake: Lake) -> None:
    """Four threads share one catalog (one gate, one memory of the last landed version): their
    small appends, unacquired or under the lease, land once each, in consecutive versions."""
    from concurrent.futures import ThreadPoolExecutor

    lake.catalog.tables.create_table(T, rows([-1]))

    def writer(w: int) -> None:
        for i in range(15):
            lake.catalog.tables.append(T, rows([w * 1000 + i], f"w{w}"))

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(writer, range(4)))  # re-raises a writer's error here
    snap = lake.catalog.reads.open_table(T)
    assert snap.version == 61
    assert ids_of(snap) == sorted([-1] + [w * 1000 + i for w in range(4) for i in range(15)])
    assert sorted(e.to_version for e in lake.catalog.reads.history(T)) == list(range(1, 62))
