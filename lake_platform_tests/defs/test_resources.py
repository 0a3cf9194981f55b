"""The resources' config as an operator sets it: a value the resource cannot use is refused
where it is given, naming the field, before any run lists or writes anything."""

import pytest
from pydantic import ValidationError

from lake_platform.defs.resources import InboxResource, LakeResource


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
