"""DynamoDB item layout and request marshalling for the registry (no I/O here).

Table layout (one table, many record kinds):

- ``p`` (S, hash key): the partition, a function of the key chosen by the table's item layout
  (``dynamodb_layout``: per table incarnation for version records, hashed buckets for table
  records and the commit log, the record kind for the rest). ``scan_prefix`` is then an ordered,
  paged Query of one partition, or a key-ordered merge of a few.
- ``k`` (S, range key): the full key. DynamoDB orders S range keys by UTF-8 bytes, as the contract
  asks.
- ``v`` (B) value, ``r`` (N) revision, ``w`` (S) id of the logical call that last wrote the item.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

from lake_platform.errors import RecordTooLarge, SettingsError
from lake_platform.registry.dynamodb_layout import partition_of, partition_v1
from lake_platform.registry.store import ABSENT, Delete, Item, Op, Put

Raw = dict[str, Any]

_TABLE_NAME = re.compile(r"^[A-Za-z0-9_.-]{3,255}$")
KEY_SCHEMA = [{"AttributeName": "p", "KeyType": "HASH"}, {"AttributeName": "k", "KeyType": "RANGE"}]
_UNCONDITIONAL_GUARD = "attribute_not_exists(w) OR w <> :w"
_UNCONDITIONAL_SET = "SET v = :v, w = :w, r = if_not_exists(r, :zero) + :one"
#: DynamoDB's largest item ("400 KB"; counted as 400,000 bytes, below every reading of it) and
#: the most one TransactWriteItems may carry ("4 MB", likewise). Over either DynamoDB answers a
#: ValidationException that names neither the record nor the cause; ``check_sizes`` says both
#: before anything is sent.
MAX_ITEM_BYTES = 400_000
MAX_REQUEST_BYTES = 4_000_000
#: An item's attributes besides its key and value, at their widest: ``r`` (a number of at most
#: 21 bytes) and ``w`` (a uuid), with the five one-letter attribute names.
_ITEM_OVERHEAD = 5 + 21 + 36


@dataclass(frozen=True)
class DynamoUrl:
    table: str
    region: str | None
    endpoint_url: str | None
    #: Change-feed shards a registry gets when its first change is written (``registry.changes``).
    change_shards: int | None = None


def parse_url(url: str) -> DynamoUrl:
    """``dynamodb://TABLE?region=..&endpoint_url=..``; anything else is a SettingsError."""

    def bad(why: str) -> SettingsError:
        return SettingsError(
            f"LAKE_REGISTRY_URL: {why} in {url!r} (expected dynamodb://TABLE?region=REGION&endpoint_url=URL&change_shards=N)"
        )

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
    unknown = set(query) - {"region", "endpoint_url", "change_shards"}
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
    shards = query.get("change_shards", [""])[0] or None
    if shards is not None and not re.fullmatch(r"[1-9][0-9]{0,3}", shards):
        raise bad("change_shards must be 1-9999")
    return DynamoUrl(parts.netloc, region, endpoint, int(shards) if shards else None)


Partition = Callable[[str], str]


def item_bytes(op: Op, part: Partition = partition_of) -> int:
    """The size DynamoDB counts for the item ``op`` sends: attribute names and values (a Delete
    or Check sends its key only)."""
    size = len(part(op.key).encode()) + len(op.key.encode())
    return size + (len(op.value) + _ITEM_OVERHEAD if isinstance(op, Put) else 2)


#: The change record's own weight in a batch (``registry.changes``: its partition, key and
#: attributes, and its value's frame), besides the keys it lists (``op_weight``).
_CHANGE_RECORD_BYTES = 256


def op_weight(op: Op) -> int:
    """What ``op`` adds to the TransactWriteItems it is sent in, whatever the table's layout:
    its item, and its key in the change record the store adds (``registry.changes``, JSON)."""
    listed = len(json.dumps(op.key)) + 1
    return max(item_bytes(op, partition_of), item_bytes(op, partition_v1)) + listed


