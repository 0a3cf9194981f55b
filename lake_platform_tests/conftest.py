"""Shared fixtures. Servers (DynamoDB-API, S3) start on free loopback ports and stop afterwards."""

from __future__ import annotations

import functools
import os
import signal
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from lake_platform.registry.sqlite import SqliteMetaStore
from lake_platform.registry.store import MetaStore
from lake_platform.settings import LakeSettings
from lake_platform_tests.postgres import Postgres, start_postgres
from lake_platform_tests.s3_server import S3Endpoint, s3_for_tests
from lake_platform_tests.servers import SLOW_IO, start_moto_server

#: Every MetaStore backend the contract suite runs against ("dynamodb-layout1": a DynamoDB table
#: in the item layout of older releases, before `lake registry migrate`).
METASTORE_BACKENDS = ["sqlite", "dynamodb", "dynamodb-layout1"]


@pytest.fixture(autouse=True)
def _sigterm_as_found() -> Iterator[None]:
    """SIGTERM's disposition as each test found it. Running a Dagster job in process maps
    SIGTERM to SIGINT's handler and leaves it so; under a runner that starts the job in the
    background SIGINT is ignored, and every server a later test starts would inherit an ignored
    SIGTERM and outlive its fixture's ``terminate()``."""
    before = signal.getsignal(signal.SIGTERM)
    yield
    if before is not None and signal.getsignal(signal.SIGTERM) != before:
        signal.signal(signal.SIGTERM, before)


@pytest.fixture(scope="session")
def moto_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Endpoint URL of the DynamoDB API the tests use: one moto server for the session.

    To run the same tests against real AWS (or any DynamoDB endpoint) instead, set
    ``LAKE_TEST_DYNAMODB_URL=dynamodb://PREFIX?region=REGION[&endpoint_url=URL]``: no moto is started,
    credentials come from the usual AWS chain, and each test creates (and deletes) its own table
    named ``PREFIX-<random>``. Yields "" when the URL names no endpoint (AWS's own).
    """
    external = os.environ.get("LAKE_TEST_DYNAMODB_URL")
    if external:
        from lake_platform.registry.dynamodb_items import parse_url

        yield parse_url(external).endpoint_url or ""
        return
    with pytest.MonkeyPatch.context() as mp:
        # moto accepts any credentials; defaults keep botocore from searching for real ones.
        for name, value in (
            ("AWS_ACCESS_KEY_ID", "test"),
            ("AWS_SECRET_ACCESS_KEY", "test"),
            ("AWS_DEFAULT_REGION", "us-east-1"),
        ):
            mp.setenv(name, os.environ.get(name, value))
        endpoint, stop = start_moto_server(tmp_path_factory.mktemp("moto"))
        try:
            yield endpoint
        finally:
            stop()


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    """One throwaway PostgreSQL cluster for the session (see ``lake_platform_tests.postgres``);
    tests take a fresh database each with ``postgres.new_database()``."""
    pg = start_postgres()
    try:
        yield pg
    finally:
        pg.stop()


@pytest.fixture(scope="session")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Endpoint]:
    """The session's S3 endpoint with its bucket: one SeaweedFS on loopback, started on first use
    only, or the real S3 named by ``LAKE_TEST_S3_ENDPOINT`` (see ``lake_platform_tests.s3_server``).
    Tests share the server but not keys: each works under its own ``s3_prefix``."""
    endpoint = s3_for_tests(tmp_path_factory.mktemp("seaweed"))
    try:
        yield endpoint
    finally:
        endpoint.stop()


@pytest.fixture
def s3_prefix(s3: S3Endpoint) -> Iterator[str]:
    """A key prefix of the session's bucket that no other test uses."""
    prefix = s3.new_prefix()
    yield prefix
    if s3.external:
        s3.delete_prefix(prefix)  # a throwaway SeaweedFS needs no cleanup; a real bucket does


@pytest.fixture
def dynamodb_url(moto_endpoint: str) -> str:
    """A registry URL naming a fresh, not yet created table on the test endpoint: no state leaks
    between tests on the shared server."""
    return dynamodb_test_url(moto_endpoint)


def dynamodb_test_url(endpoint: str) -> str:
    """A registry URL for a uniquely named table on the test endpoint."""
    external = os.environ.get("LAKE_TEST_DYNAMODB_URL")
    prefix, region = "lake-test", os.environ.get("AWS_DEFAULT_REGION", "us-east-1")
    if external:
        from lake_platform.registry.dynamodb_items import parse_url

        parsed = parse_url(external)
        prefix, region = parsed.table, parsed.region or region
    params = {"region": region}
    if endpoint:
        params["endpoint_url"] = endpoint
    return f"dynamodb://{prefix}-{uuid.uuid4().hex[:12]}?{urlencode(params)}"


@pytest.fixture(params=METASTORE_BACKENDS)
def metastore(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MetaStore]:
    cleanup: Callable[[], None] | None = None
    if request.param == "sqlite":
        store: MetaStore = SqliteMetaStore(tmp_path / "registry.db")
    elif request.param in ("dynamodb", "dynamodb-layout1"):
        from lake_platform.registry.dynamodb import DynamoMetaStore
        from lake_platform.registry.dynamodb_admin import delete_table, init_table

        url = request.getfixturevalue("dynamodb_url")
        # The contract is about outcomes: SLOW_IO, so a loaded machine's slow moto (one request
        # at a time) is not read as an unreachable registry (a 1 s read timeout failed a
        # 1,200-item scan in a loaded full run).
        settings = LakeSettings(  # type: ignore[call-arg]
            _env_file=None, home=tmp_path / "home", registry_url=url, **SLOW_IO
        )
        init_table(url, settings)
        dynamo = DynamoMetaStore.from_url(url, settings)
        if request.param == "dynamodb-layout1":
            make_layout1(dynamo)
        store, cleanup = dynamo, functools.partial(delete_table, dynamo)
    else:  # pragma: no cover - each backend adds its branch
        raise AssertionError(request.param)
    try:
        yield store
    finally:
        try:
            if cleanup is not None:
                cleanup()
        finally:
            store.close()


def dynamodb_client(url: str) -> Any:
    """A boto3 DynamoDB client of its own on the endpoint registry URL ``url`` names: the table
    read or changed beside the store, as an operator's AWS CLI would."""
    import boto3

    from lake_platform.registry.dynamodb_items import parse_url

    parsed = parse_url(url)
    return boto3.client("dynamodb", region_name=parsed.region, endpoint_url=parsed.endpoint_url)


def make_layout1(dynamo: MetaStore) -> None:
    """Turn a freshly initialised DynamoDB registry into one made by an older release (no
    layout item: item layout 1). ``dynamo`` must not have read layout 2 yet: a client that
    has never reads the layout again (layout 2 is final)."""
    from lake_platform.registry.dynamodb import DynamoMetaStore
    from lake_platform.registry.dynamodb_layout import LAYOUT_KEY, LEGACY

    assert isinstance(dynamo, DynamoMetaStore)
    dynamodb_client(dynamo.url).delete_item(TableName=dynamo.table, Key=LAYOUT_KEY)
    assert dynamo.layout(refresh=True) == LEGACY
