"""Atomic multi-table commits (``catalog.transaction()``) on both registry backends: every
table's version lands in one registry transaction, or none does."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path

import pyarrow as pa
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.catalog.provenance import Provenance
from lake_platform.catalog.transaction import OPS_PER_TABLE, max_tables
from lake_platform.catalog.transaction_ops import MAX_CHUNKED_TABLES
from lake_platform.engine.manifests import names_not_older
from lake_platform.engine.staging import staging_manifests
from lake_platform.errors import (
    ConcurrentModification,
    InvalidInput,
    LakeError,
    TableSchemaValidationError,
    TransactionTooLarge,
)
from lake_platform.naming import TableName
from lake_platform.registry import keys
from lake_platform.registry.changes import changes_since, feed_heads
from lake_platform.registry.sqlite import SqliteMetaStore
from lake_platform.registry.store import Item, MetaStore, Op
from lake_platform.settings import LakeSettings, load_settings
from lake_platform_tests.catalog.conftest import ids_of, namespace_lake, rows
from lake_platform_tests.catalog.faults import Recorder
from lake_platform_tests.registry.wrapping import WrappedStore


@contextlib.contextmanager
def opened(settings: LakeSettings) -> Iterator[Catalog]:
    """A catalog on ``settings``' ``namespace_lake``."""
    with namespace_lake(settings), Catalog(settings) as c:
        yield c


@pytest.fixture
def catalog(backend_settings: LakeSettings) -> Iterator[Catalog]:
    with Catalog(backend_settings) as c:
        yield c


@pytest.fixture
def sqlite_catalog(tmp_path: Path) -> Iterator[Catalog]:
    with opened(load_settings(home=tmp_path / "home")) as c:
        yield c


@pytest.fixture
def dynamodb_catalog(dynamodb_url: str, tmp_path: Path) -> Iterator[Catalog]:
    with opened(load_settings(home=tmp_path / "home", registry_url=dynamodb_url)) as c:
        yield c


def files_under(c: Catalog) -> list[str]:
    """Every file of the catalog's home (its tables' data and manifests), by path and size."""
    home = Path(c.settings.home)
    return sorted(f"{p.relative_to(home)}:{p.stat().st_size}" for p in home.rglob("*") if p.is_file())


def make_tables(c: Catalog, count: int) -> list[str]:
    names = [f"p.w.ns.t{i:03d}" for i in range(count)]
    for i, name in enumerate(names):
        c.tables.create_table(name, rows([i]))
    return names


def staged(c: Catalog, name: str) -> list[tuple[int, str]]:
    """The staging manifests left in ``name``'s ``_versions/``."""
    location = c.reads.describe_table(name, with_stats=False).location
    return staging_manifests(location, names_not_older(location, 0, c.ctx.storage(location)))


def heads(c: Catalog, names: list[str]) -> dict[str, int]:
    """Each table's head as the registry holds it (a reader's ``describe_table`` would complete
    a committed multi-table commit its head lags, ``transaction_recovery.committed_head``)."""
    return {n: c.ctx.table(TableName.parse(n))[0].current_version for n in names}


def test_ten_tables_land_together_in_one_registry_transaction(catalog: Catalog) -> None:
    names = make_tables(catalog, 10)
    with catalog.transaction() as tx:
        for i, name in enumerate(names):
            if i % 2:
                tx.overwrite(name, rows([100 + i]))
            else:
                tx.append(name, rows([100 + i]))
    assert [r.table for r in tx.results] == names
    assert heads(catalog, names) == dict.fromkeys(names, 2)
    for i, name in enumerate(names):
        expected = [100 + i] if i % 2 else [i, 100 + i]
        assert sorted(ids_of(catalog.reads.open_table(name))) == expected
        entry = catalog.reads.commit(name, tx.results[i].commit_id)
        assert entry is not None and entry.detail["transaction"] == tx.commit_id
        assert entry.rows_added == 1 and entry.rows_removed == (1 if i % 2 else 0)
        if i % 2:  # an overwrite's entry has its file counts, as after a single overwrite
            assert entry.files_added == 1 and entry.files_removed == 1
        # Every manifest is published and no staging manifest is left.
        assert not staged(catalog, name)
    # Every lease went with the commit: single writes go on at once.
    catalog.tables.append(names[0], rows([7]))
    assert sorted(ids_of(catalog.reads.open_table(names[0]))) == [0, 7, 100]


