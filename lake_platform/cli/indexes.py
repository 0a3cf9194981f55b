"""Scalar indexes of a table, ad hoc: create, list, refresh, drop. Each change is a registry
commit under the table's write lease; the policy key ``indexes`` is the governed way."""

from __future__ import annotations

from typing import Any

import click

from lake_platform.cli.app import State, handles_errors, pass_state, text_table

#: The kinds ``lake index create --kind`` offers (the engine's list, spelled here so that
#: ``--help`` imports nothing of the engine).
KINDS = ["btree", "bitmap", "zonemap", "bloomfilter", "inverted", "ngram", "label_list"]


@click.group()
def index() -> None:
    """Scalar indexes: queries filtering on an indexed column read a fraction of the table."""


def _committed(r: dict[str, Any], what: str) -> str:
    if r["status"] == "nothing-to-do":
        return f"{r['table']}: nothing to do (version {r['version']})"
    return f"{what} {r['table']}: version {r['version']}"


@index.command("create")
@click.argument("name", metavar="P.W.NS.T")
@click.argument("column")
@click.option(
    "--kind",
    type=click.Choice(KINDS, case_sensitive=False),
    default="btree",
    show_default=True,
    help="btree: many distinct values; bitmap: few; zonemap: sorted-ish data, tiny; bloomfilter: "
    "equality only, small; inverted: full-text; ngram: substring; label_list: list membership.",
)
@click.option("--replace", is_flag=True, help="Rebuild the column's index if it has one (any kind).")
@pass_state
@handles_errors
def index_create(state: State, name: str, column: str, kind: str, replace: bool) -> None:
    """Build an index named COLUMN_idx over every row of the current version (one commit)."""
    with state.catalog() as catalog:
        result = catalog.indexes.create_index(name, column, kind, replace=replace).to_dict()
    state.emit(result, lambda r: _committed(r, f"indexed {column} ({kind.lower()}) of"))


@index.command("list")
@click.argument("name", metavar="P.W.NS.T")
@pass_state
@handles_errors
def index_list(state: State, name: str) -> None:
    """A table's indexes and how many rows each does not cover yet (opens the table)."""
    with state.catalog() as catalog:
        rows = [i.to_dict() for i in catalog.indexes.list_indexes(name)]
    cols = ["name", "column", "kind", "rows_indexed", "rows_unindexed", "built_at_version"]
    state.emit(rows, lambda rs: text_table(cols, rs) if rs else f"no indexes on {name}")


@index.command("refresh")
@click.argument("name", metavar="P.W.NS.T")
@click.argument("index_names", nargs=-1, metavar="[INDEX]...")
@pass_state
@handles_errors
def index_refresh(state: State, name: str, index_names: tuple[str, ...]) -> None:
    """Fold rows committed since the last build into the table's lagging indexes (one commit)."""
    with state.catalog() as catalog:
        result = catalog.indexes.refresh_indexes(name, list(index_names) or None).to_dict()
    state.emit(result, lambda r: _committed(r, "refreshed the indexes of"))


@index.command("drop")
@click.argument("name", metavar="P.W.NS.T")
@click.argument("column")
@pass_state
@handles_errors
def index_drop(state: State, name: str, column: str) -> None:
    """Drop the index of COLUMN (one commit; older versions keep theirs)."""
    with state.catalog() as catalog:
        result = catalog.indexes.drop_index(name, column).to_dict()
    state.emit(result, lambda r: _committed(r, f"dropped the index of {column} from"))


COMMANDS: tuple[click.Command, ...] = (index,)
