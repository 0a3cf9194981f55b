from __future__ import annotations

import pytest

from lake_platform.errors import InvalidInput
from lake_platform.naming import NamespaceName, ProjectName, TableName, WarehouseName

BAD_SEGMENTS = [
    "",
    "A",
    "Upper",
    "a-b",
    "a/b",
    "..",
    ".",
    "a b",
    "ünïcode",
    "1abc",
    "a" * 64,
    "a\x00b",
    "tab\t",
]


@pytest.mark.parametrize("segment", BAD_SEGMENTS)
def test_every_class_of_bad_segment_is_rejected(segment: str) -> None:
    with pytest.raises(InvalidInput):
        TableName.parse(f"p.w.{segment}.t")
    with pytest.raises(InvalidInput):
        TableName.parse(f"p.w.ns.{segment}")
    with pytest.raises(InvalidInput):
        ProjectName.parse(segment)


@pytest.mark.parametrize(
    "text", ["p", "p.w", "p.w.ns", "p..ns.t", ".p.w.ns.t", "p.w.ns.t.", "p/w/ns/t", None, 42]
)
def test_wrong_shapes_are_rejected(text: object) -> None:
    with pytest.raises(InvalidInput):
        TableName.parse(text)


def test_valid_names_round_trip() -> None:
    t = TableName.parse("p.w.ns.sub.t")
    assert (t.project, t.warehouse, t.namespace, t.table) == ("p", "w", ("ns", "sub"), "t")
    assert str(t) == "p.w.ns.sub.t" and t.parts == ["p", "w", "ns", "sub", "t"]
    assert t.namespace_name == NamespaceName("p", "w", ("ns", "sub"))
    assert t.namespace_name.parent == NamespaceName("p", "w", ("ns",))
    assert NamespaceName.parse("p.w.ns").parent == WarehouseName("p", "w")
    assert TableName.parse("_a.b_2.c." + "z" * 63).table == "z" * 63


def test_table_id_lists_are_checked() -> None:
    assert str(TableName.from_parts(["p", "w", "ns", "t"])) == "p.w.ns.t"
    with pytest.raises(InvalidInput):
        TableName.from_parts(["p", "w", "../etc", "t"])
    with pytest.raises(InvalidInput):
        TableName.from_parts("p.w.ns.t")  # type: ignore[arg-type]
    # A dot is the separator: a segment holding one would name another namespace or table.
    for dotted in (["p", "w", "ns.sub", "t"], ["p", "w", "ns", "sub.t"], ["p.w", "ns", "t"]):
        with pytest.raises(InvalidInput, match="segment"):
            TableName.from_parts(dotted)


def test_huge_names_are_rejected_early() -> None:
    with pytest.raises(InvalidInput):
        TableName.parse(".".join(["a"] * 600))


def test_message_names_the_input() -> None:
    with pytest.raises(InvalidInput, match="'Demo.x.y.z'"):
        TableName.parse("Demo.x.y.z")
