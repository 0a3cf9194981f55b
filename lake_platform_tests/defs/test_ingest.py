"""Inbox sensor and ingest asset, in process on a real Dagster instance."""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.defs import checks
from lake_platform.defs.ingest import inbox_sensor, ingested
from lake_platform.defs.partitions import TABLES
from lake_platform.defs.resources import InboxResource, LakeResource
from lake_platform.errors import InvalidInput, ServiceUnavailable
from lake_platform_tests.defs.conftest import TABLE, Lake
from lake_platform_tests.maintenance.helpers import rows


def taking_files_at_once(lake: Lake, **fields: object) -> Lake:
    """The lake, its inbox resource listing files the moment they land (no settle time)."""
    inbox = InboxResource(
        lake=lake.resources["lake"], location=lake.inbox.location, settle_seconds=0.0, **fields
    )
    return replace(lake, resources={**lake.resources, "inbox": inbox})


@pytest.fixture
def lake(lake: Lake) -> Lake:
    return taking_files_at_once(lake)


class FailingOnceAfterTheAppend(LakeResource):
    """The lake, except that while the file ``armed`` exists, an append fails right after its
    commit landed (the file is removed then), as a registry connection reset would."""

    armed: str

    def fail_once(self, point: str) -> None:
        if point == "append:after-finalize" and os.path.exists(self.armed):
            os.remove(self.armed)
            raise ServiceUnavailable("registry connection reset after the commit landed")

    @contextmanager
    def catalog(self) -> Iterator[Catalog]:
        with Catalog(self.settings(), hook=self.fail_once) as catalog:
            yield catalog


def parquet(table: pa.Table, **kwargs: object) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf, **kwargs)
    return buf.getvalue()


def tick(instance: dg.DagsterInstance, lake: Lake, cursor: str | None) -> dg.SensorResult:
    with dg.build_sensor_context(instance=instance, cursor=cursor, resources=lake.resources) as ctx:
        result = inbox_sensor(ctx)
    assert isinstance(result, dg.SensorResult)
    return result


def keys_of(request: dg.RunRequest) -> list[str]:
    return [f["key"] for f in request.run_config["ops"]["ingested"]["config"]["files"]]


def run(
    instance: dg.DagsterInstance,
    lake: Lake,
    request: dg.RunRequest,
    *,
    raise_on_error: bool = True,
    with_checks: bool = False,
) -> dg.ExecuteInProcessResult:
    assets: list[object] = [ingested, *checks.ALL[:3]] if with_checks else [ingested]
    return dg.materialize(
        assets,
        partition_key=request.partition_key,
        instance=instance,
        resources=lake.resources,
        run_config=request.run_config,
        raise_on_error=raise_on_error,
    )


def test_sensor_requests_one_run_per_table_then_only_new_files(instance, lake: Lake) -> None:
    lake.catalog.tables.create_table("p.w.ns.other", rows(0, 1).to_reader())
    lake.inbox.put("p/w/ns/t/a.parquet", parquet(rows(100, 5)))
    lake.inbox.put("p/w/ns/t/b.csv", b"id,name\n200,x\n201,y\n")
    lake.inbox.put("p/w/ns/t/.c.parquet.tmp", b"partial")  # still being written: ignored
    lake.inbox.put("p/w/ns/other/c.jsonl", b'{"id": 300, "name": "z"}\n')
    lake.inbox.put("p/w/ns/unknown/d.parquet", parquet(rows(0, 1)))  # no such table: ignored

    first = tick(instance, lake, None)
    by_table = {r.partition_key: r for r in first.run_requests}
    assert set(by_table) == {TABLE, "p.w.ns.other"}
    assert sorted(keys_of(by_table[TABLE])) == ["p/w/ns/t/a.parquet", "p/w/ns/t/b.csv"]
    assert [r.partition_keys for r in first.dynamic_partitions_requests] == [["p.w.ns.other"]]

    second = tick(instance, lake, first.cursor)
    assert not second.run_requests and second.skip_reason is not None

    lake.inbox.put("p/w/ns/t/e.parquet", parquet(rows(400, 2)))
    third = tick(instance, lake, second.cursor)
    assert [keys_of(r) for r in third.run_requests] == [["p/w/ns/t/e.parquet"]]


