"""Single-table reads of a table a multi-table commit left behind its head (its writer killed
mid roll-forward, ``catalog.transaction_chunks``): ``describe_table``, ``open_table``,
``readable_versions`` and the Lance Namespace's ``list_table_versions`` (REST's
ListTableVersions) read the version just above the head with it and see the committed version,
completing the commit (``transaction_recovery.committed_head``); a commit not yet at its commit
point stays invisible and is left to its writer."""

from __future__ import annotations

import pytest
from lance_namespace_urllib3_client.models import ListTableVersionsRequest

from lake_platform.catalog.catalog import Catalog
from lake_platform.catalog.pylance_namespace import LakeNamespace
from lake_platform.catalog.transaction import Transaction
from lake_platform.errors import InvalidTableState
from lake_platform.naming import TableName
from lake_platform_tests.catalog.conftest import ids_of, rows
from lake_platform_tests.catalog.test_transaction import catalog, make_tables  # noqa: F401 - the fixtures
from lake_platform_tests.catalog.test_transaction_chunks import (
    SMALL,
    SOME,
    stop_at,
    transaction_records,
)


def registry_heads(c: Catalog, names: list[str]) -> list[int]:
    """Each table's head as the registry holds it (no reader's view)."""
    return [c.ctx.table(TableName.parse(n))[0].current_version for n in names]


def killed_commit(c: Catalog, where: str, nth: int) -> list[str]:
    """``SOME`` tables at version 1 and a commit of version 2 to each, stopped at ``where``."""
    names = make_tables(c, SOME)
    with Catalog(c.settings, hook=stop_at(where, nth)) as writer:
        with pytest.raises(SystemExit):
            with Transaction(writer.tables, max_ops=SMALL) as tx:
                for i, name in enumerate(names):
                    tx.append(name, rows([1000 + i]))
    return names


def test_describe_table_of_a_lagging_table_shows_the_committed_version(catalog: Catalog) -> None:  # noqa: F811
    names = killed_commit(catalog, "transaction:rolled-forward", 2)
    last = names[-1]
    assert registry_heads(catalog, names) == [2] * 4 + [1] * (SOME - 4)
    described = catalog.reads.describe_table(last, with_stats=False)
    assert described.current_version == 2
    # Completed on the way: every head moved, the record deleted, later reads cheap again.
    assert registry_heads(catalog, names) == [2] * SOME
    assert transaction_records(catalog) == []
    catalog.manifests.finish_versions(last)
    stats = catalog.reads.describe_table(last)
    assert (stats.current_version, stats.rows) == (2, 2)


def test_open_table_of_a_lagging_table_never_reads_its_old_version(catalog: Catalog) -> None:  # noqa: F811
    names = killed_commit(catalog, "transaction:rolled-forward", 2)
    last = names[-1]
    # Version 2 is committed but its manifest unpublished (the writer died): the open says so
    # rather than answering version 1 while its siblings answer version 2.
    with pytest.raises(InvalidTableState, match="version 2 of"):
        catalog.reads.open_table(last)
    assert registry_heads(catalog, names) == [2] * SOME
    catalog.manifests.finish_versions(last)
    snap = catalog.reads.open_table(last)
    assert snap.version == 2
    assert sorted(ids_of(snap)) == [SOME - 1, 1000 + SOME - 1]


def test_readable_versions_of_a_lagging_table_include_the_committed_version(
    catalog: Catalog,  # noqa: F811
) -> None:
    names = killed_commit(catalog, "transaction:committed", 1)  # no head moved at all
    assert registry_heads(catalog, names) == [1] * SOME
    _, versions = catalog.reads.readable_versions(names[5])
    assert sorted(versions) == [1, 2]
    assert registry_heads(catalog, names) == [2] * SOME


def test_listed_versions_of_a_lagging_table_include_the_committed_version(
    catalog: Catalog,  # noqa: F811
) -> None:
    names = killed_commit(catalog, "transaction:committed", 1)  # no head moved at all
    ns = LakeNamespace(catalog)
    latest = ListTableVersionsRequest(id=names[3].split("."), limit=1, descending=True)
    assert [v.version for v in ns.list_table_versions(latest).versions] == [2]
    assert registry_heads(catalog, names) == [2] * SOME  # completed on the way
    assert [v.version for v in ns.list_table_versions({"id": names[4].split(".")}).versions] == [1, 2]


def test_a_commit_before_its_commit_point_is_invisible_and_left_to_its_writer(
    catalog: Catalog,  # noqa: F811
) -> None:
    names = make_tables(catalog, SOME)
    last = names[-1]
    seen: list[tuple[int, list[int], list[int], list[str]]] = []

    def look(at: str) -> None:
        # Every version registered above its head, the record pending: what a reader sees.
        if at == "transaction:chunk-registered" and not seen:
            (record,) = transaction_records(catalog)
            if len(record.tables) != SOME or record.state != "pending":
                return
            seen.append(
                (
                    catalog.reads.describe_table(last, with_stats=False).current_version,
                    sorted(ids_of(catalog.reads.open_table(last))),
                    sorted(catalog.reads.readable_versions(last)[1]),
                    [r.state for r in transaction_records(catalog)],
                )
            )

    with Catalog(catalog.settings, hook=look) as c, Transaction(c.tables, max_ops=SMALL) as tx:
        for i, name in enumerate(names):
            tx.append(name, rows([1000 + i]))
    # A reader holds no lease: the pending record is left to its writer, which commits it.
    assert seen == [(1, [SOME - 1], [1], ["pending"])]
    assert registry_heads(catalog, names) == [2] * SOME
