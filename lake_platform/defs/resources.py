"""Typed resources. Both read ``LakeSettings`` (``LAKE_*`` variables and ``.env``) when used,
never at import or load time, so loading the code location makes no network call."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import dagster as dg

if TYPE_CHECKING:
    from lake_platform.catalog.catalog import Catalog
    from lake_platform.maintenance.inbox import Inbox
    from lake_platform.settings import LakeSettings

#: The actor the commit log records for runs started by Dagster.
ACTOR = "dagster"


class LakeResource(dg.ConfigurableResource):
    """The catalog. Empty fields mean "from LakeSettings" (``LAKE_HOME``, ``LAKE_REGISTRY_URL``)."""

    home: str = ""
    registry_url: str = ""

    def settings(self) -> LakeSettings:
        from lake_platform.settings import load_settings

        overrides: dict[str, Any] = {}
        if self.home:
            overrides["home"] = self.home
        if self.registry_url:
            overrides["registry_url"] = self.registry_url
        return load_settings(**overrides)

    @contextmanager
    def catalog(self) -> Iterator[Catalog]:
        from lake_platform.catalog.catalog import Catalog

        catalog = Catalog(self.settings())
        try:
            yield catalog
        finally:
            catalog.close()


class InboxResource(dg.ConfigurableResource):
    """Where producers land files: a folder or ``s3://bucket/prefix``.

    Empty ``location`` means ``LAKE_INBOX``, else ``<LAKE_HOME>/inbox``.
    """

    lake: LakeResource
    location: str = ""

    def open(self) -> Inbox:
        from lake_platform.maintenance.inbox import inbox_location, open_inbox

        settings = self.lake.settings()
        return open_inbox(self.location or inbox_location(settings), settings)
