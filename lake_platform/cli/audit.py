"""``lake log``: every commit, data and governance, under a prefix; ``lake audit queries``: the
query audit trail (LAKE_AUDIT_LOG), one project's at a time."""

from __future__ import annotations

import click

from lake_platform.cli.app import State, handles_errors, pass_state, text_table, timestamp


@click.command("log")
@click.argument("prefix", required=False, default="")
@click.option("--limit", type=click.IntRange(1), default=None, help="Only the newest N entries.")
@pass_state
@handles_errors
def log_command(state: State, prefix: str, limit: int | None) -> None:
    """Every commit (data and governance) under PREFIX: who, what, when. A PREFIX that names
    nothing (no live object, no entries) is an error, as `lake table describe` of it."""
    with state.catalog() as catalog:
        entries = [e.model_dump() for e in catalog.reads.log(prefix, limit=limit)]
    cols = ["when", "target", "operation", "actor", "to", "commit_id"]
    state.emit(
        entries,
        lambda es: (
            text_table(
                cols,
                [
                    {
                        "when": timestamp(e["at_ms"]),
                        "target": e["target"],
                        "operation": e["operation"],
                        "actor": e["actor"],
                        "to": e["to_version"] if e["to_version"] is not None else "",
                        "commit_id": e["commit_id"],
                    }
                    for e in es
                ],
            )
            if es
            else "no entries"
        ),
    )


@click.group("audit")
def audit() -> None:
    """The query audit trail that Flight SQL endpoints write (LAKE_AUDIT_LOG)."""


@audit.command("queries")
@click.option("--project", required=True, help="Only this project's queries (a tenant sees only its own).")
@click.option("--principal", default=None, help="Only this principal's queries.")
@click.option(
    "--file",
    "path",
    type=click.Path(dir_okay=False, exists=True),
    default=None,
    help="Trail file (default LAKE_AUDIT_LOG, where no file yet means no queries yet).",
)
@click.option("--limit", type=click.IntRange(1), default=None, help="Only the newest N records.")
@pass_state
@handles_errors
def audit_queries(
    state: State, project: str, principal: str | None, path: str | None, limit: int | None
) -> None:
    """Queries run against PROJECT: when, who, the SQL, the table versions it read, rows, bytes,
    status and duration."""
    from pathlib import Path

    from lake_platform.errors import InvalidInput
    from lake_platform.naming import ProjectName
    from lake_platform.observability.audit import audit_target, read_records

    ProjectName.parse(project)  # a bad name is an error, not an empty answer
    target = path or audit_target(state.settings)
    if target in ("-", "off"):
        raise InvalidInput(f"LAKE_AUDIT_LOG={target}: the trail is not kept in a file here; pass --file")
    records = list(read_records(Path(target), project=project, principal=principal))
    if limit is not None:
        records = records[-limit:]
    state.emit(
        records,
        lambda rs: (
            text_table(
                ["at", "principal", "status", "rows", "ms", "tables", "sql"],
                [
                    {
                        "at": r["at"],
                        "principal": r["principal"],
                        "status": r["status"],
                        "rows": r["rows"],
                        "ms": r["duration_ms"],
                        "tables": ", ".join(f"{t['table']}@{t['version']}" for t in r["tables"]),
                        "sql": r["sql"],
                    }
                    for r in rs
                ],
            )
            if rs
            else "no queries"
        ),
    )


COMMANDS: tuple[click.Command, ...] = (log_command, audit)
