"""Every Arrow type the platform stores, through the ``lake+flightsql`` dialect as a BI tool
and a notebook use it: reflected with a SQLAlchemy type (never NullType), and read back through
the reflected table and ``pandas.read_sql_table``."""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest
import sqlalchemy as sa
from sqlalchemy import types as sqltypes

from lake_platform.catalog.catalog import Catalog
from lake_platform.settings import LakeSettings
from lake_platform_tests.flight.conftest import PASSWORDS, build_catalog, built_lake, serving

UNITS = ("s", "ms", "us", "ns")


def _columns() -> dict[str, pa.Array]:
    cols: dict[str, pa.Array] = {
        **{f"i{b}": pa.array([-1], getattr(pa, f"int{b}")()) for b in (8, 16, 32, 64)},
        **{f"u{b}": pa.array([1], getattr(pa, f"uint{b}")()) for b in (8, 16, 32, 64)},
        "f16": pa.array([None], pa.float16()),
        "f32": pa.array([1.5], pa.float32()),
        "f64": pa.array([2.5], pa.float64()),
        "d128": pa.array([decimal.Decimal("1.23")], pa.decimal128(10, 2)),
        "d256": pa.array([decimal.Decimal("1.234")], pa.decimal256(50, 3)),
        "day32": pa.array([1], pa.date32()),
        "day64": pa.array([86_400_000], pa.date64()),
        "t32": pa.array([1], pa.time32("s")),
        "t64": pa.array([1], pa.time64("us")),
        "bin": pa.array([b"a"], pa.binary()),
        "lbin": pa.array([b"b"], pa.large_binary()),
        "fsb": pa.array([b"cd"], pa.binary(2)),
        "str": pa.array(["s"]),
        "lstr": pa.array(["l"], pa.large_string()),
        "flag": pa.array([True]),
        "lst": pa.array([[1, 2]], pa.list_(pa.int64())),
        "llst": pa.array([[3]], pa.large_list(pa.int32())),
        "vec": pa.array([[1.0, 2.0]], pa.list_(pa.float32(), 2)),
        "rec": pa.array([{"a": 1, "b": "x"}], pa.struct([("a", pa.int64()), ("b", pa.string())])),
        "kv": pa.array([[("k", 1)]], pa.map_(pa.string(), pa.int64())),
        "dic": pa.array(["d"]).dictionary_encode(),
    }
    for unit in UNITS:
        cols[f"ts_{unit}"] = pa.array([1], pa.timestamp(unit))
        cols[f"tz_{unit}"] = pa.array([1], pa.timestamp(unit, tz="UTC"))
        cols[f"dur_{unit}"] = pa.array([1], pa.duration(unit))
    return cols


def _build(home: Path) -> tuple[LakeSettings, Catalog]:
    settings, catalog = build_catalog(home)
    catalog.tables.create_table("p.w.ns.every", pa.table(_columns()).to_reader())
    return settings, catalog


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[sa.Engine]:
    for settings, catalog in built_lake(tmp_path_factory, _build, "dialect_types"):
        with serving(settings, catalog) as server:
            url = f"lake+flightsql://alice:{PASSWORDS['alice']}@127.0.0.1:{server.port}/w?schema=ns"
            engine = sa.create_engine(url)
            yield engine
            engine.dispose()


