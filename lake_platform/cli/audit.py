"""``lake log``: every commit, data and governance, under a prefix."""

from __future__ import annotations

import click

from lake_platform.cli.app import State, handles_errors, pass_state, text_table, timestamp


@click.command("log")
@click.argument("prefix", required=False, default="")
@click.option("--limit", type=click.IntRange(1), default=None, help="Only the newest N entries.")
@pass_state
@handles_errors
def log_command(state: State, prefix: str, limit: int | None) -> None:
    """Every commit (data and governance) under PREFIX: who, what, when."""
    with state.catalog() as catalog:
        entries = [e.model_dump() for e in catalog.log(prefix, limit=limit)]
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


COMMANDS: tuple[click.Command, ...] = (log_command,)
