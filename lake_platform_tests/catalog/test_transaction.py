"""Atomic multi-table commits (``catalog.transaction()``) on both registry backends: every
table's version lands in one registry transaction, or none does."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.catalog.provenance import Provenance
from lake_platform.catalog.transaction import MAX_TABLES, OPS_PER_TABLE
from lake_platform.engine.manifests import names_not_older
from lake_platform.engine.staging import staging_manifests
from lake_platform.errors import InvalidInput, LakeError, TableSchemaValidationError
from lake_platform.registry.dynamodb import DynamoMetaStore
from lake_platform.registry.dynamodb_admin import delete_table, init_table
from lake_platform.registry.store import MAX_TRANSACT_OPS
from lake_platform.settings import load_settings
from lake_platform_tests.catalog.conftest import ids_of, rows
from lake_platform_tests.catalog.faults import Recorder


@pytest.fixture(params=["sqlite", "dynamodb"])
def catalog(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Catalog]:
    if request.param == "sqlite":
        settings = load_settings(home=tmp_path / "home")
    else:
        url = request.getfixturevalue("dynamodb_url")
        settings = load_settings(home=tmp_path / "home", registry_url=url)
        init_table(url, settings)
    c = Catalog(settings)
    c.containers.create_project("p")
    c.containers.create_warehouse("p.w")
    c.containers.create_namespace("p.w.ns")
    try:
        yield c
    finally:
        c.close()
        if request.param == "dynamodb":
            store = DynamoMetaStore.from_url(settings.registry_url, settings)
            delete_table(store)
            store.close()


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
    return {n: c.reads.describe_table(n, with_stats=False).current_version for n in names}


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


def test_the_table_limit_is_what_one_registry_transaction_carries(catalog: Catalog) -> None:
    assert MAX_TABLES == MAX_TRANSACT_OPS // OPS_PER_TABLE == 19  # one slot: the change record
    names = make_tables(catalog, MAX_TABLES)
    with catalog.transaction() as tx:
        for name in names:
            tx.append(name, rows([50]))
    assert heads(catalog, names) == dict.fromkeys(names, 2)
    tx = catalog.transaction()
    for name in names:
        tx.append(name, rows([60]))
    with pytest.raises(InvalidInput, match=f"at most {MAX_TABLES} tables"):
        tx.append("p.w.ns.one_more", rows([1]))


def test_a_hundred_table_transaction_is_refused_naming_the_limit(catalog: Catalog) -> None:
    tx = catalog.transaction()
    with pytest.raises(InvalidInput, match=f"at most {MAX_TABLES} tables") as refused:
        for i in range(100):
            tx.append(f"p.w.ns.t{i:03d}", rows([i]))
    assert "19" in refused.value.message


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
