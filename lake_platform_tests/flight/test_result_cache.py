"""The result cache over ADBC: a re-run of the same query by the same principal over the same
versions is answered from the kept result (the same rows as a server without the cache), never
for another tenant or principal, and an append gives the new rows at once."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.errors import SettingsError
from lake_platform.query.limits import limits_from
from lake_platform.settings import LakeSettings
from lake_platform.settings.flight import flight_settings
from lake_platform_tests.flight.conftest import SVC_TOKEN, Running, serving, t_rows, wait_until

GROUP = "SELECT id % 7 AS k, count(*) AS n, sum(x) AS total FROM w.ns.t GROUP BY id % 7 ORDER BY k"


def rows(conn: Any, sql: str) -> pa.Table:
    with conn.cursor() as cur:
        cur.execute(sql)
        return cur.fetch_arrow_table()


@pytest.fixture(scope="module")
def servers(lake: tuple[LakeSettings, Catalog]) -> Iterator[tuple[Running, Running]]:
    settings, catalog = lake
    with (
        serving(settings, catalog, cache_bytes=0) as cached,
        serving(settings, catalog, cache_bytes=0, result_cache_bytes=0) as plain,
    ):
        yield Running(cached, settings, catalog), Running(plain, settings, catalog)


def test_a_rerun_is_answered_from_the_kept_result(servers: tuple[Running, Running]) -> None:
    cached, plain = servers
    with cached.adbc() as conn, plain.adbc() as ref:
        expected = rows(ref, GROUP)
        ran = cached.server.engine.work.runs
        first = rows(conn, GROUP)
        hits = cached.server.health()["result_cache"]["hits"]
        again = [rows(conn, GROUP) for _ in range(3)]
    assert first.equals(expected) and all(t.equals(expected) for t in again)
    assert cached.server.engine.work.runs == ran + 1
    assert cached.server.health()["result_cache"]["hits"] == hits + 3
    assert plain.server.health()["result_cache"]["entries"] == 0


def test_tenants_and_principals_never_share_a_kept_result(servers: tuple[Running, Running]) -> None:
    cached, _ = servers
    sql = "SELECT count(*) AS n FROM w.ns.t"
    ran = cached.server.engine.work.runs
    with cached.adbc("alice") as alice, cached.adbc("bob") as bob, cached.adbc_bearer(SVC_TOKEN) as etl:
        for _ in range(2):
            assert rows(alice, sql).to_pylist() == [{"n": 1000}]
            assert rows(bob, sql).to_pylist() == [{"n": 2}]  # tenant q's own table of that name
            assert rows(etl, sql).to_pylist() == [{"n": 1000}]  # p again, another principal
    assert cached.server.engine.work.runs == ran + 3  # once per principal, then kept for each


def test_an_append_gives_the_new_rows_at_once(servers: tuple[Running, Running]) -> None:
    cached, _ = servers
    catalog = cached.catalog
    catalog.tables.create_table("p.w.ns.grows", t_rows(10).to_reader())
    sql = "SELECT count(*) AS n, max(id) AS top FROM w.ns.grows"
    with cached.adbc() as conn:
        assert wait_until(lambda: cached.server.snapshots.current().project("p").table("w", "ns", "grows"))
        assert rows(conn, sql).to_pylist() == rows(conn, sql).to_pylist() == [{"n": 10, "top": 9}]
        catalog.tables.append("p.w.ns.grows", t_rows(5, start=10).to_reader())
        assert wait_until(lambda: rows(conn, sql).to_pylist() == [{"n": 15, "top": 14}])
        assert rows(conn, 'SELECT count(*) AS n, max(id) AS top FROM w.ns."grows@v1"').to_pylist() == [
            {"n": 10, "top": 9}
        ]


def test_bad_settings_are_refused_with_the_variable_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAKE_FLIGHT_RESULT_CACHE_BYTES", "-1")
    with pytest.raises(SettingsError, match="LAKE_FLIGHT_RESULT_CACHE_BYTES"):
        flight_settings()
    monkeypatch.setenv("LAKE_FLIGHT_RESULT_CACHE_BYTES", "0")
    monkeypatch.setenv("LAKE_FLIGHT_RESULT_CACHE_ENTRY_BYTES", "lots")
    with pytest.raises(SettingsError, match="LAKE_FLIGHT_RESULT_CACHE_ENTRY_BYTES"):
        flight_settings()


def test_the_default_budget_is_a_sixteenth_of_the_pool_at_most_64_mib(
    lake: tuple[LakeSettings, Catalog],
) -> None:
    settings, _ = lake
    small = limits_from(flight_settings(port=0, memory_limit_bytes=256 << 20), settings)
    large = limits_from(flight_settings(port=0, memory_limit_bytes=8 << 30), settings)
    assert small.result_cache_bytes == 16 << 20 and large.result_cache_bytes == 64 << 20
    assert limits_from(flight_settings(port=0, result_cache_bytes=0), settings).result_cache_bytes == 0
