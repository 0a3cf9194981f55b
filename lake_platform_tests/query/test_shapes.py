"""The shape of a key lookup's SQL text (``query/shapes.py``): a literal is taken out only where it
is one whole side of a conjunct's equality with a column; every other literal stays in the text,
and a text the scanner is unsure of has no shape at all."""

from __future__ import annotations

import pytest

from lake_platform.query.shapes import SLOT, Slot, prekey, shape_of

Q = "SELECT id, s FROM w.ns.keys WHERE "


@pytest.mark.parametrize(
    ("where", "text", "slots"),
    [
        ("id = 4242", f"id = {SLOT}", [("id", 4242)]),
        ("id=4242", f"id={SLOT}", [("id", 4242)]),
        ("ID = 0042", f"ID = {SLOT}", [("id", 42)]),  # an unquoted name is DataFusion's lower case
        ('"Id" = 7', f'"Id" = {SLOT}', [("Id", 7)]),
        ('"a""b" = 7', f'"a""b" = {SLOT}', [('a"b', 7)]),
        ("keys.id = 7", f"keys.id = {SLOT}", [("id", 7)]),
        ('w.ns."keys"."id" = 7', f'w.ns."keys"."id" = {SLOT}', [("id", 7)]),
        ("4242 = id", f"{SLOT} = id", [("id", 4242)]),
        ("4242 = keys.id", f"{SLOT} = keys.id", [("id", 4242)]),
        ("s = 'name-1'", f"s = {SLOT}", [("s", "name-1")]),
        ("s = ''", f"s = {SLOT}", [("s", "")]),
        ("s = 'a \"b\" é'", f"s = {SLOT}", [("s", 'a "b" é')]),
        ("id = 1 AND s = 'x'", f"id = {SLOT} AND s = {SLOT}", [("id", 1), ("s", "x")]),
        ("(id = 1) and (s = 'x');", f"(id = {SLOT}) and (s = {SLOT});", [("id", 1), ("s", "x")]),
        ("id = 5 AND x = 2.5", f"id = {SLOT} AND x = 2.5", [("id", 5)]),
    ],
)
def test_literals_compared_to_a_column_are_taken_out(
    where: str, text: str, slots: list[tuple[str, object]]
) -> None:
    shape = shape_of(Q + where)
    assert shape is not None
    assert shape.text == Q + text
    assert shape.slots == tuple(Slot(*s) for s in slots)


def test_texts_that_differ_only_in_slots_share_a_shape_and_a_prekey() -> None:
    first, second = Q + "id = 1 AND s = 'x'", Q + "id = 99 AND s = 'yy'"
    a, b = shape_of(first), shape_of(second)
    assert a is not None and b is not None and a.text == b.text and a.slots != b.slots
    assert prekey(first) == prekey(second)
    c = shape_of(Q + "id = 1 AND s = 'x' ")
    assert c is not None and c.text != a.text  # any other difference is another shape


@pytest.mark.parametrize(
    "where",
    [
        "id = 5.0",
        "id = 5e3",
        "id = .5",
        "id = 5 + 1",
        "id = 5 * 2",
        "id = 5 || 'x'",
        "id = 5 IS NULL",
        "id = 5 = true",
        "id = 5 OR id = 6",  # OR: neither literal stands where a conjunct's would
        "x + id = 5",
        "NOT id = 5",
        "id <= 5",
        "id >= 5",
        "id != 5",
        "id == 5",
        "id = (5)",
        "id = CAST(5 AS BIGINT)",
        "id IN (5, 6)",
        "f(5) = id",
        "s = 'a' 'b'",
        "id = k LIMIT 5",
    ],
)
def test_other_literals_stay_in_the_text(where: str) -> None:
    assert shape_of(Q + where) is None


@pytest.mark.parametrize(
    "sql",
    [
        Q + "id = 5 -- a comment",
        Q + "id = 5 /* a comment */",
        Q + "id = -5",
        Q + "id = $1 AND s = 'x'",
        Q + "id = ? AND s = 'x'",
        Q + "s = 'it''s'",  # an escaped quote: no slot, and nothing else to take out
        Q + "s = 'a\\b' AND id = 5",
        Q + "s = E'x' AND id = 5",
        Q + "s = 'x AND id = 5",  # unterminated
        Q + 'id = 5 AND "s = 1',
        Q + "id = 5abc",
        Q + "id = 5 AND `s` = 'x'",
        Q + "id = 5 AND s = $$x$$",
        Q + "id = 5 AND s = '\0'",
        "SELECT id FROM w.ns.keys",  # no literal at all
    ],
)
def test_a_text_the_scanner_is_unsure_of_has_no_shape(sql: str) -> None:
    assert shape_of(sql) is None


def test_literals_elsewhere_stay_in_the_text() -> None:
    shape = shape_of("SELECT id FROM w.ns.\"keys@v12\" WHERE id = 5 AND s = 'x'")
    assert shape is not None
    assert shape.text == f'SELECT id FROM w.ns."keys@v12" WHERE id = {SLOT} AND s = {SLOT}'
