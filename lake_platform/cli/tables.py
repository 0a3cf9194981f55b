"""Tables: create, list, describe, history, drop, undrop, protect; and streamed ``ingest``."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import click

from lake_platform.catalog.provenance import Provenance
from lake_platform.cli.alter import alter
from lake_platform.cli.app import State, handles_errors, pass_state, plain, text_table, timestamp
from lake_platform.cli.hierarchy import add_protect_command
from lake_platform.cli.history import table_history

PROGRESS_MIN_BYTES = 64 << 20


@contextmanager
def _progress(state: State, srcs: list[Any]) -> Iterator[Callable[[Any], None] | None]:
    """A progress bar (rows) on large inputs when stderr is a terminal."""
    total = sum(s.size for s in srcs)
    if state.as_json or total < PROGRESS_MIN_BYTES or not sys.stderr.isatty():
        yield None
        return
    from rich.progress import Progress

    with Progress(transient=True) as progress:
        task = progress.add_task(f"reading {len(srcs)} file(s)", total=None)
        yield lambda batch: progress.update(task, advance=batch.num_rows)


@click.group()
def table() -> None:
    """Tables: create, list, describe, history, alter, drop, repair."""


@table.command("create")
@click.argument("name", metavar="P.W.NS.T")
@click.option(
    "--from",
    "source",
    required=True,
    type=click.Path(dir_okay=False),
    help="A Parquet, CSV, JSON-lines or Arrow IPC file; its schema becomes the table's.",
)
@pass_state
@handles_errors
def table_create(state: State, name: str, source: str) -> None:
    """Create a table from a file."""
    from lake_platform.maintenance import sources
    from lake_platform.naming import TableName

    TableName.parse(name)
    src = sources.describe(source)
    with state.catalog() as catalog, _progress(state, [src]) as on_batch:
        result = catalog.tables.create_table(name, sources.open_many([src], on_batch=on_batch))
    state.emit(
        result.to_dict(),
        lambda r: f"created {r['table']} at version {r['to_version']} ({r['rows_added']} rows)",
    )


@click.command()
@click.argument("name", metavar="P.W.NS.T", required=False)
@click.argument("files", nargs=-1, type=click.Path(dir_okay=False))
@click.option(
    "--table",
    "tables",
    multiple=True,
    metavar="P.W.NS.T=FILE",
    help="Instead of NAME FILES: append FILE to the table, repeated for several tables (and for "
    "several files of one table); every table's rows become visible together in one atomic "
    "commit, or none do (at most 2,000 tables on SQLite, 200 on DynamoDB).",
)
@click.option("--commit-id", help="Idempotency key: a retry with the same id never appends twice.")
@click.option("--branch", default=None, help="Append to this branch of the table; main does not move.")
@pass_state
@handles_errors
def ingest(
    state: State,
    name: str | None,
    files: tuple[str, ...],
    tables: tuple[str, ...],
    commit_id: str | None,
    branch: str | None,
) -> None:
    """Append FILES (Parquet, CSV, JSON lines, Arrow IPC) to a table in one commit, streamed;
    or, with repeated --table NAME=FILE, to several tables in one atomic commit."""
    from lake_platform.errors import InvalidInput
    from lake_platform.naming import TableName

    if tables:
        if name is not None or files:
            raise InvalidInput("give either NAME FILES or --table NAME=FILE options, not both")
        if branch is not None:
            raise InvalidInput("--branch appends to one table's branch: give NAME FILES, not --table")
        _ingest_tables(state, _files_by_table(tables), commit_id)
        return
    if name is None or not files:
        raise InvalidInput("give a table NAME and its FILES, or --table NAME=FILE options")
    TableName.parse(name)
    srcs = _sources(files)
    with state.catalog() as catalog, _progress(state, srcs) as on_batch:
        if branch is not None:
            catalog.branches.describe_branch(name, branch)  # refused before a file is read
        reader, detail = _table_reader(catalog, name, srcs, on_batch)
        by = Provenance(commit_id=commit_id)
        result = (
            catalog.branch_writes.append(name, branch, reader, by=by)
            if branch is not None
            else catalog.tables.append(name, reader, by=by, detail=detail)
        )
    state.emit(
        result.to_dict(),
        lambda r: (
            # A replay tells what its commit id's first run appended, not this request's files.
            (f"ingested {len(srcs)} file(s) into" if not r["replayed"] else f"commit {r['commit_id']} on")
            + f" {r['table']}"
            + (f" branch {branch}" if branch else "")
            + f": {r['rows_added']} rows, version "
            f"{r['from_version']} -> "
            f"{r['to_version']}" + (" (already committed earlier; nothing appended)" if r["replayed"] else "")
        ),
    )


def _sources(files: tuple[str, ...] | list[str]) -> list[Any]:
    from lake_platform.maintenance import sources

    return [sources.describe(f) for f in files]


def _table_reader(
    catalog: Any, name: str, srcs: list[Any], on_batch: Callable[[Any], None] | None
) -> tuple[Any, dict[str, object]]:
    """The files of one table as one stream in its schema (its schema_evolution policy decides
    whether the files may add or widen columns, or lack nullable ones, read as null), and the
    commit-log detail of the columns filled (the stream is conformed: the append sees none)."""
    from lake_platform.maintenance import sources

    readers = sources.open_all(srcs, catalog.schemas.table_schema(name))
    change = catalog.schemas.plan_input(name, [r.schema for r in readers], labels=[s.label for s in srcs])
    detail: dict[str, object] = {"filled_columns": list(change.filled)} if change.filled else {}
    return sources.chain(srcs, readers, change.target, change.optional, on_batch), detail


def _files_by_table(options: tuple[str, ...]) -> dict[str, list[str]]:
    from lake_platform.errors import InvalidInput
    from lake_platform.naming import TableName

    by_table: dict[str, list[str]] = {}
    for option in options:
        name, sep, file = option.partition("=")
        if not sep or not file:
            raise InvalidInput(f"--table takes NAME=FILE, got {option!r}")
        by_table.setdefault(str(TableName.parse(name)), []).append(file)
    return by_table


def _ingest_tables(state: State, by_table: dict[str, list[str]], commit_id: str | None) -> None:
    """Every table's files in one atomic multi-table commit (``catalog.transaction``)."""
    srcs = {name: _sources(files) for name, files in by_table.items()}
    with state.catalog() as catalog, _progress(state, [s for ss in srcs.values() for s in ss]) as on_batch:
        with catalog.transaction(by=Provenance(commit_id=commit_id)) as tx:
            for name, table_srcs in srcs.items():
                reader, detail = _table_reader(catalog, name, table_srcs, on_batch)
                tx.append(name, reader, detail=detail)
    results = [r.to_dict() for r in tx.results]
    state.emit(
        {"commit_id": tx.commit_id, "tables": results},
        lambda out: (
            "\n".join(
                (f"ingested {len(srcs[r['table']])} file(s) into" if not r["replayed"] else "replayed")
                + f" {r['table']}: {r['rows_added']} rows, "
                f"version {r['from_version']} -> {r['to_version']}"
                + (" (already committed earlier)" if r["replayed"] else "")
                for r in out["tables"]
            )
            + f"\nin one atomic commit ({len(results)} tables, transaction {out['commit_id']})"
        ),
    )


