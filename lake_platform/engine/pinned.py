"""Opening a version the caller already holds the registry's record of: by location and number.

The query layer captured the version from the registry (its snapshot), so Lance need not ask a
namespace which manifest it is: Lance reads the version's canonical manifest (V2 naming, the
path the catalog publishes a committed version to) straight from storage. No namespace client
is built, so the process never imports ``lance_namespace``'s generated REST client (pydantic
validators for every REST method: a second or more of CPU per process, most of a ``lake sql``
run's start-up), and no Lance thread calls back into Python to describe the table.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lake_platform.engine.panics import engine_call

if TYPE_CHECKING:
    import lance


@engine_call
def open_pinned(
    location: str, version: int, storage_options: dict[str, str] | None = None
) -> lance.LanceDataset:
    """Exactly ``version`` of the dataset at ``location``; a storage "not found" error when its
    manifest is not there (cleaned up, or not yet published)."""
    from lake_platform.engine.lance_engine import lance_module, lance_session

    return lance_module().dataset(
        location,
        version=version,
        storage_options=storage_options or None,
        session=lance_session(),
    )
