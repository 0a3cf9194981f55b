"""A DynamoDB store on a registry table of its own, on the session's DynamoDB-API server: made
as ``lake registry init`` makes it, deleted afterwards."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from lake_platform.registry.dynamodb import DynamoMetaStore
from lake_platform.registry.dynamodb_admin import delete_table, init_table
from lake_platform.registry.dynamodb_retry import Sleep
from lake_platform.settings import LakeSettings


@contextmanager
def fresh_store(url: str, home: Path, *, sleep: Sleep = time.sleep) -> Iterator[DynamoMetaStore]:
    settings = LakeSettings(_env_file=None, home=home, registry_url=url)  # type: ignore[call-arg]
    init_table(url, settings)
    dynamo = DynamoMetaStore.from_url(url, settings, sleep=sleep)
    try:
        yield dynamo
    finally:
        delete_table(dynamo)
        dynamo.close()
