"""The results area: where heavy query results are spooled, as Arrow IPC stream segments.

Layout under the root (a folder or ``s3://bucket/prefix``)::

    <project>/<job id>/job.json        written first: {"expires_at": epoch s, "created_at": ...}
    <project>/<job id>/seg-00000.arrows ...   the result, in order, each a complete IPC stream
    <project>/<job id>/done.json       written last: {"segments": [{"name", "rows", "bytes"}],
                                        "schema": base64 IPC schema, "rows": total}

``job.json`` comes first so a job is never without its expiry: reclaim deletes a job only once
that has passed (a job without one is reclaimed by age, it crashed before writing anything).
No Lance here: pyarrow's filesystems, the same ones ``storage`` uses for table locations.

Writing can run out of room (a full disk or quota; on S3, a server out of storage): the writer
deletes its job and answers :class:`ResultsAreaFull`, and every file it opened is closed first,
even when closing the IPC writer fails too, since a deleted file that is still open keeps its
space until the process ends. ``max_result_bytes`` (``LAKE_RESULTS_MAX_BYTES``) caps one
result's bytes; the writers stop a result past it.
"""

from __future__ import annotations

import base64
import errno
import json
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lake_platform import owner_only
from lake_platform.engine.storage import filesystem, s3_client
from lake_platform.errors import ResultNotFound, ServiceUnavailable, SettingsError

if TYPE_CHECKING:
    import pyarrow as pa

    from lake_platform.settings import LakeSettings

JOB_FILE = "job.json"
DONE_FILE = "done.json"


@dataclass(frozen=True)
class JobEntry:
    """A job found in the area: its expiry (None: no job.json) and newest file time."""

    project: str
    job: str
    expires_at: float | None
    mtime: float | None


_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
# pyarrow and S3 servers report a full store in text only: the OS's words, MinIO's code, HTTP 507.
_FULL_TEXTS = (
    "No space left on device",
    "Disk quota exceeded",
    "XMinioStorageFull",
    "Insufficient Storage",
    "HTTP status 507",
)


class ResultsAreaFull(ServiceUnavailable):
    """The results area has no room for a result (a full disk or quota). The query was fine and
    succeeds once space is back, so HTTP 503 with Retry-After; over gRPC RESOURCE_EXHAUSTED,
    the code gRPC defines for "the entire file system is out of space" (UNAVAILABLE would tell
    clients the service is down, and some retry that at once)."""

    grpc_status = "RESOURCE_EXHAUSTED"


def out_of_space(exc: BaseException) -> bool:
    """Whether a write failed because the store is full (ENOSPC, EDQUOT, or their text)."""
    if not isinstance(exc, OSError):
        return False
    return exc.errno in _FULL_ERRNOS or any(text in str(exc) for text in _FULL_TEXTS)


def full_error(exc: BaseException) -> BaseException:
    """``exc`` as the error a writer answers: ResultsAreaFull for a full store, else itself."""
    if out_of_space(exc):
        return ResultsAreaFull("the results area is out of space; retry later or narrow the query")
    return exc


