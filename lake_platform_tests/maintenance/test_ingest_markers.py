"""Per-file ingest markers land in the same registry transaction as the batch's append, so a
run stopped right after the commit cannot leave a file ingested but unmarked (and ingested
again by a later batch): real catalog, real local inbox."""

from __future__ import annotations

from pathlib import Path

import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.maintenance.inbox import LocalInbox
from lake_platform.maintenance.ingest import file_marker_id, ingest_batch
from lake_platform_tests.maintenance.helpers import make_lake, rows

TABLE = "p.w.ns.t"


class Stopped(Exception):
    """The run stops here, as a killed process would."""


@pytest.fixture
def catalog(tmp_path: Path) -> Catalog:
    lake = make_lake(tmp_path / "home")
    lake.tables.create_table(TABLE, rows(0, 3).to_reader())
    yield lake
    lake.close()


def stop_after_the_append(point: str) -> None:
    """Catalog hook: the append's registry commit landed, nothing after it runs."""
    if point == "append:after-write":
        raise Stopped(point)


def test_a_run_stopped_right_after_its_commit_leaves_every_file_marked(
    catalog: Catalog, tmp_path: Path
) -> None:
    box = LocalInbox(tmp_path / "inbox", settle_seconds=0.0)
    (box.root / "p/w/ns/t").mkdir(parents=True)
    (box.root / "p/w/ns/t/a.csv").write_text("id,name\n10,a\n11,b\n")
    (box.root / "p/w/ns/t/b.csv").write_text("id,name\n12,c\n")
    listed, _ = box.list_new(TABLE, None, 10)
    assert len(listed) == 2

    with (
        Catalog(catalog.settings, hook=stop_after_the_append) as stopping,
        pytest.raises(Stopped, match="append:after-write"),
    ):
        ingest_batch(stopping, box, TABLE, listed)

    assert catalog.reads.open_table(TABLE).count_rows() == 6
    markers = [catalog.ctx.commit_landed(file_marker_id(TABLE, f)) for f in listed]
    assert all(m is not None and m.operation == "ingest-file" for m in markers)

    # Offered again in another batch (a reset sensor cursor): skipped, nothing appended twice.
    again = ingest_batch(catalog, box, TABLE, listed[:1])
    assert again.status == "nothing-to-do"
    assert again.skipped == [{"key": listed[0].key, "reason": "already ingested (version 2)"}]
    assert catalog.reads.open_table(TABLE).count_rows() == 6
