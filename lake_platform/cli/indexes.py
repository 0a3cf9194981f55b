"""Scalar indexes of a table, ad hoc: create, list, refresh, drop. Each change is a registry
commit under the table's write lease; the policy key ``indexes`` is the governed way. ``--branch``:
the same on the branch's own line (one commit on its head; main does not move)."""

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


#: --branch on every index command.
on_branch = click.option(
    "--branch", default=None, help="This branch of the table instead of main (main does not move)."
)


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
@click.option(
    "--with-position/--without-position",
    default=None,
    help="inverted: keep word positions, for phrase queries (a bigger index; default without).",
)
@click.option(
    "--base-tokenizer",
    default=None,
    help="inverted: simple (default), whitespace, raw, ngram, icu or icu/split.",
)
@click.option(
    "--language", default=None, help="inverted: the stemming and stop-word language (default English)."
)
@click.option(
    "--max-token-length", type=int, default=None, help="inverted: longer tokens are left out (default 40)."
)
@click.option("--lower-case/--no-lower-case", default=None, help="inverted: fold case (default on).")
@click.option("--stem/--no-stem", default=None, help="inverted: stem words (default on).")
@click.option(
    "--remove-stop-words/--keep-stop-words", default=None, help="inverted: leave out stop words (default on)."
)
@click.option(
    "--ascii-folding/--no-ascii-folding", default=None, help="inverted: fold accents, é -> e (default on)."
)
@on_branch
@pass_state
@handles_errors
def index_create(
    state: State, name: str, column: str, kind: str, replace: bool, branch: str | None, **options: Any
) -> None:
    """Build an index named COLUMN_idx over every row of the current version (one commit). The
    full-text options apply to an inverted index alone; the commit's detail lists those given."""
    with state.catalog() as catalog:
        if branch is None:
            made = catalog.indexes.create_index(name, column, kind, replace=replace, options=options)
        else:
            made = catalog.branch_indexes.create_index(
                name, branch, column, kind, replace=replace, options=options
            )
        result = made.to_dict()
    state.emit(result, lambda r: _committed(r, f"indexed {column} ({kind.lower()}) of"))


@index.command("list")
@click.argument("name", metavar="P.W.NS.T")
@on_branch
@pass_state
@handles_errors
def index_list(state: State, name: str, branch: str | None) -> None:
    """A table's indexes and how many rows each does not cover yet (opens the table)."""
    with state.catalog() as catalog:
        if branch is None:
            found = catalog.indexes.list_indexes(name)
        else:
            found = catalog.branch_indexes.list_indexes(name, branch)
        rows = [i.to_dict() for i in found]
    cols = ["name", "column", "kind", "rows_indexed", "rows_unindexed", "built_at_version"]
    state.emit(rows, lambda rs: text_table(cols, rs) if rs else f"no indexes on {name}")


@index.command("refresh")
@click.argument("name", metavar="P.W.NS.T")
@click.argument("index_names", nargs=-1, metavar="[INDEX]...")
@on_branch
@pass_state
@handles_errors
def index_refresh(state: State, name: str, index_names: tuple[str, ...], branch: str | None) -> None:
    """Fold rows committed since the last build into the table's lagging indexes (one commit)."""
    wanted = list(index_names) or None
    with state.catalog() as catalog:
        if branch is None:
            refreshed = catalog.indexes.refresh_indexes(name, wanted)
        else:
            refreshed = catalog.branch_indexes.refresh_indexes(name, branch, wanted)
        result = refreshed.to_dict()
    state.emit(result, lambda r: _committed(r, "refreshed the indexes of"))


@index.command("drop")
@click.argument("name", metavar="P.W.NS.T")
@click.argument("column")
@on_branch
@pass_state
@handles_errors
def index_drop(state: State, name: str, column: str, branch: str | None) -> None:
    """Drop the index of COLUMN (one commit; older versions keep theirs)."""
    with state.catalog() as catalog:
        if branch is None:
            dropped = catalog.indexes.drop_index(name, column)
        else:
            dropped = catalog.branch_indexes.drop_index(name, branch, column)
        result = dropped.to_dict()
    state.emit(result, lambda r: _committed(r, f"dropped the index of {column} from"))


COMMANDS: tuple[click.Command, ...] = (index,)
