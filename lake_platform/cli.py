"""``lake``: the command line. Thin: parse, call the catalog, print for people or (--json) machines."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from functools import wraps
from typing import TYPE_CHECKING, Any, TypeVar

import click

from lake_platform import __version__
from lake_platform.errors import ErrorCode, Internal, LakeError
from lake_platform.settings import LakeSettings, load_settings

if TYPE_CHECKING:
    from lake_platform.catalog.catalog import Catalog

F = TypeVar("F", bound=Callable[..., Any])
log = logging.getLogger("lake_platform.cli")


class State:
    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        self._settings: LakeSettings | None = None

    @property
    def settings(self) -> LakeSettings:
        if self._settings is None:
            self._settings = load_settings()
        return self._settings

    @contextmanager
    def catalog(self) -> Iterator[Catalog]:
        # Imported here: the engine loads Lance (seconds), which --help and bad input never need.
        from lake_platform.catalog.catalog import Catalog

        catalog = Catalog(self.settings)
        try:
            yield catalog
        finally:
            catalog.close()

    def emit(self, data: Any, human: Callable[[Any], str] | None = None) -> None:
        if self.as_json:
            click.echo(json.dumps(data, indent=2, default=str, sort_keys=True))
        else:
            click.echo(human(data) if human else _plain(data))


def _plain(data: Any) -> str:
    if isinstance(data, dict):
        width = max((len(str(k)) for k in data), default=0)
        return "\n".join(f"{str(k).ljust(width)}  {v}" for k, v in data.items())
    return str(data)


def handles_errors(fn: F) -> F:
    """Print typed errors as ``error [CODE Name]: message`` and exit non-zero; no tracebacks."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except LakeError as exc:
            _fail(exc)
        except click.exceptions.Exit:
            raise
        except click.ClickException:
            raise
        except Exception as exc:  # noqa: BLE001 - never a traceback to the user
            log.debug("unexpected error", exc_info=True)
            _fail(Internal(f"unexpected error ({type(exc).__name__}); rerun with LAKE_LOG_LEVEL=DEBUG for details"))

    return wrapper  # type: ignore[return-value]


def _fail(exc: LakeError) -> None:
    ctx = click.get_current_context(silent=True)
    state = ctx.find_object(State) if ctx else None
    if state is not None and state.as_json:
        click.echo(json.dumps({"error": exc.to_dict()}, indent=2))
    else:
        click.echo(f"error [{int(exc.code)} {ErrorCode(exc.code).name}]: {exc.message}", err=True)
    sys.exit(2 if exc.code in (ErrorCode.INVALID_INPUT, ErrorCode.TABLE_SCHEMA_VALIDATION_ERROR) else 1)


@click.group()
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@click.version_option(__version__, prog_name="lake")
@click.pass_context
def cli(ctx: click.Context, as_json: bool) -> None:
    """lake_platform: a Lance lakehouse with one registry as the authority for every table.

    Settings come from LAKE_* environment variables and a .env file; LAKE_HOME (default ./.lake)
    holds the embedded registry and warehouse.
    """
    ctx.obj = State(as_json)
    try:
        logging.basicConfig(level=ctx.obj.settings.log_level, format="%(levelname)s %(name)s: %(message)s")
    except LakeError as exc:
        _fail(exc)


pass_state = click.make_pass_decorator(State)


# -- hierarchy --------------------------------------------------------------------------------

@cli.group()
def project() -> None:
    """Projects (tenants)."""


@project.command("create")
@click.argument("name")
@pass_state
@handles_errors
def project_create(state: State, name: str) -> None:
    """Create project NAME."""
    with state.catalog() as catalog:
        record = catalog.create_project(name)
    state.emit(record.model_dump(), lambda r: f"created project {r['name']}")


@cli.group()
def warehouse() -> None:
    """Warehouses: one storage root each (a local folder or s3://bucket/prefix)."""


@warehouse.command("create")
@click.argument("name", metavar="P.W")
@click.option("--root", help="Storage root URI (default: <LAKE_WAREHOUSE_ROOT>/P/W).")
@pass_state
@handles_errors
def warehouse_create(state: State, name: str, root: str | None) -> None:
    """Create warehouse P.W."""
    with state.catalog() as catalog:
        record = catalog.create_warehouse(name, root=root)
    state.emit(record.model_dump(), lambda r: f"created warehouse {r['name']} at {r['root']}")


@cli.group()
def namespace() -> None:
    """Namespaces (may nest)."""


