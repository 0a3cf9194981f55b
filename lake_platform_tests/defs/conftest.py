"""A lake with one table ``p.w.ns.t`` and a local inbox; Dagster resources pointing at both;
a real ``instance_for_test()`` (SQLite or Postgres storage) with the table partition registered."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.defs.partitions import TABLES
from lake_platform.defs.resources import InboxResource, LakeResource
from lake_platform.maintenance.inbox import LocalInbox
from lake_platform_tests.dagster_storage import postgres_instance, sqlite_instance
from lake_platform_tests.maintenance.helpers import make_lake, rows

TABLE = "p.w.ns.t"


@dataclass
class Lake:
    home: Path
    catalog: Catalog
    inbox: LocalInbox
    resources: dict[str, object]


@pytest.fixture
def lake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Lake]:
    home = tmp_path / "home"
    monkeypatch.setenv("LAKE_HOME", str(home))
    monkeypatch.setenv("LAKE_INBOX", str(tmp_path / "inbox"))
    catalog = make_lake(home)
    catalog.tables.create_table(TABLE, rows(0, 10).to_reader())
    lake_res = LakeResource(home=str(home))
    inbox_res = InboxResource(lake=lake_res, location=str(tmp_path / "inbox"))
    try:
        yield Lake(home, catalog, LocalInbox(tmp_path / "inbox"), {"lake": lake_res, "inbox": inbox_res})
    finally:
        catalog.close()


@pytest.fixture(params=["sqlite", "postgres"])
def instance(request: pytest.FixtureRequest) -> Iterator[dg.DagsterInstance]:
    """A real Dagster instance on each storage the platform supports: SQLite (the embedded
    default) and Postgres (a fresh database on the session's throwaway cluster), each starting
    from a copy of storage Dagster created once (``dagster_storage``)."""
    with instance_on(request) as inst:
        inst.add_dynamic_partitions(TABLES, [TABLE])
        yield inst


@contextmanager
def instance_on(request: pytest.FixtureRequest) -> Iterator[dg.DagsterInstance]:
    """A test instance on the storage ``request.param`` names (``sqlite`` or ``postgres``)."""
    if request.param == "sqlite":
        with sqlite_instance() as inst:
            yield inst
    else:
        with postgres_instance(request.getfixturevalue("postgres")) as inst:
            yield inst
