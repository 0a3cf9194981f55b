"""Loading the catalog snapshot: a refresh decodes only what changed, and keeps the view of a
project it did not change."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa

from lake_platform.catalog.catalog import Catalog
from lake_platform.query.snapshot import load_snapshot
from lake_platform.settings import load_settings
from lake_platform_tests.flight.conftest import build_catalog
from lake_platform_tests.flight.helpers import CountingStore


def test_incremental_refresh_reuses_unchanged_tables(lake: tuple[Any, Catalog]) -> None:
    _, catalog = lake
    store = CountingStore(catalog.store)
    first = load_snapshot(store)
    gets = store.gets
    second = load_snapshot(store, first)
    assert store.gets == gets  # no version record re-read for unchanged tables
    assert second.project("p").table("w", "ns", "t") is first.project("p").table("w", "ns", "t")


def test_a_refresh_keeps_the_view_of_a_project_it_did_not_change(tmp_path: Path) -> None:
    """Plans are kept per project view: a refresh that changed nothing in a project must keep
    its view object (or every kept plan is planned again after each refresh interval), and one
    that changed anything there must give a new view."""
    _, catalog = build_catalog(tmp_path / "home")
    try:
        first = load_snapshot(catalog.store)
        second = load_snapshot(catalog.store, first)
        assert second.project("p") is first.project("p")
        assert second.project("q") is first.project("q")
        catalog.tables.append("q.w.ns.t", pa.table({"id": pa.array([-3], pa.int64())}).to_reader())
        third = load_snapshot(catalog.store, second)
        assert third.project("p") is second.project("p")
        assert third.project("q") is not second.project("q")
        assert third.project("q").table("w", "ns", "t").ref.version == 2  # type: ignore[union-attr]
        catalog.containers.create_namespace("p.w.other")  # a name, not a table: still a change
        assert load_snapshot(catalog.store, third).project("p") is not third.project("p")
    finally:
        catalog.close()


def test_settings_reader_is_independent(tmp_path: Path) -> None:
    settings = load_settings(home=tmp_path)
    assert settings.home == tmp_path
