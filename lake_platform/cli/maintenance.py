"""Upkeep of table data: compact, cleanup, orphan files, and the trash of dropped tables."""

from __future__ import annotations

import click

from lake_platform.cli.app import State, handles_errors, parse_duration, pass_state, text_table, timestamp


@click.command()
@click.argument("name", metavar="P.W.NS.T")
@click.option(
    "--target-rows-per-fragment",
    type=click.IntRange(1),
    default=None,
    help="Rows per compacted fragment (default: the table's policy, target_rows_per_fragment).",
)
@pass_state
@handles_errors
def compact(state: State, name: str, target_rows_per_fragment: int | None) -> None:
    """Compact a table's small fragments (a registry commit; skipped if a newer commit conflicts)."""
    with state.catalog() as catalog:
        if target_rows_per_fragment is None:
            target_rows_per_fragment = catalog.policies.effective_policy(name).policy.target_rows_per_fragment
        result = catalog.versions.compact(name, target_rows_per_fragment=target_rows_per_fragment)
    state.emit(result.to_dict(), lambda r: f"compact {r['table']}: {r['status']} (version {r['version']})")


@click.command()
@click.argument("name", metavar="P.W.NS.T")
@click.option(
    "--older-than",
    "older_than",
    default=None,
    help="Keep versions younger than this (e.g. 90m, 12h, 7d; default: the table's policy, "
    "retention). Never below the ticket lifetime.",
)
@click.option(
    "--retain-versions",
    type=click.IntRange(1),
    default=None,
    help="Keep at least this many newest versions (default: the table's policy, retain_versions).",
)
@pass_state
@handles_errors
def cleanup(state: State, name: str, older_than: str | None, retain_versions: int | None) -> None:
    """Remove old, untagged versions and the files only they reference. What an option leaves
    out is the table's policy (`lake policy show P.W.NS.T --effective`), as the Dagster cleanup
    job does."""
    retention = parse_duration(older_than) if older_than is not None else None
    with state.catalog() as catalog:
        if retention is None or retain_versions is None:
            policy = catalog.policies.effective_policy(name).policy
            retention = retention if retention is not None else policy.retention
            retain_versions = retain_versions if retain_versions is not None else policy.retain_versions
        result = catalog.versions.cleanup(name, retention=retention, retain_versions=retain_versions)
    state.emit(
        result.to_dict(),
        lambda r: (
            f"cleanup {r['table']}: {r['status']} "
            f"({len(r['detail'].get('versions_removed', []))} version(s) removed)"
        ),
    )


@click.group()
def orphans() -> None:
    """Files (and whole table folders) that nothing live references."""


@orphans.command("scan")
@click.argument("name", metavar="P.W.NS.T")
@pass_state
@handles_errors
def orphans_scan(state: State, name: str) -> None:
    """Scan one table (report only: deletes nothing) and commit the report."""
    from lake_platform.maintenance import orphans as orphan_scan

    with state.catalog() as catalog:
        report = orphan_scan.scan(catalog, name)
        orphan_scan.commit_report(catalog, report)
    state.emit(
        report.model_dump(),
        lambda r: (
            f"{r['table']}: {r['orphan_count']} orphan(s), "
            f"{r['orphan_bytes']} bytes, of {r['files_scanned']} files scanned"
            + "".join(
                f"\n  {o['path']}  {o['bytes']} B  {o['age_seconds'] / 3600:.1f} h" for o in r["orphans"]
            )
            + "".join(f"\n  Lance branch no registry record names: {b}" for b in r["unknown_branches"])
        ),
    )


@orphans.command("reclaim")
@click.argument("name", metavar="P.W.NS.T")
@click.option("--older-than", required=True, help="Only files older than this (at least 1h), e.g. 7d.")
@pass_state
@handles_errors
def orphans_reclaim(state: State, name: str, older_than: str) -> None:
    """Delete orphans older than --older-than, re-verifying each one just before deleting it."""
    from lake_platform.maintenance import orphans as orphan_scan

    age = parse_duration(older_than)
    with state.catalog() as catalog:
        result = orphan_scan.reclaim(catalog, name, age)
    state.emit(
        result.to_dict(),
        lambda r: (
            f"{r['table']}: deleted {len(r['deleted'])} file(s), "
            f"{r['bytes_deleted']} bytes; kept {len(r['kept'])} that changed since the scan"
        ),
    )


