"""Real Dagster test instances on SQLite storage, copied from one made per test process.

``dg.instance_for_test()`` creates the run, event-log and schedule databases of a new SQLite
instance and runs their migrations: 1 to 2 s a test on 2 cores, for the same files every time.
:func:`sqlite_instance` makes them once, copies them into each test's fresh directory and opens
the instance there (``instance_for_test`` with ``temp_dir``): the same storages, found already
at their current schema, in about 0.2 s. Nothing is shared between tests but the starting files.
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

_lock = threading.Lock()
_template: tempfile.TemporaryDirectory[str] | None = None


def _template_home() -> Path:
    """A closed SQLite instance's home, its databases created and migrated (made on first use)."""
    global _template
    with _lock:
        if _template is None:
            made = tempfile.TemporaryDirectory(prefix="dagster-template-")
            with dg.instance_for_test(temp_dir=made.name) as instance:
                instance.get_runs(limit=1)
            _template = made
        return Path(_template.name)


@contextmanager
def sqlite_instance(overrides: Mapping[str, Any] | None = None) -> Iterator[dg.DagsterInstance]:
    """``dg.instance_for_test(overrides=overrides)`` on SQLite storage (``overrides`` must not
    name another storage), in a new directory that starts from the template's databases."""
    with tempfile.TemporaryDirectory(prefix="dagster-") as tmp:
        home = Path(tmp) / "home"
        shutil.copytree(_template_home(), home)
        with dg.instance_for_test(overrides=dict(overrides or {}), temp_dir=str(home)) as instance:
            yield instance
