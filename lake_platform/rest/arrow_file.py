"""QueryTable's answer: one Arrow IPC *file* (``application/vnd.apache.arrow.file``), written as
the result streams and sent with chunked transfer, in bounded memory, whatever its size.

The spec answers the file format, and stock clients read it so: pylance's ``RestNamespace``
hands the body over as bytes its documentation calls "Arrow IPC file format" (users open it with
``pyarrow.ipc.open_file``), and pylance's reference server answers the same. The file format
does not need a seekable output: its footer (the schema again and one block entry, 24 bytes,
per batch) comes last, and pyarrow's writer keeps only those entries. So every batch is
encoded and handed to the client as soon as the engine produces it; the server holds a batch
or two, never the result, and no spool is needed.

A result that ends within :data:`BUFFERED_BYTES` is answered whole (with a ``Content-Length``),
and any error before that is an ordinary problem answer. A larger one goes out as it streams:
an error after the first bytes cuts the body (the client sees a transfer without its end and no
footer, never a shorter, valid file), and a client that goes away stops the query (the batches'
generator is closed, and the audit line says CANCELLED).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import pyarrow as pa
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

ARROW_FILE = "application/vnd.apache.arrow.file"
#: A result that ends within this many Arrow bytes is answered whole, with its length: small
#: answers cost no chunked framing and fail, if they fail, with a problem body.
BUFFERED_BYTES = 4 << 20


class _Sink:
    """What pyarrow's file writer wrote since it was last taken (buffers, zero-copy views)."""

    closed = False

    def __init__(self) -> None:
        self._parts: list[Any] = []
        self._position = 0

    def write(self, data: Any) -> int:
        self._parts.append(data)
        self._position += len(data)
        return len(data)

    def tell(self) -> int:
        return self._position

    def flush(self) -> None:
        return None

    def close(self) -> None:
        self.closed = True

    def writable(self) -> bool:
        return True

    def take(self) -> bytes:
        parts, self._parts = self._parts, []
        return b"".join(parts)


def file_chunks(
    schema: pa.Schema, head: list[pa.RecordBatch], rest: Iterator[pa.RecordBatch]
) -> Iterator[bytes]:
    """The Arrow IPC file of ``head`` then ``rest``, a chunk per batch, the footer last.
    Closing it early closes ``rest`` (which stops the query)."""
    sink = _Sink()
    try:
        with pa.ipc.new_file(pa.PythonFile(sink, mode="w"), schema) as writer:
            for batch in head:
                writer.write_batch(batch)
            head.clear()
            yield sink.take()
            for batch in rest:
                writer.write_batch(batch)
                yield sink.take()
        yield sink.take()
    finally:
        close = getattr(rest, "close", None)
        if close is not None:
            close()


def whole_file(schema: pa.Schema, batches: list[pa.RecordBatch]) -> bytes:
    """``batches`` as one Arrow IPC file, in memory (an answer known to be small)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, schema) as writer:
        for batch in batches:
            writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


class ArrowFileResponse(StreamingResponse):
    """Chunks of a sync iterator, each taken on a worker thread; the iterator is closed when the
    response ends however it ends (the client went away, the server stopped), not whenever the
    garbage collector gets to it."""

    def __init__(self, chunks: Iterator[bytes], headers: dict[str, str] | None = None) -> None:
        self._chunks = chunks
        super().__init__(self._pulled(), media_type=ARROW_FILE, headers=headers)

    async def _pulled(self) -> AsyncIterator[bytes]:
        while True:
            chunk = await anyio.to_thread.run_sync(next, self._chunks, None)
            if chunk is None:
                return
            if chunk:
                yield chunk

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(getattr(self._chunks, "close", lambda: None))


__all__ = ["ARROW_FILE", "BUFFERED_BYTES", "ArrowFileResponse", "file_chunks", "whole_file"]
