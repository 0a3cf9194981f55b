"""Time sources, injectable so lease expiry can be tested without waiting."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (local deadlines)."""

    def wall_ms(self) -> int:
        """Milliseconds since the epoch (deadlines other machines compare against)."""


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def wall_ms(self) -> int:
        return int(time.time() * 1000)


class ManualClock:
    """A clock tests move by hand."""

    def __init__(self, start_monotonic: float = 1000.0, start_wall_ms: int | None = None) -> None:
        self._mono = start_monotonic
        self._wall = start_wall_ms if start_wall_ms is not None else int(time.time() * 1000)

    def monotonic(self) -> float:
        return self._mono

    def wall_ms(self) -> int:
        return self._wall

    def advance(self, seconds: float) -> None:
        self._mono += seconds
        self._wall += int(seconds * 1000)
