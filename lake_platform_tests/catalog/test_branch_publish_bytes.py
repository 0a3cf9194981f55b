"""Publishing the branches of tables with wide schemas together, on DynamoDB (the suite's moto
server): one TransactWriteItems carries at most 4 MB and 99 items, and a publish's final
registry write holds every table's new head (a table record holds its schema, ~300 KB for 1,450
columns) with the branch versions that fit. The publish weighs its writes by bytes as well as by
count (``registry.store``), as a multi-table commit does: versions that do not fit are
registered first, packed, above main's heads; heads that cannot move in one write (every main
moves at once, or none does) are refused before anything is written, typed, naming the way out."""

from __future__ import annotations

import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.errors import TransactionTooLarge
from lake_platform.settings import LakeSettings
from lake_platform_tests.catalog.test_transaction import heads
from lake_platform_tests.catalog.test_transaction_bytes import (  # noqa: F401 - settings: the fixture
    FIRST,
    head_sizes,
    make_wide,
    registry,
    settings,
    wide,
)


@pytest.mark.slow
def test_wide_tables_whose_heads_do_not_fit_one_write_are_refused_before_any_write(
    settings: LakeSettings,  # noqa: F811
) -> None:
    """14 tables fit one write by count (98 items) once their two branch versions each go first,
    but their heads are 4.2 MB: the publish is refused with nothing registered (it registered
    the early versions above main's heads, then failed RecordTooLarge on the heads). Seven at a
    time publish, all of each."""
    with Catalog(settings) as c:
        names = make_wide(c, 14)
        assert head_sizes(c, names) > 4_000_000
        for i, name in enumerate(names):
            c.branches.create_branch(name, "dev")
            for n in (1000, 2000):
                c.branch_writes.append(name, "dev", wide(n + i).to_reader())
        before = registry(c)
        with pytest.raises(TransactionTooLarge) as err:
            c.branch_publish.publish_branches(names, "dev")
        assert "publish fewer" in err.value.message and 7 <= err.value.max_tables < 14
        assert registry(c) == before
        assert heads(c, names) == dict.fromkeys(names, 1)
        for half in (names[:7], names[7:]):
            results = c.branch_publish.publish_branches(half, "dev")
            assert [r.to_version for r in results] == [3] * 7
        assert heads(c, names) == dict.fromkeys(names, 3)
        first = c.reads.open_table(names[-1]).to_reader(columns=[FIRST]).read_all()
        assert sorted(first.column(0).to_pylist()) == [13, 1013, 2013]
