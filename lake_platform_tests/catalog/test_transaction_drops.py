"""Dropping or renaming a table a multi-table commit left behind its head (its writer killed mid
roll-forward, ``catalog.transaction_chunks``): the drop (``trash.detach_table``) and the rename
complete the commit first, so the table the trash files, undrop brings back or the new name
holds has the committed version its siblings hold."""

from __future__ import annotations

from lake_platform.catalog.catalog import Catalog
from lake_platform_tests.catalog.conftest import ids_of
from lake_platform_tests.catalog.test_transaction import catalog  # noqa: F401 - the fixture
from lake_platform_tests.catalog.test_transaction_chunks import SOME, transaction_records
from lake_platform_tests.catalog.test_transaction_reads import killed_commit, registry_heads


def test_a_dropped_lagging_table_comes_back_with_the_committed_version(catalog: Catalog) -> None:  # noqa: F811
    names = killed_commit(catalog, "transaction:rolled-forward", 2)
    last = names[-1]
    assert registry_heads(catalog, names) == [2] * 4 + [1] * (SOME - 4)
    dropped = catalog.trash.drop_table(last)
    assert dropped.from_version == 2
    # Every other table's head moved on the way, and the record went with the commit done.
    assert registry_heads(catalog, names[:-1]) == [2] * (SOME - 1)
    assert transaction_records(catalog) == []
    catalog.trash.undrop_table(last)
    assert registry_heads(catalog, [last]) == [2]
    catalog.manifests.finish_versions(last)
    snap = catalog.reads.open_table(last)
    assert snap.version == 2
    assert sorted(ids_of(snap)) == [SOME - 1, 1000 + SOME - 1]


def test_a_renamed_lagging_table_keeps_the_committed_version(catalog: Catalog) -> None:  # noqa: F811
    """The record names the old name: the rename completes the commit first, or no roll-forward
    would find the table again."""
    names = killed_commit(catalog, "transaction:rolled-forward", 2)
    last = names[-1]
    renamed = last.rsplit(".", 1)[0] + ".renamed"
    catalog.renames.rename_table(last, renamed)
    assert registry_heads(catalog, [*names[:-1], renamed]) == [2] * SOME
    assert transaction_records(catalog) == []
    catalog.manifests.finish_versions(renamed)
    snap = catalog.reads.open_table(renamed)
    assert (snap.version, sorted(ids_of(snap))) == (2, [SOME - 1, 1000 + SOME - 1])
