"""A commit is one registry transaction: the version lands at its canonical manifest path with
the table's move, the commit-log entry and the commit marker, fenced by the lease; the staging
manifest is put at that path right after, with no second registry write (the old re-point).

A writer stopped between the two leaves a registered version whose canonical file is not there
yet: reads refuse it with a typed error and write nothing; the next writer (or
``finish_versions``) publishes it from the staging manifest the record names; nothing is lost.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.catalog.provenance import Provenance
from lake_platform.engine import lance_engine as engine
from lake_platform.engine.storage import filesystem_path
from lake_platform.errors import InvalidTableState
from lake_platform.naming import TableName
from lake_platform.registry import keys
from lake_platform.registry.records import LeaseRecord, TableRecord, VersionRecord, decode
from lake_platform_tests.catalog import faults
from lake_platform_tests.catalog.conftest import Lake, ids_of, lake_settings, rows

T = "p.w.ns.t"
COMMIT = "one-transaction-0001"


def version_record(c: Catalog, version: int) -> VersionRecord:
    record = decode(TableRecord, c.store.get(keys.table(TableName.parse(T))).value)  # type: ignore[union-attr]
    item = c.store.get(keys.version(record.incarnation, version))
    assert item is not None
    return decode(VersionRecord, item.value, item.key)


@contextmanager
def recorded_writes(store: Any) -> Iterator[list[list[str]]]:
    """The keys of every registry transaction ``store``'s backend makes while the body runs,
    one list per transaction (from any thread: Lance calls the namespace back from its own)."""
    writes: list[list[str]] = []
    real = type(store).transact

    def counting(self: Any, ops: Any) -> Any:
        writes.append([op.key for op in ops])
        return real(self, ops)

    type(store).transact = counting  # type: ignore[method-assign]
    try:
        yield writes
    finally:
        type(store).transact = real  # type: ignore[method-assign]


def test_an_append_is_two_registry_writes_lease_and_commit(lake: Lake) -> None:
    """A writer that did not write the table last (here: another process's catalog) acquires
    the lease first."""
    lake.catalog.tables.create_table(T, rows([1]))
    # The heartbeat renews a lease held ttl/3 (10 s by default): an append that slow, as on a
    # loaded machine, counted a renewal among its writes. An hour's lease is never due here.
    other = Catalog(lake.settings.model_copy(update={"lease_ttl_seconds": 3600.0}))
    try:
        with recorded_writes(other.store) as writes:
            other.tables.append(T, rows([2]))
    finally:
        other.close()
    record = lake.catalog.reads.open_table(T).record
    lease_key = keys.lease(record.incarnation)
    assert len(writes) == 2, writes  # lease acquire, then the commit, which also releases it
    assert writes[0] == [lease_key]
    commit = set(writes[1])
    assert {keys.version(record.incarnation, 2), keys.table(TableName.parse(T)), lease_key} <= commit
    lease = decode(LeaseRecord, lake.catalog.store.get(lease_key).value)  # type: ignore[union-attr]
    assert lease.released and lease.token == 2  # free for the next writer, token kept
    ver = version_record(lake.catalog, 2)
    storage = lake.settings.storage_options(record.location)
    assert not engine.is_staging_manifest(ver.manifest_path)  # registered canonical, no re-point
    assert ver.staged_from is not None and engine.is_staging_manifest(ver.staged_from)
    assert engine.manifest_exists(record.location, ver.manifest_path, storage)
    assert not engine.manifest_exists(record.location, ver.staged_from, storage)  # tidied up
    assert ids_of(lake.catalog.reads.open_table(T)) == [1, 2]


def test_the_last_writer_appends_small_rows_in_one_registry_write(lake: Lake) -> None:
    """The writer that landed the table's current version appends a small batch without
    acquiring the lease: its one commit is conditional on the released lease record (and
    releases it again, token kept), so it lands only if nobody took the lease since."""
    lake.catalog.tables.create_table(T, rows([1]))
    store = lake.catalog.store
    record = lake.catalog.reads.open_table(T).record
    lease_key = keys.lease(record.incarnation)
    before = store.get(lease_key)
    assert before is not None and decode(LeaseRecord, before.value).released
    with recorded_writes(store) as writes:
        result = lake.catalog.tables.append(T, rows([2]))
    assert result.to_version == 2
    assert len(writes) == 1, writes  # the commit alone
    assert {keys.version(record.incarnation, 2), keys.table(TableName.parse(T)), lease_key} <= set(writes[0])
    after = store.get(lease_key)
    assert after is not None and after.revision != before.revision  # the condition moved on
    lease = decode(LeaseRecord, after.value)
    assert lease.released and lease.token == decode(LeaseRecord, before.value).token
    ver = version_record(lake.catalog, 2)
    storage = lake.settings.storage_options(record.location)
    assert not engine.is_staging_manifest(ver.manifest_path)
    assert engine.manifest_exists(record.location, ver.manifest_path, storage)
    assert not engine.manifest_exists(record.location, ver.staged_from or "", storage)
    assert ids_of(lake.catalog.reads.open_table(T)) == [1, 2]


def test_a_squatter_on_the_canonical_path_keeps_the_version_at_its_staging_manifest(lake: Lake) -> None:
    """A manifest written around the registry at the path the next version will use: the commit
    registers its staging manifest (the old form) instead, never the squatter's bytes, and the
    next writer quarantines the squatter."""
    lake.catalog.tables.create_table(T, rows([1]))
    record = lake.catalog.reads.open_table(T).record
    storage = lake.settings.storage_options(record.location)
    squat = engine.canonical_manifest_path(version_record(lake.catalog, 1).manifest_path, 2)
    bogus = version_record(lake.catalog, 1).manifest_path  # a real manifest, of another version

    def squat_after_staging(point: str) -> None:
        if point == "append:staged":
            fs, _ = engine.filesystem(record.location, storage)
            fs.copy_file(
                filesystem_path(record.location, bogus),
                filesystem_path(record.location, squat),
            )

    writer = lake.new_catalog(hook=squat_after_staging)
    try:
        result = writer.tables.append(T, rows([2]))
    finally:
        writer.close()
    assert result.to_version == 2
    ver = version_record(lake.catalog, 2)
    assert ver.manifest_path != squat and ver.staged_from is None
    assert lake.catalog.tables.append(T, rows([3])).to_version == 3  # settle moves the squatter aside
    assert ids_of(lake.catalog.reads.open_table(T)) == [1, 2, 3]
    assert ids_of(lake.catalog.reads.open_table(T, 2)) == [1, 2]


def op_append_two(catalog: Catalog, commit_id: str) -> object:
    """The killed writer's operation (module level: the forkserver child imports it by name)."""
    return catalog.tables.append(T, rows([2]), by=Provenance(commit_id=commit_id))


@pytest.fixture
def killable(tmp_path: Path) -> Any:
    settings = lake_settings(tmp_path / "home", warehouse_roots=str(tmp_path / "wh"))
    with Catalog(settings) as c:
        c.containers.create_project("p")
        c.containers.create_warehouse("p.w", root=str(tmp_path / "wh"))
        c.containers.create_namespace("p.w.ns")
        c.tables.create_table(T, rows([1]))
    return settings, tmp_path / "wh"


def files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


@pytest.mark.slow
def test_a_writer_killed_between_its_commit_and_the_publish_loses_nothing(killable: Any) -> None:
    settings, root = killable
    code, _ = faults.kill_writer(settings, op_append_two, "append:registered", 1, COMMIT)
    assert code == -signal.SIGKILL
    with Catalog(settings) as c:
        record = c.reads.open_table(T, 1).record
        assert record.current_version == 2  # the commit landed
        ver = version_record(c, 2)
        storage = settings.storage_options(record.location)
        assert not engine.manifest_exists(record.location, ver.manifest_path, storage)
        assert ver.staged_from is not None and engine.manifest_exists(
            record.location, ver.staged_from, storage
        )
        before = files(root)
        with pytest.raises(InvalidTableState, match="not finalized"):
            c.reads.open_table(T)
        assert files(root) == before  # a refused read writes nothing
        assert ids_of(c.reads.open_table(T, 1)) == [1]
        # The retry finds its commit id landed (invariant 5) and reports it, writing nothing.
        again = op_append_two(c, COMMIT)
        assert again.replayed and again.to_version == 2  # type: ignore[attr-defined]
        # The next writer publishes the stopped one's version before building on it.
        assert c.tables.append(T, rows([3])).to_version == 3
        assert ids_of(c.reads.open_table(T)) == [1, 2, 3]
        assert ids_of(c.reads.open_table(T, 2)) == [1, 2]
        assert engine.manifest_exists(record.location, ver.manifest_path, storage)
        faults.check_registry_matches_engine(c)


@pytest.mark.slow
def test_finish_versions_publishes_what_a_killed_writer_registered(killable: Any) -> None:
    settings, root = killable
    code, _ = faults.kill_writer(settings, op_append_two, "append:registered", 1, COMMIT)
    assert code == -signal.SIGKILL
    with Catalog(settings) as c:
        assert c.manifests.finish_versions(T) == [2]
        assert c.manifests.finish_versions(T) == []  # idempotent
        assert ids_of(c.reads.open_table(T)) == [1, 2]
        ver = version_record(c, 2)
        record = c.reads.open_table(T).record
        assert ver.staged_from is not None
        assert not engine.manifest_exists(
            record.location, ver.staged_from, settings.storage_options(record.location)
        )
        faults.check_registry_matches_engine(c)


def test_a_commit_that_releases_still_fences_a_writer_whose_lease_was_taken(lake: Lake) -> None:
    """The release rides in the commit as a put conditional on the held revision: a writer whose
    lease someone else took has its whole commit refused, and the new holder's lease record is
    left as it was (never marked released by the stale writer)."""
    from lake_platform.errors import LeaseExpired

    lake.catalog.tables.create_table(T, rows([1]))
    incarnation = lake.catalog.reads.open_table(T).record.incarnation
    store = lake.catalog.store
    taken: dict[str, Any] = {}

    def take_over(point: str) -> None:
        if point == "append:staged":
            item = store.get(keys.lease(incarnation))
            assert item is not None
            held = decode(LeaseRecord, item.value)
            other = held.model_copy(update={"holder": "someone-else", "token": held.token + 1})
            taken["item"] = store.compare_and_swap(item.key, item.revision, other.encode())

    stale = lake.new_catalog(hook=take_over)
    try:
        with pytest.raises(LeaseExpired):
            stale.tables.append(T, rows([2]))
    finally:
        stale.close()
    after = store.get(keys.lease(incarnation))
    assert after == taken["item"]  # untouched: not released by the stale writer
    assert not decode(LeaseRecord, after.value).released  # type: ignore[union-attr]
    assert lake.catalog.reads.describe_table(T, with_stats=False).current_version == 1
    assert ids_of(lake.catalog.reads.open_table(T)) == [1]


@pytest.mark.slow
def test_a_client_listing_versions_right_after_an_unlinked_commit_finds_the_file(killable: Any) -> None:
    """A REST client (another process) asks for the latest version between a commit and its
    link: ListTableVersions publishes a just-registered version whose file is not there yet, so
    the client can build on it (the lease went with the commit; readers through the catalog
    refuse it typed instead, and never write)."""
    import lance

    from lake_platform.catalog.pylance_namespace import LakeNamespace

    settings, root = killable
    code, _ = faults.kill_writer(settings, op_append_two, "append:registered", 1, COMMIT)
    assert code == -signal.SIGKILL
    with Catalog(settings) as c:
        ver = version_record(c, 2)
        record = c.reads.open_table(T, 1).record
        storage = settings.storage_options(record.location)
        assert not engine.manifest_exists(record.location, ver.manifest_path, storage)
        ns = LakeNamespace(c)
        listed = ns.list_table_versions({"id": T.split("."), "descending": True, "limit": 1})
        assert [v.version for v in listed.versions] == [2]
        assert listed.versions[0].manifest_path == ver.manifest_path
        assert engine.manifest_exists(record.location, ver.manifest_path, storage)
        ds = lance.write_dataset(
            rows([3]).read_all(), namespace_client=ns, table_id=T.split("."), mode="append"
        )
        assert ds.version == 3
        assert ids_of(c.reads.open_table(T)) == [1, 2, 3]
        faults.check_registry_matches_engine(c)


def _pylance_append(lake: Lake, ids: list[int]) -> Any:
    import lance

    from lake_platform.catalog.pylance_namespace import LakeNamespace

    return lance.write_dataset(
        rows(ids).read_all(),
        namespace_client=LakeNamespace(lake.catalog),
        table_id=T.split("."),
        mode="append",
        storage_options=lake.settings.storage_options(lake.root) or None,
    )


def test_a_rest_commit_on_a_free_lease_is_one_registry_write(lake: Lake) -> None:
    """A REST client's CreateTableVersion is one commit with the client's data already written:
    on a free (released) lease it is not acquired at all; the commit is conditional on the free
    record's revision and leaves it released."""
    lake.catalog.tables.create_table(T, rows([1]))
    incarnation = lake.catalog.reads.open_table(T).record.incarnation
    store = lake.catalog.store
    before = store.get(keys.lease(incarnation))
    assert before is not None and decode(LeaseRecord, before.value).released
    with recorded_writes(store) as writes:
        assert _pylance_append(lake, [2]).version == 2
    assert len(writes) == 1 and keys.lease(incarnation) in writes[0], writes
    after = store.get(keys.lease(incarnation))
    assert after is not None and after.revision == before.revision + 1
    assert decode(LeaseRecord, after.value).released
    assert ids_of(lake.catalog.reads.open_table(T)) == [1, 2]


def test_a_rest_commit_racing_an_acquirer_is_refused_then_retried(lake: Lake) -> None:
    """Someone acquires the lease between the REST commit's read of it and its transaction: the
    commit is refused (nothing lands, the acquirer's record is untouched) and made once more
    under an acquired lease, which lands once the other holder lets go."""
    from contextlib import contextmanager

    from lake_platform.catalog.gate import WriteGate

    lake.catalog.tables.create_table(T, rows([1]))
    store = lake.catalog.store
    gate = lake.catalog.gate
    real = gate.hold_for_commit
    seen: list[tuple[int, bool]] = []

    @contextmanager
    def racing(inc: str) -> Any:
        with real(inc) as lease:
            if seen:
                yield lease
                return
            assert lease.optimistic
            other_gate = WriteGate(store, ttl=30.0, margin=5.0, wait=0.0, heartbeat=False)
            other = other_gate.acquire(inc, "someone-else")
            try:
                yield lease
            finally:
                item = store.get(keys.lease(inc))
                assert item is not None
                seen.append(
                    (
                        lake.catalog.reads.describe_table(T, with_stats=False).current_version,
                        decode(LeaseRecord, item.value).holder == "someone-else",
                    )
                )
                other_gate.release(other)

    gate.hold_for_commit = racing  # type: ignore[method-assign]
    try:
        assert _pylance_append(lake, [2]).version == 2
    finally:
        gate.hold_for_commit = real  # type: ignore[method-assign]
    assert seen == [(1, True)]  # the raced attempt landed nothing and left the acquirer's lease
    assert ids_of(lake.catalog.reads.open_table(T)) == [1, 2]
    assert [e.to_version for e in lake.catalog.reads.history(T)] == [1, 2]
