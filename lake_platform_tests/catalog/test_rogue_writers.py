"""Rogue writers: data written around the registry never becomes visible through it.

A plain pylance write on a table's location, a stray manifest dropped into ``_versions/``, a
version file deleted behind the registry's back, and a writer killed between its registry
commit and manifest finalization. Reads and writes through the catalog must never see or build
on any of it, must not become permanently unable to write, and an open must never write to
storage. (Reporting these states is the asset checks' job; see ``defs/checks.py``.)
"""

from __future__ import annotations

import lance  # the tests play the rogue writer; the package never writes around the registry
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.catalog.pylance_namespace import LakeNamespace
from lake_platform.engine import lance_engine as engine
from lake_platform.errors import InvalidTableState
from lake_platform.query.engine import QueryEngine, QueryLimits
from lake_platform.query.snapshot import load_snapshot
from lake_platform.registry import keys
from lake_platform.registry.records import VersionRecord, decode
from lake_platform_tests.catalog.conftest import Lake, ids_of, rows

T = "p.w.ns.t"


def storage(lake: Lake, location: str) -> dict[str, str] | None:
    return lake.settings.storage_options(location) or None


def files(lake: Lake, location: str) -> list[str]:
    return sorted(f.path for f in engine.list_files(location, storage(lake, location)))


def manifests(lake: Lake, location: str) -> list[str]:
    return [p for p in files(lake, location) if p.startswith("_versions/")]


def rogue_append(lake: Lake, location: str, ids: list[int]) -> None:
    """A writer that bypasses the registry: plain pylance on the table's folder."""
    lance.write_dataset(
        rows(ids, tag="rogue"), location, mode="append", storage_options=storage(lake, location)
    )


def version_record(catalog: Catalog, table: str, version: int) -> VersionRecord:
    record = catalog.reads.open_table(table, 1).record
    item = catalog.store.get(keys.version(record.incarnation, version))
    assert item is not None
    return decode(VersionRecord, item.value, item.key)


def copy_object(lake: Lake, location: str, src: str, dst: str) -> None:
    """Copy one file inside a table location (local folder or S3)."""
    fs, root = engine.filesystem(location, storage(lake, location))
    fs.copy_file(f"{root}/{src}", f"{root}/{dst}")


def delete_object(lake: Lake, location: str, path: str) -> None:
    fs, root = engine.filesystem(location, storage(lake, location))
    fs.delete_file(f"{root}/{path}")


def v2_name(version: int) -> str:
    return f"_versions/{(1 << 64) - 1 - version:020d}.manifest"


# == defect 1: an unregistered version is never folded into the next commit ===================


def test_a_rogue_append_is_not_folded_into_the_next_registered_commit(lake: Lake) -> None:
    lake.catalog.tables.create_table(T, rows([1]))
    location = lake.catalog.reads.open_table(T).record.location
    rogue_append(lake, location, [99])
    assert engine.versions_on_disk(location, storage(lake, location)) == [1, 2]

    result = lake.catalog.tables.append(T, rows([2]))

    # Built on the registered version 1, numbered right after it, without the rogue row.
    assert (result.from_version, result.to_version) == (1, 2)
    assert ids_of(lake.catalog.reads.open_table(T)) == [1, 2]
    # The rogue manifest was moved aside, not deleted, and the commit log says so: a bypass
    # entry naming the version, and the append that found it.
    assert [(e.operation, e.from_version, e.to_version) for e in lake.catalog.reads.history(T)] == [
        ("create", 0, 1),
        ("bypass", 1, None),
        ("append", 1, 2),
    ]
    assert lake.catalog.reads.history(T)[1].detail["versions"] == [2]
    entry = lake.catalog.reads.history(T)[-1]
    assert entry.detail["quarantined_manifests"] == [v2_name(2)]
    quarantined = [p for p in files(lake, location) if p.startswith("_quarantine/")]
    assert len(quarantined) == 1 and quarantined[0].endswith(v2_name(2))
    assert engine.versions_on_disk(location, storage(lake, location)) == [1, 2]
    # And the table goes on working.
    assert lake.catalog.tables.append(T, rows([3])).to_version == 3
    assert ids_of(lake.catalog.reads.open_table(T)) == [1, 2, 3]


