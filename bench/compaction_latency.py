"""Compaction latency under `make run`: seconds from the commit that takes a table across its
compaction threshold to the compaction's own commit, the work done by `lake up`'s Dagster daemon
(the ``compaction_sensor`` requesting a ``table_compaction`` run). Issue 47's bar: within 60 s.

Starts `lake up` (the installed script, as `make run` does) on a fresh LAKE_HOME and free
loopback ports and waits for its ready line. Then, through the catalog on the same home: a table
of one fragment with ``compact_min_fragments=4`` on its policy, and three appends of one
fragment each; the third takes it across. The table's commit log is read once a second until a
``compact`` entry appears (or ``--timeout``). The latency is taken from the registry's own
timestamps (the append's and the compaction's ``at_ms``), not from the polling. Prints figures
only; asserts nothing.

    python bench/compaction_latency.py [--rounds 3] [--timeout 300]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import _common as common

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lake_platform_tests.servers import free_ports  # noqa: E402

READY = "Ctrl-C stops everything"


def start_lake_up(home: Path, log: Path) -> subprocess.Popen[str]:
    script = Path(sys.executable).parent / "lake"
    ui, flight, rest = free_ports(3)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKE_") and k != "DAGSTER_HOME"}
    proc = subprocess.Popen(
        [str(script), "up", "--port", str(ui), "--flight-port", str(flight), "--rest-port", str(rest)],
        env={**env, "LAKE_HOME": str(home)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    with log.open("w") as out:
        for line in proc.stdout:
            out.write(line)
            if READY in line:
                return proc
    raise RuntimeError(f"lake up exited before it was ready; see {log}")


def one_round(catalog: object, name: str, timeout: float) -> float | None:
    """Seconds from the crossing append's commit to the compaction's, or None on timeout."""
    tables, policies, reads = catalog.tables, catalog.policies, catalog.reads  # type: ignore[attr-defined]
    tables.create_table(name, common.make_reader(10_000, 10_000, 1))
    policies.set_policy(name, {"compact_min_fragments": 4})
    crossing = None
    for seed in (2, 3, 4):
        crossing = tables.append(name, common.make_reader(10_000, 10_000, seed))
    assert crossing is not None
    crossed_at = next(e.at_ms for e in reversed(reads.history(name)) if e.to_version == crossing.to_version)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = [e for e in reads.history(name) if e.operation == "compact"]
        if done:
            return (done[0].at_ms - crossed_at) / 1000
        time.sleep(1)  # a measurement's polling interval, not synchronization in a test
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3, help="tables taken across, one after another")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for each compaction")
    args = ap.parse_args()
    print(common.machine_line())
    with common.scratch_dir("bench-compaction-latency-") as tmp:
        proc = start_lake_up(tmp / "home", tmp / "lake-up.log")
        try:
            catalog = common.open_catalog(tmp / "home")
            latencies = []
            for n in range(args.rounds):
                seconds = one_round(catalog, f"{common.NAMESPACE}.hot{n}", args.timeout)
                shown = f"{seconds:.1f} s" if seconds is not None else f"none within {args.timeout:.0f} s"
                print(f"  table hot{n}: compacted {shown} after the crossing commit ({common.load_line()})")
                if seconds is not None:
                    latencies.append(seconds)
            catalog.close()
        finally:
            proc.send_signal(signal.SIGINT)  # what Ctrl-C sends: lake up stops what it started
            proc.wait(120)
    if latencies:
        print(
            f"compaction latency under lake up: median {statistics.median(latencies):.1f} s, "
            f"max {max(latencies):.1f} s of {args.rounds} (bar: within 60 s)"
        )


if __name__ == "__main__":
    main()
