"""Manifest listing: the settle's fast filter agrees with a full parse of ``_versions/``, on a
folder and on S3, where it does not list the history."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from lake_platform.engine.manifests import (
    canonical_manifests,
    final_manifest_name,
    manifests_above,
    names_not_older,
)
from lake_platform.engine.storage import s3_client
from lake_platform.settings import load_settings
from lake_platform_tests.s3_server import S3Endpoint


#: Names in the ``location`` fixture's ``_versions/``.
def fixture_names() -> list[str]:
    names = [final_manifest_name(v) for v in (1, 2, 3, 5, 9, 10, 11, 100)]
    names += [
        f"{final_manifest_name(12)}-3f2a",  # a staging manifest: not canonical
        "7.manifest",  # V1 naming
        f"{final_manifest_name(4)}#1",  # Lance's temporary copy
        "latest_version_hint.json",
        # Names the fast skip of older V2 versions must not misread:
        "1844674407370955161a.manifest",  # a 20-character stem, not all digits: no manifest
        "5.manifest-abcdefghi.manifest",  # a V1 staging manifest with ".manifest" at 20
        "50.manifest",  # V1, above most of the V2 versions, sorts among their stems
        "99999999999999999999.manifest",  # a 20-digit stem above u64::MAX: no version
    ]
    return names


@pytest.fixture(params=["local", "s3"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, dict[str, str] | None]]:
    """A table location holding ``fixture_names()`` in ``_versions/``, and its storage options."""
    if request.param == "local":
        versions = tmp_path / "_versions"
        versions.mkdir()
        for name in fixture_names():
            (versions / name).touch()
        yield str(tmp_path), None
        return
    s3: S3Endpoint = request.getfixturevalue("s3")
    prefix = request.getfixturevalue("s3_prefix")
    yield put_versions(s3, prefix, fixture_names()), s3_options(s3)


def s3_options(s3: S3Endpoint) -> dict[str, str]:
    return load_settings(**s3.lake_settings()).storage_options("s3://")


@contextmanager
def list_requests(options: dict[str, str]) -> Iterator[list[int]]:
    """The ListObjectsV2 requests the shared client makes inside the block (one entry each)."""
    made: list[int] = []
    client = s3_client(options)

    def count(**_: object) -> None:
        made.append(1)

    client.meta.events.register("before-call.s3.ListObjectsV2", count)
    try:
        yield made
    finally:
        client.meta.events.unregister("before-call.s3.ListObjectsV2", count)


def put_versions(s3: S3Endpoint, prefix: str, names: list[str]) -> str:
    client = s3.client()
    for name in names:
        client.put_object(Bucket=s3.bucket, Key=f"{prefix}/t.lance/_versions/{name}", Body=b"")
    client.put_object(Bucket=s3.bucket, Key=f"{prefix}/t.lance/_versions/nested/x.manifest", Body=b"")
    return f"s3://{s3.bucket}/{prefix}/t.lance"


@pytest.mark.parametrize("page", [1000, 3])
@pytest.mark.parametrize("current", [0, 1, 3, 6, 7, 9, 11, 12, 49, 50, 100, 101])
def test_manifests_above_agrees_with_a_full_parse(
    location: tuple[str, dict[str, str] | None], current: int, page: int
) -> None:
    """On S3 also with pages of 3 keys: the jump past the older versions and the pages after
    it lose no name."""
    where, options = location
    full = canonical_manifests(where, options)
    names = names_not_older(where, current, options, s3_keys=(page, page))
    above, has_current = manifests_above(where, current, options, names=names)
    assert above == sorted(p for v, paths in full.items() if v > current for p in paths)
    assert has_current == (current in full)


def test_on_s3_a_long_history_is_not_listed_by_a_writer(s3: S3Endpoint, s3_prefix: str) -> None:
    """400 versions kept, listed 10 keys a page: the settle's listing asks for the page with
    the newest versions and the names after the V2 block, never the 40 pages of history."""
    current = 400
    names = [final_manifest_name(v) for v in range(1, current + 3)]  # two written around the registry
    names += ["7.manifest", "1.manifest", f"{final_manifest_name(current + 1)}-3f2a"]
    location = put_versions(s3, s3_prefix, names)
    options = s3_options(s3)
    with list_requests(options) as made:
        names = names_not_older(location, current, options, s3_keys=(10, 10))
    above, has_current = manifests_above(location, current, options, names=names)
    assert above == sorted(f"_versions/{final_manifest_name(v)}" for v in (current + 1, current + 2))
    assert has_current
    assert len(made) == 2  # the newest page, then the names after the V2 block
    assert canonical_manifests(location, options).keys() == set(range(1, current + 3)) | {7, 1}


def test_a_short_history_on_s3_is_listed_by_pyarrow_until_it_grows(s3: S3Endpoint, s3_prefix: str) -> None:
    """One page of names: botocore's request costs more than pyarrow's, so once a listing was
    whole, the next one is pyarrow's; once that one finds more than a first page, botocore's
    listing (which skips the history) takes over again. The same names either way."""
    location = put_versions(s3, s3_prefix, [final_manifest_name(v) for v in (1, 2, 3)])
    options = s3_options(s3)

    def listed(current: int) -> tuple[tuple[list[str], bool], int]:
        with list_requests(options) as made:
            names = names_not_older(location, current, options, s3_keys=(5, 1000))
        return manifests_above(location, current, options, names=names), len(made)

    assert listed(2) == (([f"_versions/{final_manifest_name(3)}"], True), 1)  # botocore: whole
    assert listed(2) == (([f"_versions/{final_manifest_name(3)}"], True), 0)  # pyarrow
    put_versions(s3, s3_prefix, [final_manifest_name(v) for v in range(4, 10)])
    assert listed(8) == (([f"_versions/{final_manifest_name(9)}"], True), 0)  # pyarrow: grown
    assert listed(8) == (([f"_versions/{final_manifest_name(9)}"], True), 2)  # skips the history


def test_an_s3_express_directory_bucket_is_listed_whole(s3: S3Endpoint) -> None:
    """Directory buckets list in no order (and take no ``StartAfter``): the jump past the older
    versions would lose names, so they get pyarrow's full listing. (SeaweedFS has no directory
    buckets: listing one that does not exist is refused, in pyarrow's words.)"""
    options = s3_options(s3)
    with list_requests(options) as made:
        with pytest.raises(OSError, match="When listing objects under key 'p/t.lance/_versions/'"):
            manifests_above("s3://lake--use1-az4--x-s3/p/t.lance", 3, options)
        assert made == []
        assert manifests_above(f"s3://{s3.bucket}/p/t.lance", 3, options) == ([], False)
        assert made == [1]  # a general-purpose bucket's listing goes through the client


def test_a_missing_versions_folder_has_nothing(tmp_path: Path, s3: S3Endpoint, s3_prefix: str) -> None:
    assert manifests_above(str(tmp_path / "nope"), 3) == ([], False)
    assert manifests_above(f"s3://{s3.bucket}/{s3_prefix}/nope.lance", 3, s3_options(s3)) == ([], False)


def test_an_s3_listing_failure_is_an_os_error_naming_the_folder(s3: S3Endpoint, s3_prefix: str) -> None:
    options = {**s3_options(s3), "aws_secret_access_key": "wrong"}
    with pytest.raises(OSError, match=f"listing s3://{s3.bucket}/{s3_prefix}/t.lance/_versions/"):
        manifests_above(f"s3://{s3.bucket}/{s3_prefix}/t.lance", 3, options)


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
