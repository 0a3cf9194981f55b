"""Versions and tags of the kit's table (versions 1 and 2 after CreateTable and InsertIntoTable)."""

from __future__ import annotations

from lake_platform.conformance.checks_namespaces import MISSING, pages
from lake_platform.conformance.registry import CheckFailed, Kit, check, prerequisite
from lake_platform.conformance.verdicts import refused, succeeds


@check("ListTableVersions", "success")
def list_versions(kit: Kit) -> None:
    kit.need("appended", "InsertIntoTable")
    versions = succeeds(kit.client.call("ListTableVersions", kit.table))["versions"]
    numbers = sorted(v["version"] for v in versions)
    if numbers[-2:] != [1, 2]:
        raise CheckFailed(f"expected versions 1 and 2, got {numbers}")


@check("ListTableVersions", "pagination")
def list_versions_paged(kit: Kit) -> None:
    kit.need("appended", "InsertIntoTable")
    numbers = sorted(v["version"] for v in pages(kit, "ListTableVersions", kit.table, "versions"))
    if numbers != [1, 2]:
        raise CheckFailed(f"pages of one held versions {numbers}, expected 1 and 2 once each")


@check("ListTableVersions", "TableNotFound")
def list_versions_of_missing_table(kit: Kit) -> None:
    kit.need("namespace", "CreateNamespace")
    refused(kit.client.call("ListTableVersions", kit.child(MISSING)), "TableNotFound")


@check("DescribeTableVersion", "success")
def describe_version(kit: Kit) -> None:
    kit.need("table", "CreateTable")
    answer = succeeds(kit.client.call("DescribeTableVersion", kit.table, {"version": 1}))
    if answer["version"]["version"] != 1:
        raise CheckFailed(f"asked for version 1, got {answer['version']}")


@check("DescribeTableVersion", "TableVersionNotFound")
def describe_missing_version(kit: Kit) -> None:
    kit.need("table", "CreateTable")
    answer = kit.client.call("DescribeTableVersion", kit.table, {"version": 999})
    refused(answer, "TableVersionNotFound")


@check("DescribeTableVersion", "TableNotFound")
def describe_version_of_missing_table(kit: Kit) -> None:
    kit.need("namespace", "CreateNamespace")
    refused(kit.client.call("DescribeTableVersion", kit.child(MISSING), {"version": 1}), "TableNotFound")


@check("CreateTableVersion", "TableNotFound")
def create_version_of_missing_table(kit: Kit) -> None:
    kit.need("namespace", "CreateNamespace")
    body = {"version": 1, "manifest_path": "_versions/1.manifest"}
    refused(kit.client.call("CreateTableVersion", kit.child(MISSING), body), "TableNotFound")


@check("CreateTableVersion", "InvalidInput")
def create_version_without_manifest(kit: Kit) -> None:
    """The spec requires ``manifest_path``; without one nothing can be committed."""
    kit.need("table", "CreateTable")
    refused(kit.client.call("CreateTableVersion", kit.table, {"version": 3}), "InvalidInput")


@check("CreateTableTag", "success")
def create_tag(kit: Kit) -> None:
    kit.need("appended", "InsertIntoTable")
    succeeds(kit.client.call("CreateTableTag", kit.table, {"tag": "c1", "version": 1}))
    kit.state["tag"] = "c1"


@check("CreateTableTag", "TableTagAlreadyExists")
def create_tag_twice(kit: Kit) -> None:
    kit.need("tag", "CreateTableTag")
    answer = kit.client.call("CreateTableTag", kit.table, {"tag": "c1", "version": 2})
    refused(answer, "TableTagAlreadyExists")


@check("CreateTableTag", "TableVersionNotFound")
def tag_missing_version(kit: Kit) -> None:
    kit.need("table", "CreateTable")
    answer = kit.client.call("CreateTableTag", kit.table, {"tag": "nowhere", "version": 999})
    refused(answer, "TableVersionNotFound")


@check("GetTableTagVersion", "success")
def tag_version(kit: Kit) -> None:
    kit.need("tag", "CreateTableTag")
    answer = succeeds(kit.client.call("GetTableTagVersion", kit.table, {"tag": "c1"}))
    if answer["version"] != 1:
        raise CheckFailed(f"tag c1 of version 1 answered version {answer['version']}")


@check("GetTableTagVersion", "TableTagNotFound")
def missing_tag_version(kit: Kit) -> None:
    kit.need("table", "CreateTable")
    refused(kit.client.call("GetTableTagVersion", kit.table, {"tag": MISSING}), "TableTagNotFound")


@check("ListTableTags", "success")
def list_tags(kit: Kit) -> None:
    kit.need("tag", "CreateTableTag")
    with prerequisite("a second tag (CreateTableTag)"):
        succeeds(kit.client.call("CreateTableTag", kit.table, {"tag": "c2", "version": 2}))
    kit.state["tag2"] = "c2"
    tags = succeeds(kit.client.call("ListTableTags", kit.table))["tags"]
    if sorted(tags) != ["c1", "c2"]:
        raise CheckFailed(f"expected tags c1 and c2, got {sorted(tags)}")


@check("ListTableTags", "pagination")
def list_tags_paged(kit: Kit) -> None:
    kit.need("tag2", "ListTableTags:success")
    names = pages(kit, "ListTableTags", kit.table, "tags")
    if sorted(names) != ["c1", "c2"]:
        raise CheckFailed(f"pages of one held {names}, expected c1 and c2 once each")


@check("ListTableTags", "TableNotFound")
def list_tags_of_missing_table(kit: Kit) -> None:
    kit.need("namespace", "CreateNamespace")
    refused(kit.client.call("ListTableTags", kit.child(MISSING)), "TableNotFound")


@check("UpdateTableTag", "success")
def update_tag(kit: Kit) -> None:
    kit.need("tag", "CreateTableTag")
    succeeds(kit.client.call("UpdateTableTag", kit.table, {"tag": "c1", "version": 2}))
    moved = succeeds(kit.client.call("GetTableTagVersion", kit.table, {"tag": "c1"}))["version"]
    if moved != 2:
        raise CheckFailed(f"tag c1 moved to version 2 still answers {moved}")


@check("UpdateTableTag", "TableTagNotFound")
def update_missing_tag(kit: Kit) -> None:
    kit.need("table", "CreateTable")
    answer = kit.client.call("UpdateTableTag", kit.table, {"tag": MISSING, "version": 1})
    refused(answer, "TableTagNotFound")


@check("DeleteTableTag", "success")
def delete_tag(kit: Kit) -> None:
    kit.need("tag2", "ListTableTags:success")
    succeeds(kit.client.call("DeleteTableTag", kit.table, {"tag": "c2"}))
    refused(kit.client.call("GetTableTagVersion", kit.table, {"tag": "c2"}), "TableTagNotFound")


@check("DeleteTableTag", "TableTagNotFound")
def delete_missing_tag(kit: Kit) -> None:
    kit.need("table", "CreateTable")
    refused(kit.client.call("DeleteTableTag", kit.table, {"tag": MISSING}), "TableTagNotFound")
