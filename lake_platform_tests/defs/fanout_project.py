"""The platform's compaction job on the multiprocess executor, its lake a killer of one task's
process (``test_fanout.py``). A module of its own, importing nothing of the tests or pytest:
every step process imports it again to rebuild the job (the forkserver preloads the platform's
code location, not this), and before it did so with the test module (pytest, the test conftest
with its server helpers: 0.4 to 1.6 s a step)."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager

import dagster as dg

from lake_platform.catalog.catalog import Catalog
from lake_platform.defs import definitions
from lake_platform.defs.resources import LakeResource
from lake_platform.settings import DagsterSettings


class KillingLake(LakeResource):
    """The lake, except that one compaction task (the first to start, across all processes)
    kills its own process with SIGKILL, as a node failure or the OOM killer would: once, or on
    every attempt while the file ``<marker>.armed`` exists. No ``marker``: nothing is killed."""

    marker: str = ""

    @contextmanager
    def catalog(self) -> Iterator[Catalog]:
        with super().catalog() as catalog:
            execute = catalog.versions.execute_compaction

            def dying(planned):  # type: ignore[no-untyped-def]
                if not self.marker:
                    return execute(planned)
                task = planned.tasks[0]
                try:
                    with open(self.marker, "x") as claim:
                        claim.write(task)
                except FileExistsError:
                    with open(self.marker) as claim:
                        if claim.read() != task or not os.path.exists(self.marker + ".armed"):
                            return execute(planned)
                os.kill(os.getpid(), signal.SIGKILL)

            catalog.versions.execute_compaction = dying  # type: ignore[method-assign]
            yield catalog


def multiprocess_defs() -> dg.Definitions:
    """Rebuilt in every step process (it must be importable): the platform's definitions on the
    multiprocess executor, the lake a killer when the run's config gives it a marker."""
    overrides: dict[str, object] = {"lake": KillingLake()}
    return definitions.build(overrides, DagsterSettings(executor="multiprocess", max_concurrent_steps=3))


def multiprocess_job() -> dg.JobDefinition:
    return multiprocess_defs().resolve_job_def("table_compaction")