@pytest.mark.parametrize("leased", [True, False], ids=["leased", "last-writer"])
def test_a_stray_manifest_far_ahead_and_in_v1_naming_is_never_built_on(lake: Lake, leased: bool) -> None:
    """A hand-placed ``_versions/7.manifest`` (a copy of an unregistered version) leaves a gap:
    Lance would take the highest manifest on disk as its base and number the commit after it.
    A writer under the lease moves it aside before writing (its settle); the table's last
    writer, appending without acquiring the lease, lists nothing, but its commit is still
    built on the registered version (anything else is refused and written again under the
    lease), and the stray is moved aside by the next settle (here: ``repair``)."""
    lake.catalog.tables.create_table(T, rows([1]))
    location = lake.catalog.reads.open_table(T).record.location
    rogue_append(lake, location, [99])
    copy_object(lake, location, v2_name(2), "_versions/7.manifest")
    delete_object(lake, location, v2_name(2))
    assert engine.versions_on_disk(location, storage(lake, location)) == [1, 7]

    writer = lake.new_catalog() if leased else lake.catalog
    try:
        result = writer.tables.append(T, rows([2]))
    finally:
        if leased:
            writer.close()

    assert (result.from_version, result.to_version) == (1, 2)
    assert ids_of(lake.catalog.reads.open_table(T)) == [1, 2]
    if not leased:
        lake.catalog.manifests.repair_table(T)
    assert sorted(v for v in engine.versions_on_disk(location, storage(lake, location))) == [1, 2]
    assert ids_of(lake.catalog.reads.open_table(T, 1)) == [1]


def test_a_rogue_commit_racing_the_write_is_refused_and_the_table_stays_writable(lake: Lake) -> None:
    """A rogue version that appears after the writer checked storage (here: during the write)
    makes Lance build on it. The registry refuses that commit: nothing registered, a typed
    error naming the problem, the rogue manifest moved aside, and the next write succeeds."""
    lake.catalog.tables.create_table(T, rows([1]))
    location = lake.catalog.reads.open_table(T).record.location

    def rogue_during_write(point: str) -> None:
        if point == "append:before-write":
            rogue_append(lake, location, [99])

    racing = lake.new_catalog(hook=rogue_during_write)
    try:
        with pytest.raises(InvalidTableState, match=r"not built on the registered version 1"):
            racing.tables.append(T, rows([2]))
    finally:
        racing.close()
    assert lake.catalog.reads.describe_table(T, with_stats=False).current_version == 1
    # Nothing registered; the rogue version moved aside is reported in the history.
    assert [(e.operation, e.to_version) for e in lake.catalog.reads.history(T)] == [
        ("create", 1),
        ("bypass", None),
    ]
    assert ids_of(lake.catalog.reads.open_table(T)) == [1]

    assert lake.catalog.tables.append(T, rows([2])).to_version == 2
    assert ids_of(lake.catalog.reads.open_table(T)) == [1, 2]


def test_overwrite_and_delete_never_build_on_a_rogue_version(lake: Lake) -> None:
    lake.catalog.tables.create_table(T, rows([1, 2, 3]))
    location = lake.catalog.reads.open_table(T).record.location
    rogue_append(lake, location, [99])
    deleted = lake.catalog.tables.delete_rows(T, "id = 2")
    assert deleted.to_version == 2 and ids_of(lake.catalog.reads.open_table(T)) == [1, 3]
    rogue_append(lake, location, [98])
    overwritten = lake.catalog.tables.overwrite(T, rows([7]))
    assert overwritten.to_version == 3 and ids_of(lake.catalog.reads.open_table(T)) == [7]
    assert [e.rows_removed for e in lake.catalog.reads.history(T) if e.operation == "overwrite"] == [2]