def test_sensor_pages_large_batches(instance, lake: Lake) -> None:
    lake = taking_files_at_once(lake, files_per_run=2, files_per_tick=3)
    for i in range(5):
        lake.inbox.put(f"p/w/ns/t/f{i}.csv", f"id,name\n{i},x\n".encode())
    first = tick(instance, lake, None)
    assert [len(keys_of(r)) for r in first.run_requests] == [2, 1]
    second = tick(instance, lake, first.cursor)
    assert [len(keys_of(r)) for r in second.run_requests] == [2]
    keys = [k for r in first.run_requests + second.run_requests for k in keys_of(r)]
    assert sorted(keys) == [f"p/w/ns/t/f{i}.csv" for i in range(5)]


def test_ingest_is_exactly_once_under_a_retried_and_a_rerequested_run(
    instance, lake: Lake, tmp_path: Path
) -> None:
    lake.inbox.put("p/w/ns/t/a.parquet", parquet(rows(100, 5)))
    lake.inbox.put("p/w/ns/t/b.csv", b"id,name\n200,x\n201,y\n")
    request = tick(instance, lake, None).run_requests[0]
    armed = tmp_path / "fail-once"
    armed.touch()
    failing = FailingOnceAfterTheAppend(home=str(lake.home), armed=str(armed))
    result = run(
        instance, replace(lake, resources={**lake.resources, "lake": failing}), request, with_checks=True
    )
    assert not armed.exists()  # the first attempt's append landed, then failed
    assert result.success
    events = [e.event_type_value for e in result.all_events]
    assert "STEP_UP_FOR_RETRY" in events
    meta = result.asset_materializations_for_node("ingested")[0].metadata
    assert meta["status"].value == "replayed" and meta["files"].value == 2
    assert lake.catalog.reads.open_table(TABLE).count_rows() == 17
    assert all(e.passed for e in result.get_asset_check_evaluations())

    again = run(instance, lake, request)  # the same batch requested again
    assert again.asset_materializations_for_node("ingested")[0].metadata["status"].value == "replayed"
    assert lake.catalog.reads.open_table(TABLE).count_rows() == 17
    appends = [e for e in lake.catalog.reads.history(TABLE) if e.operation == "append"]
    assert len(appends) == 1
    assert sorted(f["key"] for f in appends[0].detail["files"]) == ["p/w/ns/t/a.parquet", "p/w/ns/t/b.csv"]
    assert appends[0].run_id == result.run_id


def corrupt_second_row_group(data: bytes) -> bytes:
    meta = pq.ParquetFile(io.BytesIO(data)).metadata
    assert meta.num_row_groups == 2
    offset = meta.row_group(1).column(0).data_page_offset
    return data[:offset] + b"\xff" * 64 + data[offset + 64 :]


