"""The access-log line (logs.log_request), made without ``Logger.info``'s per-call caller search:
the record still has every field ``Logger.info`` gives it, names its real caller, honours the
logger's level, filters and ``disabled`` flag, reaches the root handler, and the handler's stream
(stderr as it is at each line, or the one given) still gets every line whether it is
line-buffered, write-through or block-buffered. When only
configure_logging's text handler could see the record, the line is written without one: the same
bytes as through the record, and any other configuration takes the record's way."""

from __future__ import annotations

import io
import json
import logging
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stderr
from typing import Any

import pytest

from lake_platform.observability import context, logs
from lake_platform.observability.logs import REQUEST_LOG, configure_logging, log_request


class Keep(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def kept() -> Iterator[Keep]:
    keep = Keep()
    REQUEST_LOG.addHandler(keep)
    level = REQUEST_LOG.level
    REQUEST_LOG.setLevel(logging.INFO)
    try:
        yield keep
    finally:
        REQUEST_LOG.removeHandler(keep)
        REQUEST_LOG.setLevel(level)
        REQUEST_LOG.disabled = False


def info() -> context.RequestInfo:
    request = context.RequestInfo("rest", "DescribeTable")
    request.principal, request.project = "alice", "p"
    return request


def test_the_record_has_logger_infos_fields_and_its_caller(kept: Keep) -> None:
    request = info()
    log_request(request, "200", 0.0012345)
    REQUEST_LOG.info("reference", extra={"status": "200"})  # what Logger.info makes
    record, reference = kept.records
    assert record.getMessage() == "rest DescribeTable 200 1.2 ms"
    assert (record.name, record.levelno, record.levelname) == ("lake.request", logging.INFO, "INFO")
    assert {
        k: getattr(record, k)
        for k in ("request_id", "surface", "method", "principal", "project", "status", "duration_ms")
    } == {
        "request_id": request.request_id,
        "surface": "rest",
        "method": "DescribeTable",
        "principal": "alice",
        "project": "p",
        "status": "200",
        "duration_ms": 1.234,
    }
    # The caller findCaller would have found: log_request, in logs.py, on a line of its body.
    code = log_request.__code__
    assert (record.pathname, record.filename, record.module) == (code.co_filename, "logs.py", "logs")
    assert record.funcName == "log_request"
    assert record.lineno in {line for _, _, line in code.co_lines()}
    assert "logger.handle(" in open(code.co_filename).read().splitlines()[record.lineno - 1]
    assert (record.thread, record.threadName) == (threading.get_ident(), threading.current_thread().name)
    assert record.process == os.getpid()
    assert record.exc_info is None and record.stack_info is None
    reference_fields = set(vars(reference)) - {"msg", "args"}
    assert reference_fields - {"status"} <= set(vars(record))
    assert record.created >= reference.created - 1


def test_level_filters_and_disabled_still_decide(kept: Keep) -> None:
    REQUEST_LOG.setLevel(logging.WARNING)
    log_request(info(), "200", 0.001)
    assert kept.records == []
    REQUEST_LOG.setLevel(logging.INFO)

    class DropMethod(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            return getattr(record, "method", None) != "DescribeTable"

    drop = DropMethod()
    REQUEST_LOG.addFilter(drop)
    try:
        log_request(info(), "200", 0.001)
        assert kept.records == []
    finally:
        REQUEST_LOG.removeFilter(drop)
    REQUEST_LOG.disabled = True
    log_request(info(), "200", 0.001)
    assert kept.records == []
    REQUEST_LOG.disabled = False
    log_request(info(), "404", 0.001)
    assert [r.status for r in kept.records] == ["404"]  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "line_buffering, write_through", [(True, False), (False, True), (False, False)], ids=str
)
def test_the_stream_gets_every_line_whatever_its_buffering(line_buffering: bool, write_through: bool) -> None:
    raw = io.BytesIO()
    stream = io.TextIOWrapper(
        raw, encoding="utf-8", line_buffering=line_buffering, write_through=write_through
    )
    with sole_text_logging(stream):
        assert logs.plain_text_handler() is our_handler()  # the direct way
        log_request(info(), "200", 0.002)
        REQUEST_LOG.addFilter(logging.Filter())  # and the record's
        try:
            log_request(info(), "500", 0.003)
        finally:
            REQUEST_LOG.filters.clear()
        assert raw.getvalue().decode().splitlines() == [
            "INFO lake.request: rest DescribeTable 200 2.0 ms",
            "INFO lake.request: rest DescribeTable 500 3.0 ms",
        ]


def test_the_default_handler_writes_to_stderr_as_it_is_at_each_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with sole_text_logging(stderr=True):
        handler = our_handler()
        assert isinstance(handler, logs._Stderr)
        assert logs.plain_text_handler() is handler
        elsewhere = io.StringIO()
        with redirect_stderr(elsewhere):
            log_request(info(), "200", 0.002)
        log_request(info(), "500", 0.003)
    assert elsewhere.getvalue() == "INFO lake.request: rest DescribeTable 200 2.0 ms\n"
    assert capsys.readouterr().err == "INFO lake.request: rest DescribeTable 500 3.0 ms\n"


@contextmanager
def sole_text_logging(stream: Any = None, *, stderr: bool = False) -> Iterator[Any]:
    """configure_logging's text handler as the root's only one, as in ``lake serve-rest`` (the
    test runner's own capture handlers, which it adds for each test's call, are set aside
    meanwhile), writing to ``stream`` (None: a new StringIO; ``stderr``: its default, stderr)."""
    root = logging.getLogger()
    runner = list(root.handlers)
    for h in runner:
        root.removeHandler(h)
    out = None if stderr else stream if stream is not None else io.StringIO()
    configure_logging("INFO", "text", stream=out, force=True)
    try:
        yield out
    finally:
        for h in list(root.handlers):
            root.removeHandler(h)
        for h in runner:
            root.addHandler(h)
        root.setLevel(logging.WARNING)


def our_handler() -> logging.Handler:
    return next(h for h in logging.getLogger().handlers if getattr(h, "_lake", False))


def test_the_direct_line_is_the_records_line_byte_for_byte() -> None:
    with sole_text_logging() as text_out:
        assert logs.plain_text_handler() is our_handler()
        request = info()
        request.method = "Create Table ünï %s"  # odd text goes through as the record's would
        for status, seconds in (("200", 0.00123), ("409", 12.34567), ("500", 0.0)):
            log_request(request, status, seconds)  # direct
            direct = text_out.getvalue()
            text_out.seek(0)
            text_out.truncate()
            keep = logging.Filter()  # lets everything through, but a filter: the record's way
            REQUEST_LOG.addFilter(keep)
            try:
                assert logs.plain_text_handler() is None
                log_request(request, status, seconds)
            finally:
                REQUEST_LOG.removeFilter(keep)
            assert direct == text_out.getvalue() and direct.endswith(" ms\n")
            text_out.seek(0)
            text_out.truncate()


def test_a_renamed_level_is_written_as_the_formatter_would() -> None:
    with sole_text_logging() as text_out:
        logging.addLevelName(logging.INFO, "NOTE")
        try:
            log_request(info(), "200", 0.001)
            assert text_out.getvalue() == "NOTE lake.request: rest DescribeTable 200 1.0 ms\n"
        finally:
            logging.addLevelName(logging.INFO, "INFO")


def test_anything_else_that_could_see_the_record_gets_it(kept: Keep) -> None:
    """Each deviation from configure_logging's plain text setup sends the line the record's way."""
    with sole_text_logging() as text_out:
        REQUEST_LOG.removeHandler(kept)
        handler = our_handler()
        assert logs.plain_text_handler() is handler
        lake = logging.getLogger("lake")
        root = logging.getLogger()
        factory = logging.getLogRecordFactory()
        deviations = [
            (lambda: REQUEST_LOG.addHandler(kept), lambda: REQUEST_LOG.removeHandler(kept)),
            (lambda: lake.addHandler(kept), lambda: lake.removeHandler(kept)),
            (lambda: root.addHandler(kept), lambda: root.removeHandler(kept)),
            (lambda: handler.addFilter(logging.Filter()), lambda: handler.filters.clear()),
            (lambda: handler.setLevel(logging.WARNING), lambda: handler.setLevel(logging.NOTSET)),
            (
                lambda: handler.setFormatter(logs.JsonFormatter()),
                lambda: handler.setFormatter(logs.TextFormatter()),
            ),
            (
                lambda: setattr(REQUEST_LOG, "propagate", False),
                lambda: setattr(REQUEST_LOG, "propagate", True),
            ),
            (lambda: setattr(lake, "propagate", False), lambda: setattr(lake, "propagate", True)),
            (
                lambda: logging.setLogRecordFactory(lambda *a, **k: factory(*a, **k)),
                lambda: logging.setLogRecordFactory(factory),
            ),
        ]
        for apply, undo in deviations:
            apply()
            try:
                assert logs.plain_text_handler() is None
            finally:
                undo()
            assert logs.plain_text_handler() is handler
        root.addHandler(kept)
        try:
            log_request(info(), "201", 0.001)
        finally:
            root.removeHandler(kept)
        assert [r.getMessage() for r in kept.records] == ["rest DescribeTable 201 1.0 ms"]
        assert text_out.getvalue() == "INFO lake.request: rest DescribeTable 201 1.0 ms\n"


def test_json_lines_still_come_from_the_record() -> None:
    out = io.StringIO()
    configure_logging("INFO", "json", stream=out, force=True)
    try:
        assert logs.plain_text_handler() is None
        log_request(info(), "200", 0.002)
    finally:
        root = logging.getLogger()
        for h in [h for h in root.handlers if getattr(h, "_lake", False)]:
            root.removeHandler(h)
        root.setLevel(logging.WARNING)
    line = json.loads(out.getvalue())
    assert (line["method"], line["status"], line["principal"], line["duration_ms"]) == (
        "DescribeTable",
        "200",
        "alice",
        2.0,
    )


def test_a_failing_stream_is_reported_by_the_handler_with_the_record(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """As ``StreamHandler.emit`` does: ``handleError`` gets the record (logging's own prints the
    error, the record's message and arguments on stderr)."""
    with sole_text_logging() as text_out:
        text_out.close()  # writing now raises ValueError, as a closed stderr would
        assert logs.plain_text_handler() is our_handler()
        log_request(info(), "200", 0.001)
    report = capsys.readouterr().err
    assert report.startswith("--- Logging error ---\n")
    assert "ValueError: I/O operation on closed file" in report
    assert "Message: '%s %s %s %.1f ms'\nArguments: ('rest', 'DescribeTable', '200', 1.0)\n" in report
