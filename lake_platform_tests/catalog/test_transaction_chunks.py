"""A multi-table commit over several registry writes (``catalog.transaction_chunks``): a hundred
tables on DynamoDB (moto, 19 tables a TransactWriteItems) and on SQLite (made to write at most
99 operations at once, as DynamoDB does), readers seeing all of it or none at every step, and a
commit aborted by a writer that took one of its tables' leases failing cleanly."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from botocore.awsrequest import AWSPreparedRequest, AWSResponse

from lake_platform.catalog.catalog import Catalog
from lake_platform.catalog.provenance import Provenance
from lake_platform.catalog.transaction import Transaction
from lake_platform.catalog.transaction_recovery import resolve
from lake_platform.errors import BranchDiverged, ConcurrentModification
from lake_platform.naming import TableName
from lake_platform.query.snapshot import load_snapshot
from lake_platform.registry import keys
from lake_platform.registry.records import TransactionRecord, VersionRecord, decode
from lake_platform.registry.store import MAX_TRANSACT_OPS
from lake_platform_tests.catalog.conftest import ids_of, rows
from lake_platform_tests.catalog.registry_calls import RegistryCalls
from lake_platform_tests.catalog.test_transaction import (  # noqa: F401 - the fixtures
    catalog,
    dynamodb_catalog,
    heads,
    make_tables,
    opened,
    sqlite_catalog,
    staged,
)
from lake_platform_tests.registry.dynamo_faults import error_response


def snapshot_versions(c: Catalog, names: list[str]) -> list[int]:
    """Each table's version in a snapshot loaded now (what Flight SQL and ``lake sql`` read)."""
    view = load_snapshot(c.store).project("p")
    out = []
    for name in names:
        table = view.table("w", "ns", TableName.parse(name).table)
        assert table is not None and table.ref is not None
        out.append(table.ref.version)
    return out


def transaction_records(c: Catalog) -> list[TransactionRecord]:
    return [decode(TransactionRecord, i.value, i.key) for i in c.store.scan_prefix(keys.transaction(""))]


def write_all(c: Catalog, names: list[str], first: int = 1000, commit_id: str | None = None) -> Transaction:
    """Append one row to every table in one transaction at most DynamoDB's 99 ops a write."""
    with Transaction(c.tables, Provenance(commit_id=commit_id), max_ops=MAX_TRANSACT_OPS) as tx:
        for i, name in enumerate(names):
            tx.append(name, rows([first + i]))
    return tx


@pytest.mark.slow
def test_a_hundred_table_transaction_commits_over_several_registry_writes(catalog: Catalog) -> None:  # noqa: F811
    names = make_tables(catalog, 100)
    seen: list[str] = []
    with Catalog(catalog.settings, hook=seen.append) as c:
        started = time.perf_counter()
        tx = write_all(c, names)
        took = time.perf_counter() - started
    print(f"100-table transaction on {catalog.store.backend}: {took * 1000:.0f} ms")
    assert [r.to_version for r in tx.results] == [2] * 100
    # 100 tables: 200 ops registered in 3 chunks, 400 ops of head moves in 5.
    assert seen.count("transaction:chunk-registered") == 3
    assert seen.count("transaction:rolled-forward") == 5
    assert heads(catalog, names) == dict.fromkeys(names, 2)
    assert all(sorted(ids_of(catalog.reads.open_table(n))) == [i, 1000 + i] for i, n in enumerate(names))
    assert all(not staged(catalog, n) for n in names[:5])
    assert snapshot_versions(catalog, names) == [2] * 100
    assert transaction_records(catalog) == []  # deleted once every head moved
    record = catalog.ctx.table(TableName.parse(names[7]))[0]
    item = catalog.store.get(keys.version(record.incarnation, 2))
    assert item is not None
    ver = decode(VersionRecord, item.value)
    assert ver.transaction_id is not None and len(ver.transaction) == 99
    # Log entries and commit markers landed with the heads: the commit replays as one.
    again = write_all(catalog, names, commit_id=tx.commit_id)
    assert again.commit_id == tx.commit_id


#: Tables, and registry operations a write, of the commits below: 3 chunks registered (4
#: tables each), 6 of heads moved (2 tables each).
SOME, SMALL = 12, 8

#: Where a reader looks in the middle of a commit, and what it must see: every table old, or
#: every table new.
POINTS = [
    ("transaction:recorded", 1, 1),
    ("transaction:chunk-registered", 1, 1),
    ("transaction:chunk-registered", 2, 1),
    ("transaction:committed", 1, 2),  # committed, no head moved: all of it, through the record
    ("transaction:rolled-forward", 1, 2),  # some heads moved, the rest through the record
    ("transaction:rolled-forward", 3, 2),
]


