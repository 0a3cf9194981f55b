"""Ids on the wire: a request's ``?delimiter=`` is held to the rule the configured delimiter
follows (no letter, digit, ``_``, ``/`` or space), since a delimiter a name may contain makes one
id name two tables."""

from __future__ import annotations

import pytest

from lake_platform.errors import InvalidInput
from lake_platform.rest.ids import check_delimiter
from lake_platform_tests.rest.conftest import RestLake


def test_a_delimiter_a_name_may_contain_is_refused(rest_lake: RestLake) -> None:
    """With ``?delimiter=_`` the table ``p.w.ns.a_b`` was listed as ``p_w_ns_a_b``, which the
    server then read as table ``b`` of namespace ``p.w.ns.a``: a describe (or a drop) by the
    listed id reached the other table."""
    catalog = rest_lake.catalog
    catalog.containers.create_namespace("p.w.ns.a")
    for name in ("p.w.ns.a_b", "p.w.ns.a.b"):
        assert rest_lake.post(f"/v1/table/{name.replace('.', '$')}/declare", {}).status_code == 200
    for delimiter in ("_", "a", "0", "w", " ", "/", "ns"):
        listed = rest_lake.get("/v1/table", params={"delimiter": delimiter, "include_declared": "true"})
        assert (listed.status_code, listed.json()["code"]) == (400, 13), (delimiter, listed.text)
        described = rest_lake.post("/v1/table/p_w_ns_a_b/describe", {}, params={"delimiter": delimiter})
        assert (described.status_code, described.json()["code"]) == (400, 13), (delimiter, described.text)
    for delimiter in (".", "::", "|"):
        listed = rest_lake.get("/v1/table", params={"delimiter": delimiter, "include_declared": "true"})
        assert listed.status_code == 200, listed.text
        wanted = {delimiter.join(name.split(".")) for name in ("p.w.ns.a_b", "p.w.ns.a.b")}
        assert wanted <= set(listed.json()["tables"]), listed.text


@pytest.mark.parametrize("delimiter", ["", "x" * 9, "$\x00", "é"])
def test_a_delimiter_is_short_printable_and_not_a_name_character(delimiter: str) -> None:
    with pytest.raises(InvalidInput):
        check_delimiter(delimiter)