@orphans.command("scan-folders")
@click.argument("warehouse", metavar="P.W")
@click.option(
    "--min-age", help="Only folders older than this (at least 1h); default: the policy's orphan_min_age."
)
@pass_state
@handles_errors
def orphans_scan_folders(state: State, warehouse: str, min_age: str | None) -> None:
    """Table folders in P.W that neither the registry nor the trash names (a writer killed
    before its commit). Report only: deletes nothing; commits the report."""
    from lake_platform.maintenance import orphan_folders

    age = parse_duration(min_age) if min_age is not None else None
    with state.catalog() as catalog:
        report = orphan_folders.scan_folders(catalog, warehouse, min_age=age)
        orphan_folders.commit_folder_report(catalog, report)
    state.emit(
        report.model_dump(),
        lambda r: (
            f"{r['warehouse']}: {r['orphan_count']} orphan folder(s), "
            f"{r['orphan_bytes']} bytes, of {r['table_folders']} table folders"
            + "".join(
                f"\n  {o['path']}  {o['files']} files  {o['bytes']} B  {o['age_seconds'] / 3600:.1f} h"
                for o in r["orphans"]
            )
        ),
    )


@orphans.command("reclaim-folders")
@click.argument("warehouse", metavar="P.W")
@click.option("--older-than", required=True, help="Only folders older than this (at least 1h), e.g. 7d.")
@click.option("--limit", type=click.IntRange(1), default=None, help="Delete at most this many folders.")
@pass_state
@handles_errors
def orphans_reclaim_folders(state: State, warehouse: str, older_than: str, limit: int | None) -> None:
    """Delete those folders, each re-checked under its incarnation's write lease."""
    from lake_platform.maintenance import orphan_folders

    age = parse_duration(older_than)
    with state.catalog() as catalog:
        result = orphan_folders.reclaim_folders(catalog, warehouse, age, limit=limit)
    state.emit(
        result.to_dict(),
        lambda r: (
            f"{r['warehouse']}: deleted {len(r['deleted'])} folder(s), "
            f"{r['bytes_deleted']} bytes; kept {len(r['kept'])}"
            + "".join(f"\n  kept {k['path']}: {k['reason']}" for k in r["kept"])
        ),
    )


@click.group()
def trash() -> None:
    """Dropped tables awaiting expiry."""


@trash.command("list")
@click.argument("prefix", required=False, default="")
@pass_state
@handles_errors
def trash_list(state: State, prefix: str) -> None:
    """List trash records with their deadlines."""
    with state.catalog() as catalog:
        records = catalog.trash.list_trash(prefix)
    rows = [
        {
            "kind": r.kind,
            "name": r.target,
            "incarnation": r.table.incarnation if r.table else r.cascade_id,
            "dropped": timestamp(r.dropped_at_ms),
            "dropped_by": r.dropped_by,
            "expires": timestamp(r.expires_at_ms),
            "state": r.state,
        }
        for r in records
    ]
    cols = ["kind", "name", "incarnation", "dropped", "dropped_by", "expires", "state"]
    state.emit(rows, lambda rs: text_table(cols, rs) if rs else "the trash is empty")


@trash.command("expire")
@pass_state
@handles_errors
def trash_expire(state: State) -> None:
    """Purge the data of trash records past their deadline (Dagster runs this on a schedule)."""
    with state.catalog() as catalog:
        results = [r.to_dict() for r in catalog.trash.expire_trash()]
    state.emit(results, lambda rs: "\n".join(f"purged {r['table']}" for r in rs) if rs else "nothing expired")


COMMANDS: tuple[click.Command, ...] = (compact, cleanup, orphans, trash)
