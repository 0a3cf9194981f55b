"""CreateNamespace's and DropNamespace's modes as the spec defines them (case insensitive,
PascalCase or snake_case), through pylance's own RestNamespace and plain HTTP: ``ExistOk`` keeps
an existing namespace, ``Skip`` answers a missing one as dropped, ``Cascade`` drops what the
namespace holds; an unknown mode or behavior is 400 and changes nothing."""

from __future__ import annotations

import lance_namespace.errors as ns_errors
import pytest
from lance_namespace_urllib3_client.models import CreateNamespaceRequest, DropNamespaceRequest

from lake_platform_tests.rest.conftest import RestLake
from lake_platform_tests.rest.handlers.events import TP, client, problem


def namespaces(lake: RestLake) -> set[str]:
    """The namespaces of warehouse ``p.w`` (their last segments)."""
    return set(lake.catalog.reads.namespaces_in("p.w"))


def test_exist_ok_keeps_the_namespace_create_refuses_it(rest_lake: RestLake) -> None:
    ns = client(rest_lake, "admin")
    for mode in ("ExistOk", "exist_ok", "EXISTOK"):
        ns.create_namespace(CreateNamespaceRequest(id=["p", "w", "ns"], mode=mode))
    with pytest.raises(ns_errors.NamespaceAlreadyExistsError):
        ns.create_namespace(CreateNamespaceRequest(id=["p", "w", "ns"], mode="Create"))
    ns.create_namespace(CreateNamespaceRequest(id=["p", "w", "fresh"], mode="ExistOk"))
    assert namespaces(rest_lake) == {"ns", "fresh"}


def test_skip_answers_a_missing_namespace_as_dropped(rest_lake: RestLake) -> None:
    ns = client(rest_lake, "admin")
    ns.drop_namespace(DropNamespaceRequest(id=["p", "w", "never"], mode="Skip"))
    with pytest.raises(ns_errors.NamespaceNotFoundError):
        ns.drop_namespace(DropNamespaceRequest(id=["p", "w", "never"], mode="Fail"))
    # another tenant's namespace is as missing as one that never was
    ns.drop_namespace(DropNamespaceRequest(id=["q", "w", "ns"], mode="skip"))
    assert rest_lake.catalog.reads.namespaces_in("q.w") == ["ns"]


def test_cascade_in_either_case_drops_the_namespace_and_its_tables(events: RestLake) -> None:
    ns = client(events, "admin")
    with pytest.raises(ns_errors.NamespaceNotEmptyError):
        ns.drop_namespace(DropNamespaceRequest(id=["p", "w", "ns"], behavior="RESTRICT"))
    ns.drop_namespace(DropNamespaceRequest(id=["p", "w", "ns"], behavior="CASCADE"))
    assert namespaces(events) == set()


def test_unknown_modes_are_refused_and_change_nothing(events: RestLake) -> None:
    for path, body in [
        ("/v1/namespace/p$w$other/create", {"mode": "bogus"}),
        ("/v1/namespace/p$w$ns/create", {"mode": 1}),
        ("/v1/namespace/p$w$ns/drop", {"behavior": "cascades"}),
        ("/v1/namespace/p$w$ns/drop", {"mode": "ignore", "behavior": "cascade"}),
    ]:
        resp = events.post(path, body, who="admin")
        assert problem(resp) == (400, 13), (path, body, resp.text)
        assert "must be one of" in resp.json()["detail"]
    assert namespaces(events) == {"ns"}
    assert events.post(f"/v1/table/{TP}/exists", {}).status_code == 200
