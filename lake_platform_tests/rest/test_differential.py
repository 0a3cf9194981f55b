"""Differential test against the reference server shipped in pylance (``RestAdapter("dir")``):
the same client call sequence against both, compared operation by operation (status, error code,
and for a JSON answer the members the reference returns), allowing only the documented
differences (``ALLOWED``, listed in docs/rest.md)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lance
import pytest
import requests
from lance.namespace import RestAdapter

from lake_platform_tests.rest.clients import rest_namespace, rows
from lake_platform_tests.rest.conftest import RestLake

T = ["p", "w", "ns", "events"]
TP = "p$w$ns$events"

#: (step, method, path, body); "write:create" / "write:append" are pylance writes through RestNamespace.
SEQUENCE: list[tuple[str, str, str, Any]] = [
    ("list namespaces", "GET", "/v1/namespace/p$w/list", None),
    ("create existing namespace", "POST", "/v1/namespace/p$w$ns/create", {}),
    ("namespace exists", "POST", "/v1/namespace/p$w$ns/exists", {}),
    ("missing namespace", "POST", "/v1/namespace/p$w$nope/describe", {}),
    ("describe missing table", "POST", "/v1/table/p$w$ns$missing/describe", {}),
    ("missing table exists", "POST", "/v1/table/p$w$ns$missing/exists", {}),
    ("write:create", "", "", None),
    ("write:append", "", "", None),
    ("describe table", "POST", f"/v1/table/{TP}/describe", {}),
    ("table exists", "POST", f"/v1/table/{TP}/exists", {}),
    ("list tables", "GET", "/v1/namespace/p$w$ns/table/list", None),
    ("create tag", "POST", f"/v1/table/{TP}/tags/create", {"tag": "first", "version": 1}),
    ("duplicate tag", "POST", f"/v1/table/{TP}/tags/create", {"tag": "first", "version": 1}),
    ("tag version", "POST", f"/v1/table/{TP}/tags/version", {"tag": "first"}),
    ("missing tag", "POST", f"/v1/table/{TP}/tags/version", {"tag": "nope"}),
    ("list tags", "POST", f"/v1/table/{TP}/tags/list", {}),
    ("list versions", "POST", f"/v1/table/{TP}/version/list", {}),
    ("describe version", "POST", f"/v1/table/{TP}/version/describe", {"version": 1}),
    ("missing version", "POST", f"/v1/table/{TP}/version/describe", {"version": 99}),
    ("list versions, null body", "POST", f"/v1/table/{TP}/version/list?limit=1&descending=true", b"null"),
    ("describe at a version", "POST", f"/v1/table/{TP}/describe", {"version": 1}),
    ("describe at a tag", "POST", f"/v1/table/{TP}/describe", {"tag": "first"}),
    ("describe detailed", "POST", f"/v1/table/{TP}/describe", {"load_detailed_metadata": True}),
    ("describe missing version", "POST", f"/v1/table/{TP}/describe", {"version": 99}),
    ("describe missing tag", "POST", f"/v1/table/{TP}/describe", {"tag": "nope"}),
    ("table stats", "POST", f"/v1/table/{TP}/stats", {}),
    ("list tables of a warehouse", "GET", "/v1/namespace/p$w/table/list", None),
    ("list tables of a project", "GET", "/v1/namespace/p/table/list", None),
    ("count rows", "POST", f"/v1/table/{TP}/count_rows", {}),
    ("count rows, predicate", "POST", f"/v1/table/{TP}/count_rows", {"predicate": "id > 1"}),
    (
        "explain",
        "POST",
        f"/v1/table/{TP}/explain_plan",
        {"query": {"k": 10, "vector": {}, "filter": "id > 1"}},
    ),
    ("analyze", "POST", f"/v1/table/{TP}/analyze_plan", {"k": 10, "vector": {}, "filter": "id > 1"}),
    (
        "create scalar index",
        "POST",
        f"/v1/table/{TP}/create_scalar_index",
        {"column": "id", "index_type": "BTREE"},
    ),
    ("duplicate index", "POST", f"/v1/table/{TP}/create_index", {"column": "id", "index_type": "BTREE"}),
    (
        "index of a missing column",
        "POST",
        f"/v1/table/{TP}/create_index",
        {"column": "no", "index_type": "BTREE"},
    ),
    ("unknown index type", "POST", f"/v1/table/{TP}/create_index", {"column": "id", "index_type": "XX"}),
    ("list indexes", "POST", f"/v1/table/{TP}/index/list", {}),
    ("index stats", "POST", f"/v1/table/{TP}/index/id_idx/stats", {}),
    ("missing index stats", "POST", f"/v1/table/{TP}/index/nope/stats", {}),
    ("drop index", "POST", f"/v1/table/{TP}/index/id_idx/drop", None),
    ("drop missing index", "POST", f"/v1/table/{TP}/index/nope/drop", None),
    (
        "add columns",
        "POST",
        f"/v1/table/{TP}/add_columns",
        {"new_columns": [{"name": "d", "expression": "id * 2"}]},
    ),
    (
        "rename column",
        "POST",
        f"/v1/table/{TP}/alter_columns",
        {"alterations": [{"path": "d", "rename": "e"}]},
    ),
    (
        "rename missing column",
        "POST",
        f"/v1/table/{TP}/alter_columns",
        {"alterations": [{"path": "no", "rename": "x"}]},
    ),
    ("drop columns", "POST", f"/v1/table/{TP}/drop_columns", {"columns": ["e"]}),
    ("drop missing column", "POST", f"/v1/table/{TP}/drop_columns", {"columns": ["no"]}),
    ("restore", "POST", f"/v1/table/{TP}/restore", {"version": 1}),
    ("restore missing version", "POST", f"/v1/table/{TP}/restore", {"version": 99}),
    ("update rows", "POST", f"/v1/table/{TP}/update", {"predicate": "id = 1", "updates": [["tag", "'z'"]]}),
    (
        "delete versions",
        "POST",
        f"/v1/table/{TP}/version/delete",
        {"ranges": [{"start_version": 2, "end_version": 3}]},
    ),
    ("rename table", "POST", f"/v1/table/{TP}/rename", {"new_table_name": "moved"}),
    ("rename table back", "POST", "/v1/table/p$w$ns$moved/rename", {"new_table_name": "events"}),
    ("drop non-empty namespace", "POST", "/v1/namespace/p$w$ns/drop", {}),
    ("path/body id conflict", "POST", f"/v1/table/{TP}/describe", {"id": ["p", "w", "ns", "other"]}),
    ("declare existing table", "POST", f"/v1/table/{TP}/declare", {}),
    ("delete tag", "POST", f"/v1/table/{TP}/tags/delete", {"tag": "first"}),
    ("drop table", "POST", f"/v1/table/{TP}/drop", None),
    ("describe dropped table", "POST", f"/v1/table/{TP}/describe", {}),
    ("unknown route", "POST", "/v1/nothing", {}),
]

#: step -> why our answer may differ from the reference's (docs/rest.md, "Differences").
ALLOWED: dict[str, str] = {
    "count rows": "we answer text/plain (the spec's type); the reference labels the integer application/json",
    "count rows, predicate": "as count rows",
    "rename table": "we rename (a registry transaction); the reference does not implement it (500/18)",
    "rename table back": "as above",
    "delete versions": "ours keeps a version a reader may have pinned (superseded within a ticket lifetime)",
    "rename missing column": "we answer TableColumnNotFound 404/12; the reference answers Internal 500/18",
    "drop missing column": "we answer TableColumnNotFound 404/12; the reference answers Internal 500/18",
    "restore missing version": "we answer TableVersionNotFound 404/11; the reference answers Internal 500/18",
    "unknown route": "we answer a problem body 406/0; the reference answers an empty 404",
    "describe missing version": "we answer TableVersionNotFound 404/11; the reference ignores version",
    "describe missing tag": "we answer TableTagNotFound 404/8; the reference ignores tag",
}


@pytest.fixture
def oracle(tmp_path: Path) -> Iterator[str]:
    adapter = RestAdapter("dir", {"root": str(tmp_path / "dir")}, host="127.0.0.1", port=0)
    adapter.start()
    try:
        url = f"http://127.0.0.1:{adapter.port}"
        for ident in ("p", "p$w", "p$w$ns"):  # ours are control-plane objects the fixture made
            assert requests.post(f"{url}/v1/namespace/{ident}/create", json={}, timeout=30).ok
        yield url
    finally:
        adapter.stop()


def run(url: str, token: str) -> list[tuple[str, int, Any, Any, str]]:
    """(step, status, code, answer, content type) for each step of the sequence."""
    ns = rest_namespace(url, token)
    headers = {"Authorization": f"Bearer {token}"}
    out = []
    for step, method, path, body in SEQUENCE:
        if step.startswith("write:"):
            mode = step.split(":")[1]
            ds = lance.write_dataset(
                rows([1] if mode == "create" else [2]), namespace_client=ns, table_id=T, mode=mode
            )
            out.append((step, 200, None, ds.version, ""))
            continue
        sent: dict[str, Any] = {"json": body}
        if isinstance(body, bytes):  # sent as it is, labelled JSON (lancedb's null)
            sent = {"data": body, "headers": {**headers, "content-type": "application/json"}}
        resp = requests.request(method, url + path, **{"headers": headers, **sent}, timeout=60)
        kind = (resp.headers.get("content-type") or "").split(";")[0]
        try:
            answer = resp.json() if resp.content else None
        except json.JSONDecodeError:
            answer = resp.text
        code = answer.get("code") if resp.status_code >= 400 and isinstance(answer, dict) else None
        out.append((step, resp.status_code, code, answer, kind))
    return out


def test_same_calls_same_answers_as_the_reference_server(rest_lake: RestLake, oracle: str) -> None:
    ours = run(rest_lake.url, rest_lake.tokens["admin"])
    theirs = run(oracle, "unused")
    differences = []
    for (step, status, code, answer, _kind), (_, r_status, r_code, r_answer, _r_kind) in zip(
        ours, theirs, strict=True
    ):
        if step in ALLOWED:
            continue
        if (status, code) != (r_status, r_code):
            differences.append(f"{step}: ours {status}/{code}, reference {r_status}/{r_code}")
        elif status == 200 and isinstance(r_answer, dict):
            missing = set(r_answer) - set(answer or {})
            if missing:
                differences.append(f"{step}: our answer lacks {sorted(missing)}")
        elif status == 200 and r_answer != answer and step.startswith("write:"):
            differences.append(f"{step}: version {answer} vs {r_answer}")
    assert differences == []
    # the documented differences are real (a stale entry in ALLOWED would hide nothing)
    by_step = {s: (st, c, k) for s, st, c, _, k in ours}
    ref = {s: (st, c, k) for s, st, c, _, k in theirs}
    assert by_step["count rows"][2] == "text/plain" and ref["count rows"][2] == "application/json"
    assert by_step["rename table"][:2] == (200, None) and ref["rename table"][:2] == (500, 18)
    assert by_step["rename table back"][:2] == (200, None)
    for step, code in [
        ("rename missing column", 12),
        ("drop missing column", 12),
        ("restore missing version", 11),
    ]:
        assert by_step[step][:2] == (404, code) and ref[step][:2] == (500, 18), step
    assert by_step["unknown route"][:2] == (406, 0) and ref["unknown route"][0] == 404
    assert by_step["describe missing version"][:2] == (404, 11) and ref["describe missing version"][0] == 200
    assert by_step["describe missing tag"][:2] == (404, 8) and ref["describe missing tag"][0] == 200
    # and where both answer, the schema and the stats are the reference's, member for member
    answers = {s: a for s, *_, a, _k in ours}
    r_answers = {s: a for s, *_, a, _k in theirs}
    assert answers["describe detailed"]["schema"] == r_answers["describe detailed"]["schema"]
    ours_stats, their_stats = answers["table stats"], r_answers["table stats"]
    # total_bytes: ours are the data files' sizes, the reference's Lance's per-column data sizes
    assert ours_stats["total_bytes"] > their_stats["total_bytes"] > 0
    assert ours_stats | {"total_bytes": 0} == their_stats | {"total_bytes": 0}
    assert answers["index stats"] == r_answers["index stats"]
    ours_index, their_index = answers["list indexes"]["indexes"][0], r_answers["list indexes"]["indexes"][0]
    shared = ("index_name", "columns", "status", "index_type", "num_indexed_rows", "num_unindexed_rows")
    assert {k: ours_index[k] for k in shared} == {k: their_index[k] for k in shared}
    assert answers["count rows, predicate"] == r_answers["count rows, predicate"] == 1
    assert isinstance(answers["explain"], str) and isinstance(r_answers["explain"], str)
    assert "output_rows" in answers["analyze"] and "output_rows" in r_answers["analyze"]
    assert answers["update rows"]["updated_rows"] == r_answers["update rows"]["updated_rows"] == 1
    assert (
        answers["delete versions"]["deleted_count"] == 0
        and r_answers["delete versions"]["deleted_count"] == 1
    )
