"""A retried step's commit id replays only the commit it made: the IO manager's write on main and
write-audit-publish's write on a run's branch refuse an id that landed for another table or line,
instead of answering "written" for a write that never happened."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.catalog.provenance import Provenance
from lake_platform.defs.asset_tables import WritePlan
from lake_platform.defs.io_manager import write
from lake_platform.defs.wap import write_on_branch
from lake_platform.errors import InvalidInput
from lake_platform_tests.maintenance.helpers import make_lake

APPEND = WritePlan("append")


def rows(*ids: int) -> pa.RecordBatchReader:
    return pa.table({"id": pa.array(ids, pa.int64())}).to_reader()


@pytest.fixture
def catalog(tmp_path: Path) -> Iterator[Catalog]:
    with make_lake(tmp_path / "home") as catalog:
        catalog.tables.create_table("p.w.ns.a", rows(1))
        catalog.tables.create_table("p.w.ns.b", rows(1))
        yield catalog


def heads(catalog: Catalog) -> dict[str, int]:
    return {t: catalog.reads.describe_table(f"p.w.ns.{t}", with_stats=False).current_version for t in "ab"}


def test_the_io_managers_retry_replays_its_own_commit(catalog: Catalog) -> None:
    by = Provenance(actor="dagster", commit_id="step-commit-0001")
    first = write(catalog, "p.w.ns.a", rows(2), APPEND, by)
    again = write(catalog, "p.w.ns.a", rows(2), APPEND, by)
    assert (first.replayed, again.replayed, again.version) == (False, True, first.version)
    assert heads(catalog) == {"a": 2, "b": 1}


def test_the_io_manager_refuses_an_id_another_tables_commit_landed_under(catalog: Catalog) -> None:
    by = Provenance(actor="dagster", commit_id="step-commit-0002")
    write(catalog, "p.w.ns.a", rows(2), APPEND, by)
    with pytest.raises(InvalidInput, match="already names append of p.w.ns.a on main"):
        write(catalog, "p.w.ns.b", rows(3), APPEND, by)
    assert heads(catalog) == {"a": 2, "b": 1}


def test_a_wap_write_refuses_an_id_mains_commit_landed_under(catalog: Catalog) -> None:
    by = Provenance(actor="dagster", commit_id="step-commit-0003")
    write(catalog, "p.w.ns.a", rows(2), APPEND, by)
    with pytest.raises(InvalidInput, match="already names append of p.w.ns.a on main"):
        write_on_branch(catalog, "p.w.ns.a", "run_1", rows(3), APPEND, by)
    assert heads(catalog) == {"a": 2, "b": 1}
    on_branch = Provenance(actor="dagster", commit_id="step-commit-0004")
    again = write_on_branch(catalog, "p.w.ns.a", "run_1", rows(3), APPEND, on_branch)
    assert not again.replayed
    replay = write_on_branch(catalog, "p.w.ns.a", "run_1", rows(3), APPEND, on_branch)
    assert (replay.replayed, replay.version) == (True, again.version)
