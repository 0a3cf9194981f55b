"""``prefer_polling_listener``: the default it sets, and when it must leave gRPC alone."""

from __future__ import annotations

from lake_platform.flight.grpc_env import POLLING_LISTENER, VARIABLE, prefer_polling_listener


def test_sets_the_polling_listener_before_grpc_is_imported() -> None:
    environ: dict[str, str] = {}
    assert prefer_polling_listener(environ, imported=set())
    assert environ == {VARIABLE: POLLING_LISTENER}


def test_an_operators_value_wins_even_empty() -> None:
    for value in ("", "event_engine_listener", "-event_engine_fork"):
        environ = {VARIABLE: value}
        assert not prefer_polling_listener(environ, imported=set())
        assert environ == {VARIABLE: value}
    environ = {VARIABLE: POLLING_LISTENER}
    assert prefer_polling_listener(environ, imported=set())


def test_too_late_once_grpc_is_imported() -> None:
    """gRPC read the variable at its import: setting it now would only mislead the processes
    this one starts into a setting it does not have itself."""
    environ: dict[str, str] = {}
    assert not prefer_polling_listener(environ, imported={"grpc"})
    assert environ == {}
