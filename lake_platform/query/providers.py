"""Table providers of exact snapshots, opened once and kept in a bounded LRU cache.

A table version is immutable, so a provider opened for ``(location, incarnation, version)``
serves every later query of that snapshot. Opening reads nothing from the registry: the ref
names the version, and Lance reads its canonical manifest (``engine.pinned``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from datafusion.catalog import Table

from lake_platform.engine import lance_engine as engine
from lake_platform.engine.pinned import open_pinned
from lake_platform.errors import InvalidTableState, ServiceUnavailable, Unsupported
from lake_platform.lru import BoundedLRU
from lake_platform.query.errors import gone, is_missing
from lake_platform.query.snapshot import TableRef
from lake_platform.settings import LakeSettings

log = logging.getLogger(__name__)

#: How long after its commit a version's manifest may still be on its way to its canonical path
#: (the writer links it right after the registry commit); a read waits that long for it.
PUBLISH_GRACE_SECONDS = engine.PUBLISH_GRACE_SECONDS


class Providers:
    """Opened snapshots: (dataset, provider, DataFusion Table) per exact snapshot. Thread-safe."""

    def __init__(self, settings: LakeSettings, capacity: int) -> None:
        self.settings = settings
        self.capacity = capacity  # 0: nothing is kept
        self._opened: BoundedLRU[tuple[str, str, str, int], tuple[Any, Any, Table]] = BoundedLRU(capacity)
        self.opens = 0
        #: How a read waits between checks for a manifest being published (``time.sleep``; one
        #: may be set in its place to observe or shorten the waits).
        self.pause: Callable[[float], None] = time.sleep

    def entry(self, ref: TableRef, verify: bool) -> tuple[Any, Any, Table]:
        """``ref``'s (dataset, provider, Table), opened now unless cached.

        ``verify``: when the entry comes from the cache, first check that the snapshot still
        exists (its manifest is still on storage), so a cleaned-up version fails here as it
        would on a replica that never opened it."""
        hit = self._opened.get(ref.key)
        if hit is not None:
            if verify:
                self._check_exists(ref)
            return hit
        opener = _OPENERS.get(ref.engine)
        if opener is None:
            raise Unsupported(
                f"table {ref.name} is stored with engine {ref.engine!r}, which this server cannot read"
            )
        dataset = opener(self, ref)
        provider = engine.table_provider(dataset)
        entry = (dataset, provider, Table(provider))
        self.opens += 1
        self._opened.put(ref.key, entry)
        return entry

    def __len__(self) -> int:
        return len(self._opened)

    def _open_lance(self, ref: TableRef) -> Any:
        storage = self.settings.storage_options(ref.location)
        # Never open a staging manifest: Lance would "finish the commit" by writing to storage,
        # on every open. The canonical manifest is the same version, content-identical.
        candidate = canonical_manifest(ref) if ref.staging else ref
        opened = self._open_at(candidate, ref, storage)
        if opened is None and self._await_publish(candidate, ref, storage):
            opened = self._open_at(candidate, ref, storage)
        if opened is not None:
            return opened
        if ref.staging and _manifest_exists(ref, storage):
            raise InvalidTableState(
                f"version {ref.version} of {ref.name} is committed but not finalized; "
                "the next write to the table finishes it"
            )
        raise gone(ref)

    def _open_at(self, candidate: TableRef, ref: TableRef, storage: dict[str, str]) -> Any | None:
        """The dataset at ``candidate``'s manifest; None if that manifest is not there."""
        try:
            return open_pinned(candidate.location, ref.version, storage)
        except Exception as exc:  # noqa: BLE001
            if not is_missing(exc):
                log.warning("cannot open %s version %s: %s", ref.name, ref.version, exc)
                raise ServiceUnavailable(f"cannot open {ref.name} version {ref.version} right now") from None
        return None

    def _await_publish(self, candidate: TableRef, ref: TableRef, storage: dict[str, str]) -> bool:
        """Whether ``candidate``'s manifest appeared while waiting for its writer to publish it
        (``engine.await_published``: only for a version committed moments ago). Only on this
        error path: a successful open waits for nothing."""
        return engine.await_published(
            candidate.location,
            candidate.manifest_path,
            ref.committed_at_ms,
            storage,
            pause=self.pause,
            grace=PUBLISH_GRACE_SECONDS,
        )

    def _check_exists(self, ref: TableRef) -> None:
        storage = self.settings.storage_options(ref.location)
        try:
            exists = _manifest_exists(ref, storage) or (
                ref.staging and _manifest_exists(canonical_manifest(ref), storage)
            )
        except Exception as exc:  # noqa: BLE001
            log.warning("cannot check %s version %s: %s", ref.name, ref.version, exc)
            raise ServiceUnavailable(f"cannot open {ref.name} version {ref.version} right now") from None
        if not exists:
            self._opened.remove(ref.key)
            raise gone(ref)


def canonical_manifest(ref: TableRef) -> TableRef:
    """``ref`` with its manifest at the canonical path (V2 naming) the catalog finalizes a
    committed version to: the same version, content-identical."""
    return replace(
        ref,
        manifest_path=engine.canonical_manifest_path(ref.manifest_path, ref.version),
        manifest_size=None,
        e_tag=None,
    )


def _manifest_exists(ref: TableRef, storage: dict[str, str]) -> bool:
    """Whether the snapshot's manifest is still on storage (a stat, or a HEAD on S3)."""
    return engine.manifest_exists(ref.location, ref.manifest_path, storage)


_OPENERS: dict[str, Callable[[Providers, TableRef], Any]] = {"lance": Providers._open_lance}

__all__ = ["Providers", "canonical_manifest"]
