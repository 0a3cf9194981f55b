"""Hooks the lower layers (registry, catalog) call on every I/O. They cost one attribute read
until a process that serves metrics imports ``observability.metrics``, which installs the
recorders: a CLI command then never imports prometheus_client (its start-up stays fast), and a
Flight replica or REST server counts everything."""

from __future__ import annotations

from collections.abc import Callable

_registry: Callable[[str, str, str, float], None] | None = None
_lease: Callable[[str, float], None] | None = None
_bypass: Callable[[str, int], None] | None = None


def install(
    registry: Callable[[str, str, str, float], None],
    lease: Callable[[str, float], None],
    bypass: Callable[[str, int], None] | None = None,
) -> None:
    global _registry, _lease, _bypass
    _registry, _lease, _bypass = registry, lease, bypass


def observe_registry(backend: str, op: str, outcome: str, seconds: float) -> None:
    record = _registry
    if record is not None:
        record(backend, op, outcome, seconds)


def observe_lease_wait(outcome: str, seconds: float) -> None:
    record = _lease
    if record is not None:
        record(outcome, seconds)


def observe_bypass(project: str, versions: int) -> None:
    """``versions`` versions of a table in ``project`` were found written around the registry
    (and moved to quarantine)."""
    record = _bypass
    if record is not None:
        record(project, versions)
