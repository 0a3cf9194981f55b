"""How the DynamoDB registry tries a call again: a bounded number of attempts with full-jitter
backoff, and reads retried on throttling and transient trouble (reads are idempotent; the write
path's own retry rule, which first finds out whether a write landed, is ``DynamoMetaStore``'s)."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TypeVar

from botocore.exceptions import BotoCoreError, ClientError

from lake_platform.errors import LakeError, ServiceUnavailable, Throttling
from lake_platform.registry.dynamodb_errors import translate

T = TypeVar("T")

#: Our own attempts per call, on top of botocore's (max_attempts=2): bounded so a call's total time
#: stays a small multiple of the I/O timeout.
ATTEMPTS = 3
_BACKOFF_BASE = 0.05
_BACKOFF_CAP = 1.0


#: How a call waits between attempts; the store takes another (tests record the waits).
Sleep = Callable[[float], None]


def retried_read(call: Callable[[], T], table: str, sleep: Sleep = time.sleep) -> T:
    """``call`` (a read of ``table``), made again on throttling and transient trouble."""
    error: LakeError | None = None
    for attempt in range(ATTEMPTS):
        if attempt:
            sleep_backoff(attempt, sleep)
        try:
            return call()
        except (ClientError, BotoCoreError) as exc:
            error = translate(exc, (), table)
            if not isinstance(error, (Throttling, ServiceUnavailable)):
                raise error from exc
    assert error is not None
    raise error


def sleep_backoff(attempt: int, sleep: Sleep = time.sleep) -> None:
    # Full jitter: spreads contending clients instead of re-colliding in lockstep.
    sleep(random.uniform(0, min(_BACKOFF_CAP, _BACKOFF_BASE * 2**attempt)))
