"""Manifest schemas remembered by their bytes: never a schema other than the one a fresh open gives."""

from __future__ import annotations

from pathlib import Path

import lance
import pyarrow as pa
import pytest

from lake_platform.engine import lance_engine as engine
from lake_platform.engine.manifests import final_manifest_name
from lake_platform.engine.schemas import SchemaMemo, schema_key


def manifest_path(uri: str, version: int) -> str:
    return f"{uri.lstrip('/')}/_versions/{final_manifest_name(version)}"


def test_every_version_gives_the_schema_a_fresh_open_gives(tmp_path: Path) -> None:
    """Appends keep the schema; a new column, a renamed one, schema and field metadata each make
    a new one, and each version reads as exactly its own (metadata included)."""
    engine.MANIFEST_SCHEMAS.clear()
    uri = str(tmp_path / "t.lance")
    ds = lance.write_dataset(pa.table({"a": pa.array([1], pa.int64())}), uri)
    ds = lance.write_dataset(pa.table({"a": pa.array([2], pa.int64())}), uri, mode="append")
    ds.add_columns({"b": "a * 2"})
    ds = lance.dataset(uri)
    ds.alter_columns({"path": "b", "name": "c"})
    ds = lance.dataset(uri)
    ds.update_schema_metadata({"owner": "team-a"})
    ds = lance.dataset(uri)
    ds.update_field_metadata({"a": {"unit": "m"}})
    ds = lance.write_dataset(pa.table({"a": pa.array([3], pa.int64()), "c": [6]}), uri, mode="append")
    latest = lance.dataset(uri).version
    assert latest == 7
    seen = []
    for version in range(1, latest + 1):
        got = engine.manifest_schema(uri, manifest_path(uri, version))
        want = lance.dataset(uri, version=version).schema
        assert got.equals(want, check_metadata=True), version
        seen.append(got)
    assert seen[0].equals(seen[1], check_metadata=True)  # the append kept the schema
    assert seen[1].names == ["a"] and seen[2].names == ["a", "b"] and seen[3].names == ["a", "c"]
    assert seen[4].metadata == {b"owner": b"team-a"}
    assert seen[5].field("a").metadata == {b"unit": b"m"}
    # Versions 1 and 2 (and 6 and 7) share a schema: read once each.
    assert engine.MANIFEST_SCHEMAS.misses == 5
    assert engine.MANIFEST_SCHEMAS.hits == 2


def test_the_key_is_the_schema_part_only(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(pa.table({"a": [1]}), uri)
    lance.write_dataset(pa.table({"a": [2]}), uri, mode="append")
    lance.write_dataset(pa.table({"a": [3], "s": ["x"]}), uri, mode="overwrite")
    one, two, three = (engine.read_manifest_message(uri, manifest_path(uri, v)) for v in (1, 2, 3))
    assert one != two and schema_key(one) == schema_key(two)  # other fragments, same schema
    assert schema_key(two) != schema_key(three)


def test_bytes_that_are_not_a_message_are_a_value_error() -> None:
    with pytest.raises(ValueError, match="not a Lance manifest"):
        schema_key(b"\xff\xff\xff\xff")


def test_the_memo_keeps_the_most_recently_used_within_its_capacity(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    messages = []
    for n, columns in enumerate((["a"], ["a", "b"], ["a", "b", "c"])):
        mode = "create" if n == 0 else "overwrite"
        lance.write_dataset(pa.table({c: [1] for c in columns}), uri, mode=mode)
        messages.append(engine.read_manifest_message(uri, manifest_path(uri, n + 1)))
    decoded: list[int] = []

    def decode(message: bytes) -> pa.Schema:
        decoded.append(messages.index(message))
        return pa.schema([(f"c{messages.index(message)}", pa.int8())])

    memo = SchemaMemo(capacity=2)
    for i in (0, 1, 0, 2, 0, 1):  # 2 evicts 1 (0 was used after it); then 1 is read again
        assert memo.schema(messages[i], decode).names == [f"c{i}"]
    assert decoded == [0, 1, 2, 1]
    assert (memo.hits, memo.misses) == (2, 4)
