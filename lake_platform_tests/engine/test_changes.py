"""A staged replace is one Lance ``Update``: the fragments the predicate empties are removed, the
ones it touches get deletion vectors, the others are left as they are, and every row given lands
(identical ones too), all in one version; a bad predicate raises before the data is read."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import lance
import pyarrow as pa
import pytest

from lake_platform.engine.changes import stage_replace


def frame(ids: list[int], day: int) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "day": pa.array([day] * len(ids), pa.int32())})


def test_stage_replace_is_one_version_that_keeps_every_row(tmp_path: Path) -> None:
    path = tmp_path / "d"
    lance.write_dataset(frame([1, 2], 1), path)  # fragment 0: all of day 1 (removed)
    lance.write_dataset(pa.concat_tables([frame([3], 1), frame([4], 2)]), path, mode="append")  # 1: half
    ds = lance.write_dataset(frame([5, 6], 3), path, mode="append")  # fragment 2: untouched
    staged = stage_replace(ds, "day = 1", frame([7, 7], 1).to_reader(), None)
    assert staged.deleted_rows == 3 and staged.read_version == ds.version == 3
    assert list(staged.operation.removed_fragment_ids) == [0]
    assert [f.id for f in staged.operation.updated_fragments] == [1]
    assert lance.dataset(path).version == 3  # nothing visible before the commit
    after = lance.LanceDataset.commit(path, staged.operation, read_version=staged.read_version)
    assert after.version == 4
    got = after.to_table()
    assert sorted(zip(got["id"].to_pylist(), got["day"].to_pylist(), strict=True)) == [
        (4, 2),
        (5, 3),
        (6, 3),
        (7, 1),
        (7, 1),
    ]


def test_stage_replace_with_a_bad_predicate_reads_no_data(tmp_path: Path) -> None:
    ds = lance.write_dataset(frame([1], 1), tmp_path / "d")
    read: list[int] = []

    def batches() -> Iterator[pa.RecordBatch]:
        read.append(1)
        yield from frame([2], 1).to_batches()

    data = pa.RecordBatchReader.from_batches(frame([], 1).schema, batches())
    with pytest.raises(Exception, match="nope"):
        stage_replace(ds, "nope = 1", data, None)
    assert read == [] and lance.dataset(tmp_path / "d").version == 1
