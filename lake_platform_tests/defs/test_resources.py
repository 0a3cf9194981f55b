"""The resources' settings: what an empty field takes from LakeSettings; and their config as an
operator sets it: a value the resource cannot use is refused where it is given, naming the
field, before any run lists or writes anything."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

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


@pytest.mark.parametrize("location", ["s3://", "s3:///prefix", "s3://Bad Bucket/x", "ftp://host/inbox"])
def test_an_inbox_location_no_inbox_can_be_opened_at_is_refused_by_field(location: str) -> None:
    with pytest.raises(
        ValidationError, match=r"location\n  Value error, the inbox location is a local folder or s3://"
    ):
        InboxResource(lake=LakeResource(), location=location)


@pytest.mark.parametrize(
    "location", ["", "/srv/inbox", "file:///srv/inbox", "s3://bucket", "s3://my.bucket-1/in/box"]
)
def test_the_inbox_locations_the_docs_name_are_taken(location: str) -> None:
    assert InboxResource(lake=LakeResource(), location=location).location == location
