"""Tags go through the write gate like every other commit (issue 11, defect 5).

A tag is a promise that its version survives cleanup, so a tag and cleanup's choice of doomed
versions must be serialized: both hold the table's lease, and the tag's registry commit is fenced
by it. The interleavings are driven through hook points, never by sleeping.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.engine import lance_engine as engine
from lake_platform.errors import (
    ConcurrentModification,
    InvalidInput,
    LeaseExpired,
    LeaseUnavailable,
    TableTagAlreadyExists,
    TableTagNotFound,
    TableVersionNotFound,
)
from lake_platform.registry import keys
from lake_platform.registry.records import VersionRecord, decode
from lake_platform.settings import LakeSettings
from lake_platform_tests.catalog.conftest import Lake, rows
from lake_platform_tests.doubles import ManualClock

T = "p.w.ns.t"


def quick_cleanup(settings: LakeSettings, **more: Any) -> LakeSettings:
    """Settings under which every superseded version is old enough to clean up."""
    return settings.model_copy(
        update={"ticket_lifetime_seconds": 0.001, "reader_max_stale_seconds": 0.0, **more}
    )


@pytest.fixture
def table(lake: Lake) -> Iterator[Lake]:
    """``T`` with versions 1..4."""
    lake.catalog.tables.create_table(T, rows([1]))
    for i in (2, 3, 4):
        lake.catalog.tables.append(T, rows([i]))
    yield lake


def registered(catalog: Catalog, name: str = T) -> dict[int, VersionRecord]:
    incarnation = catalog.reads.open_table(name).record.incarnation
    return {
        r.version: r
        for r in (
            decode(VersionRecord, i.value, i.key)
            for i in catalog.store.scan_prefix(keys.versions(incarnation))
        )
    }


def engine_tags(catalog: Catalog, name: str = T) -> dict[str, int]:
    return engine.tagged_versions(catalog.reads.open_table(name).dataset)


def registry_tags(catalog: Catalog, name: str = T) -> dict[str, int]:
    return {tag: v.version for v in registered(catalog, name).values() for tag in v.tags}


def assert_no_tag_points_at_a_deleted_version(catalog: Catalog) -> None:
    live = set(registered(catalog))
    assert set(engine_tags(catalog).values()) <= live
    assert set(registry_tags(catalog).values()) <= live
    for tag, version in engine_tags(catalog).items():
        assert catalog.reads.open_table(T, version).count_rows() == version, tag  # v<n> holds rows 1..n


class Pause:
    """A hook that stops the operation at ``point`` until released."""

    def __init__(self, point: str) -> None:
        self.point = point
        self.reached = threading.Event()
        self.release = threading.Event()

    def __call__(self, point: str) -> None:
        if point == self.point:
            self.reached.set()
            assert self.release.wait(30), f"{point} was never released"


class Background:
    def __init__(self, fn: Any, *args: Any, **kwargs: Any) -> None:
        self.outcome: list[Any] = []

        def run() -> None:
            try:
                self.outcome.append(fn(*args, **kwargs))
            except BaseException as exc:  # noqa: BLE001 - handed to the test
                self.outcome.append(exc)

        self.thread = threading.Thread(target=run)
        self.thread.start()

    def result(self) -> Any:
        self.thread.join(60)
        assert not self.thread.is_alive()
        return self.outcome[0]


def test_cleanup_then_tag_interleaving(table: Lake) -> None:
    """cleanup/tag: a tag asked for while cleanup sits between choosing its doomed versions and
    deleting them does not land; once cleanup has removed the version, the tag fails typed."""
    settings = quick_cleanup(table.settings)
    pause = Pause("cleanup:chose-versions")
    cleaner = Catalog(settings, hook=pause)
    impatient = Catalog(settings.model_copy(update={"lease_wait_seconds": 0.0}))
    try:
        cleanup = Background(cleaner.versions.cleanup, T, retention=timedelta(0), retain_versions=1)
        assert pause.reached.wait(30)
        # Cleanup holds the lease and has chosen 1, 2 and 3: a tag on 2 must not land now.
        with pytest.raises(LeaseUnavailable):
            impatient.tags.create_tag(T, "keep", 2)
        patient = Background(table.catalog.tags.create_tag, T, "late", 2)
        pause.release.set()
        done = cleanup.result()
        assert done.status == "committed" and done.detail["versions_removed"] == [1, 2, 3]
        late = patient.result()
        assert isinstance(late, TableVersionNotFound), late
        with pytest.raises(TableVersionNotFound):
            impatient.tags.create_tag(T, "keep", 2)
        assert engine_tags(table.catalog) == {} and registry_tags(table.catalog) == {}
        assert_no_tag_points_at_a_deleted_version(table.catalog)
        assert [e.operation for e in table.catalog.reads.history(T)].count("tag") == 0
    finally:
        cleaner.close()
        impatient.close()


def test_tag_then_cleanup_keeps_the_version(table: Lake) -> None:
    """The other order: a tag that committed before cleanup took the lease is seen by its choice."""
    settings = quick_cleanup(table.settings)
    pause = Pause("tag:before-commit")
    tagger = Catalog(settings, hook=pause)
    impatient_cleaner = Catalog(settings.model_copy(update={"lease_wait_seconds": 0.0}))
    try:
        tag = Background(tagger.tags.create_tag, T, "keep", 2)
        assert pause.reached.wait(30)
        with pytest.raises(LeaseUnavailable):  # the tag holds the lease until it has committed
            impatient_cleaner.versions.cleanup(T, retention=timedelta(0))
        pause.release.set()
        assert tag.result() == 2
        done = impatient_cleaner.versions.cleanup(T, retention=timedelta(0))
        assert done.detail["versions_removed"] == [1, 3] and done.detail["tagged_kept"] == [2]
        assert engine_tags(table.catalog) == {"keep": 2} and registry_tags(table.catalog) == {"keep": 2}
        assert_no_tag_points_at_a_deleted_version(table.catalog)
    finally:
        tagger.close()
        impatient_cleaner.close()


def test_a_tagger_whose_lease_was_taken_over_cannot_commit(table: Lake) -> None:
    """The fence, not the tagger's clock: a tagger that stalls past its deadline (its own clock
    says it still has time) is refused by the registry once another writer took the lease."""
    start = ManualClock()
    tagger_clock = ManualClock(start.monotonic(), start.wall_ms())
    pause = Pause("tag:before-commit")
    tagger = Catalog(table.settings, clock=tagger_clock, heartbeat=False, hook=pause)
    later = ManualClock(start.monotonic(), start.wall_ms())
    later.advance(table.settings.lease_ttl_seconds + 1)
    taker = Catalog(table.settings, clock=later, heartbeat=False)
    try:
        tag = Background(tagger.tags.create_tag, T, "gold", 1)
        assert pause.reached.wait(30)
        incarnation = table.catalog.reads.open_table(T).record.incarnation
        taken = taker.gate.acquire(incarnation)  # past the deadline on everyone else's clock
        pause.release.set()
        refused = tag.result()
        assert isinstance(refused, LeaseExpired), refused
        assert engine_tags(table.catalog) == {} and registry_tags(table.catalog) == {}
        assert "tag" not in [e.operation for e in table.catalog.reads.history(T)]
        taker.gate.release(taken)
    finally:
        tagger.close()
        taker.close()


def test_tag_of_a_cleaned_up_version_is_a_typed_error(table: Lake) -> None:
    cleaner = Catalog(quick_cleanup(table.settings))
    try:
        cleaner.versions.cleanup(T, retention=timedelta(0))
    finally:
        cleaner.close()
    before = table.catalog.reads.history(T)
    with pytest.raises(TableVersionNotFound, match="version 2"):
        table.catalog.tags.create_tag(T, "keep", 2)
    assert table.catalog.reads.history(T) == before and engine_tags(table.catalog) == {}


def test_tags_are_recorded_in_the_registry(table: Lake) -> None:
    catalog = table.catalog
    assert catalog.tags.create_tag(T, "keep", 2) == 2
    assert catalog.tags.create_tag(T, "head") == 4
    assert registry_tags(catalog) == engine_tags(catalog) == {"keep": 2, "head": 4}
    with pytest.raises(TableTagAlreadyExists):
        catalog.tags.create_tag(T, "keep", 3)
    assert catalog.tags.create_tag(T, "keep", 3, replace=True) == 3  # moves in one registry commit
    assert registry_tags(catalog) == engine_tags(catalog) == {"keep": 3, "head": 4}
    catalog.tags.delete_tag(T, "keep")
    assert registry_tags(catalog) == engine_tags(catalog) == {"head": 4}
    with pytest.raises(TableTagNotFound):
        catalog.tags.delete_tag(T, "keep")
    with pytest.raises(TableTagNotFound):
        catalog.tags.create_tag(T, "nope", 2, replace=True)
    assert [e.operation for e in catalog.reads.history(T)][-4:] == ["tag", "tag", "tag", "untag"]


def test_delete_tag_waits_for_the_lease(table: Lake) -> None:
    table.catalog.tags.create_tag(T, "keep", 2)
    impatient = Catalog(table.settings.model_copy(update={"lease_wait_seconds": 0.0}))
    try:
        incarnation = table.catalog.reads.open_table(T).record.incarnation
        with table.catalog.gate.hold(incarnation):
            with pytest.raises(LeaseUnavailable):
                impatient.tags.delete_tag(T, "keep")
        assert registry_tags(table.catalog) == engine_tags(table.catalog) == {"keep": 2}
        impatient.tags.delete_tag(T, "keep")
        assert registry_tags(table.catalog) == engine_tags(table.catalog) == {}
    finally:
        impatient.close()


def test_tags_made_before_the_registry_recorded_them_still_count(table: Lake) -> None:
    """Older releases kept tags only in Lance: cleanup still keeps their versions, and they can
    still be deleted and replaced."""
    catalog = table.catalog
    engine.create_tag(catalog.reads.open_table(T, 2).dataset, "legacy", 2)
    assert registry_tags(catalog) == {} and engine_tags(catalog) == {"legacy": 2}
    cleaner = Catalog(quick_cleanup(table.settings))
    try:
        done = cleaner.versions.cleanup(T, retention=timedelta(0))
    finally:
        cleaner.close()
    assert done.detail["versions_removed"] == [1, 3] and done.detail["tagged_kept"] == [2]
    with pytest.raises(TableTagAlreadyExists):
        catalog.tags.create_tag(T, "legacy", 4)
    catalog.tags.create_tag(T, "legacy", 4, replace=True)
    assert registry_tags(catalog) == engine_tags(catalog) == {"legacy": 4}
    catalog.tags.delete_tag(T, "legacy")
    assert registry_tags(catalog) == engine_tags(catalog) == {}


def test_a_version_record_without_tags_still_reads() -> None:
    old = (
        b'{"record_version": 1, "incarnation": "i", "version": 3, "manifest_path": "m", "committed_at_ms": 5}'
    )
    assert decode(VersionRecord, old).tags == []


def test_cleanup_never_deletes_a_version_record_that_carries_a_tag(table: Lake) -> None:
    """The second line: should a tag ever reach a version record without the lease (a writer
    from outside the catalog), cleanup refuses to delete that record rather than orphan it."""
    catalog = table.catalog
    incarnation = catalog.reads.open_table(T).record.incarnation

    def sneak_tag(point: str) -> None:
        if point == "cleanup:chose-versions":
            item = catalog.store.get(keys.version(incarnation, 2))
            assert item is not None
            ver = decode(VersionRecord, item.value, item.key)
            rogue = ver.model_copy(update={"tags": ["rogue"]})
            catalog.store.compare_and_swap(item.key, item.revision, rogue.encode())

    cleaner = Catalog(quick_cleanup(table.settings), hook=sneak_tag)
    try:
        with pytest.raises(ConcurrentModification, match="version 2 was tagged"):
            cleaner.versions.cleanup(T, retention=timedelta(0))
    finally:
        cleaner.close()
    assert sorted(registered(catalog)) == [1, 2, 3, 4]
    assert [catalog.reads.open_table(T, v).count_rows() for v in (1, 2, 3, 4)] == [1, 2, 3, 4]


@pytest.mark.parametrize(
    "tag, version, error",
    [
        ("Bad.Name", 2, InvalidInput),
        ("", 2, InvalidInput),
        ("ok", 0, InvalidInput),
        ("ok", True, InvalidInput),
        ("ok", "2", InvalidInput),
        ("ok", 99, TableVersionNotFound),
    ],
)
def test_bad_tag_requests_are_typed_and_change_nothing(
    table: Lake, tag: Any, version: Any, error: type[Exception]
) -> None:
    before = table.catalog.reads.history(T)
    with pytest.raises(error):
        table.catalog.tags.create_tag(T, tag, version)
    assert table.catalog.reads.history(T) == before
    assert registry_tags(table.catalog) == engine_tags(table.catalog) == {}


def test_a_tag_interrupted_before_lances_copy_is_finished_by_a_retry(table: Lake) -> None:
    def crash(point: str) -> None:
        if point == "tag:after-commit":
            raise ConnectionError("process died before writing Lance's tag")

    interrupted = Catalog(table.settings, hook=crash)
    try:
        with pytest.raises(ConnectionError):
            interrupted.tags.create_tag(T, "keep", 2)
    finally:
        interrupted.close()
    # The registry committed it: cleanup already keeps version 2.
    assert registry_tags(table.catalog) == {"keep": 2} and engine_tags(table.catalog) == {}
    assert table.catalog.tags.create_tag(T, "keep", 2) == 2
    assert registry_tags(table.catalog) == engine_tags(table.catalog) == {"keep": 2}
    with pytest.raises(TableTagAlreadyExists):
        table.catalog.tags.create_tag(T, "keep", 2)


def test_list_tags_answers_from_the_registry_without_opening_the_dataset(table: Lake) -> None:
    table.catalog.tags.create_tag(T, "gold", 2)
    table.catalog.tags.create_tag(T, "alpha")
    table.catalog.tags.delete_tag(T, "alpha")
    table.catalog.tags.create_tag(T, "beta", 3)
    location = table.catalog.reads.open_table(T).record.location
    engine.remove_table(location, table.settings.storage_options(location))  # nothing left to open
    assert table.catalog.tags.list_tags(T) == {"beta": 3, "gold": 2}
    with pytest.raises(InvalidInput):
        table.catalog.tags.list_tags("Not A Table")
