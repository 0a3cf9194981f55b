"""DynamoDB MetaStore: conditional expressions, TransactWriteItems, consistent reads.

Table layout (one table, many record kinds):

- ``p`` (S, hash key): the key's first ``/``-segment (``tbl``, ``ver``, ``log``...; the whole key
  when it has no ``/``). Every key sharing a ``prefix/`` lives in one partition, so ``scan_prefix``
  is an ordered, paged Query instead of a Scan.
- ``k`` (S, range key): the full key. DynamoDB orders S range keys by UTF-8 bytes, as the contract
  asks.
- ``v`` (B) value, ``r`` (N) revision, ``w`` (S) id of the logical call that last wrote the item.

``w`` is how unknown outcomes are resolved (design invariant 5): every call gets one id, reused by
every retry of that call (and sent as TransactWriteItems' ClientRequestToken). After a timeout, or
when a retry fails its condition, reading ``w`` tells whether this very call already landed, so a
retried request never commits twice, with or without server-side token support.
"""

from __future__ import annotations

import random
import re
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit

import boto3
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    NoCredentialsError,
    NoRegionError,
    ParamValidationError,
    PartialCredentialsError,
)

from lake_platform.errors import (
    ConcurrentModification,
    ConditionFailed,
    Internal,
    InvalidInput,
    LakeError,
    PermissionDenied,
    ServiceUnavailable,
    SettingsError,
    Throttling,
    Unauthenticated,
)
from lake_platform.registry.store import ABSENT, Check, Delete, Item, MetaStore, Op, Put, check_key, check_ops
from lake_platform.settings import LakeSettings

T = TypeVar("T")
Raw = dict[str, Any]

_TABLE_NAME = re.compile(r"^[A-Za-z0-9_.-]{3,255}$")
_KEY_SCHEMA = [{"AttributeName": "p", "KeyType": "HASH"}, {"AttributeName": "k", "KeyType": "RANGE"}]
_PAGE = 500
#: Our own attempts per call, on top of botocore's (max_attempts=2): bounded so a call's total time
#: stays a small multiple of the I/O timeout.
_ATTEMPTS = 3
_BACKOFF_BASE = 0.05
_BACKOFF_CAP = 1.0
_THROTTLE_CODES = {
    "ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded",
    "Throttling", "ThrottlingError", "ProvisionedThroughputExceeded",
}
_AUTH_CODES = {
    "UnrecognizedClientException", "InvalidSignatureException", "ExpiredTokenException",
    "MissingAuthenticationTokenException", "InvalidClientTokenId",
}
_UNCONDITIONAL_GUARD = "attribute_not_exists(w) OR w <> :w"
_UNCONDITIONAL_SET = "SET v = :v, w = :w, r = if_not_exists(r, :zero) + :one"


@dataclass(frozen=True)
class DynamoUrl:
    table: str
    region: str | None
    endpoint_url: str | None