def test_every_stored_type_is_reflected_typed(engine: sa.Engine) -> None:
    found = {c["name"]: c["type"] for c in sa.inspect(engine).get_columns("every", "ns")}
    assert set(found) == set(_columns())
    assert [n for n, t in found.items() if isinstance(t, sqltypes.NullType)] == []
    expected = {
        **{n: sqltypes.Integer for n in ("i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64")},
        **{n: sqltypes.Float for n in ("f16", "f32", "f64")},
        **{n: sqltypes.Date for n in ("day32", "day64")},
        **{n: sqltypes.Time for n in ("t32", "t64")},
        **{n: sqltypes.LargeBinary for n in ("bin", "lbin", "fsb")},
        **{n: sqltypes.String for n in ("str", "lstr", "dic")},
        **{n: sqltypes.ARRAY for n in ("lst", "llst", "vec")},
        **{f"ts_{u}": sqltypes.DateTime for u in UNITS},
        "flag": sqltypes.Boolean,
    }
    wrong = {n: found[n] for n, kind in expected.items() if not isinstance(found[n], kind)}
    assert wrong == {}
    assert [(found[n].precision, found[n].scale) for n in ("d128", "d256")] == [(10, 2), (50, 3)]
    assert all(found[f"tz_{u}"].timezone and not found[f"ts_{u}"].timezone for u in UNITS)
    # Generic names a tool maps to its own: durations are intervals, structs and maps JSON-like.
    assert {found[f"dur_{u}"].as_generic().__class__ for u in UNITS} == {sqltypes.Interval}
    assert found["rec"].python_type is dict and found["kv"].python_type is list


def test_every_stored_type_reads_back_through_the_reflected_table(engine: sa.Engine) -> None:
    every = sa.Table("every", sa.MetaData(), autoload_with=engine, schema="ns")
    with engine.connect() as conn:
        row = conn.execute(sa.select(every)).mappings().one()
    assert row["i8"] == -1 and row["u64"] == 1 and row["d256"] == decimal.Decimal("1.234")
    assert row["day64"] == dt.date(1970, 1, 2) and row["t32"] == dt.time(0, 0, 1)
    assert row["rec"] == {"a": 1, "b": "x"} and row["kv"] == [("k", 1)] and row["vec"] == [1.0, 2.0]
    assert [row[f"dur_{u}"] for u in ("s", "ms", "us")] == [
        dt.timedelta(seconds=1),
        dt.timedelta(milliseconds=1),
        dt.timedelta(microseconds=1),
    ]
    assert pd.Timedelta(row["dur_ns"]) == pd.Timedelta(1, "ns")
    frame = pd.read_sql_table("every", engine, schema="ns")
    assert frame.shape == (1, len(_columns())) and frame["dur_s"].tolist() == [pd.Timedelta(seconds=1)]


def test_a_duration_filter_binds_a_timedelta(engine: sa.Engine) -> None:
    every = sa.Table("every", sa.MetaData(), autoload_with=engine, schema="ns")
    # Declared by hand: SQLAlchemy's own Interval, which the dialect reads natively too.
    declared = sa.Table(
        "every", sa.MetaData(), sa.Column("i64", sa.BigInteger), sa.Column("dur_us", sa.Interval), schema="ns"
    )
    one = dt.timedelta(microseconds=1)
    with engine.connect() as conn:
        assert conn.execute(sa.select(every.c.i64).where(every.c.dur_us == one)).scalars().all() == [-1]
        assert conn.execute(sa.select(declared).where(declared.c.dur_us == one)).all() == [(-1, one)]


def test_every_reflected_type_compiles_to_a_name_datafusion_casts_to(engine: sa.Engine) -> None:
    """Superset names a column's type by compiling it with the engine's dialect; a cast
    (``sa.cast(c, sa.DateTime)``) writes the same name into the query."""
    columns = sa.inspect(engine).get_columns("every", "ns")
    names = {c["name"]: c["type"].compile(dialect=engine.dialect) for c in columns}
    assert (names["ts_us"], names["bin"], names["lst"], names["vec"]) == (
        "TIMESTAMP",
        "BYTEA",
        "BIGINT[]",
        "REAL[]",
    )
    assert (names["dur_s"], names["rec"], names["kv"]) == ("INTERVAL", "STRUCT", "MAP")
    every = sa.Table("every", sa.MetaData(), autoload_with=engine, schema="ns")
    casts = sa.select(
        sa.cast(every.c.day32, sa.DateTime).label("at"),
        sa.cast(every.c.str, sa.LargeBinary).label("raw"),
        sa.cast(every.c.lst, sa.ARRAY(sa.Integer)).label("ints"),
    )
    with engine.connect() as conn:
        assert conn.execute(casts).one() == (dt.datetime(1970, 1, 2), b"s", [1, 2])
