"""Disruptions and Kueue with real Airflow processes (scheduler, api-server, dag-processor, triggerer).

A deferrable Job whose pod is evicted mid-run, with ``disruption_retries=1`` and ``backoff_limit=0``,
succeeds on try 1; a Kueue Job admitted after a wait, and another preempted by Kueue and re-admitted,
both succeed on try 1 (``tests/e2e/dags_disruptions/disruptions.py``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.stack import AirflowStack, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(400)]

DAGS = Path(__file__).parent / "dags_disruptions"
DAG_ID = "disruptions"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AirflowStack]:
    markers = tmp_path_factory.mktemp("markers")
    with AirflowStack(
        triggerer=True, dags_folder=DAGS, dag_ids=[DAG_ID], env={"JOBWATCH_E2E_MARKERS": str(markers)}
    ) as s:
        yield s


def _task_and_trigger_log(stack: AirflowStack, run_id: str, task_id: str) -> str:
    """The worker's log of try 1 and the triggerer's (``attempt=1.log.trigger.<id>.log``) for the task."""
    base = stack.home / "logs" / f"dag_id={DAG_ID}" / f"run_id={run_id}" / f"task_id={task_id}"
    return "\n".join(p.read_text(errors="replace") for p in sorted(base.glob("attempt=1.log*")))


def _events(log: str) -> str:
    """The messages of a JSON-lines log, for an assertion's explanation."""
    out = []
    for line in log.splitlines():
        try:
            out.append(str(json.loads(line).get("event"))[:300])
        except ValueError:
            out.append(line[:300])
    return "\n".join(out[-40:])


def _job_of(stack: AirflowStack, task_id: str) -> dict[str, Any] | None:
    for job in stack.admin.objects("jobs", "default"):
        if ((job["spec"].get("template") or {}).get("metadata") or {}).get("labels", {}).get(
            "task_id"
        ) == task_id:
            return dict(job)
    return None


def _running_pod_of(stack: AirflowStack, job_name: str) -> str | None:
    for pod in stack.admin.objects("pods", "default"):
        meta = pod["metadata"]
        if (meta.get("labels") or {}).get("job-name") == job_name and pod["status"].get("phase") == "Running":
            if not meta.get("deletionTimestamp"):
                return str(meta["name"])
    return None


def test_evicted_job_and_kueue_jobs_succeed_on_try_1(stack: AirflowStack) -> None:
    stack.admin.fault("set_kueue", capacity=0)  # the Kueue Jobs wait, suspended
    run_id = stack.trigger_dag(DAG_ID)

    def logged(task: str, text: str) -> bool:
        return text in _task_and_trigger_log(stack, run_id, task)

    # The faults come once the triggerer watches (as in production, where a deferral precedes them by far)
    for task in ("kueue_wait", "kueue_preempted"):
        wait_until(
            lambda task=task: logged(task, "waiting to be admitted by Kueue (queue 'local-queue')"),
            timeout=180,
            what=f"the trigger of {task} to log its Job's suspension",
        )
        job = _job_of(stack, task)
        assert job is not None and job["spec"]["suspend"] is True, job
    wait_until(lambda: logged("evicted", "(ID "), timeout=180, what="the trigger of 'evicted' to start")
    evicted = _job_of(stack, "evicted")
    assert evicted is not None and evicted["spec"]["podFailurePolicy"]["rules"][0]["action"] == "Ignore"
    pod = wait_until(
        lambda: _running_pod_of(stack, evicted["metadata"]["name"]), timeout=60, what="the first pod running"
    )
    stack.admin.fault("api_evict_pod", namespace="default", name=pod, grace_seconds=1)

    stack.admin.fault("set_kueue", capacity=2)
    preempted = _job_of(stack, "kueue_preempted")
    assert preempted is not None
    wait_until(
        lambda: (
            logged("kueue_preempted", "was admitted (resumed)")
            and _running_pod_of(stack, preempted["metadata"]["name"])
        ),
        timeout=60,
        what="the Kueue Job admitted and running",
    )
    stack.admin.fault(
        "kueue_preempt", namespace="default", name=preempted["metadata"]["name"], hold_seconds=2
    )

    stack.wait_for_run(DAG_ID, run_id, timeout=240)
    states = {
        task: (s["state"], s.get("try_number")) for task, s in stack.task_states(DAG_ID, run_id).items()
    }
    assert {task: state for task, (state, _try) in states.items()} == {
        "evicted": "success",
        "kueue_wait": "success",
        "kueue_preempted": "success",
    }, (states, _events(_task_and_trigger_log(stack, run_id, "evicted")))
    assert all(t in (None, 1) for _s, t in states.values()), states
    wait_job = _job_of(stack, "kueue_wait")
    assert wait_job is not None
    assert stack.admin.fault("kueue_state")["admissions"] == {
        f"default/{wait_job['metadata']['name']}": 1,
        f"default/{preempted['metadata']['name']}": 2,
    }
    assert logged("kueue_wait", "was admitted (resumed)")
    preempted_log = _task_and_trigger_log(stack, run_id, "kueue_preempted")
    assert "was suspended again (preempted by Kueue" in preempted_log, preempted_log[-3000:]
    evicted_log = _task_and_trigger_log(stack, run_id, "evicted")
    assert "second run" in evicted_log, evicted_log[-3000:]
    assert "was disrupted (1 of 1 allowed): evicted through the Eviction API" in evicted_log, evicted_log[
        -3000:
    ]