def parse_url(url: str) -> DynamoUrl:
    """``dynamodb://TABLE?region=..&endpoint_url=..``; anything else is a SettingsError."""

    def bad(why: str) -> SettingsError:
        return SettingsError(f"LAKE_REGISTRY_URL: {why} in {url!r} "
                             "(expected dynamodb://TABLE?region=REGION&endpoint_url=URL)")

    parts = urlsplit(url)
    if parts.scheme != "dynamodb":
        raise bad("scheme must be dynamodb://")
    if parts.path not in ("", "/") or parts.fragment:
        raise bad("unexpected path")
    if not _TABLE_NAME.match(parts.netloc):
        raise bad("table name must be 3-255 of A-Z a-z 0-9 _ . -")
    try:
        query = parse_qs(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError:
        raise bad("malformed query") from None
    unknown = set(query) - {"region", "endpoint_url"}
    if unknown:
        raise bad(f"unknown parameter(s) {sorted(unknown)}")
    if any(len(values) != 1 for values in query.values()):
        raise bad("repeated parameter")
    region = query.get("region", [""])[0] or None
    endpoint = query.get("endpoint_url", [""])[0] or None
    if region is not None and not re.fullmatch(r"[a-z0-9-]{1,50}", region):
        raise bad("bad region")
    target = urlsplit(endpoint or "")
    if endpoint is not None and (target.scheme not in ("http", "https") or not target.netloc):
        raise bad("endpoint_url must be http(s)://HOST[:PORT]")
    return DynamoUrl(parts.netloc, region, endpoint)


def partition_of(key: str) -> str:
    # Key attributes may not be empty strings, so a leading "/" gets a partition of its own.
    return key.split("/", 1)[0] or "/"


def init_table(url: str, settings: LakeSettings) -> None:
    """Create the registry table named by ``url`` (``lake registry init``); idempotent."""
    store = DynamoMetaStore.from_url(url, settings)
    try:
        store.create_table()
    finally:
        store.close()


class DynamoMetaStore(MetaStore):
    def __init__(self, table: str, *, region: str | None = None, endpoint_url: str | None = None,
                 io_timeout_seconds: float = 2.0, url: str | None = None) -> None:
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
        return cls(parsed.table, region=parsed.region, endpoint_url=parsed.endpoint_url,
                   io_timeout_seconds=settings.lease_io_timeout_seconds, url=url)

    # -- table lifecycle -------------------------------------------------------------------------

    def create_table(self) -> None:
        """Create the table (PAY_PER_REQUEST) and wait until ACTIVE; an existing table is fine if
        its key schema is ours."""
        try:
            self._client.create_table(
                TableName=self.table,
                AttributeDefinitions=[{"AttributeName": "p", "AttributeType": "S"},
                                      {"AttributeName": "k", "AttributeType": "S"}],
                KeySchema=_KEY_SCHEMA,
                BillingMode="PAY_PER_REQUEST",
            )
        except ClientError as exc:
            if _code(exc) != "ResourceInUseException":
                raise _translate(exc, (), self.table) from exc
        except BotoCoreError as exc:
            raise _translate(exc, (), self.table) from exc
        try:
            self._client.get_waiter("table_exists").wait(
                TableName=self.table, WaiterConfig={"Delay": 1, "MaxAttempts": 120}
            )
            desc = self._client.describe_table(TableName=self.table)["Table"]
        except (ClientError, BotoCoreError) as exc:
            raise ServiceUnavailable(f"registry table {self.table!r} did not become ready: {exc}") from exc
        types = {a["AttributeName"]: a["AttributeType"] for a in desc.get("AttributeDefinitions", [])}
        if desc.get("KeySchema") != _KEY_SCHEMA or types.get("p") != "S" or types.get("k") != "S":
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
            if _code(exc) != "ResourceNotFoundException":
                raise _translate(exc, (), self.table) from exc
        except BotoCoreError as exc:
            raise _translate(exc, (), self.table) from exc

    def close(self) -> None:
        self._client.close()

    # -- reads -----------------------------------------------------------------------------------

    def get(self, key: str) -> Item | None:
        check_key(key)
        raw = self._get_raw(key)
        return _item(raw) if raw else None

    def _get_raw(self, key: str) -> Raw | None:
        resp = self._read(lambda: self._client.get_item(
            TableName=self.table, Key=_key(key), ConsistentRead=True
        ))
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
            start = _key(start_after)
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
            resp = self._read(lambda: self._client.query(**params))
            for raw in resp.get("Items", []):
                yield _item(raw)
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
            found.extend(_item(raw) for raw in resp.get("Items", []))
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
                error = _translate(exc, (), self.table)
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
            raise ConditionFailed(_condition_message(op, found), key=op.key)

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
                maybe_landed |= _botocore_retried(exc)
                error = _translate(exc, ops, self.table)
                if isinstance(error, ConditionFailed):
                    mine = _own_items(exc, ops, write_id)
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
                resp = self._client.update_item(**_unconditional_put(self.table, op, write_id),
                                                ReturnValues="ALL_NEW")
                return {op.key: _item(resp["Attributes"])}
            if isinstance(op, Put):
                self._client.put_item(**_conditional_put(self.table, op, write_id))
            else:
                assert isinstance(op, Delete)
                self._client.delete_item(**_delete(self.table, op))
            return {}
        self._client.transact_write_items(
            TransactItems=[_transact_item(self.table, op, write_id) for op in ops],
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


# -- request building ----------------------------------------------------------------------------


def _key(key: str) -> Raw:
    return {"p": {"S": partition_of(key)}, "k": {"S": key}}


def _item(raw: Raw) -> Item:
    return Item(raw["k"]["S"], bytes(raw["v"]["B"]), int(raw["r"]["N"]))


def _condition(expected: int) -> dict[str, Any]:
    if expected == ABSENT:
        return {"ConditionExpression": "attribute_not_exists(k)"}
    return {"ConditionExpression": "r = :n", "ExpressionAttributeValues": {":n": {"N": str(expected)}}}


def _conditional_put(table: str, op: Put, write_id: str) -> dict[str, Any]:
    assert op.expected is not None
    item = {**_key(op.key), "v": {"B": op.value}, "r": {"N": str(op.expected + 1)}, "w": {"S": write_id}}
    return {"TableName": table, "Item": item, "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            **_condition(op.expected)}


def _unconditional_put(table: str, op: Put, write_id: str) -> dict[str, Any]:
    # The guard fails only when this very call already wrote the item, so a re-sent request
    # cannot bump the revision twice.
    return {
        "TableName": table,
        "Key": _key(op.key),
        "UpdateExpression": _UNCONDITIONAL_SET,
        "ConditionExpression": _UNCONDITIONAL_GUARD,
        "ExpressionAttributeValues": {":v": {"B": op.value}, ":w": {"S": write_id},
                                      ":zero": {"N": "0"}, ":one": {"N": "1"}},
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }


def _delete(table: str, op: Delete) -> dict[str, Any]:
    return {"TableName": table, "Key": _key(op.key), "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            **_condition(op.expected)}


def _transact_item(table: str, op: Op, write_id: str) -> dict[str, Any]:
    if isinstance(op, Put) and op.expected is None:
        return {"Update": _unconditional_put(table, op, write_id)}
    if isinstance(op, Put):
        return {"Put": _conditional_put(table, op, write_id)}
    if isinstance(op, Delete):
        return {"Delete": _delete(table, op)}
    return {"ConditionCheck": {"TableName": table, "Key": _key(op.key),
                               "ReturnValuesOnConditionCheckFailure": "ALL_OLD", **_condition(op.expected)}}


# -- error handling ------------------------------------------------------------------------------


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _botocore_retried(exc: Exception) -> bool:
    if isinstance(exc, ClientError):
        return int(exc.response.get("ResponseMetadata", {}).get("RetryAttempts", 0) or 0) > 0
    return True  # transport errors: we cannot tell how far the request got


def _cancellation_codes(exc: ClientError) -> list[str]:
    reasons = exc.response.get("CancellationReasons")
    if reasons:
        return [str(r.get("Code", "None")) for r in reasons]
    # Some servers only put the reasons in the message: "... reasons [None, ConditionalCheckFailed]".
    match = re.search(r"\[([^\]]*)\]\s*$", str(exc.response.get("Error", {}).get("Message", "")))
    return [c.strip() for c in match.group(1).split(",")] if match else []


def _old_items(exc: ClientError, ops: Sequence[Op]) -> dict[int, Raw]:
    """ALL_OLD images the server returned with a failed condition, by op index."""
    if _code(exc) == "ConditionalCheckFailedException":
        item = exc.response.get("Item")
        return {0: item} if item else {}
    reasons = exc.response.get("CancellationReasons") or []
    return {i: r["Item"] for i, r in enumerate(reasons[: len(ops)]) if r.get("Item")}


def _own_items(exc: Exception, ops: Sequence[Op], write_id: str) -> dict[str, Item] | None:
    """If a failed condition saw this call's own earlier write, the call has landed: return the
    items it wrote, else None."""
    if not isinstance(exc, ClientError):
        return None
    mine = {
        ops[i].key: _item(raw)
        for i, raw in _old_items(exc, ops).items()
        if isinstance(ops[i], Put) and raw.get("w", {}).get("S") == write_id
    }
    return mine or None


def _condition_message(op: Op, found: int | None) -> str:
    seen = "" if found is None else f", found {found}"
    return f"registry condition failed on {op.key!r}: expected revision {op.expected}{seen}"


def _translate(exc: Exception, ops: Sequence[Op], table: str) -> LakeError:
    if isinstance(exc, ClientError):
        code = _code(exc)
        message = exc.response.get("Error", {}).get("Message", "") or code
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        if code == "ConditionalCheckFailedException" and ops:
            old = _old_items(exc, ops).get(0)
            found = int(old["r"]["N"]) if old and "r" in old else None
            return ConditionFailed(_condition_message(ops[0], found), key=ops[0].key)
        if code == "TransactionCanceledException":
            codes = _cancellation_codes(exc)
            for i, reason in enumerate(codes[: len(ops)]):
                if reason == "ConditionalCheckFailed":
                    old = _old_items(exc, ops).get(i)
                    found = int(old["r"]["N"]) if old and "r" in old else None
                    return ConditionFailed(_condition_message(ops[i], found), key=ops[i].key)
            if "ConditionalCheckFailed" in codes:
                return ConditionFailed(f"registry condition failed: {message}")
            if "TransactionConflict" in codes:
                return ConcurrentModification(f"registry transaction conflict: {message}")
            if _THROTTLE_CODES.intersection(codes):
                return Throttling(f"registry throttled: {message}")
            if "ValidationError" in codes:
                return InvalidInput(f"registry rejected the batch: {message}")
            return Internal(f"registry transaction cancelled: {message}")
        if code in ("TransactionConflictException",):
            return ConcurrentModification(f"registry transaction conflict: {message}")
        if code in _THROTTLE_CODES:
            return Throttling(f"registry throttled: {message}")
        if code == "TransactionInProgressException":
            return ServiceUnavailable(f"registry transaction still in progress: {message}")
        if code == "ResourceNotFoundException":
            return SettingsError(f"LAKE_REGISTRY_URL: registry table {table!r} not found "
                                 "(run `lake registry init`)")
        if code == "AccessDeniedException":
            return PermissionDenied(f"registry access denied: {message}")
        if code in _AUTH_CODES:
            return Unauthenticated(f"registry credentials rejected: {message}")
        if code == "ValidationException":
            return InvalidInput(f"registry rejected the request: {message}")
        if status >= 500 or code in ("InternalServerError", "ServiceUnavailable"):
            return ServiceUnavailable(f"registry unavailable: {message}")
        return Internal(f"registry error {code}: {message}")
    if isinstance(exc, ParamValidationError):
        return InvalidInput(f"registry request invalid: {exc}")
    if isinstance(exc, (NoCredentialsError, PartialCredentialsError)):
        return Unauthenticated(f"no AWS credentials for the registry: {exc}")
    return ServiceUnavailable(f"registry unreachable: {exc}")


def _sleep_backoff(attempt: int) -> None:
    # Full jitter: spreads contending clients instead of re-colliding in lockstep.
    time.sleep(random.uniform(0, min(_BACKOFF_CAP, _BACKOFF_BASE * 2**attempt)))
