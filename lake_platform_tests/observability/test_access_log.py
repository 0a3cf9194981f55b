"""The access-log line (logs.log_request), made without ``Logger.info``'s per-call caller search:
the record still has every field ``Logger.info`` gives it, names its real caller, honours the
logger's level, filters and ``disabled`` flag, reaches the root handler, and stderr still gets
every line whether it is line-buffered, write-through or block-buffered."""

from __future__ import annotations

import io
import logging
import os
import sys
import threading
from collections.abc import Iterator

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
    assert "makeRecord(" in open(code.co_filename).read().splitlines()[record.lineno - 1]
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
def test_stderr_gets_every_line_whatever_its_buffering(
    monkeypatch: pytest.MonkeyPatch, line_buffering: bool, write_through: bool
) -> None:
    raw = io.BytesIO()
    stream = io.TextIOWrapper(
        raw, encoding="utf-8", line_buffering=line_buffering, write_through=write_through
    )
    monkeypatch.setattr(sys, "stderr", stream)
    configure_logging("INFO", "text", force=True)
    try:
        handler = next(h for h in logging.getLogger().handlers if getattr(h, "_lake", False))
        assert isinstance(handler, logs._Stderr)
        log_request(info(), "200", 0.002)
        log_request(info(), "500", 0.003)
        assert raw.getvalue().decode().splitlines() == [
            "INFO lake.request: rest DescribeTable 200 2.0 ms",
            "INFO lake.request: rest DescribeTable 500 3.0 ms",
        ]
    finally:
        root = logging.getLogger()
        for h in [h for h in root.handlers if getattr(h, "_lake", False)]:
            root.removeHandler(h)
        root.setLevel(logging.WARNING)
