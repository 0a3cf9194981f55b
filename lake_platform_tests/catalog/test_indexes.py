"""Scalar indexes: each build, refresh and drop is a fenced registry commit; results with and
without an index are identical (equality, range, IN, NULL) after appends, deletes and
compaction; compaction keeps indexes valid; cleanup never takes what an index still needs."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pyarrow as pa
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.catalog.provenance import Provenance
from lake_platform.engine import indexes as engine_indexes
from lake_platform.engine import lance_engine as engine
from lake_platform.errors import (
    InvalidInput,
    LeaseExpired,
    TableColumnNotFound,
    TableIndexAlreadyExists,
    TableIndexNotFound,
)
from lake_platform.settings import LakeSettings
from lake_platform_tests.catalog.conftest import Lake
from lake_platform_tests.catalog.faults import Background, Pause
from lake_platform_tests.doubles import ManualClock

T = "p.w.ns.t"

PREDICATES = [
    "id = 4242",
    "id = 999999",  # in no fragment
    "id >= 1990 AND id < 2015",
    "id IN (3, 1500, 2999, 12345)",
    "s = 'v3'",
    "s IS NULL",
    "s IS NOT NULL AND k = 7",
    "k BETWEEN 2 AND 4",
    "k IN (0, 9)",
]


def batch(start: int, stop: int) -> pa.RecordBatchReader:
    ids = list(range(start, stop))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "k": pa.array([i // 300 for i in ids], pa.int32()),
            "s": pa.array([None if i % 11 == 0 else f"v{i % 7}" for i in ids], pa.string()),
        }
    ).to_reader()


@pytest.fixture
def table(lake: Lake) -> Iterator[Lake]:
    lake.catalog.tables.create_table(T, batch(0, 1000))
    lake.catalog.tables.append(T, batch(1000, 2000))
    lake.catalog.tables.append(T, batch(2000, 3000))
    yield lake


def quick_cleanup(settings: LakeSettings) -> LakeSettings:
    return settings.model_copy(update={"ticket_lifetime_seconds": 0.001, "reader_max_stale_seconds": 0.0})


def answers(catalog: Catalog, *, use_index: bool) -> dict[str, list[tuple[Any, ...]]]:
    ds = catalog.reads.open_table(T).dataset
    out = {}
    for predicate in PREDICATES:
        got = ds.to_table(filter=predicate, use_scalar_index=use_index, columns=["id", "k", "s"])
        out[predicate] = sorted(zip(*(got.column(c).to_pylist() for c in ("id", "k", "s")), strict=True))
    return out


def uses_index(catalog: Catalog, predicate: str) -> bool:
    return "ScalarIndexQuery" in catalog.reads.open_table(T).dataset.scanner(filter=predicate).explain_plan()


def indexed(catalog: Catalog) -> None:
    catalog.indexes.create_index(T, "id", "btree")
    catalog.indexes.create_index(T, "s", "bitmap")
    catalog.indexes.create_index(T, "k", "zonemap")


def test_an_index_build_is_a_registry_commit_with_its_actor(table: Lake) -> None:
    catalog = table.catalog
    before = catalog.reads.open_table(T).version
    done = catalog.indexes.create_index(T, "id", "BTREE", by=Provenance(actor="alice", run_id="r1"))
    assert done.status == "committed" and done.version == before + 1
    assert catalog.reads.open_table(T).version == before + 1  # the registry moved, nothing else
    entry = catalog.reads.history(T)[-1]
    assert (entry.operation, entry.actor, entry.run_id) == ("index create", "alice", "r1")
    assert (entry.from_version, entry.to_version) == (before, before + 1)
    assert entry.detail == {"index": "id_idx", "column": "id", "kind": "BTREE"}
    (info,) = catalog.indexes.list_indexes(T)
    assert (info.name, info.column, info.kind, info.rows_indexed, info.lagging) == (
        "id_idx",
        "id",
        "BTREE",
        3000,
        False,
    )
    assert uses_index(catalog, "id = 5")
    # The version before the build has no index: older snapshots are untouched.
    assert engine_indexes.list_indexes(catalog.reads.open_table(T, before).dataset) == []


def test_bad_index_requests_are_typed_and_change_nothing(table: Lake) -> None:
    catalog = table.catalog
    catalog.indexes.create_index(T, "id", "btree")
    version = catalog.reads.open_table(T).version
    with pytest.raises(InvalidInput, match="unknown index kind"):
        catalog.indexes.create_index(T, "id", "hash")
    with pytest.raises(TableColumnNotFound, match="no column 'nope'"):
        catalog.indexes.create_index(T, "nope", "btree")
    # a kind Lance does not build on the column's type: said before any work, not INTERNAL
    with pytest.raises(
        InvalidInput, match="column 'k': inverted indexes take strings or lists of strings, not int32"
    ):
        catalog.indexes.create_index(T, "k", "inverted")
    with pytest.raises(InvalidInput, match="ngram indexes take strings, not int64"):
        catalog.indexes.create_index(T, "id", "ngram", replace=True)
    with pytest.raises(TableIndexAlreadyExists, match="id_idx"):
        catalog.indexes.create_index(T, "id", "bitmap")
    with pytest.raises(TableIndexNotFound):
        catalog.indexes.drop_index(T, "k")
    with pytest.raises(TableIndexNotFound):
        catalog.indexes.refresh_indexes(T, ["k_idx"])
    with pytest.raises(InvalidInput):
        catalog.indexes.create_index("p.w.ns.Bad", "id", "btree")
    # full-text options: Lance's values only, on an inverted index only, checked before any work
    with pytest.raises(InvalidInput, match="language 'Klingon' is not one Lance takes: use one of Arabic"):
        catalog.indexes.create_index(T, "s", "inverted", options={"language": "Klingon"})
    with pytest.raises(InvalidInput, match="max_token_length must be an integer from 0"):
        catalog.indexes.create_index(T, "s", "fts", options={"max_token_length": -1})
    with pytest.raises(InvalidInput, match="stem applies to inverted .* not to btree"):
        catalog.indexes.create_index(T, "k", "btree", options={"stem": False})
    assert catalog.reads.open_table(T).version == version
    assert [e.operation for e in catalog.reads.history(T)][-1] == "index create"
    # replace=True rebuilds as another kind, as one more commit.
    catalog.indexes.create_index(T, "id", "bitmap", replace=True)
    assert [(i.name, i.kind) for i in catalog.indexes.list_indexes(T)] == [("id_idx", "BITMAP")]


def test_results_match_without_the_index_after_appends_deletes_and_compaction(table: Lake) -> None:
    catalog = table.catalog
    plain = answers(catalog, use_index=False)
    indexed(catalog)
    assert uses_index(catalog, "id = 4242") and uses_index(catalog, "s = 'v3'")
    assert answers(catalog, use_index=True) == plain

    # Appends: the new rows are not in the index, and are still found (scanned).
    catalog.tables.append(T, batch(3000, 4500))
    lagging = {i.name: i for i in catalog.indexes.list_indexes(T)}
    assert all(i.lagging and i.rows_unindexed == 1500 for i in lagging.values())
    after_append = answers(catalog, use_index=False)
    assert after_append["id = 4242"] == [(4242, 14, "v0")]
    assert answers(catalog, use_index=True) == after_append

    # Deletes: deleted rows are gone with and without the index.
    catalog.tables.delete_rows(T, "id % 5 = 0 OR id = 4242")
    after_delete = answers(catalog, use_index=False)
    assert after_delete["id = 4242"] == []
    assert answers(catalog, use_index=True) == after_delete

    # Compaction rewrites the fragments; Lance remaps the indexes in the same commit.
    done = catalog.versions.compact(T)
    assert done.status == "committed"
    # A compaction retried under its commit id recognizes its own Rewrite even when it remapped
    # indexes (pylance cannot decode that transaction; the engine copes).
    assert engine.is_rewrite(catalog.reads.open_table(T).dataset, done.version)
    assert not engine.is_rewrite(catalog.reads.open_table(T).dataset, done.version - 1)
    assert uses_index(catalog, "id = 4243")
    assert answers(catalog, use_index=True) == after_delete

    # A refresh folds the appended tail in; still the same answers.
    refreshed = catalog.indexes.refresh_indexes(T)
    assert refreshed.status == "committed"
    assert not any(i.lagging for i in catalog.indexes.list_indexes(T))
    assert answers(catalog, use_index=True) == after_delete
    assert catalog.indexes.refresh_indexes(T).status == "nothing-to-do"


def test_cleanup_keeps_what_the_indexes_need(table: Lake) -> None:
    """Lance keeps index files while any retained manifest names them; the catalog's cleanup
    passes Lance exactly the versions it took out of the registry, so an index built at a
    version that is later cleaned up keeps working (its files are the current version's)."""
    catalog = table.catalog
    catalog.indexes.create_index(T, "id", "btree")
    catalog.tables.append(T, batch(3000, 3100))
    catalog.versions.compact(T)
    catalog.indexes.refresh_indexes(T)
    expected = answers(catalog, use_index=False)
    cleaner = Catalog(quick_cleanup(table.settings))
    try:
        done = cleaner.versions.cleanup(T, retention=timedelta(0), retain_versions=1)
    finally:
        cleaner.close()
    assert done.status == "committed"
    # Every version before the current one is gone, including the one the index was built at.
    removed = done.detail["versions_removed"]
    assert isinstance(removed, list) and len(removed) == catalog.reads.open_table(T).version - 1
    (info,) = catalog.indexes.list_indexes(T)
    assert info.rows_indexed == 3100 and not info.lagging
    assert uses_index(catalog, "id = 3050")
    assert answers(catalog, use_index=True) == expected


def test_drop_index_is_a_commit_and_older_versions_keep_theirs(table: Lake) -> None:
    catalog = table.catalog
    catalog.indexes.create_index(T, "id", "btree")
    with_index = catalog.reads.open_table(T).version
    done = catalog.indexes.drop_index(T, "id", by=Provenance(actor="bob"))
    assert done.status == "committed" and done.version == with_index + 1
    assert catalog.indexes.list_indexes(T) == []
    assert catalog.reads.history(T)[-1].operation == "index drop"
    assert [i.name for i in engine_indexes.list_indexes(catalog.reads.open_table(T, with_index).dataset)] == [
        "id_idx"
    ]


def test_an_index_build_whose_lease_was_taken_over_cannot_commit(table: Lake) -> None:
    """The build stalls past its deadline; another writer takes the lease; the registry
    refuses the build's commit (the fence), and nothing is registered."""
    start = ManualClock()
    builder_clock = ManualClock(start.monotonic(), start.wall_ms())
    pause = Pause("index create:before-write")
    builder = Catalog(table.settings, clock=builder_clock, heartbeat=False, hook=pause)
    later = ManualClock(start.monotonic(), start.wall_ms())
    later.advance(table.settings.lease_ttl_seconds + 1)
    taker = Catalog(table.settings, clock=later, heartbeat=False)
    version = table.catalog.reads.open_table(T).version
    try:
        build = Background(lambda: builder.indexes.create_index(T, "id", "btree"))
        assert pause.reached.wait(30)
        incarnation = table.catalog.reads.open_table(T).record.incarnation
        taken = taker.gate.acquire(incarnation)
        pause.release()
        assert isinstance(build.error(), LeaseExpired)
        assert table.catalog.reads.open_table(T).version == version
        assert table.catalog.indexes.list_indexes(T) == []
        assert "index create" not in [e.operation for e in table.catalog.reads.history(T)]
        taker.gate.release(taken)
    finally:
        builder.close()
        taker.close()
