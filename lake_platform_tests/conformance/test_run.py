"""The kit against both servers: the expected pass table of each (docs/rest.md, "Conformance"),
so a regression on either side, or a change the table does not record, fails here."""

from __future__ import annotations

import requests

from lake_platform.conformance.registry import Outcome
from lake_platform.conformance.run import ordered_checks, run_conformance
from lake_platform.conformance.spec import spec_operations
from lake_platform_tests.rest.conftest import RestLake

FAIL, UNSUPPORTED, SKIPPED = Outcome.FAIL, Outcome.UNSUPPORTED, Outcome.SKIPPED

#: our server: every check not listed passes (why each is listed: docs/rest.md, "Conformance").
OURS: dict[str, Outcome] = {
    "AlterTableBackfillColumns:TableNotFound": UNSUPPORTED,
    "BatchDeleteTableVersions:success": FAIL,
    "RegisterTable:success": FAIL,
    "CreateMaterializedView:InvalidInput": UNSUPPORTED,
    "RefreshMaterializedView:TableNotFound": UNSUPPORTED,
}

#: pylance 14.0.2's RestAdapter("dir"), called without a token.
REFERENCE: dict[str, Outcome] = {
    "DescribeNamespace:Unauthenticated": SKIPPED,
    "ListNamespaces:NamespaceNotFound": FAIL,
    "CreateTable:NamespaceNotFound": FAIL,
    "CreateTable:InvalidInput": FAIL,
    "DescribeTable:TableVersionNotFound": FAIL,
    "ListTables:NamespaceNotFound": FAIL,
    "ListAllTables:success": FAIL,
    "ListAllTables:pagination": FAIL,
    "InsertIntoTable:branch": FAIL,
    "QueryTable:branch": SKIPPED,
    "ListTableVersions:pagination": FAIL,
    "ListTableTags:pagination": FAIL,
    "AlterTableAlterColumns:TableColumnNotFound": FAIL,
    "UpdateFieldMetadata:success": UNSUPPORTED,
    "UpdateFieldMetadata:TableColumnNotFound": UNSUPPORTED,
    "AlterTableDropColumns:TableColumnNotFound": FAIL,
    "AlterTableBackfillColumns:TableNotFound": UNSUPPORTED,
    "RestoreTable:TableVersionNotFound": FAIL,
    "RenameTable:success": UNSUPPORTED,
    "RenameTable:TableAlreadyExists": UNSUPPORTED,
    "RenameTable:TableNotFound": UNSUPPORTED,
    "RegisterTable:success": FAIL,
    "RegisterTable:TableAlreadyExists": FAIL,
    "BatchCreateTableVersions:TableNotFound": UNSUPPORTED,
    "RefreshMaterializedView:TableNotFound": UNSUPPORTED,
}


def table(expected_not_passing: dict[str, Outcome]) -> dict[str, Outcome]:
    return {c.name: expected_not_passing.get(c.name, Outcome.PASS) for c in ordered_checks()}


def test_every_operation_of_the_spec_has_a_check() -> None:
    assert {c.operation_id for c in ordered_checks()} == set(spec_operations())
    assert len({c.name for c in ordered_checks()}) == len(ordered_checks())


def test_our_server(ours: RestLake) -> None:
    report = run_conformance(ours.url, token=ours.tokens["admin"], prefix=["p", "w"])
    got = {f"{r.operation_id}:{r.aspect}": r.outcome for r in report.results}
    assert got == table(OURS), {r.operation_id + ":" + r.aspect: r.detail for r in report.results if r.detail}
    assert report.cleaned_up
    # nothing of the kit's is left: the warehouse holds the fixture's namespace only
    assert ours.get("/v1/namespace/p$w/list").json()["namespaces"] == ["ns"]


def test_reference_server(reference: str) -> None:
    report = run_conformance(reference)
    got = {f"{r.operation_id}:{r.aspect}": r.outcome for r in report.results}
    assert got == table(REFERENCE), {
        r.operation_id + ":" + r.aspect: r.detail for r in report.results if r.detail
    }
    assert report.cleaned_up
    assert requests.get(f"{reference}/v1/namespace/$/list", timeout=30).json()["namespaces"] == []
