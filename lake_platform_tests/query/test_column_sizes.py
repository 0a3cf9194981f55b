"""How long a plan's column values are (``column_sizes``): from Lance's statistics for a table,
through the plan's aliases, projections, unions and VALUES for what is built from them."""

from __future__ import annotations

import base64
import random
from pathlib import Path

import lance
import pyarrow as pa
import pytest
from datafusion import SessionContext

from lake_platform.query.column_sizes import average_bytes, plan_column_bytes


def test_a_tables_column_sizes_come_from_lances_statistics_without_reading_its_data(tmp_path: Path) -> None:
    rows = 400
    rng = random.Random(0)
    strings = [base64.b64encode(rng.randbytes(1500)).decode() for _ in range(rows)]  # 2,000 bytes each
    table = pa.table({"n": pa.array(range(rows), pa.int64()), "s": strings, "p": [{"q": s} for s in strings]})
    lance.write_dataset(table, tmp_path / "t.lance", max_rows_per_file=100)
    dataset = lance.dataset(tmp_path / "t.lance")  # opened anew: nothing of it read yet
    dataset.io_stats_incremental()

    sizes = average_bytes(dataset, dataset.count_rows())

    read = dataset.io_stats_incremental().read_bytes
    assert read < 0.05 * rows * 2000 * 2  # the files' column metadata, not their pages
    assert sizes["n"] < 16
    assert 1500 < sizes["s"] < 2100  # bytes on disk: Lance compresses text (random text little)
    assert sizes["p"] == pytest.approx(sizes["s"], rel=0.2)  # a struct: its fields' bytes


def test_an_empty_table_has_no_sizes(tmp_path: Path) -> None:
    dataset = lance.write_dataset(pa.table({"s": pa.array([], pa.string())}), tmp_path / "e.lance")
    assert average_bytes(dataset, 0) == {}


@pytest.fixture(scope="module")
def ctx() -> SessionContext:
    ctx = SessionContext()
    ctx.sql("CREATE TABLE t AS SELECT value AS x, 'row-' || value AS s FROM generate_series(1, 10)").collect()
    return ctx


def sizes_of(fqn: tuple[str, ...]) -> dict[str, float]:
    return {"x": 8.0, "s": 1000.0} if fqn[-1] == "t" else {}


@pytest.mark.parametrize(
    ("sql", "column", "size"),
    [
        ("SELECT a.s FROM t a", ("a", "s"), 1000.0),  # a subquery's alias
        ("SELECT d FROM (SELECT s || s || 'xy' AS d FROM t)", (None, "d"), 2002.0),  # what it builds
        ("SELECT m FROM (SELECT md5(s) AS m FROM t)", (None, "m"), 64.0),  # a hash: 64 bytes
        ("SELECT u FROM (SELECT x AS u FROM t UNION ALL SELECT 1 AS u)", (None, "u"), 8.0),
        ("SELECT v FROM (SELECT s AS v FROM t UNION ALL SELECT 'z' AS v)", (None, "v"), 1000.0),  # longest
        ("SELECT b.v FROM (VALUES ('x'), ('abcdef')) b(v)", ("b", "v"), 6.0),  # a literal's own
        ("SELECT g.value FROM generate_series(1, 3) g", ("g", "value"), 0.0),  # unknown
    ],
)
def test_a_columns_size_follows_it_through_the_plan(
    ctx: SessionContext, sql: str, column: tuple[str | None, str], size: float
) -> None:
    column_bytes = plan_column_bytes(ctx.sql(sql).optimized_logical_plan(), sizes_of)
    assert column_bytes(*column) == size


def test_a_name_under_another_qualifier_has_the_largest_size_of_that_name(ctx: SessionContext) -> None:
    column_bytes = plan_column_bytes(ctx.sql("SELECT s FROM t").optimized_logical_plan(), sizes_of)
    assert column_bytes("elsewhere", "s") == 1000.0
    assert column_bytes("t", "nothing") == 0.0
