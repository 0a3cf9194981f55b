"""Whole-table operations: restore, branches, version deletion, rename, register, drop; and the
operations the kit probes only with a refusal (transactions, multi-table commits, materialized
views), since their success needs what a generic client cannot make over REST alone."""

from __future__ import annotations

from lake_platform.conformance.checks_namespaces import MISSING
from lake_platform.conformance.checks_tables import ARROW_STREAM, SCAN, arrow_rows, create
from lake_platform.conformance.registry import CheckFailed, Kit, check, prerequisite
from lake_platform.conformance.verdicts import refused, succeeds


@check("RestoreTable", "success")
def restore(kit: Kit) -> None:
    kit.need("appended", "InsertIntoTable")
    succeeds(kit.client.call("RestoreTable", kit.table, {"version": 1}))
    with prerequisite("rows counted (CountTableRows)"):
        rows = succeeds(kit.client.call("CountTableRows", kit.table, {}))
    if rows != 3:
        raise CheckFailed("after restoring version 1 the table does not have its 3 rows")


@check("RestoreTable", "TableVersionNotFound")
def restore_missing_version(kit: Kit) -> None:
    kit.need("table", "CreateTable")
    refused(kit.client.call("RestoreTable", kit.table, {"version": 999}), "TableVersionNotFound")


@check("ListTableBranches", "success")
def list_branches(kit: Kit) -> None:
    kit.need("table", "CreateTable")
    succeeds(kit.client.call("ListTableBranches", kit.table))


@check("ListTableBranches", "TableNotFound")
def list_branches_of_missing_table(kit: Kit) -> None:
    kit.need("namespace", "CreateNamespace")
    refused(kit.client.call("ListTableBranches", kit.child(MISSING)), "TableNotFound")


def _branches(kit: Kit) -> dict[str, object]:
    with prerequisite("the table's branches (ListTableBranches)"):
        return succeeds(kit.client.call("ListTableBranches", kit.table)).get("branches") or {}


@check("CreateTableBranch", "success")
def create_branch(kit: Kit) -> None:
    """A branch from main's head: afterwards ListTableBranches lists it."""
    kit.need("table", "CreateTable")
    succeeds(kit.client.call("CreateTableBranch", kit.table, {"name": "kit_branch"}))
    kit.state["branch"] = "kit_branch"
    if "kit_branch" not in _branches(kit):
        raise CheckFailed("the branch made is not listed by ListTableBranches")


@check("CreateTableBranch", "TableBranchAlreadyExists")
def create_branch_twice(kit: Kit) -> None:
    kit.need("branch", "CreateTableBranch")
    answer = kit.client.call("CreateTableBranch", kit.table, {"name": "kit_branch"})
    refused(answer, "TableBranchAlreadyExists")


def _counts(kit: Kit, branch: str) -> tuple[int, int]:
    with prerequisite("rows counted on main and on the branch (CountTableRows)"):
        main = succeeds(kit.client.call("CountTableRows", kit.table, {}))
        on_branch = succeeds(kit.client.call("CountTableRows", kit.table, {"branch": branch}))
    return main, on_branch


@check("InsertIntoTable", "branch")
def insert_on_branch(kit: Kit) -> None:
    """A row appended with ``branch``: the branch counts one more, main as many as before."""
    branch = kit.need("branch", "CreateTableBranch")
    main, on_branch = _counts(kit, branch)
    query = {"mode": "append", "branch": branch}
    succeeds(
        kit.client.call(
            "InsertIntoTable", kit.table, raw=arrow_rows([7]), content_type=ARROW_STREAM, query=query
        )
    )
    main_after, branch_after = _counts(kit, branch)
    if main_after != main:
        raise CheckFailed(f"an insert on branch {branch} changed main: {main} rows, then {main_after}")
    if branch_after != on_branch + 1:
        raise CheckFailed(
            f"branch {branch} counted {on_branch} rows, then {branch_after} after a 1-row insert"
        )
    kit.state["branch_rows"] = branch_after


@check("QueryTable", "branch")
def query_branch(kit: Kit) -> None:
    """A scan with ``branch`` reads the branch's rows, the row inserted there among them."""
    branch = kit.need("branch", "CreateTableBranch")
    rows = kit.need("branch_rows", "InsertIntoTable:branch")
    table = succeeds(kit.client.call("QueryTable", kit.table, {**SCAN, "branch": branch}))
    ids = table.column("id").to_pylist() if "id" in table.column_names else []
    if table.num_rows != rows or 7 not in ids:
        raise CheckFailed(f"the scan of branch {branch} answered {table.num_rows} rows, not its {rows}")


@check("DeleteTableBranch", "success")
def delete_branch(kit: Kit) -> None:
    """Afterwards ListTableBranches no longer lists it."""
    branch = kit.need("branch", "CreateTableBranch")
    succeeds(kit.client.call("DeleteTableBranch", kit.table, {"name": branch}))
    if branch in _branches(kit):
        raise CheckFailed("the branch deleted is still listed by ListTableBranches")


@check("DeleteTableBranch", "TableBranchNotFound")
def delete_missing_branch(kit: Kit) -> None:
    kit.need("table", "CreateTable")
    refused(kit.client.call("DeleteTableBranch", kit.table, {"name": MISSING}), "TableBranchNotFound")


