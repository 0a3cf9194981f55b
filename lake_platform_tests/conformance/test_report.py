"""The pass table's arithmetic: an operation's outcome from its checks, and when a run is ok."""

from __future__ import annotations

from lake_platform.conformance.registry import Outcome
from lake_platform.conformance.report import Report, Result, summary_line

PASS, FAIL, UNSUPPORTED, SKIPPED = Outcome.PASS, Outcome.FAIL, Outcome.UNSUPPORTED, Outcome.SKIPPED


def report(*results: tuple[str, str, Outcome], cleaned_up: bool = True) -> Report:
    out = Report("http://x", ["conformance_1"], cleaned_up=cleaned_up)
    out.results = [Result(op, aspect, outcome) for op, aspect, outcome in results]
    return out


def test_an_operation_fails_if_any_check_fails_and_is_unsupported_before_it_passes() -> None:
    r = report(
        ("A", "success", PASS),
        ("A", "TableNotFound", FAIL),
        ("B", "success", UNSUPPORTED),
        ("B", "TableNotFound", PASS),
        ("C", "success", UNSUPPORTED),
        ("C", "Conflict", SKIPPED),
        ("D", "success", SKIPPED),
        ("E", "success", PASS),
    )
    assert r.operations() == {"A": FAIL, "B": UNSUPPORTED, "C": UNSUPPORTED, "D": SKIPPED, "E": PASS}
    data = r.to_dict()
    assert data["operations"] == {"pass": 1, "fail": 1, "not supported": 2, "skipped": 1}
    assert data["summary"] == {"pass": 3, "fail": 1, "not supported": 2, "skipped": 2}
    assert summary_line(data) == (
        "operations: 1 pass, 1 fail, 2 not supported, 1 skipped;"
        " checks: 3 pass, 1 fail, 2 not supported, 2 skipped; cleaned up"
    )


def test_ok_means_no_failure_and_nothing_left_behind() -> None:
    assert report(("A", "success", PASS), ("B", "success", UNSUPPORTED)).ok
    assert not report(("A", "success", FAIL)).ok
    left = report(("A", "success", PASS), cleaned_up=False)
    left.leftovers = ["p$w$conformance_1"]
    assert not left.ok
    assert summary_line(left.to_dict()).endswith("; left behind: p$w$conformance_1")
