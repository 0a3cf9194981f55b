"""Lance's Rust panics as ordinary Python errors.

A panic inside Lance reaches Python as pyo3's ``PanicException``, which derives from
``BaseException``, not ``Exception``. Every ``except Exception`` above the engine lets it
through: the resolution of a failed commit (invariant 5: did it land anyway?), the tidying of a
create that failed, the CLI's and the REST server's typed errors. pylance 14.0.2 panics, for
example, writing a fixed-size list of strings; ``lake table create`` then ended in a traceback
and left the new table's folder behind. :func:`engine_call` turns a panic into
:class:`EnginePanic`, an ``Exception``, at the engine's boundary, so it takes the path of every
other engine failure.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


class EnginePanic(RuntimeError):
    """Lance panicked (a bug in Lance, or input it cannot handle); the message is the panic's."""


def is_panic(exc: BaseException) -> bool:
    """Whether ``exc`` is pyo3's ``PanicException`` (pyo3 does not export the class: it is made
    when the first panic crosses into Python)."""
    return type(exc).__name__ == "PanicException" and not isinstance(exc, Exception)


def is_error(exc: BaseException) -> bool:
    """Whether ``exc`` is an error to answer (an ``Exception``, or a Lance panic), not something
    to let pass on (``GeneratorExit``, an interrupt): what a handler catching ``BaseException``
    asks so as not to miss a panic."""
    return isinstance(exc, Exception) or is_panic(exc)


def engine_call(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn`` with a Lance panic raised as :class:`EnginePanic`; every other error as it is."""

    @functools.wraps(fn)
    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except BaseException as exc:
            if is_panic(exc):
                raise EnginePanic(f"Lance panicked: {exc}") from exc
            raise

    return call


__all__ = ["EnginePanic", "engine_call", "is_error", "is_panic"]
