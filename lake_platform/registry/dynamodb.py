"""DynamoDB MetaStore: conditional expressions, TransactWriteItems, consistent reads.

``get_many`` is one TransactGetItems: a snapshot of up to 100 items in one round trip.

The item layout (``p`` partition, ``k`` key, ``v`` value, ``r`` revision, ``w`` writer id) is
described in ``dynamodb_items``; which partition holds a key in ``dynamodb_layout``.

Layouts. A table made by ``lake registry init`` uses layout 2 (load spread per table). A table
from an older release has no layout item and is read and written in layout 1 until ``lake registry
migrate`` (``dynamodb_migrate``) moves it. While a table is in layout 1 every write carries a
condition on the layout item and every read is confirmed against it afterwards, so the moment a
migration freezes the table no layout-1 write can land, and no layout-1 read is answered from a
copy the migration has already superseded. Layout 2 is final: no guard, no extra reads.

``w`` is how unknown outcomes are resolved (design invariant 5): every call gets one id, reused by
every retry of that call (and sent as TransactWriteItems' ClientRequestToken). After a timeout, or
when a retry fails its condition, reading ``w`` tells whether this very call already landed, so a
retried request never commits twice, with or without server-side token support.

Request building lives in ``dynamodb_items``, error translation in ``dynamodb_errors``.
"""

from __future__ import annotations

import functools
import heapq
import random
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, NoRegionError

