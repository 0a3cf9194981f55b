"""A part of a pinned table snapshot: the fragment ids one endpoint's ticket reads.

Inclusive id ranges, sorted and disjoint, of fragments of the *pinned* version: the version is
immutable, so the same ranges select the same fragments on any replica at any later time. This
module is the claim's form only (no DataFusion, no Lance): tickets carry it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

#: Most fragment id ranges one part may carry (a ticket claim; bounded when it is opened).
MAX_RANGES = 4096


@dataclass(frozen=True)
class Part:
    """The fragments of one pinned table a ticket reads: inclusive id ranges, sorted, disjoint."""

    table: str  # the TableRef name (project.warehouse.ns.table)
    ranges: tuple[tuple[int, int], ...]

    def __post_init__(self) -> None:
        if not self.ranges or len(self.ranges) > MAX_RANGES:
            raise ValueError("a part holds 1 to MAX_RANGES fragment ranges")
        previous = -1
        for lo, hi in self.ranges:
            if type(lo) is not int or type(hi) is not int or not previous < lo <= hi:
                raise ValueError("fragment ranges must be sorted, disjoint, non-negative ints")
            previous = hi

    def contains(self, fragment_id: int) -> bool:
        return any(lo <= fragment_id <= hi for lo, hi in self.ranges)

    def to_json(self) -> dict[str, Any]:
        return {"n": self.table, "r": [list(r) for r in self.ranges]}

    @classmethod
    def from_json(cls, obj: Any) -> Part:
        """ValueError unless ``obj`` is exactly what :meth:`to_json` writes."""
        if not isinstance(obj, dict) or set(obj) != {"n", "r"}:
            raise ValueError("malformed part")
        name, ranges = obj["n"], obj["r"]
        if not isinstance(name, str) or not isinstance(ranges, list) or len(ranges) > MAX_RANGES:
            raise ValueError("malformed part")
        if any(not isinstance(r, list) or len(r) != 2 for r in ranges):
            raise ValueError("malformed part")
        return cls(name, tuple((r[0], r[1]) for r in ranges))

    @classmethod
    def of(cls, table: str, ids: Iterable[int]) -> Part:
        """The part covering exactly ``ids`` (as few ranges as they allow)."""
        ranges: list[list[int]] = []
        for fid in sorted(set(ids)):
            if ranges and ranges[-1][1] == fid - 1:
                ranges[-1][1] = fid
            else:
                ranges.append([fid, fid])
        return cls(table, tuple((lo, hi) for lo, hi in ranges))


__all__ = ["MAX_RANGES", "Part"]
