"""The resources' settings: what an empty field takes from LakeSettings."""

from __future__ import annotations

from pathlib import Path

import pytest

from lake_platform.defs.resources import InboxResource, LakeResource


def test_the_inbox_settles_files_for_lake_inbox_settle_seconds_unless_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shipped code location builds InboxResource with no settle time: an operator sets
    LAKE_INBOX_SETTLE_SECONDS (lake up's sensor once always waited the coded 1 s)."""
    monkeypatch.setenv("LAKE_INBOX_SETTLE_SECONDS", "30")
    lake = LakeResource(home=str(tmp_path / "home"))
    assert InboxResource(lake=lake).open().settle_seconds == 30.0
    assert InboxResource(lake=lake, settle_seconds=0).open().settle_seconds == 0.0