@pytest.mark.parametrize("point", POINTS, ids=[f"{p}#{n}" for p, n, _ in POINTS])
def test_a_snapshot_during_the_commit_holds_all_of_it_or_none(
    catalog: Catalog,  # noqa: F811
    point: tuple[str, int, int],
) -> None:
    where, nth, version = point
    names = make_tables(catalog, SOME)
    snapshots: list[list[int]] = []

    def look(at: str) -> None:
        if at == where:
            arrivals.append(at)
            if len(arrivals) == nth:
                snapshots.append(snapshot_versions(catalog, names))

    arrivals: list[str] = []
    with Catalog(catalog.settings, hook=look) as c, Transaction(c.tables, max_ops=SMALL) as tx:
        for i, name in enumerate(names):
            tx.append(name, rows([1000 + i]))
    assert snapshots == [[version] * SOME]
    assert snapshot_versions(catalog, names) == [2] * SOME


def test_a_commit_aborted_by_a_writer_holding_one_of_its_leases_fails_cleanly(
    catalog: Catalog,  # noqa: F811
) -> None:
    names = make_tables(catalog, SOME)
    aborted: list[str] = []

    def abort(at: str) -> None:
        # What a writer that took one of the tables' leases (the commit's writer stalled past
        # its deadline) does on meeting a version of the commit above that table's head.
        if at == "transaction:chunk-registered" and not aborted:
            aborted.append(at)
            (record,) = transaction_records(catalog)
            assert record.state == "pending"
            assert resolve(catalog.store, record.txn_id, leased=False) == "pending"  # no lease: left
            assert resolve(catalog.store, record.txn_id, leased=True) == "aborted"

    with Catalog(catalog.settings, hook=abort) as c:
        with pytest.raises(ConcurrentModification, match="aborted"):
            with Transaction(c.tables, max_ops=SMALL) as tx:
                for i, name in enumerate(names):
                    tx.append(name, rows([1000 + i]))
    assert heads(catalog, names) == dict.fromkeys(names, 1)
    assert snapshot_versions(catalog, names) == [1] * SOME
    assert transaction_records(catalog) == []
    assert all(
        list(catalog.store.scan_prefix(keys.versions(incarnation(catalog, n))))[1:] == [] for n in names
    )
    assert all(not staged(catalog, n) for n in names[:3])
    tx = write_all(catalog, names)  # nothing in the way: every lease let go, no record left
    assert heads(catalog, names) == dict.fromkeys(names, 2)


def incarnation(c: Catalog, name: str) -> str:
    return c.ctx.table(TableName.parse(name))[0].incarnation


def stop_at(where: str, nth: int) -> Callable[[str], None]:
    """A hook that fails the commit at the ``nth`` arrival at ``where``, leaving what it made."""
    arrivals: list[str] = []

    def hook(at: str) -> None:
        if at == where:
            arrivals.append(at)
            if len(arrivals) == nth:
                raise SystemExit(f"stopped at {where}")  # not a LakeError: nothing tidies after it

    return hook


#: Where the commit stops after its commit point (an exception, as a writer dying there would),
#: and how many heads it moved by then.
STOPS = [("transaction:committed", 1, 0), ("transaction:rolled-forward", 2, 4)]


@pytest.mark.parametrize("stop", STOPS, ids=[f"{p}#{n}" for p, n, _ in STOPS])
def test_the_next_single_table_writer_completes_a_committed_commit_and_lands_on_it(
    catalog: Catalog,  # noqa: F811
    stop: tuple[str, int, int],
) -> None:
    where, nth, moved_count = stop
    names = make_tables(catalog, SOME)
    with Catalog(catalog.settings, hook=stop_at(where, nth)) as c:
        with pytest.raises(SystemExit):
            with Transaction(c.tables, max_ops=SMALL) as tx:
                for i, name in enumerate(names):
                    tx.append(name, rows([1000 + i]))
    moved = heads(catalog, names)
    assert sorted(moved.values()) == [1] * (SOME - moved_count) + [2] * moved_count
    # A reader sees all of it past the commit point, whichever heads moved.
    assert snapshot_versions(catalog, names) == [2] * SOME
    last = names[-1]  # still behind: its version above its head belongs to the commit
    assert moved[last] == 1
    # The first try lands: every head of the commit moved first, the append on top of it.
    assert catalog.tables.append(last, rows([7])).to_version == 3
    assert heads(catalog, names) == {**dict.fromkeys(names, 2), last: 3}
    assert transaction_records(catalog) == []
    log = [(e.commit_id, e.from_version, e.to_version) for e in catalog.reads.history(last)][1:]
    assert log[0][0].startswith(tx.commit_id) and log[0][1:] == (1, 2)
    assert log[1][1:] == (2, 3) and len(log) == 2
    assert snapshot_versions(catalog, names) == [2] * (SOME - 1) + [3]
    assert sorted(ids_of(catalog.reads.open_table(last))) == [7, SOME - 1, 1000 + SOME - 1]
    for name in names[:-1]:  # the staging manifests were kept: every version is published from them
        catalog.manifests.finish_versions(name)
    assert all(sorted(ids_of(catalog.reads.open_table(n))) == [i, 1000 + i] for i, n in enumerate(names[:-1]))


