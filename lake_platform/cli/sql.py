"""``lake sql``: the Flight endpoint's read-only query layer, run in this process.

The same engine, the same limits (``LAKE_FLIGHT_*``, so a query refused by the endpoint is refused
here with the same message) and the same tenancy: the query sees one project's warehouses, as
user ``--as USER`` would over Flight. Without ``--as`` the caller is the CLI's local admin, who
names the project with ``--project`` (needed only when the registry holds more than one).

The result is streamed batch by batch: to a file (``--output``: Parquet, CSV or Arrow IPC by
extension), as JSON rows (``--json``), or as a table for people (at most ``--head`` rows shown,
all of them counted). Time travel is written in the query, as over Flight: ``w.ns."t@v12"`` or
``w.ns."t@tag:eod"`` (a flag could not say which of the query's tables it meant).

Every batch is taken on the main thread (``blocking``): no thread of DataFusion's runtime calls
into Python, so none can be caught inside the interpreter as it finalises at exit (which ended
a successful query with ``Fatal Python error: PyGILState_Release`` and exit code 134). The time
limit within a batch is a SIGALRM timer (:func:`time_limit`), which needs a spare runtime worker
(:func:`spare_runtime_worker`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import json
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from lake_platform.cli.app import State, handles_errors, pass_state
from lake_platform.errors import InvalidInput

if TYPE_CHECKING:
    import pyarrow as pa

    from lake_platform.catalog.catalog import Catalog
    from lake_platform.query.engine import QueryEngine
    from lake_platform.query.limits import QueryLimits
    from lake_platform.query.snapshot import ProjectView

#: Output file extensions and the format each one writes.
FORMATS = {".parquet": "parquet", ".csv": "csv", ".arrow": "arrow", ".ipc": "arrow", ".feather": "arrow"}


def output_format(path: Path) -> str:
    """The format ``path``'s extension names; InvalidInput for any other extension."""
    fmt = FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise InvalidInput(f"--output {path.name}: the extension must be one of {', '.join(sorted(FORMATS))}")
    if not path.parent.is_dir():
        raise InvalidInput(f"--output {path}: folder {path.parent} does not exist")
    return fmt


def resolve_project(catalog: Catalog, as_user: str | None, project: str | None) -> str:
    """The project the query sees: ``--as`` user's own, or the admin's ``--project`` (optional when
    the registry holds exactly one project)."""
    from lake_platform.naming import ProjectName, check_segment

    if as_user is not None:
        check_segment(as_user, "user name")
        user = catalog.inventory.user(as_user)
        if user is None:
            raise InvalidInput(f"--as {as_user}: no such user")
        if project is not None and project != user.project:
            raise InvalidInput(f"--as {as_user}: the user belongs to project {user.project}, not {project}")
        return user.project
    if project is not None:
        name = ProjectName.parse(project)
        if catalog.inventory.project(name) is None:
            raise InvalidInput(f"--project {project}: no such project")
        return name.project
    projects = sorted(catalog.inventory.projects())
    if len(projects) != 1:
        listed = ", ".join(projects) if projects else "none"
        raise InvalidInput(f"name the project to query with --project or --as (projects: {listed})")
    return projects[0]


@contextlib.contextmanager
def query_view(
    state: State, as_user: str | None, project: str | None, engine: QueryEngine | None = None
) -> Iterator[ProjectView]:
    """The project's snapshot view; ``engine`` reads branches (``"t@branch:dev"``) through the
    same registry while the view is open."""
    from lake_platform.query.branch_refs import BranchRefs
    from lake_platform.query.snapshot import load_snapshot
    from lake_platform.query.snapshot_transactions import manifests_on_storage

    with state.catalog() as catalog:
        if engine is not None:
            engine.branches = BranchRefs(catalog.store)
        name = resolve_project(catalog, as_user, project)
        # The query layer reads its snapshot from the registry itself (invariant 7).
        published = manifests_on_storage(catalog.settings.storage_options)
        yield load_snapshot(catalog.store, published=published).project(name)


