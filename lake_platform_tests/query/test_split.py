"""Splitting: parts cut a version's rows into ``ceil(rows / target)`` runs of about equal live
rows, whatever the fragment layout (each fragment whole in one part, or tiled by the row
offsets of the parts that cut it), and a part's claim round-trips and refuses anything
malformed."""

from __future__ import annotations

import math

import pytest

from lake_platform.engine.fragments import FragmentSize
from lake_platform.query.part import FRAGMENT_END, MAX_RANGES, Part
from lake_platform.query.split import Sizing, partition


def sizes(*rows: int, start: int = 0) -> list[FragmentSize]:
    return [FragmentSize(start + i, n, n * 10) for i, n in enumerate(rows)]


def pieces(parts: list[Part], frags: list[FragmentSize]) -> dict[int, list[tuple[int, int]]]:
    """Per fragment id, the (first, end) offsets each part reads of it, in part order."""
    out: dict[int, list[tuple[int, int]]] = {f.id: [] for f in frags}
    for part in parts:
        cut = {fid: (first, end) for fid, first, end in part.rows}
        for f in frags:
            if part.contains(f.id):
                out[f.id].append(cut.get(f.id, (0, FRAGMENT_END)))
    return out


def read_rows(part: Part, frags: list[FragmentSize]) -> int:
    """Live rows the part reads (the fragments here have no deletions)."""
    cut = {fid: (first, end) for fid, first, end in part.rows}
    total = 0
    for f in frags:
        if part.contains(f.id):
            first, end = cut.get(f.id, (0, FRAGMENT_END))
            total += min(end, f.rows) - first
    return total


@pytest.mark.parametrize(
    ("rows", "sizing", "count"),
    [
        ([100] * 8, Sizing(200, 1 << 40, 16), 4),
        ([100] * 8, Sizing(200, 1 << 40, 3), 3),
        ([100] * 8, Sizing(1000, 1 << 40, 16), None),  # small: one endpoint
        ([100] * 8, Sizing(1000, 100, 5), 5),  # bytes decide
        ([1000, 0, 0, 0, 0], Sizing(100, 1 << 40, 4), 4),  # empty fragments still placed
        ([5000], Sizing(100, 1 << 40, 4), 4),  # one fragment splits by rows
        ([0, 0, 0, 900], Sizing(100, 1 << 40, 4), 4),
        ([1_000_000], Sizing(200_000, 1 << 40, 8), 5),  # one ingest: ceil(rows / target)
        ([700, 50, 700], Sizing(200, 1 << 40, 16), 8),
        ([3], Sizing(1, 1 << 40, 16), 3),  # never more parts than rows
    ],
)
def test_parts_tile_every_fragment(rows: list[int], sizing: Sizing, count: int | None) -> None:
    frags = sizes(*rows, start=3)
    parts = partition("p.w.ns.t", frags, sizing)
    if count is None:
        assert parts is None
        return
    assert parts is not None and len(parts) == count
    for fid, read in pieces(parts, frags).items():
        assert read, f"fragment {fid} is read by no part"
        assert read[0][0] == 0 and read[-1][1] == FRAGMENT_END
        assert all(a[1] == b[0] for a, b in zip(read, read[1:], strict=False)), read
    assert not any(p.contains(2) or p.contains(3 + len(rows)) for p in parts)
    assert sum(read_rows(p, frags) for p in parts) == sum(rows)
    share = sum(rows) / count
    assert all(abs(read_rows(p, frags) - share) <= max(rows) for p in parts)


def test_one_fragment_splits_into_equal_row_ranges() -> None:
    frags = sizes(1_000_000, start=7)
    parts = partition("t", frags, Sizing(200_000, 1 << 40, 8))
    assert parts is not None
    assert [p.rows for p in parts] == [
        ((7, 0, 200_000),),
        ((7, 200_000, 400_000),),
        ((7, 400_000, 600_000),),
        ((7, 600_000, 800_000),),
        ((7, 800_000, FRAGMENT_END),),
    ]
    assert len(parts) == math.ceil(1_000_000 / 200_000)


def test_whole_fragments_need_no_row_ranges() -> None:
    parts = partition("t", sizes(*[100] * 12), Sizing(300, 1 << 40, 4))
    assert parts is not None
    assert [p.ranges for p in parts] == [((0, 2),), ((3, 5),), ((6, 8),), ((9, 11),)]
    assert all(p.rows == () for p in parts)


def test_fragments_no_bigger_than_a_part_are_never_cut() -> None:
    parts = partition("t", sizes(429, 428, 500, 500, 500, 500, 500, 500), Sizing(1000, 1 << 40, 4))
    assert parts is not None and len(parts) == 4
    assert all(p.rows == () for p in parts)
    mixed = partition("t", sizes(100, 2000, 100), Sizing(550, 1 << 40, 8))
    assert mixed is not None and len(mixed) == 4
    assert [p.rows for p in mixed][0] == ((1, 0, 450),)  # the small first fragment stays whole


def test_gaps_in_fragment_ids_make_ranges() -> None:
    part = Part.of("t", [1, 2, 3, 7, 9, 10])
    assert part.ranges == ((1, 3), (7, 7), (9, 10))
    assert Part.from_json(part.to_json()) == part
    assert [i for i in range(12) if part.contains(i)] == [1, 2, 3, 7, 9, 10]
    cut = Part.of("t", [1, 2, 3], ((1, 50, FRAGMENT_END), (3, 0, 20)))
    assert Part.from_json(cut.to_json()) == cut
    assert cut.to_json()["a"] == [[1, 50, FRAGMENT_END], [3, 0, 20]]


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
        {"n": "t", "r": [[0, 1]], "a": []},  # no cut is written as no "a"
        {"n": "t", "r": [[0, 1]], "a": None},
        {"n": "t", "r": [[0, 1]], "a": [[0, 5]]},
        {"n": "t", "r": [[0, 1]], "a": [[0, 5, 5]]},  # empty range
        {"n": "t", "r": [[0, 1]], "a": [[0, -1, 5]]},
        {"n": "t", "r": [[0, 1]], "a": [[0, 0, FRAGMENT_END + 1]]},
        {"n": "t", "r": [[0, 1]], "a": [[2, 0, 5]]},  # a fragment the part does not read
        {"n": "t", "r": [[0, 1]], "a": [[0, 0, 5], [0, 5, 9]]},  # one fragment cut twice
        {"n": "t", "r": [[0, 3]], "a": [[0, 0, 5], [1, 0, 5], [2, 0, 5]]},
        {"n": "t", "r": [[0, 1]], "a": [[0, 0, 5.0]]},
        {"n": "t", "r": [[0, 1]], "a": [[[0], 0, 5]]},
    ],
)
def test_malformed_parts_are_refused(claim: object) -> None:
    with pytest.raises(ValueError):
        Part.from_json(claim)
