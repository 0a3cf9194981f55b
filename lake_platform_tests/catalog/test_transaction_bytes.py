"""A multi-table commit whose registry records are large, on DynamoDB (the suite's moto server):
one TransactWriteItems carries at most 4 MB (and 99 items), so the commit's registry writes are
packed by bytes as well as by count (``transaction_chunks``). Tables with wide schemas (their
table records hold the schema, a few hundred KB each) commit all together, readers see all of it
or none, and whatever cannot be stored is refused typed with nothing changed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.errors import TransactionTooLarge
from lake_platform.naming import TableName
from lake_platform.registry import keys
from lake_platform.settings import LakeSettings
from lake_platform_tests.catalog.conftest import REGISTRY_PREFIXES, lake_settings, namespace_lake, rows
from lake_platform_tests.catalog.test_transaction import heads, make_tables, staged
from lake_platform_tests.catalog.test_transaction_chunks import snapshot_versions, transaction_records
from lake_platform_tests.servers import SLOW_IO

#: Columns of a wide table: with 110-byte names its table record is ~300 KB, so 14 of them are
#: more than one TransactWriteItems carries.
WIDE = 1450
FIRST = "column_00000_" + "x" * 96


@pytest.fixture
def settings(tmp_path: Path, dynamodb_url: str) -> Iterator[LakeSettings]:
    # SLOW_IO: requests of several MB to a moto serving one at a time on a loaded machine.
    with namespace_lake(lake_settings(tmp_path / "home", registry_url=dynamodb_url, **SLOW_IO)) as made:
        yield made


def wide(value: int, columns: int = WIDE) -> pa.Table:
    names = [f"column_{i:05d}_" + "x" * 96 for i in range(columns)]  # names[0] is FIRST
    return pa.table({name: pa.array([value], pa.int64()) for name in names})


def make_wide(c: Catalog, count: int) -> list[str]:
    names = [f"p.w.ns.wide{i:03d}" for i in range(count)]
    for i, name in enumerate(names):
        c.tables.create_table(name, wide(i).to_reader())
    return names


def registry(c: Catalog) -> list[tuple[str, int]]:
    """Every registry record but the lease records (a refusal under a lease leaves it released
    at a new revision), with its revision."""
    prefixes = [p for p in REGISTRY_PREFIXES if p != "lse/"]
    return [(i.key, i.revision) for p in prefixes for i in c.store.scan_prefix(p)]


def head_sizes(c: Catalog, names: list[str]) -> int:
    return sum(len(c.store.get(keys.table(TableName.parse(n))).value) for n in names)  # type: ignore[union-attr]


@pytest.mark.slow
@pytest.mark.parametrize("tables", [19, 20], ids=["one-write-by-count", "several-by-count"])
def test_wide_tables_commit_together_past_a_transactions_bytes(settings: LakeSettings, tables: int) -> None:
    """19 tables fit one TransactWriteItems by count (95 items) but not by bytes; 20 take
    several by count, and their heads, moved 24 tables a write by count, not in one by bytes."""
    with Catalog(settings) as c:
        names = make_wide(c, tables)
        assert head_sizes(c, names) > 4_000_000
        with c.transaction() as tx:
            for i, name in enumerate(names):
                tx.append(name, wide(1000 + i).to_reader())
        assert [r.to_version for r in tx.results] == [2] * tables
        assert heads(c, names) == dict.fromkeys(names, 2)
        assert transaction_records(c) == []
        assert snapshot_versions(c, names) == [2] * tables
        first = c.reads.open_table(names[-1]).to_reader(columns=[FIRST]).read_all()
        assert sorted(first.column(0).to_pylist()) == [tables - 1, 999 + tables]


def test_a_transaction_record_over_an_items_limit_changes_nothing(settings: LakeSettings) -> None:
    """Over several registry writes, the transaction record holds every table's log entries (and
    new schemas): 20 tables with 30 KB of detail each make it more than a DynamoDB item holds. The
    commit is refused typed before anything is registered, and the tables take the next one."""
    with Catalog(settings) as c:
        names = make_tables(c, 20)
        before = registry(c)
        with pytest.raises(TransactionTooLarge) as err:
            with c.transaction() as tx:
                for i, name in enumerate(names):
                    tx.append(name, rows([1000 + i]), detail={"note": "d" * 30_000})
        assert "split" in err.value.message
        assert registry(c) == before and transaction_records(c) == []
        assert not any(staged(c, n) for n in names)
        with c.transaction() as tx:
            for i, name in enumerate(names):
                tx.append(name, rows([1000 + i]), detail={"note": "small"})
        assert heads(c, names) == dict.fromkeys(names, 2)
