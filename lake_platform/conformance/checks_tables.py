"""Table lifecycle and metadata: create (Arrow body), declare, describe, exists, list (paged),
insert, count, query, stats, versions, tags, and a non-empty namespace's drop."""

from __future__ import annotations

import pyarrow as pa

from lake_platform.conformance.checks_namespaces import MISSING, pages
from lake_platform.conformance.registry import CheckFailed, Kit, check, prerequisite
from lake_platform.conformance.verdicts import refused, succeeds

ARROW_STREAM = "application/vnd.apache.arrow.stream"
SCAN = {"vector": {}, "k": 100}


def arrow_rows(ids: list[int]) -> bytes:
    """An Arrow IPC stream of rows ``id`` (int64) and ``name`` (utf8)."""
    table = pa.table({"id": pa.array(ids, pa.int64()), "name": [f"n{i}" for i in ids]})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def create(kit: Kit, ident: list[str], ids: list[int]) -> dict:
    return succeeds(kit.client.call("CreateTable", ident, raw=arrow_rows(ids), content_type=ARROW_STREAM))


@check("CreateTable", "success")
def create_table(kit: Kit) -> None:
    kit.need("namespace", "CreateNamespace")
    create(kit, kit.table, [0, 1, 2])
    kit.state["table"] = kit.table


@check("CreateTable", "TableAlreadyExists")
def create_table_twice(kit: Kit) -> None:
    kit.need("table", "CreateTable")
    answer = kit.client.call("CreateTable", kit.table, raw=arrow_rows([0]), content_type=ARROW_STREAM)
    refused(answer, "TableAlreadyExists")


@check("CreateTable", "NamespaceNotFound")
def create_table_in_missing_namespace(kit: Kit) -> None:
    kit.need("namespace", "CreateNamespace")
    ident = kit.child(MISSING, "t")
    answer = kit.client.call("CreateTable", ident, raw=arrow_rows([0]), content_type=ARROW_STREAM)
    refused(answer, "NamespaceNotFound")


@check("CreateTable", "InvalidInput")
def create_table_from_garbage(kit: Kit) -> None:
    kit.need("namespace", "CreateNamespace")
    answer = kit.client.call("CreateTable", kit.child("bad"), raw=b"not arrow", content_type=ARROW_STREAM)
    refused(answer, "InvalidInput")


@check("DropNamespace", "NamespaceNotEmpty")
def drop_non_empty_namespace(kit: Kit) -> None:
    kit.need("table", "CreateTable")
    refused(kit.client.call("DropNamespace", kit.namespace, {}), "NamespaceNotEmpty")


@check("DescribeTable", "success")
def describe_table(kit: Kit) -> None:
    kit.need("table", "CreateTable")
    succeeds(kit.client.call("DescribeTable", kit.table, {}))


@check("DescribeTable", "TableNotFound")
def describe_missing_table(kit: Kit) -> None:
    kit.need("namespace", "CreateNamespace")
    refused(kit.client.call("DescribeTable", kit.child(MISSING), {}), "TableNotFound")


@check("DescribeTable", "TableVersionNotFound")
def describe_missing_version(kit: Kit) -> None:
    kit.need("table", "CreateTable")
    refused(kit.client.call("DescribeTable", kit.table, {"version": 999}), "TableVersionNotFound")


@check("DescribeTable", "InvalidInput")
def describe_with_malformed_json(kit: Kit) -> None:
    kit.need("table", "CreateTable")
    answer = kit.client.call("DescribeTable", kit.table, raw=b'{"version": ', content_type="application/json")
    refused(answer, "InvalidInput")


@check("DescribeTable", "delimiter")
def describe_table_with_delimiter(kit: Kit) -> None:
    kit.need("table", "CreateTable")
    succeeds(kit.client.call("DescribeTable", kit.table, {}, delimiter="."))


@check("TableExists", "success")
def table_exists(kit: Kit) -> None:
    kit.need("table", "CreateTable")
    succeeds(kit.client.call("TableExists", kit.table, {}))


@check("TableExists", "TableNotFound")
def missing_table_exists(kit: Kit) -> None:
    kit.need("namespace", "CreateNamespace")
    refused(kit.client.call("TableExists", kit.child(MISSING), {}), "TableNotFound")


@check("ListTables", "success")
def list_tables(kit: Kit) -> None:
    kit.need("table", "CreateTable")
    with prerequisite("a second table (CreateTable)"):
        create(kit, kit.child("t2"), [7])
    kit.state["t2"] = kit.child("t2")
    names = succeeds(kit.client.call("ListTables", kit.namespace))["tables"]
    if sorted(names) != ["t", "t2"]:
        raise CheckFailed(f"expected the tables ['t', 't2'], got {names}")


@check("ListTables", "pagination")
def list_tables_paged(kit: Kit) -> None:
    kit.need("t2", "ListTables:success")
    names = pages(kit, "ListTables", kit.namespace, "tables")
    if sorted(names) != ["t", "t2"]:
        raise CheckFailed(f"pages of one held {names}, expected t and t2 once each")


@check("ListTables", "NamespaceNotFound")
def list_tables_of_missing_namespace(kit: Kit) -> None:
    kit.need("namespace", "CreateNamespace")
    refused(kit.client.call("ListTables", kit.child(MISSING)), "NamespaceNotFound")


