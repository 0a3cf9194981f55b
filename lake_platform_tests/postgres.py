"""A throwaway PostgreSQL cluster on a free loopback port: ``initdb`` + ``pg_ctl`` from Debian's
``postgresql`` package (``make postgres`` installs it), run as an unprivileged user (Postgres
refuses to run as root, and CI runs as root), its data in a folder that user owns. Stopped by
``pg_ctl stop`` and removed afterwards."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

from lake_platform_tests.servers import free_port

#: Who runs the cluster when the tests run as root.
UNPRIVILEGED = "nobody"


def binaries() -> Path | None:
    """The folder holding initdb and pg_ctl: Debian keeps them out of PATH, under
    /usr/lib/postgresql/<major>/bin (the newest major wins); PATH is tried first."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(os.path.realpath(found)).parent
    majors = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]), reverse=True
    )
    return Path(majors[0]).parent if majors else None


@dataclass
class Postgres:
    port: int
    root: Path
    bin: Path
    user: str

    @property
    def admin_url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def new_database(self) -> str:
        """A fresh, empty database; returns its URL (no state leaks between tests)."""
        import psycopg2

        name = f"t_{uuid.uuid4().hex[:12]}"
        conn = psycopg2.connect(self.admin_url)
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute(f'CREATE DATABASE "{name}"')
        finally:
            conn.close()
        return f"postgresql://postgres@127.0.0.1:{self.port}/{name}"

    def stop(self) -> None:
        _run(self, [str(self.bin / "pg_ctl"), "stop", "-D", str(self.root / "data"), "-m", "fast", "-w"])
        shutil.rmtree(self.root, ignore_errors=True)


def _as_user(user: str, argv: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return argv
    return ["runuser", "-u", user, "--", *argv]


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
    root = Path(tempfile.mkdtemp(prefix="lake-pg-"))
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
        options = f"-c listen_addresses=127.0.0.1 -p {pg.port} -k {root} -c fsync=off -c max_connections=200"
        try:
            _run(
                pg,
                [
                    str(folder / "pg_ctl"),
                    "start",
                    "-D",
                    str(root / "data"),
                    "-l",
                    str(root / "log"),
                    "-o",
                    options,
                    "-w",
                    "-t",
                    "60",
                ],
            )
            return pg
        except RuntimeError:
            if "could not bind" not in (root / "log").read_text(errors="replace"):
                shutil.rmtree(root, ignore_errors=True)
                raise
    raise RuntimeError("postgres found no free port")
