"""Lance scalar indexes: build, refresh, drop and describe (pylance 14.0.2).

An index build, refresh or drop is a Lance commit like any other: called on a dataset opened
through the catalog's bound namespace, Lance registers the new version with the registry
(managed versioning), so these functions never decide a version number themselves.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from lake_platform.engine.lance_engine import lance_module
from lake_platform.engine.panics import engine_call

if TYPE_CHECKING:
    import lance
    import pyarrow as pa

#: The scalar index kinds the platform builds, as pylance 14.0.2's ``create_scalar_index`` names
#: them, and the type name its ``list_indices`` reports for each. RTREE (geometry) and
#: MINHASHLSH (near-duplicate search) are left out: no column type here uses them.
KINDS: dict[str, str] = {
    "BTREE": "BTree",
    "BITMAP": "Bitmap",
    "ZONEMAP": "ZoneMap",
    "BLOOMFILTER": "BloomFilter",
    "INVERTED": "Inverted",
    "NGRAM": "NGram",
    "LABEL_LIST": "LabelList",
}
#: Other spellings pylance accepts for the same kind.
ALIASES = {"FTS": "INVERTED"}
_BY_TYPE = {v: k for k, v in KINDS.items()}


def normalize_kind(kind: object) -> str:
    """``btree`` → ``BTREE``, ``fts`` → ``INVERTED``; ValueError naming the kinds otherwise."""
    text = kind.strip().upper() if isinstance(kind, str) else ""
    text = ALIASES.get(text, text)
    if text not in KINDS:
        raise ValueError(f"unknown index kind {kind!r}: use one of {', '.join(k.lower() for k in KINDS)}")
    return text


def _strings(t: pa.DataType) -> bool:
    import pyarrow as pa

    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)


def _binary(t: pa.DataType) -> bool:
    import pyarrow as pa

    return pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t)


def _ordered(t: pa.DataType) -> bool:
    import pyarrow as pa

    return (
        pa.types.is_integer(t)
        or pa.types.is_floating(t)
        or pa.types.is_boolean(t)
        or pa.types.is_decimal(t)
        or pa.types.is_temporal(t)
        or pa.types.is_fixed_size_binary(t)
        or _strings(t)
        or _binary(t)
    )


def _hashed(t: pa.DataType) -> bool:
    import pyarrow as pa

    refused = (
        pa.types.is_boolean(t)
        or pa.types.is_float16(t)
        or pa.types.is_decimal(t)
        or pa.types.is_duration(t)
        or pa.types.is_fixed_size_binary(t)
    )
    return _ordered(t) and not refused


def _texts(t: pa.DataType) -> bool:
    return _strings(t) or (_lists(t) and _strings(t.value_type))


def _lists(t: pa.DataType) -> bool:
    import pyarrow as pa

    return pa.types.is_list(t) or pa.types.is_large_list(t)


def _labels(t: pa.DataType) -> bool:
    return _lists(t) and _ordered(t.value_type)


#: Which column types pylance 14.0.2 builds each kind on (``create_scalar_index`` refuses the
#: others with a TypeError or a ValueError, which the catalog cannot tell from a failure), and
#: how to say it.
#: ``lake_platform_tests/engine/test_indexes.py`` checks the table against the pinned Lance.
_COLUMNS: dict[str, tuple[Callable[[pa.DataType], bool], str]] = {
    "BTREE": (_ordered, "numbers, booleans, strings, binary, decimals, dates or times"),
    "BITMAP": (_ordered, "numbers, booleans, strings, binary, decimals, dates or times"),
    "ZONEMAP": (lambda t: True, "any column"),
    "BLOOMFILTER": (_hashed, "integers, float32 or float64, strings, binary, dates, times or timestamps"),
    "INVERTED": (_texts, "strings or lists of strings"),
    "NGRAM": (_strings, "strings"),
    "LABEL_LIST": (_labels, "lists of numbers, booleans, strings, binary, decimals, dates or times"),
}


def unsuitable(kind: str, column_type: pa.DataType) -> str | None:
    """Why ``kind`` (one of KINDS) cannot index a column of ``column_type``, or None when it can.
    An extension type's storage is Lance's to judge (its JSON type takes an inverted index)."""
    import pyarrow as pa

    if isinstance(column_type, pa.ExtensionType):
        return None
    fits, what = _COLUMNS[kind]
    if fits(column_type):
        return None
    return f"{kind.lower()} indexes take {what}, not {column_type}"


#: The full-text (INVERTED) index's options in the Lance Namespace spec's CreateTableIndexRequest,
#: which pylance 14.0.2's ``create_scalar_index`` takes by the same names; no other kind has any.
FULL_TEXT_OPTIONS = (
    "with_position",
    "base_tokenizer",
    "language",
    "max_token_length",
    "lower_case",
    "stem",
    "remove_stop_words",
    "ascii_folding",
)
#: The stemming and stop-word languages Lance takes (its tokenizer's own spelling).
LANGUAGES = (
    "Arabic",
    "Danish",
    "Dutch",
    "English",
    "Finnish",
    "French",
    "German",
    "Greek",
    "Hungarian",
    "Italian",
    "Norwegian",
    "Portuguese",
    "Romanian",
    "Russian",
    "Spanish",
    "Swedish",
    "Tamil",
    "Turkish",
)
#: The base tokenizers Lance builds with what it ships (its jieba/ and lindera/ tokenizers need
#: language models installed on the server, which it has not).
BASE_TOKENIZERS = ("simple", "whitespace", "raw", "ngram", "icu", "icu/split")
#: Lance keeps a token length as an unsigned 64-bit count (a larger one overflows in pylance).
MAX_TOKEN_LENGTH = 2**64 - 1


def _full_text_option(option: str, value: object) -> object:
    """``value`` as Lance takes ``option``; ValueError naming the values it takes."""
    if option == "language":
        spelled = {lang.lower(): lang for lang in LANGUAGES}
        if isinstance(value, str) and value.strip().lower() in spelled:
            return spelled[value.strip().lower()]
        raise ValueError(f"language {value!r} is not one Lance takes: use one of {', '.join(LANGUAGES)}")
    if option == "base_tokenizer":
        if isinstance(value, str) and value.strip().lower() in BASE_TOKENIZERS:
            return value.strip().lower()
        raise ValueError(
            f"base_tokenizer {value!r} is not one Lance takes: use one of {', '.join(BASE_TOKENIZERS)}"
        )
    if option == "max_token_length":
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_TOKEN_LENGTH:
            return value
        raise ValueError(f"max_token_length must be an integer from 0 to {MAX_TOKEN_LENGTH}, got {value!r}")
    if isinstance(value, bool):
        return value
    raise ValueError(f"{option} must be true or false, got {value!r}")


def index_options(kind: str, options: Mapping[str, object]) -> dict[str, object]:
    """The ``options`` for an index of ``kind`` (one of KINDS) as ``create_scalar_index`` takes
    them, in the order given (a None value is an option not given); ValueError naming an option
    that ``kind`` has not, or a value Lance would not take, with the values it takes."""
    chosen: dict[str, object] = {}
    for option, value in options.items():
        if value is None:
            continue
        if option not in FULL_TEXT_OPTIONS:
            raise ValueError(
                f"unknown index option {option!r}: the options are {', '.join(FULL_TEXT_OPTIONS)}"
            )
        if kind != "INVERTED":
            raise ValueError(
                f"{option} applies to inverted (fts) indexes only, not to {kind.lower()} indexes"
            )
        chosen[option] = _full_text_option(option, value)
    return chosen


def index_name(column: str) -> str:
    """The name the platform gives the index of ``column`` (Lance's own default)."""
    return f"{column}_idx"


@dataclass(frozen=True)
class IndexInfo:
    name: str
    column: str
    kind: str  # one of KINDS, or Lance's type name for a kind the platform does not build
    rows_indexed: int
    rows_unindexed: int
    fragments_unindexed: int
    #: The table version the index was last built or refreshed at.
    built_at_version: int
    #: Lance's id of the index (its first segment's) and its files' size, as the Lance
    #: Namespace spec's IndexContent reports them.
    uuid: str = ""
    size_bytes: int = 0

    @property
    def lagging(self) -> bool:
        """Rows committed after the last build are found by scanning them, not by the index."""
        return self.fragments_unindexed > 0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "lagging": self.lagging}