@namespace.command("create")
@click.argument("name", metavar="P.W.NS[.SUB...]")
@pass_state
@handles_errors
def namespace_create(state: State, name: str) -> None:
    """Create a namespace."""
    with state.catalog() as catalog:
        record = catalog.create_namespace(name)
    state.emit(record.model_dump(), lambda r: f"created namespace {r['name']}")


# -- tables -----------------------------------------------------------------------------------

@cli.group()
def table() -> None:
    """Tables: create, list, describe, history, drop."""


@table.command("create")
@click.argument("name", metavar="P.W.NS.T")
@click.option("--from", "source", required=True, type=click.Path(dir_okay=False),
              help="A Parquet, CSV, JSON-lines or Arrow IPC file; its schema becomes the table's.")
@pass_state
@handles_errors
def table_create(state: State, name: str, source: str) -> None:
    """Create a table from a file."""
    from lake_platform import sources
    from lake_platform.naming import TableName

    TableName.parse(name)
    src = sources.describe(source)
    with state.catalog() as catalog, _progress(state, [src]) as on_batch:
        result = catalog.create_table(name, sources.open_many([src], on_batch=on_batch))
    state.emit(result.to_dict(), lambda r: f"created {r['table']} at version {r['to_version']} ({r['rows_added']} rows)")


@cli.command()
@click.argument("name", metavar="P.W.NS.T")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--commit-id", help="Idempotency key: a retry with the same id never appends twice.")
@pass_state
@handles_errors
def ingest(state: State, name: str, files: tuple[str, ...], commit_id: str | None) -> None:
    """Append FILES (Parquet, CSV, JSON lines, Arrow IPC) to a table in one commit, streamed."""
    from lake_platform import sources
    from lake_platform.catalog.arrow_io import schema_from_ipc
    from lake_platform.naming import TableName

    TableName.parse(name)
    srcs = [sources.describe(f) for f in files]
    with state.catalog() as catalog:
        record = catalog.open_table(name).record
        with _progress(state, srcs) as on_batch:
            reader = sources.open_many(srcs, schema_from_ipc(record.schema_ipc), on_batch=on_batch)
            result = catalog.append(name, reader, commit_id=commit_id)
    state.emit(result.to_dict(), lambda r: (
        f"ingested {len(srcs)} file(s) into {r['table']}: {r['rows_added']} rows, version {r['from_version']} -> "
        f"{r['to_version']}" + (" (already committed earlier; nothing appended)" if r["replayed"] else "")))


@table.command("list")
@click.argument("prefix", required=False, default="")
@pass_state
@handles_errors
def table_list(state: State, prefix: str) -> None:
    """List tables (optionally under a dotted PREFIX) with version and row count."""
    with state.catalog() as catalog:
        rows = []
        for record in catalog.list_tables(prefix):
            info = catalog.describe_table(record.name)
            rows.append({"name": record.name, "version": info.current_version, "rows": info.rows})
    state.emit(rows, lambda rs: _table(["name", "version", "rows"], rs) if rs else "no tables")


@table.command("describe")
@click.argument("name", metavar="P.W.NS.T")
@pass_state
@handles_errors
def table_describe(state: State, name: str) -> None:
    """Location, incarnation, current version, rows and schema."""
    with state.catalog() as catalog:
        info = catalog.describe_table(name).to_dict()

    def human(d: dict[str, Any]) -> str:
        head = {k: d[k] for k in ("name", "location", "incarnation", "current_version", "rows", "fragments",
                                  "data_bytes", "protected")}
        head["created"] = _when(d["created_at_ms"])
        cols = "\n".join(f"  {c['name']}: {c['type']}{'' if c['nullable'] else ' not null'}" for c in d["schema"])
        return _plain(head) + "\nschema:\n" + cols

    state.emit(info, human)


@table.command("history")
@click.argument("name", metavar="P.W.NS.T")
@click.option("--limit", type=click.IntRange(1), default=None)
@pass_state
@handles_errors
def table_history(state: State, name: str, limit: int | None) -> None:
    """The table's commit log, oldest first."""
    with state.catalog() as catalog:
        entries = [e.model_dump() for e in catalog.history(name, limit=limit)]
    cols = ["when", "operation", "from", "to", "rows+", "files+", "files-", "actor", "commit_id"]
    state.emit(entries, lambda es: _table(cols, [{
        "when": _when(e["at_ms"]), "operation": e["operation"], "from": e["from_version"], "to": e["to_version"],
        "rows+": e["rows_added"], "files+": e["files_added"], "files-": e["files_removed"], "actor": e["actor"],
        "commit_id": e["commit_id"]} for e in es]) if es else "no history")


