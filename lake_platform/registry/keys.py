"""Registry key layout: one prefix per record kind.

Namespace paths are joined with ``.`` inside one key segment and name segments never contain
``/`` or ``.`` (see naming), so a prefix scan never mistakes ``ns1`` for ``ns10``.
"""

from __future__ import annotations

from collections.abc import Sequence

from lake_platform.errors import InvalidInput
from lake_platform.naming import NamespaceName, ProjectName, TableName, WarehouseName


def project(name: ProjectName) -> str:
    return f"prj/{name.project}"


def warehouse(name: WarehouseName) -> str:
    return f"whs/{name.project}/{name.warehouse}"


def namespace(name: NamespaceName) -> str:
    return f"nsp/{name.project}/{name.warehouse}/{'.'.join(name.path)}"


def table(name: TableName) -> str:
    return f"tbl/{name.project}/{name.warehouse}/{'.'.join(name.namespace)}/{name.table}"


def tables_in_namespace(name: NamespaceName) -> str:
    """Prefix of the tables directly in ``name``."""
    return f"tbl/{name.project}/{name.warehouse}/{'.'.join(name.path)}/"


def branch(name: TableName, branch_name: str) -> str:
    """A branch of a table: its own version chain (``ver/<chain>/``) and head."""
    return f"brn/{name.project}/{name.warehouse}/{'.'.join(name.namespace)}/{name.table}/{branch_name}"


def branches_of(name: TableName) -> str:
    """Prefix of the branches of one table (``/``: ``t`` never matches ``t2``'s branches)."""
    return f"brn/{name.project}/{name.warehouse}/{'.'.join(name.namespace)}/{name.table}/"


#: The highest table version: Lance's are u64, but read as i64 on its way (2**63 wraps round to
#: a negative number), and a version key holds 20 digits.
MAX_VERSION = 2**63 - 1


def valid_version(value: object) -> bool:
    """Whether ``value`` can be a table version a caller asks for: an int in 1..MAX_VERSION."""
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_VERSION


def version(incarnation: str, number: int) -> str:
    if not 0 <= number <= MAX_VERSION:
        raise InvalidInput(f"invalid version {number!r}")
    return f"ver/{incarnation}/{number:020d}"


def versions(incarnation: str) -> str:
    return f"ver/{incarnation}/"


def lease(incarnation: str) -> str:
    return f"lse/{incarnation}"


def commit_marker(commit_id: str) -> str:
    return f"cid/{commit_id}"


def transaction(txn_id: str) -> str:
    """A multi-table commit spanning several registry writes (``TransactionRecord``)."""
    return f"txn/{txn_id}"


def log_prefix(target: str) -> str:
    """Prefix of the commit log of one object, by its dotted name."""
    return f"log/{target}/"


def log_entry(target: str, at_ms: int, commit_id: str, step: int = 0) -> str:
    return f"log/{target}/{at_ms:015d}-{commit_id}-{step:03d}"


def user(name: str) -> str:
    return f"usr/{name}"


def token(token_id: str) -> str:
    return f"tok/{token_id}"


def policy(scope: str) -> str:
    """Policy attached at a dotted scope: project, warehouse, namespace or table."""
    return f"pol/{scope}"


def trash(target: str, dropped_at_ms: int, incarnation: str) -> str:
    return f"trs/{target}/{dropped_at_ms:015d}-{incarnation}"


def trash_prefix(target: str = "") -> str:
    return f"trs/{target}"


def odd_folder(incarnation: str) -> str:
    """A table registered at a folder not of the shape the catalog gives (``OddFolderRecord``)."""
    return f"odf/{incarnation}"


def odd_folders_indexed() -> str:
    """Marks the one pass that indexed the odd folders older releases registered."""
    return "odf-indexed"


def report(kind: str, target: str, at_ms: int) -> str:
    return f"rpt/{kind}/{target}/{at_ms:015d}"


# -- scan prefixes: the only place outside the functions above that spells a prefix ------------


def projects() -> str:
    return "prj/"


def warehouses(project: str | None = None) -> str:
    """Prefix of every warehouse, or of those of one project."""
    return "whs/" if project is None else f"whs/{project}/"


def namespaces(project: str | None = None, warehouse: str | None = None, path: Sequence[str] = ()) -> str:
    """Prefix of every namespace, of those of one warehouse, or of those under ``path`` in it
    (``path`` given: the descendants, not the namespace itself)."""
    if project is None:
        return "nsp/"
    if warehouse is None:
        return f"nsp/{project}/"
    return f"nsp/{project}/{warehouse}/" + "".join(p + "." for p in path)


def tables_under(parts: Sequence[str] = ()) -> str:
    """Prefix of the tables whose dotted name starts with ``parts`` (whole segments; for three
    parts or more, the namespace path may continue: ``ns`` also matches ``ns.sub``'s tables)."""
    head = "tbl/" + "/".join(parts[:2])
    return head + ("/" + ".".join(parts[2:]) if len(parts) > 2 else "")


def nested_and_own(head: str) -> tuple[str, str]:
    """The ``scan_range`` of the keys starting ``head.`` (what is nested in an object) or
    ``head/`` (its own): ``.`` and ``/`` are adjacent (0x2E, 0x2F), so both prefixes are the
    keys from ``head.`` up to ``head0``, in that order, and never a sibling's (``head2``)."""
    return head + ".", head + "0"


def log_under(prefix: str = "") -> str:
    """Prefix of the commit-log entries of every object whose dotted name starts with ``prefix``."""
    return f"log/{prefix}"


def policies() -> str:
    """Prefix of every policy record."""
    return "pol/"


def all_versions() -> str:
    """Prefix of every table version record (all incarnations)."""
    return "ver/"


def all_branches() -> str:
    """Prefix of every branch record."""
    return "brn/"


def odd_folders() -> str:
    """Prefix of every odd-folder record."""
    return "odf/"


def users() -> str:
    return "usr/"


def tokens() -> str:
    return "tok/"


def reports(kind: str, target: str) -> str:
    """Prefix of the reports of one kind about one object, oldest first."""
    return f"rpt/{kind}/{target}/"


# -- the change feed (registry/changes.py): per shard, a ring of change records ------------------


def change_record(shard: int, slot: int) -> str:
    return f"chg/r/{shard:04d}/{slot:06d}"


def change_records(shard: int | None = None) -> str:
    """Prefix of one shard's ring, or of every shard's."""
    return "chg/r/" if shard is None else f"chg/r/{shard:04d}/"
