"""KubernetesJobOperator waiting in the worker, end to end: real scheduler, api-server, dag-processor
and Airflow's own task runner in each worker pod (the sandbox runs pods as local processes).

* ``execution_timeout`` is Airflow's: the task fails with ``AirflowTaskTimeout``, ``on_kill()`` deletes
  the Job, and nothing of it is left;
* a failed Job's error names the container's exit code, and task logs carry no watch internals at INFO
  (item 8).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.stack import AirflowStack, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(300)]

DAG_ID = "in_worker_jobs"
DAGS = Path(__file__).parent / "dags_timeout"


@pytest.fixture(scope="module")
def stack() -> Iterator[AirflowStack]:
    with AirflowStack(dags_folder=DAGS, dag_ids=[DAG_ID], sandbox_args=["--bookmark-interval", "1"]) as s:
        yield s


def _jobs_of(stack: AirflowStack, task_id: str) -> list[dict]:
    return [
        j
        for j in stack.admin.objects("jobs", "default")
        if (j["metadata"].get("labels") or {}).get("task_id") == task_id
    ]


def test_in_worker_timeout_failure_and_quiet_logs(stack: AirflowStack) -> None:
    run_id = stack.trigger_dag(DAG_ID)
    stack.wait_for_run(DAG_ID, run_id, timeout=240)
    states = {task: s["state"] for task, s in stack.task_states(DAG_ID, run_id).items()}
    assert states == {"times_out": "failed", "fails": "failed", "quiet": "success"}, states

    timed_out = stack.task_log(DAG_ID, run_id, "times_out", 1)
    assert "AirflowTaskTimeout" in timed_out, timed_out[-3000:]
    assert re.search(r"Deleted Job default/job-times-out-\S+ \(Foreground\)", timed_out), timed_out[-3000:]
    # on_kill deleted it (Foreground: the Job goes once its pods are gone); the controller made no more
    wait_until(lambda: not _jobs_of(stack, "times_out"), timeout=60, what="times_out's Job deletion")

    failed = stack.task_log(DAG_ID, run_id, "fails", 1)
    assert re.search(r"container 'base' exited with code 3", failed), failed[-3000:]
    assert re.search(r"pod job-fails-\S+: failed, exit code 3, reason Error", failed), failed[-3000:]

    quiet = stack.task_log(DAG_ID, run_id, "quiet", 1)
    assert "[base] hello" in quiet, quiet[-3000:]
    assert not re.search(r"informer \S+: (starting|listed|relisted)", quiet), quiet[-3000:]
