"""Running the platform: ``lake up``, ``lake serve-flight``, ``lake serve-rest``, ``lake registry
init``."""

from __future__ import annotations

from pathlib import Path

import click

from lake_platform.cli.app import State, handles_errors, pass_state
from lake_platform.up import dagster_program


@click.command()
@click.option("--port", type=click.IntRange(1, 65535), help="Dagster UI port (default LAKE_UI_PORT, 3000).")
@click.option(
    "--flight-port", type=click.IntRange(1, 65535), help="Flight SQL port (default LAKE_FLIGHT_PORT, 50051)."
)
@click.option(
    "--rest-port", type=click.IntRange(1, 65535), help="Lance REST port (default LAKE_REST_PORT, 2333)."
)
@pass_state
@handles_errors
def up(state: State, port: int | None, flight_port: int | None, rest_port: int | None) -> None:
    """Bring the platform up on the embedded default: the demo lake, the Dagster webserver and
    daemon (UI on 127.0.0.1), the Flight SQL endpoint, the Lance Namespace REST server, and
    sample files in the inbox. Ctrl-C stops everything it started. One runs per LAKE_HOME (a
    second on the same home is refused). With --json, stdout is one JSON object (the addresses,
    once every server answers) and the progress goes to stderr."""
    from lake_platform.up.launcher import run_platform

    raise SystemExit(
        run_platform(
            state.settings,
            ui_port=port or state.settings.ui_port,
            flight_port=flight_port,
            rest_port=rest_port,
            as_json=state.as_json,
        )
    )


@click.command("serve-flight")
@click.option("--host", help="Bind address (default LAKE_FLIGHT_HOST, 127.0.0.1).")
@click.option("--port", type=click.IntRange(0, 65535), help="Port (default LAKE_FLIGHT_PORT, 50051).")
@click.option(
    "--data-listen",
    help="host:port of the data plane, a C++ server for query results in the same process "
    "(default LAKE_FLIGHT_DATA_LISTEN; empty: off). See docs/flight-sql.md.",
)
@pass_state
@handles_errors
def serve_flight(state: State, host: str | None, port: int | None, data_listen: str | None) -> None:
    """Serve the read-only Flight SQL endpoint until Ctrl-C or SIGTERM (graceful)."""
    from lake_platform.flight.server import FlightSqlServer, serve
    from lake_platform.settings.flight import flight_settings

    given = {"host": host, "port": port, "data_listen": data_listen}
    overrides = {k: v for k, v in given.items() if v is not None}
    flight = flight_settings(state.settings, **overrides)
    _files_exist(LAKE_FLIGHT_TLS_CERT_FILE=flight.tls_cert_file, LAKE_FLIGHT_TLS_KEY_FILE=flight.tls_key_file)

    def listening(server: FlightSqlServer) -> None:
        # Only now: a port that cannot be bound raised ServiceUnavailable before anything was
        # printed, and the addresses carry the bound ports (--port 0 picks one).
        click.echo(f"Flight SQL endpoint on {server.location}", err=True)
        if server.data_plane is not None:
            click.echo(f"Flight SQL data plane on {server.endpoints.replicas[0]}", err=True)

    serve(state.settings, flight, listening=listening)


@click.command("serve-rest")
@click.option("--host", help="Bind address (default LAKE_REST_HOST, 127.0.0.1).")
@click.option("--port", type=click.IntRange(0, 65535), help="Port (default LAKE_REST_PORT, 2333).")
@pass_state
@handles_errors
def serve_rest(state: State, host: str | None, port: int | None) -> None:
    """Serve the Lance Namespace REST API over the catalog until Ctrl-C or SIGTERM. Clients
    (pylance's RestNamespace, Spark's and DuckDB's lance connectors) authenticate with
    'Authorization: Bearer <token>' or 'x-api-key'; see docs/rest.md."""
    from lake_platform.rest.run import serve

    overrides = {k: v for k, v in {"rest_host": host, "rest_port": port}.items() if v is not None}
    settings = state.settings.model_copy(update=overrides)
    _files_exist(
        LAKE_REST_TLS_CERT_FILE=settings.rest_tls_cert_file, LAKE_REST_TLS_KEY_FILE=settings.rest_tls_key_file
    )
    scheme = "https" if settings.rest_tls_cert_file else "http"

    def listening(bound_host: str, bound_port: int) -> None:
        # Only once uvicorn accepts connections: a refused address, a busy port or metrics port
        # raised a typed error before anything was printed.
        click.echo(f"Lance REST server on {scheme}://{bound_host}:{bound_port}", err=True)

    try:
        serve(settings, listening)
    except KeyboardInterrupt:  # uvicorn raises Ctrl-C again once it has shut down gracefully
        pass
    click.echo("Lance REST server stopped", err=True)


