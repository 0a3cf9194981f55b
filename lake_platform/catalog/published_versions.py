"""The versions one catalog knows are published (``Catalog.published_versions``): a Lance
client's listing (``pylance_commits.ensure_published``) need not check their manifest files
again."""

from __future__ import annotations

import threading

from lake_platform.engine import lance_engine as engine
from lake_platform.lru import BoundedLRU


class PublishedVersions:
    """The versions one catalog knows are published, by (location, version): the newest it
    committed and published itself, and those whose file ``ensure_published`` found. A
    ``ListTableVersions`` need not check their file again (a stat locally, a HEAD request on S3,
    on every REST commit and listing otherwise). Oldest remembered first out: a look-up does not
    make a version recent. ``checks``: how many manifest files ``ensure_published`` looked for."""

    def __init__(self, capacity: int = 4096) -> None:
        self._known: BoundedLRU[tuple[str, int], bool] = BoundedLRU(capacity)
        self._lock = threading.Lock()
        self._checks = 0

    @property
    def checks(self) -> int:
        with self._lock:
            return self._checks

    def remember(self, location: str, version: int) -> None:
        self._known.put((location, version), True)

    def known(self, location: str, version: int) -> bool:
        return self._known.peek((location, version)) is not None

    def exists(self, location: str, manifest_path: str, storage: dict[str, str] | None) -> bool:
        """Whether the manifest file is there (a check, counted)."""
        with self._lock:
            self._checks += 1
        return engine.manifest_exists(location, manifest_path, storage)
