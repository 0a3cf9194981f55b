"""The query audit trail: one JSON line per query a surface executed.

Where it goes (``LAKE_AUDIT_LOG``): by default the file ``<home>/audit/queries.jsonl`` (one per
process; ``lake audit queries`` reads it), ``-`` for standard output (a container's log stream,
for a shipper), or ``off``. Lines are appended whole under a lock and flushed, so a crash loses at
most the line being written and never interleaves two.

A record: ``at`` (UTC, ISO 8601), ``request_id``, ``surface``, ``principal``, ``project``, ``sql``
(the statement text as the client sent it), ``params`` (how many bound parameters, never their
values: they may be secrets), ``tables`` (the pinned snapshots: name, incarnation, version),
``rows``, ``bytes``, ``status`` (``OK`` or the gRPC code name), ``error`` (the client-facing
message), ``duration_ms``. Never a ticket, a token or a password.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from lake_platform import owner_only
from lake_platform.errors import InvalidInput


class AuditTrail:
    def __init__(self, target: str) -> None:
        """``target``: a file path, ``-`` (stdout) or ``off``."""
        self.target = target
        self._lock = threading.Lock()
        self._file: TextIO | None = None
        if target not in ("-", "off"):
            path = Path(target)
            fd = owner_only.open_file(path, os.O_WRONLY | os.O_APPEND)
            self._file = os.fdopen(fd, "a", encoding="utf-8")

    @property
    def enabled(self) -> bool:
        return self.target != "off"

    def write(self, record: dict[str, Any]) -> None:
        if not self.enabled:
            return
        line = json.dumps(record, default=str, separators=(",", ":"), ensure_ascii=False) + "\n"
        with self._lock:
            out = self._file if self._file is not None else sys.stdout
            out.write(line)
            out.flush()

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


def audit_target(settings: Any) -> str:
    return settings.audit_log or str(Path(settings.home) / "audit" / "queries.jsonl")


def open_trail(settings: Any) -> AuditTrail:
    return AuditTrail(audit_target(settings))


def query_record(
    *,
    request_id: str | None,
    surface: str,
    principal: str | None,
    project: str | None,
    sql: str,
    params: int,
    tables: list[dict[str, Any]],
    rows: int,
    nbytes: int,
    status: str,
    error: str | None,
    seconds: float,
) -> dict[str, Any]:
    return {
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "request_id": request_id,
        "surface": surface,
        "principal": principal,
        "project": project,
        "sql": sql,
        "params": params,
        "tables": tables,
        "rows": rows,
        "bytes": nbytes,
        "status": status,
        "error": error,
        "duration_ms": round(seconds * 1000, 3),
    }


def read_records(
    path: Path, *, project: str | None = None, principal: str | None = None
) -> Iterator[dict[str, Any]]:
    """The trail's records, oldest first, only one project's (or principal's) when asked."""
    if not path.exists():
        return
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                if not line.endswith("\n"):
                    return  # the line a running process is writing
                raise InvalidInput(f"{path}: line {n} is not JSON") from None
            if project is not None and record.get("project") != project:
                continue
            if principal is not None and record.get("principal") != principal:
                continue
            yield record