def _files_exist(**named: Path | None) -> None:
    """SettingsError naming the variable of a file that is not there: the TLS library's own
    error names no file."""
    from lake_platform.errors import SettingsError

    for variable, path in named.items():
        if path is not None and not path.is_file():
            raise SettingsError(f"bad setting: {variable}: {path} is not a file")


@click.group()
def registry() -> None:
    """The registry itself (LAKE_REGISTRY_URL)."""


@registry.command("init")
@pass_state
@handles_errors
def registry_init(state: State) -> None:
    """Create the registry's storage: the DynamoDB table with its key schema (idempotent);
    SQLite creates its file on first use."""
    from lake_platform.catalog.registry_admin import init_registry

    url = state.settings.registry_url
    init_registry(state.settings)
    state.emit({"registry": url, "ready": True}, lambda d: f"registry ready: {d['registry']}")


@registry.command("migrate")
@pass_state
@handles_errors
def registry_migrate(state: State) -> None:
    """Move a DynamoDB registry to the current item layout (load spread per table); idempotent
    and resumable: run it again after an interruption. Writes fail (retryable) while it copies;
    reads go on. See docs/operations.md. SQLite registries have nothing to migrate."""
    from lake_platform.catalog.registry_admin import layouts_migrate, migrate_registry

    url = state.settings.registry_url
    if not layouts_migrate(state.settings):
        state.emit(
            {"registry": url, "migrated": False, "reason": "only DynamoDB registries have layouts"},
            lambda d: f"nothing to migrate: {d['reason']}",
        )
        return
    report = migrate_registry(state.settings, on_step=lambda step: click.echo(step, err=True))
    data = {"registry": url, "migrated": True, **vars(report)}
    state.emit(
        data,
        lambda d: (
            f"registry layout {d['layout_before']} -> {d['layout_after']}: copied {d['copied']} items, "
            f"removed {d['originals_removed']} originals and {d['stale_copies_removed']} stale copies"
        ),
    )


#: Dagster's own programs (the ones ``lake up`` runs), reachable through ``lake`` so one image
#: (entry point ``lake``) also runs the code server, the daemon, the webserver, and the run and
#: step workers that Dagster's launchers and executors start with ``dagster api ...`` as the
#: container's arguments.
DAGSTER_PROGRAMS = dagster_program.PROGRAMS


def _passthrough(program: str) -> click.Command:
    @click.command(
        program,
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []},
        add_help_option=False,
    )
    @click.argument("args", nargs=-1, type=click.UNPROCESSED)
    def run(args: tuple[str, ...]) -> None:
        import os
        import shutil
        import sys
        from pathlib import Path

        here = Path(sys.executable).parent / program  # the same environment as lake itself
        path = str(here) if here.exists() else shutil.which(program)
        if path is None:
            raise click.ClickException(f"{program} is not installed next to lake")
        os.execv(path, [program, *args])

    run.help = (
        f"Run `{program} ARGS...` from lake's own environment (for containers whose entry point is lake)."
    )
    return run


COMMANDS: tuple[click.Command, ...] = (
    up,
    serve_flight,
    serve_rest,
    registry,
    *(_passthrough(p) for p in DAGSTER_PROGRAMS),
)