def test_a_pylance_client_commit_over_a_rogue_manifest_is_refused_then_lands(lake: Lake) -> None:
    """A pylance client committing through the catalog's namespace lists the folder itself, so
    no catalog-side settle runs first: the registry refuses the off-base commit (Lance reports
    it as an unknown outcome and does not retry), quarantines the rogue manifest, and the
    client's retry lands on top of the registered version."""
    lake.catalog.tables.create_table(T, rows([1]))
    location = lake.catalog.reads.open_table(T).record.location
    rogue_append(lake, location, [99])
    client = LakeNamespace(lake.catalog)
    with pytest.raises(OSError, match="Commit result for version 3"):
        lance.write_dataset(
            rows([2]),
            namespace_client=client,
            table_id=T.split("."),
            mode="append",
            storage_options=storage(lake, location),
        )
    assert lake.catalog.reads.describe_table(T, with_stats=False).current_version == 1
    lance.write_dataset(
        rows([2]),
        namespace_client=client,
        table_id=T.split("."),
        mode="append",
        storage_options=storage(lake, location),
    )
    assert ids_of(lake.catalog.reads.open_table(T)) == [1, 2]
    assert [(e.operation, e.to_version) for e in lake.catalog.reads.history(T)] == [
        ("create", 1),
        ("bypass", None),
        ("append", 2),
    ]


# == a version file deleted behind the registry's back ======================================


def test_a_deleted_version_file_is_a_typed_error_not_a_fallback(lake: Lake) -> None:
    lake.catalog.tables.create_table(T, rows([1]))
    lake.catalog.tables.append(T, rows([2]))
    record = lake.catalog.reads.open_table(T).record
    ver = version_record(lake.catalog, T, 2)
    delete_object(lake, record.location, ver.manifest_path.split(".lance/", 1)[1])
    before = files(lake, record.location)

    with pytest.raises(InvalidTableState, match=r"version 2 of p\.w\.ns\.t .*missing"):
        lake.catalog.reads.open_table(T)
    with pytest.raises(InvalidTableState, match=r"version 2 of p\.w\.ns\.t .*missing"):
        lake.catalog.tables.append(T, rows([3]))
    assert ids_of(lake.catalog.reads.open_table(T, 1)) == [1]  # other versions still open
    assert lake.catalog.reads.describe_table(T, with_stats=False).current_version == 2
    assert files(lake, record.location) == before  # the refused append wrote nothing


# == defect 9: a kill between the registry commit and finalization ==========================


class _KillBeforeFinalize:
    """Stops the writer right after its registry commit, before it tidies up (what a SIGKILL
    there leaves behind)."""

    def __call__(self, point: str) -> None:
        if point.endswith(":after-write"):
            raise KeyboardInterrupt("killed between the registry commit and finalization")


def _interrupted_append(lake: Lake) -> str:
    lake.catalog.tables.create_table(T, rows([1]))
    killed = lake.new_catalog(hook=_KillBeforeFinalize())
    try:
        with pytest.raises(KeyboardInterrupt):
            killed.tables.append(T, rows([2]))
    finally:
        killed.close()
    return lake.catalog.reads.open_table(T, 1).record.location


def _as_left_by_older_writers(lake: Lake, location: str, *, canonical: bool) -> None:
    """Put version 2 in the state a writer stopped before finalization left it in before
    manifests were published ahead of the registry commit: the record names the staging
    manifest; the canonical one exists only if some open has since "finished" the commit."""
    record = lake.catalog.reads.open_table(T, 1).record
    key = keys.version(record.incarnation, 2)
    item = lake.catalog.store.get(key)
    assert item is not None
    ver = decode(VersionRecord, item.value, item.key)
    staging = next(p for p in manifests(lake, location) if p.startswith(v2_name(2) + "-"))
    prefix = ver.manifest_path.rsplit("/_versions/", 1)[0]
    lake.catalog.store.compare_and_swap(
        key, item.revision, ver.model_copy(update={"manifest_path": f"{prefix}/{staging}"}).encode()
    )
    if not canonical:
        delete_object(lake, location, v2_name(2))


