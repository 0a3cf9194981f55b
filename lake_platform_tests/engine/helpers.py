"""A real Lance panic, for the tests of what the platform does with one."""

from __future__ import annotations

from pathlib import Path

import lance
import pyarrow as pa

from lake_platform.engine.panics import is_panic

#: pylance 14.0.2 panics writing a fixed-size list of strings (when an upgrade stops panicking
#: here, find another panic: the tests that use it fail, they do not pass vacuously).
PANICS = pa.table({"w": pa.array([["a"], ["b"]], pa.list_(pa.string(), 1))})


def lance_panic(folder: Path) -> BaseException:
    """The exception a real Lance panic raises: pyo3's PanicException, a BaseException."""
    try:
        lance.write_dataset(PANICS, folder / "panics")
    except BaseException as exc:  # noqa: BLE001 - pyo3's PanicException is one
        assert is_panic(exc)
        return exc
    raise AssertionError("pylance no longer panics here: find another panic")