class ResultsArea:
    def __init__(
        self, root: str, storage_options: dict[str, str] | None = None, *, max_result_bytes: int = 0
    ) -> None:
        self.root = root.rstrip("/")
        self.storage_options = dict(storage_options or {})
        self.max_result_bytes = max_result_bytes  # 0: no cap
        self.fs, self.base = filesystem(self.root, storage_options)
        self.base = self.base.rstrip("/")

    @classmethod
    def of(cls, settings: LakeSettings) -> ResultsArea:
        """The area ``LAKE_RESULTS_ROOT`` names, with its storage options and result cap."""
        root = settings.results_root
        return cls(root, settings.storage_options(root), max_result_bytes=settings.results_max_bytes)

    def over_cap(self, written: int) -> str | None:
        """Why a result of ``written`` bytes must stop (None: it is within the cap)."""
        if not self.max_result_bytes or written <= self.max_result_bytes:
            return None
        return (
            f"the result is larger than LAKE_RESULTS_MAX_BYTES={self.max_result_bytes}; "
            "narrow the query or add a LIMIT"
        )

    def presign(self, project: str, job: str, name: str, seconds: int) -> str | None:
        """A pre-signed HTTPS GET of a segment on S3 (None on a local folder): the Arrow IPC
        stream's bytes, with no server in the path."""
        if not self.root.startswith("s3://"):
            return None
        bucket, _, key = f"{self.job_dir(project, job)}/{name}".partition("/")
        return str(
            s3_client(self.storage_options).generate_presigned_url(
                "get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=max(1, seconds)
            )
        )

    def check_writable(self) -> None:
        """SettingsError naming LAKE_RESULTS_ROOT unless a file can be written and removed there."""
        probe = f"{self.base}/.probe-{secrets.token_hex(6)}"
        try:
            self._make_dir(self.base)
            with self._output(probe) as out:
                out.write(b"ok")
            self.fs.delete_file(probe)
        except Exception as exc:  # noqa: BLE001 - OSError, PermissionError, S3 errors
            raise SettingsError(
                f"LAKE_RESULTS_ROOT: cannot write spooled results under {self.root} ({type(exc).__name__})"
            ) from None

    def job_dir(self, project: str, job: str) -> str:
        return f"{self.base}/{project}/{job}"

    def create_job(self, project: str, job: str, expires_at: float, schema: pa.Schema) -> None:
        """The job's folder and ``job.json``; on a full store nothing is left and this raises
        ResultsAreaFull."""
        path = self.job_dir(project, job)
        body = {"expires_at": expires_at, "created_at": time.time(), "schema": _schema_text(schema)}
        try:
            self._make_dir(path)
            self._write_json(f"{path}/{JOB_FILE}", body)
        except OSError as exc:
            self.remove_job(project, job)
            raise full_error(exc) from exc

    def job(self, project: str, job: str) -> dict[str, Any]:
        """The job's record (expiry, schema); ResultNotFound once it is gone."""
        body = self._read_json(f"{self.job_dir(project, job)}/{JOB_FILE}")
        if not isinstance(body, dict) or "expires_at" not in body:
            raise ResultNotFound(
                "the spooled result is gone (expired, cancelled or reclaimed); run the query again"
            )
        return body

    def segment_sink(self, project: str, job: str, name: str) -> Any:
        return self._output(f"{self.job_dir(project, job)}/{name}")

    def finish_job(
        self, project: str, job: str, schema: pa.Schema, segments: list[dict[str, Any]], *, ordered: bool
    ) -> None:
        body = {
            "segments": segments,
            "rows": sum(s["rows"] for s in segments),
            "schema": _schema_text(schema),
            "ordered": ordered,
        }
        self._write_json(f"{self.job_dir(project, job)}/{DONE_FILE}", body)

    def done(self, project: str, job: str) -> dict[str, Any] | None:
        """The finished job's record, or None while it runs; ResultNotFound once it is gone."""
        path = self.job_dir(project, job)
        body = self._read_json(f"{path}/{DONE_FILE}")
        if body is not None:
            return body
        if self._read_json(f"{path}/{JOB_FILE}") is None:
            raise ResultNotFound(
                "the spooled result is gone (expired, cancelled or reclaimed); run the query again"
            )
        return None

    def open_segment(self, project: str, job: str, name: str) -> pa.RecordBatchReader:
        import pyarrow as pa

        try:
            stream = self.fs.open_input_stream(f"{self.job_dir(project, job)}/{name}")
            return pa.ipc.open_stream(stream)
        except FileNotFoundError:
            raise ResultNotFound(
                "this segment of the spooled result is gone (expired, cancelled or reclaimed); "
                "run the query again"
            ) from None

    def remove_job(self, project: str, job: str) -> None:
        try:
            self.fs.delete_dir(self.job_dir(project, job))
        except FileNotFoundError:
            pass

    def jobs(self) -> Iterator[JobEntry]:
        """Every job in the area (the projects' folders, then their jobs')."""
        import pyarrow.fs as pafs

        try:
            projects = self.fs.get_file_info(pafs.FileSelector(self.base, allow_not_found=True))
        except FileNotFoundError:
            return
        for project in projects:
            if project.type != pafs.FileType.Directory:
                continue
            for job in self.fs.get_file_info(pafs.FileSelector(project.path, allow_not_found=True)):
                if job.type != pafs.FileType.Directory:
                    continue
                files = self.fs.get_file_info(pafs.FileSelector(job.path, allow_not_found=True))
                times = [f.mtime.timestamp() for f in files if f.mtime is not None]
                meta = self._read_json(f"{job.path}/{JOB_FILE}")
                expires = meta.get("expires_at") if isinstance(meta, dict) else None
                yield JobEntry(
                    project.base_name,
                    job.base_name,
                    float(expires) if isinstance(expires, int | float) else None,
                    max(times) if times else (job.mtime.timestamp() if job.mtime else None),
                )

    # Results are a tenant's data: on a local folder every folder is 0700 and every file 0600
    # whatever the umask (pyarrow's LocalFileSystem would follow it). A file created 0600 keeps
    # that mode when pyarrow then opens it by name.
    def _make_dir(self, path: str) -> None:
        if self.root.startswith("s3://"):
            self.fs.create_dir(path, recursive=True)
        else:
            owner_only.make_dir(path)

    def _output(self, path: str) -> Any:
        if not self.root.startswith("s3://"):
            owner_only.touch(path)
        return self.fs.open_output_stream(path)

    def _write_json(self, path: str, body: dict[str, Any]) -> None:
        # Written aside and moved in: a reader never sees half a record (on S3 one PUT is atomic
        # already; a local rename is).
        if self.root.startswith("s3://"):
            with self.fs.open_output_stream(path) as out:
                out.write(json.dumps(body).encode())
            return
        aside = f"{path}.{secrets.token_hex(4)}.tmp"
        with self._output(aside) as out:
            out.write(json.dumps(body).encode())
        self.fs.move(aside, path)

    def _read_json(self, path: str) -> Any:
        try:
            with self.fs.open_input_stream(path) as f:
                return json.loads(f.read())
        except FileNotFoundError:
            return None
        except ValueError:
            return {}