def test_bad_files_are_quarantined_and_the_rest_lands(instance, lake: Lake) -> None:
    lake.inbox.put("p/w/ns/t/good.parquet", parquet(rows(100, 5)))
    lake.inbox.put("p/w/ns/t/garbage.parquet", b"not a parquet file at all")
    lake.inbox.put("p/w/ns/t/wrong.csv", b"colour,size\nred,1\n")
    midway = corrupt_second_row_group(parquet(rows(500, 20), row_group_size=10, compression="none"))
    lake.inbox.put("p/w/ns/t/midway.parquet", midway)
    request = tick(instance, lake, None).run_requests[0]
    result = run(instance, lake, request)
    meta = result.asset_materializations_for_node("ingested")[0].metadata
    assert meta["status"].value == "committed"
    assert meta["rows"].value == 5 and meta["files"].value == 1
    quarantined = {q["key"]: q for q in meta["quarantined"].value}
    assert set(quarantined) == {"p/w/ns/t/garbage.parquet", "p/w/ns/t/wrong.csv", "p/w/ns/t/midway.parquet"}
    root = lake.inbox.root
    for key in quarantined:
        moved = root / "_quarantine" / key
        assert moved.exists() and not (root / key).exists()
        assert key in Path(str(moved) + ".reason.txt").read_text()
    assert lake.catalog.reads.open_table(TABLE).count_rows() == 15
    # The quarantine is outside every table folder: the sensor never offers those files again.
    again = tick(instance, lake, None)
    assert [k for r in again.run_requests for k in keys_of(r)] == ["p/w/ns/t/good.parquet"]
    # ... and a file already ingested is skipped even in another batch (a reset cursor).
    rerun = run(instance, lake, again.run_requests[0]).asset_materializations_for_node("ingested")[0].metadata
    assert (
        rerun["status"].value == "nothing-to-do" and "already ingested" in rerun["skipped"].value[0]["reason"]
    )
    assert lake.catalog.reads.open_table(TABLE).count_rows() == 15


def test_unknown_partition_is_refused(instance, lake: Lake) -> None:
    with pytest.raises(dg.DagsterUnknownPartitionError):
        dg.materialize([ingested], partition_key="p.w.ns.nope", instance=instance, resources=lake.resources)


def test_partition_definition_is_shared(instance) -> None:
    assert instance.get_dynamic_partitions(TABLES) == [TABLE]


def test_a_non_retryable_error_fails_at_once_with_its_code(instance, lake: Lake) -> None:
    config = {"ops": {"ingested": {"config": {"files": [{"key": "p/w/ns/other/x.csv", "size": 1}]}}}}
    result = dg.materialize(
        [ingested],
        partition_key=TABLE,
        instance=instance,
        resources=lake.resources,
        run_config=config,
        raise_on_error=False,
    )
    assert not result.success
    events = [e.event_type_value for e in result.all_events]
    assert "STEP_UP_FOR_RETRY" not in events
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    assert "InvalidInput (code 13)" in str(failure.event_specific_data.error)


def test_inbox_links_that_leave_their_folder_are_quarantined_unread(
    instance, lake: Lake, tmp_path: Path
) -> None:
    secret = "TOPSECRET-4711"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "passwd").write_text(f"root:x:0:0:{secret}:/root:/bin/bash\n")
    lake.catalog.tables.create_table("p.w.ns.other", rows(0, 1).to_reader())
    lake.inbox.put("p/w/ns/other/_kept.csv", f"id,name\n900,{secret}\n".encode())  # another table's file
    lake.inbox.put("p/w/ns/t/good.csv", b"id,name\n200,x\n")
    lake.inbox.put("p/w/ns/t/.staged.csv", b"id,name\n300,y\n")
    folder = lake.inbox.root / "p/w/ns/t"
    (folder / "passwd.csv").symlink_to(outside / "passwd")
    (folder / "sibling.csv").symlink_to("../other/_kept.csv")  # inside the inbox, outside the table's folder
    (folder / "alias.csv").symlink_to(".staged.csv")  # stays in the folder: read
    request = next(r for r in tick(instance, lake, None).run_requests if r.partition_key == TABLE)
    assert sorted(keys_of(request)) == [
        f"p/w/ns/t/{n}" for n in ("alias.csv", "good.csv", "passwd.csv", "sibling.csv")
    ]

    result = run(instance, lake, request)
    assert result.success
    meta = result.asset_materializations_for_node("ingested")[0].metadata
    assert meta["status"].value == "committed" and meta["rows"].value == 2
    quarantined = {q["key"]: q["reason"] for q in meta["quarantined"].value}
    assert set(quarantined) == {"p/w/ns/t/passwd.csv", "p/w/ns/t/sibling.csv"}
    assert all("symbolic link" in reason and "outside" in reason for reason in quarantined.values())
    for key in quarantined:
        moved = lake.inbox.root / "_quarantine" / key
        assert moved.is_symlink() and not os.path.lexists(lake.inbox.root / key)
        assert secret not in Path(str(moved) + ".reason.txt").read_text()
    assert all(secret not in str(event) for event in result.all_events)
    assert (outside / "passwd").read_text().startswith("root:")  # the target is never moved or touched
    ids = sorted(lake.catalog.reads.open_table(TABLE).to_reader().read_all().column("id").to_pylist())
    assert ids == [*range(10), 200, 300]


