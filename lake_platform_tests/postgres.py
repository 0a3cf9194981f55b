"""A throwaway PostgreSQL cluster on a free loopback port: ``initdb`` and ``postgres`` from
Debian's ``postgresql`` package (``make postgres`` installs it), run as an unprivileged user
(Postgres refuses to run as root, and CI runs as root), its data in a folder that user owns.

The postmaster runs as a child of the test process, not daemonized by ``pg_ctl``, so that it
dies with a killed test run (``bound_to_parent`` with SIGQUIT: an immediate shutdown) instead of holding
its port and folder for good. Stopped with a fast shutdown and removed afterwards.

The cluster's folder is in memory (``FAST_DIR``) where the machine has one: every Postgres test
copies a database (~7 MB, and about as much WAL) that nobody keeps. On the shared disk 40 copies
took 11.3 s and removing a session's cluster 5 to 36 s (load 3 to 14); in memory 3.3 s and
under a second."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from lake_platform.up.processes import bound_to_parent
from lake_platform_tests.servers import free_port

#: What the suite's throwaway servers may put in memory at once (this cluster's ~50 databases,
#: the Dagster instances): a container's /dev/shm can be as small as 64 MiB.
_FAST_DIR_NEEDS = 2 << 30


def _fast_dir() -> str | None:
    """A memory file system with room for the throwaway servers' data; None: the disk."""
    try:
        found = os.statvfs("/dev/shm")
    except OSError:
        return None
    roomy = found.f_bavail * found.f_frsize >= _FAST_DIR_NEEDS
    return "/dev/shm" if roomy and os.access("/dev/shm", os.W_OK) else None


#: Where throwaway servers' data goes (this cluster, dagster_storage's SQLite instances): a memory
#: file system when there is one with room.
FAST_DIR = _fast_dir()
#: Who runs the cluster when the tests run as root.
UNPRIVILEGED = "nobody"


def binaries() -> Path | None:
    """The folder holding initdb and postgres: Debian keeps them out of PATH, under
    /usr/lib/postgresql/<major>/bin (the newest major wins); PATH is tried first."""
    found = shutil.which("initdb")
    if found and (Path(os.path.realpath(found)).parent / "postgres").exists():
        return Path(os.path.realpath(found)).parent
    majors = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]), reverse=True
    )
    return Path(majors[0]).parent if majors else None


#: How long the postmaster may take to accept connections, and to stop.
START_SECONDS = 60.0


@dataclass
class Postgres:
    port: int
    root: Path
    bin: Path
    user: str
    process: subprocess.Popen[bytes] | None = None  # the postmaster

    @property
    def admin_url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def new_database(self, template: str | None = None) -> str:
        """A fresh database, empty or a copy of database ``template`` (which nobody may be
        connected to); returns its URL (no state leaks between tests)."""
        import psycopg2

        name = f"t_{uuid.uuid4().hex[:12]}"
        conn = psycopg2.connect(self.admin_url)
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                copied = f' TEMPLATE "{template}"' if template else ""
                cur.execute(f'CREATE DATABASE "{name}"{copied}')
        finally:
            conn.close()
        return f"postgresql://postgres@127.0.0.1:{self.port}/{name}"

    def stop(self) -> None:
        if self.process is not None:
            self.process.send_signal(signal.SIGINT)  # fast shutdown: sessions end, data is flushed
            try:
                self.process.wait(START_SECONDS)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.root, ignore_errors=True)


def _as_user(user: str, argv: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return argv
    return ["runuser", "-u", user, "--", *argv]


def _postmaster(user: str, argv: list[str]) -> list[str]:
    """The postmaster's command: as ``user`` when we are root, through ``setpriv``, which execs
    it in the same process (``runuser`` would stay its parent) and sets back the parent-death
    signal that the change of user clears."""
    if os.geteuid() != 0:
        return argv
    entry = pwd.getpwnam(user)
    ids = [f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}", "--init-groups"]
    return ["setpriv", *ids, "--pdeathsig", "keep", "--", *argv]


def _run(pg: Postgres, argv: list[str]) -> None:
    proc = subprocess.run(
        _as_user(pg.user, argv), capture_output=True, text=True, timeout=120, check=False, cwd=pg.root
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{Path(argv[0]).name} failed ({proc.returncode}): {proc.stdout}{proc.stderr}")


def start_postgres() -> Postgres:
    """Start a cluster (trust authentication, loopback only, sockets in its own folder)."""
    folder = binaries()
    if folder is None:
        raise RuntimeError("PostgreSQL is not installed: run `make postgres` (apt-get install postgresql)")
    root = Path(tempfile.mkdtemp(prefix="lake-pg-", dir=FAST_DIR))
    user = UNPRIVILEGED if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name
    if os.geteuid() == 0:
        entry = pwd.getpwnam(user)
        os.chown(root, entry.pw_uid, entry.pw_gid)
    pg = Postgres(0, root, folder, user)
    _run(
        pg, [str(folder / "initdb"), "-D", str(root / "data"), "-U", "postgres", "--auth=trust", "-E", "UTF8"]
    )
    for _ in range(5):  # a port taken between choosing and binding: choose again
        pg.port = free_port()
        if _start(pg):
            return pg
    shutil.rmtree(root, ignore_errors=True)
    raise RuntimeError("postgres found no free port")


def _start(pg: Postgres) -> bool:
    """Start the postmaster on ``pg.port`` and wait until it accepts connections; False if the
    port was taken meanwhile (RuntimeError on any other failure)."""
    log = pg.root / "log"
    argv = [
        str(pg.bin / "postgres"),
        "-D",
        str(pg.root / "data"),
        "-p",
        str(pg.port),
        "-k",
        str(pg.root),
        "-c",
        "listen_addresses=127.0.0.1",
        "-c",
        "fsync=off",
        "-c",
        "max_connections=200",
    ]
    with log.open("ab") as out:
        pg.process = subprocess.Popen(
            bound_to_parent(_postmaster(pg.user, argv), signal.SIGQUIT),
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=pg.root,
        )
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        if pg.process.poll() is not None:
            pg.process = None
            text = log.read_text(errors="replace")
            if "could not bind" in text:
                return False
            raise RuntimeError(f"postgres exited at start: {text[-2000:]}")
        if _ready(pg.root / "data" / "postmaster.pid"):
            return True
        time.sleep(0.05)  # what pg_ctl -w does: poll the postmaster's status line
    pg.stop()
    raise RuntimeError(f"postgres did not accept connections within {START_SECONDS:g}s")


def _ready(pid_file: Path) -> bool:
    """Whether the postmaster's status line (postmaster.pid, line 8) says it accepts connections."""
    try:
        lines = pid_file.read_text().splitlines()
    except OSError:
        return False
    return len(lines) >= 8 and lines[7].strip() == "ready"