@check("BatchDeleteTableVersions", "success")
def delete_versions(kit: Kit) -> None:
    """Version 2, once neither tagged (tag c1, moved there, is deleted first) nor current (later
    changes made newer versions): afterwards it is not found."""
    kit.need("appended", "InsertIntoTable")
    kit.client.call("DeleteTableTag", kit.table, {"tag": "c1"})
    body = {"ranges": [{"start_version": 2, "end_version": 3}]}  # the end is exclusive
    answer = succeeds(kit.client.call("BatchDeleteTableVersions", kit.table, body))
    try:
        refused(kit.client.call("DescribeTableVersion", kit.table, {"version": 2}), "TableVersionNotFound")
    except CheckFailed as exc:
        raise CheckFailed(f"version 2 is still there after the delete answered {answer}") from exc


@check("BatchDeleteTableVersions", "TableNotFound")
def delete_versions_of_missing_table(kit: Kit) -> None:
    kit.need("namespace", "CreateNamespace")
    body = {"ranges": [{"start_version": 1, "end_version": 2}]}
    refused(kit.client.call("BatchDeleteTableVersions", kit.child(MISSING), body), "TableNotFound")


@check("RenameTable", "success")
def rename(kit: Kit) -> None:
    t2 = kit.need("t2", "ListTables:success")
    succeeds(kit.client.call("RenameTable", t2, {"new_table_name": "t3"}))
    kit.state["t2"] = kit.child("t3")
    succeeds(kit.client.call("DescribeTable", kit.child("t3"), {}))


@check("RenameTable", "TableAlreadyExists")
def rename_onto_existing(kit: Kit) -> None:
    t2 = kit.need("t2", "ListTables:success")
    refused(kit.client.call("RenameTable", t2, {"new_table_name": "t"}), "TableAlreadyExists")


@check("RenameTable", "TableNotFound")
def rename_missing_table(kit: Kit) -> None:
    kit.need("namespace", "CreateNamespace")
    refused(kit.client.call("RenameTable", kit.child(MISSING), {"new_table_name": "x"}), "TableNotFound")


@check("RegisterTable", "success")
def register(kit: Kit) -> None:
    """A table of its own deregistered, then its location registered under another name."""
    kit.need("namespace", "CreateNamespace")
    with prerequisite("a deregistered table (CreateTable, DescribeTable, DeregisterTable)"):
        create(kit, kit.child("to_register"), [1])
        location = succeeds(kit.client.call("DescribeTable", kit.child("to_register"), {})).get("location")
        if not location:
            raise CheckFailed("DescribeTable gave no location to register")
        succeeds(kit.client.call("DeregisterTable", kit.child("to_register"), {}))
    succeeds(kit.client.call("RegisterTable", kit.child("registered"), {"location": location}))
    succeeds(kit.client.call("DescribeTable", kit.child("registered"), {}))


@check("RegisterTable", "TableAlreadyExists")
def register_existing(kit: Kit) -> None:
    kit.need("table", "CreateTable")
    with prerequisite("the table's location (DescribeTable)"):
        location = succeeds(kit.client.call("DescribeTable", kit.table, {})).get("location") or "unknown"
    refused(kit.client.call("RegisterTable", kit.table, {"location": location}), "TableAlreadyExists")


@check("DropTable", "success")
def drop_table(kit: Kit) -> None:
    kit.need("namespace", "CreateNamespace")
    with prerequisite("a table of its own (CreateTable)"):
        create(kit, kit.child("to_drop"), [1])
    succeeds(kit.client.call("DropTable", kit.child("to_drop")))
    refused(kit.client.call("DescribeTable", kit.child("to_drop"), {}), "TableNotFound")


@check("DropTable", "TableNotFound")
def drop_missing_table(kit: Kit) -> None:
    kit.need("namespace", "CreateNamespace")
    refused(kit.client.call("DropTable", kit.child(MISSING)), "TableNotFound")


#: a well-formed transaction id nobody made (a UUID, as servers hand out)
MISSING_TRANSACTION = "00000000-0000-4000-8000-000000000000"


@check("DescribeTransaction", "TransactionNotFound")
def describe_missing_transaction(kit: Kit) -> None:
    """A transaction id is the table's id and the transaction's."""
    kit.need("table", "CreateTable")
    ident = [*kit.table, MISSING_TRANSACTION]
    refused(kit.client.call("DescribeTransaction", ident, {}), "TransactionNotFound")


@check("AlterTransaction", "TransactionNotFound")
def alter_missing_transaction(kit: Kit) -> None:
    kit.need("table", "CreateTable")
    body = {"actions": [{"set_status_action": {"status": "ABORTED"}}]}
    ident = [*kit.table, MISSING_TRANSACTION]
    refused(kit.client.call("AlterTransaction", ident, body), "TransactionNotFound")


@check("BatchCreateTableVersions", "TableNotFound")
def batch_versions_of_missing_table(kit: Kit) -> None:
    kit.need("namespace", "CreateNamespace")
    entry = {"id": kit.child(MISSING), "version": 1, "manifest_path": "_versions/1.manifest"}
    refused(kit.client.call("BatchCreateTableVersions", None, {"entries": [entry]}), "TableNotFound")


@check("BatchCommitTables", "InvalidInput")
def batch_commit_nothing(kit: Kit) -> None:
    refused(kit.client.call("BatchCommitTables", None, {}), "InvalidInput")


@check("CreateMaterializedView", "InvalidInput")
def materialized_view_without_definition(kit: Kit) -> None:
    kit.need("namespace", "CreateNamespace")
    refused(kit.client.call("CreateMaterializedView", kit.child("mv"), {}), "InvalidInput")


@check("RefreshMaterializedView", "TableNotFound")
def refresh_missing_view(kit: Kit) -> None:
    kit.need("namespace", "CreateNamespace")
    refused(kit.client.call("RefreshMaterializedView", kit.child(MISSING), {}), "TableNotFound")