def test_a_failing_table_leaves_every_table_as_it_was(catalog: Catalog) -> None:
    names = make_tables(catalog, 3)
    bad = pa.table({"id": pa.array(["not a number"])}).to_reader()
    with pytest.raises(TableSchemaValidationError):
        with catalog.transaction() as tx:
            tx.append(names[0], rows([10]))
            tx.append(names[1], rows([11]))
            tx.append(names[2], bad)
    assert heads(catalog, names) == dict.fromkeys(names, 1)
    for i, name in enumerate(names):
        assert ids_of(catalog.reads.open_table(name)) == [i]
        assert not staged(catalog, name)
    # Nothing is held: the same writes land as a transaction afterwards.
    with catalog.transaction() as tx:
        tx.append(names[0], rows([10]))
        tx.append(names[2], rows([12]))
    assert heads(catalog, names) == {names[0]: 2, names[1]: 1, names[2]: 2}


def test_an_exception_in_the_block_commits_nothing(catalog: Catalog) -> None:
    names = make_tables(catalog, 2)
    with pytest.raises(RuntimeError):
        with catalog.transaction() as tx:
            tx.append(names[0], rows([10]))
            raise RuntimeError("the pipeline failed")
    assert heads(catalog, names) == dict.fromkeys(names, 1)


def test_a_transaction_given_a_commit_id_replays(catalog: Catalog) -> None:
    names = make_tables(catalog, 2)
    by = Provenance(commit_id="batch-0001")
    for _ in range(2):
        with catalog.transaction(by=by) as tx:
            tx.append(names[0], rows([10]))
            tx.append(names[1], rows([11]))
    assert [r.replayed for r in tx.results] == [True, True]
    assert heads(catalog, names) == dict.fromkeys(names, 2)