@contextlib.contextmanager
def time_limit(limits: QueryLimits) -> Iterator[None]:
    """QueryTimeout once ``query_timeout_seconds`` have passed, even while DataFusion computes
    one long batch: a blocking stream checks its deadline only between batches, and DataFusion
    runs Python's signal handlers about once a second while it computes, so this SIGALRM timer
    stops the query as the endpoint's poll would (a second late at most). Only the main thread
    receives signals; elsewhere the stream's own checks are the limit."""
    from lake_platform.query.errors import timed_out

    seconds = limits.query_timeout_seconds
    if not seconds or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum: int, frame: object) -> None:
        raise timed_out(limits)

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def write_file(batches: Iterator[pa.RecordBatch], schema: pa.Schema, path: Path, fmt: str) -> int:
    """Write ``batches`` one at a time to a temporary file next to ``path``, renamed onto it only
    once the query has finished: a failed query leaves no partial file. Returns the row count."""
    import pyarrow as pa
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    partial = path.with_name(f".{path.name}.partial-{os.getpid()}")
    rows = 0
    try:
        try:
            if fmt == "parquet":
                writer: Any = pq.ParquetWriter(partial, schema)
            elif fmt == "csv":
                writer = pcsv.CSVWriter(partial, schema)
            else:
                writer = pa.ipc.new_file(partial, schema)
        except OSError as exc:  # pyarrow's error names the temporary file, not the one asked for
            why = os.strerror(exc.errno) if exc.errno else str(exc)
            raise InvalidInput(f"--output {path}: cannot write there ({why})") from None
        with writer:
            for batch in batches:
                writer.write_batch(batch)
                rows += batch.num_rows
        partial.replace(path)
    finally:
        partial.unlink(missing_ok=True)
    return rows


#: Bytes of JSON rows ``write_json`` keeps in memory before it moves them to a temporary file.
JSON_IN_MEMORY = 8 << 20


def write_json(batches: Iterator[pa.RecordBatch], write: Callable[[str], None]) -> int:
    """A JSON array of row objects, printed once the query has finished: one failing in a later
    batch must leave stdout the error document alone, not an unterminated array of the rows so
    far followed by the error (two documents, and the first one's rows look like an answer).
    The text is kept in a temporary file beyond ``JSON_IN_MEMORY`` (a large result belongs in
    ``--output``). ``write`` adds no line breaks of its own."""
    rows = 0
    pending: str | None = None  # each row is written once the next shows whether a comma follows
    with tempfile.SpooledTemporaryFile(JSON_IN_MEMORY, mode="w+", encoding="utf-8") as text:
        text.write("[\n")
        for batch in batches:
            for row in batch.to_pylist():
                if pending is not None:
                    text.write(f"  {pending},\n")
                pending = json.dumps(row, default=str, sort_keys=True)
                rows += 1
        if pending is not None:
            text.write(f"  {pending}\n")
        text.write("]\n")
        text.seek(0)
        while chunk := text.read(1 << 20):
            write(chunk)
    return rows


def print_table(batches: Iterator[pa.RecordBatch], schema: pa.Schema, head: int) -> tuple[int, int]:
    """The first ``head`` rows as a table; every row is counted. Returns (rows, rows shown)."""
    from rich.console import Console
    from rich.table import Table

    table = Table(*schema.names, show_lines=False)
    rows = 0
    for batch in batches:
        take = max(0, min(batch.num_rows, head - rows))
        for row in batch.slice(0, take).to_pylist():
            table.add_row(*("NULL" if v is None else str(v) for v in row.values()))
        rows += batch.num_rows
    Console(file=sys.stdout, soft_wrap=False).print(table)
    return rows, min(rows, head)


def spare_runtime_worker(limits: QueryLimits) -> None:
    """Give DataFusion's tokio runtime one worker more than the query's partitions can keep busy.

    A blocking batch checks for Python's signals (the SIGALRM of :func:`time_limit`) when a tokio
    timer fires, and the runtime's timers fire only when one of its workers turns to them: with
    as many workers as cores (tokio's default) and a CPU-bound join keeping every one of them
    busy, a 1 s time limit stopped the query after 10 to 30 s on a 2-core machine. A spare worker
    waits on the timers; it takes no CPU while it waits. Set before the runtime exists (it is made
    at the first query of the process); ``TOKIO_WORKER_THREADS`` set by the user wins."""
    cores = os.cpu_count() or 1
    workers = max(cores, limits.target_partitions or cores) + 1
    os.environ.setdefault("TOKIO_WORKER_THREADS", str(workers))