@check("ListAllTables", "success")
def list_all_tables(kit: Kit) -> None:
    """The kit's tables are among all tables (the spec leaves an entry's spelling open: the kit
    looks for its namespace's name in one)."""
    kit.need("table", "CreateTable")
    names = _all_tables(kit)
    if not any(kit.namespace[-1] in name for name in names):
        raise CheckFailed(f"none of {len(names)} tables listed is under {kit.namespace[-1]}")


def _all_tables(kit: Kit) -> list[str]:
    names: list[str] = []
    token = None
    for _ in range(1000):
        page = succeeds(kit.client.call("ListAllTables", query={"page_token": token} if token else None))
        names.extend(page["tables"])
        token = page.get("page_token")
        if not token:
            break
    return names


@check("ListAllTables", "pagination")
def list_all_tables_paged(kit: Kit) -> None:
    kit.need("t2", "ListTables:success")
    first = succeeds(kit.client.call("ListAllTables", query={"limit": 1}))
    if len(first["tables"]) != 1 or not first.get("page_token"):
        raise CheckFailed(f"limit=1 over two or more tables answered {first}")


@check("DeclareTable", "success")
def declare_table(kit: Kit) -> None:
    kit.need("namespace", "CreateNamespace")
    succeeds(kit.client.call("DeclareTable", kit.child("declared"), {}))
    kit.state["declared"] = kit.child("declared")


@check("DeclareTable", "TableAlreadyExists")
def declare_existing_table(kit: Kit) -> None:
    kit.need("table", "CreateTable")
    refused(kit.client.call("DeclareTable", kit.table, {}), "TableAlreadyExists")


@check("DropTable", "declared")
def drop_declared_table(kit: Kit) -> None:
    """A declared table (no data yet) is a table: it can be dropped like any other."""
    kit.need("namespace", "CreateNamespace")
    with prerequisite("a declared table (DeclareTable)"):
        succeeds(kit.client.call("DeclareTable", kit.child("declared_to_drop"), {}))
    succeeds(kit.client.call("DropTable", kit.child("declared_to_drop")))
    refused(kit.client.call("TableExists", kit.child("declared_to_drop"), {}), "TableNotFound")


@check("DeregisterTable", "success")
def deregister_table(kit: Kit) -> None:
    kit.need("namespace", "CreateNamespace")
    with prerequisite("a table of its own (CreateTable)"):
        create(kit, kit.child("to_deregister"), [1])
    succeeds(kit.client.call("DeregisterTable", kit.child("to_deregister"), {}))
    refused(kit.client.call("DescribeTable", kit.child("to_deregister"), {}), "TableNotFound")


@check("DeregisterTable", "TableNotFound")
def deregister_missing_table(kit: Kit) -> None:
    kit.need("namespace", "CreateNamespace")
    refused(kit.client.call("DeregisterTable", kit.child(MISSING), {}), "TableNotFound")


@check("InsertIntoTable", "success")
def insert(kit: Kit) -> None:
    kit.need("table", "CreateTable")
    answer = kit.client.call(
        "InsertIntoTable",
        kit.table,
        raw=arrow_rows([3, 4]),
        content_type=ARROW_STREAM,
        query={"mode": "append"},
    )
    succeeds(answer)
    kit.state["appended"] = True


@check("InsertIntoTable", "TableNotFound")
def insert_into_missing_table(kit: Kit) -> None:
    kit.need("namespace", "CreateNamespace")
    ident = kit.child(MISSING)
    answer = kit.client.call("InsertIntoTable", ident, raw=arrow_rows([1]), content_type=ARROW_STREAM)
    refused(answer, "TableNotFound")


@check("InsertIntoTable", "InvalidInput")
def insert_garbage(kit: Kit) -> None:
    kit.need("table", "CreateTable")
    answer = kit.client.call("InsertIntoTable", kit.table, raw=b"not arrow", content_type=ARROW_STREAM)
    refused(answer, "InvalidInput")


@check("CountTableRows", "success")
def count_rows(kit: Kit) -> None:
    kit.need("appended", "InsertIntoTable")
    count = succeeds(kit.client.call("CountTableRows", kit.table, {}))
    if count != 5:
        raise CheckFailed(f"counted {count} rows, expected 5")


@check("CountTableRows", "TableNotFound")
def count_missing_table(kit: Kit) -> None:
    kit.need("namespace", "CreateNamespace")
    refused(kit.client.call("CountTableRows", kit.child(MISSING), {}), "TableNotFound")


@check("QueryTable", "success")
def query(kit: Kit) -> None:
    kit.need("appended", "InsertIntoTable")
    body = {**SCAN, "filter": "id >= 1", "columns": {"column_names": ["id"]}}
    table = succeeds(kit.client.call("QueryTable", kit.table, body))
    if sorted(table.column("id").to_pylist()) != [1, 2, 3, 4] or table.column_names != ["id"]:
        raise CheckFailed(f"id >= 1 of ids 0-4, column id, answered {table.to_pydict()}")


@check("QueryTable", "TableNotFound")
def query_missing_table(kit: Kit) -> None:
    kit.need("namespace", "CreateNamespace")
    refused(kit.client.call("QueryTable", kit.child(MISSING), SCAN), "TableNotFound")


@check("GetTableStats", "success")
def table_stats(kit: Kit) -> None:
    kit.need("table", "CreateTable")
    succeeds(kit.client.call("GetTableStats", kit.table, {}))


@check("GetTableStats", "TableNotFound")
def missing_table_stats(kit: Kit) -> None:
    kit.need("namespace", "CreateNamespace")
    refused(kit.client.call("GetTableStats", kit.child(MISSING), {}), "TableNotFound")
