"""Public library APIs only (issue 48): no private attribute or module of grpcio, uvicorn or
Dagster, and no gRPC experiment switch, anywhere in the package or its tests, except in the one
module that keeps exact gRPC status codes (``flight/grpc_status.py``, with its own guard test)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRIVATE = re.compile(
    r"grpc\._|\._rpc_event|\._state\b|experimental_non_blocking|GRPC_EXPERIMENTS|HttpToolsProtocol|dagster\._"
)
#: The documented exception, and this file (its pattern names what it looks for).
ALLOWED = {Path("lake_platform/flight/grpc_status.py"), Path(__file__).resolve().relative_to(ROOT)}


def test_no_private_library_api_outside_the_one_documented_module() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for folder in ("lake_platform", "lake_platform_tests")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if path.relative_to(ROOT) not in ALLOWED
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if PRIVATE.search(line)
    ]
    assert found == []


def test_the_pattern_finds_the_one_documented_use() -> None:
    # The exception is still needed (the pattern matches it), so the pattern matches real code.
    exception = (ROOT / "lake_platform/flight/grpc_status.py").read_text().splitlines()
    assert any(PRIVATE.search(line) for line in exception)
