"""The depth bound of ``query.sql.check_depth`` read from the text (the endpoint's refusal of
deep queries, and that the process lives: flight/test_deep_expressions.py)."""

from __future__ import annotations

import pytest

from lake_platform.errors import InvalidInput
from lake_platform.query.sql import (
    MAX_DEPTH,
    MAX_PARAMETERS,
    check_depth,
    check_query,
    qualify_nested,
    rewrite_placeholders,
)


def refused(sql: str, limit: int = 10) -> bool:
    try:
        check_depth(sql, limit)
    except InvalidInput as exc:
        assert "operators deep" in exc.message
        return True
    return False


def test_a_chain_counts_each_operator_and_word() -> None:
    assert not refused("SELECT " + "1+" * 10 + "1")
    assert refused("SELECT " + "1+" * 11 + "1")
    assert refused("SELECT 1 FROM t WHERE " + " OR ".join(["a"] * 12))
    assert refused("SELECT s" + " || s" * 11)
    assert refused(" UNION ALL ".join(["SELECT 1"] * 12))
    assert refused("SELECT a" + "[1]" * 11)


def test_inner_levels_add_to_the_level_they_are_in() -> None:
    assert refused("SELECT (((1+1+1+1) + 1+1+1) + 1+1+1) + 1+1")  # 3 + 3 + 3 + 2 operators
    assert not refused("SELECT (((1+1+1+1) + 1+1+1) + 1+1+1)")
    assert refused("SELECT f(1+1+1+1+1+1+1) + 1+1+1+1+1")  # 6 + 6
    assert refused("SELECT CASE WHEN a THEN 1+1+1+1+1+1+1 END + 1+1+1+1+1")  # 6 + 5
    assert refused("SELECT (" + "1+" * 12)  # unclosed: counted all the same


def test_lists_clauses_and_branches_are_as_deep_as_their_deepest_item() -> None:
    assert not refused("SELECT " + ", ".join(["a + b + c"] * 100) + " FROM t WHERE x + y = 1 ORDER BY a + b")
    assert not refused("SELECT 1 FROM t WHERE a IN (" + ", ".join(map(str, range(1000))) + ")")
    assert not refused("SELECT CASE " + " ".join(f"WHEN a = {i} THEN {i} + 1" for i in range(100)) + " END")


def test_strings_quoted_names_and_comments_do_not_count() -> None:
    text = "+" * 50
    assert not refused(f"SELECT '{text}', \"{text}\" /* {text} */ -- {text}\n")


def test_check_query_applies_the_bound() -> None:
    with pytest.raises(InvalidInput, match=f"more than {MAX_DEPTH} operators deep"):
        check_query("SELECT " + "1+" * (MAX_DEPTH + 1) + "1", 1 << 20)
    assert check_query("SELECT " + "1+" * MAX_DEPTH + "1", 1 << 20)


#: Strings DataFusion reads differently from a plain '...': text the checks must not skip.
QUOTED_TWICE = ("E'\\''", "e'\\\\', 'x'", "$$'$$", "$q$'$q$", "`a'b`")


@pytest.mark.parametrize("opening", QUOTED_TWICE)
def test_what_follows_an_escaped_or_dollar_quoted_string_is_read_as_sql(opening: str) -> None:
    """E'\\'' ends where DataFusion ends it: read as a plain string it ran on to the next quote,
    so a deep chain after it was skipped (a crash past the bound) and rewrites changed it."""
    assert refused(f"SELECT {opening}, " + "1+" * 20 + "1 AS x, 'a'")
    assert qualify_nested(f"SELECT {opening}, 'w.ns.sub.u' AS a", lambda w, ns: True) == (
        f"SELECT {opening}, 'w.ns.sub.u' AS a"
    )
    assert rewrite_placeholders(f"SELECT {opening}, '?', ? AS a") == (f"SELECT {opening}, '?', $1 AS a", 1)


def test_dollar_quotes_and_placeholders_are_told_apart() -> None:
    assert rewrite_placeholders("SELECT $$?$$, $1") == ("SELECT $$?$$, $1", 1)
    assert rewrite_placeholders("SELECT $a$ $1 ? $a$") == ("SELECT $a$ $1 ? $a$", 0)


def test_a_placeholder_number_past_the_limit_is_invalid_and_names_it() -> None:
    assert rewrite_placeholders(f"SELECT ${MAX_PARAMETERS}") == (f"SELECT ${MAX_PARAMETERS}", MAX_PARAMETERS)
    # $n past the limit: a prepared statement's parameter schema had that many fields (1e20:
    # the server built it until memory ran out); past 4,300 digits int() itself raised.
    for n in (str(MAX_PARAMETERS + 1), "99999999999999999999", "9" * 5000):
        with pytest.raises(InvalidInput, match=f"at most {MAX_PARAMETERS} parameters"):
            rewrite_placeholders(f"SELECT ${n}")
    with pytest.raises(InvalidInput, match=f"at most {MAX_PARAMETERS} parameters"):
        rewrite_placeholders("SELECT " + ", ".join("?" * (MAX_PARAMETERS + 1)))
