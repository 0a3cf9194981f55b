"""Publishing a committed version's manifest at its canonical path, right after the registry
accepted it (``BoundTableNamespace.create_table_version``).

With managed versioning Lance leaves each manifest at its staging path; given that path, Lance
"finishes the commit" on every open, writing to storage each time. So the staging manifest is
put at its canonical path (locally a hard link, on S3 a copy) as soon as the version is
registered, and never before: a writer whose commit is refused (a lost lease) must leave no
canonical manifest behind. A failure leaves the version committed but unpublished; the next
writer (settle) or ``finish_versions`` publishes it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from lake_platform.engine import lance_engine as engine
from lake_platform.naming import TableName
from lake_platform.registry import keys
from lake_platform.registry.records import VersionRecord
from lake_platform.registry.store import MetaStore

log = logging.getLogger(__name__)


class ManifestPublisher:
    """Publishes the versions one bound namespace commits for one table incarnation."""

    def __init__(
        self,
        store: MetaStore,
        name: TableName,
        incarnation: str,
        location: str,
        storage_options: dict[str, str] | None,
        fault: Callable[[str], None] | None = None,
    ) -> None:
        self.store = store
        self.name = name
        self.incarnation = incarnation
        self.location = location
        self.storage_options = storage_options
        self._fault = fault
        #: Versions registered at their canonical path whose file could not be put there: their
        #: staging manifest is the only copy and must stay until they are finished.
        self.unpublished: set[int] = set()

    def publish(self, ver: VersionRecord, revision: int) -> tuple[VersionRecord, int]:
        """Put the manifest of the version just registered (``ver`` at registry ``revision``)
        at its canonical path (and, for a version registered at its staging path, point the
        record there). Returns the record and revision as they stand afterwards."""
        if ver.staged_from is not None and not engine.is_staging_manifest(ver.manifest_path):
            return self._publish_registered(ver, revision)
        if not engine.is_staging_manifest(ver.manifest_path):
            return ver, revision  # resolved after an unknown outcome: already published
        try:
            final = engine.finalize_manifest(
                self.location, ver.version, ver.manifest_path, self.storage_options
            )
            if self._fault is not None:
                self._fault("finalize-copied")
            done = ver.model_copy(update={"manifest_path": final})
            item = self.store.compare_and_swap(
                keys.version(self.incarnation, ver.version), revision, done.encode()
            )
            if self._fault is not None:
                self._fault("finalize-swapped")
            return done, item.revision
        except Exception:  # noqa: BLE001 - the commit stands either way
            log.warning(
                "could not publish the manifest of %s version %s", self.name, ver.version, exc_info=True
            )
            return ver, revision

    def _publish_registered(self, ver: VersionRecord, revision: int) -> tuple[VersionRecord, int]:
        """Publish a version the commit registered at its canonical path: copy (locally: hard
        link) the staging manifest there. No registry write."""
        assert ver.staged_from is not None
        try:
            try:
                engine.finalize_manifest(self.location, ver.version, ver.staged_from, self.storage_options)
            except (engine.ManifestConflict, OSError):
                # The lease went with the commit: a next writer or a reader may have published
                # it already (and removed the staging manifest).
                if not engine.manifest_exists(self.location, ver.manifest_path, self.storage_options):
                    raise
                if engine.manifest_exists(self.location, ver.staged_from, self.storage_options):
                    raise  # both there and different: a squatter
            if self._fault is not None:
                self._fault("finalize-copied")
            return ver, revision
        except engine.ManifestConflict:
            # A manifest written around the registry took the path after our check: register
            # the staging path after all (the old form; readers compare it with the squatter,
            # and the next writer quarantines the squatter and publishes).
            log.warning(
                "%s version %s: a manifest written around the registry took its canonical path; "
                "the version stays at its staging manifest",
                self.name,
                ver.version,
            )
            back = ver.model_copy(update={"manifest_path": ver.staged_from, "staged_from": None})
            try:
                item = self.store.compare_and_swap(
                    keys.version(self.incarnation, ver.version), revision, back.encode()
                )
            except Exception:  # noqa: BLE001 - left for settle / finish_versions
                self.unpublished.add(ver.version)
                log.warning("could not re-point %s version %s", self.name, ver.version, exc_info=True)
                return ver, revision
            return back, item.revision
        except Exception:  # noqa: BLE001 - the commit stands either way
            self.unpublished.add(ver.version)
            log.warning(
                "could not publish the manifest of %s version %s", self.name, ver.version, exc_info=True
            )
            return ver, revision
