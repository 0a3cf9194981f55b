"""A check's set-up calls: their failure skips the check instead of being charged to it."""

from __future__ import annotations

import pytest

from lake_platform.conformance.registry import CheckFailed, NotSupported, Skipped, prerequisite


def test_a_failed_or_unsupported_prerequisite_skips_the_check() -> None:
    with pytest.raises(Skipped, match=r"needs a table \(CreateTable\): expected 200, got 500"):
        with prerequisite("a table (CreateTable)"):
            raise CheckFailed("expected 200, got 500")
    with pytest.raises(Skipped, match="needs a tag: no tags here"):
        with prerequisite("a tag"):
            raise NotSupported("no tags here")


def test_what_follows_the_prerequisite_is_still_judged() -> None:
    with pytest.raises(CheckFailed, match="wrong"):
        with prerequisite("a table"):
            pass
        raise CheckFailed("wrong")