@table.command("drop")
@click.argument("name", metavar="P.W.NS.T")
@click.option("--purge", is_flag=True, help="Destroy the data now instead of keeping it in the trash.")
@click.option("--force", is_flag=True, help="Override deletion protection (and nothing else).")
@click.option("--incarnation", help="Only drop if the table is still this incarnation.")
@pass_state
@handles_errors
def table_drop(state: State, name: str, purge: bool, force: bool, incarnation: str | None) -> None:
    """Drop a table: into the trash for the policy's grace period, or destroyed with --purge."""
    with state.catalog() as catalog:
        result = catalog.drop_table(name, purge=purge, force=force, incarnation=incarnation)
        trash = [] if purge else [t for t in catalog.list_trash(name) if t.target == name]
    data = result.to_dict()
    data["expires_at_ms"] = trash[-1].expires_at_ms if trash else None
    state.emit(data, lambda r: f"dropped {r['table']} (was at version {r['from_version']}); " + (
        f"in the trash until {_when(r['expires_at_ms'])} (lake table undrop {r['table']})" if r["expires_at_ms"]
        else "data destroyed"))


@table.command("undrop")
@click.argument("name", metavar="P.W.NS.T")
@click.option("--as", "as_name", metavar="P.W.NS.T2", help="Restore under another name (same warehouse).")
@click.option("--incarnation", help="Which dropped incarnation to restore (default: the newest).")
@pass_state
@handles_errors
def table_undrop(state: State, name: str, as_name: str | None, incarnation: str | None) -> None:
    """Restore a dropped table from the trash."""
    with state.catalog() as catalog:
        result = catalog.undrop_table(name, as_name=as_name, incarnation=incarnation)
    state.emit(result.to_dict(), lambda r: f"restored {r['table']} at version {r['to_version']}")


def _protect_command(group: click.Group, kind: str, metavar: str) -> None:
    @group.command("protect")
    @click.argument("name", metavar=metavar)
    @click.option("--off", is_flag=True, help="Remove protection.")
    @pass_state
    @handles_errors
    def protect(state: State, name: str, off: bool) -> None:
        """Turn deletion protection on (or --off)."""
        with state.catalog() as catalog:
            catalog.set_protected(name, not off, kind=kind)
        state.emit({"name": name, "protected": not off},
                   lambda d: f"{kind} {d['name']} is {'protected' if d['protected'] else 'no longer protected'}")


_protect_command(table, "table", "P.W.NS.T")
_protect_command(namespace, "namespace", "P.W.NS")
_protect_command(warehouse, "warehouse", "P.W")


@namespace.command("drop")
@click.argument("name", metavar="P.W.NS[.SUB...]")
@click.option("--cascade", is_flag=True, help="Move everything inside to the trash too.")
@click.option("--force", is_flag=True, help="Override deletion protection (and nothing else).")
@click.option("--purge", is_flag=True, help="With --cascade: destroy the tables' data now.")
@pass_state
@handles_errors
def namespace_drop(state: State, name: str, cascade: bool, force: bool, purge: bool) -> None:
    """Drop a namespace (only when empty, unless --cascade)."""
    if purge and not cascade:
        from lake_platform.errors import InvalidInput as _Invalid

        raise _Invalid("--purge only applies with --cascade")
    with state.catalog() as catalog:
        result = catalog.drop_namespace(name, cascade=cascade, force=force, purge=purge)
    state.emit(result.to_dict(), lambda r: f"dropped namespace {r['table']}")


@namespace.command("undrop")
@click.argument("name", metavar="P.W.NS[.SUB...]")
@pass_state
@handles_errors
def namespace_undrop(state: State, name: str) -> None:
    """Rebuild a cascade-dropped namespace and its tables (safe to rerun after an interruption)."""
    with state.catalog() as catalog:
        result = catalog.undrop_namespace(name)
    state.emit(result.to_dict(), lambda r: f"restored namespace {r['table']}")


@warehouse.command("drop")
@click.argument("name", metavar="P.W")
@click.option("--force", is_flag=True, help="Override deletion protection (and nothing else).")
@pass_state
@handles_errors
def warehouse_drop(state: State, name: str, force: bool) -> None:
    """Drop an empty warehouse."""
    with state.catalog() as catalog:
        result = catalog.drop_warehouse(name, force=force)
    state.emit(result.to_dict(), lambda r: f"dropped warehouse {r['table']}")


