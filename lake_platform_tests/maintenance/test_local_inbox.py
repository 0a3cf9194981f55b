"""The local inbox never reads, moves or lists a file through a link that leaves a table's
folder: real catalog, real folders and links."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.errors import InvalidInput
from lake_platform.maintenance.inbox import InboxFile, LocalInbox
from lake_platform.maintenance.ingest import ingest_batch
from lake_platform_tests.maintenance.helpers import make_lake, rows

TABLE = "p.w.ns.t"
SECRET = "TOPSECRET-4711"


@pytest.fixture
def catalog(tmp_path: Path) -> Catalog:
    lake = make_lake(tmp_path / "home")
    lake.tables.create_table(TABLE, rows(0, 3).to_reader())
    yield lake
    lake.close()


def elsewhere(tmp_path: Path) -> Path:
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    (folder / "a.csv").write_text(f"id,name\n7,{SECRET}\n")
    return folder


def test_a_table_folder_that_is_a_link_elsewhere_is_not_listed_read_or_moved(
    catalog: Catalog, tmp_path: Path
) -> None:
    outside = elsewhere(tmp_path)
    box = LocalInbox(tmp_path / "inbox", settle_seconds=0.0)
    (box.root / "p/w/ns").mkdir(parents=True)
    (box.root / "p/w/ns/t").symlink_to(outside, target_is_directory=True)
    assert box.list_new(TABLE, None, 10) == ([], None)

    # Offered anyway (a hand-written run config): refused by name, nothing read, nothing moved.
    st = (outside / "a.csv").lstat()
    offered = InboxFile("p/w/ns/t/a.csv", st.st_size, st.st_mtime_ns)
    outcome = ingest_batch(catalog, box, TABLE, [offered])
    assert outcome.status == "nothing-to-do" and [q["key"] for q in outcome.quarantined] == ["p/w/ns/t/a.csv"]
    assert "symbolic link" in outcome.quarantined[0]["reason"] and SECRET not in str(outcome.to_dict())
    assert (outside / "a.csv").read_text().endswith(f"{SECRET}\n")  # still where it was
    assert not any(
        p.is_file() and not p.name.endswith(".reason.txt") for p in (box.root / "_quarantine").rglob("*")
    )
    assert catalog.reads.open_table(TABLE).count_rows() == 3


def test_a_link_to_a_file_outside_is_moved_as_a_link(catalog: Catalog, tmp_path: Path) -> None:
    outside = elsewhere(tmp_path)
    box = LocalInbox(tmp_path / "inbox", settle_seconds=0.0)
    (box.root / "p/w/ns/t").mkdir(parents=True)
    (box.root / "p/w/ns/t/a.csv").symlink_to(outside / "a.csv")
    listed, _ = box.list_new(TABLE, None, 10)
    assert [f.key for f in listed] == ["p/w/ns/t/a.csv"]
    with pytest.raises(InvalidInput, match="a.csv: it is a symbolic link"), box.local_copy(listed[0]):
        pass
    outcome = ingest_batch(catalog, box, TABLE, listed)
    assert [q["key"] for q in outcome.quarantined] == ["p/w/ns/t/a.csv"]
    moved = box.root / "_quarantine/p/w/ns/t/a.csv"
    assert moved.is_symlink() and os.readlink(moved) == str(outside / "a.csv")
    assert (outside / "a.csv").exists()


def test_a_bad_file_whose_name_leaves_no_room_for_its_note_is_quarantined_with_it(
    catalog: Catalog, tmp_path: Path
) -> None:
    """A landed name near the file system's limit (255 bytes) has no room for ``.reason.txt``:
    the file was moved, then writing its note failed with a raw OSError (File name too long),
    so the run failed untyped with its good file unwritten and the bad one's reason lost. Now the
    note gets a shortened name, and a second file of that name quarantined later gets one too."""
    box = LocalInbox(tmp_path / "inbox", settle_seconds=0.0)
    long_name = "x" * 245 + ".parquet"
    for round_ in range(2):
        box.put(f"p/w/ns/t/{long_name}", b"not parquet")
        box.put(f"p/w/ns/t/good{round_}.csv", f"id,name\n{10 + round_},ok\n".encode())
        listed = [box.stat(f"p/w/ns/t/{n}") for n in (long_name, f"good{round_}.csv")]
        outcome = ingest_batch(catalog, box, TABLE, [f for f in listed if f is not None])
        assert outcome.status == "committed" and outcome.rows == 1
        assert [q["key"] for q in outcome.quarantined] == [f"p/w/ns/t/{long_name}"]
    held = sorted((box.root / "_quarantine/p/w/ns/t").iterdir())
    notes = [p for p in held if p.name.endswith(".reason.txt")]
    kept = [p for p in held if not p.name.endswith(".reason.txt")]
    assert len(kept) == 2 and all(p.read_bytes() == b"not parquet" for p in kept)
    assert len(notes) == 2 and all(long_name in n.read_text() for n in notes)
    assert catalog.reads.open_table(TABLE).count_rows() == 5
