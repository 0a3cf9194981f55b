"""SQLAlchemy 2 against the endpoint: our ``lake+flightsql`` dialect (reflection, typed columns,
queries built from reflected tables, pandas.read_sql, the inspector calls a BI tool makes at
connect) and the generic ``sqlalchemy-adbc`` dialect."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest
import sqlalchemy as sa
from sqlalchemy import types as sqltypes

from lake_platform.catalog.catalog import Catalog
from lake_platform.settings import LakeSettings
from lake_platform.sqlalchemy_dialect import SELECTOR
from lake_platform_tests.flight.conftest import (
    PASSWORDS,
    SVC_TOKEN,
    build_catalog,
    built_lake,
    serving,
    t_rows,
)


def _build(home: Path) -> tuple[LakeSettings, Catalog]:
    settings, catalog = build_catalog(home)
    typed = pa.table(
        {
            "amount": pa.array([1], pa.decimal128(10, 2)),
            "at": pa.array([1], pa.timestamp("us", tz="UTC")),
            "day": pa.array([1], pa.date32()),
            "flag": pa.array([True]),
            "n": pa.array([1], pa.int32()),
            "ratio": pa.array([0.5], pa.float64()),
            "name": pa.array(["a"]),
        }
    )
    catalog.tables.create_table("p.w.ns.typed", typed.to_reader())
    catalog.containers.create_warehouse("q.w2")  # bob's project has two warehouses
    catalog.branches.create_branch("p.w.ns.multi", "dev")  # multi: 5 versions of 100 rows each
    catalog.branch_writes.append("p.w.ns.multi", "dev", t_rows(7, start=1000).to_reader())
    return settings, catalog


@pytest.fixture(scope="module")
def port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    for settings, catalog in built_lake(tmp_path_factory, _build, "dialect"):
        with serving(settings, catalog) as server:
            yield server.port


@pytest.fixture(scope="module")
def engine(port: int) -> Iterator[sa.Engine]:
    engine = sa.create_engine(f"lake+flightsql://alice:{PASSWORDS['alice']}@127.0.0.1:{port}/w?schema=ns")
    yield engine
    engine.dispose()


def test_the_entry_point_finds_the_dialect(engine: sa.Engine) -> None:
    assert (engine.dialect.name, engine.dialect.driver) == ("lake", "flightsql")


def test_reflection_as_a_bi_tool_does_at_connect(engine: sa.Engine) -> None:
    inspector = sa.inspect(engine)
    assert inspector.default_schema_name == "ns"
    assert inspector.get_schema_names() == ["ns", "ns.sub"]
    assert inspector.get_table_names("ns") == ["multi", "t", "typed"]
    assert inspector.get_table_names("ns.sub") == ["u"] and inspector.get_view_names("ns") == []
    assert inspector.has_table("t", "ns") and not inspector.has_table("nope", "ns")
    assert inspector.get_pk_constraint("t", "ns")["constrained_columns"] == []
    assert inspector.get_foreign_keys("t", "ns") == [] and inspector.get_indexes("t", "ns") == []
    assert (
        inspector.get_unique_constraints("t", "ns") == []
        and inspector.get_table_comment("t", "ns")["text"] is None
    )
    assert engine.dialect.server_version_info is not None


def test_columns_are_typed(engine: sa.Engine) -> None:
    found = {c["name"]: c["type"] for c in sa.inspect(engine).get_columns("typed", "ns")}
    assert isinstance(found["amount"], sqltypes.Numeric) and (
        found["amount"].precision,
        found["amount"].scale,
    ) == (10, 2)
    assert isinstance(found["at"], sqltypes.DateTime) and found["at"].timezone
    expected = {
        "day": sqltypes.Date,
        "flag": sqltypes.Boolean,
        "n": sqltypes.Integer,
        "ratio": sqltypes.Float,
    }
    assert all(isinstance(found[name], kind) for name, kind in expected.items())
    assert isinstance(found["name"], sqltypes.String)
    assert not any(isinstance(t, sqltypes.NullType) for t in found.values())


def test_a_query_built_from_a_reflected_table(engine: sa.Engine) -> None:
    t = sa.Table("t", sa.MetaData(), autoload_with=engine, schema="ns")
    u = sa.Table("u", sa.MetaData(), autoload_with=engine, schema="ns.sub")
    query = sa.select(t.c.id, t.c.s).where(t.c.id < sa.bindparam("below")).order_by(t.c.id.desc()).limit(3)
    with engine.connect() as conn:
        assert conn.execute(query, {"below": 5}).fetchall() == [(4, "row-4"), (3, "row-3"), (2, "row-2")]
        assert conn.execute(sa.select(sa.func.count()).select_from(t)).scalar() == 1000
        joined = sa.select(u.c.id, t.c.s).join(t, t.c.id == u.c.id).order_by(u.c.id)
        assert conn.execute(joined).fetchall() == [(1, "row-1"), (2, "row-2"), (3, "row-3")]


@pytest.mark.parametrize(("name", "rows"), [("multi@v2", 200), ("multi@branch:dev", 507), ("t", 1000)])
def test_a_time_travel_or_branch_name_reflects_and_reads(engine: sa.Engine, name: str, rows: int) -> None:
    """``Table("t@v3", autoload_with=...)`` and ``read_sql_table``: the selector is part of the
    quoted name, as in SQL; its columns are the selected version's."""
    inspector = sa.inspect(engine)
    assert inspector.has_table(name, "ns")
    assert [c["name"] for c in inspector.get_columns(name, "ns")] == ["id", "s", "x"]
    table = sa.Table(name, sa.MetaData(), autoload_with=engine, schema="ns")
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(table)).scalar() == rows
        top = sa.select(table.c.id).where(table.c.id >= 100).order_by(table.c.id).limit(2)
        assert conn.execute(top).scalars().all() == [100, 101]
    assert pd.read_sql(sa.select(table), engine).shape == (rows, 3)
    # read_sql_table reflects through MetaData.reflect(only=[name]), which looks the name up in
    # the listed table names: a selector is not a table of its own there.
    if SELECTOR not in name:
        assert pd.read_sql_table(name, engine, schema="ns").shape == (rows, 3)


