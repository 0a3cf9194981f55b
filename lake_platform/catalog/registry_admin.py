"""The registry's own storage, for ``lake registry``: create it and move it to the current item
layout. The catalog's door for the commands that set the registry up (they run before any
catalog can open it)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from lake_platform.settings import LakeSettings

if TYPE_CHECKING:
    from lake_platform.registry.dynamodb_migrate import MigrationReport


def init_registry(settings: LakeSettings) -> None:
    """Create the registry's storage (idempotent): the DynamoDB table with its key schema; a
    SQLite registry's file is created by opening it."""
    url = settings.registry_url
    if url.startswith("dynamodb://"):
        from lake_platform.registry.dynamodb_admin import init_table

        init_table(url, settings)
    else:
        from lake_platform.registry.factory import open_metastore

        open_metastore(settings).close()


def layouts_migrate(settings: LakeSettings) -> bool:
    """Whether the registry has item layouts to migrate (only DynamoDB registries do)."""
    return settings.registry_url.startswith("dynamodb://")


def migrate_registry(settings: LakeSettings, on_step: Callable[[str], None]) -> MigrationReport:
    """Move a DynamoDB registry to the current item layout (idempotent and resumable; see
    ``registry.dynamodb_migrate``), reporting each step to ``on_step``."""
    from lake_platform.registry.dynamodb import DynamoMetaStore
    from lake_platform.registry.dynamodb_migrate import migrate

    with DynamoMetaStore.from_url(settings.registry_url, settings) as store:
        return migrate(store, on_step=on_step)
