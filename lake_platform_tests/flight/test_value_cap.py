"""Memory outside the query pool (issue 44, row 3), measured from outside: one reader's
``SELECT length(repeat('x', 2000000000))`` took the server from 0.85 GB to 8.5 GB against a
1 GiB pool. Now the call is refused before it builds anything, and the server's peak resident
memory stays within the pool plus 256 MiB. ``lpad``, ``rpad``, ``array_repeat`` and the scalar
``range``/``generate_series`` (DataFusion's, checked at planning: ``query.value_bounds``)
likewise: 5×10^7 elements of ``array_repeat`` / ``range`` took a server with a 64 MiB pool to a
peak of 931 / 549 MiB."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psutil
import pyarrow as pa
import pytest

from lake_platform_tests.flight.conftest import build_catalog, login, plan
from lake_platform_tests.flight.server_process import spawn

POOL = 1 << 30
MARGIN = 256 << 20


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[psutil.Process, str]]:
    home = tmp_path_factory.mktemp("value-cap")
    build_catalog(home)
    proc, port = spawn(Path(home), f"memory_limit_bytes={POOL}")
    try:
        yield psutil.Process(proc.pid), f"grpc://127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait()


def peak_rss(process: psutil.Process) -> int:
    """The process's peak resident memory so far (Linux's VmHWM)."""
    for line in Path(f"/proc/{process.pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc/<pid>/status")


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT length(repeat('x', 2000000000)) AS n",
        "SELECT length(repeat(s, 100000000)) AS n FROM w.ns.t",  # 1000 rows: every value too
        # each value 800 kB, a batch of them 6.5 GB (not constant: folded, it would be one value)
        "SELECT sum(length(repeat('abcdefgh', 100000 + value % 2))) AS n FROM generate_series(1, 100000)",
    ],
    ids=["literal", "column", "per-batch"],
)
def test_repeat_past_the_cap_is_refused_within_the_memory_bound(
    server: tuple[psutil.Process, str], sql: str
) -> None:
    """A column repeated a literal count of times is refused at planning (``value_copies``)."""
    process, uri = server
    client, options = login(uri)
    with pytest.raises(pa.ArrowInvalid, match=r"more than (LAKE_FLIGHT_MAX_VALUE_BYTES=67108864|16 copies)"):
        client.do_get(plan(client, options, sql).endpoints[0].ticket, options).read_all()
    assert peak_rss(process) <= POOL + MARGIN, f"peak RSS {peak_rss(process) >> 20} MiB"


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT length(lpad('x', 2000000000)) AS n",
        "SELECT length(rpad(s, 2000000000, 'ab')) AS n FROM w.ns.t",
        "SELECT max(length(lpad(s, 100000))) AS n FROM w.ns.t",  # each value fits, a batch does not
    ],
    ids=["lpad-literal", "rpad-column", "lpad-per-batch"],
)
def test_lpad_and_rpad_past_the_cap_are_refused_within_the_memory_bound(
    server: tuple[psutil.Process, str], sql: str
) -> None:
    """Refused at planning, before the optimizer folds a call of literals by running it."""
    process, uri = server
    client, options = login(uri)
    with pytest.raises(pa.ArrowInvalid, match=r"more than LAKE_FLIGHT_MAX_VALUE_BYTES=67108864"):
        client.do_get(plan(client, options, sql).endpoints[0].ticket, options).read_all()
    assert peak_rss(process) <= POOL + MARGIN, f"peak RSS {peak_rss(process) >> 20} MiB"


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT cardinality(array_repeat(1, 100000000)) AS n",
        "SELECT cardinality(list_repeat('abcdefgh', 20000000)) AS n",
        "SELECT cardinality(range(100000000)) AS n",
        "SELECT cardinality(generate_series(1, 100000000)) AS n",
        "SELECT max(cardinality(range(1000))) AS n FROM w.ns.t",  # each list fits, a batch does not
        # a NULL of a fixed-size type holds its whole width: 8 MB a row, 8 GB over 1000 rows
        "SELECT count(arrow_cast(NULL, 'FixedSizeList(1000000, Int64)')) AS n FROM w.ns.t",
    ],
    ids=[
        "array_repeat",
        "list_repeat-string",
        "range",
        "generate_series",
        "range-per-batch",
        "fixed-size-cast",
    ],
)
def test_list_builders_past_the_cap_are_refused_within_the_memory_bound(
    server: tuple[psutil.Process, str], sql: str
) -> None:
    process, uri = server
    client, options = login(uri)
    with pytest.raises(pa.ArrowInvalid, match=r"more than LAKE_FLIGHT_MAX_VALUE_BYTES=67108864"):
        client.do_get(plan(client, options, sql).endpoints[0].ticket, options).read_all()
    assert peak_rss(process) <= POOL + MARGIN, f"peak RSS {peak_rss(process) >> 20} MiB"


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT max(length(s || '" + "x" * 10000 + "')) AS n FROM w.ns.t",
        "SELECT count(concat(s, '" + "x" * 10000 + "')) AS n FROM w.ns.t",
        "SELECT length(replace('" + "x" * 10000 + "', '', '" + "y" * 10000 + "')) AS n",
    ],
    ids=["pipes", "concat", "replace-empty"],
)
def test_literals_past_the_cap_are_refused_within_the_memory_bound(
    server: tuple[psutil.Process, str], sql: str
) -> None:
    """A literal is copied to every row (10 KB: 327 MB a batch of 32768); a replacement of the
    empty pattern is inserted at every position (10 KB into 10 KB: 100 MB). Neither query names a
    sized call, so neither was checked."""
    process, uri = server
    client, options = login(uri)
    with pytest.raises(pa.ArrowInvalid, match=r"more than LAKE_FLIGHT_MAX_VALUE_BYTES=67108864"):
        client.do_get(plan(client, options, sql).endpoints[0].ticket, options).read_all()
    assert peak_rss(process) <= POOL + MARGIN, f"peak RSS {peak_rss(process) >> 20} MiB"


ENCODED = "s"
for _ in range(30):
    ENCODED = f"encode({ENCODED}, 'hex')"


@pytest.mark.parametrize(
    "sql",
    [
        f"SELECT max(length({ENCODED})) AS n FROM w.ns.t",  # 2**30 times each value
        "SELECT count(replace(s, '', '" + "y" * 1000 + "')) AS n FROM w.ns.t",
        "SELECT count(array_to_string(string_to_array(s, NULL), '" + "-" * 1000 + "')) AS n FROM w.ns.t",
    ],
    ids=["encode", "replace-empty", "split-join"],
)
def test_growth_of_column_data_past_the_copies_factor_is_refused(
    server: tuple[psutil.Process, str], sql: str
) -> None:
    """A column's value counted as nothing: 30 levels of encode(.., 'hex') in 800 bytes of SQL
    make a billion bytes of each byte of it."""
    process, uri = server
    client, options = login(uri)
    with pytest.raises(pa.ArrowInvalid, match=r"copies of column s a value, more than 16"):
        client.do_get(plan(client, options, sql).endpoints[0].ticket, options).read_all()
    assert peak_rss(process) <= POOL + MARGIN, f"peak RSS {peak_rss(process) >> 20} MiB"


@pytest.mark.parametrize(
    ("sql", "n"),
    [
        ("SELECT length(repeat('ab', 1000000)) AS n", 2000000),
        ("SELECT length(lpad('x', 1000000, 'ab')) AS n", 1000000),
        ("SELECT max(length(rpad(s, 20, '.'))) AS n FROM w.ns.t", 20),
        ("SELECT cardinality(array_repeat('ab', 1000000)) AS n", 1000000),
        ("SELECT cardinality(range(1000000)) AS n", 1000000),
        ("SELECT cardinality(generate_series(1, 10)) AS n", 10),
        ("SELECT max(cardinality(range(10))) AS n FROM w.ns.t", 10),
        ("SELECT length(replace('" + "x" * 1000 + "', '', 'ab')) AS n", 3002),
    ],
)
def test_values_within_the_cap_still_answer(server: tuple[psutil.Process, str], sql: str, n: int) -> None:
    _, uri = server
    client, options = login(uri)
    table = client.do_get(plan(client, options, sql).endpoints[0].ticket, options).read_all()
    assert table.column("n").to_pylist() == [n]
