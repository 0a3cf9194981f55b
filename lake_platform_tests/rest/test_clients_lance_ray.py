"""lance-ray, unmodified, on a local Ray with one CPU against our REST server
(``namespace_impl="rest"``): it reads a table through the namespace (DescribeTable, then the
registered version's files), and its writes (``write_lance``, ``compact_files``) commit around the
registry: lance-ray calls pylance's ``LanceDataset.commit`` / ``LanceDataset(uri, ...)`` with the
namespace client but without ``namespace_client_managed_versioning``, so pylance writes each
manifest straight to storage although DescribeTable says ``managed_versioning: true`` (lance-ray's
doing: ``lance.dataset`` and daft-lance honour it). The bypass detection catches those versions,
reports them (a ``bypass`` entry in the table's history, ``lake_bypassed_versions``), readers never
see them, and the data stays recoverable. lance-ray pins its own pylance (14.0.3) and Ray, so it
runs in a side environment (``lake_platform_tests/side_envs.py``)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import lance  # plays the operator who looks at the quarantined commit
import pyarrow.compute as pc
import pytest

from lake_platform.engine import lance_engine as engine
from lake_platform.observability.metrics import REGISTRY
from lake_platform_tests.rest.clients import rest_namespace, rows
from lake_platform_tests.rest.conftest import RestLake, start_rest_lake
from lake_platform_tests.rest.seen_requests import seen_requests
from lake_platform_tests.side_envs import run_json, side_python

#: lance-ray 0.5.0 (the newest release; it resolves to pylance 14.0.3) with Ray 2.60.0 and their
#: whole closure.
PINS = (
    "lance-ray==0.5.0",
    "annotated-types==0.8.0",
    "attrs==26.1.0",
    "certifi==2026.10.19.post1",
    "charset-normalizer==3.5.3",
    "click==8.5.1",
    "filelock==4.3.2",
    "fsspec==2026.9.0",
    "idna==3.21",
    "jsonschema==4.26.0",
    "jsonschema-specifications==2025.9.1",
    "lance-namespace==0.13.0",
    "lance-namespace-urllib3-client==0.13.0",
    "more-itertools==11.2.1",
    "msgpack==1.2.4",
    "numpy==2.4.6",
    "packaging==26.4",
    "pandas==3.1.1",
    "protobuf==7.36.2",
    "pyarrow==26.0.1",
    "pydantic==2.14.4",
    "pydantic-core==2.50.5",
    "pylance==14.0.3",
    "python-dateutil==4.0.0",
    "pyyaml==6.0.4",
    "ray==2.60.0",
    "referencing==0.37.0",
    "requests==2.34.2",
    "rpds-py==2026.9.1",
    "typing-extensions==4.16.0",
    "typing-inspection==0.4.5",
    "tzdata==2026.6",
    "urllib3==2.8.0",
)
T = ["p", "w", "ns", "events"]
NAME = "p.w.ns.events"

#: The client's calls, as a user writes them, on the smallest local Ray: one CPU, no dashboard,
#: the smallest object store Ray accepts, its session files under the test's directory.
SCRIPT = """
import json, os, sys, time
url, token, scratch = sys.argv[1], sys.argv[2], sys.argv[3]
os.environ["RAY_TMPDIR"] = scratch
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
os.environ["RAY_AUTH_MODE"] = "disabled"  # loopback only; else Ray writes a token under ~/.ray
started = time.monotonic()
import ray, lance_ray
where = dict(
    table_id=["p", "w", "ns", "events"],
    namespace_impl="rest",
    namespace_properties={"uri": url, "header.Authorization": "Bearer " + token},
)
def ids():
    return sorted(r["id"] for r in lance_ray.read_lance(**where).take_all())
ray.init(num_cpus=1, include_dashboard=False, object_store_memory=80 << 20, log_to_driver=False)
ray.data.DataContext.get_current().enable_progress_bars = False
try:
    out = {"up_seconds": time.monotonic() - started, "read": ids()}
    out["count"] = lance_ray.read_lance(**where).count()
    new = ray.data.from_items([{"id": 4, "tag": "ray"}, {"id": 5, "tag": "ray"}])
    lance_ray.write_lance(new, mode="append", **where)
    metrics = lance_ray.compact_files(**where)
    out["compacted"] = [metrics.fragments_removed, metrics.fragments_added]
    out["read_after"] = ids()
