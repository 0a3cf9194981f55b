"""Commit-log times: a process never stamps two log entries with the same millisecond."""

from __future__ import annotations

from lake_platform.registry.records import log_ms, now_ms


def test_log_times_strictly_increase_within_a_process() -> None:
    stamps = [log_ms() for _ in range(2000)]  # far more than one per millisecond
    assert all(a < b for a, b in zip(stamps, stamps[1:], strict=False))
    assert stamps[0] >= now_ms() - 10_000  # still the wall clock, not a counter from zero
