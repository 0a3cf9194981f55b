"""Completing or clearing a multi-table commit over several registry writes from its record
(``catalog.transaction_recovery``): ``lake table repair``, the sweep of records past their
deadline, a version whose record is gone, and a single-table writer meeting a committed one
(completed, then its write rebased on it, unless the write was staged on the old head)."""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import Any

import lance  # the Lance client staging a commit on the old head
import lance_namespace.errors as ns_errors
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.catalog.provenance import Provenance
from lake_platform.catalog.pylance_namespace import LakeNamespace
from lake_platform.catalog.transaction import Transaction
from lake_platform.catalog.transaction_recovery import sweep
from lake_platform.naming import TableName
from lake_platform.registry import keys
from lake_platform.registry.records import TransactionRecord, decode
from lake_platform.registry.store import Delete
from lake_platform_tests.catalog import faults
from lake_platform_tests.catalog.conftest import ids_of, rows
from lake_platform_tests.catalog.test_transaction import (  # noqa: F401 - the fixtures
    catalog,
    heads,
    make_tables,
    sqlite_catalog,
)
from lake_platform_tests.catalog.test_transaction_chunks import (
    SMALL,
    SOME,
    snapshot_versions,
    stop_at,
    transaction_records,
)
from lake_platform_tests.rest.handlers.staging import StagingOnly


def op_commit(lake: Catalog, commit_id: str) -> Any:
    names = [f"p.w.ns.t{i:03d}" for i in range(SOME)]  # make_tables' names
    with Transaction(lake.tables, Provenance(commit_id=commit_id), max_ops=SMALL) as tx:
        for i, name in enumerate(names):
            tx.append(name, rows([1000 + i]))
    return tx.results


def killed_commit(c: Catalog, where: str, nth: int) -> None:
    """The commit of ``op_commit``, its writer SIGKILLed at ``where``: no tidying of any kind."""
    code, _ = faults.kill_writer(c.settings, op_commit, where, nth, "tx-recovery-0001")
    assert code == -signal.SIGKILL


def stopped_commit(c: Catalog, names: list[str], where: str, nth: int = 1) -> None:
    """A commit of one row a table that stops (as if its writer died) at ``where``."""
    with Catalog(c.settings, hook=stop_at(where, nth)) as other:
        with pytest.raises(SystemExit):
            with Transaction(other.tables, max_ops=SMALL) as tx:
                for i, name in enumerate(names):
                    tx.append(name, rows([1000 + i]))


def test_repair_of_any_table_completes_a_committed_commit_left_half_moved(catalog: Catalog) -> None:  # noqa: F811
    names = make_tables(catalog, SOME)
    stopped_commit(catalog, names, "transaction:rolled-forward", 1)
    assert sorted(heads(catalog, names).values()) == [1] * (SOME - 2) + [2] * 2
    catalog.manifests.repair_table(names[-1])
    assert heads(catalog, names) == dict.fromkeys(names, 2)
    assert transaction_records(catalog) == []
    assert snapshot_versions(catalog, names) == [2] * SOME
    for name in names:
        catalog.manifests.finish_versions(name)
    assert all(sorted(ids_of(catalog.reads.open_table(n))) == [i, 1000 + i] for i, n in enumerate(names))
    assert [e.operation for e in catalog.reads.history(names[-1])][-1] == "append"  # its log entry too


def test_repair_clears_a_commit_stopped_before_its_commit_point(sqlite_catalog: Catalog) -> None:  # noqa: F811
    c = sqlite_catalog
    names = make_tables(c, SOME)
    killed_commit(c, "transaction:chunk-registered", 2)
    (record,) = transaction_records(c)
    assert record.state == "pending"
    c.manifests.repair_table(names[0])  # holds the lease of one of its tables: aborts it
    assert transaction_records(c) == []
    for name in names:
        incarnation = c.ctx.table(TableName.parse(name))[0].incarnation
        assert [i.key for i in c.store.scan_prefix(keys.versions(incarnation))] == [
            keys.version(incarnation, 1)
        ]
    c.tables.append(names[-1], rows([7]))  # nothing in the way
    assert heads(c, names)[names[-1]] == 2


