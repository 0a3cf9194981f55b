"""Renames: the registration moves (incarnation, location, versions, tags, policy) in one
registry transaction; refusals change nothing."""

from __future__ import annotations

import pytest

from lake_platform.errors import InvalidInput, NamespaceNotFound, Protected, TableAlreadyExists, TableNotFound
from lake_platform_tests.catalog.conftest import Lake, ids_of, rows, state

T = "p.w.ns.t"


def test_rename_moves_the_registration(lake: Lake) -> None:
    lake.catalog.tables.create_table(T, rows([1, 2]))
    lake.catalog.tags.create_tag(T, "v1", 1)
    lake.catalog.policies.set_policy(T, {"target_rows_per_fragment": 1000})
    lake.catalog.containers.create_namespace("p.w.other")
    before = lake.catalog.reads.open_table(T).record
    lake.catalog.renames.rename_table(T, "p.w.other.u")
    with pytest.raises(TableNotFound):
        lake.catalog.reads.open_table(T)
    after = lake.catalog.reads.open_table("p.w.other.u")
    assert (after.record.incarnation, after.record.location) == (before.incarnation, before.location)
    assert ids_of(after) == [1, 2] and lake.catalog.tags.list_tags("p.w.other.u") == {"v1": 1}
    moved = lake.catalog.policies.effective_policy("p.w.other.u")
    assert (moved.source, moved.policy.target_rows_per_fragment) == ("p.w.other.u", 1000)
    lake.catalog.tables.append("p.w.other.u", rows([3]))  # writes go on under the new name
    assert ids_of(lake.catalog.reads.open_table("p.w.other.u")) == [1, 2, 3]


def test_refusals_change_nothing(lake: Lake) -> None:
    lake.catalog.tables.create_table(T, rows([1]))
    lake.catalog.tables.create_table("p.w.ns.taken", rows([1]))
    before = state(lake)
    for target, error in [
        ("p.w.ns.taken", TableAlreadyExists),
        ("p.w.nope.t2", NamespaceNotFound),
        ("p.w2.ns.t2", InvalidInput),
        (T, InvalidInput),
    ]:
        with pytest.raises(error):
            lake.catalog.renames.rename_table(T, target)
    assert state(lake) == before
    lake.catalog.containers.set_protected(T, True)
    before = state(lake)
    with pytest.raises(Protected):
        lake.catalog.renames.rename_table(T, "p.w.ns.t2")
    assert state(lake) == before