@project.command("drop")
@click.argument("name")
@pass_state
@handles_errors
def project_drop(state: State, name: str) -> None:
    """Drop an empty project (there is no cascade for projects)."""
    with state.catalog() as catalog:
        result = catalog.drop_project(name)
    state.emit(result.to_dict(), lambda r: f"dropped project {r['table']}")


@cli.group()
def trash() -> None:
    """Dropped tables awaiting expiry."""


@trash.command("list")
@click.argument("prefix", required=False, default="")
@pass_state
@handles_errors
def trash_list(state: State, prefix: str) -> None:
    """List trash records with their deadlines."""
    with state.catalog() as catalog:
        records = catalog.list_trash(prefix)
    rows = [{"kind": r.kind, "name": r.target, "incarnation": r.table.incarnation if r.table else r.cascade_id,
             "dropped": _when(r.dropped_at_ms), "dropped_by": r.dropped_by, "expires": _when(r.expires_at_ms),
             "state": r.state} for r in records]
    state.emit(rows, lambda rs: _table(["kind", "name", "incarnation", "dropped", "dropped_by", "expires", "state"], rs)
               if rs else "the trash is empty")


@trash.command("expire")
@pass_state
@handles_errors
def trash_expire(state: State) -> None:
    """Purge the data of trash records past their deadline (Dagster runs this on a schedule)."""
    with state.catalog() as catalog:
        results = [r.to_dict() for r in catalog.expire_trash()]
    state.emit(results, lambda rs: "\n".join(f"purged {r['table']}" for r in rs) if rs else "nothing expired")


