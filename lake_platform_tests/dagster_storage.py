"""Real Dagster test instances whose storage starts as a copy of one made once.

``dg.instance_for_test()`` creates the run, event-log and schedule databases of a new SQLite
instance and runs their migrations: 1 to 2 s a test on 2 cores, for the same files every time.
:func:`sqlite_instance` makes them once, copies them into each test's fresh directory and opens
the instance there (``instance_for_test`` with ``temp_dir``): the same storages, found already
at their current schema, in about 0.2 s. On Postgres (:func:`postgres_instance`) each test's
database is a ``CREATE DATABASE ... TEMPLATE`` copy of one that Dagster migrated once, instead
of an empty one that every instance migrates (0.6 to 0.9 s). Nothing is shared between tests but
the starting files or tables.

The SQLite instances live in memory (``/dev/shm`` where the machine has it): Dagster's SQLite
event log commits every event, and on a disk each commit waits for its fsync (a one-step run
took 1.2 s on disk, 0.4 s in memory). Nothing here tests what survives a power cut.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import dagster as dg

from lake_platform_tests.postgres import FAST_DIR, Postgres

__all__ = ["FAST_DIR", "postgres_database", "postgres_instance", "sqlite_instance"]

_lock = threading.Lock()
_template: tempfile.TemporaryDirectory[str] | None = None
_postgres_templates: dict[int, str] = {}  # cluster port -> its migrated template database


def _template_home() -> Path:
    """A closed SQLite instance's home, its databases created and migrated (made on first use)."""
    global _template
    with _lock:
        if _template is None:
            made = tempfile.TemporaryDirectory(prefix="dagster-template-", dir=FAST_DIR)
            with dg.instance_for_test(temp_dir=made.name) as instance:
                instance.get_runs(limit=1)
            _template = made
        return Path(_template.name)


@contextmanager
def sqlite_instance(overrides: Mapping[str, Any] | None = None) -> Iterator[dg.DagsterInstance]:
    """``dg.instance_for_test(overrides=overrides)`` on SQLite storage (``overrides`` must not
    name another storage), in a new directory that starts from the template's databases."""
    with tempfile.TemporaryDirectory(prefix="dagster-", dir=FAST_DIR) as tmp:
        home = Path(tmp) / "home"
        shutil.copytree(_template_home(), home)
        with dg.instance_for_test(overrides=dict(overrides or {}), temp_dir=str(home)) as instance:
            yield instance


def _postgres_template(postgres: Postgres) -> str:
    """The name of a database on ``postgres`` holding Dagster's migrated storage, nobody
    connected to it (made on first use)."""
    with _lock:
        if postgres.port not in _postgres_templates:
            url = postgres.new_database()
            with dg.instance_for_test(overrides={"storage": {"postgres": {"postgres_url": url}}}) as instance:
                instance.get_runs(limit=1)
            _postgres_templates[postgres.port] = url.rsplit("/", 1)[1]
        return _postgres_templates[postgres.port]


def postgres_database(postgres: Postgres) -> str:
    """The URL of a new database on ``postgres`` whose Dagster storage is created and migrated."""
    return postgres.new_database(template=_postgres_template(postgres))


@contextmanager
def postgres_instance(postgres: Postgres) -> Iterator[dg.DagsterInstance]:
    """``dg.instance_for_test`` on Postgres storage: a new database copied from the template."""
    overrides = {"storage": {"postgres": {"postgres_url": postgres_database(postgres)}}}
    with dg.instance_for_test(overrides=overrides) as instance:
        yield instance