def test_the_sweep_aborts_a_pending_record_past_its_deadline_only(sqlite_catalog: Catalog) -> None:  # noqa: F811
    c = sqlite_catalog
    names = make_tables(c, SOME)
    stopped_commit(c, names, "transaction:recorded")  # the record put, nothing registered
    assert sweep(c.store, SMALL) == 0  # within its deadline: its writer may still commit it
    item = c.store.get(keys.transaction(transaction_records(c)[0].txn_id))
    assert item is not None
    late = decode(TransactionRecord, item.value).model_copy(update={"deadline_ms": 0})
    c.store.compare_and_swap(item.key, item.revision, late.encode())
    assert sweep(c.store, SMALL) == 1
    assert transaction_records(c) == []


def test_a_version_whose_record_is_gone_is_cleared_by_the_next_writer(sqlite_catalog: Catalog) -> None:  # noqa: F811
    c = sqlite_catalog
    names = make_tables(c, SOME)
    killed_commit(c, "transaction:chunk-registered", 2)
    (record,) = transaction_records(c)
    item = c.store.get(keys.transaction(record.txn_id))
    assert item is not None
    c.store.transact([Delete(item.key, item.revision)])  # as an abort that missed some versions
    c.tables.append(names[0], rows([7]))  # its version 2 is the dead commit's: cleared, then this
    assert heads(c, names)[names[0]] == 2
    assert sorted(ids_of(c.reads.open_table(names[0]))) == [0, 7]


def test_an_overwrite_after_the_commit_point_lands_on_the_committed_version(catalog: Catalog) -> None:  # noqa: F811
    names = make_tables(catalog, SOME)
    stopped_commit(catalog, names, "transaction:committed")
    assert heads(catalog, names) == dict.fromkeys(names, 1)
    # Planned on version 1 (no version asked for): rebased on the commit's version 2.
    assert catalog.tables.overwrite(names[3], rows([9])).to_version == 3
    assert heads(catalog, names) == {**dict.fromkeys(names, 2), names[3]: 3}
    assert [(e.operation, e.to_version) for e in catalog.reads.history(names[3])][1:] == [
        ("append", 2),
        ("overwrite", 3),
    ]
    assert ids_of(catalog.reads.open_table(names[3])) == [9]
    assert snapshot_versions(catalog, names) == [2, 2, 2, 3] + [2] * (SOME - 4)


def test_a_delete_after_the_commit_point_applies_to_the_committed_version(catalog: Catalog) -> None:  # noqa: F811
    names = make_tables(catalog, SOME)
    stopped_commit(catalog, names, "transaction:committed")
    # Lance opens the head the lease finds (the commit's version 2) and deletes from it.
    assert catalog.tables.delete_rows(names[2], "id = 2").to_version == 3
    assert heads(catalog, names) == {**dict.fromkeys(names, 2), names[2]: 3}
    assert ids_of(catalog.reads.open_table(names[2])) == [1002]
    assert [e.operation for e in catalog.reads.history(names[2])][1:] == ["append", "delete"]


#: Other single-table writes through the catalog, each on a table a stopped commit left behind.
WRITES: dict[str, Callable[[Catalog, str], object]] = {
    "replace": lambda c, name: c.rows.replace_where(name, "id < 1000", rows([5], "y")),
    "add-column": lambda c, name: c.alter.add_column(name, "extra", "int64"),
    "schema-metadata": lambda c, name: c.schemas.update_schema_metadata(name, {"owner": "ops"}),
    "index": lambda c, name: c.indexes.create_index(name, "id"),
}


@pytest.mark.parametrize("write", sorted(WRITES))
def test_other_writes_after_the_commit_point_land_on_the_committed_version(
    sqlite_catalog: Catalog,  # noqa: F811
    write: str,
) -> None:
    c = sqlite_catalog
    names = make_tables(c, SOME)
    stopped_commit(c, names, "transaction:committed")
    WRITES[write](c, names[5])
    assert heads(c, names) == {**dict.fromkeys(names, 2), names[5]: 3}
    log = [(e.from_version, e.to_version) for e in c.reads.history(names[5])]
    assert log[-2:] == [(1, 2), (2, 3)]
    assert sorted(ids_of(c.reads.open_table(names[5]))) == [5, 1005]


