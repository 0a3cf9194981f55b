"""Process logging: ``LAKE_LOG_FORMAT=text`` (default, for people) or ``json`` (one JSON object
per line, for log shippers). A JSON line carries the time, level, logger and message, and, inside
a request, its id, surface, method, principal and project; request lines (logger
``lake.request``, one per RPC or HTTP request) add the status and duration.

What is logged never includes a secret: messages are written by this code base, which never
puts a password, bearer token, ticket or handle in one; exceptions are reduced to their type and
message (no locals, no request metadata).
"""

from __future__ import annotations

import json
import linecache
import logging
import sys
import time
from typing import Any

from lake_platform.observability import context

REQUEST_LOG = logging.getLogger("lake.request")
_FIELDS = ("request_id", "surface", "method", "principal", "project", "status", "duration_ms")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        info = context.current()
        if info is not None:
            data.update(
                request_id=info.request_id,
                surface=info.surface,
                method=info.method,
                principal=info.principal,
                project=info.project,
            )
        for name in _FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                data[name] = value
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            data["error"] = f"{type(exc).__name__}: {exc}"
        return json.dumps(data, default=str, separators=(",", ":"))


class _Stderr(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is at the time (test runners swap it per call)."""

    def __init__(self) -> None:
        super().__init__()

    @property  # type: ignore[override]
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _: Any) -> None:
        pass

    def flush(self) -> None:
        # Every record ends with the terminator, so a line-buffered stderr (Python's default) or
        # a write-through one (PYTHONUNBUFFERED) has passed the whole line on at the write: the
        # handler's own flush (its lock, then the stream's) would do nothing more.
        stream = sys.stderr
        if getattr(stream, "line_buffering", False) or getattr(stream, "write_through", False):
            return
        super().flush()


def configure_logging(
    level: str = "INFO", fmt: str = "text", stream: Any = None, *, force: bool = False
) -> None:
    """Install one handler on the root logger (replacing earlier ones from this function).

    Like ``logging.basicConfig``, this leaves logging alone when someone else configured it
    already (an embedding application, a test runner), unless ``force``."""
    root = logging.getLogger()
    ours = [h for h in root.handlers if getattr(h, "_lake", False)]
    if not force and len(ours) < len(root.handlers):
        return
    for handler in ours:
        root.removeHandler(handler)
    handler = logging.StreamHandler(stream) if stream is not None else _Stderr()
    handler._lake = True  # type: ignore[attr-defined]
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
    root.setLevel(level)


def log_request(info: context.RequestInfo, status: str, seconds: float) -> None:
    """The access-log line of one finished request (INFO on ``lake.request``).

    One per request, so it skips what ``Logger.info`` would work out again each time: the caller
    (``findCaller`` walks the stack to find this function, the same answer every time, which is
    bound here once) and ``Logger._log``'s steps around ``makeRecord``. The record is the one
    ``Logger.info`` makes (same factory, fields and caller) and goes through ``Logger.handle``
    (``lake.request``'s filters, then every handler up the tree), as it would."""
    logger = REQUEST_LOG
    if not logger.isEnabledFor(logging.INFO):
        return
    if logger.disabled:
        return
    ms = seconds * 1000
    record = logger.makeRecord(
        logger.name,
        logging.INFO,
        _HERE,
        _LINE,
        "%s %s %s %.1f ms",
        (info.surface, info.method, status, ms),
        None,
        "log_request",
        {
            "request_id": info.request_id,
            "surface": info.surface,
            "method": info.method,
            "principal": info.principal,
            "project": info.project,
            "status": status,
            "duration_ms": round(ms, 3),
        },
    )
    logger.handle(record)


def _line_of(code: Any, text: str) -> int:
    for _, _, line in code.co_lines():
        if line is not None and text in linecache.getline(code.co_filename, line):
            return int(line)
    return int(code.co_firstlineno)


#: The caller ``findCaller`` would name for the record: this file, ``makeRecord``'s line.
_HERE = log_request.__code__.co_filename
_LINE = _line_of(log_request.__code__, "logger.makeRecord(")
