"""Scoped storage credentials (``LAKE_REST_STORAGE_CREDENTIALS=scoped``): per table, short-lived
S3 keys from STS ``AssumeRole`` of ``LAKE_REST_STS_ROLE_ARN``, narrowed by an inline session
policy to that table's prefix.

- A principal that may only read the table's project gets ``s3:GetObject`` on the table's keys
  and ``s3:ListBucket`` for its prefix.
- A writer gets, in addition, ``s3:PutObject``, ``s3:DeleteObject`` and
  ``s3:AbortMultipartUpload`` on the table's keys, except its published manifests
  (``_versions/*.manifest``, ``_latest.manifest``) and tags (``_refs/``): a Lance client writes
  data, deletion and index files and its staging manifest (``_versions/<n>.manifest-<uuid>``),
  and only the registry's commit path (``CreateTableVersion``, with the server's own keys)
  publishes a version.

What the keys may do is the intersection of the role's own policy and the session policy, so
the role must allow at least what a writer gets on the warehouses' buckets. The keys expire
after ``LAKE_REST_STS_DURATION_SECONDS`` (default 900, AssumeRole's minimum); the answer carries
the expiry as ``expires_at_millis`` and ``refresh_offset_millis`` (60 s), which Lance reads to
ask DescribeTable for new keys a minute before the expiry.

Keys are cached per (principal, table location, access) until less than a fifth of their
lifetime, or 60 s, remains: one client's repeated DescribeTable calls cost one STS call per
lifetime, and a client never receives keys about to expire.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from lake_platform.catalog.principals import Principal
from lake_platform.errors import ServiceUnavailable
from lake_platform.lru import BoundedLRU
from lake_platform.settings import LakeSettings

log = logging.getLogger(__name__)

#: Cached keys: one entry per (principal, table, access) in use; beyond, the least recently used
#: go (their next DescribeTable asks STS again).
CACHE_ENTRIES = 4096
#: Keys are renewed once less than this share of their lifetime remains...
REFRESH_SHARE = 0.2
#: ...or less than this many seconds, whichever is more.
REFRESH_SECONDS = 60.0

_SESSION_NAME_UNSAFE = re.compile(r"[^\w+=,.@-]", re.ASCII)


def table_session_policy(location: str, *, write: bool) -> str:
    """The session policy (compact JSON) for the table at ``location`` (``s3://bucket/prefix``):
    read and list the table's keys; with ``write``, also write and delete them except the
    published manifests and tags."""
    bucket, _, prefix = location.removeprefix("s3://").partition("/")
    prefix = prefix.strip("/")
    keys = f"arn:aws:s3:::{bucket}/{prefix}"
    statements: list[dict[str, Any]] = [
        {
            "Effect": "Allow",
            "Action": ["s3:ListBucket"],
            "Resource": [f"arn:aws:s3:::{bucket}"],
            "Condition": {"StringLike": {"s3:prefix": [prefix, f"{prefix}/*"]}},
        },
        {"Effect": "Allow", "Action": ["s3:GetObject"], "Resource": [f"{keys}/*"]},
    ]
    if write:
        statements += [
            {
                "Effect": "Allow",
                "Action": ["s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"],
                "Resource": [f"{keys}/*"],
            },
            {
                # An explicit Deny wins over the Allow above: versions and tags are published by
                # the registry's commit path only.
                "Effect": "Deny",
                "Action": ["s3:PutObject", "s3:DeleteObject"],
                "Resource": [f"{keys}/_versions/*.manifest", f"{keys}/_latest.manifest", f"{keys}/_refs/*"],
            },
        ]
    return json.dumps({"Version": "2012-10-17", "Statement": statements}, separators=(",", ":"))


def sts_endpoint(settings: LakeSettings) -> str | None:
    """``rest_sts_endpoint``; else the S3 endpoint when it is set and not AWS's (SeaweedFS, MinIO
    and Ceph serve STS on their S3 port); else None: boto3's regional STS endpoint."""
    if settings.rest_sts_endpoint:
        return settings.rest_sts_endpoint
    host = urlsplit(settings.s3_endpoint).hostname or ""
    if settings.s3_endpoint and not (host == "amazonaws.com" or host.endswith(".amazonaws.com")):
        return settings.s3_endpoint
    return None


