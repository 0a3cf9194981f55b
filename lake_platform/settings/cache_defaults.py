"""Default budgets of the query engine's caches, from the machine's memory (``query.limits``
applies them when ``LAKE_FLIGHT_CACHE_BYTES`` / ``LAKE_FLIGHT_RESULT_CACHE_BYTES`` are unset)."""

from __future__ import annotations

import os

#: The result cache's largest default budget: results are small (at most
#: ``result_cache_entry_bytes`` each), so this keeps hundreds of them.
DEFAULT_RESULT_CACHE_BYTES = 64 << 20


def default_cache_bytes(memory_limit_bytes: int) -> int:
    """A modest share of the machine's memory: 1/16 of physical RAM (0 where it cannot be read),
    and at most half of the query memory pool, so the cache stays small next to the pool it
    sits beside in the process's memory bound."""
    try:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0
    return min(ram // 16, memory_limit_bytes // 2)