@table.command("list")
@click.argument("prefix", required=False, default="")
@click.option("--stats", is_flag=True, help="Also each table's row count (opens every table; slower).")
@pass_state
@handles_errors
def table_list(state: State, prefix: str, stats: bool) -> None:
    """List tables (optionally under a dotted PREFIX: a project, warehouse, namespace or table)
    with their version, from the registry. A PREFIX that names nothing is an error."""
    with state.catalog() as catalog:
        rows = []
        for name, version in _tables_under(catalog, prefix):
            count = catalog.reads.describe_table(name).rows if stats else None
            rows.append({"name": name, "version": version, "rows": count})
    names = ["name", "version", "rows"] if stats else ["name", "version"]
    state.emit(rows, lambda rs: text_table(names, rs) if rs else "no tables")


def _tables_under(catalog: Any, prefix: str) -> list[tuple[str, int]]:
    """The (name, version) of the tables under ``prefix``; NamespaceNotFound when the prefix
    names no project, warehouse, namespace or table (a typo is not an empty listing)."""
    from lake_platform.errors import NamespaceNotFound

    records = list(catalog.reads.list_tables(prefix, declared=True))  # a table's own name too
    if records or not prefix:
        return [(r.name, r.current_version) for r in records if r.current_version > 0]
    if prefix.count(".") < 2:  # a project or warehouse: the error names which is missing
        catalog.containers.list_namespaces(prefix)
        return []
    try:
        catalog.containers.list_namespaces(prefix)
        return []  # an empty namespace
    except NamespaceNotFound:
        pass
    raise NamespaceNotFound(f"no namespace or table {prefix}")


@table.command("describe")
@click.argument("name", metavar="P.W.NS.T")
@click.option(
    "--stats",
    is_flag=True,
    help="Also rows, fragments, data bytes and the scalar indexes with their coverage, read from the "
    "table's data (opens Lance; slower).",
)
@click.option("--branch", default=None, help="Describe this branch of the table instead of main.")
@pass_state
@handles_errors
def table_describe(state: State, name: str, stats: bool, branch: str | None) -> None:
    """Location, incarnation, current version and schema, from the registry; --stats adds rows
    and indexes. --branch: the branch's head, where it was made from, its schema."""
    if branch is not None:
        _describe_branch(state, name, branch, stats)
        return
    with state.catalog() as catalog:
        info = catalog.reads.describe_table(name, with_stats=stats).to_dict()

    def human(d: dict[str, Any]) -> str:
        shown = ["name", "location", "incarnation", "current_version"]
        shown += ["rows", "fragments", "data_bytes"] if stats else []
        head = {k: d[k] for k in [*shown, "protected"]}
        head["created"] = timestamp(d["created_at_ms"])
        cols = "\n".join(
            f"  {c['name']}: {c['type']}{'' if c['nullable'] else ' not null'}" for c in d["schema"]
        )
        out = plain(head) + "\nschema:\n" + cols
        if not d["schema"]:
            out += "  none stored (registered before schemas were stored): "
            out += f"lake table repair --schema {d['name']}"
        if stats:
            found = d.get("indexes") or []
            out += "\nindexes:" + (
                "".join(
                    f"\n  {i['name']}: {str(i['kind']).lower()} on {i['column']}, "
                    f"{i['rows_indexed']} rows indexed, {i['rows_unindexed']} not yet"
                    for i in found
                )
                or " none"
            )
        return out

    state.emit(info, human)


