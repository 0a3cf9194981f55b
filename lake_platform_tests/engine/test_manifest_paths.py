"""What a manifest references, read from its bytes: a table's own manifests name only files
under it; a shallow clone's name its source as a base path, and its data files, deletion files
and indexes point there by id."""

from __future__ import annotations

import os
from pathlib import Path

import lance
import pyarrow as pa
import pytest

from lake_platform.engine.manifest_paths import manifest_paths


def _manifests(table: Path) -> list[Path]:
    return sorted(p for p in (table / "_versions").iterdir() if p.name.endswith(".manifest"))


def test_a_tables_own_manifests_reference_only_its_files(tmp_path: Path) -> None:
    ds = lance.write_dataset(pa.table({"a": list(range(10))}), str(tmp_path / "t.lance"))
    ds.delete("a < 2")
    ds.create_scalar_index("a", "BTREE")
    data = {f.name for f in (tmp_path / "t.lance" / "data").iterdir()}
    for manifest in _manifests(tmp_path / "t.lance"):
        found = manifest_paths(manifest.read_bytes(), str(manifest))
        assert found.base_paths == [] and found.based == []
        assert set(found.data_files) == data


def test_a_shallow_clone_names_its_source_as_a_base_path(tmp_path: Path) -> None:
    source = lance.write_dataset(pa.table({"a": list(range(10))}), str(tmp_path / "src.lance"))
    source.delete("a < 2")
    source.create_scalar_index("a", "BTREE")
    source.shallow_clone(str(tmp_path / "clone.lance"), source.version)
    (manifest,) = _manifests(tmp_path / "clone.lance")
    found = manifest_paths(manifest.read_bytes(), str(manifest))
    assert [path for _, path in found.base_paths] == [os.fspath(tmp_path / "src.lance")]
    (base_id,) = {i for i, _ in found.base_paths}
    kinds = sorted(what.split(" ")[0] for what, i in found.based if i == base_id)
    assert kinds == ["data", "index", "the"]  # the data file, the index, the deletion file


def test_bytes_that_are_no_manifest_are_refused() -> None:
    with pytest.raises(ValueError, match="not a Lance manifest"):
        manifest_paths(b"not a manifest at all", "x.manifest")
