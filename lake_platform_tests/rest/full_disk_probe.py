"""QueryTable spooling into a results area on an 8 MiB tmpfs (run by
``engine/small_disk.run_on_tmpfs``): a result larger than the disk, then one that fits, twice.
Prints what a client and the process saw: statuses, headers, open deleted files, free space.

``python -m lake_platform_tests.rest.full_disk_probe TMP RESULTS``
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa

from lake_platform_tests.engine.small_disk import free_fraction, open_deleted_files
from lake_platform_tests.rest.conftest import RestLake, start_rest_lake

ROWS = 60_000  # about 13 MB as an Arrow file: more than the disk
FITS = 10_000  # about 2 MB


def table() -> pa.Table:
    ids = list(range(ROWS))
    return pa.table({"id": pa.array(ids, pa.int64()), "pad": [f"{i:0200d}" for i in ids]})


def query(lake: RestLake, k: int, results: Path) -> dict[str, Any]:
    resp = lake.post(
        "/v1/table/p$w$ns$t/query", {"vector": {}, "k": k}, who="reader", headers={"x-lake-result": "handle"}
    )
    seen: dict[str, Any] = {
        "status": resp.status_code,
        "content_type": resp.headers.get("content-type"),
        "retry_after": resp.headers.get("retry-after"),
        "open_deleted": open_deleted_files(results),
        "free": free_fraction(results),
        "jobs_left": sorted(p.name for p in results.glob("p/*")),
    }
    if resp.status_code == 200:
        answer = resp.json()
        seen["rows"] = sum(
            pa.ipc.open_file(pa.BufferReader(lake.get(url, who="reader").content)).read_all().num_rows
            for url in answer["segments"]
        )
        seen["handle"] = answer["result_handle"]
    else:
        seen["problem"] = resp.json()
    return seen


def main(tmp: Path, results: Path) -> None:
    for lake in start_rest_lake(
        tmp, results_root=str(results), rest_inline_max_rows=1000, rest_inline_max_bytes=1 << 20
    ):
        lake.catalog.tables.create_table("p.w.ns.t", table().to_reader())
        lake.service.snapshots.refresh()
        lake.service.snapshots.refresh()  # the first may join a load begun before the create
        steps = []
        for _ in range(2):
            steps.append(query(lake, 0, results))  # all of it: the disk fills
            fits = query(lake, FITS, results)
            steps.append(fits)
            if "handle" in fits:  # done with it: the next big one starts on an empty disk again
                lake.service.results_sweeper.area.remove_job("p", fits["handle"].split(".")[1])
        print(json.dumps({"steps": steps}))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
