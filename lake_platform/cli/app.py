"""The root ``lake`` group and what every command shares: settings and catalog, output, errors."""

from __future__ import annotations

import gc
import io
import json
import logging
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from functools import wraps
from typing import TYPE_CHECKING, Any, TypeVar

import click

from lake_platform import __version__
from lake_platform.engine.panics import is_panic
from lake_platform.errors import ErrorCode, Internal, InvalidInput, LakeError, ServiceUnavailable
from lake_platform.observability.logs import configure_logging, escaped

if TYPE_CHECKING:
    from lake_platform.catalog.catalog import Catalog
    from lake_platform.settings import LakeSettings

F = TypeVar("F", bound=Callable[..., Any])
#: 128 + SIGPIPE: what a shell shows for a command whose reader closed the pipe.
BROKEN_PIPE_EXIT = 141
log = logging.getLogger("lake_platform.cli")


class State:
    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        self._settings: LakeSettings | None = None

    @property
    def settings(self) -> LakeSettings:
        if self._settings is None:
            # Imported here: pydantic-settings is a tenth of a second that --help never needs.
            from lake_platform.settings import load_settings

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
            click.echo(human(data) if human else plain(data))


def plain(data: Any) -> str:
    """A dict as aligned ``key  value`` lines (values :func:`shown`); anything else as its str."""
    if isinstance(data, dict):
        width = max((len(str(k)) for k in data), default=0)
        return "\n".join(f"{str(k).ljust(width)}  {shown(str(v))}" for k, v in data.items())
    return str(data)


def shown(text: str) -> str:
    """``text`` for a terminal, its control and other non-printing characters (line breaks,
    carriage returns, escape codes, bidi overrides) as their escapes: a value a client chose
    (the SQL in the audit trail) cannot start a line of its own, a forged record, nor rewrite
    or hide what the terminal shows."""
    return escaped(text)


def timestamp(ms: int) -> str:
    """Epoch milliseconds as a UTC time for people."""
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")


def text_table(names: list[str], rows: list[dict[str, Any]]) -> str:
    """Rows as a left-aligned text table under a header of NAMES, one line each (cells
    :func:`shown`); a missing or None cell is blank (``--json`` keeps the nulls)."""
    cells = [{c: "" if r.get(c) is None else shown(str(r[c])) for c in names} for r in rows]
    widths = {c: max([len(c), *(len(r[c]) for r in cells)]) for c in names}
    lines = ["  ".join(c.ljust(widths[c]) for c in names)]
    lines += ["  ".join(r[c].ljust(widths[c]) for c in names) for r in cells]
    return "\n".join(line.rstrip() for line in lines)


def parse_duration(text: str) -> timedelta:
    from lake_platform.catalog.policies import parse_duration as parse

    return parse(text)


