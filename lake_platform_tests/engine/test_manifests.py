"""Manifest listing: the settle's fast filter agrees with a full parse of ``_versions/``."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from lake_platform.engine.manifests import _final_manifest_name, canonical_manifests, manifests_above


@pytest.fixture
def location(tmp_path: Path) -> str:
    versions = tmp_path / "_versions"
    versions.mkdir()
    names = [_final_manifest_name(v) for v in (1, 2, 3, 5, 9, 10, 11, 100)]
    names += [
        f"{_final_manifest_name(12)}-3f2a",  # a staging manifest: not canonical
        "7.manifest",  # V1 naming
        f"{_final_manifest_name(4)}#1",  # Lance's temporary copy
        "latest_version_hint.json",
        # Names the fast skip of older V2 versions must not misread:
        "1844674407370955161a.manifest",  # a 20-character stem, not all digits: no manifest
        "5.manifest-abcdefghi.manifest",  # a V1 staging manifest with ".manifest" at 20
        "50.manifest",  # V1, above most of the V2 versions, sorts among their stems
        "99999999999999999999.manifest",  # a 20-digit stem above u64::MAX: no version
    ]
    for name in names:
        (versions / name).touch()
    return str(tmp_path)


@pytest.mark.parametrize("current", [0, 1, 3, 6, 7, 9, 11, 12, 49, 50, 100, 101])
def test_manifests_above_agrees_with_a_full_parse(location: str, current: int) -> None:
    full = canonical_manifests(location)
    above, has_current = manifests_above(location, current)
    assert above == sorted(p for v, paths in full.items() if v > current for p in paths)
    assert has_current == (current in full)


def test_a_missing_versions_folder_has_nothing(tmp_path: Path) -> None:
    assert manifests_above(str(tmp_path / "nope"), 3) == ([], False)


def test_manifest_schema_reads_a_staged_or_final_manifest_without_opening(tmp_path: Path) -> None:
    import lance
    import pyarrow as pa

    from lake_platform.engine import lance_engine as engine

    uri = str(tmp_path / "t.lance")
    lance.write_dataset(pa.table({"a": [1]}), uri)
    ds = lance.write_dataset(pa.table({"a": [2]}), uri, mode="append")
    ds.add_columns({"b": "a * 2"})
    names = sorted(os.listdir(tmp_path / "t.lance" / "_versions"))
    newest = f"{uri.lstrip('/')}/_versions/{names[0]}"  # V2 names sort newest first
    assert engine.manifest_schema(uri, newest).names == ["a", "b"]
    staged = newest.replace(".manifest", ".manifest-0e5c3a1f")
    shutil.copy("/" + newest, "/" + staged)  # a staging manifest is the same bytes
    assert engine.manifest_schema(uri, staged) == lance.dataset(uri).schema
    bogus = tmp_path / "t.lance" / "_versions" / "1.manifest-x"
    bogus.write_bytes(b"not a manifest at all")
    with pytest.raises(ValueError):
        engine.manifest_schema(uri, f"{uri.lstrip('/')}/_versions/1.manifest-x")
