"""A DynamoDB registry's URL and table, against the session's DynamoDB-API server (moto on
loopback): bad URLs name the setting, parsing and opening make no network call, an unreachable
endpoint is ServiceUnavailable, ``lake registry init`` is idempotent and refuses a foreign key
schema, the infra template's table is accepted, and a missing table says to run init."""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import boto3
import pytest
from botocore.exceptions import EndpointConnectionError

from lake_platform.errors import ServiceUnavailable, SettingsError
from lake_platform.registry.dynamodb import DynamoMetaStore
from lake_platform.registry.dynamodb_admin import delete_table, init_table
from lake_platform.registry.dynamodb_items import parse_url
from lake_platform.registry.dynamodb_layout import CURRENT
from lake_platform.registry.factory import open_metastore
from lake_platform.settings import LakeSettings


def _settings(url: str, tmp_path: Path) -> LakeSettings:
    return LakeSettings(_env_file=None, home=tmp_path / "home", registry_url=url)  # type: ignore[call-arg]


@pytest.mark.parametrize(
    "url",
    [
        "dynamodb://",
        "dynamodb://ab",
        "dynamodb://bad name",
        "dynamodb://table/extra/path",
        "dynamodb://table?regoin=us-east-1",
        "dynamodb://table?region=us-east-1&region=eu-west-1",
        "dynamodb://table?region=US_EAST",
        "dynamodb://table?endpoint_url=ftp://host",
        "dynamodb://table?endpoint_url=localhost:8000",
        "dynamodb://table?change_shards=0",
        "dynamodb://table?change_shards=many",
        "sqlite:///table",
    ],
)
def test_bad_urls_name_the_setting(url: str) -> None:
    with pytest.raises(SettingsError, match="LAKE_REGISTRY_URL"):
        parse_url(url)


def test_url_parsing_and_factory_make_no_network_call(tmp_path: Path) -> None:
    parsed = parse_url("dynamodb://lake.registry-1?region=eu-west-1&endpoint_url=http://127.0.0.1:9")
    assert (parsed.table, parsed.region, parsed.endpoint_url) == (
        "lake.registry-1",
        "eu-west-1",
        "http://127.0.0.1:9",
    )
    assert parse_url("dynamodb://lake_registry").region is None
    assert parse_url("dynamodb://lake_registry?change_shards=64").change_shards == 64
    # Port 9 (discard) has nothing listening: opening the store must not touch it.
    url = "dynamodb://lake_registry?region=eu-west-1&endpoint_url=http://127.0.0.1:9"
    with open_metastore(_settings(url, tmp_path)) as opened:
        assert isinstance(opened, DynamoMetaStore) and opened.url == url


def test_unreachable_endpoint_is_service_unavailable(
    moto_endpoint: str, dynamodb_url: str, tmp_path: Path
) -> None:
    # moto_endpoint only for its AWS credential defaults.
    url = "dynamodb://lake_registry?region=us-east-1&endpoint_url=http://127.0.0.1:9"
    with DynamoMetaStore.from_url(url, _settings(url, tmp_path)) as unreachable:
        with pytest.raises(ServiceUnavailable):
            unreachable.get("k/a")
        # The layout is read first: that read fails, nothing was sent.
        with pytest.raises(ServiceUnavailable, match="unreachable"):
            unreachable.put_if_absent("k/a", b"v")
    # A store that read the layout before its endpoint went away: the write may have landed.
    settings = _settings(dynamodb_url, tmp_path)
    init_table(dynamodb_url, settings)

    def gone(request: Any, **_: Any) -> None:
        raise EndpointConnectionError(endpoint_url=request.url)

    with DynamoMetaStore.from_url(dynamodb_url, settings) as store:
        try:
            assert store.layout() == CURRENT
            store.events.register("before-send.dynamodb", gone)
            with pytest.raises(ServiceUnavailable, match="outcome unknown"):
                store.put_if_absent("k/a", b"v")
        finally:
            store.events.unregister("before-send.dynamodb", gone)
            delete_table(store)


def test_init_table_is_idempotent(dynamodb_url: str, tmp_path: Path) -> None:
    settings = _settings(dynamodb_url, tmp_path)
    init_table(dynamodb_url, settings)
    with DynamoMetaStore.from_url(dynamodb_url, settings) as dynamo:
        try:
            dynamo.put_if_absent("k/a", b"kept")
            init_table(dynamodb_url, settings)
            assert dynamo.get("k/a").value == b"kept"  # type: ignore[union-attr]
        finally:
            delete_table(dynamo)


def test_init_table_refuses_a_foreign_key_schema(dynamodb_url: str, tmp_path: Path) -> None:
    parsed = parse_url(dynamodb_url)
    client = boto3.client("dynamodb", region_name=parsed.region, endpoint_url=parsed.endpoint_url)
    client.create_table(
        TableName=parsed.table,
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": "k", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "k", "KeyType": "HASH"}],
    )
    client.get_waiter("table_exists").wait(TableName=parsed.table)
    try:
        with pytest.raises(SettingsError, match="key schema"):
            init_table(dynamodb_url, _settings(dynamodb_url, tmp_path))
    finally:
        client.delete_table(TableName=parsed.table)
        client.close()


@pytest.mark.skipif(
    bool(os.environ.get("LAKE_TEST_DYNAMODB_URL")),
    reason="would leave a deletion-protected table behind in a real account",
)
def test_infra_template_table_is_accepted(moto_endpoint: str, tmp_path: Path) -> None:
    """The production CloudFormation table has the key schema the code expects."""
    template = Path(__file__).parents[2] / "infra" / "dynamodb-registry.yaml"
    name = f"lake-cfn-{uuid.uuid4().hex[:8]}"
    cfn = boto3.client("cloudformation", region_name="us-east-1", endpoint_url=moto_endpoint)
    try:
        cfn.create_stack(
            StackName=name,
            TemplateBody=template.read_text(),
            Parameters=[{"ParameterKey": "TableName", "ParameterValue": name}],
        )
        stack = cfn.describe_stacks(StackName=name)["Stacks"][0]
        outputs = {o["OutputKey"]: o["OutputValue"] for o in stack["Outputs"]}
        assert outputs["TableName"] == name
        url = f"dynamodb://{name}?region=us-east-1&endpoint_url={moto_endpoint}"
        init_table(url, _settings(url, tmp_path))
        with DynamoMetaStore.from_url(url, _settings(url, tmp_path)) as dynamo:
            assert dynamo.put_if_absent("tbl/x", b"v").revision == 1
    finally:
        cfn.close()


def test_missing_table_says_to_run_init(dynamodb_url: str, tmp_path: Path) -> None:
    with DynamoMetaStore.from_url(dynamodb_url, _settings(dynamodb_url, tmp_path)) as dynamo:
        with pytest.raises(SettingsError, match="lake registry init"):
            dynamo.get("k/a")


def test_test_url_points_at_the_session_server(dynamodb_url: str, moto_endpoint: str) -> None:
    query = parse_qs(urlsplit(dynamodb_url).query)
    assert query.get("endpoint_url", [""])[0] == moto_endpoint
