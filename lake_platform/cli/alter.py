"""``lake table alter TABLE add-column|drop-column|rename-column``: explicit schema changes.

Each is one registry commit under the table's write lease, logged with the actor. Lance is
imported only when a change runs (the catalog's engine does it lazily), never for ``--help``.
"""

from __future__ import annotations

import click

from lake_platform.cli.app import State, handles_errors, pass_state


@click.group("alter")
@click.argument("name", metavar="P.W.NS.T")
def alter(name: str) -> None:
    """Change a table's columns; each change is one registry commit (see `lake table history`).

    Appends may also add or widen columns on their own when the table's policy allows it
    (`lake policy set SCOPE schema_evolution=add_columns|widen`).
    """


def _table() -> str:
    ctx = click.get_current_context()
    assert ctx.parent is not None
    return str(ctx.parent.params["name"])


def _emit(state: State, result: dict[str, object], say: str) -> None:
    state.emit(result, lambda r: f"{r['table']}: {say} (version {r['from_version']} -> {r['to_version']})")


@alter.command("add-column")
@click.argument("column", metavar="NAME")
@click.argument("type_name", metavar="TYPE")
@pass_state
@handles_errors
def add_column(state: State, column: str, type_name: str) -> None:
    """Add a nullable column NAME of TYPE (the rows already there read as null).

    TYPE: bool, int8..int64, uint8..uint64, float16, float32, float64 (double), string,
    large_string, binary, large_binary, date32, date64, timestamp[s|ms|us|ns], timestamp[us, tz=UTC].
    """
    with state.catalog() as catalog:
        result = catalog.alter.add_column(_table(), column, type_name)
    _emit(state, {**result.to_dict(), "column": column, "type": type_name}, f"added column {column}")


@alter.command("drop-column")
@click.argument("column", metavar="NAME")
@pass_state
@handles_errors
def drop_column(state: State, column: str) -> None:
    """Drop column NAME (older versions keep it; refused on a protected table)."""
    with state.catalog() as catalog:
        result = catalog.alter.drop_column(_table(), column)
    _emit(state, {**result.to_dict(), "column": column}, f"dropped column {column}")


@alter.command("rename-column")
@click.argument("old", metavar="OLD")
@click.argument("new", metavar="NEW")
@pass_state
@handles_errors
def rename_column(state: State, old: str, new: str) -> None:
    """Rename column OLD to NEW."""
    with state.catalog() as catalog:
        result = catalog.alter.rename_column(_table(), old, new)
    _emit(state, {**result.to_dict(), "column": old, "new_name": new}, f"renamed column {old} to {new}")


COMMANDS: tuple[click.Command, ...] = ()  # attached to `lake table` in tables.py