#: The most ``op_weight`` one batch of ``transact`` carries.
MAX_BATCH_WEIGHT = MAX_REQUEST_BYTES - _CHANGE_RECORD_BYTES


def check_sizes(ops: Sequence[Op], part: Partition = partition_of) -> None:
    """Refuse ``ops`` (one TransactWriteItems, or one single-item call) if a record is larger
    than an item holds or all of them more than a transaction carries: RecordTooLarge naming it,
    nothing sent."""
    sizes = [item_bytes(op, part) for op in ops]
    for op, size in zip(ops, sizes, strict=True):
        if size > MAX_ITEM_BYTES:
            raise RecordTooLarge(
                f"registry record {op.key!r} is {size:,} bytes; a DynamoDB registry stores at most "
                f"{MAX_ITEM_BYTES:,} bytes per record, so nothing was written (a table record holds "
                "the table's schema: fewer or shorter column names, or less schema metadata, fit)",
                key=op.key,
                size=size,
                limit=MAX_ITEM_BYTES,
            )
    total = sum(sizes)
    if total > MAX_REQUEST_BYTES:
        largest = max(zip(sizes, (op.key for op in ops), strict=True))
        raise RecordTooLarge(
            f"registry write of {len(ops)} records is {total:,} bytes (the largest {largest[1]!r}, "
            f"{largest[0]:,}); one DynamoDB transaction carries at most {MAX_REQUEST_BYTES:,} bytes, "
            "so nothing was written: write fewer or smaller records at once",
            size=total,
            limit=MAX_REQUEST_BYTES,
        )


def key_of(key: str, part: Partition = partition_of) -> Raw:
    return {"p": {"S": part(key)}, "k": {"S": key}}


def item_of(raw: Raw) -> Item:
    return Item(raw["k"]["S"], bytes(raw["v"]["B"]), int(raw["r"]["N"]))


def _condition(expected: int) -> dict[str, Any]:
    if expected == ABSENT:
        return {"ConditionExpression": "attribute_not_exists(k)"}
    return {"ConditionExpression": "r = :n", "ExpressionAttributeValues": {":n": {"N": str(expected)}}}


def conditional_put(table: str, op: Put, write_id: str, part: Partition = partition_of) -> dict[str, Any]:
    assert op.expected is not None
    item = {
        **key_of(op.key, part),
        "v": {"B": op.value},
        "r": {"N": str(op.expected + 1)},
        "w": {"S": write_id},
    }
    return {
        "TableName": table,
        "Item": item,
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        **_condition(op.expected),
    }


def unconditional_put(table: str, op: Put, write_id: str, part: Partition = partition_of) -> dict[str, Any]:
    # The guard fails only when this very call already wrote the item, so a re-sent request
    # cannot bump the revision twice.
    return {
        "TableName": table,
        "Key": key_of(op.key, part),
        "UpdateExpression": _UNCONDITIONAL_SET,
        "ConditionExpression": _UNCONDITIONAL_GUARD,
        "ExpressionAttributeValues": {
            ":v": {"B": op.value},
            ":w": {"S": write_id},
            ":zero": {"N": "0"},
            ":one": {"N": "1"},
        },
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }


def delete_request(table: str, op: Delete, part: Partition = partition_of) -> dict[str, Any]:
    return {
        "TableName": table,
        "Key": key_of(op.key, part),
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        **_condition(op.expected),
    }


def transact_item(table: str, op: Op, write_id: str, part: Partition = partition_of) -> dict[str, Any]:
    if isinstance(op, Put) and op.expected is None:
        return {"Update": unconditional_put(table, op, write_id, part)}
    if isinstance(op, Put):
        return {"Put": conditional_put(table, op, write_id, part)}
    if isinstance(op, Delete):
        return {"Delete": delete_request(table, op, part)}
    return {
        "ConditionCheck": {
            "TableName": table,
            "Key": key_of(op.key, part),
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            **_condition(op.expected),
        }
    }
