"""Opening a pinned snapshot while its writer is still publishing the manifest: a writer links
the manifest to its canonical path right after the registry commit, so a query planned in
between finds the version registered and its file not there yet. Such a read waits for the file
(a version committed within ``PUBLISH_GRACE_SECONDS``); an older missing version is gone at once.
"""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path
from typing import Any

import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.errors import TableVersionNotFound
from lake_platform.query import providers
from lake_platform.query.engine import QueryEngine
from lake_platform.query.limits import QueryLimits
from lake_platform.query.snapshot import TableRef, load_snapshot

SQL = "SELECT * FROM w.ns.t"


def current_ref(engine: QueryEngine, catalog: Catalog) -> TableRef:
    return next(iter(engine.plan(SQL, load_snapshot(catalog.store).project("p")).refs))


def manifest_file(ref: TableRef) -> Path:
    return Path(ref.location) / "_versions" / Path(ref.manifest_path).name


def rows(engine: QueryEngine, ref: TableRef) -> int:
    return sum(b.num_rows for b in engine.stream(engine.plan_pinned(SQL, (ref,))))


@pytest.fixture
def engine(lake: tuple[Any, Catalog]) -> QueryEngine:
    return QueryEngine(lake[0], QueryLimits(dataset_cache_size=0))  # every plan opens the snapshot


def test_a_read_waits_for_the_manifest_of_a_version_being_published(
    lake: tuple[Any, Catalog], engine: QueryEngine
) -> None:
    ref = current_ref(engine, lake[1])
    just_committed = dataclasses.replace(ref, committed_at_ms=int(time.time() * 1000))
    path = manifest_file(ref)
    aside = path.with_name(path.name + ".publishing")
    waits: list[float] = []

    def publish_during_the_wait(seconds: float) -> None:
        waits.append(seconds)
        os.rename(aside, path)  # the writer's link lands while the read waits

    os.rename(path, aside)
    try:
        engine.providers.pause = publish_during_the_wait
        assert rows(engine, just_committed) == 1000
    finally:
        if aside.exists():
            os.rename(aside, path)
    assert len(waits) == 1 and waits[0] <= 0.01  # the first check comes after a few milliseconds


def test_an_old_version_without_its_manifest_is_gone_at_once(
    lake: tuple[Any, Catalog], engine: QueryEngine
) -> None:
    ref = current_ref(engine, lake[1])
    old = dataclasses.replace(ref, committed_at_ms=int(time.time() * 1000) - 60_000)
    path = manifest_file(ref)
    aside = path.with_name(path.name + ".gone")
    waits: list[float] = []
    os.rename(path, aside)
    try:
        engine.providers.pause = waits.append
        with pytest.raises(TableVersionNotFound, match="no longer available"):
            engine.plan_pinned(SQL, (old,))
    finally:
        os.rename(aside, path)
    assert waits == []


def test_a_version_whose_manifest_never_arrives_is_gone_after_the_grace(
    lake: tuple[Any, Catalog], engine: QueryEngine
) -> None:
    ref = current_ref(engine, lake[1])
    # Committed all but the last 50 ms of the grace ago: the read waits out those 50 ms.
    committed = time.time() - (providers.PUBLISH_GRACE_SECONDS - 0.05)
    stopped = dataclasses.replace(ref, committed_at_ms=int(committed * 1000))
    waits: list[float] = []

    def pause(seconds: float) -> None:
        waits.append(seconds)
        time.sleep(seconds)

    engine.providers.pause = pause
    path = manifest_file(ref)
    aside = path.with_name(path.name + ".stopped")
    os.rename(path, aside)
    try:
        with pytest.raises(TableVersionNotFound, match="no longer available"):
            engine.plan_pinned(SQL, (stopped,))
    finally:
        os.rename(aside, path)
    assert waits and sum(waits) <= 0.05  # it waited, for what was left of the grace only
    assert rows(engine, ref) == 1000  # nothing else changed
