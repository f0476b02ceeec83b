"""Deferrable KubernetesJobOperator end to end: a real scheduler, api-server, dag-processor and triggerer
on SQLite; Jobs run by the sandbox. The triggerer is SIGKILLed while the waits are in flight and started
again; the new one picks the waits up from the database and they end correctly.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator

import pytest
from support.stack import AirflowStack, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(300)]

DAG_ID = "deferrable_jobs"

#: A bytes repr (b'...') in a log, not a word that happens to end in "b" before a quote (a pod name).
BYTES_REPR = re.compile(r"(?<!\w)b['\"]")


@pytest.fixture(scope="module")
def stack() -> Iterator[AirflowStack]:
    with AirflowStack(
        triggerer=True,
        dag_ids=[DAG_ID],
        sandbox_args=["--fail-images", r"^registry\.invalid/", "--bookmark-interval", "1"],
        keep=bool(os.environ.get("JOBWATCH_E2E_KEEP")),  # keep AIRFLOW_HOME (logs) for debugging
    ) as s:
        yield s


def test_deferred_jobs_survive_a_triggerer_kill(stack: AirflowStack) -> None:
    run_id = stack.trigger_dag(DAG_ID)
    wait_until(
        lambda: stack.task_states(DAG_ID, run_id).get("long", {}).get("state") == "deferred",
        timeout=150,
        what=f"task 'long' to defer; states {stack.task_states(DAG_ID, run_id)}",
    )
    long_jobs = [
        j
        for j in stack.admin.objects("jobs", "default")
        if j["metadata"].get("labels", {}).get("task_id") == "long"
    ]
    assert len(long_jobs) == 1
    conditions = (long_jobs[0].get("status") or {}).get("conditions") or []
    assert not any(c["type"] in ("Complete", "Failed") for c in conditions), "the kill must hit a running Job"
    stack.kill("triggerer")
    time.sleep(2)  # the Jobs go on without anyone watching them
    stack.start("triggerer")
    stack.wait_for_run(DAG_ID, run_id, timeout=200)
    states = {task: s["state"] for task, s in stack.task_states(DAG_ID, run_id).items()}
    assert states == {
        "quick": "success",
        "long": "success",
        "fan_out": "success",
        "fails": "failed",
        "big_result": "success",
        "bad_image": "failed",
    }, states
    long_log = stack.task_log(DAG_ID, run_id, "long", 1)
    # decoded container lines, prefixed with pod and container (a b'...' repr slipped through once)
    assert re.search(r"\[job-long-[a-z0-9-]+\] \[base\] long job starts", long_log), long_log[-3000:]
    assert "[base] long job done" in long_log
    assert not BYTES_REPR.search(long_log), long_log[-3000:]
    fan_out_log = stack.task_log(DAG_ID, run_id, "fan_out", 1)
    assert fan_out_log.count("[base] one of three") == 3, fan_out_log[-3000:]
    # a result of ~1 MiB, printed by the pod's XCom sidecar and read from its log by the triggerer
    (stored,) = stack.query(
        "SELECT value FROM xcom WHERE dag_id = ? AND run_id = ? AND task_id = 'big_result' AND key = 'return_value'",
        (DAG_ID, run_id),
    )
    value = json.loads(stored[0])
    value = json.loads(value) if isinstance(value, str) else value  # Airflow stores its JSON text as JSON
    assert value == [{"id": i} for i in range(100_000)], str(value)[:300]
    fails_log = stack.task_log(DAG_ID, run_id, "fails", 1)
    assert "BackoffLimitExceeded" in fails_log
    assert "[base] about to fail" in fails_log  # a failed Job's log is written too
    assert "ErrImagePull" in stack.task_log(DAG_ID, run_id, "bad_image", 1) or "ImagePullBackOff" in (
        stack.task_log(DAG_ID, run_id, "bad_image", 1)
    )

    # on_finish_action="delete_pod" (upstream's meaning): the Jobs' pods are gone, the Jobs that ended
    # stay; bad_image's Job, which could never run, is deleted as on_kill deletes it (its task failed).
    # big_result's pod is kept: its result is too large to be written onto its Job, and the pod holds it
    # for a second run of the trigger (the Job's ttlSecondsAfterFinished removes both).
    def pods_left() -> list[str]:
        return sorted(p["metadata"]["labels"].get("task_id") for p in stack.admin.objects("pods", "default"))

    wait_until(
        lambda: pods_left() == ["big_result"], timeout=30, what="the pods' deletion, all but big_result's"
    )
    wait_until(
        lambda: len(stack.admin.objects("jobs", "default")) == 5, timeout=30, what="bad_image's Job deletion"
    )
    assert sorted(j["metadata"]["labels"].get("task_id") for j in stack.admin.objects("jobs", "default")) == [
        "big_result",
        "fails",
        "fan_out",
        "long",
        "quick",
    ]
