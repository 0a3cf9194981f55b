"""flightsql-dbapi (the pure-Python DB-API and SQLAlchemy adapter) reads only the first
endpoint of every result. Under the default settings that is the whole answer: split-sized and
size-spooled results are one endpoint. Its pin of SQLAlchemy < 2 keeps it out of this project's
environment, so it runs in a side environment (``lake_platform_tests/side_envs.py``) from a
script that prints what it read."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.settings import LakeSettings
from lake_platform_tests.flight.conftest import PASSWORDS, build_split_catalog, built_lake, serving
from lake_platform_tests.side_envs import run_json, side_python

#: multi (500 rows, 5 fragments) splits past 100 rows; big (3857 rows) is spooled past 3000.
SETTINGS = {"endpoint_target_rows": 100, "max_endpoints": 4, "spool_min_rows": 3000, "batch_size": 512}
SPLIT_SQL = "SELECT id FROM w.ns.multi"
SPOOLED_SQL = "SELECT id FROM w.ns.big"
#: 1,928,500 rows (about 3,800 batches of 512), spooled: far past one batch or message.
LARGE_SQL = "SELECT b.id FROM w.ns.big b CROSS JOIN w.ns.multi m WHERE m.id < 500"
BIG_IDS = {i for i in range(4000) if not (i % 7 == 0 and i < 1000)}
READ = """
import json, sys
from flightsql import FlightSQLClient, connect
port, password = int(sys.argv[1]), sys.argv[2]
client = FlightSQLClient(host="127.0.0.1", port=port, user="alice", password=password, insecure=True)
cursor = connect(client).cursor()
out = {}
for sql in sys.argv[3:]:
    cursor.execute(sql)
    ids = [row[0] for row in cursor.fetchmany(333)]  # then the rest: both of the client's reads
    ids += [row[0] for row in cursor.fetchall()]
    out[sql] = [len(ids), sum(ids)]
print(json.dumps(out))
"""


#: What the side environment holds, exactly (flightsql-dbapi converts results through pandas).
PINS = (
    "flightsql-dbapi==0.2.2",
    "greenlet==3.5.6",
    "numpy==2.4.6",
    "pandas==3.1.1",
    "protobuf==7.36.2",
    "pyarrow==26.0.1",
    "python-dateutil==4.0.0",
    "sqlalchemy==1.4.54",
    "tzdata==2026.6",
)


def read(server: Any, *sql: str) -> dict[str, list[int]]:
    python = side_python("flightsql-dbapi", PINS)
    got: dict[str, list[int]] = run_json(python, READ, str(server.port), PASSWORDS["alice"], *sql)
    return got


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LakeSettings, Catalog]]:
    yield from built_lake(tmp_path_factory, build_split_catalog, "dbapi")


def test_the_first_endpoint_is_the_whole_answer_by_default(lake: tuple[LakeSettings, Catalog]) -> None:
    jobs = Path(lake[0].results_root) / "p"
    before = set(jobs.glob("*/done.json"))
    with serving(*lake, **SETTINGS) as server:
        got = read(server, SPLIT_SQL, SPOOLED_SQL, LARGE_SQL)
    assert len(set(jobs.glob("*/done.json")) - before) == 2  # big and the large answer were spooled
    assert got[SPLIT_SQL] == [500, sum(range(500))]
    assert got[SPOOLED_SQL] == [len(BIG_IDS), sum(BIG_IDS)]
    assert got[LARGE_SQL] == [500 * len(BIG_IDS), 500 * sum(BIG_IDS)]


def test_a_server_set_to_many_endpoints_loses_rows_for_it(lake: tuple[LakeSettings, Catalog]) -> None:
    """Why the default is one endpoint: this client silently reads a part of a split answer."""
    with serving(*lake, endpoints="many", **SETTINGS) as server:
        got = read(server, SPLIT_SQL)
    assert 0 < got[SPLIT_SQL][0] < 500
