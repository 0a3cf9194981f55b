"""The operation a manifest commits, read from the transaction Lance wrote with it."""

from __future__ import annotations

from pathlib import Path

import lance
import pyarrow as pa
import pytest

from lake_platform.engine.manifests import final_manifest_name
from lake_platform.engine.transactions import (
    StagedChange,
    change_of,
    staged_change,
)
from lake_platform_tests.s3_server import S3Endpoint


def operations(uri: str, storage: dict[str, str] | None = None) -> list[str | None]:
    root = uri.removeprefix("s3://").split("/", 1)[1] if uri.startswith("s3://") else uri.lstrip("/")
    latest = lance.dataset(uri, storage_options=storage).version
    return [
        staged_change(uri, f"{root}/_versions/{final_manifest_name(v)}", storage).operation
        for v in range(1, latest + 1)
    ]


def every_kind(uri: str, storage: dict[str, str] | None = None) -> None:
    opts = {"storage_options": storage} if storage else {}
    ds = lance.write_dataset(pa.table({"a": [1], "b": [2]}), uri, **opts)
    ds = lance.write_dataset(pa.table({"a": [3], "b": [4]}), uri, mode="append", **opts)
    ds.add_columns({"c": "a * 2"})
    lance.dataset(uri, **opts).drop_columns(["b"])
    lance.dataset(uri, **opts).alter_columns({"path": "c", "name": "cc"})
    lance.dataset(uri, **opts).delete("a = 1")
    lance.write_dataset(pa.table({"z": [1]}), uri, mode="overwrite", **opts)


KINDS = ["overwrite", "append", "merge", "project", "project", "delete", "overwrite"]


def test_every_kind_of_commit_is_told_apart(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    every_kind(uri)
    assert operations(uri) == KINDS


def test_on_s3(s3: S3Endpoint, s3_prefix: str) -> None:
    from lake_platform.settings import load_settings

    uri = f"s3://{s3.bucket}/{s3_prefix}/t.lance"
    storage = load_settings(**s3.lake_settings()).storage_options(uri)
    every_kind(uri, storage)
    assert operations(uri, storage) == KINDS
    # The append's figures, read over S3, are its fragment's.
    root = uri.removeprefix("s3://").split("/", 1)[1]
    change = staged_change(uri, f"{root}/_versions/{final_manifest_name(2)}", storage)
    [frag] = lance.dataset(uri, version=2, storage_options=storage).get_fragments()[1:]
    sizes = [f.file_size_bytes for f in frag.metadata.files]
    assert (change.rows_added, change.files_added, change.bytes_added) == (1, len(sizes), sum(sizes))


def test_an_append_and_an_overwrite_say_what_they_add(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    root = uri.lstrip("/")
    lance.write_dataset(pa.table({"a": list(range(100))}), uri)
    lance.write_dataset(pa.table({"a": list(range(70))}), uri, mode="append", max_rows_per_file=30)
    ds = lance.write_dataset(pa.table({"a": [1, 2, 3]}), uri, mode="overwrite")
    ds.delete("a = 1")
    changes = [staged_change(uri, f"{root}/_versions/{final_manifest_name(v)}") for v in (1, 2, 3, 4)]
    for version, change in zip((1, 2, 3), changes, strict=False):
        frags = lance.dataset(uri, version=version).get_fragments()
        if version == 2:  # the append's own fragments: those the first version did not have
            frags = frags[1:]
        files = [f for frag in frags for f in frag.metadata.files]
        assert (change.rows_added, change.files_added, change.bytes_added) == (
            sum(frag.metadata.physical_rows for frag in frags),
            len(files),
            sum(f.file_size_bytes for f in files),
        )
    assert [c.operation for c in changes] == ["overwrite", "append", "overwrite", "delete"]
    assert [(c.rows_added, c.files_added) for c in changes] == [(100, 1), (70, 3), (3, 1), (0, 0)]
    assert changes[1].bytes_added > 0
    # The bytes a caller already read give the same answer without another read of the file.
    name = final_manifest_name(2)
    raw = (tmp_path / "t.lance" / "_versions" / name).read_bytes()
    assert staged_change(uri, f"{root}/_versions/{name}", raw=raw) == changes[1]


def test_what_is_not_a_transaction_is_a_value_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a Lance protobuf message"):
        change_of(b"\xff\xff\xff")
    assert change_of(b"") == StagedChange(None)  # a transaction naming no operation known here
    bogus = tmp_path / "t.lance" / "_versions"
    bogus.mkdir(parents=True)
    (bogus / "1.manifest").write_bytes(b"not a manifest")
    with pytest.raises(ValueError, match="not a Lance manifest"):
        staged_change(str(tmp_path / "t.lance"), f"{str(tmp_path).lstrip('/')}/t.lance/_versions/1.manifest")
