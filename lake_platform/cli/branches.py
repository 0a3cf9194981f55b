"""Branches of a table: create, list, delete (into the trash), undrop, publish, compact. Writes name a
branch with ``lake ingest --branch``; reads with ``lake sql`` (``w.ns."t@branch:dev"``)."""

from __future__ import annotations

import click

from lake_platform.catalog.provenance import Provenance
from lake_platform.cli.app import State, handles_errors, pass_state, text_table, timestamp


@click.group()
def branch() -> None:
    """Branches: a table's own version lines, made without copying data, published into main."""


@branch.command("create")
@click.argument("name", metavar="P.W.NS.T")
@click.argument("branch_name", metavar="BRANCH")
@click.option(
    "--from-version", type=int, default=None, help="The version to branch from (default: the head)."
)
@click.option("--from-tag", default=None, help="Branch from the version this tag names.")
@click.option("--from-branch", default=None, help="Branch from another branch (default: main).")
@click.option("--commit-id", help="Idempotency key of the commit (logged).")
@pass_state
@handles_errors
def branch_create(
    state: State,
    name: str,
    branch_name: str,
    from_version: int | None,
    from_tag: str | None,
    from_branch: str | None,
    commit_id: str | None,
) -> None:
    """Make BRANCH of a table (copies no data file: a manifest and a ref)."""
    with state.catalog() as catalog:
        info = catalog.branches.create_branch(
            name,
            branch_name,
            from_version=from_version,
            from_tag=from_tag,
            from_branch=from_branch,
            by=Provenance(commit_id=commit_id),
        )
    state.emit(
        info.to_dict(),
        lambda d: (
            f"created branch {d['branch']} of {d['table']} from {d['parent']} version {d['parent_version']}"
        ),
    )


@branch.command("list")
@click.argument("name", metavar="P.W.NS.T")
@click.option("--all", "include_trashed", is_flag=True, help="Also the branches in the trash.")
@pass_state
@handles_errors
def branch_list(state: State, name: str, include_trashed: bool) -> None:
    """List a table's branches: head version, where each was made from, state."""
    with state.catalog() as catalog:
        rows = [b.to_dict() for b in catalog.branches.list_branches(name, include_trashed=include_trashed)]
    cols = ["branch", "version", "parent", "parent_version", "main_version", "state", "created"]
    state.emit(
        rows,
        lambda rs: (
            text_table(cols, [{**r, "created": timestamp(int(r["created_at_ms"]))} for r in rs])
            if rs
            else f"no branches on {name}"
        ),
    )


@branch.command("delete")
@click.argument("name", metavar="P.W.NS.T")
@click.argument("branch_name", metavar="BRANCH")
@click.option("--force", is_flag=True, help="Delete even though the table is protected.")
@click.option("--purge", is_flag=True, help="Remove its files now instead of keeping it in the trash.")
@pass_state
@handles_errors
def branch_delete(state: State, name: str, branch_name: str, force: bool, purge: bool) -> None:
    """Delete BRANCH into the trash (undrop restores it until the table's trash grace passes)."""
    with state.catalog() as catalog:
        result = catalog.branch_trash.delete_branch(name, branch_name, force=force, purge=purge)
    state.emit(
        {**result.to_dict(), "branch": branch_name, "purged": purge},
        lambda d: (
            f"deleted branch {d['branch']} of {d['table']}"
            + (" and its files" if purge else " (in the trash)")
        ),
    )


@branch.command("undrop")
@click.argument("name", metavar="P.W.NS.T")
@click.argument("branch_name", metavar="BRANCH")
@pass_state
@handles_errors
def branch_undrop(state: State, name: str, branch_name: str) -> None:
    """Bring a deleted BRANCH back from the trash, as it was."""
    with state.catalog() as catalog:
        info = catalog.branch_trash.undrop_branch(name, branch_name)
    state.emit(
        info.to_dict(), lambda d: f"restored branch {d['branch']} of {d['table']} at version {d['version']}"
    )


@branch.command("publish")
@click.argument("name", metavar="P.W.NS.T")
@click.argument("branch_name", metavar="BRANCH")
@click.option("--commit-id", help="Idempotency key of the commit (logged).")
@pass_state
@handles_errors
def branch_publish(state: State, name: str, branch_name: str, commit_id: str | None) -> None:
    """Fast-forward main to BRANCH's head (one commit); refused if main moved since the branch was made."""
    with state.catalog() as catalog:
        result = catalog.branch_publish.publish_branch(name, branch_name, by=Provenance(commit_id=commit_id))
    state.emit(
        {**result.to_dict(), "branch": branch_name},
        lambda d: (
            f"published branch {d['branch']} into {d['table']}: "
            f"version {d['from_version']} -> {d['to_version']}"
        ),
    )


@branch.command("compact")
@click.argument("name", metavar="P.W.NS.T")
@click.argument("branch_name", metavar="BRANCH")
@click.option(
    "--target-rows",
    type=click.IntRange(1),
    default=None,
    help="Rows per fragment (default: the table's policy, target_rows_per_fragment).",
)
@pass_state
@handles_errors
def branch_compact(state: State, name: str, branch_name: str, target_rows: int | None) -> None:
    """Compact BRANCH's head under its lease (main does not move; its older versions keep reading)."""
    with state.catalog() as catalog:
        if target_rows is None:
            target_rows = catalog.policies.effective_policy(name).policy.target_rows_per_fragment
        result = catalog.branch_compaction.compact_branch(
            name, branch_name, target_rows_per_fragment=target_rows
        )
    state.emit(
        result.to_dict(),
        lambda d: f"compact branch {branch_name} of {d['table']}: {d['status']} (version {d['version']})",
    )


COMMANDS: tuple[click.Command, ...] = (branch,)
