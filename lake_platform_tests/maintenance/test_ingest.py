"""One inbox batch into one table: what a run reports (real catalog, real local inbox)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.errors import InvalidInput
from lake_platform.maintenance.inbox import LocalInbox
from lake_platform.maintenance.ingest import ingest_batch
from lake_platform_tests.maintenance.helpers import make_lake, rows

TABLE = "p.w.ns.t"


@pytest.fixture
def catalog(tmp_path: Path) -> Iterator[Catalog]:
    lake = make_lake(tmp_path / "home")
    lake.tables.create_table(TABLE, rows(0, 3).to_reader())
    yield lake
    lake.close()


def test_a_replayed_batch_reports_what_its_commit_ingested(catalog: Catalog, tmp_path: Path) -> None:
    """The batch's first run ingested one of its two files (the other was gone by then); the same
    batch run again replays that commit and reports its one file, rows and bytes, not the two
    files requested with 0 rows."""
    box = LocalInbox(tmp_path / "inbox", settle_seconds=0.0)
    (box.root / "p/w/ns/t").mkdir(parents=True)
    (box.root / "p/w/ns/t/a.csv").write_text("id,name\n10,a\n")
    (box.root / "p/w/ns/t/b.csv").write_text("id,name\n11,b\n12,c\n")
    listed, _ = box.list_new(TABLE, None, 10)
    (box.root / "p/w/ns/t/a.csv").unlink()
    first = ingest_batch(catalog, box, TABLE, listed)
    again = ingest_batch(catalog, box, TABLE, listed)
    assert (first.status, again.status) == ("committed", "replayed")
    shown = [([f["key"] for f in o.files], o.rows, o.bytes, o.version) for o in (first, again)]
    assert shown[0] == shown[1] == (["p/w/ns/t/b.csv"], 2, first.bytes, 2)
    assert first.bytes > 0
    assert catalog.reads.open_table(TABLE).count_rows() == 5


def test_a_batch_naming_one_file_twice_is_refused_by_name_before_anything_is_read(
    catalog: Catalog, tmp_path: Path
) -> None:
    """Its rows would be streamed twice; the registry refused the commit only after Lance had
    written them, in its words ('transact keys must be distinct within one batch')."""
    box = LocalInbox(tmp_path / "inbox", settle_seconds=0.0)
    (box.root / "p/w/ns/t").mkdir(parents=True)
    (box.root / "p/w/ns/t/a.csv").write_text("id,name\n10,a\n")
    listed, _ = box.list_new(TABLE, None, 10)
    with pytest.raises(InvalidInput, match="p/w/ns/t/a.csv is listed twice"):
        ingest_batch(catalog, box, TABLE, listed * 2)
    assert [e.operation for e in catalog.reads.history(TABLE)] == ["create"]
    assert (box.root / "p/w/ns/t/a.csv").exists()


def test_a_batch_of_no_rows_commits_no_version_and_marks_its_file_once(
    catalog: Catalog, tmp_path: Path
) -> None:
    """A header-only CSV: no empty version, but the file's marker lands, so the batch run again
    replays and the file in another batch is skipped as ingested."""
    box = LocalInbox(tmp_path / "inbox", settle_seconds=0.0)
    (box.root / "p/w/ns/t").mkdir(parents=True)
    (box.root / "p/w/ns/t/a.csv").write_text("id,name\n")
    listed, _ = box.list_new(TABLE, None, 10)
    first = ingest_batch(catalog, box, TABLE, listed)
    assert (first.status, first.from_version, first.version, first.rows) == ("committed", 1, 1, 0)
    assert [e.operation for e in catalog.reads.history(TABLE)] == ["create"]
    again = ingest_batch(catalog, box, TABLE, listed)
    assert (again.status, again.version) == ("replayed", 1)
    (box.root / "p/w/ns/t/b.csv").write_text("id,name\n11,b\n")
    both, _ = box.list_new(TABLE, None, 10)
    later = ingest_batch(catalog, box, TABLE, both)
    assert later.skipped == [{"key": "p/w/ns/t/a.csv", "reason": "already ingested (version 1)"}]
    assert (later.version, later.rows) == (2, 1)
