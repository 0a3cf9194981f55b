"""DynamoDB MetaStore: conditional expressions, TransactWriteItems, consistent reads.

The item layout (``p`` partition, ``k`` key, ``v`` value, ``r`` revision, ``w`` writer id) is
described in ``dynamodb_items``.

``w`` is how unknown outcomes are resolved (design invariant 5): every call gets one id, reused by
every retry of that call (and sent as TransactWriteItems' ClientRequestToken). After a timeout, or
when a retry fails its condition, reading ``w`` tells whether this very call already landed, so a
retried request never commits twice, with or without server-side token support.

Request building lives in ``dynamodb_items``, error translation in ``dynamodb_errors``.
"""

from __future__ import annotations

import functools
import random
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, NoRegionError

from lake_platform.errors import ConditionFailed, LakeError, ServiceUnavailable, SettingsError, Throttling
from lake_platform.registry.dynamodb_errors import (
    botocore_retried,
    condition_message,
    error_code,
    own_items,
    translate,
)
from lake_platform.registry.dynamodb_items import (
    KEY_SCHEMA,
    DynamoUrl,
    Raw,
    conditional_put,
    delete_request,
    item_of,
    key_of,
    parse_url,
    partition_of,
    transact_item,
    unconditional_put,
)
from lake_platform.registry.store import ABSENT, Check, Delete, Item, MetaStore, Op, Put, check_key, check_ops
from lake_platform.settings import LakeSettings

__all__ = ["DynamoMetaStore", "DynamoUrl", "init_table", "parse_url", "partition_of"]

T = TypeVar("T")

_PAGE = 500
#: Our own attempts per call, on top of botocore's (max_attempts=2): bounded so a call's total time
#: stays a small multiple of the I/O timeout.
_ATTEMPTS = 3
_BACKOFF_BASE = 0.05
_BACKOFF_CAP = 1.0


def init_table(url: str, settings: LakeSettings) -> None:
    """Create the registry table named by ``url`` (``lake registry init``); idempotent."""
    store = DynamoMetaStore.from_url(url, settings)
    try:
        store.create_table()
    finally:
        store.close()