def _reason(lake: Lake, key: str) -> str:
    return Path(str(lake.inbox.root / "_quarantine" / key) + ".reason.txt").read_text()


def test_the_sensor_applies_the_table_schema_policy(instance, lake: Lake) -> None:
    """strict (the default): a file with a new column is quarantined with the reason; the same
    kind of file lands, with its column added, once the policy is add_columns. A file whose ids
    are strings, or wider than the table's, is quarantined under every policy."""
    grown = rows(100, 2).append_column("extra", pa.array([1.5, 2.5]))
    lake.inbox.put("p/w/ns/t/grown.parquet", parquet(grown))
    lake.inbox.put("p/w/ns/t/plain.parquet", parquet(rows(200, 3)))
    result = run(instance, lake, tick(instance, lake, None).run_requests[0])
    meta = result.asset_materializations_for_node("ingested")[0].metadata
    assert meta["status"].value == "committed" and meta["rows"].value == 3
    assert [q["key"] for q in meta["quarantined"].value] == ["p/w/ns/t/grown.parquet"]
    reason = _reason(lake, "p/w/ns/t/grown.parquet")
    assert "TableSchemaValidationError" in reason and "grown.parquet" in reason and "strict" in reason
    version = lake.catalog.reads.open_table(TABLE).record.current_version

    lake.catalog.policies.set_policy("p.w.ns", {"schema_evolution": "add_columns"})
    lake.inbox.put("p/w/ns/t/grown2.parquet", parquet(grown.set_column(0, "id", pa.array([300, 301]))))
    lake.inbox.put(
        "p/w/ns/t/text_ids.parquet",
        parquet(pa.table({"id": ["400"], "name": ["n400"], "extra": [4.5]})),
    )
    lake.inbox.put("p/w/ns/t/old_shape.parquet", parquet(rows(500, 1)))  # lacks the new column
    request = tick(instance, lake, None).run_requests[0]
    evolved = run(instance, lake, request, with_checks=True)
    # The registry's schema (with the new column) equals Lance's; versions match the disk.
    assert evolved.get_asset_check_evaluations() and all(
        e.passed for e in evolved.get_asset_check_evaluations()
    )
    meta = evolved.asset_materializations_for_node("ingested")[0].metadata
    assert meta["status"].value == "committed" and meta["rows"].value == 3
    assert [q["key"] for q in meta["quarantined"].value] == ["p/w/ns/t/text_ids.parquet"]
    assert "never parsed" in _reason(lake, "p/w/ns/t/text_ids.parquet")
    snap = lake.catalog.reads.open_table(TABLE)
    assert snap.record.current_version == version + 2  # the column and the rows, one commit
    data = snap.to_reader().read_all().sort_by("id").to_pydict()
    assert data["extra"][-3:] == [1.5, 2.5, None] and data["extra"][0] is None
    entries = [e.operation for e in lake.catalog.reads.history(TABLE)][-2:]
    assert entries == ["add-columns", "append"]


