"""``lake flight``: the Flight SQL endpoint's sealing key file (embedded default)."""

from __future__ import annotations

import click

from lake_platform.cli.app import State, handles_errors, pass_state


@click.group()
def flight() -> None:
    """The Flight SQL endpoint's sealing keys in LAKE_HOME (used when LAKE_FLIGHT_KEYS is unset)."""


@flight.command("rotate-key")
@pass_state
@handles_errors
def rotate_key(state: State) -> None:
    """Append a new sealing key to <home>/flight-keys. Endpoints seal with it once restarted;
    the older keys still open what they sealed until retired."""
    from lake_platform.auth.keyfile import key_file_path, read_keys, rotate

    path = key_file_path(state.settings.home)
    kid = rotate(path)
    ids = [k for k, _ in read_keys(path)]
    state.emit(
        {"file": str(path), "sealing_key": kid, "keys": ids},
        lambda d: (
            f"new sealing key {d['sealing_key']} in {d['file']} (restart the endpoints); "
            f"keys: {', '.join(d['keys'])}"
        ),
    )


@flight.command("retire-keys")
@click.option("--keep", type=click.IntRange(1), default=1, show_default=True, help="Newest keys to keep.")
@pass_state
@handles_errors
def retire_keys(state: State, keep: int) -> None:
    """Drop all but the newest KEEP keys from <home>/flight-keys: tokens, tickets and prepared
    handles sealed with a dropped key are refused ("unknown key id") after the next restart."""
    from lake_platform.auth.keyfile import key_file_path, retire

    path = key_file_path(state.settings.home)
    dropped = retire(path, keep)
    state.emit(
        {"file": str(path), "retired": dropped},
        lambda d: f"retired {', '.join(d['retired']) or 'nothing'} from {d['file']}",
    )


COMMANDS: tuple[click.Command, ...] = (flight,)