def test_a_commit_staged_on_the_old_head_is_refused_after_the_commit_point(catalog: Catalog) -> None:  # noqa: F811
    names = make_tables(catalog, SOME)
    target = names[3]
    # A Lance client's overwrite staged as version 2 on version 1 (the version it names is its
    # compare-and-swap), then a multi-table commit takes version 2 and stops at its commit point.
    client = StagingOnly(LakeNamespace(catalog))
    location = catalog.reads.describe_table(target, with_stats=False).location
    with pytest.raises(OSError):  # the commit was kept, not sent
        lance.write_dataset(
            rows([9]).read_all(),
            namespace_client=client,
            table_id=target.split("."),
            mode="overwrite",
            storage_options=catalog.settings.storage_options(location) or None,
        )
    assert client.staged is not None and client.staged["version"] == 2
    stopped_commit(catalog, names, "transaction:committed")
    with pytest.raises(ns_errors.ConcurrentModificationError):
        LakeNamespace(catalog).create_table_version(client.staged)
    assert heads(catalog, names) == dict.fromkeys(names, 2)  # the commit completed; nothing else
    assert [e.operation for e in catalog.reads.history(target)][1:] == ["append"]
    catalog.manifests.finish_versions(target)
    assert sorted(ids_of(catalog.reads.open_table(target))) == [3, 1003]


def test_a_compaction_after_the_commit_point_lands_on_the_committed_version(catalog: Catalog) -> None:  # noqa: F811
    names = make_tables(catalog, SOME)
    target = names[4]
    catalog.tables.append(target, rows([7]))  # two fragments at version 2
    planned = catalog.versions.plan_compaction(target)
    results = catalog.versions.execute_compaction(planned)
    stopped_commit(catalog, names, "transaction:committed")  # version 3 of target, 2 of the others
    assert heads(catalog, names) == {**dict.fromkeys(names, 1), target: 2}
    # First try: the commit completed under the compaction's lease, which Lance rebases over its
    # append.
    result = catalog.versions.commit_compaction(planned, results)
    assert (result.status, result.version) == ("committed", 5)
    assert heads(catalog, names) == {**dict.fromkeys(names, 2), target: 5}
    assert [(e.operation, e.to_version) for e in catalog.reads.history(target)][1:] == [
        ("append", 2),
        ("append", 3),  # the commit's
        ("compact", 4),  # Lance's reserve step, then the rewrite
        ("compact#1", 5),
    ]
    assert sorted(ids_of(catalog.reads.open_table(target))) == [4, 7, 1004]
    assert snapshot_versions(catalog, names) == [2] * 4 + [5] + [2] * (SOME - 5)


def test_a_compaction_meeting_a_pending_commit_aborts_it(sqlite_catalog: Catalog) -> None:  # noqa: F811
    c = sqlite_catalog
    names = make_tables(c, SOME)
    c.tables.append(names[0], rows([7]))  # two fragments to compact at version 2
    killed_commit(c, "transaction:chunk-registered", 2)
    assert transaction_records(c)[0].state == "pending"
    incarnation = c.ctx.table(TableName.parse(names[0]))[0].incarnation
    assert c.store.get(keys.version(incarnation, 3)) is not None  # the commit's, above the head
    # The compaction's lease proves the commit's writer lost it: aborted and cleared, then compacted.
    result = c.versions.compact(names[0])
    assert result.status == "committed"
    assert transaction_records(c) == []
    assert heads(c, names) == {**dict.fromkeys(names, 1), names[0]: 4}  # its version 3 cleared first
    assert [e.operation for e in c.reads.history(names[0])][1:] == ["append", "compact", "compact#1"]
    assert sorted(ids_of(c.reads.open_table(names[0]))) == [0, 7]
