"""The run worker of ``test_fanout``: runs ``fanout_project``'s job in a process of its own, as a
deployment's run worker does, one request (a JSON line on stdin) at a time, each answered with
one JSON line on stdout.

Why not in the pytest process: the multiprocess executor forks its steps from Python's
forkserver, one per process, which preloads what the first caller asked for. Under pytest that
may be another test's (the catalog's kill tests start one preloading their own modules), and then
every step imported the code location and Dagster's storage itself: 85 s for test_fanout after
one catalog kill test, 21 s alone, at load 8 on 2 cores. Here the job's executor starts it, with
the platform's ``STEP_PRELOAD``, as in a run worker."""

from __future__ import annotations

import json
import os
import sys

import dagster as dg

from lake_platform_tests.defs.fanout_project import multiprocess_job


def serve() -> None:
    # Answers go to the original stdout; anything else printed goes to stderr (the log).
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    job = dg.reconstructable(multiprocess_job)
    for line in sys.stdin:
        request = json.loads(line)
        with dg.DagsterInstance.from_ref(dg.deserialize_value(request["instance"])) as instance:
            parent = request.get("from_failure")
            options = dg.ReexecutionOptions.from_failure(parent, instance) if parent else None
            with dg.execute_job(
                job,
                instance,
                run_config=request.get("run_config"),
                tags=request["tags"],
                raise_on_error=False,
                reexecution_options=options,
            ) as result:
                answer = {"run_id": result.run_id, "success": result.success}
        answers.write(json.dumps(answer) + "\n")
        answers.flush()


if __name__ == "__main__":
    serve()