from lake_platform.errors import (
    ConditionFailed,
    Internal,
    InvalidInput,
    LakeError,
    ServiceUnavailable,
    SettingsError,
    Throttling,
)
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
    transact_item,
    unconditional_put,
)
from lake_platform.registry.dynamodb_layout import (
    CURRENT,
    FROZEN,
    LAYOUT_KEY,
    LEGACY,
    partition_of,
    partition_v1,
    partitioner,
    scan_partitions,
)
from lake_platform.registry.store import (
    ABSENT,
    MAX_TRANSACT_OPS,
    Check,
    Delete,
    Item,
    MetaStore,
    Op,
    Put,
    check_key,
    check_keys,
    check_ops,
)
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
    backend = "dynamodb"

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
        self._layout: str | None = None  # read on first use; CURRENT is never re-read
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
        created = False
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
            created = True
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
        if created or (self.layout(refresh=True) == LEGACY and self._empty()):
            # A new (or still empty, say made by CloudFormation) table starts in the current
            # layout. A table holding data keeps what it has (no layout item: layout 1, until
            # `lake registry migrate`).
            try:
                self.write_layout(CURRENT, expect=None)
            except ConditionFailed:
                pass  # another init got there first

    def _empty(self) -> bool:
        resp = self._read(lambda: self._client.scan(TableName=self.table, Limit=1, ConsistentRead=True))
        return not resp.get("Items") and "LastEvaluatedKey" not in resp

    # -- layout ----------------------------------------------------------------------------------

    def layout(self, *, refresh: bool = False) -> str:
        """The table's item layout: LEGACY, FROZEN (a migration is copying) or CURRENT."""
        if self._layout is None or (refresh and self._layout != CURRENT):
            resp = self._read(
                lambda: self._client.get_item(TableName=self.table, Key=LAYOUT_KEY, ConsistentRead=True)
            )
            self._layout = str(resp["Item"]["s"]["S"]) if "Item" in resp else LEGACY
        return self._layout

    def write_layout(self, layout: str, *, expect: str | None) -> None:
        """Set the layout item if it is at ``expect`` (None: absent; LEGACY also matches absent)."""
        if expect is None:
            cond: dict[str, Any] = {"ConditionExpression": "attribute_not_exists(k)"}
        elif expect == LEGACY:
            cond = {
                "ConditionExpression": "attribute_not_exists(k) OR s = :e",
                "ExpressionAttributeValues": {":e": {"S": expect}},
            }
        else:
            cond = {"ConditionExpression": "s = :e", "ExpressionAttributeValues": {":e": {"S": expect}}}
        try:
            self._client.put_item(TableName=self.table, Item={**LAYOUT_KEY, "s": {"S": layout}}, **cond)
        except ClientError as exc:
            if error_code(exc) == "ConditionalCheckFailedException":
                found = self.layout(refresh=True)
                raise ConditionFailed(
                    f"registry layout is {found!r}, expected {expect or 'none'!r}", key="#layout"
                ) from exc
            raise translate(exc, (), self.table) from exc
        except BotoCoreError as exc:
            raise translate(exc, (), self.table) from exc
        self._layout = layout

    def _confirmed(self, layout: str) -> bool:
        """After a read made in ``layout``: is that read still the truth? Layout-1 reads are,
        unless a migration finished meanwhile (then its copies are the truth)."""
        return layout == CURRENT or self.layout(refresh=True) != CURRENT

    def _writable_layout(self) -> str:
        layout = self.layout()
        if layout == FROZEN:
            layout = self.layout(refresh=True)
        if layout == FROZEN:
            raise ServiceUnavailable(
                f"registry table {self.table!r} is being migrated (lake registry migrate); "
                "writes resume when it finishes"
            )
        return layout

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

    def get_many(self, keys: Sequence[str]) -> list[Item | None]:
        check_keys(keys)
        if not keys:
            return []

        def transact_get(part: Callable[[str], str]) -> Any:
            # TransactGetItems (at most 100 items, as check_keys allows): one request, one
            # serializable snapshot of every item, answered in request order.
            gets = [{"Get": {"TableName": self.table, "Key": key_of(key, part)}} for key in keys]
            return self._client.transact_get_items(TransactItems=gets)

        return _items_of(self._read_in_layout(transact_get), keys)

    def _get_raw(self, key: str) -> Raw | None:
        def get_item(part: Callable[[str], str]) -> Any:
            return self._client.get_item(TableName=self.table, Key=key_of(key, part), ConsistentRead=True)

        return self._read_in_layout(get_item).get("Item")

    def _read_in_layout(self, request: Callable[[Callable[[str], str]], T]) -> T:
        """``request`` (given the current layout's partitioner) through ``_read``, made again
        should a migration have switched the layout meanwhile."""
        while True:
            layout = self.layout()
            resp = self._read(functools.partial(request, partitioner(layout)))
            if self._confirmed(layout):
                return resp

    def scan_prefix(
        self, prefix: str, *, start_after: str | None = None, limit: int | None = None
    ) -> Iterator[Item]:
        if limit is not None and limit <= 0:
            return
        after, remaining = start_after, limit
        while True:
            layout = self.layout()
            for page in self._pages(prefix, after, remaining, layout):
                if not self._confirmed(layout):
                    break  # migrated meanwhile: go on after the last key yielded, in layout 2
                for item in page:
                    yield item
                    after = item.key
                    if remaining is not None:
                        remaining -= 1
                        if remaining == 0:
                            return
            else:
                return

    def _pages(self, prefix: str, start_after: str | None, limit: int | None, layout: str) -> Iterator[Any]:
        """Items in key order, in pages (each fetched before it is yielded, so the caller can
        confirm the layout it was read in)."""
        if "/" not in prefix:
            yield self._scan_all(prefix, start_after, limit, layout)
            return
        if start_after is not None and start_after >= prefix and not start_after.startswith(prefix):
            return  # start_after sorts after every key with this prefix
        if start_after is not None and start_after < prefix:
            start_after = None
        partitions = [partition_v1(prefix)] if layout != CURRENT else scan_partitions(prefix)
        if partitions is None:
            yield self._scan_all(prefix, start_after, limit, layout)
        elif len(partitions) == 1:
            yield from self._query_pages(partitions[0], prefix, start_after, limit)
        else:
            # Layout 2 only (never re-checked): merge the buckets lazily in key order.
            streams = [self._query_items(p, prefix, start_after, limit) for p in partitions]
            yield heapq.merge(*streams, key=lambda item: item.key)

    def _query_items(self, partition: str, prefix: str, start_after: str | None, limit: int | None):
        for page in self._query_pages(partition, prefix, start_after, limit):
            yield from page

    def _query_pages(
        self, partition: str, prefix: str, start_after: str | None, limit: int | None
    ) -> Iterator[list[Item]]:
        # ExclusiveStartKey need not exist; it only has to satisfy the key condition.
        start: Raw | None = None if start_after is None else {"p": {"S": partition}, "k": {"S": start_after}}
        remaining = limit
        while True:
            params: dict[str, Any] = {
                "TableName": self.table,
                "KeyConditionExpression": "p = :p AND begins_with(k, :prefix)",
                "ExpressionAttributeValues": {":p": {"S": partition}, ":prefix": {"S": prefix}},
                "ConsistentRead": True,
                "Limit": _PAGE if remaining is None else min(_PAGE, remaining),
            }
            if start is not None:
                params["ExclusiveStartKey"] = start
            resp = self._read(functools.partial(self._client.query, **params))
            page = [item_of(raw) for raw in resp.get("Items", [])]
            if page:
                yield page
            if remaining is not None:
                remaining -= len(page)
                if remaining <= 0:
                    return
            start = resp.get("LastEvaluatedKey")
            if start is None:
                return

    def _scan_all(self, prefix: str, start_after: str | None, limit: int | None, layout: str) -> list[Item]:
        # A prefix without "/" (or a layout-2 prefix leaving an incarnation open) spans
        # partitions; no registry code path scans that way, so a full consistent Scan sorted
        # here is acceptable as the slow, correct fallback. Items not at their home partition in
        # ``layout`` (a migration's copies, the layout item) are not registry keys.
        part = partitioner(layout)
        params: dict[str, Any] = {"TableName": self.table, "ConsistentRead": True}
        if prefix:
            params["FilterExpression"] = "begins_with(k, :prefix)"
            params["ExpressionAttributeValues"] = {":prefix": {"S": prefix}}
        found: list[Item] = []
        while True:
            resp = self._read(lambda: self._client.scan(**params))
            found.extend(
                item_of(raw) for raw in resp.get("Items", []) if raw["p"]["S"] == part(raw["k"]["S"])
            )
            if "LastEvaluatedKey" not in resp:
                break
            params["ExclusiveStartKey"] = resp["LastEvaluatedKey"]
        found.sort(key=lambda item: item.key.encode())
        if start_after is not None:
            found = [item for item in found if item.key.encode() > start_after.encode()]
        return found[:limit]

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
        if len(ops) == MAX_TRANSACT_OPS and self._writable_layout() != CURRENT:
            raise InvalidInput(
                f"a layout-1 registry takes at most {MAX_TRANSACT_OPS - 1} operations per batch "
                "(one slot guards the layout); run `lake registry migrate`"
            )
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
                    if self._layout != CURRENT and self.layout(refresh=True) != LEGACY:
                        continue  # the layout guard failed: frozen (raises next round) or migrated
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
        layout = self._writable_layout()
        if layout != CURRENT:
            part = partitioner(layout)
            self._client.transact_write_items(
                TransactItems=[transact_item(self.table, op, write_id, part) for op in ops]
                + [_layout_guard(self.table)],
                # Not the layout-2 token: a retry after the migration sends other items.
                ClientRequestToken=str(uuid.uuid5(uuid.NAMESPACE_OID, f"{write_id}/{layout}")),
            )
            return {}
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


def _items_of(resp: dict[str, Any], keys: Sequence[str]) -> list[Item | None]:
    """TransactGetItems' responses, one per requested key: ``{"Item": ...}``, or ``{}`` when absent."""
    responses = resp.get("Responses", [])
    if len(responses) != len(keys):
        raise Internal(f"registry answered {len(responses)} items for {len(keys)} keys")
    return [item_of(r["Item"]) if r.get("Item") else None for r in responses]


def _layout_guard(table: str) -> dict[str, Any]:
    """Fails a layout-1 write once a migration has frozen the table."""
    return {
        "ConditionCheck": {
            "TableName": table,
            "Key": LAYOUT_KEY,
            "ConditionExpression": "attribute_not_exists(k) OR s = :legacy",
            "ExpressionAttributeValues": {":legacy": {"S": LEGACY}},
        }
    }


def _sleep_backoff(attempt: int) -> None:
    # Full jitter: spreads contending clients instead of re-colliding in lockstep.
    time.sleep(random.uniform(0, min(_BACKOFF_CAP, _BACKOFF_BASE * 2**attempt)))
