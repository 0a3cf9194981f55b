"""Kill a multi-table transaction's writer (SIGKILL, through ``faults.kill_writer``) at each named
point of its commit, on SQLite and on DynamoDB (moto), then check that no reader ever sees part of it:

1. the registry moved every table's head, or none (the one registry transaction); over several
   registry writes (``transaction_chunks``), a fresh snapshot holds every table new or every one
   old, whichever heads moved, and the retry completes or clears what the writer left;
2. a reader sees every table's new rows, or every table's old rows; a version committed but not
   yet published is refused (typed, nothing written) rather than shown old, until the next writer
   or ``finish_versions`` publishes it;
3. a retry under the same commit id lands exactly once, taking the dead writer's leases;
4. afterwards every registered version opens at exactly that version.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.catalog.provenance import Provenance
from lake_platform.catalog.transaction import Transaction
from lake_platform.catalog.transaction_recovery import resolve
from lake_platform.errors import InvalidTableState
from lake_platform.naming import TableName
from lake_platform.query.snapshot import load_snapshot
from lake_platform.query.snapshot_transactions import manifests_on_storage
from lake_platform.registry import keys
from lake_platform.registry.records import TransactionRecord, VersionRecord, decode
from lake_platform.settings import LakeSettings, load_settings
from lake_platform_tests.catalog import faults
from lake_platform_tests.catalog.conftest import ids_of, rows

TABLES = ["p.w.ns.orders", "p.w.ns.order_lines", "p.w.ns.customers"]
COMMIT_ID = "tx-kill-0001"
NEW = 100

#: (point, nth, whether the transaction is committed when the writer dies there).
KILLS = [
    ("transaction:before-write", 2, False),  # the first table's data and staging manifest written
    ("append:staged", 2, False),  # inside the second table's write: its data files written
    ("transaction:written", 3, False),  # every table staged, nothing registered
    ("transaction:staged", 1, False),  # just before the registry transaction
    ("transaction:registered", 1, True),  # committed, no manifest published
    ("transaction:published", 1, True),  # mid-publication: one table's manifest published
    ("transaction:published", 3, True),  # published, the process not yet returned
]


def op_transaction(catalog: Catalog, commit_id: str) -> Any:
    """The transaction the kills interrupt: an append to two tables, an overwrite of the third."""
    with catalog.transaction(by=Provenance(commit_id=commit_id)) as tx:
        for i, name in enumerate(sorted(TABLES)):
            if i == 2:
                tx.overwrite(name, rows([NEW + i]))
            else:
                tx.append(name, rows([NEW + i]))
    return tx.results


def expected_new(i: int) -> list[int]:
    return [NEW + i] if i == 2 else [i, NEW + i]


@pytest.fixture(scope="module", autouse=True)
def moto_before_the_forkserver(moto_endpoint: str) -> str:
    """The writers' forkserver keeps the environment it started in, and the first kill starts
    it: moto's placeholder AWS credentials must be set by then, or every DynamoDB writer after
    a SQLite one finds none."""
    return moto_endpoint


@pytest.fixture
def settings(backend_settings: LakeSettings) -> LakeSettings:
    """``TABLES`` at version 1, the i-th in name order holding [i]."""
    with Catalog(backend_settings) as c:
        for i, name in enumerate(sorted(TABLES)):
            c.tables.create_table(name, rows([i]))
    return backend_settings


def seen(c: Catalog) -> list[list[int] | None]:
    """Each table's rows as a reader sees them now (None: refused as not yet published)."""
    out: list[list[int] | None] = []
    for name in sorted(TABLES):
        try:
            out.append(sorted(ids_of(c.reads.open_table(name))))
        except InvalidTableState:
            out.append(None)
    return out


