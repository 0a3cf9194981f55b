"""Manifest listing: the settle's fast filter agrees with a full parse of ``_versions/``."""

from __future__ import annotations

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
    ]
    for name in names:
        (versions / name).touch()
    return str(tmp_path)


@pytest.mark.parametrize("current", [0, 1, 3, 6, 7, 9, 11, 12, 100, 101])
def test_manifests_above_agrees_with_a_full_parse(location: str, current: int) -> None:
    full = canonical_manifests(location)
    above, has_current = manifests_above(location, current)
    assert above == sorted(p for v, paths in full.items() if v > current for p in paths)
    assert has_current == (current in full)


def test_a_missing_versions_folder_has_nothing(tmp_path: Path) -> None:
    assert manifests_above(str(tmp_path / "nope"), 3) == ([], False)
