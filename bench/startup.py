"""Start-up with and without installed bytecode: ``lake up`` to its banner, and one ``lake sql``.

Every ``lake`` command, server and Dagster run worker is a fresh process. ``make setup`` and the
image compile the dependencies' and the package's bytecode at install (uv does not by default, and
the image runs with ``PYTHONDONTWRITEBYTECODE``); a process that finds none compiles every module it
imports. The reference is that process: the same command with ``PYTHONPYCACHEPREFIX`` pointing at an
empty folder and ``PYTHONDONTWRITEBYTECODE`` set, so nothing is found and nothing written.

The two take turns, N times over, on a small lake (``lake up`` seeds its demo).

    python bench/startup.py [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common as c

LAKE = [sys.executable, "-m", "lake_platform.cli"]


def _env(tmp: Path, compiling: bool) -> dict[str, str]:
    env = {**os.environ, "LAKE_HOME": str(tmp / "home"), "DAGSTER_HOME": str(tmp / "dagster")}
    (tmp / "dagster").mkdir(exist_ok=True)
    env.pop("PYTHONPYCACHEPREFIX", None)
    if compiling:
        env["PYTHONPYCACHEPREFIX"] = str(tmp / "no-bytecode")
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def lake_up(compiling: bool) -> float:
    """Seconds from ``lake up`` to the end of its banner (every server answers), on a new home."""
    with tempfile.TemporaryDirectory() as tmp:
        env = _env(Path(tmp), compiling)
        ports = [str(c.free_port()) for _ in range(3)]
        cmd = [*LAKE, "up", "--port", ports[0], "--flight-port", ports[1], "--rest-port", ports[2]]
        start = time.perf_counter()
        proc = subprocess.Popen(
            cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True
        )
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                if line.startswith("Next steps"):
                    return time.perf_counter() - start
            raise RuntimeError(f"lake up exited with {proc.wait()} before its banner")
        finally:
            os.killpg(proc.pid, signal.SIGINT)
            proc.wait(timeout=120)


def lake_sql(home: Path, compiling: bool) -> float:
    env = _env(home, compiling)
    start = time.perf_counter()
    query = [*LAKE, "sql", "--project", "bench", "--json", "SELECT 1 AS one"]
    subprocess.run(query, env=env, check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    runs = parser.parse_args().runs
    times: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        subprocess.run(
            [*LAKE, "project", "create", "bench"], env=_env(home, False), check=True, capture_output=True
        )
        for compiling in (True, False):  # warm the OS file cache; not counted
            lake_sql(home, compiling)
        for _ in range(runs):
            for compiling in (True, False):
                label = "compiling" if compiling else "bytecode"
                times.setdefault(f"lake sql --json, {label}", []).append(lake_sql(home, compiling))
                times.setdefault(f"lake up to banner, {label}", []).append(lake_up(compiling))
    medians = {label: statistics.median(t) for label, t in times.items()}
    print(f"median wall time of {runs} runs, each a fresh start, the two taking turns")
    for label, median in sorted(medians.items()):
        print(f"  {label:<32} {median:6.2f} s")
    for what in ("lake sql --json", "lake up to banner"):
        ratio = medians[f"{what}, compiling"] / medians[f"{what}, bytecode"]
        print(f"{what}: {ratio:.2f}x faster with installed bytecode than compiling at start")


if __name__ == "__main__":
    main()