def test_a_later_batch_without_an_added_column_lands_with_nulls(instance, lake: Lake) -> None:
    """Issue 49: once add_columns added ``extra``, an older producer's file that lacks it, alone
    in its batch, lands with ``extra`` null in one commit (it used to be quarantined as
    "missing column(s) extra")."""
    lake.catalog.policies.set_policy("p.w.ns", {"schema_evolution": "add_columns"})
    lake.inbox.put(
        "p/w/ns/t/grown.parquet", parquet(rows(100, 2).append_column("extra", pa.array([1.5, 2.5])))
    )
    run(instance, lake, tick(instance, lake, None).run_requests[0])
    version = lake.catalog.reads.open_table(TABLE).record.current_version
    lake.inbox.put("p/w/ns/t/old_shape.parquet", parquet(rows(200, 2)))
    result = run(instance, lake, tick(instance, lake, None).run_requests[0])
    meta = result.asset_materializations_for_node("ingested")[0].metadata
    assert meta["status"].value == "committed" and meta["rows"].value == 2
    assert meta["quarantined"].value == []
    snap = lake.catalog.reads.open_table(TABLE)
    assert snap.record.current_version == version + 1
    data = snap.to_reader().read_all().sort_by("id").to_pydict()
    assert data["extra"][-4:] == [1.5, 2.5, None, None] and data["extra"][0] is None
    assert lake.catalog.reads.history(TABLE)[-1].detail["filled_columns"] == ["extra"]


def test_a_batch_naming_one_file_twice_is_refused_by_name_unwritten(instance, lake: Lake) -> None:
    """A run launched by hand with a file listed twice: refused naming the file, before any read."""
    lake.inbox.put("p/w/ns/t/a.csv", b"id,name\n100,x\n")
    (request,) = tick(instance, lake, None).run_requests
    (listed,) = request.run_config["ops"]["ingested"]["config"]["files"]
    config = {"ops": {"ingested": {"config": {"files": [listed, listed]}}}}
    result = dg.materialize(
        [ingested],
        partition_key=TABLE,
        instance=instance,
        resources=lake.resources,
        run_config=config,
        raise_on_error=False,
    )
    assert not result.success
    assert "STEP_UP_FOR_RETRY" not in [e.event_type_value for e in result.all_events]
    (failure,) = result.get_step_failure_events()
    assert "InvalidInput (code 13): p/w/ns/t/a.csv is listed twice" in str(failure.event_specific_data.error)
    assert [e.operation for e in lake.catalog.reads.history(TABLE)] == ["create"]
    assert (lake.inbox.root / "p/w/ns/t/a.csv").exists()


def test_a_replayed_batch_shows_what_its_commit_ingested(instance, lake: Lake) -> None:
    """The batch's run ingested one of its two files (the other was gone); the same request run
    again replays that commit and shows its one file and rows, not the two requested."""
    lake.inbox.put("p/w/ns/t/a.csv", b"id,name\n100,x\n")
    lake.inbox.put("p/w/ns/t/b.csv", b"id,name\n200,y\n201,z\n")
    (request,) = tick(instance, lake, None).run_requests
    (lake.inbox.root / "p/w/ns/t/a.csv").unlink()
    shown = []
    for _ in range(2):
        meta = run(instance, lake, request).asset_materializations_for_node("ingested")[0].metadata
        files = [f["key"] for f in meta["ingested_files"].value]
        shown.append((meta["status"].value, meta["files"].value, files, meta["rows"].value))
    assert shown == [
        ("committed", 1, ["p/w/ns/t/b.csv"], 2),
        ("replayed", 1, ["p/w/ns/t/b.csv"], 2),
    ]
    assert lake.catalog.reads.open_table(TABLE).count_rows() == 12


@pytest.mark.parametrize(
    "cursor",
    [
        "garbage",
        "[]",
        '{"tables": 5}',
        '{"tables": {"p.w.ns.t": 5}}',
        '{"last": 7}',
        '{"tables": {"p.w.ns.t": "zzz"}}',
    ],
)
def test_a_cursor_set_by_hand_that_the_sensor_never_wrote_is_refused_by_name(
    instance, lake: Lake, cursor: str
) -> None:
    """An operator's edit of the sensor's cursor in the UI: the tick fails saying so, and
    requests nothing."""
    lake.inbox.put("p/w/ns/t/a.csv", b"id,name\n100,x\n")
    with pytest.raises(InvalidInput, match="inbox sensor's cursor"):
        tick(instance, lake, cursor)