class SegmentWriter:
    """One segment being written: an Arrow IPC writer (stream or file format) over a file of
    the area. ``close`` and ``discard`` always close the file itself, even when the IPC
    writer's own close fails (on a full disk, writing the end of the stream fails)."""

    def __init__(
        self, area: ResultsArea, project: str, job: str, name: str, schema: pa.Schema, *, ipc_file: bool
    ) -> None:
        import pyarrow as pa

        self.name = name
        self._sink = area.segment_sink(project, job, name)
        try:
            self._writer = (pa.ipc.new_file if ipc_file else pa.ipc.new_stream)(self._sink, schema)
        except BaseException:
            self._sink.close()
            raise

    def write(self, batch: pa.RecordBatch) -> None:
        self._writer.write_batch(batch)

    def tell(self) -> int:
        """Bytes written to the file so far."""
        return int(self._sink.tell())

    def close(self) -> int:
        """Finish the segment; its size in bytes."""
        try:
            self._writer.close()
            return self.tell()
        finally:
            self._sink.close()

    def discard(self) -> None:
        """Close everything without raising: the job's files are deleted next."""
        try:
            self._writer.close()
        except Exception:  # noqa: BLE001, S110 - a full disk fails here; the file is closed below
            pass
        try:
            self._sink.close()
        except Exception:  # noqa: BLE001, S110 - nothing more can be released
            pass


def _schema_text(schema: pa.Schema) -> str:
    return base64.b64encode(schema.serialize().to_pybytes()).decode()


def schema_of(done: dict[str, Any]) -> pa.Schema:
    import pyarrow as pa

    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(done["schema"])))


__all__ = [
    "DONE_FILE",
    "JOB_FILE",
    "JobEntry",
    "ResultsArea",
    "ResultsAreaFull",
    "SegmentWriter",
    "full_error",
    "out_of_space",
    "schema_of",
]