@pytest.mark.parametrize("kill", KILLS, ids=[f"{p}#{n}" for p, n, _ in KILLS])
def test_kill_at_each_point_leaves_all_or_nothing(
    settings: LakeSettings, kill: tuple[str, int, bool]
) -> None:
    point, nth, committed = kill
    code, _ = faults.kill_writer(settings, op_transaction, point, nth, COMMIT_ID)
    assert code == -signal.SIGKILL, f"the writer never reached {point} (#{nth}); exit code {code}"
    old = [[i] for i in range(len(TABLES))]
    new = [expected_new(i) for i in range(len(TABLES))]
    with Catalog(settings) as c:
        heads = {c.reads.describe_table(n, with_stats=False).current_version for n in TABLES}
        assert heads == ({2} if committed else {1})
        visible = seen(c)
        if committed:
            assert all(v is None or v == n for v, n in zip(visible, new, strict=True)), visible
            for name in TABLES:
                c.manifests.finish_versions(name)
            assert seen(c) == new
        else:
            assert visible == old
        # The retry takes the dead writer's leases at once (same host, the process is gone) and
        # lands exactly once.
        results = op_transaction(c, COMMIT_ID)
        assert [r.replayed for r in results] == [committed] * len(TABLES)
        assert seen(c) == new
        assert {c.reads.describe_table(n, with_stats=False).current_version for n in TABLES} == {2}
        faults.check_registry_matches_engine(c)


#: A 100-table transaction (SQLite takes it in one registry transaction): the writer killed with
#: every table staged and nothing registered, with everything registered and nothing published,
#: and halfway through publishing.
HUNDRED = [f"p.w.ns.h{i:03d}" for i in range(100)]
HUNDRED_KILLS = [
    ("transaction:staged", 1, False),
    ("transaction:registered", 1, True),
    ("transaction:published", 50, True),
]


def op_hundred(catalog: Catalog, commit_id: str) -> Any:
    with catalog.transaction(by=Provenance(commit_id=commit_id)) as tx:
        for i, name in enumerate(HUNDRED):
            tx.append(name, rows([NEW + i]))
    return tx.results


@pytest.mark.parametrize("kill", HUNDRED_KILLS, ids=[f"{p}#{n}" for p, n, _ in HUNDRED_KILLS])
def test_a_hundred_table_transaction_killed_leaves_all_or_nothing_on_sqlite(
    tmp_path: Path, kill: tuple[str, int, bool]
) -> None:
    point, nth, committed = kill
    settings = load_settings(home=tmp_path / "home")
    with Catalog(settings) as c:
        c.containers.create_project("p")
        c.containers.create_warehouse("p.w")
        c.containers.create_namespace("p.w.ns")
        for i, name in enumerate(HUNDRED):
            c.tables.create_table(name, rows([i]))
    code, _ = faults.kill_writer(settings, op_hundred, point, nth, COMMIT_ID)
    assert code == -signal.SIGKILL, f"the writer never reached {point} (#{nth}); exit code {code}"
    with Catalog(settings) as c:
        heads = {c.reads.describe_table(n, with_stats=False).current_version for n in HUNDRED}
        assert heads == ({2} if committed else {1})
        if committed:
            for name in HUNDRED:
                c.manifests.finish_versions(name)
        expected = [[i, NEW + i] if committed else [i] for i in range(len(HUNDRED))]
        assert [sorted(ids_of(c.reads.open_table(n))) for n in HUNDRED] == expected
        results = op_hundred(c, COMMIT_ID)
        assert [r.replayed for r in results] == [committed] * len(HUNDRED)
        assert [sorted(ids_of(c.reads.open_table(n))) for n in HUNDRED] == [
            [i, NEW + i] for i in range(len(HUNDRED))
        ]


#: A transaction over several registry writes (``transaction_chunks``), forced on both backends by
#: a small limit: 6 tables, 4 operations a write (3 chunks registered, 6 of heads moved). The
#: writer killed at each of its named points: (point, nth, whether it is committed there).
CHUNKED = [f"p.w.ns.c{i:02d}" for i in range(6)]
CHUNKED_KILLS = [
    ("transaction:recorded", 1, False),  # the record put, pending: nothing registered
    ("transaction:chunk-registered", 1, False),  # between register chunks
    ("transaction:committed", 1, True),  # the commit point passed, no head moved
    ("transaction:rolled-forward", 1, True),  # between head-moving chunks
    ("transaction:registered", 1, True),  # every head moved, nothing published
]


