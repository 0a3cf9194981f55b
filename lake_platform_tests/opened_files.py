"""Which botocore model files a piece of code opens, seen through a Python audit hook
(``sys.addaudithook``, the ``open`` event): nothing of botocore or the code watched is replaced.
For tests that a client made after the first parses none of botocore's model files again."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

#: The files opened while a ``botocore_models_opened`` block runs; an audit hook cannot be
#: removed, so it stays installed, and idle, for the rest of the process.
_opened: list[str] = []
_watching: list[bool] = []


def _audit(event: str, args: tuple[object, ...]) -> None:
    if _watching and event == "open" and isinstance(args[0], str):
        _opened.append(args[0])


sys.addaudithook(_audit)


@contextmanager
def botocore_models_opened() -> Iterator[list[str]]:
    """The botocore data files (``botocore/data/...``) opened inside the block, listed once the
    block ends."""
    found: list[str] = []
    _opened.clear()
    _watching.append(True)
    try:
        yield found
    finally:
        _watching.clear()
        found += [p for p in _opened if os.path.join("botocore", "data") in p]
        _opened.clear()
