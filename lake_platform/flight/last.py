"""A result stream's last item, marked by the layer that knows it is the last.

A stream's producer usually learns that a batch was its last only when asked for the next one.
An early start that looked one batch ahead knows it before (``Streams._run_early``), and says so
by yielding its batch as ``Last(batch)``; the layers above pass the mark on (``encode_stream``
turns it into ``Last(message)``), and the grpcio port's sender sends that message in one batch
with the status instead of waiting for its send first (``transport.StreamSender``).

Only callers that say they handle it get one (``takes_last`` on their call); the data plane's
calls do not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Last(Generic[T]):
    """``item``, the last of its stream: the next pull ends the stream without waiting."""

    item: T

    @property
    def num_rows(self) -> int:
        """The batch's rows, for layers that count a stream's batches (the query audit)."""
        return self.item.num_rows  # type: ignore[attr-defined, no-any-return]

    @property
    def nbytes(self) -> int:
        """The batch's bytes, as ``num_rows``."""
        return self.item.nbytes  # type: ignore[attr-defined, no-any-return]
