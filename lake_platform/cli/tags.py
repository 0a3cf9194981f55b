"""Tags of a table: create (or move), list, delete. Each is a registry commit under the table's
write lease, so a tagged version is never removed by a cleanup running at the same time."""

from __future__ import annotations

import click

from lake_platform.cli.app import State, handles_errors, pass_state, text_table


@click.group()
def tag() -> None:
    """Named versions of a table: a tagged version is kept by cleanup until the tag is deleted."""


@tag.command("create")
@click.argument("name", metavar="P.W.NS.T")
@click.argument("tag_name", metavar="TAG")
@click.option(
    "--version",
    "version",
    type=int,
    default=None,
    help="The registered version to tag (default: the current one).",
)
@click.option("--replace", is_flag=True, help="Move an existing TAG to this version (it must exist).")
@click.option("--branch", default=None, help="Tag a version of this branch (--version counts on the branch).")
@pass_state
@handles_errors
def tag_create(
    state: State, name: str, tag_name: str, version: int | None, replace: bool, branch: str | None
) -> None:
    """Tag a version of a table (a commit-log entry; fails if TAG exists, unless --replace)."""
    with state.catalog() as catalog:
        tagged = catalog.tags.create_tag(name, tag_name, version, replace=replace, branch=branch)
    state.emit(
        {"table": name, "tag": tag_name, "version": tagged, **({"branch": branch} if branch else {})},
        lambda r: (
            f"tagged {r['table']}{f' branch {branch}' if branch else ''} version {r['version']} as {r['tag']}"
        ),
    )


@tag.command("list")
@click.argument("name", metavar="P.W.NS.T")
@pass_state
@handles_errors
def tag_list(state: State, name: str) -> None:
    """List a table's tags and the version each names."""
    with state.catalog() as catalog:
        tags = catalog.tags.list_tags(name)
    rows = [{"tag": t, "version": v} for t, v in tags.items()]
    state.emit(rows, lambda rs: text_table(["tag", "version"], rs) if rs else f"no tags on {name}")


@tag.command("delete")
@click.argument("name", metavar="P.W.NS.T")
@click.argument("tag_name", metavar="TAG")
@pass_state
@handles_errors
def tag_delete(state: State, name: str, tag_name: str) -> None:
    """Delete a tag (a commit-log entry); its version becomes eligible for cleanup again."""
    with state.catalog() as catalog:
        catalog.tags.delete_tag(name, tag_name)
    state.emit(
        {"table": name, "tag": tag_name, "deleted": True}, lambda r: f"deleted tag {r['tag']} of {r['table']}"
    )


COMMANDS: tuple[click.Command, ...] = (tag,)
