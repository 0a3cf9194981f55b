"""A multi-asset's outputs to governed tables, committed together: a step writing ``orders`` and
``order_lines`` never leaves a reader seeing one without the other.

Each output of such a step (two or more of its selected outputs go through the same Lake IO
manager) is written, in whatever mode it would write main, on the step attempt's branch
``step_<hash>`` of its table (``wap.write_on_branch``: made from main's head; a table that does
not exist yet is created empty on main first). When the attempt's last output is handled, every
table's main is fast-forwarded to that branch in ONE registry transaction
(``catalog.branch_publish.publish_branches``): all of them move, or none does. Until then main
does not move; each materialization records the branch version, which the publish makes main's
under the same number (``io_manager.open_pinned``), and another run's input passes over it while
it is unpublished (``io_reads``). An output appending or merging no rows makes no branch and is
left out of the publish (``wap.write_on_branch``); a step with nothing else publishes nothing.

- A step failing after its first output (an exception, an output the table's schema policy
  refuses, a killed process) publishes nothing: every table is as it was; its branches stay
  (``lake branch list``; ``lake branch delete``).
- Each attempt writes its own branch (the run id and the retry number name it): a retry or a
  re-execution from failure writes every output anew from its own values, never one from the
  attempt that failed. The publish's commit id is the step's, as a single output's commit id is
  (``io_manager.commit_run_id``): an attempt after a publish that landed (the process killed
  right after it) finds it and writes nothing, each output answering the version published.
- The publish is refused (``BranchDiverged``) when another writer moved one of the tables'
  main while the step ran; nothing lands, and a retry writes on a new branch from the new head.
- An optional output (``is_required=False``) is refused: whether the step will still yield it
  cannot be known when the others are handled. Write-audit-publish (``wap``) publishes at the
  end of the run instead, and takes optional outputs.

Which outputs an attempt has handled is held in this process (a step's outputs are all handled
in the process running it, whatever the executor), for as long as the attempt's step context
lives: an attempt that fails before its last output leaves nothing behind once Dagster lets go of
its context, so a long-lived in-process executor does not grow with failed steps, while an
attempt still handling outputs (its context in use) never loses what it handled.
"""

from __future__ import annotations

import hashlib
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import dagster as dg

from lake_platform.errors import InvalidInput

if TYPE_CHECKING:
    from lake_platform.catalog.catalog import Catalog
    from lake_platform.registry.records import CommitLogEntry

_lock = threading.Lock()
#: The step attempt's context (Dagster's, one object for every output of the attempt) -> output
#: name -> the table written on the branch (None: nothing). Weak: gone with the attempt.
_handled: weakref.WeakKeyDictionary[object, dict[str, str | None]] = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class StepGroup:
    """The outputs of one step attempt that are committed together."""

    outputs: frozenset[str]
    run_id: str
    step_key: str
    attempt: int
    #: The run the step's publish id derives from (``io_manager.commit_run_id``).
    lineage: str
    #: The attempt's step context: what it handled is held while this lives.
    attempt_context: object = field(compare=False, repr=False, default=None)

    @property
    def branch(self) -> str:
        scope = f"{self.run_id}\0{self.step_key}\0{self.attempt}"
        return "step_" + hashlib.sha256(scope.encode()).hexdigest()[:32]

    @property
    def publish_id(self) -> str:
        scope = f"{self.lineage}\0{self.step_key}\0publish-outputs"
        return "dg-" + hashlib.sha256(scope.encode()).hexdigest()[:48]

    def commit_id(self, key: dg.AssetKey, partitions: Sequence[str]) -> str:
        """The commit id of one output on this attempt's branch."""
        from lake_platform.defs.asset_tables import step_commit_id

        return step_commit_id(f"{self.run_id}#{self.attempt}", self.step_key, key, partitions)

    def published(self, catalog: Catalog, table: str) -> CommitLogEntry | None:
        """The publish of ``table`` an earlier attempt of the step landed (None: none did)."""
        for i in range(len(self.outputs)):
            entry = catalog.reads.commit(table, f"{self.publish_id}-t{i}")
            if entry is not None and entry.operation == "publish":
                return entry
        return None

    def handled(self, output: str, table: str | None) -> list[str] | None:
        """Note ``output`` handled (``table``: written on the branch); the tables to publish
        once it was the attempt's last output, else None."""
        key = self.attempt_context
        with _lock:
            done = _handled.setdefault(key, {})
            done[output] = table
            if not self.outputs <= done.keys():
                return None
            del _handled[key]
        return sorted({t for t in done.values() if t is not None})


def open_attempts() -> int:
    """How many step attempts this process holds handled outputs of (not all handled yet)."""
    with _lock:
        return len(_handled)


def step_group(context: dg.OutputContext, lineage: str) -> StepGroup | None:
    """The outputs committed together with ``context``'s: the step's selected outputs that go
    through the same IO manager, when there are two or more (else None: one commit of its own)."""
    try:
        step = context.step_context
        selected = step.selected_output_names
        attempt = step.previous_attempt_count
    except Exception:  # noqa: BLE001 - a context built outside a run has none
        return None
    op = context.op_def
    manager = op.output_def_named(context.name).io_manager_key
    outs = [
        d
        for d in op.output_defs
        if d.io_manager_key == manager and d.name in selected and not d.dagster_type.is_nothing
    ]
    if len(outs) < 2:
        return None
    optional = sorted(d.name for d in outs if not d.is_required)
    if optional:
        raise InvalidInput(
            f"{context.step_key}: the Lake IO manager commits a multi-asset's outputs together, and "
            f"cannot know whether the optional output(s) {', '.join(optional)} will still come when "
            "the others are handled: make them required (is_required=True), give them their own "
            "asset, or write the step with write-audit-publish (wap), published when the run succeeds"
        )
    names = frozenset(d.name for d in outs)
    return StepGroup(names, context.run_id, context.step_key, attempt, lineage, step)


def publish_group(catalog: Catalog, group: StepGroup, tables: list[str]) -> None:
    """Every table's main fast-forwarded to the step's branch, in one registry transaction."""
    from lake_platform.catalog.provenance import Provenance
    from lake_platform.defs.resources import ACTOR

    by = Provenance(actor=ACTOR, run_id=group.run_id, commit_id=group.publish_id)
    catalog.branch_publish.publish_branches(tables, group.branch, by=by)