def session_name(principal: Principal) -> str:
    """AssumeRole's RoleSessionName for the principal (2-64 of ``[\\w+=,.@-]``): who the keys
    were made for, as the store's audit log shows them."""
    return _SESSION_NAME_UNSAFE.sub("-", f"lake-{principal.kind}-{principal.name}")[:64]


@dataclass
class _Slot:
    """One cache entry: its lock makes concurrent first requests wait for one STS call."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    options: dict[str, str] | None = None
    refresh_at: float = 0.0


class ScopedCredentials:
    """Per-table STS keys for principals, cached until shortly before they expire.

    ``client`` is the botocore STS client it calls (signed with the server's S3 keys, or the
    default AWS credential chain when those are unset); ``clock`` is the wall clock STS's
    expiry times are compared with."""

    def __init__(self, settings: LakeSettings, *, clock: Callable[[], float] = time.time) -> None:
        from botocore.config import Config

        from lake_platform.aws_session import botocore_session

        self.role_arn = settings.rest_sts_role_arn
        self.duration_seconds = settings.rest_sts_duration_seconds
        self.clock = clock
        # A session of its own (credentials resolved for this client), sharing the process's
        # parse of botocore's model files: a fresh one parsed them again, ~0.5 s.
        self.client: Any = botocore_session().create_client(
            "sts",
            endpoint_url=sts_endpoint(settings),
            region_name=settings.s3_region or "us-east-1",
            aws_access_key_id=settings.s3_access_key_id or None,
            aws_secret_access_key=settings.s3_secret_access_key or None,
            config=Config(retries={"mode": "standard"}, connect_timeout=5, read_timeout=10),
        )
        self._slots: BoundedLRU[tuple[Principal, str, bool], _Slot] = BoundedLRU(CACHE_ENTRIES)
        self._lock = threading.Lock()

    def keys_for(self, principal: Principal, location: str, *, write: bool) -> dict[str, str]:
        """The storage options with the principal's keys for the table at ``location``: key id,
        secret, session token, ``expires_at_millis`` and ``refresh_offset_millis``."""
        key = (principal, location, write)
        with self._lock:
            slot = self._slots.get(key)
            if slot is None:
                slot = _Slot()
                self._slots.put(key, slot)
        with slot.lock:
            if slot.options is None or self.clock() >= slot.refresh_at:
                slot.options, slot.refresh_at = self._assume(principal, location, write=write)
            return dict(slot.options)

    def _assume(self, principal: Principal, location: str, *, write: bool) -> tuple[dict[str, str], float]:
        from botocore.exceptions import BotoCoreError, ClientError

        asked = self.clock()
        try:
            answer = self.client.assume_role(
                RoleArn=self.role_arn,
                RoleSessionName=session_name(principal),
                Policy=table_session_policy(location, write=write),
                DurationSeconds=self.duration_seconds,
            )
        except (BotoCoreError, ClientError) as exc:
            log.error("scoped storage credentials: AssumeRole of %s failed: %s", self.role_arn, exc)
            # STS's reason names the server's identity and role: for the operator's log only.
            raise ServiceUnavailable(
                "scoped storage credentials are unavailable (STS failed; the server's log says why)"
            ) from None
        creds = answer["Credentials"]
        expires = creds["Expiration"].timestamp()
        lifetime = max(expires - asked, 0.0)
        refresh_at = expires - max(lifetime * REFRESH_SHARE, REFRESH_SECONDS)
        options = {
            "aws_access_key_id": creds["AccessKeyId"],
            "aws_secret_access_key": creds["SecretAccessKey"],
            "aws_session_token": creds["SessionToken"],
            "expires_at_millis": str(int(expires * 1000)),
            # Lance asks DescribeTable again this long before the expiry; the cache has renewed
            # the keys by then (it renews at least REFRESH_SECONDS before).
            "refresh_offset_millis": str(int(REFRESH_SECONDS * 1000)),
        }
        return options, refresh_at
