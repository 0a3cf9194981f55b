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

Request building lives in ``dynamodb_items``, error translation in ``dynamodb_errors``, retries
in ``dynamodb_retry``, the pages of ``scan_prefix`` and ``scan_range`` in ``dynamodb_paging``, a
write's request and read-back in ``dynamodb_writes``, creating and deleting the table in
``dynamodb_admin``.
"""

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, NoRegionError
from botocore.hooks import BaseEventHooks

from lake_platform.aws_session import botocore_session
from lake_platform.errors import (
    ConditionFailed,
    Internal,
    InvalidInput,
    LakeError,
    ServiceUnavailable,
    SettingsError,
    Throttling,
)
from lake_platform.registry import dynamodb_writes
from lake_platform.registry.changes import DEFAULT_SHARDS, ChangeWriter
from lake_platform.registry.dynamodb_errors import (
    botocore_retried,
    condition_message,
    error_code,
    own_items,
    translate,
)
from lake_platform.registry.dynamodb_items import (
    MAX_BATCH_WEIGHT,
    Raw,
    check_sizes,
    item_of,
    key_of,
    op_weight,
    parse_url,
)
from lake_platform.registry.dynamodb_layout import CURRENT, FROZEN, LAYOUT_KEY, LEGACY, partitioner
from lake_platform.registry.dynamodb_paging import FETCHERS, Span, key_ordered_pages
from lake_platform.registry.dynamodb_retry import ATTEMPTS, Sleep, retried_read, sleep_backoff
from lake_platform.registry.store import (
    ABSENT,
    BATCH_OPS,
    MAX_TRANSACT_OPS,
    Check,
    Item,
    MetaStore,
    Op,
    Put,
    check_key,
    check_keys,
    check_ops,
    check_range,
)
from lake_platform.settings import LakeSettings

T = TypeVar("T")


class DynamoMetaStore(MetaStore):
    """The registry on one DynamoDB table: its client, its item layout, reads confirmed against
    the layout, and writes under the retry rule for unknown outcomes."""

    backend = "dynamodb"
    #: One TransactWriteItems takes 100 items; the change record takes one of them.
    max_transact_ops = MAX_TRANSACT_OPS
    #: One TransactWriteItems carries 4 MB; the change record takes its share.
    max_transact_bytes = MAX_BATCH_WEIGHT

    def __init__(
        self,
        table: str,
        *,
        region: str | None = None,
        endpoint_url: str | None = None,
        io_timeout_seconds: float = 2.0,
        url: str | None = None,
        change_shards: int = DEFAULT_SHARDS,
        sleep: Sleep = time.sleep,
    ) -> None:
        """``sleep``: how the store waits between its own attempts at a call (botocore's
        retries inside an attempt wait as botocore does)."""
        self.table = table
        self._sleep = sleep
        self.changes = ChangeWriter(self, change_shards)
        self.url = url or f"dynamodb://{table}"
        self._layout: str | None = None  # read on first use; CURRENT is never re-read
        config = Config(
            # Below the lease safety margin (settings checks), so lease I/O gives up in time:
            # at most two sends of the timeout each (botocore's max_attempts counts retries,
            # total_max_attempts counts sends).
            connect_timeout=io_timeout_seconds / 2,
            read_timeout=io_timeout_seconds / 2,
            retries={"total_max_attempts": 2, "mode": "standard"},
            # A listing over a kind's buckets queries them all at once (dynamodb_paging).
            max_pool_connections=max(FETCHERS, 10),  # botocore keeps 10 by default
        )
        try:
            # Credentials: the standard AWS chain, resolved per store; botocore's model files are
            # parsed once per process (aws_session). Creating a client makes no network call.
            self._client = botocore_session().create_client(
                "dynamodb", region_name=region, endpoint_url=endpoint_url, config=config
            )
        except NoRegionError:
            raise SettingsError(
                "LAKE_REGISTRY_URL: no AWS region; add ?region=... or set AWS_DEFAULT_REGION"
            ) from None

    @classmethod
    def from_url(cls, url: str, settings: LakeSettings, *, sleep: Sleep = time.sleep) -> DynamoMetaStore:
        parsed = parse_url(url)
        return cls(
            parsed.table,
            region=parsed.region,
            endpoint_url=parsed.endpoint_url,
            io_timeout_seconds=settings.lease_io_timeout_seconds,
            url=url,
            change_shards=parsed.change_shards or DEFAULT_SHARDS,
            sleep=sleep,
        )

    # -- layout ----------------------------------------------------------------------------------

    def layout(self, *, refresh: bool = False) -> str:
        """The table's item layout: LEGACY, FROZEN (a migration is copying) or CURRENT."""
        if self._layout is None or (refresh and self._layout != CURRENT):
            resp = retried_read(
                lambda: self._client.get_item(TableName=self.table, Key=LAYOUT_KEY, ConsistentRead=True),
                self.table,
                self._sleep,
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

    @property
    def client(self) -> Any:
        """The store's botocore DynamoDB client: for the table's own administration (create,
        delete, the layout migration's raw scans and batch writes), not for records."""
        return self._client

    @property
    def events(self) -> BaseEventHooks:
        """The event system of the store's botocore client (its ``meta.events``): hooks on each
        call it makes (tracing; tests losing a response or throttling a request)."""
        return self._client.meta.events

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
        """``request`` (given the current layout's partitioner), retried, and made again
        should a migration have switched the layout meanwhile."""
        while True:
            layout = self.layout()
            resp = retried_read(functools.partial(request, partitioner(layout)), self.table, self._sleep)
            if self._confirmed(layout):
                return resp

    def scan_prefix(
        self, prefix: str, *, start_after: str | None = None, limit: int | None = None
    ) -> Iterator[Item]:
        return self._scan(Span(prefix), start_after, limit)

    def scan_range(
        self, start: str, stop: str, *, start_after: str | None = None, limit: int | None = None
    ) -> Iterator[Item]:
        if not check_range(start, stop):
            return iter(())
        return self._scan(Span(start, stop), start_after, limit)

    def _scan(self, span: Span, start_after: str | None, limit: int | None) -> Iterator[Item]:
        if limit is not None and limit <= 0:
            return
        after, remaining = start_after, limit
        while True:
            layout = self.layout()
            pages = key_ordered_pages(self._client, self.table, span, after, remaining, layout, self._sleep)
            for page in pages:
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

    # -- writes ----------------------------------------------------------------------------------

    def op_bytes(self, op: Op) -> int:
        return op_weight(op)

    def check_record(self, key: str, value: bytes) -> None:
        check_sizes([Put(key, value, None)])

    def transact(self, ops: Sequence[Op]) -> list[Item | None]:
        check_ops(ops, self.max_transact_ops)
        check_sizes(ops)  # before the change feed reads or writes anything; _apply checks all
        if len(ops) == 1 and isinstance(ops[0], Check):
            self._check_one(ops[0])
            return [None]
        return self.changes.write(ops, self._apply)

    def _apply(self, ops: Sequence[Op]) -> list[Item | None]:
        """``ops`` with the change record the feed added: one TransactWriteItems."""
        check_sizes(ops, partitioner(self.layout()))
        if len(ops) == BATCH_OPS and self._writable_layout() != CURRENT:
            raise InvalidInput(
                f"a layout-1 registry takes at most {BATCH_OPS - 1} operations per batch, the "
                "change record included (one slot guards the layout); run `lake registry migrate`"
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
        for attempt in range(ATTEMPTS):
            if attempt:
                sleep_backoff(attempt, self._sleep)
            try:
                known = dynamodb_writes.write_once(
                    self._client, self.table, ops, write_id, self._writable_layout()
                )
            except (ClientError, BotoCoreError) as exc:
                # botocore may have re-sent the request after a lost response.
                maybe_landed |= botocore_retried(exc)
                error = translate(exc, ops, self.table)
                if isinstance(error, ConditionFailed):
                    if self._layout != CURRENT and self.layout(refresh=True) != LEGACY:
                        continue  # the layout guard failed: frozen (raises next round) or migrated
                    mine = own_items(exc, ops, write_id)
                    if mine is not None:
                        return dynamodb_writes.results(self._get_raw, ops, mine)
                    if maybe_landed and dynamodb_writes.landed(self._get_raw, ops, write_id):
                        return dynamodb_writes.results(self._get_raw, ops, {})
                    raise error from exc
                if isinstance(error, Throttling) and not maybe_landed:
                    continue  # a throttled request was rejected, not applied
                if isinstance(error, (ServiceUnavailable, Throttling)):
                    # Unknown outcome (a throttled re-send says nothing of the send before it):
                    # re-read before retrying (same id, so a late landing of the first request
                    # makes the retry fail its condition, never apply twice).
                    maybe_landed = True
                    try:
                        landed = dynamodb_writes.landed(self._get_raw, ops, write_id)
                    except LakeError:
                        raise ServiceUnavailable(
                            f"registry write outcome unknown ({error}); re-read failed too"
                        ) from exc
                    if landed:
                        return dynamodb_writes.results(self._get_raw, ops, {})
                    continue
                raise error from exc
            return dynamodb_writes.results(self._get_raw, ops, known)
        assert error is not None
        if maybe_landed and not isinstance(error, ServiceUnavailable):
            # Never "refused" (Throttling) for a call one of whose requests may have landed:
            # callers resolve an unknown outcome (their commit marker); a refusal they retry.
            raise ServiceUnavailable(f"registry write outcome unknown ({error})")
        raise error


def _items_of(resp: dict[str, Any], keys: Sequence[str]) -> list[Item | None]:
    """TransactGetItems' responses, one per requested key: ``{"Item": ...}``, or ``{}`` when absent."""
    responses = resp.get("Responses", [])
    if len(responses) != len(keys):
        raise Internal(f"registry answered {len(responses)} items for {len(keys)} keys")
    return [item_of(r["Item"]) if r.get("Item") else None for r in responses]
