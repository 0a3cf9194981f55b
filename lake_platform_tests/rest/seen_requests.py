"""What a client sent a REST server running in this process: the (operation id, status) of each
request, read from the server's access-log lines (``lake.request``) through a logging handler."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from lake_platform.rest.observe import SURFACE

REQUEST_LOGGER = "lake.request"


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.seen: list[tuple[str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        # the access line's arguments: surface, operation id, status, milliseconds
        args = record.args
        if isinstance(args, tuple) and len(args) == 4 and args[0] == SURFACE:
            self.seen.append((str(args[1]), str(args[2])))


@contextmanager
def seen_requests() -> Iterator[list[tuple[str, str]]]:
    """Yield the list the requests answered inside the block are appended to."""
    logger = logging.getLogger(REQUEST_LOGGER)
    collect = _Collect()
    level = logger.level
    logger.addHandler(collect)
    logger.setLevel(logging.INFO)
    try:
        yield collect.seen
    finally:
        logger.removeHandler(collect)
        logger.setLevel(level)
