"""``lake table history``: a table's commit log, each entry with whether its version can still
be read, and what a write around the registry was found to be."""

from __future__ import annotations

from typing import Any

import click

from lake_platform.cli.app import State, handles_errors, pass_state, text_table, timestamp


@click.command("history")
@click.argument("name", metavar="P.W.NS.T")
@click.option("--limit", type=click.IntRange(1), default=None, help="Only the newest N entries.")
@click.option("--branch", default=None, help="Only the commits of this branch (its versions' readability).")
@pass_state
@handles_errors
def table_history(state: State, name: str, limit: int | None, branch: str | None) -> None:
    """The table's commit log, oldest first. READABLE says whether the version an entry led to
    can still be read (SELECT ... FROM wh.ns."t@v<N>"), with its tags; cleaned-up versions and
    those of a dropped incarnation cannot. --branch: the branch's commits (its creation, writes,
    deletion), readable as wh.ns."t@branch:<branch>@v<N>"."""
    from lake_platform.errors import TableNotFound

    with state.catalog() as catalog:
        entries = [e.model_dump() for e in catalog.reads.history(name)]
        try:
            if branch is not None:
                incarnation, readable = catalog.branches.readable_versions(name, branch)
            else:
                incarnation, readable = catalog.reads.readable_versions(name)
        except TableNotFound:  # dropped: its commit log remains, nothing is readable
            if not entries:  # nor was there ever a table of that name (a typo)
                raise
            incarnation, readable = "", {}
    if branch is not None:
        entries = [e for e in entries if e["detail"].get("branch") == branch]
    entries = entries[-limit if limit else None :]  # the newest, as `lake log --limit`
    for e in entries:
        # Only an entry that names its incarnation says which table version it led to (tag
        # entries, for one, do not): the others get no answer (null).
        known = e["to_version"] is not None and e["incarnation"] is not None
        ok = known and e["incarnation"] == incarnation and e["to_version"] in readable
        e["readable"] = ok if known else None
        e["tags"] = readable[e["to_version"]] if ok else []
    cols = ["when", "operation", "from", "to", "readable", "rows+", "files+", "files-", "actor", "commit_id"]
    state.emit(
        entries,
        lambda es: (
            text_table(
                cols,
                [
                    {
                        "when": timestamp(e["at_ms"]),
                        "operation": e["operation"],
                        "from": e["from_version"],
                        "to": e["to_version"],
                        "readable": (
                            ("yes" + (f" ({', '.join(e['tags'])})" if e["tags"] else ""))
                            if e["readable"]
                            else ("no" if e["readable"] is False else "")
                        ),
                        "rows+": e["rows_added"],
                        "files+": e["files_added"],
                        "files-": e["files_removed"],
                        "actor": e["actor"],
                        "commit_id": e["commit_id"],
                    }
                    for e in es
                ],
            )
            + _bypass_notes(es)
            if es
            else "no history"
        ),
    )


def _bypass_notes(entries: list[dict[str, Any]]) -> str:
    """Below the table: what each ``bypass`` entry found, in words (its detail)."""
    notes = []
    for e in entries:
        if e["operation"] != "bypass":
            continue
        versions = ", ".join(str(v) for v in e["detail"].get("versions", [])) or "?"
        where = sorted({p.split("/_versions/")[0] for p in e["detail"].get("quarantined", [])})
        notes.append(
            f"\n{timestamp(e['at_ms'])}: version(s) {versions} were committed around the registry "
            f"(not through the catalog): readers never saw them; their manifests were moved to "
            f"{', '.join(where) or '_quarantine/'} and the data is kept (docs/governance.md, "
            f"'Writers that bypass the registry')"
        )
    return "".join(notes)