def test_a_selector_naming_nothing_is_no_table(engine: sa.Engine) -> None:
    inspector = sa.inspect(engine)
    assert not inspector.has_table("multi@v99", "ns") and not inspector.has_table("nope@v1", "ns")
    assert not inspector.has_table("multi@branch:gone", "ns")
    with pytest.raises(sa.exc.NoSuchTableError, match="multi@v99"):
        sa.Table("multi@v99", sa.MetaData(), autoload_with=engine, schema="ns")
    with pytest.raises(engine.dialect.loaded_dbapi.ProgrammingError, match="invalid time-travel reference"):
        inspector.has_table("multi@2", "ns")


def test_pandas_read_sql(engine: sa.Engine) -> None:
    t = sa.Table("t", sa.MetaData(), autoload_with=engine, schema="ns")
    frame = pd.read_sql(sa.select(t.c.id, t.c.x).where(t.c.id < 4).order_by(t.c.id), engine)
    assert frame["id"].tolist() == [0, 1, 2, 3] and frame["x"].tolist() == [0.0, 0.5, 1.0, 1.5]
    assert pd.read_sql("SELECT count(*) AS n FROM t", engine)["n"].tolist() == [1000]


def test_a_service_token_in_the_url(port: int) -> None:
    engine = sa.create_engine(f"lake+flightsql://127.0.0.1:{port}/w?token={SVC_TOKEN}")
    try:
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT count(*) FROM ns.t")).scalar() == 1000
    finally:
        engine.dispose()


def test_max_msg_size_in_the_url_reads_a_row_past_adbcs_default_limit(port: int) -> None:
    """A value above ADBC's 16 MiB receive limit: SQLAlchemy's ``connect_args`` would replace the
    dialect's whole ``db_kwargs`` (credentials, cookies), so the URL carries the limit."""
    wide = "SELECT repeat('x', 20000000) AS v"
    url = f"lake+flightsql://alice:{PASSWORDS['alice']}@127.0.0.1:{port}/w?schema=ns"
    plain, raised = sa.create_engine(url), sa.create_engine(f"{url}&max_msg_size={64 << 20}")
    try:
        with pytest.raises(sa.exc.DBAPIError, match="received message larger than max"):
            pd.read_sql(wide, plain)
        assert pd.read_sql(wide, raised)["v"].str.len().tolist() == [20_000_000]
        for bad in ("lots", "0", "-1"):
            with pytest.raises(sa.exc.ArgumentError, match="max_msg_size"):
                sa.create_engine(f"{url}&max_msg_size={bad}").connect()
    finally:
        plain.dispose()
        raised.dispose()


def test_a_url_without_a_warehouse_reflects_the_projects_only_one(port: int) -> None:
    engine = sa.create_engine(f"lake+flightsql://alice:{PASSWORDS['alice']}@127.0.0.1:{port}")
    try:
        inspector = sa.inspect(engine)
        assert inspector.get_schema_names() == ["ns", "ns.sub"]
        assert inspector.get_table_names("ns") == ["multi", "t", "typed"]
        assert [c["name"] for c in inspector.get_columns("t", "ns")] == ["id", "s", "x"]
    finally:
        engine.dispose()


def test_a_url_without_a_warehouse_in_a_project_of_several_says_to_name_one(port: int) -> None:
    engine = sa.create_engine(f"lake+flightsql://bob:{PASSWORDS['bob']}@127.0.0.1:{port}")
    try:
        with pytest.raises(sa.exc.InvalidRequestError, match=r"name one in the URL .*/WAREHOUSE.*: w, w2"):
            sa.inspect(engine).get_schema_names()
        with engine.connect() as conn:  # full names need no default
            assert conn.execute(sa.text("SELECT count(*) FROM w.ns.t")).scalar() == 2
    finally:
        engine.dispose()


def test_sqlalchemy_adbc_reads_typed_columns_and_queries(port: int) -> None:
    # The generic dialect sends the password as a Bearer: a service token. It sets no session
    # defaults; its schema.table names resolve in the project's only warehouse.
    engine = sa.create_engine(f"adbc+flightsql://etl:{SVC_TOKEN}@127.0.0.1:{port}?tls=false")
    try:
        types = {c["name"]: c["type"] for c in sa.inspect(engine).get_columns("t", "ns")}
        assert [type(types[n]) for n in ("id", "s")] == [sqltypes.BigInteger, sqltypes.String]
        assert isinstance(types["x"], sqltypes.Float)
        t = sa.Table("t", sa.MetaData(), autoload_with=engine, schema="ns")
        frame = pd.read_sql(sa.select(t.c.id).where(t.c.id < 3).order_by(t.c.id), engine)
        assert frame["id"].tolist() == [0, 1, 2]
    finally:
        engine.dispose()