@cli.group()
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
    target_rows_per_fragment, trash_grace, orphan_min_age (durations like 90m, 12h, 7d).
    """
    from lake_platform.catalog.policies import parse_assignments

    with state.catalog() as catalog:
        record = catalog.set_policy(scope, parse_assignments(list(assignments)))
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
        record = catalog.unset_policy(scope, list(fields))
    state.emit(record.model_dump(), lambda r: f"policy at {r['scope']}: reset {', '.join(fields)} to the defaults")


@policy.command("delete")
@click.argument("scope", metavar="SCOPE")
@pass_state
@handles_errors
def policy_delete(state: State, scope: str) -> None:
    """Remove the policy record at SCOPE; the next less specific record (or the defaults) applies.

    Works on a record whose object no longer exists (left by older releases).
    """
    with state.catalog() as catalog:
        catalog.delete_policy(scope)
    state.emit({"deleted": scope}, lambda d: f"deleted the policy record at {d['deleted']}")


@policy.command("show")
@click.argument("scope", metavar="SCOPE")
@click.option("--effective", is_flag=True, help="Resolve up the hierarchy and say which record won.")
@pass_state
@handles_errors
def policy_show(state: State, scope: str, effective: bool) -> None:
    """Show the policy at SCOPE (or, with --effective, the one that applies and where it came from)."""
    with state.catalog() as catalog:
        resolved = catalog.effective_policy(scope)
    data = resolved.to_dict()
    if not effective and resolved.source != scope:
        data = {"source": f"(no policy record at {scope}; use --effective)"}
    state.emit(data)


@cli.group()
def user() -> None:
    """Users: a name, a password and one role in one project."""


@user.command("add")
@click.argument("name")
@click.option("--project", required=True)
@click.option("--role", required=True, type=click.Choice(["reader", "writer", "admin"]))
@click.option("--password-stdin", is_flag=True, help="Read the password from standard input.")
@pass_state
@handles_errors
def user_add(state: State, name: str, project: str, role: str, password_stdin: bool) -> None:
    """Add a user; without --password-stdin a password is generated and printed once."""
    import secrets

    generated = not password_stdin
    password = secrets.token_urlsafe(18) if generated else sys.stdin.readline().rstrip("\r\n")
    with state.catalog() as catalog:
        record = catalog.add_user(name, project=project, role=role, password=password)
    data = {"name": record.name, "project": record.project, "role": record.role}
    if generated:
        data["password"] = password
    state.emit(data, lambda d: f"added user {d['name']} ({d['role']} on {d['project']})"
               + (f"\npassword (shown once): {d['password']}" if "password" in d else ""))


@user.command("list")
@click.option("--project")
@pass_state
@handles_errors
def user_list(state: State, project: str | None) -> None:
    """List users."""
    with state.catalog() as catalog:
        users = [{"name": u.name, "project": u.project, "role": u.role, "created": _when(u.created_at_ms)}
                 for u in catalog.list_users(project)]
    state.emit(users, lambda us: _table(["name", "project", "role", "created"], us) if us else "no users")


@user.command("remove")
@click.argument("name")
@pass_state
@handles_errors
def user_remove(state: State, name: str) -> None:
    """Remove a user."""
    with state.catalog() as catalog:
        catalog.remove_user(name)
    state.emit({"removed": name}, lambda d: f"removed user {d['removed']}")


@cli.group()
def token() -> None:
    """Service tokens (Bearer credentials for machines)."""


@token.command("create")
@click.argument("name")
@click.option("--project", required=True)
@click.option("--role", required=True, type=click.Choice(["reader", "writer", "admin"]))
@pass_state
@handles_errors
def token_create(state: State, name: str, project: str, role: str) -> None:
    """Create a token; it is printed once and only its hash is kept."""
    with state.catalog() as catalog:
        record, secret = catalog.create_token(name, project=project, role=role)
    state.emit({"token_id": record.token_id, "name": name, "project": project, "role": role, "token": secret},
               lambda d: f"created token {d['name']} (id {d['token_id']})\ntoken (shown once): {d['token']}")


@token.command("revoke")
@click.argument("token_id")
@pass_state
@handles_errors
def token_revoke(state: State, token_id: str) -> None:
    """Revoke a token by its id."""
    with state.catalog() as catalog:
        record = catalog.revoke_token(token_id)
    state.emit({"token_id": record.token_id, "revoked": True}, lambda d: f"revoked token {d['token_id']}")


@token.command("list")
@pass_state
@handles_errors
def token_list(state: State) -> None:
    """List tokens (never their secrets)."""
    with state.catalog() as catalog:
        tokens = [{"token_id": t.token_id, "name": t.name, "project": t.project, "role": t.role,
                   "revoked": t.revoked} for t in catalog.list_tokens()]
    state.emit(tokens, lambda ts: _table(["token_id", "name", "project", "role", "revoked"], ts) if ts else "no tokens")


@cli.command("serve-flight")
@click.option("--host", help="Bind address (default LAKE_FLIGHT_HOST, 127.0.0.1).")
@click.option("--port", type=click.IntRange(0, 65535), help="Port (default LAKE_FLIGHT_PORT, 50051).")
@pass_state
@handles_errors
def serve_flight(state: State, host: str | None, port: int | None) -> None:
    """Serve the read-only Flight SQL endpoint until Ctrl-C or SIGTERM (graceful)."""
    from lake_platform.flight.server import serve
    from lake_platform.flight.settings import flight_settings

    overrides = {k: v for k, v in {"host": host, "port": port}.items() if v is not None}
    flight = flight_settings(state.settings, **overrides)
    click.echo(f"Flight SQL endpoint on grpc{'+tls' if flight.tls else ''}://{flight.host}:{flight.port}", err=True)
    serve(state.settings, flight)


@cli.group()
def registry() -> None:
    """The registry itself (LAKE_REGISTRY_URL)."""


@registry.command("init")
@pass_state
@handles_errors
def registry_init(state: State) -> None:
    """Create the registry's storage: the DynamoDB table with its key schema (idempotent);
    SQLite creates its file on first use."""
    url = state.settings.registry_url
    if url.startswith("dynamodb://"):
        from lake_platform.registry.dynamodb import init_table

        init_table(url, state.settings)
    else:
        from lake_platform.registry.factory import open_metastore

        open_metastore(state.settings).close()
    state.emit({"registry": url, "ready": True}, lambda d: f"registry ready: {d['registry']}")


@cli.command("log")
@click.argument("prefix", required=False, default="")
@click.option("--limit", type=click.IntRange(1), default=None, help="Only the newest N entries.")
@pass_state
@handles_errors
def log_command(state: State, prefix: str, limit: int | None) -> None:
    """Every commit (data and governance) under PREFIX: who, what, when."""
    with state.catalog() as catalog:
        entries = [e.model_dump() for e in catalog.log(prefix, limit=limit)]
    cols = ["when", "target", "operation", "actor", "to", "commit_id"]
    state.emit(entries, lambda es: _table(cols, [{
        "when": _when(e["at_ms"]), "target": e["target"], "operation": e["operation"], "actor": e["actor"],
        "to": e["to_version"] if e["to_version"] is not None else "", "commit_id": e["commit_id"]} for e in es])
        if es else "no entries")


@cli.command()
@click.argument("name", metavar="P.W.NS.T")
@click.option("--target-rows-per-fragment", type=click.IntRange(1), default=1_048_576, show_default=True)
@pass_state
@handles_errors
def compact(state: State, name: str, target_rows_per_fragment: int) -> None:
    """Compact a table's small fragments (a registry commit; skipped if a newer commit conflicts)."""
    with state.catalog() as catalog:
        result = catalog.compact(name, target_rows_per_fragment=target_rows_per_fragment)
    state.emit(result.to_dict(), lambda r: f"compact {r['table']}: {r['status']} (version {r['version']})")


