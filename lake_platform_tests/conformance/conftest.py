"""The two servers the kit is run against: ours (a real uvicorn on loopback over a fresh lake,
lake_platform_tests/rest/conftest.py) and pylance's reference ``RestAdapter("dir")``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from lance.namespace import RestAdapter

from lake_platform_tests.rest.conftest import RestLake, start_rest_lake


@pytest.fixture
def ours(tmp_path: Path) -> Iterator[RestLake]:
    yield from start_rest_lake(tmp_path)


@pytest.fixture
def reference(tmp_path: Path) -> Iterator[str]:
    yield from start_reference(tmp_path)


def start_reference(tmp_path: Path) -> Iterator[str]:
    """pylance's reference server over a fresh directory, on a free loopback port: its URL."""
    adapter = RestAdapter("dir", {"root": str(tmp_path / "dir")}, host="127.0.0.1", port=0)
    adapter.start()
    try:
        yield f"http://127.0.0.1:{adapter.port}"
    finally:
        adapter.stop()
