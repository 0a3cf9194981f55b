"""Completing or clearing a multi-table commit over several registry writes from its record
(``catalog.transaction_recovery``): ``lake table repair``, the sweep of records past their
deadline, and a version whose record is gone."""

from __future__ import annotations

import signal
from typing import Any

import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.catalog.provenance import Provenance
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