def test_a_publish_meeting_a_committed_commit_completes_it_and_does_not_overwrite_it(
    catalog: Catalog,  # noqa: F811
) -> None:
    names = make_tables(catalog, SOME)
    last = names[-1]
    catalog.branches.create_branch(last, "dev")
    catalog.branch_writes.append(last, "dev", rows([500]))
    with Catalog(catalog.settings, hook=stop_at("transaction:rolled-forward", 2)) as c:
        with pytest.raises(SystemExit):
            with Transaction(c.tables, max_ops=SMALL) as tx:
                for i, name in enumerate(names):
                    tx.append(name, rows([1000 + i]))
    assert heads(catalog, names)[last] == 1  # its version 2 is the commit's, above main's head
    # Publishing would write the branch's version 2 over it: main moved (the commit's), so it is
    # refused as diverged, after completing the commit rather than losing its version.
    with pytest.raises(BranchDiverged):
        catalog.branch_publish.publish_branch(last, "dev")
    assert heads(catalog, names) == dict.fromkeys(names, 2)
    catalog.manifests.finish_versions(last)
    assert sorted(ids_of(catalog.reads.open_table(last))) == [SOME - 1, 1000 + SOME - 1]


def test_a_registry_throttling_the_head_moves_after_the_commit_point_fails_nothing(
    dynamodb_catalog: Catalog,  # noqa: F811
) -> None:
    """Past the commit point the commit is made: DynamoDB throttling every TransactWriteItems
    that would move the heads (its writer's and the completion from the record) must not answer
    the commit as failed (a caller retrying a failed commit would append its rows twice). The
    commit answers its versions, and the first reader or writer of its tables moves the heads."""
    c0 = dynamodb_catalog
    names = make_tables(c0, SOME)
    throttled: list[str] = []

    def throttle(request: AWSPreparedRequest, **_: object) -> AWSResponse | None:
        target = request.headers.get("X-Amz-Target", b"")
        if moving and (target.decode() if isinstance(target, bytes) else target).endswith(
            "TransactWriteItems"
        ):
            throttled.append(request.url)
            return error_response(request, 400, "ThrottlingException")
        return None

    moving: list[bool] = []
    with Catalog(c0.settings, hook=lambda at: turn(at, moving)) as c:
        c.store.events.register_first("before-send.dynamodb", throttle)  # type: ignore[attr-defined]
        with Transaction(c.tables, max_ops=SMALL) as tx:
            for i, name in enumerate(names):
                tx.append(name, rows([1000 + i]))
    assert throttled and not moving
    assert [r.to_version for r in tx.results] == [2] * SOME
    assert heads(c0, names) == dict.fromkeys(names, 1)  # no head moved
    assert snapshot_versions(c0, names) == [2] * SOME  # a snapshot views it through the record
    assert heads(c0, names) == dict.fromkeys(names, 1)  # and writes nothing
    # A table's reader views it through the record, completing it on the way.
    assert ids_of(c0.reads.open_table(names[-1])) == [SOME - 1, 1000 + SOME - 1]
    assert heads(c0, names) == dict.fromkeys(names, 2) and transaction_records(c0) == []
    assert snapshot_versions(c0, names) == [2] * SOME


def turn(at: str, moving: list[bool]) -> None:
    """Throttling on from the commit point until the registry step ends."""
    if at == "transaction:committed":
        moving.append(True)
    elif at == "transaction:registered":
        moving.clear()


def test_a_commit_reads_its_tables_leases_in_one_request(sqlite_catalog: Catalog) -> None:  # noqa: F811
    """Each registry request is a round trip on DynamoDB. A commit under the leases reads every
    table's lease record in one request, then takes each lease with one compare-and-swap; the
    gate of a process that wrote none of them read each lease on its own before its swap: a
    hundred-table commit paid a hundred reads."""
    names = make_tables(sqlite_catalog, SOME)
    leases = [keys.lease(incarnation(sqlite_catalog, n)) for n in names]
    calls = RegistryCalls(sqlite_catalog.store)
    with Catalog(sqlite_catalog.settings, calls) as c:  # its gate knows no lease record
        with Transaction(c.tables, max_ops=SMALL) as tx:
            for i, name in enumerate(names):
                tx.append(name, rows([1000 + i]))
    read = [(method, [k for k in read if k in leases]) for method, read in calls.reads()]
    assert [r for r in read if r[1]] == [("get_many", leases)]
    assert calls.swapped("lse/") == leases
    assert [r.to_version for r in tx.results] == [2] * SOME
    assert heads(sqlite_catalog, names) == dict.fromkeys(names, 2)
