"""CLI start-up benchmark: wall time of everyday ``lake`` commands, each a fresh process.

Builds a small lake (one project, warehouse, namespace and a 1,000-row table) in a temporary
LAKE_HOME, then prints the median of N runs (after one uncounted warm-up that also writes the
bytecode cache) of:

- ``python -c pass``: the interpreter's own start-up, the floor every command pays;
- ``lake --help``;
- ``lake table list`` and ``lake table describe T`` (registry only: no Lance import);
- ``lake table describe T --stats`` (opens the table in Lance, for comparison).

    python bench/cli.py [--runs 5]

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
LAKE = [sys.executable, "-m", "lake_platform.cli"]


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
    parser.add_argument("--runs", type=int, default=5)
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
            "lake --help": [*LAKE, "--help"],
            "lake table list": [*LAKE, "table", "list"],
            "lake table describe T": [*LAKE, "table", "describe", T],
            "lake table describe T --stats": [*LAKE, "table", "describe", T, "--stats"],
        }
        print(f"median wall time of {runs} runs, each a fresh process")
        for label, cmd in cases.items():
            try:
                _wall(cmd, env)  # warm the OS file cache and write bytecode; not counted
            except subprocess.CalledProcessError:  # e.g. --stats on a version without it
                print(f"  {label:<32}    n/a")
                continue
            median = statistics.median(_wall(cmd, env) for _ in range(runs))
            print(f"  {label:<32} {median:6.3f} s")


if __name__ == "__main__":
    main()
