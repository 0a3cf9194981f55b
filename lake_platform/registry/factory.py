"""Open the MetaStore a settings object names: ``sqlite:///PATH`` or ``dynamodb://TABLE?...``."""

from __future__ import annotations

from lake_platform.errors import SettingsError
from lake_platform.registry.store import MetaStore
from lake_platform.settings import LakeSettings


def open_metastore(settings: LakeSettings) -> MetaStore:
    url = settings.registry_url
    if url.startswith("sqlite:///"):
        from lake_platform.registry.sqlite import SqliteMetaStore

        path = url.removeprefix("sqlite:///")
        try:
            return SqliteMetaStore(path, busy_timeout_seconds=settings.lease_io_timeout_seconds)
        except OSError as exc:  # a folder, a path under a file, no permission: the setting's fault
            raise SettingsError(
                f"LAKE_REGISTRY_URL: the registry's file {path} cannot be opened: {exc.strerror}"
            ) from None
    if url.startswith("dynamodb://"):
        from lake_platform.registry.dynamodb import DynamoMetaStore

        return DynamoMetaStore.from_url(url, settings)
    raise SettingsError(f"LAKE_REGISTRY_URL: unsupported registry {url!r}")
