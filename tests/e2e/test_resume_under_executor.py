"""End to end: a deferrable task that resumes at once is not failed by the executor.

Real api-server, scheduler, dag-processor and triggerer on SQLite; worker pods run by the sandbox.
The task defers to a trigger that fires at once, so the scheduler queues its key (same try number)
again while the pod of its first launch is still running (``tests/e2e/dags_launch``: a second
container keeps that pod up until the test releases it). Pod creates are answered 503 meanwhile, and
the first pod ends while the second launch's create is being retried. The old pod's end must not be
reported against the queued launch: the task succeeds once, on try 1.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.stack import AirflowStack, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(240)]

DAG_ID = "launch_identity"
TASK_ID = "resumes_at_once"
DAGS = Path(__file__).parent / "dags_launch"


@pytest.fixture(scope="module")
def release_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("launch-identity") / "release"


@pytest.fixture(scope="module")
def stack(release_file: Path) -> Iterator[AirflowStack]:
    with AirflowStack(
        triggerer=True,
        dags_folder=DAGS,
        dag_ids=[DAG_ID, "disrupted_before_start"],
        # Pods stay Pending (containers being created) for 6 s: time to disrupt one before it starts, also
        # on a loaded machine (3 s was not always enough).
        sandbox_args=["--bookmark-interval", "1", "--pod-start-delay", "6"],
        env={"JOBWATCH_E2E_RELEASE_FILE": str(release_file)},
    ) as s:
        yield s


def _pods(stack: AirflowStack, run_id: str) -> list[dict[str, Any]]:
    return [
        p
        for p in stack.admin.objects("pods", "default")
        if p["metadata"]["annotations"].get("run_id") == run_id
        and p["metadata"]["annotations"].get("task_id") == TASK_ID
    ]


def _ti(stack: AirflowStack, run_id: str) -> tuple[str, int, str | None] | None:
    rows = stack.query(
        "SELECT state, try_number, next_method FROM task_instance WHERE dag_id = ? AND run_id = ? "
        "AND task_id = ?",
        (DAG_ID, run_id, TASK_ID),
    )
    return (rows[0][0], rows[0][1], rows[0][2]) if rows else None


def test_a_task_resumed_at_once_succeeds_once_while_pod_creates_are_refused(
    stack: AirflowStack, release_file: Path
) -> None:
    run_id = stack.trigger_dag(DAG_ID)
    first = wait_until(
        lambda: [p for p in _pods(stack, run_id) if p["status"].get("phase") == "Running"],
        timeout=120,
        what="the first launch's pod to run",
    )[0]
    first_name = first["metadata"]["name"]
    # From now on every pod create is answered 503: the resumed launch's create is retried with backoff.
    stack.admin.fault("set_error_rate", share=1.0, status=503, verbs=["create"])
    try:
        # The task defers, the trigger fires, and the scheduler queues the key again (same try)...
        wait_until(
            lambda: (ti := _ti(stack, run_id)) and ti[0] == "queued" and ti[2] is not None,
            timeout=120,
            what=f"{TASK_ID} to be queued again after its deferral; now {_ti(stack, run_id)}",
        )
        wait_until(
            lambda: stack.executor_status().get("create_retries", 0) >= 1,
            timeout=60,
            what="the resumed launch's pod create to be refused",
        )
        # ... while the first launch's pod is still running (its second container lingers).
        (still,) = [p for p in _pods(stack, run_id) if p["metadata"]["name"] == first_name]
        assert still["status"].get("phase") == "Running", still["status"]
        # Now the first pod ends, during the second launch's create retries.
        release_file.touch()
        wait_until(
            lambda: not any(p["metadata"]["name"] == first_name for p in _pods(stack, run_id)),
            timeout=60,
            what="the first launch's pod to be cleaned up",
        )
        ti = _ti(stack, run_id)
        assert ti is not None and ti[0] == "queued", f"the task left queued when its old pod ended: {ti}"
    finally:
        stack.admin.fault("set_error_rate", share=0.0)
    assert stack.wait_for_run(DAG_ID, run_id, timeout=150) == "success"
    assert stack.task_states(DAG_ID, run_id)[TASK_ID] == {"state": "success", "try_number": 1, "max_tries": 0}
    assert stack.audit_events(DAG_ID, run_id) == [], "the scheduler saw an end for a queued task"
    assert "resumed after deferral (try 1)" in stack.task_log(DAG_ID, run_id, TASK_ID, 1)
    status = wait_until(
        lambda: (s := stack.executor_status()) and s.get("running") == 0 and s,
        timeout=30,
        what="the executor to hold no running task",
    )
    assert status["stale_pods_cleaned"] == 1
    assert status["success"] == 1 and status["failed"] == 0


def test_a_pod_evicted_before_it_started_is_launched_again_and_the_task_succeeds_on_try_1(
    stack: AirflowStack,
) -> None:
    dag_id, task_id = "disrupted_before_start", "never_started_first"
    run_id = stack.trigger_dag(dag_id)

    def pending_pod() -> dict[str, Any] | None:
        pods = [
            p
            for p in stack.admin.objects("pods", "default")
            if p["metadata"]["annotations"].get("run_id") == run_id
            and p["metadata"]["annotations"].get("task_id") == task_id
        ]
        return pods[0] if pods else None

    first = wait_until(pending_pod, timeout=120, what="the task's first pod", interval=0.05)
    assert first["status"].get("phase") == "Pending", first["status"]
    stack.admin.fault("evict_pod", namespace="default", name=first["metadata"]["name"])
    assert stack.wait_for_run(dag_id, run_id, timeout=150) == "success", stack.task_states(dag_id, run_id)
    assert stack.task_states(dag_id, run_id)[task_id] == {"state": "success", "try_number": 1, "max_tries": 0}
    log = stack.task_log(dag_id, run_id, task_id, 1)
    assert "launching it again" in log and first["metadata"]["name"] in log, log[-3000:]
    assert "running on try 1" in log
    status = wait_until(
        lambda: (s := stack.executor_status()) and s.get("running") == 0 and s,
        timeout=30,
        what="the executor to hold no running task",
    )
    assert status["disruption_relaunches"] == 1