def op_chunked(catalog: Catalog, commit_id: str) -> Any:
    tx = Transaction(catalog.tables, Provenance(commit_id=commit_id), max_ops=4)
    with tx:
        for i, name in enumerate(CHUNKED):
            tx.append(name, rows([NEW + i]))
    return tx.results


def snapshot_versions(c: Catalog) -> list[int]:
    published = manifests_on_storage(c.settings.storage_options)  # as Flight SQL and lake sql load it
    view = load_snapshot(c.store, published=published).project("p")
    found = [view.table("w", "ns", TableName.parse(n).table) for n in CHUNKED]
    return [t.ref.version for t in found if t is not None and t.ref is not None]


@pytest.mark.parametrize("kill", CHUNKED_KILLS, ids=[f"{p}#{n}" for p, n, _ in CHUNKED_KILLS])
def test_a_transaction_over_several_registry_writes_killed_leaves_all_or_nothing(
    settings: LakeSettings, kill: tuple[str, int, bool]
) -> None:
    point, nth, committed = kill
    with Catalog(settings) as c:
        for i, name in enumerate(CHUNKED):
            c.tables.create_table(name, rows([i]))
    code, _ = faults.kill_writer(settings, op_chunked, point, nth, COMMIT_ID)
    assert code == -signal.SIGKILL, f"the writer never reached {point} (#{nth}); exit code {code}"
    with Catalog(settings) as c:
        # The registry's heads: a reader's describe_table would complete a committed commit.
        heads = [c.ctx.table(TableName.parse(n))[0].current_version for n in CHUNKED]
        if not committed:
            assert heads == [1] * len(CHUNKED)
        # A fresh snapshot (Flight SQL, lake sql, pinned tickets) holds all of it or none: all
        # of it past the commit point once a head moved (read through its record); none of it
        # while no head moved and no manifest is published (no reader could open it), until
        # published (test_snapshot_transactions).
        shown = 2 if committed and point != "transaction:committed" else 1
        assert snapshot_versions(c) == [shown] * len(CHUNKED)
        # The retry takes the dead writer's leases, completes (committed) or clears (not) what
        # it left, and lands exactly once.
        results = op_chunked(c, COMMIT_ID)
        assert [r.replayed for r in results] == [committed] * len(CHUNKED)
        assert [c.reads.describe_table(n, with_stats=False).current_version for n in CHUNKED] == [2] * len(
            CHUNKED
        )
        for name in CHUNKED:
            c.manifests.finish_versions(name)
        assert [sorted(ids_of(c.reads.open_table(n))) for n in CHUNKED] == [
            [i, NEW + i] for i in range(len(CHUNKED))
        ]
        # Killed before registering anything, the record is left pending, naming no version
        # above a head: nothing reads it; the next transaction's sweep aborts it past its deadline.
        left = [decode(TransactionRecord, i.value) for i in c.store.scan_prefix(keys.transaction(""))]
        if point != "transaction:recorded":
            assert left == []
        for record in left:  # swept already if the test ran past its deadline
            assert record.state == "pending"
            assert resolve(c.store, record.txn_id, leased=True) == "aborted"
        assert list(c.store.scan_prefix(keys.transaction(""))) == []
        faults.check_registry_matches_engine(c)


def test_a_transaction_writes_over_what_a_killed_publish_left_above_a_head(settings: LakeSettings) -> None:
    """A killed long publish (``branch_publish``) leaves version records above main's head; the
    multi-table path clears the one in its way under the lease, as a single-table write does."""
    with Catalog(settings) as c:
        record = c.ctx.table(TableName.parse(TABLES[0]))[0]
        item = c.store.get(keys.version(record.incarnation, 1))
        assert item is not None
        left = decode(VersionRecord, item.value).model_copy(update={"version": 2})
        c.store.put_if_absent(keys.version(record.incarnation, 2), left.encode())
        results = op_transaction(c, "tx-after-publish")
        assert [r.to_version for r in results] == [2, 2, 2]
        assert seen(c) == [expected_new(i) for i in range(len(TABLES))]
        faults.check_registry_matches_engine(c)
