"""Changes to the kit's table: row changes (delete, update, merge-insert), schema changes and
metadata, scalar indexes, and query plans."""

from __future__ import annotations

from lake_platform.conformance.checks_namespaces import MISSING, pages
from lake_platform.conformance.checks_tables import ARROW_STREAM, SCAN, arrow_rows
from lake_platform.conformance.registry import CheckFailed, Kit, check, prerequisite
from lake_platform.conformance.verdicts import refused, succeeds


def _rows(kit: Kit) -> int:
    with prerequisite("rows counted (CountTableRows)"):
        return succeeds(kit.client.call("CountTableRows", kit.table, {}))


@check("DeleteFromTable", "success")
def delete_rows(kit: Kit) -> None:
    kit.need("appended", "InsertIntoTable")
    before = _rows(kit)
    succeeds(kit.client.call("DeleteFromTable", kit.table, {"predicate": "id = 4"}))
    if _rows(kit) != before - 1:
        raise CheckFailed("deleting id = 4 did not remove one row")


@check("DeleteFromTable", "TableNotFound")
def delete_from_missing_table(kit: Kit) -> None:
    kit.need("namespace", "CreateNamespace")
    refused(kit.client.call("DeleteFromTable", kit.child(MISSING), {"predicate": "id = 1"}), "TableNotFound")


@check("UpdateTable", "success")
def update_rows(kit: Kit) -> None:
    kit.need("table", "CreateTable")
    body = {"predicate": "id = 0", "updates": [["name", "'renamed'"]]}
    succeeds(kit.client.call("UpdateTable", kit.table, body))


@check("UpdateTable", "TableNotFound")
def update_missing_table(kit: Kit) -> None:
    kit.need("namespace", "CreateNamespace")
    body = {"predicate": "id = 0", "updates": [["name", "'x'"]]}
    refused(kit.client.call("UpdateTable", kit.child(MISSING), body), "TableNotFound")


@check("MergeInsertIntoTable", "success")
def merge_insert(kit: Kit) -> None:
    kit.need("table", "CreateTable")
    query = {"on": "id", "when_matched_update_all": True, "when_not_matched_insert_all": True}
    answer = kit.client.call(
        "MergeInsertIntoTable", kit.table, raw=arrow_rows([0, 9]), content_type=ARROW_STREAM, query=query
    )
    succeeds(answer)


@check("MergeInsertIntoTable", "TableNotFound")
def merge_into_missing_table(kit: Kit) -> None:
    kit.need("namespace", "CreateNamespace")
    answer = kit.client.call(
        "MergeInsertIntoTable",
        kit.child(MISSING),
        raw=arrow_rows([0]),
        content_type=ARROW_STREAM,
        query={"on": "id", "when_matched_update_all": True, "when_not_matched_insert_all": True},
    )
    refused(answer, "TableNotFound")


@check("UpdateTableSchemaMetadata", "success")
def schema_metadata(kit: Kit) -> None:
    """The REST spec sends and answers the map itself, not the wrapped request and response."""
    kit.need("table", "CreateTable")
    answer = succeeds(kit.client.call("UpdateTableSchemaMetadata", kit.table, {"kit": "yes"}))
    if answer.get("kit") != "yes":
        raise CheckFailed(f"the metadata answered lacks kit=yes: {answer}")


@check("UpdateTableSchemaMetadata", "TableNotFound")
def schema_metadata_of_missing_table(kit: Kit) -> None:
    kit.need("namespace", "CreateNamespace")
    answer = kit.client.call("UpdateTableSchemaMetadata", kit.child(MISSING), {"k": "v"})
    refused(answer, "TableNotFound")


@check("AlterTableAddColumns", "success")
def add_column(kit: Kit) -> None:
    kit.need("table", "CreateTable")
    body = {"new_columns": [{"name": "doubled", "expression": "id * 2"}]}
    succeeds(kit.client.call("AlterTableAddColumns", kit.table, body))
    kit.state["added"] = "doubled"


@check("AlterTableAddColumns", "TableNotFound")
def add_column_to_missing_table(kit: Kit) -> None:
    kit.need("namespace", "CreateNamespace")
    body = {"new_columns": [{"name": "doubled", "expression": "id * 2"}]}
    refused(kit.client.call("AlterTableAddColumns", kit.child(MISSING), body), "TableNotFound")


@check("AlterTableAlterColumns", "success")
def rename_column(kit: Kit) -> None:
    kit.need("added", "AlterTableAddColumns")
    body = {"alterations": [{"path": "doubled", "rename": "twice"}]}
    succeeds(kit.client.call("AlterTableAlterColumns", kit.table, body))
    kit.state["added"] = "twice"


@check("AlterTableAlterColumns", "TableColumnNotFound")
def alter_missing_column(kit: Kit) -> None:
    kit.need("table", "CreateTable")
    body = {"alterations": [{"path": MISSING, "rename": "other"}]}
    refused(kit.client.call("AlterTableAlterColumns", kit.table, body), "TableColumnNotFound")


@check("UpdateFieldMetadata", "success")
def field_metadata(kit: Kit) -> None:
    kit.need("table", "CreateTable")
    body = {"updates": [{"path": "name", "metadata": {"kit": "yes"}}]}
    succeeds(kit.client.call("UpdateFieldMetadata", kit.table, body))


@check("UpdateFieldMetadata", "TableColumnNotFound")
def missing_field_metadata(kit: Kit) -> None:
    kit.need("table", "CreateTable")
    body = {"updates": [{"path": MISSING, "metadata": {"kit": "yes"}}]}
    refused(kit.client.call("UpdateFieldMetadata", kit.table, body), "TableColumnNotFound")