def test_a_writer_killed_after_its_registry_commit_leaves_a_version_that_opens_without_writes(
    lake: Lake,
) -> None:
    location = _interrupted_append(lake)
    ver = version_record(lake.catalog, T, 2)
    assert ver.manifest_path.endswith(v2_name(2)[len("_versions") :])  # the registry never names staging
    before = files(lake, location)
    for _ in range(3):
        assert ids_of(lake.catalog.reads.open_table(T)) == [1, 2]
        assert lake.catalog.reads.describe_table(T).rows == 2
    query = QueryEngine(lake.settings, QueryLimits(dataset_cache_size=0))
    for _ in range(2):
        planned = query.plan("SELECT * FROM w.ns.t", load_snapshot(lake.catalog.store).project("p"))
        assert sum(b.num_rows for b in query.stream(planned)) == 2
    assert files(lake, location) == before
    assert lake.catalog.tables.append(T, rows([3])).to_version == 3


def test_opening_a_version_left_at_its_staging_manifest_never_writes(lake: Lake) -> None:
    location = _interrupted_append(lake)
    _as_left_by_older_writers(lake, location, canonical=True)
    before = files(lake, location)
    for _ in range(3):
        assert ids_of(lake.catalog.reads.open_table(T)) == [1, 2]
    query = QueryEngine(lake.settings, QueryLimits(dataset_cache_size=0))
    for _ in range(2):
        planned = query.plan("SELECT * FROM w.ns.t", load_snapshot(lake.catalog.store).project("p"))
        assert sum(b.num_rows for b in query.stream(planned)) == 2
    assert files(lake, location) == before


def test_the_next_writer_finishes_a_version_left_at_its_staging_manifest(lake: Lake) -> None:
    location = _interrupted_append(lake)
    _as_left_by_older_writers(lake, location, canonical=False)
    before = files(lake, location)
    with pytest.raises(InvalidTableState, match=r"version 2 of p\.w\.ns\.t .*not finalized"):
        lake.catalog.reads.open_table(T)  # a reader cannot open it without writing: it refuses
    assert files(lake, location) == before

    assert lake.catalog.tables.append(T, rows([3])).to_version == 3
    for version in (2, 3):
        assert version_record(lake.catalog, T, version).manifest_path.endswith(
            v2_name(version)[len("_versions") :]
        )
    assert not any(".manifest-" in p or "#" in p for p in manifests(lake, location))
    assert ids_of(lake.catalog.reads.open_table(T, 2)) == [1, 2]
    assert ids_of(lake.catalog.reads.open_table(T)) == [1, 2, 3]


def test_repair_finishes_a_version_left_at_its_staging_manifest(lake: Lake) -> None:
    location = _interrupted_append(lake)
    _as_left_by_older_writers(lake, location, canonical=False)
    assert lake.catalog.manifests.repair_table(T) == {"finalized": [2], "quarantined": [], "branches": {}}
    assert version_record(lake.catalog, T, 2).manifest_path.endswith(v2_name(2)[len("_versions") :])
    assert not any(".manifest-" in p for p in manifests(lake, location))
    assert ids_of(lake.catalog.reads.open_table(T)) == [1, 2]
    assert lake.catalog.manifests.repair_table(T) == {
        "finalized": [],
        "quarantined": [],
        "branches": {},
    }  # idempotent


def test_a_stray_manifest_on_an_unfinalized_versions_canonical_path_is_never_opened(lake: Lake) -> None:
    """A manifest dropped at the canonical path of a version the registry still holds at its
    staging manifest is not that version: readers refuse rather than open it, and the next
    writer moves it aside and publishes the registered one."""
    location = _interrupted_append(lake)
    _as_left_by_older_writers(lake, location, canonical=False)
    copy_object(lake, location, v2_name(1), v2_name(2))  # version 1's manifest posing as version 2
    with pytest.raises(InvalidTableState, match=r"version 2 of p\.w\.ns\.t .*not finalized"):
        lake.catalog.reads.open_table(T)
    with pytest.raises(InvalidTableState, match=r"manifest written around the registry"):
        lake.catalog.manifests.finish_versions(T)  # without the lease it moves nothing

    assert lake.catalog.tables.append(T, rows([3])).to_version == 3
    assert ids_of(lake.catalog.reads.open_table(T, 2)) == [1, 2]
    assert ids_of(lake.catalog.reads.open_table(T)) == [1, 2, 3]
    assert any(p.startswith("_quarantine/") and p.endswith(v2_name(2)) for p in files(lake, location))
