"""Policy-driven index maintenance: what the effective policy names is built (another kind is
rebuilt), whatever lags is refreshed, nothing is dropped, and the winning record decides alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.errors import InvalidInput
from lake_platform.maintenance.indexes import build_indexes, lag_report, plan
from lake_platform_tests.maintenance.helpers import make_lake, rows

T = "p.w.ns.t"


@pytest.fixture
def catalog(tmp_path: Path) -> Catalog:
    catalog = make_lake(tmp_path / "home")
    catalog.tables.create_table(T, rows(0, 50).to_reader())
    return catalog


def kinds(catalog: Catalog) -> dict[str, str]:
    return {i.name: i.kind for i in catalog.indexes.list_indexes(T)}


def test_another_kind_is_rebuilt_and_ad_hoc_indexes_are_refreshed_not_dropped(catalog: Catalog) -> None:
    catalog.indexes.create_index(T, "id", "btree")
    catalog.indexes.create_index(T, "name", "bitmap")  # ad hoc: the policy will not name it
    catalog.policies.set_policy(T, {"indexes": "id:zonemap"})
    catalog.tables.append(T, rows(50, 10).to_reader())
    todo = plan(catalog, T)
    assert todo.build == [("id", "ZONEMAP")] and todo.refresh == ["name_idx"] and todo.source == T
    done = build_indexes(catalog, T, actor="tester", run_id="r9")
    assert (done.status, done.built, done.refreshed) == ("committed", ["id_idx"], ["name_idx"])
    assert kinds(catalog) == {"id_idx": "ZONEMAP", "name_idx": "BITMAP"}
    assert not any(i.lagging for i in catalog.indexes.list_indexes(T))
    entries = [e for e in catalog.reads.history(T) if e.run_id == "r9"]
    assert [(e.operation, e.actor) for e in entries] == [
        ("index create", "tester"),
        ("index refresh", "tester"),
    ]
    again = build_indexes(catalog, T)
    assert again.status == "nothing-to-do" and again.commit_ids == []


def test_the_most_specific_record_wins_whole(catalog: Catalog) -> None:
    catalog.policies.set_policy("p.w.ns", {"indexes": "id:btree"})
    catalog.policies.set_policy(T, {"retain_versions": 3})  # a table record without indexes: none apply
    assert plan(catalog, T).build == []
    report = lag_report(catalog, T)
    assert report["missing"] == {} and report["policy_source"] == T
    catalog.policies.delete_policy(T)
    assert plan(catalog, T).build == [("id", "BTREE")]
    assert lag_report(catalog, T)["missing"] == {"id": "BTREE"}
    assert build_indexes(catalog, T).built == ["id_idx"]


@pytest.mark.parametrize("value", ["id", "id:hash", "id:btree,id:bitmap", ":btree", 42])
def test_a_bad_indexes_value_is_refused_and_changes_nothing(catalog: Catalog, value: object) -> None:
    with pytest.raises(InvalidInput, match="indexes"):
        catalog.policies.set_policy(T, {"indexes": value})
    assert catalog.policies.effective_policy(T).source is None


def test_columns_the_kind_cannot_index_or_the_table_lacks_are_skipped_with_the_reason(
    catalog: Catalog,
) -> None:
    """A namespace's policy names columns of some of its tables, of some types: the rest is
    built, and the check reports why a column was left (no asset run fails on it)."""
    catalog.policies.set_policy("p.w.ns", {"indexes": "id:inverted,name:ngram,gone:btree"})
    todo = plan(catalog, T)
    assert todo.build == [("name", "NGRAM")]
    assert todo.skipped == {
        "id": "inverted indexes take strings or lists of strings, not int64",
        "gone": "no such column",
    }
    done = build_indexes(catalog, T)
    assert (done.status, done.built, done.skipped) == ("committed", ["name_idx"], todo.skipped)
    assert kinds(catalog) == {"name_idx": "NGRAM"}
    assert lag_report(catalog, T)["skipped"] == todo.skipped