@engine_call
def list_indexes(ds: lance.LanceDataset) -> list[IndexInfo]:
    """The user-visible scalar indexes of this version (Lance's system indexes are skipped)."""
    found = []
    for desc in ds.describe_indices():
        fields = list(desc.field_names or [])
        if desc.name.startswith("__") or len(fields) != 1:
            continue
        stats = ds.stats.index_stats(desc.name)
        found.append(
            IndexInfo(
                name=desc.name,
                column=fields[0],
                kind=_BY_TYPE.get(str(desc.index_type), str(desc.index_type)),
                rows_indexed=int(stats.get("num_indexed_rows", 0)),
                rows_unindexed=int(stats.get("num_unindexed_rows", 0)),
                fragments_unindexed=int(stats.get("num_unindexed_fragments", 0)),
                built_at_version=max(
                    (int(seg.dataset_version_at_last_update or 0) for seg in desc.segments), default=0
                ),
                uuid=str(desc.segments[0].uuid) if desc.segments else "",
                size_bytes=int(desc.total_size_bytes or 0),
            )
        )
    return sorted(found, key=lambda i: i.name)


@engine_call
def create_index(
    ds: lance.LanceDataset, column: str, kind: str, name: str, options: Mapping[str, object] | None = None
) -> None:
    """Build (or rebuild, replacing one of the same name) an index over every fragment, with
    ``options`` as ``index_options`` gave them."""
    ds.create_scalar_index(column, kind, name=name, replace=True, **dict(options or {}))


@engine_call
def refresh_indexes(ds: lance.LanceDataset, names: Sequence[str]) -> None:
    """Fold rows appended since the last build into ``names`` (no retraining: a delta merge)."""
    ds.optimize.optimize_indices(index_names=list(names))


@engine_call
def drop_index(ds: lance.LanceDataset, name: str) -> None:
    ds.drop_index(name)


@engine_call
def scan_io(ds: lance.LanceDataset) -> tuple[int, int]:
    """(bytes read, read requests) by this dataset handle since the last call: for measuring
    how much of a table a query touched."""
    lance_module()
    stats = ds.io_stats_incremental()
    return int(stats.read_bytes), int(stats.read_iops)