finally:
    ray.shutdown()
out["seconds"] = time.monotonic() - started
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestLake]:
    yield from start_rest_lake(tmp_path_factory.mktemp("lance_ray"))


def bypassed(lake: RestLake) -> float:
    return REGISTRY.get_sample_value("lake_bypassed_versions_total", {"project": "p"}) or 0.0


@pytest.mark.slow
def test_lance_ray_reads_and_its_writes_around_the_registry_are_caught_and_kept(
    lake: RestLake, tmp_path: Path
) -> None:
    ns = rest_namespace(lake.url, lake.tokens["writer"])
    lance.write_dataset(rows([1, 2]), namespace_client=ns, table_id=T, mode="create")
    lance.write_dataset(rows([3]), namespace_client=ns, table_id=T, mode="append")
    python = side_python("lance-ray", PINS)
    metric_before = bypassed(lake)

    # Ray's session directory holds its sockets, whose paths must stay under 108 bytes: a short
    # one, not the test's own
    with tempfile.TemporaryDirectory(prefix="ray-") as scratch, seen_requests() as seen:
        out = run_json(python, SCRIPT, lake.url, lake.tokens["writer"], scratch, timeout=600)

    assert out["up_seconds"] < 120 and out["seconds"] < 300, out  # Ray's start-up, the whole run
    # It reads the registered version; its append and its compaction (which read what storage
    # held, the append included: 3 fragments into 1) leave the namespace's readers where they were.
    assert (out["read"], out["count"], out["compacted"]) == ([1, 2, 3], 3, [3, 1])
    assert out["read_after"] == [1, 2, 3]
    # Nothing it wrote went through the catalog: no CreateTableVersion, no registry commit.
    assert {op for op, _ in seen} == {"DescribeTable", "ListTableVersions"}
    assert {status for _, status in seen} == {"200"}
    history = [(e.operation, e.from_version, e.to_version) for e in lake.catalog.reads.history(NAME)]
    assert history == [("declare", None, None), ("create", 0, 1), ("append", 1, 2)]
    location = lake.catalog.reads.open_table(NAME).record.location
    # its append (3), the compaction's fragment reservation (4) and rewrite (5), on storage only
    assert engine.versions_on_disk(location) == [1, 2, 3, 4, 5]

    # The bypass sensor's step finds them, quarantines them and reports them once.
    assert lake.catalog.manifests.catch_bypasses(NAME) == [3, 4, 5]
    assert lake.catalog.manifests.catch_bypasses(NAME) == []
    (report,) = [e for e in lake.catalog.reads.history(NAME) if e.operation == "bypass"]
    assert (report.from_version, report.detail["versions"]) == (2, [3, 4, 5])
    assert len(report.detail["quarantined"]) == 3
    assert bypassed(lake) - metric_before == 3
    assert engine.versions_on_disk(location) == [1, 2]
    assert [engine.manifest_version(e.path) for e in engine.quarantined_files(location)] == [5, 4, 3]
    snap = lake.catalog.reads.open_table(NAME)
    assert snap.version == 2 and sorted(snap.to_reader().read_all().column("id").to_pylist()) == [1, 2, 3]

    # Nothing is lost: the quarantined manifests put back in a copy give lance-ray's versions.
    copy = tmp_path / "recovered.lance"
    shutil.copytree(location, copy)
    for manifest in (copy / "_quarantine").rglob("*.manifest"):
        shutil.move(manifest, copy / "_versions" / manifest.name)
    recovered = lance.dataset(str(copy))
    assert recovered.version == 5 and len(recovered.get_fragments()) == 1
    assert pc.sum(recovered.to_table().column("id")).as_py() == 15
    assert sorted(lance.dataset(str(copy), version=3).to_table().column("id").to_pylist()) == [1, 2, 3, 4, 5]

    # The table stays writable through the catalog; its next version takes the number.
    assert lance.write_dataset(rows([6]), namespace_client=ns, table_id=T, mode="append").version == 3
    assert lake.catalog.reads.open_table(NAME).count_rows() == 4
