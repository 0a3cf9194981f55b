"""Registrations: a Lance dataset is adopted only where the catalog could have placed the
table, as a new incarnation at its newest version; every refusal changes nothing."""

from __future__ import annotations

import lance
import pytest

from lake_platform.errors import InvalidInput, TableAlreadyExists
from lake_platform_tests.catalog.conftest import Lake, ids_of, rows, state, storage_options_of

T = "p.w.ns.adopted"


def written(lake: Lake, name: str, ids: list[int]) -> str:
    where = f"{lake.root.rstrip('/')}/{name}"
    options = storage_options_of(lake)
    lance.write_dataset(rows(ids[:1]), where, mode="create", storage_options=options)
    lance.write_dataset(rows(ids[1:]), where, mode="append", storage_options=options)
    return where


def test_register_adopts_the_newest_version(lake: Lake) -> None:
    where = written(lake, "imports/sales.lance", [1, 2])
    result = lake.catalog.registrations.register_table(T, where)
    snap = lake.catalog.reads.open_table(T)
    assert result.to_version == 2 and snap.record.location == where and ids_of(snap) == [1, 2]
    lake.catalog.tables.append(T, rows([3]))
    assert ids_of(lake.catalog.reads.open_table(T)) == [1, 2, 3]
    assert lake.catalog.reads.commit(T, result.commit_id).operation == "register"


def test_refusals_change_nothing(lake: Lake) -> None:
    lake.catalog.tables.create_table("p.w.ns.t", rows([1]))
    inside_table = lake.catalog.reads.open_table("p.w.ns.t").record.location
    good = written(lake, "mine.lance", [1, 2])
    before = state(lake)
    for location in [lake.root, inside_table, inside_table + "/data", lake.root + "/nothing.lance"]:
        with pytest.raises(InvalidInput):
            lake.catalog.registrations.register_table(T, location)
    with pytest.raises(TableAlreadyExists):
        lake.catalog.registrations.register_table("p.w.ns.t", good)
    assert state(lake) == before


def test_a_folder_where_the_catalog_would_place_tables_is_not_adopted(lake: Lake) -> None:
    """``<root>/ns2`` (or ``<root>/ns/sub``) is where namespace ``ns2``'s tables will be put: adopted,
    a later table of ``ns2`` lay inside it, and purging the adopted table deleted that table's
    files (its version 1 then 'registered but its manifest is missing'). A folder with a name no
    namespace can have (``sales.lance``, ``my-data``) is adopted as before."""
    for folder in ["ns2", "ns/sub"]:
        where = written(lake, folder, [1, 2])
        before = state(lake)
        with pytest.raises(InvalidInput, match="namespace"):
            lake.catalog.registrations.register_table(T, where)
        assert state(lake) == before
    assert lake.catalog.registrations.register_table(T, written(lake, "my-data", [1, 2])).to_version == 2
