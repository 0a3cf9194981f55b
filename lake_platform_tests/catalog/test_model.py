"""A randomized model test of the catalog (hypothesis stateful testing).

Random sequences of create, append, atomic multi-table appends, drop (to the trash or purged),
undrop (in place or under another name), namespace drop (cascade or not), namespace undrop and
recreate, protection, trash-grace policies, tags (on any version), compaction, version cleanup,
time jumps with trash expiry, and a cascade racing another writer at an exact hook point run
against a real catalog and against ``catalog_model.CatalogModel``. The universe is tiny on
purpose (one warehouse, two namespaces, two table names in each) so drops, recreates and
undrops collide on names.

After every step the registry (namespaces, policy records, registered tables with incarnation
and version, the trash, each incarnation's version records), the engine (rows of every live
version, tags, the manifests on storage, nothing left of a purged incarnation) and the model must
agree; an error must be exactly the typed LakeError the model predicts. Runs on SQLite + a local
folder and on the DynamoDB API (moto) + S3 (SeaweedFS). The summary line it prints (steps,
comparisons, outcomes per operation) is also recorded as junit properties.

Two steps let another writer in at an exact hook point: a cascade (after its checks, or while it
detaches tables), and a cleanup that has chosen its versions (every write to that table must then
be refused with LeaseUnavailable, a tag of a version about to go included).

The catalog runs on a manual clock a day ahead of the real one, with a one-second ticket window:
every superseded version is then old enough for cleanup (version commit times are real time), so
the model predicts cleanup exactly, while trash deadlines follow the manual clock alone.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis.stateful import run_state_machine_as_test

from lake_platform_tests.catalog.catalog_machine import TEST_SETTINGS, CatalogMachine
from lake_platform_tests.catalog.model_envs import (
    Env,
    dynamodb_s3_env,
    local_env,
    machine_for,
    reported,
    run_settings,
)
from lake_platform_tests.s3_server import S3Endpoint


@pytest.mark.slow
def test_catalog_matches_the_model_on_sqlite_and_a_local_folder(
    tmp_path: Path,
    record_property: Callable[[str, object], None],
    capsys: pytest.CaptureFixture[str],
) -> None:
    def open_env() -> Env:
        return local_env(Path(tempfile.mkdtemp(dir=tmp_path)), **TEST_SETTINGS)

    machine, tally = machine_for("SqliteLocalCatalog", CatalogMachine, open_env)
    with reported("sqlite", tally, record_property, capsys):
        run_state_machine_as_test(machine, settings=run_settings(examples=60, steps=25))
    assert tally.steps > 0 and tally.checks >= tally.steps
    assert tally.listings == tally.checks


@pytest.mark.slow
def test_catalog_matches_the_model_on_dynamodb_and_s3(
    tmp_path: Path,
    moto_endpoint: str,
    s3: S3Endpoint,
    record_property: Callable[[str, object], None],
    capsys: pytest.CaptureFixture[str],
) -> None:
    def open_env() -> Env:
        return dynamodb_s3_env(moto_endpoint, s3, Path(tempfile.mkdtemp(dir=tmp_path)), **TEST_SETTINGS)

    # The registry is compared in full after every step; the warehouse's listings (32 queries
    # on DynamoDB, more than the rest of a comparison) at the end of every sequence.
    machine, tally = machine_for("DynamoS3Catalog", CatalogMachine, open_env, listings=False)
    with reported("dynamodb+s3", tally, record_property, capsys):
        run_state_machine_as_test(machine, settings=run_settings(examples=6, steps=15))
    assert tally.steps > 0 and tally.checks >= tally.steps
    # Every sequence that matched the model to its end (hypothesis may cut one short).
    assert 0 < tally.listings <= tally.examples
