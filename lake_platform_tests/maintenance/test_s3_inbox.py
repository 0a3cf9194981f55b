"""The inbox on S3 (SeaweedFS on loopback, or LAKE_TEST_S3_ENDPOINT): listing after a key
cursor, files ingested into a table, a bad file quarantined with its reason."""

from __future__ import annotations

import io
from pathlib import Path

import pyarrow.parquet as pq

from lake_platform.maintenance.inbox import S3Inbox, open_inbox
from lake_platform.maintenance.ingest import ingest_batch
from lake_platform_tests.maintenance.helpers import make_lake, rows
from lake_platform_tests.s3_server import S3Endpoint

TABLE = "p.w.ns.t"


def parquet(start: int, count: int) -> bytes:
    buf = io.BytesIO()
    pq.write_table(rows(start, count), buf)
    return buf.getvalue()


def test_s3_inbox_lists_after_the_cursor_ingests_and_quarantines(s3: S3Endpoint, tmp_path: Path) -> None:
    prefix = s3.new_prefix()
    catalog = make_lake(tmp_path / "home", **s3.lake_settings())
    try:
        catalog.tables.create_table(TABLE, rows(0, 10).to_reader())
        location = f"s3://{s3.bucket}/{prefix}"
        box = open_inbox(location, catalog.settings, settle_seconds=0.0)
        assert isinstance(box, S3Inbox)
        box.put("p/w/ns/t/2026-01-01T00-00-a.parquet", parquet(100, 5))
        box.put("p/w/ns/t/2026-01-01T00-01-b.parquet", b"garbage")
        box.put("p/w/ns/t/sub/ignored.parquet", parquet(0, 1))  # not directly in the table folder
        # Just landed: not settled yet, so nothing is taken and the cursor does not move.
        settling = open_inbox(location, catalog.settings, settle_seconds=120.0)
        assert settling.list_new(TABLE, None, 100) == ([], None)
        files, cursor = box.list_new(TABLE, None, 1)  # paging: one at a time
        assert [f.key for f in files] == ["p/w/ns/t/2026-01-01T00-00-a.parquet"] and files[0].etag
        more, cursor = box.list_new(TABLE, cursor, 100)
        assert [f.key for f in more] == ["p/w/ns/t/2026-01-01T00-01-b.parquet"]
        assert box.list_new(TABLE, cursor, 100) == ([], cursor)

        outcome = ingest_batch(catalog, box, TABLE, files + more)
        assert outcome.status == "committed" and outcome.rows == 5
        assert [q["key"] for q in outcome.quarantined] == ["p/w/ns/t/2026-01-01T00-01-b.parquet"]
        keys = set(s3.keys_under(prefix))
        assert f"{prefix}/_quarantine/p/w/ns/t/2026-01-01T00-01-b.parquet" in keys
        assert f"{prefix}/_quarantine/p/w/ns/t/2026-01-01T00-01-b.parquet.reason.txt" in keys
        assert f"{prefix}/p/w/ns/t/2026-01-01T00-01-b.parquet" not in keys
        assert catalog.reads.open_table(TABLE).count_rows() == 15
        assert ingest_batch(catalog, box, TABLE, files + more).status == "replayed"
        assert catalog.reads.open_table(TABLE).count_rows() == 15
    finally:
        catalog.close()
        if s3.external:
            s3.delete_prefix(prefix)


def test_a_second_bad_file_of_one_name_does_not_overwrite_the_first_in_quarantine(
    s3: S3Endpoint, tmp_path: Path
) -> None:
    """A producer lands a bad file again under the name of one already quarantined (a resent
    upload, a reset sensor cursor): the quarantine's copy overwrote the first bad file and its
    reason, losing it. Both are kept now, each with its note, as the local inbox keeps them."""
    prefix = s3.new_prefix()
    catalog = make_lake(tmp_path / "home", **s3.lake_settings())
    try:
        catalog.tables.create_table(TABLE, rows(0, 10).to_reader())
        box = open_inbox(f"s3://{s3.bucket}/{prefix}", catalog.settings, settle_seconds=0.0)
        for content in (b"first garbage", b"second garbage"):
            landed = box.put("p/w/ns/t/b.parquet", content)
            outcome = ingest_batch(catalog, box, TABLE, [landed])
            assert [q["key"] for q in outcome.quarantined] == ["p/w/ns/t/b.parquet"]
        held = [k for k in s3.keys_under(f"{prefix}/_quarantine/") if not k.endswith(".reason.txt")]
        notes = [k for k in s3.keys_under(f"{prefix}/_quarantine/") if k.endswith(".reason.txt")]
        assert sorted(s3.client().get_object(Bucket=s3.bucket, Key=k)["Body"].read() for k in held) == [
            b"first garbage",
            b"second garbage",
        ]
        assert len(notes) == 2 and catalog.reads.open_table(TABLE).count_rows() == 10
    finally:
        catalog.close()
        if s3.external:
            s3.delete_prefix(prefix)
