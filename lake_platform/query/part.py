"""A part of a pinned table snapshot: the fragment ids one endpoint's ticket reads, and when it
cuts through fragments, the row addresses it reads of them.

Inclusive id ranges, sorted and disjoint, of fragments of the *pinned* version: the version is
immutable, so the same ranges select the same fragments on any replica at any later time. A part
that starts or ends inside a fragment also carries ``rows``: for each such fragment (at most two,
its first and its last) the half-open range of live-row offsets it reads (rows in scan order,
deleted rows not counted: the version's deletions are fixed too); the parts cutting one
fragment share their cut offsets, so they tile it exactly. This module is the claim's form
only (no DataFusion, no Lance): tickets carry it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

#: Most fragment id ranges one part may carry (a ticket claim; bounded when it is opened).
MAX_RANGES = 4096
#: The end offset that means "to the fragment's end" (Lance's row offsets are 32-bit).
FRAGMENT_END = 1 << 32
#: Fragments one part may cut through (its first and its last).
MAX_SLICES = 2


@dataclass(frozen=True)
class Part:
    """The fragments of one pinned table a ticket reads: inclusive id ranges, sorted, disjoint."""

    table: str  # the TableRef name (project.warehouse.ns.table)
    ranges: tuple[tuple[int, int], ...]
    #: (fragment id, first offset, end offset) of each fragment read in part (end FRAGMENT_END: to
    #: its end); the other fragments are read whole.
    rows: tuple[tuple[int, int, int], ...] = ()

    def __post_init__(self) -> None:
        if not self.ranges or len(self.ranges) > MAX_RANGES:
            raise ValueError("a part holds 1 to MAX_RANGES fragment ranges")
        previous = -1
        for lo, hi in self.ranges:
            if type(lo) is not int or type(hi) is not int or not previous < lo <= hi:
                raise ValueError("fragment ranges must be sorted, disjoint, non-negative ints")
            previous = hi
        for fid, first, end in self.rows:
            if any(type(v) is not int for v in (fid, first, end)) or not 0 <= first < end <= FRAGMENT_END:
                raise ValueError("a part's row offsets must be ints, 0 <= first < end <= 2**32")
            if not self.contains(fid):
                raise ValueError("a part cuts only fragments it reads")
        if len(self.rows) > MAX_SLICES or len({r[0] for r in self.rows}) != len(self.rows):
            raise ValueError("a part cuts through at most two fragments, each once")

    def contains(self, fragment_id: int) -> bool:
        return any(lo <= fragment_id <= hi for lo, hi in self.ranges)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"n": self.table, "r": [list(r) for r in self.ranges]}
        if self.rows:
            out["a"] = [list(r) for r in self.rows]
        return out

    @classmethod
    def from_json(cls, obj: Any) -> Part:
        """ValueError unless ``obj`` is exactly what :meth:`to_json` writes."""
        if not isinstance(obj, dict) or set(obj) not in ({"n", "r"}, {"n", "r", "a"}):
            raise ValueError("malformed part")
        rows = obj.get("a", [])
        if not isinstance(rows, list) or ("a" in obj and not rows) or len(rows) > MAX_SLICES:
            raise ValueError("malformed part")
        if any(not isinstance(r, list) or len(r) != 3 for r in rows):
            raise ValueError("malformed part")
        name, ranges = obj["n"], obj["r"]
        if not isinstance(name, str) or not isinstance(ranges, list) or len(ranges) > MAX_RANGES:
            raise ValueError("malformed part")
        if any(not isinstance(r, list) or len(r) != 2 for r in ranges):
            raise ValueError("malformed part")
        return cls(name, tuple((r[0], r[1]) for r in ranges), tuple((r[0], r[1], r[2]) for r in rows))

    @classmethod
    def of(cls, table: str, ids: Iterable[int], rows: tuple[tuple[int, int, int], ...] = ()) -> Part:
        """The part covering exactly ``ids`` (as few ranges as they allow), cut as ``rows`` says."""
        ranges: list[list[int]] = []
        for fid in sorted(set(ids)):
            if ranges and ranges[-1][1] == fid - 1:
                ranges[-1][1] = fid
            else:
                ranges.append([fid, fid])
        return cls(table, tuple((lo, hi) for lo, hi in ranges), rows)


__all__ = ["FRAGMENT_END", "MAX_RANGES", "MAX_SLICES", "Part"]
