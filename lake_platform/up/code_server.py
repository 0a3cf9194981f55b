"""Dagster's code server under ``lake up``: one ``dagster api grpc`` process loads the
definitions, and the webserver and the daemon both reach it through ``workspace.yaml``'s
``grpc_server`` entry (as ``dagster dev`` does, and as the deployment runs it, docs/deploy.md).

A ``python_module`` entry instead has the webserver and the daemon each start a code server of
their own: the definitions loaded twice per start, at once, on the cores the other servers and
the demo seed start on. The code server loads them before it listens, so a health check that
answers SERVING means the location is there for the webserver and the daemon to read, and a
definitions module that fails to import ends the process (with the error as its last log line)
rather than leaving a location in error behind a UI that answers.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from lake_platform.errors import ServiceUnavailable
from lake_platform.up import dagster_program

MODULE = "lake_platform.defs.definitions"
#: The location's name: run and job selectors (GraphQL, the UI's URLs) name it.
LOCATION_NAME = "lake_platform"
#: The service Dagster's server reports through the standard gRPC health protocol (what
#: ``dagster api grpc-health-check`` asks for).
HEALTH_SERVICE = "DagsterApi"


def free_port(host: str) -> int:
    """A port that is free on ``host`` now, for the code server to bind (nothing is exposed:
    the webserver and the daemon learn it from workspace.yaml)."""
    from lake_platform.rest.run import listen

    with listen(host, 0) as sock:
        return int(sock.getsockname()[1])


def command(host: str, port: int, dagster_home: Path) -> list[str]:
    """The code server as ``lake up`` starts it (``main``): Dagster's storages created in
    ``dagster_home``, then ``dagster api grpc`` from this environment (``dagster_program``: its
    stop skips the final walk of its heap). Run workers it starts run as ``<this python> -m
    dagster api execute_run`` (``--use-python-environment-entry-point``), not whichever
    ``dagster`` is first on PATH."""
    return [
        sys.executable,
        "-m",
        __name__,
        str(dagster_home),
        "--",
        "dagster",
        "api",
        "grpc",
        "-m",
        MODULE,
        "-h",
        host,
        "-p",
        str(port),
        "--location-name",
        LOCATION_NAME,
        "--use-python-environment-entry-point",
    ]


def init_storage(home: Path) -> None:
    """Create Dagster's SQLite storages in ``home`` (its ``dagster.yaml`` written) once, before
    several processes race to create them (that race leaves two alembic heads and a code
    location that fails to load)."""
    from dagster import DagsterInstance

    with DagsterInstance.from_config(str(home)) as instance:
        instance.get_runs(limit=1)
        instance.all_instigator_state()


def main(argv: Sequence[str]) -> None:
    """``python -m lake_platform.up.code_server DAGSTER_HOME -- dagster api grpc ARGS...``.

    The code server is the first Dagster process ``lake up`` starts, and the webserver and the
    daemon start once it answers: created here, before it loads the definitions, the storages
    are made by one process before any other opens them, and by one that imports Dagster anyway
    (made by the launcher, they cost its start seconds of importing Dagster for this alone)."""
    home, separator, *program = argv
    if separator != "--" or not program:
        raise SystemExit(
            "usage: python -m lake_platform.up.code_server DAGSTER_HOME -- dagster api grpc ARGS..."
        )
    init_storage(Path(home))
    dagster_program.main(program)


def workspace_yaml(host: str, port: int) -> str:
    """The workspace the webserver and the daemon share: the one code server."""
    return (
        "load_from:\n"
        "  - grpc_server:\n"
        f"      host: {host}\n"
        f"      port: {port}\n"
        f"      location_name: {LOCATION_NAME}\n"
    )


def serving(host: str, port: int, wait: float) -> bool:
    """Whether the code server answers SERVING within ``wait`` seconds (False while it is still
    loading the definitions or not yet listening); ServiceUnavailable for any other answer."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(f"{host}:{port}") as channel:
        try:
            answer = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=HEALTH_SERVICE), wait_for_ready=True, timeout=wait
            )
        except grpc.RpcError as err:
            if err.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                return False
            raise ServiceUnavailable(f"the Dagster code server on {host}:{port}: {err.details()}") from None
    return bool(answer.status == health_pb2.HealthCheckResponse.SERVING)


if __name__ == "__main__":
    main(sys.argv[1:])
