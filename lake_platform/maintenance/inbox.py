"""The inbox producers land files in: a local folder or an S3 prefix.

Layout: ``<inbox>/<project>/<warehouse>/<namespace...>/<table>/<file>.{parquet,csv,jsonl,arrow}``.
Files directly in a table's folder are candidates; names starting with ``.`` or ``_`` are ignored
(write to ``.name.tmp`` and rename when done), and so is ``<inbox>/_quarantine/``.

Listing is per table and starts after a per-table cursor, so a tick costs one cheap probe per
registered table plus work proportional to what is new:

- **local folder**: one ``stat`` of the table's folder; only when the folder's mtime moved past
  the cursor (an entry was added, renamed in or removed) is it listed with ``os.scandir``, and only
  entries whose landing time ``max(ctime, mtime)`` is past the cursor ``(landed_ns, name)`` are
  taken. A rename into the folder updates the inode's ctime, so ``mv`` of an old file counts as
  landing now. A symbolic link is listed with its own identity (``lstat``); it is read only when
  its target stays in the table's folder, else ingest quarantines the link (never its target);
  a table folder that is itself a link elsewhere is not listed. Entries younger than the
  inbox's ``settle_seconds`` (default ``SETTLE_SECONDS``) are left for the next tick, so a file
  that lands later can never sort before the cursor. Cost per changed folder: one scandir of that
  folder (ingested files stay in place; keep table folders small by moving or expiring old files).
- **S3**: ``ListObjectsV2(Prefix=<table>/, StartAfter=<cursor key>, Delimiter=/)``, paging, so
  only keys after the cursor are returned. S3 lists by key, not by time: producers must name
  files so that later files sort later (a UTC timestamp or ULID prefix). Objects younger than
  ``settle_seconds`` stop the page so the cursor never passes them.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from lake_platform.errors import InvalidInput
from lake_platform.settings import LakeSettings

log = logging.getLogger(__name__)

SUFFIXES = (".parquet", ".csv", ".jsonl", ".arrow")
QUARANTINE = "_quarantine"
#: How old a landed file must be before it is listed (a producer may still be renaming files in).
SETTLE_SECONDS = 1.0


@dataclass(frozen=True)
class InboxFile:
    """One landed file. ``key`` is relative to the inbox root, '/'-separated."""

    key: str
    size: int
    mtime_ns: int = 0
    etag: str = ""

    def identity(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def table(self) -> str:
        return ".".join(self.key.split("/")[:-1])

    @property
    def name(self) -> str:
        return self.key.rsplit("/", 1)[-1]


def table_folder(table: str) -> str:
    return "/".join(table.split("."))


def _wanted(name: str) -> bool:
    return not name.startswith((".", "_")) and name.lower().endswith(SUFFIXES)


class Inbox(ABC):
    location: str

    @abstractmethod
    def list_new(self, table: str, cursor: str | None, limit: int) -> tuple[list[InboxFile], str | None]:
        """Settled files of ``table`` after ``cursor`` (oldest first, at most ``limit``) and the new
        cursor."""

    @abstractmethod
    def stat(self, key: str) -> InboxFile | None:
        """The file's identity now, or None when it is gone."""

    @abstractmethod
    @contextmanager
    def local_copy(self, file: InboxFile) -> Iterator[Path]:
        """A local path with the file's bytes (the file itself for a local inbox), never a path
        outside the table's inbox folder: a link leading out of it raises ``SourceError``."""

    @abstractmethod
    def quarantine(self, file: InboxFile, reason: str) -> str:
        """Move the file under ``_quarantine/`` with a ``.reason.txt`` beside it; return its new key."""

    @abstractmethod
    def in_quarantine(self, key: str) -> bool: ...

    @abstractmethod
    def put(self, key: str, data: bytes) -> InboxFile:
        """Land a file atomically (tests and the demo seed)."""