def import_engine(limits: QueryLimits) -> type[QueryEngine]:
    """The query engine's class, imported with the collector paused and its objects then frozen.

    Importing it builds ~70,000 long-lived objects (DataFusion, pandas, pyarrow, Lance; ~150,000
    when it still imported the Lance namespace client's pydantic validators): the cyclic
    collector went over them again and again while they were being made, and at exit each of the
    interpreter's final collections went over them all (~0.8 s of a ~5 s ``lake sql`` then).
    Frozen objects are skipped by every later collection; the query's own objects are collected
    as usual. Only the first import in a process pays, and only it sets the runtime's workers
    (a process that imported the engine before may have made the runtime already)."""
    if "lake_platform.query.engine" not in sys.modules:
        spare_runtime_worker(limits)
        collecting = gc.isenabled()
        gc.collect()  # what is garbage now is collected, not frozen with the engine
        gc.disable()
        try:
            import lake_platform.query.engine  # noqa: F401
        finally:
            gc.freeze()
            if collecting:
                gc.enable()
    from lake_platform.query.engine import QueryEngine

    return QueryEngine


@click.command("sql")
@click.argument("query")
@click.option("--as", "as_user", metavar="USER", help="Query as this user (their project). Default: admin.")
@click.option("--project", help="The project an admin queries (needed when there are several).")
@click.option("--json", "as_json", is_flag=True, help="Print the rows as a JSON array.")
@click.option(
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Stream the result to FILE (.parquet, .csv, or .arrow/.ipc/.feather for Arrow IPC).",
)
@click.option("--head", default=100, show_default=True, type=click.IntRange(min=0), help="Rows shown.")
@pass_state
@handles_errors
def sql(
    state: State,
    query: str,
    as_user: str | None,
    project: str | None,
    as_json: bool,
    output: Path | None,
    head: int,
) -> None:
    """Run a read-only SQL QUERY with the Flight endpoint's engine, limits and tenancy.

    Tables are named warehouse.namespace.table within the project, read at their current version;
    an older version, a tag or a branch is named in the query: w.ns."t@v12", w.ns."t@tag:eod",
    w.ns."t@branch:dev" (its head), w.ns."t@branch:dev@v3".
    """
    fmt = output_format(output) if output is not None else None
    from lake_platform.query.limits import limits_from
    from lake_platform.settings.flight import flight_settings

    limits = limits_from(flight_settings(state.settings), state.settings)
    engine_class = import_engine(limits)
    # One query per process: a snapshot cache could only load a hot table for nothing (and the
    # exit would wait for that load).
    engine = engine_class(state.settings, dataclasses.replace(limits, cache_bytes=0, session_pool_size=0))
    started = time.monotonic()
    with contextlib.closing(engine), query_view(state, as_user, project, engine) as view:
        planned = engine.plan(query, view)
        batches = engine.stream(planned, blocking=True)
        with time_limit(engine.limits):
            if output is not None and fmt is not None:
                rows = write_file(batches, planned.schema, output, fmt)
                seconds = time.monotonic() - started
                state.emit(
                    {"rows": rows, "output": str(output), "seconds": round(seconds, 3)},
                    lambda d: f"{d['rows']} rows written to {d['output']} in {d['seconds']:.2f}s",
                )
            elif as_json or state.as_json:
                write_json(batches, lambda text: click.echo(text, nl=False))
            else:
                rows, shown = print_table(batches, planned.schema, head)
                seconds = time.monotonic() - started
                more = f" ({shown} shown)" if shown < rows else ""
                click.echo(f"{rows} row{'' if rows == 1 else 's'}{more} in {seconds:.2f}s")


COMMANDS: tuple[click.Command, ...] = (sql,)