def _describe_branch(state: State, name: str, branch: str, stats: bool) -> None:
    with state.catalog() as catalog:
        info = catalog.branches.describe_branch(name, branch)
        if stats:
            info["rows"] = catalog.branches.open_branch(name, branch).count_rows()

    def human(d: dict[str, Any]) -> str:
        head = {k: d[k] for k in ["table", "branch", "version", "parent", "parent_version", "main_version"]}
        head.update({"location": d["location"], "created": timestamp(int(d["created_at_ms"]))})
        if "rows" in d:
            head["rows"] = d["rows"]
        cols = "\n".join(
            f"  {c['name']}: {c['type']}{'' if c['nullable'] else ' not null'}" for c in d["schema"]
        )
        return plain(head) + "\nschema:\n" + cols

    state.emit(info, human)


@table.command("drop")
@click.argument("name", metavar="P.W.NS.T")
@click.option(
    "--purge",
    is_flag=True,
    help="Destroy the data now instead of keeping it in the trash (through a trash "
    "record due at once: if interrupted, the next `lake trash expire` finishes it).",
)
@click.option("--force", is_flag=True, help="Override deletion protection (and nothing else).")
@click.option("--incarnation", help="Only drop if the table is still this incarnation.")
@pass_state
@handles_errors
def table_drop(state: State, name: str, purge: bool, force: bool, incarnation: str | None) -> None:
    """Drop a table: into the trash for the policy's grace period, or destroyed with --purge."""
    with state.catalog() as catalog:
        result = catalog.trash.drop_table(name, purge=purge, force=force, incarnation=incarnation)
        trash = [] if purge else [t for t in catalog.trash.list_trash(name) if t.target == name]
    data = result.to_dict()
    data["expires_at_ms"] = trash[-1].expires_at_ms if trash else None
    state.emit(
        data,
        lambda r: (
            f"dropped {r['table']} (was at version {r['from_version']}); "
            + (
                f"in the trash until {timestamp(r['expires_at_ms'])} (lake table undrop {r['table']})"
                if r["expires_at_ms"]
                else "data destroyed"
            )
        ),
    )


@table.command("undrop")
@click.argument("name", metavar="P.W.NS.T")
@click.option("--as", "as_name", metavar="P.W.NS.T2", help="Restore under another name (same warehouse).")
@click.option("--incarnation", help="Which dropped incarnation to restore (default: the newest).")
@pass_state
@handles_errors
def table_undrop(state: State, name: str, as_name: str | None, incarnation: str | None) -> None:
    """Restore a dropped table from the trash."""
    with state.catalog() as catalog:
        result = catalog.trash.undrop_table(name, as_name=as_name, incarnation=incarnation)
    state.emit(result.to_dict(), lambda r: f"restored {r['table']} at version {r['to_version']}")


@table.command("repair")
@click.argument("name", metavar="P.W.NS.T")
@click.option(
    "--schema",
    "schema",
    is_flag=True,
    help="Instead: store the schema of the registered version in a registration that has none "
    "(registered before schemas were stored; `table describe` shows no columns). One logged "
    "registry commit; nothing when a schema is stored.",
)
@pass_state
@handles_errors
def table_repair(state: State, name: str, schema: bool) -> None:
    """Publish versions a stopped writer committed but did not finalize, and move manifests
    written around the registry to _quarantine/, on main and on every live branch of the table;
    or, with --schema, backfill the registration's schema. Idempotent; changes no data."""
    if schema:
        with state.catalog() as catalog:
            repaired = catalog.schemas.repair_schema(name).to_dict()
        state.emit(
            repaired,
            lambda r: (
                f"{r['table']}: stored the schema of version {r['version']} ({', '.join(r['columns'])})"
                if r["repaired"]
                else f"{r['table']}: its schema is stored already; nothing to repair"
            ),
        )
        return
    with state.catalog() as catalog:
        result = {"table": name, **catalog.manifests.repair_table(name)}

    def human(r: dict[str, Any]) -> str:
        lines = [(r["table"], r)] + [(f"{r['table']} branch {b}", x) for b, x in r["branches"].items()]
        return "\n".join(
            f"{what}: finalized {x['finalized'] or 'nothing'}; quarantined {x['quarantined'] or 'nothing'}"
            for what, x in lines
        )

    state.emit(result, human)


add_protect_command(table, "table", "P.W.NS.T")
table.add_command(alter)
table.add_command(table_history)

COMMANDS: tuple[click.Command, ...] = (table, ingest)
