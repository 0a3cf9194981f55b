"""The lakes the randomized model tests (test_model.py, test_branch_model.py) run their sequences
on, one fresh lake per sequence, hypothesis's settings for a run, and what test_model.py's runs
count and report (``Tally``, ``reported``)."""

from __future__ import annotations

import os
import shutil
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine

from lake_platform.settings import LakeSettings, load_settings
from lake_platform_tests.conftest import dynamodb_test_url
from lake_platform_tests.s3_server import S3Endpoint


@dataclass
class Env:
    """One sequence's lake: its settings, the root its tables are placed under (None: the home's
    own folder), and what removes it afterwards."""

    settings: LakeSettings
    root: str | None
    close: Callable[[], None]


def local_env(home: Path, **overrides: Any) -> Env:
    """SQLite and a local folder, both under ``home``."""
    return Env(load_settings(home=home, **overrides), None, lambda: shutil.rmtree(home, ignore_errors=True))


def dynamodb_s3_env(moto_endpoint: str, s3: S3Endpoint, home: Path, **overrides: Any) -> Env:
    """A new DynamoDB registry table (on moto) and a new prefix of the S3 bucket."""
    from lake_platform.registry.dynamodb import DynamoMetaStore
    from lake_platform.registry.dynamodb_admin import delete_table, init_table

    url = dynamodb_test_url(moto_endpoint)
    settings_ = load_settings(
        home=home,
        registry_url=url,
        warehouse_roots=s3.warehouse_roots(home),
        **s3.lake_settings(),
        **overrides,
    )
    init_table(url, settings_)
    prefix = s3.new_prefix()

    def close() -> None:
        store = DynamoMetaStore.from_url(url, settings_)
        try:
            delete_table(store)
        finally:
            store.close()
        if s3.external:  # a throwaway SeaweedFS needs no cleanup; a real bucket does
            s3.delete_prefix(prefix)

    return Env(settings_, f"s3://{s3.bucket}/{prefix}", close)


def run_settings(*, examples: int, steps: int) -> settings:
    """``examples`` sequences of ``steps`` steps; ``LAKE_MODEL_EXAMPLES`` overrides the number of
    sequences (a longer hunt, or a quick try). Derandomized: the same sequences on every run and
    machine, so CI is reproducible."""
    return settings(
        max_examples=int(os.environ.get("LAKE_MODEL_EXAMPLES", examples)),
        stateful_step_count=steps,
        deadline=None,
        derandomize=True,
        database=None,
        report_multiple_bugs=False,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )


@dataclass
class Tally:
    examples: int = 0
    steps: int = 0
    checks: int = 0
    #: Comparisons of the warehouse's listings against the registry (every step, or a sequence's end)
    listings: int = 0
    errors_predicted: int = 0
    #: "rule: ok" or "rule: <error>" → count; shows the sequences reached every operation
    outcomes: Counter[str] = field(default_factory=Counter)


def machine_for(
    name: str, machine: type[RuleBasedStateMachine], open_env: Callable[[], Env], **attrs: object
) -> tuple[type[RuleBasedStateMachine], Tally]:
    """``machine`` subclassed as ``name``, opening its lakes with ``open_env``, counting into a
    new ``Tally``, with class attributes ``attrs``."""
    tally = Tally()
    return type(name, (machine,), {**attrs, "open_env": staticmethod(open_env), "tally": tally}), tally


@contextmanager
def reported(
    backend: str,
    tally: Tally,
    record_property: Callable[[str, object], None],
    capsys: pytest.CaptureFixture[str],
) -> Iterator[None]:
    started = time.monotonic()
    try:
        yield
    finally:
        line = (
            f"model test [{backend}]: {tally.steps} steps in {tally.examples} sequences, {tally.checks} "
            f"model comparisons, {tally.listings} listing comparisons, {tally.errors_predicted} predicted "
            "typed errors, "
            f"{time.monotonic() - started:.1f}s\n  outcomes: {dict(sorted(tally.outcomes.items()))}"
        )
        for key in ("steps", "examples", "checks", "listings", "errors_predicted"):
            record_property(f"model_{backend}_{key}", getattr(tally, key))
        with capsys.disabled():
            print("\n" + line)
