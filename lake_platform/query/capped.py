"""``repeat`` with a cap on what it builds.

DataFusion's ``repeat`` allocates its result outside the memory pool: one reader's
``SELECT length(repeat('x', 2000000000))`` took a server from 0.85 GB to 8.5 GB against a 1 GiB
pool. This replacement, registered under the same name, first computes what a call would
build for its batch and refuses it past ``max_value_bytes`` (default 64 MiB: the values of one
batch together, so also each value) with an error ``errors.execution_error`` turns into
ValueTooLarge; below that pyarrow's kernel builds it. Semantics are DataFusion's: NULL in,
NULL out; a count of 0 or less builds the empty string.

Why only ``repeat``: ``lpad``/``rpad`` also size their result by a number, but DataFusion
keeps one function per name and a Python function has one signature, so a replacement would
lose their two- or three-argument form; they stay DataFusion's, checked at planning instead
(``value_bounds``).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from datafusion import ScalarUDF, udf

#: What the error of a refused call starts with; ``errors.execution_error`` finds it in
#: DataFusion's message.
MARKER = "lake:value-too-large:"


def capped_functions(max_value_bytes: int) -> list[ScalarUDF]:
    """The functions to register over DataFusion's own in every query context."""

    def repeat(strings: pa.Array, counts: pa.Array) -> pa.Array:
        counts = pc.max_element_wise(counts.cast(pa.int64()), 0, skip_nulls=False)
        # Checked: a count near 2**63 must not wrap around to a small size.
        sizes = pc.multiply_checked(pc.binary_length(strings).cast(pa.int64()), counts)
        largest = pc.max(sizes).as_py() or 0
        built = largest if largest > max_value_bytes else pc.sum(sizes).as_py() or 0
        if built > max_value_bytes:
            raise ValueError(f"{MARKER} repeat would build {built} bytes in one batch")
        return pc.binary_repeat(strings, counts)

    return [udf(repeat, [pa.string(), pa.int64()], pa.string(), "immutable", name="repeat")]


__all__ = ["MARKER", "capped_functions"]
