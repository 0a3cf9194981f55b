"""Side environments for stock clients whose pins conflict with this project's environment
(flightsql-dbapi's SQLAlchemy < 2, lancedb's and daft-lance's own pylance, DuckDB's lance
extension): a virtualenv per client under ``test-artifacts/`` (gitignored), built with the uv
that ``make setup`` installs beside this interpreter, from exact pins of every package it
holds (``uv pip sync``: nothing unlisted is installed, ``uv pip check`` proves the list whole).
Built once; rebuilt when the pins change (the stamp file is the pins). A test drives the client
with a script run in the side environment that prints one JSON document."""

from __future__ import annotations

import fcntl
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts"
BUILD_SECONDS = 900


def _uv(*args: str) -> None:
    uv = str(Path(sys.executable).parent / "uv")
    if not Path(uv).exists():
        raise RuntimeError(f"{uv} is missing: `make setup` installs it (the side environments need it)")
    done = subprocess.run([uv, *args], check=False, timeout=BUILD_SECONDS, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"uv {' '.join(args[:2])} failed: {done.stderr[-4000:]}")


def side_python(name: str, pins: Sequence[str]) -> Path:
    """The interpreter of side environment ``name`` holding exactly ``pins`` (``pkg==version``
    each, the whole dependency closure), built on first use. A lock file keeps two test
    processes from building the same environment at once."""
    unpinned = [p for p in pins if "==" not in p]
    if unpinned:
        raise ValueError(f"side environment {name}: pin every package exactly, not {unpinned}")
    home = ARTIFACTS / name
    python = home / "bin" / "python"
    stamp = home / "requirements.txt"
    wanted = "\n".join(sorted(pins)) + "\n"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with (ARTIFACTS / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if python.exists() and stamp.exists() and stamp.read_text() == wanted:
            return python
        if not python.exists():
            _uv("venv", "-q", str(home), "--python", sys.executable)
        wanted_file = home / "requirements.wanted.txt"
        wanted_file.write_text(wanted)
        _uv("pip", "sync", "-q", "--python", str(python), str(wanted_file))
        _uv("pip", "check", "-q", "--python", str(python))
        wanted_file.replace(stamp)
    return python


def run_json(python: Path, script: str, *args: str, timeout: float = 300) -> Any:
    """Run ``script`` (source text) in a side environment; its last stdout line is its JSON
    answer. A failing script fails the test with the client's stderr."""
    done = subprocess.run(
        [str(python), "-c", script, *args], check=False, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