class LocalInbox(Inbox):
    def __init__(self, root: str | os.PathLike[str], *, settle_seconds: float = SETTLE_SECONDS) -> None:
        self.root = Path(str(root).removeprefix("file://")).expanduser().resolve()
        self.location = self.root.as_posix()
        self.settle_seconds = settle_seconds

    def _in_place(self, folder: Path) -> bool:
        """The folder is where its path says: no link on the way from the root leads elsewhere."""
        return folder.resolve() == folder

    def list_new(self, table: str, cursor: str | None, limit: int) -> tuple[list[InboxFile], str | None]:
        folder = self.root / table_folder(table)
        after = _parse_local_cursor(cursor)
        try:
            folder_stat = folder.stat()
        except FileNotFoundError:
            return [], cursor
        if after is not None and folder_stat.st_mtime_ns < after[0]:
            return [], cursor  # nothing added, renamed in or removed since the cursor
        if not self._in_place(folder):  # checked only when listing: the unchanged tick stays one stat
            log.warning(
                "inbox folder of %s is a symbolic link to another place; its files are not ingested", table
            )
            return [], cursor
        settled = time.time_ns() - int(self.settle_seconds * 1e9)
        found: list[tuple[int, str, InboxFile]] = []
        with os.scandir(folder) as entries:
            for entry in entries:
                if not _wanted(entry.name) or not (
                    entry.is_file(follow_symlinks=False) or entry.is_symlink()
                ):
                    continue
                st = entry.stat(follow_symlinks=False)
                landed = max(st.st_ctime_ns, st.st_mtime_ns)
                if landed > settled or (after is not None and (landed, entry.name) <= after):
                    continue
                found.append(
                    (
                        landed,
                        entry.name,
                        InboxFile(f"{table_folder(table)}/{entry.name}", st.st_size, st.st_mtime_ns),
                    )
                )
        found.sort(key=lambda t: (t[0], t[1]))
        found = found[:limit]
        if not found:
            return [], cursor
        landed, name, _ = found[-1]
        return [f for _, _, f in found], f"{landed}:{name}"

    def stat(self, key: str) -> InboxFile | None:
        try:
            st = (self.root / key).lstat()  # a link's own identity, as listed; its target is not ours
        except FileNotFoundError:
            return None
        return InboxFile(key, st.st_size, st.st_mtime_ns)

    @contextmanager
    def local_copy(self, file: InboxFile) -> Iterator[Path]:
        from lake_platform.maintenance.sources import confined

        # The folder is taken as written under the resolved root, so a table folder that is itself
        # a link elsewhere confines nothing and its files are refused too.
        yield confined(self.root / file.key, self.root / table_folder(file.table), name=file.name)

    def quarantine(self, file: InboxFile, reason: str) -> str:
        target = self.root / QUARANTINE / file.key
        target.parent.mkdir(parents=True, exist_ok=True)
        if not self._in_place((self.root / file.key).parent):
            # Moving would pull a file that lives elsewhere into the inbox: leave it, note why.
            note = target.with_name(target.name + ".reason.txt")
            note.write_text(reason.rstrip() + "\n(left in place: its folder is a symbolic link)\n")
            return note.relative_to(self.root).as_posix()
        limit = _name_max(target.parent)
        if target.exists():
            target = target.with_name(
                fitted(f"{target.stem}.{time.time_ns()}{target.suffix}", limit, target.suffix)
            )
        # Named before anything moves: a landed name near the limit leaves no room for the note's
        # suffix, and a note failing after the move would lose the reason and fail the run.
        note = target.with_name(fitted(target.name + ".reason.txt", limit, ".reason.txt"))
        os.replace(self.root / file.key, target)
        note.write_text(reason.rstrip() + "\n")
        return target.relative_to(self.root).as_posix()

    def in_quarantine(self, key: str) -> bool:
        folder = (self.root / QUARANTINE / key).parent
        stem = Path(key).stem
        return folder.is_dir() and any(
            p.name.startswith(stem) and not p.name.endswith(".reason.txt") for p in folder.iterdir()
        )

    def put(self, key: str, data: bytes) -> InboxFile:
        target = self.root / key
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(fitted(f".{target.name}.tmp", _name_max(target.parent), ".tmp"))
        tmp.write_bytes(data)
        os.replace(tmp, target)
        found = self.stat(key)
        assert found is not None
        return found


def _name_max(folder: Path) -> int:
    """The longest file name (bytes) ``folder``'s file system takes."""
    try:
        return int(os.pathconf(folder, "PC_NAME_MAX"))
    except (OSError, ValueError):
        return 255


def fitted(name: str, limit: int, suffix: str) -> str:
    """``name`` (ending in ``suffix``), or when longer than ``limit`` bytes its head, a digest of
    the whole and ``suffix``: distinct names stay distinct, and the suffix still says what the
    file is (``.reason.txt``, ``.parquet``, ``.tmp``)."""
    if len(name.encode()) <= limit:
        return name
    tail = f"-{hashlib.sha256(name.encode()).hexdigest()[:16]}{suffix}"
    head = name.encode()[: max(0, limit - len(tail.encode()))].decode(errors="ignore")
    return head + tail


def _parse_local_cursor(cursor: str | None) -> tuple[int, str] | None:
    if not cursor:
        return None
    ns, _, name = cursor.partition(":")
    return int(ns), name