@cli.command()
@click.argument("name", metavar="P.W.NS.T")
@click.option("--older-than", "older_than", default="7d", show_default=True,
              help="Keep versions younger than this (e.g. 90m, 12h, 7d). Never below the ticket lifetime.")
@click.option("--retain-versions", type=click.IntRange(1), default=1, show_default=True)
@pass_state
@handles_errors
def cleanup(state: State, name: str, older_than: str, retain_versions: int) -> None:
    """Remove old, untagged versions and the files only they reference."""
    with state.catalog() as catalog:
        result = catalog.cleanup(name, retention=parse_duration(older_than), retain_versions=retain_versions)
    state.emit(result.to_dict(), lambda r: f"cleanup {r['table']}: {r['status']} "
               f"({len(r['detail'].get('versions_removed', []))} version(s) removed)")


@cli.command()
@click.option("--port", type=click.IntRange(1, 65535), help="Dagster UI port (default LAKE_UI_PORT, 3000).")
@click.option("--flight-port", type=click.IntRange(1, 65535), help="Flight SQL port (default LAKE_FLIGHT_PORT, 50051).")
@pass_state
@handles_errors
def up(state: State, port: int | None, flight_port: int | None) -> None:
    """Bring the platform up on the embedded default: the demo lake, the Dagster webserver and
    daemon (UI on 127.0.0.1), the Flight SQL endpoint, and sample files in the inbox. Ctrl-C
    stops everything it started."""
    from lake_platform.launcher import run_platform

    raise SystemExit(run_platform(state.settings, ui_port=port or state.settings.ui_port, flight_port=flight_port))


@cli.group()
def orphans() -> None:
    """Files under a table's location that nothing live references."""


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
    state.emit(report.model_dump(), lambda r: f"{r['table']}: {r['orphan_count']} orphan(s), "
               f"{r['orphan_bytes']} bytes, of {r['files_scanned']} files scanned" + "".join(
                   f"\n  {o['path']}  {o['bytes']} B  {o['age_seconds'] / 3600:.1f} h" for o in r["orphans"]))


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
    state.emit(result.to_dict(), lambda r: f"{r['table']}: deleted {len(r['deleted'])} file(s), "
               f"{r['bytes_deleted']} bytes; kept {len(r['kept'])} that changed since the scan")


# -- helpers ----------------------------------------------------------------------------------

def parse_duration(text: str) -> timedelta:
    from lake_platform.catalog.policies import parse_duration as parse

    return parse(text)


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")


def _table(columns: list[str], rows: list[dict[str, Any]]) -> str:
    widths = {c: max(len(c), *(len(str(r.get(c, ""))) for r in rows)) for c in columns}
    lines = ["  ".join(c.ljust(widths[c]) for c in columns)]
    lines += ["  ".join(str(r.get(c, "")).ljust(widths[c]) for c in columns) for r in rows]
    return "\n".join(line.rstrip() for line in lines)


PROGRESS_MIN_BYTES = 64 << 20


@contextmanager
def _progress(state: State, srcs: list[Any]) -> Iterator[Callable[[Any], None] | None]:
    """A progress bar (rows) on large inputs when stderr is a terminal."""
    total = sum(s.size for s in srcs)
    if state.as_json or total < PROGRESS_MIN_BYTES or not sys.stderr.isatty():
        yield None
        return
    from rich.progress import Progress

    with Progress(transient=True) as progress:
        task = progress.add_task(f"reading {len(srcs)} file(s)", total=None)
        yield lambda batch: progress.update(task, advance=batch.num_rows)


def main() -> None:
    cli(prog_name="lake")


if __name__ == "__main__":
    main()
