"""A batch column past 2 GiB (Arrow's offsets are 32-bit) fails typed, and the replica lives.

``concat`` of 14 copies of a 164 MB batch (8,192 values of 20,000 bytes, under a 1 GiB
LAKE_FLIGHT_MAX_VALUE_BYTES; the planning check allows 16 copies of a value: ``value_copies``)
builds 2.3 GB in one column: DataFusion answers "byte array offset overflow", which reached the
client as INTERNAL "the query failed". ``||`` of two 1.1 GB columns panics inside DataFusion
("rust future panicked"): INTERNAL, since the panic does not say why; the server must live
through it and give its memory and its slot back. Each builds about 2.3 GB for a few seconds, in
a server of its own.
"""

from __future__ import annotations

from collections.abc import Iterator

import psutil
import pyarrow as pa
import pyarrow.flight as fl
import pytest

from lake_platform_tests.flight.conftest import build_catalog, login, query
from lake_platform_tests.flight.server_process import spawn

# The count is not a literal: a literal repeated is one literal copied to every row, refused at
# planning past the cap for a batch (query.value_bounds); repeat checks a column's when it runs.
BATCH = "(SELECT repeat('x', 20000 + value % 1) AS s FROM range(8192))"
CONCAT = f"SELECT max(length(concat({', '.join(['s'] * 14)}))) AS n FROM {BATCH}"
PIPES = f"SELECT max(length(a || a)) AS n FROM (SELECT concat({', '.join(['s'] * 7)}) AS a FROM {BATCH})"
#: What the server may keep after such a query (the allocator's cache), far below what it built.
KEPT_BYTES = 512 << 20


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[psutil.Process, str]]:
    home = tmp_path_factory.mktemp("huge")
    build_catalog(home)[1].close()
    proc, port = spawn(home, f"max_value_bytes={1 << 30}")
    try:
        yield psutil.Process(proc.pid), f"grpc://127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait()


def served_after(process: psutil.Process, uri: str, before: int) -> None:
    client, options = login(uri, "bob")
    assert query(client, options, "SELECT count(*) AS n FROM w.ns.t").to_pylist() == [{"n": 2}]
    assert process.memory_info().rss < before + KEPT_BYTES


@pytest.mark.slow
def test_a_column_past_2_gib_is_refused_as_too_large(server: tuple[psutil.Process, str]) -> None:
    process, uri = server
    before = process.memory_info().rss
    client, options = login(uri)
    with pytest.raises(pa.ArrowInvalid, match=r"past 2 GiB.*\[ValueTooLarge, code 13\]"):
        query(client, options, CONCAT)
    served_after(process, uri, before)


@pytest.mark.slow
def test_a_panic_in_datafusion_is_internal_and_the_server_lives(server: tuple[psutil.Process, str]) -> None:
    process, uri = server
    before = process.memory_info().rss
    client, options = login(uri)
    with pytest.raises(fl.FlightInternalError, match=r"panicked.*\[Internal, code 18\]"):
        query(client, options, PIPES)
    served_after(process, uri, before)
