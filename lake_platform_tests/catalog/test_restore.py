"""Restores: a new version equal to an older registered one, one logged commit; a version the
registry does not hold, or a reader, changes nothing."""

from __future__ import annotations

import pytest

from lake_platform.catalog.principals import Principal
from lake_platform.catalog.provenance import Provenance
from lake_platform.errors import PermissionDenied, TableVersionNotFound
from lake_platform_tests.catalog.conftest import Lake, ids_of, rows, state

T = "p.w.ns.t"


def test_restore_makes_the_old_content_current(lake: Lake) -> None:
    lake.catalog.tables.create_table(T, rows([1, 2]))
    lake.catalog.tables.append(T, rows([3]))
    lake.catalog.alter.add_column(T, "extra", "int32")
    result = lake.catalog.restores.restore_table(T, 1)
    assert (result.from_version, result.to_version) == (3, 4)
    snap = lake.catalog.reads.open_table(T)
    assert ids_of(snap) == [1, 2] and snap.schema.names == ["id", "tag"]
    assert lake.catalog.schemas.table_schema(T).names == ["id", "tag"]  # the registry's schema too
    entry = lake.catalog.reads.commit(T, result.commit_id)
    assert entry is not None and (entry.operation, entry.detail) == ("restore", {"restored_version": 1})


def test_refusals_change_nothing(lake: Lake) -> None:
    lake.catalog.tables.create_table(T, rows([1]))
    lake.catalog.tables.append(T, rows([2]))
    before = state(lake)
    with pytest.raises(TableVersionNotFound):
        lake.catalog.restores.restore_table(T, 7)
    reader = Principal(name="r", kind="token", project="p", role="reader")
    with pytest.raises(PermissionDenied):
        lake.catalog.restores.restore_table(T, 1, by=Provenance(principal=reader))
    assert state(lake) == before
