"""An S3 endpoint for the maintenance tests (SeaweedFS on loopback unless LAKE_TEST_S3_ENDPOINT),
started on first use only."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from lake_platform_tests.s3_server import S3Endpoint, s3_for_tests


@pytest.fixture(scope="session")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Endpoint]:
    endpoint = s3_for_tests(tmp_path_factory.mktemp("seaweed-maintenance"))
    try:
        yield endpoint
    finally:
        endpoint.stop()
