"""Writers that bypass the registry are told, not silently dropped.

A manifest no registry commit made (pylance's ``LanceDataset.commit`` without managed
versioning, lance-ray's writes, a plain ``write_dataset`` on the table's location) is moved to
``_quarantine/`` by whoever finds it under the table's lease: the next writer (``settle``), a
commit refused for building on it (``commit_conflicts``), or the bypass sensor
(``Manifests.catch_bypasses``). Whoever moves it reports it here, once: a commit-log entry on
the table (operation ``bypass``: the versions, the quarantined manifests, so ``lake table
history`` and ``lake log`` show it) and the ``lake_bypassed_versions`` metric. The data files
stay where the writer put them and the manifests in quarantine, so the commit can be recovered;
the ``no_versions_beyond_registry`` check fails, naming the table and versions, until an
operator clears ``_quarantine/``.
"""

from __future__ import annotations

import logging

from lake_platform.engine import lance_engine as engine
from lake_platform.errors import LakeError
from lake_platform.naming import TableName
from lake_platform.observability import hooks
from lake_platform.registry import keys
from lake_platform.registry.records import CommitLogEntry, log_ms, new_id
from lake_platform.registry.store import ABSENT, MetaStore, Put

log = logging.getLogger(__name__)

#: The commit-log operation of a bypass report.
OPERATION = "bypass"


def bypassed_versions(paths: list[str]) -> list[int]:
    """The versions the manifests at ``paths`` (their own or quarantined paths) stand for."""
    return sorted({v for p in paths if (v := engine.manifest_version(p)) is not None})


def report_bypass(
    store: MetaStore,
    name: TableName,
    incarnation: str,
    registered: int,
    moved: list[str],
    actor: str,
    branch: str | None = None,
) -> list[int]:
    """Report manifests written around the registry that were just moved to quarantine
    (``moved``: their new paths): one log entry on the table and the metric. A report never
    fails the write that found them (a registry failure is logged, and the check still sees
    the quarantine). ``branch``: the branch whose line they were found on (``incarnation`` is
    its chain id then), named in the entry's ``detail.branch`` as every branch entry names it.
    Returns the versions."""
    versions = bypassed_versions(moved)
    if not moved:
        return versions
    at, commit_id = log_ms(), new_id()
    entry = CommitLogEntry(
        commit_id=commit_id,
        target=str(name),
        operation=OPERATION,
        actor=actor,
        at_ms=at,
        incarnation=incarnation,
        from_version=registered,
        detail={
            "versions": versions,
            "quarantined": moved,
            "why": "committed around the registry (no registry commit made these manifests); "
            "readers never saw them, the data is kept",
            **({"branch": branch} if branch is not None else {}),
        },
    )
    log.warning(
        "%s: version(s) %s committed around the registry moved to quarantine: %s", name, versions, moved
    )
    try:
        store.transact([Put(keys.log_entry(str(name), at, commit_id), entry.encode(), ABSENT)])
    except LakeError:
        log.warning("could not record the bypass of %s in the commit log", name, exc_info=True)
    hooks.observe_bypass(name.project, max(len(versions), 1))
    return versions
