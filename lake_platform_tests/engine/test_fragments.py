"""A version restricted to some of its fragments reads exactly their rows (deletions applied)
and nothing is written; the manifest edit keeps every other field."""

from __future__ import annotations

from pathlib import Path

import lance
import pyarrow as pa
import pytest

from lake_platform.engine.fragments import fragment_sizes, keep_fragments, restricted
from lake_platform.errors import InvalidTableState


def test_restricted_reads_exactly_its_fragments(tmp_path: Path) -> None:
    n = 1000
    ds = lance.write_dataset(
        pa.table({"id": pa.array(range(n), pa.int64())}), tmp_path / "d", max_rows_per_file=200
    )
    ds.delete("id % 10 = 0")
    ds = lance.dataset(tmp_path / "d")
    sizes = fragment_sizes(ds)
    assert [s.id for s in sizes] == [0, 1, 2, 3, 4]
    assert [s.rows for s in sizes] == [180] * 5 and all(s.bytes > 0 for s in sizes)
    files_before = sorted(p.name for p in (tmp_path / "d").rglob("*"))
    seen: list[int] = []
    for keep in ({0, 3}, {1}, {2, 4}):
        part = restricted(ds, keep, None)
        assert part.version == ds.version
        ids = part.to_table().column("id").to_pylist()
        assert {i // 200 for i in ids} == keep and not any(i % 10 == 0 for i in ids)
        seen += ids
    assert sorted(seen) == sorted(ds.to_table().column("id").to_pylist())
    assert sorted(p.name for p in (tmp_path / "d").rglob("*")) == files_before  # nothing written
    assert restricted(ds, set(), None).count_rows() == 0


def test_keep_fragments_keeps_other_fields(tmp_path: Path) -> None:
    ds = lance.write_dataset(pa.table({"id": pa.array(range(10))}), tmp_path / "d", max_rows_per_file=5)
    manifest = ds.__getstate__()[3]
    assert keep_fragments(manifest, frozenset({0, 1})) == manifest
    smaller = keep_fragments(manifest, frozenset({1}))
    assert len(smaller) < len(manifest)
    with pytest.raises(InvalidTableState):
        keep_fragments(manifest[:-3] + b"\xff\xff", frozenset({0}))