@check("AlterTableDropColumns", "success")
def drop_column(kit: Kit) -> None:
    added = kit.need("added", "AlterTableAddColumns")
    succeeds(kit.client.call("AlterTableDropColumns", kit.table, {"columns": [added]}))


@check("AlterTableDropColumns", "TableColumnNotFound")
def drop_missing_column(kit: Kit) -> None:
    kit.need("table", "CreateTable")
    refused(
        kit.client.call("AlterTableDropColumns", kit.table, {"columns": [MISSING]}), "TableColumnNotFound"
    )


@check("AlterTableBackfillColumns", "TableNotFound")
def backfill_missing_table(kit: Kit) -> None:
    kit.need("namespace", "CreateNamespace")
    answer = kit.client.call("AlterTableBackfillColumns", kit.child(MISSING), {"column": "x"})
    refused(answer, "TableNotFound")


@check("CreateTableScalarIndex", "success")
def create_scalar_index(kit: Kit) -> None:
    kit.need("table", "CreateTable")
    body = {"column": "id", "index_type": "BTREE", "name": "id_idx"}
    succeeds(kit.client.call("CreateTableScalarIndex", kit.table, body))
    kit.state["index"] = "id_idx"
    kit.state["indexes"] = ["id_idx"]


@check("CreateTableScalarIndex", "TableNotFound")
def scalar_index_on_missing_table(kit: Kit) -> None:
    kit.need("namespace", "CreateNamespace")
    body = {"column": "id", "index_type": "BTREE", "name": "id_idx"}
    refused(kit.client.call("CreateTableScalarIndex", kit.child(MISSING), body), "TableNotFound")


@check("CreateTableIndex", "success")
def create_index(kit: Kit) -> None:
    kit.need("table", "CreateTable")
    body = {"column": "name", "index_type": "BITMAP", "name": "name_idx"}
    succeeds(kit.client.call("CreateTableIndex", kit.table, body))
    kit.state.setdefault("indexes", []).append("name_idx")


@check("CreateTableIndex", "TableNotFound")
def index_on_missing_table(kit: Kit) -> None:
    kit.need("namespace", "CreateNamespace")
    body = {"column": "name", "index_type": "BITMAP", "name": "name_idx"}
    refused(kit.client.call("CreateTableIndex", kit.child(MISSING), body), "TableNotFound")


@check("ListTableIndices", "success")
def list_indices(kit: Kit) -> None:
    index = kit.need("index", "CreateTableScalarIndex")
    found = [i["index_name"] for i in succeeds(kit.client.call("ListTableIndices", kit.table, {}))["indexes"]]
    if index not in found:
        raise CheckFailed(f"{index} is not listed: {found}")


@check("ListTableIndices", "pagination")
def list_indices_paged(kit: Kit) -> None:
    """Paged in the JSON body (the spec gives ListTableIndices one), over the two indexes made."""
    kit.need("index", "CreateTableScalarIndex")
    found = sorted(
        i["index_name"] for i in pages(kit, "ListTableIndices", kit.table, "indexes", in_body=True)
    )
    expected = sorted(kit.state["indexes"])  # id_idx, and name_idx if CreateTableIndex made it
    if found != expected:
        raise CheckFailed(f"pages of one held {found}, expected {expected} once each")


@check("ListTableIndices", "TableNotFound")
def list_indices_of_missing_table(kit: Kit) -> None:
    kit.need("namespace", "CreateNamespace")
    refused(kit.client.call("ListTableIndices", kit.child(MISSING), {}), "TableNotFound")


@check("DescribeTableIndexStats", "success")
def index_stats(kit: Kit) -> None:
    index = kit.need("index", "CreateTableScalarIndex")
    answer = kit.client.call("DescribeTableIndexStats", kit.table, {}, path_params={"index_name": index})
    succeeds(answer)


@check("DescribeTableIndexStats", "TableIndexNotFound")
def missing_index_stats(kit: Kit) -> None:
    kit.need("table", "CreateTable")
    answer = kit.client.call("DescribeTableIndexStats", kit.table, {}, path_params={"index_name": MISSING})
    refused(answer, "TableIndexNotFound")


@check("DropTableIndex", "success")
def drop_index(kit: Kit) -> None:
    index = kit.need("index", "CreateTableScalarIndex")
    succeeds(kit.client.call("DropTableIndex", kit.table, path_params={"index_name": index}))


@check("DropTableIndex", "TableIndexNotFound")
def drop_missing_index(kit: Kit) -> None:
    kit.need("table", "CreateTable")
    answer = kit.client.call("DropTableIndex", kit.table, path_params={"index_name": MISSING})
    refused(answer, "TableIndexNotFound")


@check("ExplainTableQueryPlan", "success")
def explain(kit: Kit) -> None:
    kit.need("table", "CreateTable")
    succeeds(kit.client.call("ExplainTableQueryPlan", kit.table, {"query": SCAN}))


@check("ExplainTableQueryPlan", "TableNotFound")
def explain_missing_table(kit: Kit) -> None:
    kit.need("namespace", "CreateNamespace")
    refused(kit.client.call("ExplainTableQueryPlan", kit.child(MISSING), {"query": SCAN}), "TableNotFound")


@check("AnalyzeTableQueryPlan", "success")
def analyze(kit: Kit) -> None:
    kit.need("table", "CreateTable")
    succeeds(kit.client.call("AnalyzeTableQueryPlan", kit.table, SCAN))


@check("AnalyzeTableQueryPlan", "TableNotFound")
def analyze_missing_table(kit: Kit) -> None:
    kit.need("namespace", "CreateNamespace")
    refused(kit.client.call("AnalyzeTableQueryPlan", kit.child(MISSING), SCAN), "TableNotFound")