class DynamoMetaStore(MetaStore):
    def __init__(
        self,
        table: str,
        *,
        region: str | None = None,
        endpoint_url: str | None = None,
        io_timeout_seconds: float = 2.0,
        url: str | None = None,
    ) -> None:
        self.table = table
        self.url = url or f"dynamodb://{table}"
        config = Config(
            # Below the lease safety margin (settings checks), so lease I/O gives up in time:
            # at most two sends of the timeout each (botocore's max_attempts counts retries,
            # total_max_attempts counts sends).
            connect_timeout=io_timeout_seconds / 2,
            read_timeout=io_timeout_seconds / 2,
            retries={"total_max_attempts": 2, "mode": "standard"},
        )
        try:
            # Credentials: the standard AWS chain. Creating a client makes no network call.
            self._client = boto3.session.Session().client(
                "dynamodb", region_name=region, endpoint_url=endpoint_url, config=config
            )
        except NoRegionError:
            raise SettingsError(
                "LAKE_REGISTRY_URL: no AWS region; add ?region=... or set AWS_DEFAULT_REGION"
            ) from None

    @classmethod
    def from_url(cls, url: str, settings: LakeSettings) -> DynamoMetaStore:
        parsed = parse_url(url)
        return cls(
            parsed.table,
            region=parsed.region,
            endpoint_url=parsed.endpoint_url,
            io_timeout_seconds=settings.lease_io_timeout_seconds,
            url=url,
        )

    # -- table lifecycle -------------------------------------------------------------------------

    def create_table(self) -> None:
        """Create the table (PAY_PER_REQUEST) and wait until ACTIVE; an existing table is fine if
        its key schema is ours."""
        try:
            self._client.create_table(
                TableName=self.table,
                AttributeDefinitions=[
                    {"AttributeName": "p", "AttributeType": "S"},
                    {"AttributeName": "k", "AttributeType": "S"},
                ],
                KeySchema=KEY_SCHEMA,
                BillingMode="PAY_PER_REQUEST",
            )
        except ClientError as exc:
            if error_code(exc) != "ResourceInUseException":
                raise translate(exc, (), self.table) from exc
        except BotoCoreError as exc:
            raise translate(exc, (), self.table) from exc
        try:
            self._client.get_waiter("table_exists").wait(
                TableName=self.table, WaiterConfig={"Delay": 1, "MaxAttempts": 120}
            )
            desc = self._client.describe_table(TableName=self.table)["Table"]
        except (ClientError, BotoCoreError) as exc:
            raise ServiceUnavailable(f"registry table {self.table!r} did not become ready: {exc}") from exc
        types = {a["AttributeName"]: a["AttributeType"] for a in desc.get("AttributeDefinitions", [])}
        if desc.get("KeySchema") != KEY_SCHEMA or types.get("p") != "S" or types.get("k") != "S":
            raise SettingsError(
                f"LAKE_REGISTRY_URL: table {self.table!r} exists with key schema "
                f"{desc.get('KeySchema')}; the registry needs hash key p (S) and range key k (S). "
                "Use another table name."
            )

    def delete_table(self) -> None:
        """Drop the table (tests, teardown). Missing is fine."""
        try:
            self._client.delete_table(TableName=self.table)
            self._client.get_waiter("table_not_exists").wait(
                TableName=self.table, WaiterConfig={"Delay": 1, "MaxAttempts": 120}
            )
        except ClientError as exc:
            if error_code(exc) != "ResourceNotFoundException":
                raise translate(exc, (), self.table) from exc
        except BotoCoreError as exc:
            raise translate(exc, (), self.table) from exc

    def close(self) -> None:
        self._client.close()

    # -- reads -----------------------------------------------------------------------------------

    def get(self, key: str) -> Item | None:
        check_key(key)
        raw = self._get_raw(key)
        return item_of(raw) if raw else None

    def _get_raw(self, key: str) -> Raw | None:
        resp = self._read(
            lambda: self._client.get_item(TableName=self.table, Key=key_of(key), ConsistentRead=True)
        )
        return resp.get("Item")

    def scan_prefix(
        self, prefix: str, *, start_after: str | None = None, limit: int | None = None
    ) -> Iterator[Item]:
        if limit is not None and limit <= 0:
            return
        if "/" not in prefix:
            yield from self._scan_all(prefix, start_after, limit)
            return
        start: Raw | None = None
        if start_after is not None and start_after >= prefix:
            if not start_after.startswith(prefix):
                return  # start_after sorts after every key with this prefix
            # ExclusiveStartKey need not exist; it only has to satisfy the key condition.
            start = key_of(start_after)
        remaining = limit
        while True:
            params: dict[str, Any] = {
                "TableName": self.table,
                "KeyConditionExpression": "p = :p AND begins_with(k, :prefix)",
                "ExpressionAttributeValues": {":p": {"S": partition_of(prefix)}, ":prefix": {"S": prefix}},
                "ConsistentRead": True,
                "Limit": _PAGE if remaining is None else min(_PAGE, remaining),
            }
            if start is not None:
                params["ExclusiveStartKey"] = start
            resp = self._read(functools.partial(self._client.query, **params))
            for raw in resp.get("Items", []):
                yield item_of(raw)
                if remaining is not None:
                    remaining -= 1
                    if remaining == 0:
                        return
            start = resp.get("LastEvaluatedKey")
            if start is None:
                return

    def _scan_all(self, prefix: str, start_after: str | None, limit: int | None) -> Iterator[Item]:
        # A prefix without "/" spans partitions; no registry key kind scans that way, so a full
        # consistent Scan sorted here is acceptable as the slow, correct fallback.
        params: dict[str, Any] = {"TableName": self.table, "ConsistentRead": True}
        if prefix:
            params["FilterExpression"] = "begins_with(k, :prefix)"
            params["ExpressionAttributeValues"] = {":prefix": {"S": prefix}}
        found: list[Item] = []
        while True:
            resp = self._read(lambda: self._client.scan(**params))
            found.extend(item_of(raw) for raw in resp.get("Items", []))
            if "LastEvaluatedKey" not in resp:
                break
            params["ExclusiveStartKey"] = resp["LastEvaluatedKey"]
        found.sort(key=lambda item: item.key.encode())
        if start_after is not None:
            found = [item for item in found if item.key.encode() > start_after.encode()]
        yield from found[:limit]

    def _read(self, call: Callable[[], T]) -> T:
        """Reads are idempotent: retry throttling and transient trouble, with full jitter."""
        error: LakeError | None = None
        for attempt in range(_ATTEMPTS):
            if attempt:
                _sleep_backoff(attempt)
            try:
                return call()
            except (ClientError, BotoCoreError) as exc:
                error = translate(exc, (), self.table)
                if not isinstance(error, (Throttling, ServiceUnavailable)):
                    raise error from exc
        assert error is not None
        raise error

    # -- writes ----------------------------------------------------------------------------------

    def transact(self, ops: Sequence[Op]) -> list[Item | None]:
        check_ops(ops)
        if len(ops) == 1 and isinstance(ops[0], Check):
            self._check_one(ops[0])
            return [None]
        return self._transact(ops, str(uuid.uuid4()))

    def _check_one(self, op: Check) -> None:
        raw = self._get_raw(op.key)
        found = int(raw["r"]["N"]) if raw else ABSENT
        if found != op.expected:
            raise ConditionFailed(condition_message(op, found), key=op.key)

    def _transact(self, ops: Sequence[Op], write_id: str) -> list[Item | None]:
        """Apply ``ops`` as the logical call ``write_id``. Calling again with the same id after it
        landed is a no-op that reports success (the retry rule)."""
        maybe_landed = False
        error: LakeError | None = None
        for attempt in range(_ATTEMPTS):
            if attempt:
                _sleep_backoff(attempt)
            try:
                known = self._write_once(ops, write_id)
            except (ClientError, BotoCoreError) as exc:
                # botocore may have re-sent the request after a lost response.
                maybe_landed |= botocore_retried(exc)
                error = translate(exc, ops, self.table)
                if isinstance(error, ConditionFailed):
                    mine = own_items(exc, ops, write_id)
                    if mine is not None:
                        return self._results(ops, write_id, mine)
                    if maybe_landed and self._landed(ops, write_id):
                        return self._results(ops, write_id, {})
                    raise error from exc
                if isinstance(error, Throttling):
                    continue  # a throttled request was rejected, not applied
                if isinstance(error, ServiceUnavailable):
                    # Unknown outcome: re-read before retrying (same id, so a late landing of
                    # the first request makes the retry fail its condition, never apply twice).
                    maybe_landed = True
                    try:
                        landed = self._landed(ops, write_id)
                    except LakeError:
                        raise ServiceUnavailable(
                            f"registry write outcome unknown ({error}); re-read failed too"
                        ) from exc
                    if landed:
                        return self._results(ops, write_id, {})
                    continue
                raise error from exc
            return self._results(ops, write_id, known)
        assert error is not None
        raise error

    def _write_once(self, ops: Sequence[Op], write_id: str) -> dict[str, Item]:
        """One request; returns the items it learned (unconditional single puts)."""
        if len(ops) == 1 and not isinstance(ops[0], Check):
            # Single ops: a conditional single-item call is cheaper than a transaction.
            op = ops[0]
            if isinstance(op, Put) and op.expected is None:
                resp = self._client.update_item(
                    **unconditional_put(self.table, op, write_id), ReturnValues="ALL_NEW"
                )
                return {op.key: item_of(resp["Attributes"])}
            if isinstance(op, Put):
                self._client.put_item(**conditional_put(self.table, op, write_id))
            else:
                assert isinstance(op, Delete)
                self._client.delete_item(**delete_request(self.table, op))
            return {}
        self._client.transact_write_items(
            TransactItems=[transact_item(self.table, op, write_id) for op in ops],
            # Same token on every retry of this call: DynamoDB applies it at most once (10 min).
            ClientRequestToken=write_id,
        )
        return {}

    def _landed(self, ops: Sequence[Op], write_id: str) -> bool:
        """Consistent re-read: did the call ``write_id`` apply? Batches are atomic, so one Put
        carrying our id proves all of it landed."""
        puts = [op for op in ops if isinstance(op, Put)]
        for op in puts:
            raw = self._get_raw(op.key)
            if raw is not None and raw.get("w", {}).get("S") == write_id:
                return True
        if puts:
            return False
        # Deletes leave no id behind: all targets gone is the best available evidence.
        deletes = [op for op in ops if isinstance(op, Delete)]
        return bool(deletes) and all(self._get_raw(op.key) is None for op in deletes)

    def _results(self, ops: Sequence[Op], write_id: str, known: dict[str, Item]) -> list[Item | None]:
        results: list[Item | None] = []
        for op in ops:
            if not isinstance(op, Put):
                results.append(None)
            elif op.expected is not None:
                results.append(Item(op.key, op.value, op.expected + 1))
            elif op.key in known:
                results.append(known[op.key])
            else:
                # TransactWriteItems returns nothing, so read the revision back. Should a later
                # writer have replaced the item already, its (higher) revision is all we can know.
                raw = self._get_raw(op.key)
                revision = int(raw["r"]["N"]) if raw else ABSENT + 1
                results.append(Item(op.key, op.value, revision))
        return results


def _sleep_backoff(attempt: int) -> None:
    # Full jitter: spreads contending clients instead of re-colliding in lockstep.
    time.sleep(random.uniform(0, min(_BACKOFF_CAP, _BACKOFF_BASE * 2**attempt)))
