"""Run the test server in its own process (to measure its memory): ``python -m ... HOME [key=value ...]``.

Prints the port on the first line of stdout, then serves until terminated.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from lake_platform.catalog.catalog import Catalog
from lake_platform.settings import load_settings
from lake_platform.up.processes import die_with_parent
from lake_platform_tests.flight.conftest import start_server


def main() -> None:
    die_with_parent()  # a killed test run leaves no server behind
    # An in-process server of an earlier test sets this in the test runner's environment, which
    # this process inherits; LAKE_FLIGHT_SCAN_IO_BUFFER_BYTES must decide here.
    os.environ.pop("LANCE_DEFAULT_IO_BUFFER_SIZE", None)
    settings = load_settings(home=Path(sys.argv[1]))
    options = dict(arg.split("=", 1) for arg in sys.argv[2:])
    catalog = Catalog(settings)
    server = start_server(settings, catalog, **options)
    print(server.port, flush=True)
    server.wait()


def spawn(home: Path, *options: str) -> tuple[subprocess.Popen[bytes], int]:
    """This module in a process of its own, serving ``home`` with the Flight settings
    ``options`` (``name=value``): the process, and the port once it listens."""
    proc = launch(home, *options)
    return proc, port_of(proc)


def launch(home: Path, *options: str) -> subprocess.Popen[bytes]:
    """Start the process :func:`spawn` starts, without waiting for it to listen (several
    servers then start at once); :func:`port_of` waits."""
    return subprocess.Popen(
        [sys.executable, "-m", "lake_platform_tests.flight.server_process", str(home), *options],
        stdout=subprocess.PIPE,
    )


def port_of(proc: subprocess.Popen[bytes]) -> int:
    """The port of a server :func:`launch` started, once it listens; a server that fails to
    start is killed and this raises."""
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.strip().isdigit():
        proc.kill()
        proc.wait()
        raise RuntimeError(f"the server process did not start (it printed {line!r})")
    return int(line)


if __name__ == "__main__":
    main()
