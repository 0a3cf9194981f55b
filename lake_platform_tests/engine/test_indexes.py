"""Which index kind takes which column type (``engine.indexes.unsuitable``) agrees with what the
pinned Lance builds: for each kind and each of these types, the check refuses exactly what
``create_scalar_index`` refuses, so the catalog says so before any work, as a typed error,
and a policy skips it (a Lance upgrade that changes its rules fails here). The full-text
options (``index_options``) likewise: refused exactly when Lance refuses the value."""

from __future__ import annotations

import datetime
import decimal
from pathlib import Path

import lance
import pyarrow as pa
import pytest

from lake_platform.engine.indexes import (
    BASE_TOKENIZERS,
    FULL_TEXT_OPTIONS,
    KINDS,
    LANGUAGES,
    MAX_TOKEN_LENGTH,
    index_options,
    unsuitable,
)

ROWS = 20
TEXT = [f"s{i}" for i in range(ROWS)]
COLUMNS = {
    "int8": pa.array(range(ROWS), pa.int8()),
    "uint64": pa.array(range(ROWS), pa.uint64()),
    "float16": pa.array(range(ROWS), pa.float32()).cast(pa.float16()),
    "float32": pa.array(range(ROWS), pa.float32()),
    "float64": pa.array([i / 3 for i in range(ROWS)]),
    "bool": pa.array([i % 2 == 0 for i in range(ROWS)]),
    "string": pa.array(TEXT),
    "large_string": pa.array(TEXT, pa.large_string()),
    "string_view": pa.array(TEXT, pa.string_view()),
    "binary": pa.array([t.encode() for t in TEXT]),
    "large_binary": pa.array([t.encode() for t in TEXT], pa.large_binary()),
    "binary_view": pa.array([t.encode() for t in TEXT], pa.binary_view()),
    "fixed_size_binary": pa.array([b"%04d" % i for i in range(ROWS)], pa.binary(4)),
    "decimal128": pa.array([decimal.Decimal(i) for i in range(ROWS)], pa.decimal128(10, 2)),
    "decimal256": pa.array([decimal.Decimal(i) for i in range(ROWS)], pa.decimal256(40, 2)),
    "date32": pa.array([datetime.date(2020, 1, 1 + i) for i in range(ROWS)]),
    "date64": pa.array([datetime.date(2020, 1, 1 + i) for i in range(ROWS)], pa.date64()),
    "time32": pa.array([datetime.time(0, 0, i) for i in range(ROWS)], pa.time32("s")),
    "time64": pa.array([datetime.time(0, 0, i) for i in range(ROWS)], pa.time64("us")),
    "timestamp": pa.array([datetime.datetime(2020, 1, 1, 0, 0, i) for i in range(ROWS)], pa.timestamp("us")),
    "timestamp_utc": pa.array(range(ROWS), pa.timestamp("us", "UTC")),
    "duration": pa.array(range(ROWS), pa.duration("s")),
    "list_string": pa.array([[t] for t in TEXT]),
    "large_list_string": pa.array([[t] for t in TEXT], pa.large_list(pa.string())),
    "list_large_string": pa.array([[t] for t in TEXT], pa.list_(pa.large_string())),
    "list_int": pa.array([[i] for i in range(ROWS)]),
    "list_bool": pa.array([[i % 2 == 0] for i in range(ROWS)]),
    "list_date": pa.array([[datetime.date(2020, 1, 1 + i)] for i in range(ROWS)]),
    "list_list_string": pa.array([[[t]] for t in TEXT]),
    "list_struct": pa.array([[{"a": i}] for i in range(ROWS)]),
    "dictionary": pa.array(TEXT).dictionary_encode(),
    "struct": pa.array([{"a": i} for i in range(ROWS)]),
}


def lance_builds(folder: Path, column: pa.Array, kind: str) -> bool:
    ds = lance.write_dataset(pa.table({"c": column}), folder)
    try:
        ds.create_scalar_index("c", kind)
    except Exception:  # noqa: BLE001 - Lance refuses with errors of several types
        return False
    return True


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("name", list(COLUMNS))
def test_the_check_refuses_exactly_what_lance_refuses(tmp_path: Path, name: str, kind: str) -> None:
    column = COLUMNS[name]
    built = lance_builds(tmp_path / "t", column, kind)
    reason = unsuitable(kind, column.type)
    assert (reason is None) == built, (
        f"{kind} on {column.type}: Lance {'builds' if built else 'refuses'}, {reason}"
    )
    if reason is not None:
        assert reason.startswith(f"{kind.lower()} indexes take ") and str(column.type) in reason


#: Full-text option values, each with whether the pinned Lance builds with it.
OPTION_VALUES = [
    *(("language", lang, True) for lang in LANGUAGES),
    *(("base_tokenizer", tok, True) for tok in BASE_TOKENIZERS),
    ("language", "Klingon", False),
    ("base_tokenizer", "bogus", False),
    ("base_tokenizer", "jieba/default", False),  # needs a language model the server has not
    ("max_token_length", 0, True),
    ("max_token_length", MAX_TOKEN_LENGTH, True),
    ("max_token_length", MAX_TOKEN_LENGTH + 1, False),
    ("max_token_length", -1, False),
    *(
        (o, True, True)
        for o in FULL_TEXT_OPTIONS
        if o not in ("language", "base_tokenizer", "max_token_length")
    ),
    ("stem", "yes", False),
    ("lower_case", 1, False),
]


@pytest.mark.parametrize(("option", "value", "builds"), OPTION_VALUES)
def test_full_text_options_are_refused_exactly_when_lance_refuses_them(
    tmp_path: Path, option: str, value: object, builds: bool
) -> None:
    ds = lance.write_dataset(pa.table({"c": ["the quick brown fox"]}), tmp_path / "t")
    try:
        ds.create_scalar_index("c", "INVERTED", **{option: value})
        built = True
    except Exception:  # noqa: BLE001 - Lance refuses with errors of several types
        built = False
    assert built == builds, f"{option}={value!r}"
    if builds:
        assert index_options("INVERTED", {option: value}) == {option: value}
    else:
        with pytest.raises(ValueError, match=option):
            index_options("INVERTED", {option: value})


def test_options_are_spelled_as_lance_takes_them_and_belong_to_inverted_indexes() -> None:
    asked = {"language": " french", "base_tokenizer": "ICU/Split", "stem": None, "lower_case": False}
    assert index_options("INVERTED", asked) == {
        "language": "French",
        "base_tokenizer": "icu/split",
        "lower_case": False,
    }
    with pytest.raises(ValueError, match="language applies to inverted .* not to btree"):
        index_options("BTREE", {"language": "English"})
    with pytest.raises(ValueError, match="unknown index option 'tokenizer'"):
        index_options("INVERTED", {"tokenizer": "simple"})
    assert index_options("BTREE", {"stem": None}) == {}
