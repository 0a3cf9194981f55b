"""Time travel over ADBC: ``wh.ns."t@v<N>"`` and ``wh.ns."t@tag:<tag>"`` read exactly that version,
resolved through the registry's version records (via the cached snapshot), pinned in the ticket,
refused with NOT_FOUND for a cleaned-up, never-existing version or an unknown tag, and scoped to
the caller's project like any other name."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import adbc_driver_manager
import pyarrow as pa
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.settings import LakeSettings
from lake_platform_tests.doubles import ManualClock
from lake_platform_tests.flight.conftest import Running, fetch, plan, wait_until
from lake_platform_tests.flight.helpers import tagged_rows


def _rows(conn: Any, sql: str) -> pa.Table:
    with conn.cursor() as cur:
        cur.execute(sql)
        return cur.fetch_arrow_table()


@pytest.fixture(scope="module")
def history(running: Running) -> Iterator[Running]:
    """``p.w.ns.tt``: v1 10 rows tagged ``first`` ("v1"), v2 +5 ("v2"), v3 +3 ("v3"); tag ``eod`` on v2.
    ``q.w.ns.tt`` (bob's): one version of 2 rows."""
    catalog = running.catalog
    catalog.tables.create_table("p.w.ns.tt", tagged_rows(10, tag="v1"))
    catalog.tags.create_tag("p.w.ns.tt", "first", 1)
    catalog.tables.append("p.w.ns.tt", tagged_rows(5, start=10, tag="v2"))
    catalog.tags.create_tag("p.w.ns.tt", "eod", 2)
    catalog.tables.append("p.w.ns.tt", tagged_rows(3, start=15, tag="v3"))
    catalog.tables.create_table("q.w.ns.tt", tagged_rows(2, start=900, tag="bob"))
    client, options = running.client()
    assert wait_until(
        lambda: fetch(client, options, plan(client, options, 'SELECT * FROM w.ns."tt@tag:eod"'))
    )
    yield running


def test_version_and_tag_reads_over_adbc(history: Running) -> None:
    with history.adbc() as conn:
        assert _rows(conn, "SELECT count(*) AS n FROM w.ns.tt").column("n")[0].as_py() == 18
        v1 = _rows(conn, 'SELECT DISTINCT tag FROM w.ns."tt@v1"')
        assert v1.column("tag").to_pylist() == ["v1"]
        assert _rows(conn, 'SELECT count(*) AS n FROM w.ns."tt@v2"').column("n")[0].as_py() == 15
        eod = _rows(conn, 'SELECT count(*) AS n FROM w.ns."tt@tag:eod"')
        assert eod.column("n")[0].as_py() == 15
        first = _rows(conn, 'SELECT count(*) AS n FROM w.ns."tt@tag:first"')
        assert first.column("n")[0].as_py() == 10
        # The current table and two older versions of it in one query: each its own snapshot.
        both = _rows(
            conn,
            'SELECT (SELECT count(*) FROM w.ns.tt) AS now, (SELECT count(*) FROM w.ns."tt@v1") AS v1, '
            '(SELECT count(*) FROM w.ns."tt@tag:eod") AS eod',
        )
        assert both.to_pylist() == [{"now": 18, "v1": 10, "eod": 15}]
        for nested in ('w."ns.sub"."u@v1"', 'w.ns.sub."u@v1"'):  # a nested namespace, either way
            assert _rows(conn, f"SELECT count(*) AS n FROM {nested}").column("n")[0].as_py() == 3
        # Parameters bind as usual.
        with conn.cursor() as cur:
            cur.execute('SELECT count(*) AS n FROM w.ns."tt@v2" WHERE id < ?', (12,))
            assert cur.fetch_arrow_table().column("n")[0].as_py() == 12


def test_the_ticket_pins_what_was_resolved(history: Running) -> None:
    """A tag moved after planning does not move the ticket: it pins the version, not the tag."""
    client, options = history.client()
    catalog = history.catalog
    catalog.tables.create_table("p.w.ns.ttmove", tagged_rows(4, tag="v1"))
    catalog.tags.create_tag("p.w.ns.ttmove", "live", 1)
    catalog.tables.append("p.w.ns.ttmove", tagged_rows(6, start=4, tag="v2"))
    sql = 'SELECT count(*) AS n FROM w.ns."ttmove@tag:live"'
    assert wait_until(lambda: fetch(client, options, plan(client, options, sql)).column("n")[0].as_py() == 4)
    info = plan(client, options, sql)
    catalog.tags.create_tag("p.w.ns.ttmove", "live", 2, replace=True)
    assert wait_until(lambda: fetch(client, options, plan(client, options, sql)).column("n")[0].as_py() == 10)
    assert fetch(client, options, info).column("n")[0].as_py() == 4


@pytest.mark.parametrize(
    ("sql", "status", "message"),
    [
        ('SELECT * FROM w.ns."tt@v99"', "NOT_FOUND", r"version 99 of p\.w\.ns\.tt does not exist.*code 11"),
        ('SELECT * FROM w.ns."tt@tag:nope"', "NOT_FOUND", r"no tag nope on p\.w\.ns\.tt.*code 8"),
        ('SELECT * FROM w.ns."missing@v1"', "NOT_FOUND", r"w\.ns\.missing not found.*code 4"),
        ('SELECT * FROM w.ns."tt@1"', "INVALID_ARGUMENT", r"invalid time-travel reference"),
        ('SELECT * FROM w.ns."tt@V1"', "INVALID_ARGUMENT", r"invalid time-travel reference"),
        ('SELECT * FROM w.ns."tt@tag:Bad-Tag"', "INVALID_ARGUMENT", r"invalid time-travel reference"),
        ('SELECT * FROM w.ns."tt@v0"', "INVALID_ARGUMENT", r"invalid time-travel reference"),
    ],
)
def test_bad_references_get_typed_errors(history: Running, sql: str, status: str, message: str) -> None:
    with history.adbc() as conn, conn.cursor() as cur, pytest.raises(adbc_driver_manager.Error) as err:
        cur.execute(sql)
    assert status in str(err.value)
    assert re.search(message, str(err.value)), str(err.value)


def test_tenant_scoping(history: Running) -> None:
    """Bob (project q) reads q's tt@v1, never p's; p's tags and tables do not exist for him."""
    with history.adbc("bob") as conn:
        got = _rows(conn, 'SELECT DISTINCT tag FROM w.ns."tt@v1"')
        assert got.column("tag").to_pylist() == ["bob"]
        for sql, code in (
            ('SELECT * FROM w.ns."tt@v2"', "code 11"),  # p's tt has a v2; q's has not
            ('SELECT * FROM w.ns."tt@tag:eod"', "code 8"),  # p's tag
            ('SELECT * FROM w.ns."multi@v1"', "code 4"),  # p's table
        ):
            with conn.cursor() as cur, pytest.raises(adbc_driver_manager.Error) as err:
                cur.execute(sql)
            assert "NOT_FOUND" in str(err.value) and code in str(err.value)


def test_a_cleaned_up_version_is_not_found(history: Running) -> None:
    """Planned before cleanup: DoGet answers NOT_FOUND; planned after: GetFlightInfo does."""
    settings: LakeSettings = history.settings
    catalog = history.catalog
    client, options = history.client()
    catalog.tables.create_table("p.w.ns.ttgone", tagged_rows(10, tag="v1"))
    catalog.tables.append("p.w.ns.ttgone", tagged_rows(5, start=10, tag="v2"))
    sql = 'SELECT count(*) AS n FROM w.ns."ttgone@v1"'
    assert wait_until(lambda: fetch(client, options, plan(client, options, sql)).column("n")[0].as_py() == 10)
    info = plan(client, options, sql)
    clock = ManualClock()
    clock.advance(10)
    maintainer = Catalog(
        settings.model_copy(update={"ticket_lifetime_seconds": 1.0, "reader_max_stale_seconds": 0.0}),
        clock=clock,
        heartbeat=False,
    )
    try:
        assert maintainer.versions.cleanup("p.w.ns.ttgone", retention=timedelta(0)).detail[
            "versions_removed"
        ] == [1]
    finally:
        maintainer.close()
    with pytest.raises(pa.ArrowKeyError, match=r"version 1 of p\.w\.ns\.ttgone is no longer available"):
        fetch(client, options, info)
    # Planned now: refused at GetFlightInfo, whether or not this replica's snapshot caught up yet.
    with pytest.raises(
        pa.ArrowKeyError, match=r"version 1 of p\.w\.ns\.ttgone (is no longer available|does not)"
    ):
        plan(client, options, sql)
    with history.adbc() as conn, conn.cursor() as cur, pytest.raises(adbc_driver_manager.Error) as err:
        cur.execute(sql)
    assert "NOT_FOUND" in str(err.value) and "code 11" in str(err.value)
