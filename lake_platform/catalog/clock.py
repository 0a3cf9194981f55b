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
