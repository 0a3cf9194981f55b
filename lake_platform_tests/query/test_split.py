"""Splitting: parts partition a version's fragments (each exactly once, contiguous, balanced),
and a part's claim round-trips and refuses anything malformed."""

from __future__ import annotations

import pytest

from lake_platform.engine.fragments import FragmentSize
from lake_platform.query.part import MAX_RANGES, Part
from lake_platform.query.split import Sizing, partition


def sizes(*rows: int, start: int = 0) -> list[FragmentSize]:
    return [FragmentSize(start + i, n, n * 10) for i, n in enumerate(rows)]


@pytest.mark.parametrize(
    ("rows", "sizing", "count"),
    [
        ([100] * 8, Sizing(200, 1 << 40, 16), 4),
        ([100] * 8, Sizing(200, 1 << 40, 3), 3),
        ([100] * 8, Sizing(1000, 1 << 40, 16), None),  # small: one endpoint
        ([100] * 8, Sizing(1000, 100, 5), 5),  # bytes decide
        ([1000, 0, 0, 0, 0], Sizing(100, 1 << 40, 4), 4),  # empty fragments still placed
        ([5000], Sizing(100, 1 << 40, 4), None),  # one fragment cannot split
        ([0, 0, 0, 900], Sizing(100, 1 << 40, 4), 4),
    ],
)
def test_parts_cover_every_fragment_once(rows: list[int], sizing: Sizing, count: int | None) -> None:
    frags = sizes(*rows, start=3)
    parts = partition("p.w.ns.t", frags, sizing)
    if count is None:
        assert parts is None
        return
    assert parts is not None and len(parts) == count
    owners = [[p for p in parts if p.contains(f.id)] for f in frags]
    assert all(len(o) == 1 for o in owners)
    assert not any(p.contains(2) or p.contains(3 + len(rows)) for p in parts)


def test_parts_are_balanced() -> None:
    parts = partition("t", sizes(*[100] * 12), Sizing(300, 1 << 40, 4))
    assert parts is not None
    assert [p.ranges for p in parts] == [((0, 2),), ((3, 5),), ((6, 8),), ((9, 11),)]


def test_gaps_in_fragment_ids_make_ranges() -> None:
    part = Part.of("t", [1, 2, 3, 7, 9, 10])
    assert part.ranges == ((1, 3), (7, 7), (9, 10))
    assert Part.from_json(part.to_json()) == part
    assert [i for i in range(12) if part.contains(i)] == [1, 2, 3, 7, 9, 10]


@pytest.mark.parametrize(
    "claim",
    [
        None,
        [],
        {"n": "t"},
        {"n": "t", "r": []},
        {"n": "t", "r": [[2, 1]]},
        {"n": "t", "r": [[0, 2], [2, 3]]},
        {"n": "t", "r": [[3, 4], [0, 1]]},
        {"n": "t", "r": [[-1, 1]]},
        {"n": "t", "r": [[0, 1.5]]},
        {"n": "t", "r": [[True, 1]]},
        {"n": "t", "r": [[0, 1, 2]]},
        {"n": 5, "r": [[0, 1]]},
        {"n": "t", "r": [[0, 1]], "x": 1},
        {"n": "t", "r": [[2 * i, 2 * i] for i in range(MAX_RANGES + 1)]},
    ],
)
def test_malformed_parts_are_refused(claim: object) -> None:
    with pytest.raises(ValueError):
        Part.from_json(claim)
