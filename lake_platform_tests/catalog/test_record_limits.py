"""A table whose schema does not fit one DynamoDB registry item (400 KB: the table record holds
the schema): refused typed, naming the record and the cause, with the registry and the warehouse
as they were. On the suite's moto server, with the warehouse in a local folder."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.errors import RecordTooLarge
from lake_platform.settings import LakeSettings
from lake_platform_tests.catalog.conftest import (
    REGISTRY_PREFIXES,
    ids_of,
    lake_settings,
    namespace_lake,
    rows,
)


@pytest.fixture
def settings(tmp_path: Path, dynamodb_url: str) -> Iterator[LakeSettings]:
    with namespace_lake(lake_settings(tmp_path / "home", registry_url=dynamodb_url)) as made:
        yield made


def wide(columns: int, first: int = 0) -> pa.Table:
    """``columns`` int64 columns with 110-byte names: 4,000 of them make a schema of ~600 KB."""
    names = [f"column_{i:05d}_" + "x" * 96 for i in range(first, first + columns)]
    return pa.table({name: pa.array([1], pa.int64()) for name in names})


def registry(catalog: Catalog) -> list[tuple[str, int]]:
    return [(i.key, i.revision) for p in REGISTRY_PREFIXES for i in catalog.store.scan_prefix(p)]


def files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


def test_a_schema_over_a_records_limit_is_refused_at_create(settings: LakeSettings) -> None:
    warehouse = settings.home / "warehouse"
    with Catalog(settings) as catalog:
        before, on_disk = registry(catalog), files(warehouse)
        with pytest.raises(RecordTooLarge) as err:
            catalog.tables.create_table("p.w.ns.big", wide(4000).to_reader())
        assert "tbl/p/w/ns/big" in str(err.value) and "schema" in str(err.value)
        assert registry(catalog) == before
        assert files(warehouse) == on_disk


def test_a_schema_change_over_a_records_limit_leaves_the_table_as_it_was(settings: LakeSettings) -> None:
    with Catalog(settings) as catalog:
        catalog.tables.create_table("p.w.ns.t", rows([1]))
        catalog.policies.set_policy("p.w.ns.t", {"schema_evolution": "add_columns"})
        before = registry(catalog)
        grown = wide(4000).append_column("id", pa.array([2], pa.int64()))
        grown = grown.append_column("tag", pa.array(["y"], pa.string()))
        with pytest.raises(RecordTooLarge) as err:
            catalog.tables.append("p.w.ns.t", grown.to_reader())
        assert "tbl/p/w/ns/t" in str(err.value)
        assert registry(catalog) == before
        assert ids_of(catalog.reads.open_table("p.w.ns.t")) == [1]
