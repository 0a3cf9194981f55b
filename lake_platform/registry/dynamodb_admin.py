"""The DynamoDB registry's table itself: create it (``lake registry init``; a new or empty table
starts in the current item layout) and delete it (tests, teardown), each waiting until done."""

from __future__ import annotations

from botocore.exceptions import BotoCoreError, ClientError

from lake_platform.errors import ConditionFailed, ServiceUnavailable, SettingsError
from lake_platform.registry.dynamodb import DynamoMetaStore
from lake_platform.registry.dynamodb_errors import error_code, translate
from lake_platform.registry.dynamodb_items import KEY_SCHEMA
from lake_platform.registry.dynamodb_layout import CURRENT, LEGACY
from lake_platform.registry.dynamodb_retry import retried_read
from lake_platform.settings import LakeSettings

_WAIT = {"Delay": 1, "MaxAttempts": 120}  # a table's state, polled each second for two minutes


def init_table(url: str, settings: LakeSettings) -> None:
    """Create the registry table named by ``url`` (``lake registry init``); idempotent."""
    with DynamoMetaStore.from_url(url, settings) as store:
        create_table(store)


def create_table(store: DynamoMetaStore) -> None:
    """Create the store's table (PAY_PER_REQUEST) and wait until ACTIVE; an existing table is
    fine if its key schema is ours."""
    client, table = store.client, store.table
    created = False
    try:
        client.create_table(
            TableName=table,
            AttributeDefinitions=[
                {"AttributeName": "p", "AttributeType": "S"},
                {"AttributeName": "k", "AttributeType": "S"},
            ],
            KeySchema=KEY_SCHEMA,
            BillingMode="PAY_PER_REQUEST",
        )
        created = True
    except ClientError as exc:
        if error_code(exc) != "ResourceInUseException":
            raise translate(exc, (), table) from exc
    except BotoCoreError as exc:
        raise translate(exc, (), table) from exc
    try:
        client.get_waiter("table_exists").wait(TableName=table, WaiterConfig=_WAIT)
        desc = client.describe_table(TableName=table)["Table"]
    except (ClientError, BotoCoreError) as exc:
        raise ServiceUnavailable(f"registry table {table!r} did not become ready: {exc}") from exc
    types = {a["AttributeName"]: a["AttributeType"] for a in desc.get("AttributeDefinitions", [])}
    if desc.get("KeySchema") != KEY_SCHEMA or types.get("p") != "S" or types.get("k") != "S":
        raise SettingsError(
            f"LAKE_REGISTRY_URL: table {table!r} exists with key schema "
            f"{desc.get('KeySchema')}; the registry needs hash key p (S) and range key k (S). "
            "Use another table name."
        )
    if created or (store.layout(refresh=True) == LEGACY and _empty(store)):
        # A new (or still empty, say made by CloudFormation) table starts in the current
        # layout. A table holding data keeps what it has (no layout item: layout 1, until
        # `lake registry migrate`).
        try:
            store.write_layout(CURRENT, expect=None)
        except ConditionFailed:
            pass  # another init got there first


def delete_table(store: DynamoMetaStore) -> None:
    """Drop the store's table (tests, teardown). Missing is fine."""
    client, table = store.client, store.table
    try:
        client.delete_table(TableName=table)
        client.get_waiter("table_not_exists").wait(
            TableName=table, WaiterConfig={"Delay": 1, "MaxAttempts": 120}
        )
    except ClientError as exc:
        if error_code(exc) != "ResourceNotFoundException":
            raise translate(exc, (), table) from exc
    except BotoCoreError as exc:
        raise translate(exc, (), table) from exc


def _empty(store: DynamoMetaStore) -> bool:
    resp = retried_read(
        lambda: store.client.scan(TableName=store.table, Limit=1, ConsistentRead=True), store.table
    )
    return not resp.get("Items") and "LastEvaluatedKey" not in resp