class S3Inbox(Inbox):
    def __init__(
        self, location: str, settings: LakeSettings, *, settle_seconds: float = SETTLE_SECONDS
    ) -> None:
        rest = location.removeprefix("s3://")
        self.bucket, _, prefix = rest.partition("/")
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.location = location.rstrip("/")
        self._settings = settings
        self._client: Any = None
        self.settle_seconds = settle_seconds

    @property
    def client(self) -> Any:
        if self._client is None:  # built on first use: no network at import or load time
            import boto3

            s = self._settings
            self._client = boto3.client(
                "s3",
                endpoint_url=s.s3_endpoint or None,
                region_name=s.s3_region or None,
                aws_access_key_id=s.s3_access_key_id or None,
                aws_secret_access_key=s.s3_secret_access_key or None,
            )
        return self._client

    def list_new(self, table: str, cursor: str | None, limit: int) -> tuple[list[InboxFile], str | None]:
        base = f"{self.prefix}{table_folder(table)}/"
        settled = time.time() - self.settle_seconds
        out: list[InboxFile] = []
        start_after = cursor or ""
        last = cursor
        while len(out) < limit:
            kwargs: dict[str, Any] = {
                "Bucket": self.bucket,
                "Prefix": base,
                "Delimiter": "/",
                "MaxKeys": min(1000, max(1, limit - len(out))),
            }
            if start_after:
                kwargs["StartAfter"] = start_after
            page = self.client.list_objects_v2(**kwargs)
            contents = page.get("Contents", [])
            for obj in contents:
                name = obj["Key"][len(base) :]
                if obj["LastModified"].timestamp() > settled:
                    return out, last  # not settled: stop here so the cursor never passes it
                last = obj["Key"]
                if _wanted(name):
                    out.append(
                        InboxFile(
                            obj["Key"][len(self.prefix) :],
                            int(obj["Size"]),
                            int(obj["LastModified"].timestamp() * 1e9),
                            obj.get("ETag", "").strip('"'),
                        )
                    )
            if not page.get("IsTruncated") or not contents:
                break
            start_after = contents[-1]["Key"]
        return out, last

    def stat(self, key: str) -> InboxFile | None:
        from botocore.exceptions import ClientError

        try:
            head = self.client.head_object(Bucket=self.bucket, Key=self.prefix + key)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return None
            raise
        return InboxFile(
            key,
            int(head["ContentLength"]),
            int(head["LastModified"].timestamp() * 1e9),
            head.get("ETag", "").strip('"'),
        )

    @contextmanager
    def local_copy(self, file: InboxFile) -> Iterator[Path]:
        with tempfile.TemporaryDirectory(prefix="lake-inbox-") as tmp:
            path = Path(tmp) / file.name
            self.client.download_file(self.bucket, self.prefix + file.key, str(path))
            yield path

    def quarantine(self, file: InboxFile, reason: str) -> str:
        target = f"{QUARANTINE}/{file.key}"
        if self.stat(target) is not None:  # an earlier bad file of this name: keep it, as locally
            stem, dot, suffix = target.rpartition(".")
            target = f"{stem}.{time.time_ns()}{dot}{suffix}" if dot else f"{target}.{time.time_ns()}"
        self.client.copy_object(
            Bucket=self.bucket,
            Key=self.prefix + target,
            CopySource={"Bucket": self.bucket, "Key": self.prefix + file.key},
        )
        self.client.put_object(
            Bucket=self.bucket,
            Key=self.prefix + target + ".reason.txt",
            Body=(reason.rstrip() + "\n").encode(),
        )
        self.client.delete_object(Bucket=self.bucket, Key=self.prefix + file.key)
        return target

    def in_quarantine(self, key: str) -> bool:
        return self.stat(f"{QUARANTINE}/{key}") is not None

    def put(self, key: str, data: bytes) -> InboxFile:
        self.client.put_object(Bucket=self.bucket, Key=self.prefix + key, Body=data)
        found = self.stat(key)
        assert found is not None
        return found


def open_inbox(location: str, settings: LakeSettings, *, settle_seconds: float = SETTLE_SECONDS) -> Inbox:
    """The inbox at ``location``: files are listed once ``settle_seconds`` old."""
    if location.startswith("s3://"):
        return S3Inbox(location, settings, settle_seconds=settle_seconds)
    if "://" in location and not location.startswith("file://"):
        raise InvalidInput(f"unsupported inbox {location!r}: use a local folder or s3://bucket/prefix")
    return LocalInbox(location, settle_seconds=settle_seconds)
