"""Maintenance policies: set, unset, delete and show the record at a scope."""

from __future__ import annotations

import click

from lake_platform.cli.app import State, handles_errors, pass_state


@click.group()
def policy() -> None:
    """Maintenance policies (most specific record wins, whole)."""


@policy.command("set")
@click.argument("scope", metavar="SCOPE")
@click.argument("assignments", nargs=-1, required=True, metavar="KEY=VALUE...")
@pass_state
@handles_errors
def policy_set(state: State, scope: str, assignments: tuple[str, ...]) -> None:
    """Set policy keys at a project, warehouse, namespace or table.

    Keys: retain_versions, retention, compact_enabled, compact_min_fragments,
    target_rows_per_fragment, trash_grace, orphan_min_age (durations like 90m, 12h, 7d),
    indexes (column:kind pairs, e.g. indexes=id:btree,region:bitmap; indexes= for none),
    cache (auto, hot or off: the Flight replicas' in-memory snapshot cache),
    schema_evolution (strict | add_columns | widen: what an ingest may do to a table's schema),
    cleanup_interval (at least 1m) and orphan_scan_interval (at least 1h): how often the
    Dagster sensors clean up and scan each table under the policy.
    """
    from lake_platform.catalog.policies import parse_assignments

    with state.catalog() as catalog:
        record = catalog.policies.set_policy(scope, parse_assignments(list(assignments)))
    state.emit(record.model_dump(), lambda r: f"policy set at {r['scope']}")


@policy.command("unset")
@click.argument("scope", metavar="SCOPE")
@click.argument("fields", nargs=-1, required=True, metavar="KEY...")
@pass_state
@handles_errors
def policy_unset(state: State, scope: str, fields: tuple[str, ...]) -> None:
    """Reset KEYs of the policy record at SCOPE to the platform defaults.

    The record stays and still wins whole over less specific ones; to let those apply again,
    use `lake policy delete SCOPE`. Keys as for `lake policy set`.
    """
    with state.catalog() as catalog:
        record = catalog.policies.unset_policy(scope, list(fields))
    state.emit(
        record.model_dump(), lambda r: f"policy at {r['scope']}: reset {', '.join(fields)} to the defaults"
    )


@policy.command("delete")
@click.argument("scope", metavar="SCOPE")
@pass_state
@handles_errors
def policy_delete(state: State, scope: str) -> None:
    """Remove the policy record at SCOPE; the next less specific record (or the defaults) applies.

    Works on a record whose object no longer exists (left by older releases).
    """
    with state.catalog() as catalog:
        catalog.policies.delete_policy(scope)
    state.emit({"deleted": scope}, lambda d: f"deleted the policy record at {d['deleted']}")


@policy.command("show")
@click.argument("scope", metavar="SCOPE")
@click.option("--effective", is_flag=True, help="Resolve up the hierarchy and say which record won.")
@pass_state
@handles_errors
def policy_show(state: State, scope: str, effective: bool) -> None:
    """Show the policy at SCOPE (or, with --effective, the one that applies and where it came from)."""
    with state.catalog() as catalog:
        resolved = catalog.policies.effective_policy(scope)
    data = resolved.to_dict()
    if not effective and resolved.source != scope:
        data = {"source": f"(no policy record at {scope}; use --effective)"}
    state.emit(data)


COMMANDS: tuple[click.Command, ...] = (policy,)
