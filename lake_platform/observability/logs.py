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


class _Lines(logging.StreamHandler):  # type: ignore[type-arg]
    """A stream handler whose flush is skipped when its stream has passed each line on at the
    write already."""

    def flush(self) -> None:
        # Every record ends with the terminator, so a line-buffered stream (stderr's default) or
        # a write-through one (PYTHONUNBUFFERED) has passed the whole line on at the write: the
        # handler's own flush (its lock, then the stream's) would do nothing more.
        stream = self.stream
        if getattr(stream, "line_buffering", False) or getattr(stream, "write_through", False):
            return
        super().flush()


class _Stderr(_Lines):
    """Writes to whatever ``sys.stderr`` is at the time (test runners swap it per call)."""

    def __init__(self) -> None:
        super().__init__()

    @property  # type: ignore[override]
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _: Any) -> None:
        pass


def configure_logging(
    level: str = "INFO", fmt: str = "text", stream: Any = None, *, force: bool = False
) -> None:
    """Install one handler on the root logger (replacing earlier ones from this function):
    ``level`` for this project's loggers (``PROJECT_LOGGERS``), WARNING and above for every
    other library's unless ``level`` is DEBUG.

    ``stream``: where the lines go; None: whatever ``sys.stderr`` is at each line.

    Like ``logging.basicConfig``, this leaves logging alone when someone else configured it
    already (an embedding application, a test runner), unless ``force``."""
    root = logging.getLogger()
    ours = [h for h in root.handlers if getattr(h, "_lake", False)]
    if not force and len(ours) < len(root.handlers):
        return
    for handler in ours:
        root.removeHandler(handler)
    handler = _Lines(stream) if stream is not None else _Stderr()
    handler._lake = True  # type: ignore[attr-defined]
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(TextFormatter())
    root.addHandler(handler)
    levelno = logging.getLevelNamesMapping()[level.upper()]
    root.setLevel(levelno if levelno <= logging.DEBUG else max(levelno, logging.WARNING))
    for name in PROJECT_LOGGERS:
        logging.getLogger(name).setLevel(levelno)


#: The loggers of this project: they log at the configured level. Every other library logs at
#: WARNING and above unless DEBUG is asked for, so what a command prints is its own and not a
#: dependency's INFO lines (``lake up`` opened with a page of Dagster's storage migrations
#: through alembic).
PROJECT_LOGGERS = ("lake", "lake_platform")


def log_request(info: context.RequestInfo, status: str, seconds: float) -> None:
    """The access-log line of one finished request (INFO on ``lake.request``).

    One per request, so it skips what ``Logger.info`` would work out again each time: the caller
    (``findCaller`` walks the stack to find this function, the same answer every time, which is
    bound here once) and ``Logger._log``'s steps around ``makeRecord``. The record is the one
    ``Logger.info`` makes (same factory, fields and caller) and goes through ``Logger.handle``
    (``lake.request``'s filters, then every handler up the tree), as it would.

    When nothing but :func:`configure_logging`'s text handler can see the record (see
    :func:`plain_text_handler`), the line that handler would write is written straight to its
    stream, under its lock, with its flush: the same bytes without building the record."""
    logger = REQUEST_LOG
    if not logger.isEnabledFor(logging.INFO) or logger.disabled:
        return
    ms = seconds * 1000
    handler = plain_text_handler()
    if handler is not None:
        line = (
            f"{logging.getLevelName(logging.INFO)} {logger.name}: "
            f"{_ACCESS % (info.surface, info.method, status, ms)}{handler.terminator}"
        )
        handler.acquire()
        try:
            try:
                handler.stream.write(line)
                handler.flush()
            except RecursionError:
                raise
            except Exception:  # noqa: BLE001 - as StreamHandler.emit: the handler reports it
                handler.handleError(_access_record(info, status, ms))
        finally:
            handler.release()
        return
    logger.handle(_access_record(info, status, ms))


_ACCESS = "%s %s %s %.1f ms"
TEXT_FORMAT = "%(levelname)s %(name)s: %(message)s"
_LAKE_LOG = logging.getLogger("lake")


class TextFormatter(logging.Formatter):
    """``LAKE_LOG_FORMAT=text``: level, logger, message; one line per record.

    Messages quote what clients sent (a failed query's error quotes its literals): the
    message's control characters are escaped, so a line break cannot start a record of a
    client's making and a carriage return or escape code cannot hide one on a terminal. An
    exception's traceback (and a stack) follows on lines indented by two spaces, escaped
    likewise, so only a record's own line starts at the margin."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging's name
        return TEXT_FORMAT % {**record.__dict__, "message": escaped(record.message)}

    def format(self, record: logging.LogRecord) -> str:
        head, more, rest = super().format(record).partition("\n")
        if not more:
            return head
        return head + "".join(f"\n  {escaped(line)}" for line in rest.split("\n"))


def escaped(text: str) -> str:
    """``text`` with its control and other non-printing characters as escapes (``\\n``, ``\\x1b``)."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def plain_text_handler() -> logging.StreamHandler | None:  # type: ignore[type-arg]
    """The handler an access line goes to when it is the only thing that could see the record:
    :func:`configure_logging`'s text handler (its own class, formatter and no filter, at INFO or
    below) as the root's only handler, no filter on ``lake.request``, no handler on it or on
    ``lake``, both propagating, and the standard record factory. Anything else: None (the line
    then goes through ``Logger.handle`` as any record does)."""
    handlers = logging.root.handlers
    if len(handlers) != 1:
        return None
    handler = handlers[0]
    if (
        type(handler) not in _PLAIN_HANDLERS
        or type(handler.formatter) is not TextFormatter
        or handler.filters
        or handler.level > logging.INFO
        or not getattr(handler, "_lake", False)
    ):
        return None
    request, lake = REQUEST_LOG, _LAKE_LOG
    if request.filters or request.handlers or not request.propagate or request.parent is not lake:
        return None
    if lake.handlers or not lake.propagate or lake.parent is not logging.root:
        return None
    if logging.getLogRecordFactory() is not logging.LogRecord:
        return None
    return handler  # type: ignore[return-value]


def _access_record(info: context.RequestInfo, status: str, ms: float) -> logging.LogRecord:
    return REQUEST_LOG.makeRecord(
        REQUEST_LOG.name,
        logging.INFO,
        _HERE,
        _LINE,
        _ACCESS,
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


def _line_of(code: Any, text: str) -> int:
    for _, _, line in code.co_lines():
        if line is not None and text in linecache.getline(code.co_filename, line):
            return int(line)
    return int(code.co_firstlineno)


#: The caller ``findCaller`` would name for the record (``Logger.info`` called in log_request):
#: this file, the line of the fallback's ``logger.handle``.
_HERE = log_request.__code__.co_filename
_LINE = _line_of(log_request.__code__, "logger.handle(")


#: Handler classes whose ``emit`` is StreamHandler's (format, write, flush), as the fast path does.
_PLAIN_HANDLERS = (_Stderr, _Lines)