def handles_errors(fn: F) -> F:
    """Print typed errors as ``error [CODE Name]: message`` and exit non-zero; no tracebacks."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except LakeError as exc:
            fail(exc)
        except click.exceptions.Exit:
            raise
        except click.ClickException:
            raise
        except BrokenPipeError:
            # The reader went away (`lake ... | head`): stop quietly, as the shell reports it,
            # and point stdout at /dev/null so the exit's flush cannot raise again.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(BROKEN_PIPE_EXIT)
        except (ConnectionError, TimeoutError) as exc:
            fail(ServiceUnavailable(f"{exc}"))
        except OSError as exc:
            # A path the command line or a setting named (LAKE_HOME on a read-only disk, an
            # --output under /proc): the user's to fix, so they learn which one and why.
            fail(path_error(exc))
        except Exception as exc:  # noqa: BLE001 - never a traceback to the user
            fail(_unexpected(exc))
        except BaseException as exc:  # a Lance panic read outside the engine (``lake sql``'s rows)
            if not is_panic(exc):
                raise
            log.debug("Lance panicked", exc_info=True)
            fail(Internal(f"Lance panicked: {exc}"))

    return wrapper  # type: ignore[return-value]


def _unexpected(exc: Exception) -> Internal:
    log.debug("unexpected error", exc_info=exc)
    return Internal(f"unexpected error ({type(exc).__name__}); rerun with LAKE_LOG_LEVEL=DEBUG for details")


def path_error(exc: OSError) -> InvalidInput:
    """``cannot use PATH: why`` (or the error's own text, which names the path in pyarrow's),
    with where LAKE_HOME is: most paths the platform writes are under it."""
    ctx = click.get_current_context(silent=True)
    state = ctx.find_object(State) if ctx else None
    home = f" (LAKE_HOME is {state.settings.home})" if state is not None else ""
    why = f"cannot use {exc.filename}: {exc.strerror}" if exc.filename is not None else str(exc)
    return InvalidInput(f"{why}{home}")


def fail(exc: LakeError, as_json: bool | None = None) -> None:
    """Print ``exc`` (as JSON on stdout under --json: ``as_json``, else the current command's
    state says) and exit: 2 for bad input, else 1."""
    if as_json is None:
        ctx = click.get_current_context(silent=True)
        state = ctx.find_object(State) if ctx else None
        as_json = state is not None and state.as_json
    if as_json:
        click.echo(json.dumps({"error": exc.to_dict()}, indent=2))
    else:
        click.echo(f"error [{int(exc.code)} {ErrorCode(exc.code).name}]: {exc.message}", err=True)
    sys.exit(2 if exc.code in (ErrorCode.INVALID_INPUT, ErrorCode.TABLE_SCHEMA_VALIDATION_ERROR) else 1)


class JsonAnywhere(click.Group):
    """A root group that accepts ``--json`` anywhere on the line (``lake table list --json``), not
    only before the subcommand: it is moved to the front before click parses. Arguments after
    ``--`` are left alone."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        end = args.index("--") if "--" in args else len(args)
        head, tail = args[:end], args[end:]
        if "--json" in head:
            args = ["--json", *(a for a in head if a != "--json"), *tail]
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as exc:  # the root's own options (``lake --json --nope``)
            if "--json" not in head:
                raise
            _usage_failed(exc, as_json=True)
            raise

    def invoke(self, ctx: click.Context) -> Any:
        """Under ``--json`` a bad command line (a missing argument, an unknown command, a value
        out of range) is a JSON error on stdout like any other, not click's usage text."""
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            state = ctx.find_object(State)
            # No state yet: the root's command name was refused before its callback ran.
            if not (state.as_json if state is not None else ctx.params.get("as_json")):
                raise
            _usage_failed(exc, as_json=True)


def _usage_failed(exc: click.UsageError, *, as_json: bool) -> None:
    where = exc.ctx.command_path if exc.ctx is not None else "lake"
    fail(InvalidInput(f"{where}: {exc.format_message()}"), as_json=as_json)


@click.group(cls=JsonAnywhere)
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@click.version_option(__version__, prog_name="lake")
@click.pass_context
def cli(ctx: click.Context, as_json: bool) -> None:
    """lake_platform: a Lance lakehouse with one registry as the authority for every table.

    Settings come from LAKE_* environment variables and a .env file (a LAKE_* name no setting
    reads is warned about); LAKE_HOME (default ./.lake) holds the embedded registry and warehouse.
    """
    ctx.obj = State(as_json)
    try:
        settings = ctx.obj.settings
        configure_logging(settings.log_level, settings.log_format)
    except LakeError as exc:
        fail(exc)
    from lake_platform.settings.unknown import unknown_variables

    for line in unknown_variables(os.environ):
        log.warning(line)


pass_state = click.make_pass_decorator(State)


def main() -> None:
    # A terminal that is not UTF-8 (an ASCII or Latin-1 locale) cannot encode every value a
    # table or a tenant's SQL holds: shown escaped (\xe9), not an INTERNAL error mid-answer.
    # stderr does this already (Python's default for it).
    if isinstance(sys.stdout, io.TextIOWrapper) and sys.stdout.errors == "strict":
        sys.stdout.reconfigure(errors="backslashreplace")
    try:
        cli(prog_name="lake")
    finally:
        # The command is done and the process only exits now. Its heap (Lance, pyarrow, Dagster,
        # DataFusion: hundreds of thousands of objects from the imports alone) is frozen so the
        # interpreter's final collections skip it: 0.7-1 s of every such command's exit, ~4 s of
        # `lake up`'s.
        gc.freeze()
