"""How lake errors meet Dagster's retries.

Retryable ``LakeError``s (``.retryable``: unavailable registry or storage, throttling, lost
races) and raw I/O errors propagate, so the asset's ``RetryPolicy`` retries them with
exponential backoff. Every other ``LakeError`` fails the step at once (``allow_retries=False``)
with its stable code: retrying bad input or a missing table cannot help.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import dagster as dg

from lake_platform.errors import LakeError

RETRY = dg.RetryPolicy(max_retries=3, delay=1, backoff=dg.Backoff.EXPONENTIAL, jitter=dg.Jitter.PLUS_MINUS)


@contextmanager
def lake_errors() -> Iterator[None]:
    try:
        yield
    except LakeError as exc:
        if exc.retryable:
            raise
        raise dg.Failure(
            description=f"{type(exc).__name__} (code {int(exc.code)}): {exc}",
            metadata={"code": int(exc.code), "error": type(exc).__name__},
            allow_retries=False,
        ) from None
