"""A table's schema from the command line: ``lake ingest`` of files that lack a nullable column
the table gained (filled with nulls under add_columns, issue 49); the refusal of one lacking a
non-nullable column."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from click.testing import CliRunner

from lake_platform.catalog.catalog import Catalog
from lake_platform.cli import cli
from lake_platform.settings import load_settings
from lake_platform_tests.cli.conftest import T, run

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])


def write(path: Path, ids: list[int], *, drop: str | None = None, **extra: list[object]) -> Path:
    data = pa.table([pa.array(ids, pa.int64()), [f"n{i}" for i in ids]], schema=SCHEMA)
    for name, values in extra.items():
        data = data.append_column(name, pa.array(values))
    pq.write_table(data.drop_columns([drop]) if drop else data, path)
    return str(path)  # type: ignore[return-value]


def rows() -> list[dict[str, object]]:
    with Catalog(load_settings()) as catalog:
        return catalog.reads.open_table(T).to_reader().read_all().sort_by("id").to_pylist()


def test_ingest_fills_a_missing_nullable_column_and_refuses_a_missing_required_one(
    lake: CliRunner, tmp_path: Path
) -> None:
    run(lake, "table", "create", T, "--from", write(tmp_path / "a.parquet", [1]))
    run(lake, "policy", "set", T, "schema_evolution=add_columns")
    run(lake, "ingest", T, write(tmp_path / "b.parquet", [2], bonus=[2.5]))
    described = run(lake, "table", "describe", T)
    assert [(c["name"], c["nullable"]) for c in described["schema"]] == [  # type: ignore[index]
        ("id", False),
        ("name", True),
        ("bonus", True),
    ]

    result = run(lake, "ingest", T, write(tmp_path / "old.parquet", [3]))  # an older producer
    assert result["to_version"] == result["from_version"] + 1  # type: ignore[index]
    assert [r["bonus"] for r in rows()] == [None, 2.5, None]
    log = run(lake, "table", "history", T)
    assert log[-1]["operation"] == "append" and log[-1]["detail"]["filled_columns"] == ["bonus"]  # type: ignore[index]

    version = run(lake, "table", "describe", T)["current_version"]  # type: ignore[index]
    refused = lake.invoke(cli, ["--json", "ingest", T, write(tmp_path / "no_id.parquet", [4], drop="id")])
    error = json.loads(refused.output)["error"]
    assert refused.exit_code != 0 and error["code"] == 20
    assert "missing non-nullable column(s) id" in error["message"]
    assert run(lake, "table", "describe", T)["current_version"] == version  # type: ignore[index]
    assert [r["id"] for r in rows()] == [1, 2, 3]


def test_strict_refuses_the_file_and_says_which_policy_would_fill(lake: CliRunner, tmp_path: Path) -> None:
    run(lake, "table", "create", T, "--from", write(tmp_path / "a.parquet", [1], bonus=[1.5]))
    refused = lake.invoke(cli, ["--json", "ingest", T, write(tmp_path / "old.parquet", [2])])
    error = json.loads(refused.output)["error"]
    assert error["code"] == 20 and "missing column(s) bonus" in error["message"]
    assert "add_columns or widen" in error["message"]
    assert [r["id"] for r in rows()] == [1]


# -- lake table repair --schema ---------------------------------------------------------------------


def forget_schema() -> None:
    """The registration as one written before schemas were stored."""
    from lake_platform.naming import TableName
    from lake_platform.registry import keys
    from lake_platform.registry.records import TableRecord, decode

    with Catalog(load_settings()) as catalog:
        item = catalog.store.get(keys.table(TableName.parse(T)))
        assert item is not None
        record = decode(TableRecord, item.value, item.key)
        catalog.store.compare_and_swap(
            item.key, item.revision, record.model_copy(update={"schema_ipc_b64": ""}).encode()
        )


def test_describe_names_the_repair_and_repair_schema_backfills(lake: CliRunner, tmp_path: Path) -> None:
    run(lake, "table", "create", T, "--from", write(tmp_path / "a.parquet", [1, 2]))
    forget_schema()
    text = lake.invoke(cli, ["table", "describe", T]).output
    assert f"none stored (registered before schemas were stored): lake table repair --schema {T}" in text
    repaired = run(lake, "table", "repair", "--schema", T)
    assert repaired == {"table": T, "version": 1, "repaired": True, "columns": ["id", "name"]}
    described = run(lake, "table", "describe", T)
    assert [(c["name"], c["nullable"]) for c in described["schema"]] == [("id", False), ("name", True)]  # type: ignore[index]
    assert "repair --schema" not in lake.invoke(cli, ["table", "describe", T]).output
    again = lake.invoke(cli, ["table", "repair", "--schema", T]).output
    assert again.strip() == f"{T}: its schema is stored already; nothing to repair"
    assert run(lake, "table", "history", T)[-1]["operation"] == "repair schema"  # type: ignore[index]


def test_repair_schema_of_an_unknown_table_is_a_typed_error(lake: CliRunner) -> None:
    result = lake.invoke(cli, ["--json", "table", "repair", "--schema", "p.w.ns.nope"])
    assert result.exit_code != 0 and json.loads(result.output)["error"]["code"] == 4
