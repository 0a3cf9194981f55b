"""CLI start-up benchmark: wall time of everyday ``lake`` commands, each a fresh process.

Builds a small lake (one project, warehouse, namespace and a 1,000-row table) in a temporary
LAKE_HOME, then prints the median of N runs (after one uncounted warm-up that also writes the
bytecode cache) of:

- ``python -c pass``: the interpreter's own start-up, the floor every command pays;
- ``lake --help``: the yardstick; every other command is also given as a multiple of it;
- ``lake table list`` and ``lake table describe T`` (registry only: no Lance import), which
  should stay within ``TARGET`` times ``lake --help``;
- ``lake table describe T --stats`` (opens the table in Lance, for comparison);
- ``lake sql --json`` of a count over T (the query engine: DataFusion and Lance);
- the floor of every registry command: what ``lake --help`` loads, plus reading the settings
  (pydantic-settings) and the registry's records (pydantic), no command run.

The commands take turns (one run of each, N times over), so a machine busy with something else
slows them alike and the ratios stay comparable within one run.

    python bench/cli.py [--runs 11]

To measure another checkout, put its package first: ``PYTHONPATH=/path/to/checkout python bench/cli.py``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

T = "acme.lake.raw.orders"
#: A query over T (tables are named warehouse.namespace.table within the project).
SQL = "SELECT count(*) AS n FROM lake.raw.orders"
LAKE = [sys.executable, "-m", "lake_platform.cli"]
YARDSTICK = "lake --help"
#: The registry-only commands' budget, in multiples of ``lake --help`` (issue 48).
TARGET = 3.0
BUDGETED = ("lake table list", "lake table describe T")
FLOOR = (
    "import lake_platform.cli, lake_platform.registry.records\n"
    "from lake_platform.settings import load_settings\n"
    "load_settings()"
)


def _wall(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def _build(home: Path, env: dict[str, str]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = home.parent / "orders.parquet"
    pq.write_table(pa.table({"id": pa.array(range(1000), pa.int64())}), data)
    for args in (
        ["project", "create", "acme"],
        ["warehouse", "create", "acme.lake"],
        ["namespace", "create", "acme.lake.raw"],
        ["table", "create", T, "--from", str(data)],
    ):
        subprocess.run([*LAKE, *args], env=env, check=True, stdout=subprocess.DEVNULL)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=11)
    runs = parser.parse_args().runs
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        # Bytecode as an installed package has it (pip compiles on install): written on the
        # warm-up run into a private cache, so the venv is untouched and a PYTHONDONTWRITEBYTECODE
        # environment does not make every run compile every module (which triples start-up).
        env = {**os.environ, "LAKE_HOME": str(home), "PYTHONPYCACHEPREFIX": str(Path(tmp) / "pycache")}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        _build(home, env)
        cases = {
            "python -c pass": [sys.executable, "-c", "pass"],
            YARDSTICK: [*LAKE, "--help"],
            "lake table list": [*LAKE, "table", "list"],
            "lake table describe T": [*LAKE, "table", "describe", T],
            "lake table describe T --stats": [*LAKE, "table", "describe", T, "--stats"],
            "lake sql --json (count of T)": [*LAKE, "sql", "--json", SQL],
            "floor: cli + settings + records": [sys.executable, "-c", FLOOR],
        }
        for label, cmd in list(cases.items()):
            try:
                _wall(cmd, env)  # warm the OS file cache and write bytecode; not counted
            except subprocess.CalledProcessError:  # e.g. --stats on a version without it
                print(f"  {label:<32}    n/a")
                del cases[label]
        times: dict[str, list[float]] = {label: [] for label in cases}
        for _ in range(runs):
            for label, cmd in cases.items():
                times[label].append(_wall(cmd, env))
        medians = {label: statistics.median(t) for label, t in times.items()}
        print(f"median wall time of {runs} runs, each a fresh process, the commands taking turns")
        for label, median in medians.items():
            print(f"  {label:<32} {median:6.3f} s  {median / medians[YARDSTICK]:5.2f}x {YARDSTICK}")
        worst = max(medians[label] / medians[YARDSTICK] for label in BUDGETED)
        verdict = "within" if worst <= TARGET else "over"
        print(f"registry-only commands: at most {worst:.2f}x {YARDSTICK}, {verdict} the {TARGET:g}x budget")


if __name__ == "__main__":
    main()