def test_the_table_limit_is_the_backends_and_refused_when_recorded(catalog: Catalog) -> None:
    store = catalog.ctx.store
    limit = max_tables(store)
    # SQLite: one transaction, bounded only by max_transact_ops; DynamoDB: one TransactWriteItems
    # of 100 items (one of them the change record) takes 19 tables, several take 200.
    assert limit == {"sqlite": 2000, "dynamodb": MAX_CHUNKED_TABLES}[store.backend]
    assert limit == max(store.max_transact_ops // OPS_PER_TABLE, MAX_CHUNKED_TABLES)
    tx = catalog.transaction()
    for i in range(limit):  # recording reads nothing: these tables need not exist
        tx.append(f"p.w.ns.t{i:04d}", rows([i]))
    with pytest.raises(TransactionTooLarge, match=f"at most {limit} tables") as refused:
        tx.append("p.w.ns.one_more", rows([1]))
    assert refused.value.max_tables == limit
    assert store.backend in refused.value.message


def test_a_hundred_tables_land_in_one_sqlite_transaction(sqlite_catalog: Catalog) -> None:
    c = sqlite_catalog
    names = make_tables(c, 100)
    store = c.ctx.store
    assert isinstance(store, SqliteMetaStore)
    positions = feed_heads(store, store.changes.shards())
    with c.transaction() as tx:
        for i, name in enumerate(names):
            tx.append(name, rows([1000 + i]))
    assert heads(c, names) == dict.fromkeys(names, 2)
    assert all(sorted(ids_of(c.reads.open_table(n))) == [i, 1000 + i] for i, n in enumerate(names))
    assert all(not staged(c, name) for name in names)
    # One atomic registry write moved every head: one change record names all 100 tables.
    tables = {keys.table(TableName.parse(n)) for n in names}
    moved = [set(ch.keys) & tables for ch in changes_since(store, positions)[0]]
    assert [m for m in moved if m] == [tables]


def test_a_hundred_tables_land_all_or_none_on_sqlite(sqlite_catalog: Catalog) -> None:
    # The last table's head moves after every table is staged: the one SQLite transaction has
    # applied the other 99 tables' writes when that condition fails, and must undo all of them.
    c = sqlite_catalog
    names = make_tables(c, 100)
    last = keys.table(TableName.parse(names[-1]))

    def bump_last(point: str) -> None:
        if point == "transaction:staged":
            item = c.ctx.store.get(last)
            assert item is not None
            c.ctx.store.compare_and_swap(last, item.revision, item.value)

    with Catalog(c.settings, hook=bump_last) as failing:
        with pytest.raises(ConcurrentModification, match="nothing was committed"):
            with failing.transaction() as tx:
                for i, name in enumerate(names):
                    tx.append(name, rows([1000 + i]))
    assert heads(c, names) == dict.fromkeys(names, 1)
    assert all(ids_of(c.reads.open_table(n)) == [i] for i, n in enumerate(names))
    assert all(not staged(c, name) for name in names)
    with c.transaction() as tx:  # every lease was let go
        for i, name in enumerate(names):
            tx.append(name, rows([1000 + i]))
    assert heads(c, names) == dict.fromkeys(names, 2)


def test_dynamodb_spreads_what_one_transact_write_items_cannot_take_over_several(
    dynamodb_catalog: Catalog,
) -> None:
    catalog = dynamodb_catalog
    store = catalog.ctx.store
    names = make_tables(catalog, store.max_transact_ops // OPS_PER_TABLE)
    wider = pa.table({"id": pa.array([9], pa.int64()), "tag": pa.array(["x"]), "extra": pa.array([1])})
    for name in names[:3]:
        catalog.policies.set_policy(name, {"schema_evolution": "add_columns"})
    seen: list[str] = []
    # 19 tables fit one TransactWriteItems (95 operations); three of them adding a column need
    # 6 more: 101 > 99, so the commit goes through a transaction record and several writes.
    with Catalog(catalog.settings, hook=seen.append) as c, c.transaction() as tx:
        for i, name in enumerate(names):
            tx.append(name, wider.to_reader() if i < 3 else rows([100 + i]))
    assert "transaction:committed" in seen
    assert seen.count("transaction:chunk-registered") == seen.count("transaction:rolled-forward") == 1
    assert heads(catalog, names) == {n: 3 if i < 3 else 2 for i, n in enumerate(names)}
    assert all("extra" in catalog.reads.open_table(n).schema.names for n in names[:3])
    assert all(
        sorted(ids_of(catalog.reads.open_table(n))) == [i, 100 + i] for i, n in enumerate(names) if i >= 3
    )
    assert list(store.scan_prefix(keys.transaction(""))) == []  # the record deleted once done


def test_a_table_is_written_once_per_transaction(catalog: Catalog) -> None:
    names = make_tables(catalog, 1)
    tx = catalog.transaction()
    tx.append(names[0], rows([1]))
    with pytest.raises(InvalidInput, match="each table once"):
        tx.overwrite(names[0], rows([2]))


def test_an_evolving_append_lands_its_schema_step_with_the_rest(catalog: Catalog) -> None:
    names = make_tables(catalog, 2)
    catalog.policies.set_policy(names[0], {"schema_evolution": "add_columns"})
    wider = pa.table({"id": pa.array([9], pa.int64()), "tag": pa.array(["x"]), "extra": pa.array([1])})
    with catalog.transaction() as tx:
        tx.append(names[0], wider.to_reader())
        tx.append(names[1], rows([11]))
    assert "extra" in catalog.reads.open_table(names[0]).schema.names
    assert heads(catalog, names) == {names[0]: 3, names[1]: 2}


class Requests(WrappedStore):
    """A catalog's registry requests, counted: reads (get, get_many, scan) and writes."""

    def __init__(self, inner: MetaStore) -> None:
        super().__init__(inner)
        self.reads = self.writes = 0

    def get(self, key: str) -> Item | None:
        self.reads += 1
        return self.inner.get(key)

    def get_many(self, keys: Sequence[str]) -> list[Item | None]:
        self.reads += 1
        return self.inner.get_many(keys)

    def scan_prefix(
        self, prefix: str, *, start_after: str | None = None, limit: int | None = None
    ) -> Iterator[Item]:
        self.reads += 1
        return self.inner.scan_prefix(prefix, start_after=start_after, limit=limit)

    def transact(self, ops: Sequence[Op]) -> list[Item | None]:
        self.writes += 1
        return self.inner.transact(ops)


def test_appends_to_free_leases_are_two_reads_and_one_registry_write(catalog: Catalog) -> None:
    # As one small append: no lease acquired, no re-read under it, no settle; the registry
    # transaction is conditional on every lease record as read (on DynamoDB: two
    # TransactGetItems and one TransactWriteItems, where acquiring took ten PutItems more).
    names = make_tables(catalog, 10)
    requests = Requests(catalog.ctx.store)
    with Catalog(catalog.settings, requests) as c:
        counted = []
        for round_ in range(3):
            requests.reads = requests.writes = 0
            with c.transaction() as tx:
                for i, name in enumerate(names):
                    tx.append(name, rows([100 * (round_ + 1) + i]))
            counted.append((requests.reads, requests.writes))
    # The first transaction of a process also learns the change feed's shard heads.
    assert counted[1:] == [(2, 1), (2, 1)]
    assert heads(catalog, names) == dict.fromkeys(names, 4)
    assert all(not staged(catalog, name) for name in names)
    # Every lease was left free: a leased write goes on at once.
    catalog.tables.overwrite(names[0], rows([1]))
    assert ids_of(catalog.reads.open_table(names[0])) == [1]


def test_a_lease_taken_meanwhile_makes_the_transaction_land_once_under_the_leases(
    catalog: Catalog,
) -> None:
    names = make_tables(catalog, 3)
    incarnation = catalog.reads.describe_table(names[1], with_stats=False).incarnation
    recorder = Recorder()

    def take_a_lease(point: str) -> None:
        recorder(point)
        if point == "transaction:staged" and recorder.points.count(point) == 1:
            with catalog.ctx.gate.hold(incarnation):  # another writer's turn, ended
                pass

    with Catalog(catalog.settings, hook=take_a_lease) as c, c.transaction() as tx:
        for i, name in enumerate(names):
            tx.append(name, rows([100 + i]))
    # Refused once (nothing landed), then staged and registered under acquired leases.
    assert recorder.points.count("transaction:staged") == 2
    assert recorder.points.count("transaction:registered") == 1
    assert heads(catalog, names) == dict.fromkeys(names, 2)
    assert [sorted(ids_of(catalog.reads.open_table(n))) for n in names] == [[i, 100 + i] for i in range(3)]
    assert all(not staged(catalog, name) for name in names)


def test_a_failure_after_staging_leaves_nothing_visible_and_no_staging_manifest(catalog: Catalog) -> None:
    names = make_tables(catalog, 3)

    def fail(point: str) -> None:
        if point == "transaction:staged":
            raise OSError("injected: the process lost its storage")

    with Catalog(catalog.settings, hook=fail) as failing:
        with pytest.raises(OSError, match="injected"):
            with failing.transaction() as tx:
                for name in names:
                    tx.append(name, rows([10]))
    assert heads(catalog, names) == dict.fromkeys(names, 1)
    for i, name in enumerate(names):
        assert ids_of(catalog.reads.open_table(name)) == [i]
        assert not staged(catalog, name)


def test_leases_are_taken_in_sorted_name_order_whatever_the_order_given(catalog: Catalog) -> None:
    # Two transactions sharing tables then wait for each other's leases in the same order: one
    # holding a lease the other needs never waits for one the other holds (no deadlock).
    names = make_tables(catalog, 3)
    recorder = Recorder()
    with Catalog(catalog.settings, hook=recorder) as c, c.transaction() as tx:
        for name in reversed(names):
            tx.append(name, rows([9]))
    leased = [p.removeprefix("transaction:leased:") for p in recorder.points if "leased" in p]
    assert leased == sorted(names)


def test_a_table_failing_while_the_others_stage_leaves_nothing_visible(catalog: Catalog) -> None:
    names = make_tables(catalog, 3)
    arrivals: list[str] = []

    def fail_second(point: str) -> None:
        # Inside Lance's commit of one table, its data files written: an engine failure.
        if point == "append:staged":
            arrivals.append(point)
            if len(arrivals) == 2:
                raise OSError("injected: storage went away")

    with Catalog(catalog.settings, hook=fail_second) as failing:
        with pytest.raises(LakeError):
            with failing.transaction() as tx:
                for name in names:
                    tx.append(name, rows([10]))
    assert heads(catalog, names) == dict.fromkeys(names, 1)
    for i, name in enumerate(names):
        assert ids_of(catalog.reads.open_table(name)) == [i]
    # The tables staged in full lose their staging manifests now; the one whose commit failed
    # keeps its own, as a failed single commit does (debris for settle or the orphan scan).
    assert sum(1 for name in names if staged(catalog, name)) == 1
    with catalog.transaction() as tx:  # the leases were let go
        for name in names:
            tx.append(name, rows([10]))
    assert heads(catalog, names) == dict.fromkeys(names, 2)
