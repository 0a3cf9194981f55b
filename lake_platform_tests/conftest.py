"""Shared fixtures. Servers (DynamoDB-API, S3) start on free loopback ports and stop afterwards."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from lake_platform.registry.sqlite import SqliteMetaStore
from lake_platform.registry.store import MetaStore

#: Every MetaStore backend the contract suite runs against.
METASTORE_BACKENDS = ["sqlite"]


@pytest.fixture(params=METASTORE_BACKENDS)
def metastore(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MetaStore]:
    if request.param == "sqlite":
        store: MetaStore = SqliteMetaStore(tmp_path / "registry.db")
    else:  # pragma: no cover - each backend adds its branch
        raise AssertionError(request.param)
    try:
        yield store
    finally:
        store.close()
