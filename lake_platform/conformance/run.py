"""Running the kit: make the throwaway namespace's name, run every check in order, clean up."""

from __future__ import annotations

import secrets

import urllib3

from lake_platform.conformance import (
    checks_changes,
    checks_lifecycle,
    checks_namespaces,
    checks_tables,
    checks_versions,
)
from lake_platform.conformance.checks_namespaces import MISSING
from lake_platform.conformance.client import NamespaceClient
from lake_platform.conformance.registry import CHECKS, Check, CheckFailed, Kit, NotSupported, Outcome, Skipped
from lake_platform.conformance.report import Report, Result
from lake_platform.errors import ServiceUnavailable

#: the scenario's order: each module's checks use what the modules before it made.
CHECK_MODULES = (checks_namespaces, checks_tables, checks_versions, checks_changes, checks_lifecycle)


def run_conformance(
    url: str, *, token: str | None = None, prefix: list[str] | None = None, timeout: float = 60.0
) -> Report:
    """Every registered check against the server at ``url``, under a fresh namespace named
    ``conformance_<hex>`` below ``prefix`` (the root when empty), removed again at the end."""
    client = NamespaceClient(url, token, timeout)
    kit = Kit(client, [*(prefix or []), f"conformance_{secrets.token_hex(4)}"], has_token=token is not None)
    report = Report(url, kit.namespace)
    try:
        try:
            client.call("ListNamespaces", prefix)  # any answer will do: is anyone there?
        except urllib3.exceptions.HTTPError as exc:
            raise ServiceUnavailable(f"cannot reach {url}: {exc}") from exc
        for registered in ordered_checks():
            try:
                registered.fn(kit)
            except CheckFailed as failed:
                result = Result(registered.operation_id, registered.aspect, Outcome.FAIL, str(failed))
            except NotSupported as unsupported:
                result = Result(
                    registered.operation_id, registered.aspect, Outcome.UNSUPPORTED, str(unsupported)
                )
            except Skipped as skipped:
                result = Result(registered.operation_id, registered.aspect, Outcome.SKIPPED, str(skipped))
            except Exception as exc:  # a broken answer is one failed check, not the end
                result = Result(
                    registered.operation_id, registered.aspect, Outcome.FAIL, f"{type(exc).__name__}: {exc}"
                )
            else:
                result = Result(registered.operation_id, registered.aspect, Outcome.PASS)
            report.results.append(result)
        report.leftovers = clean_up(kit)
        report.cleaned_up = not report.leftovers
    finally:
        client.close()
    return report


def ordered_checks() -> list[Check]:
    """The registered checks, module by module in the scenario's order (import order is not it:
    a module imports the helpers of the ones before it)."""
    rank = {module.__name__: i for i, module in enumerate(CHECK_MODULES)}
    return sorted(CHECKS, key=lambda c: rank[c.module])  # stable: registration order within one


def clean_up(kit: Kit) -> list[str]:
    """Drop what the kit made: every table and namespace under its namespace (found by listing,
    plus the ids checks create that a lax server may have made without listing them), then the
    namespace itself. Returns the ids still there."""
    if "namespace" not in kit.state:
        return []
    for ident in (kit.child(MISSING, "t"), kit.child("bad"), kit.child("mv")):
        kit.client.call("DropTable", ident)
    _drop_tree(kit, kit.namespace, depth=0)
    if kit.client.call("DescribeNamespace", kit.namespace, {}).status == 200:
        # what would not go one by one (a declared table some servers cannot drop), in one go
        kit.client.call("DropNamespace", kit.namespace, {"behavior": "Cascade"})
    if kit.client.call("DescribeNamespace", kit.namespace, {}).status == 200:
        return ["$".join(kit.namespace)]
    return []


def _drop_tree(kit: Kit, ident: list[str], depth: int) -> None:
    if depth < 4:
        for child in _listed(kit, "ListNamespaces", ident, "namespaces"):
            _drop_tree(kit, [*ident, child], depth + 1)
    for table in _listed(kit, "ListTables", ident, "tables", include_declared=True):
        kit.client.call("DropTable", [*ident, table])
    kit.client.call("DropNamespace", ident, {})


def _listed(kit: Kit, operation_id: str, ident: list[str], member: str, **query: object) -> list[str]:
    names: list[str] = []
    token = None
    for _ in range(100):
        answer = kit.client.call(operation_id, ident, query=query | ({"page_token": token} if token else {}))
        if answer.status != 200:
            return names
        page = answer.json()
        names.extend(page.get(member) or [])
        token = page.get("page_token")
        if not token:
            break
    return names
