"""The testing helpers a DAG author uses (``airflow_jobwatch_testing``) with JobWatchExecutor.

``run_dag`` runs tasks as ``dag.test()`` does, not through an executor (docs/testing.md, "With the
executor"). The sandbox fixture, its fault helpers and the shipped worker pod template are the same for an
executor test: here the pytest plugin's ``jobwatch_sandbox`` replaces this directory's own sandbox fixture,
the executor runs with ``airflow_jobwatch_testing.pod_template``, and it is driven as the scheduler's loop
drives it. The helpers' faults must reach the executor's watcher as the sandbox's own do: watches cut and
answered ``410 Gone`` lose no result; an evicted pod fails its task naming the eviction.
"""

from __future__ import annotations

from typing import Any

import pytest
from exec_helpers import heartbeat_until, submit, terminal
from support.workloads import make_workload

from airflow_jobwatch_testing import RunningSandbox

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def kube_sandbox(jobwatch_sandbox: RunningSandbox) -> tuple[Any, str]:
    """The plugin's sandbox in place of this directory's (``executor_factory`` starts the executor on it,
    with the pod template of ``airflow_jobwatch_testing.pod_template``)."""
    return jobwatch_sandbox.thread, str(jobwatch_sandbox.kubeconfig)


def _running(sb: RunningSandbox, task_id: str) -> dict[str, Any] | None:
    for pod in sb.pods():
        if (
            pod["metadata"]["annotations"].get("task_id") == task_id
            and pod["status"].get("phase") == "Running"
        ):
            return pod
    return None


def test_watches_cut_and_answered_410_lose_no_result(
    executor_factory: Any, jobwatch_sandbox: RunningSandbox
) -> None:
    ex = executor_factory()
    ok = make_workload(task_id="ok", command="sleep 4; exit 0")
    bad = make_workload(task_id="bad", command="sleep 4; exit 2")
    submit(ex, ok, bad)
    events: dict[Any, Any] = {}
    heartbeat_until(
        ex,
        lambda _: (
            _running(jobwatch_sandbox, "ok") is not None and _running(jobwatch_sandbox, "bad") is not None
        ),
        timeout=60,
        events=events,
    )
    # Both pods end while every watch resumed from a resourceVersion meets 410 Gone (the one open now is
    # cut): only by listing again can the watcher see them end.
    jobwatch_sandbox.answer_410()
    jobwatch_sandbox.drop_watches()
    heartbeat_until(ex, lambda e: {"ok", "bad"} <= terminal(e).keys(), timeout=90, events=events)
    jobwatch_sandbox.answer_410(False)
    results = terminal(events)
    assert results["ok"][0] == "success", results
    assert results["bad"][0] == "failed", results
    assert "exited with code 2" in results["bad"][1]


def test_an_evicted_pod_fails_its_task_naming_the_eviction(
    executor_factory: Any, jobwatch_sandbox: RunningSandbox
) -> None:
    ex = executor_factory()
    submit(ex, make_workload(task_id="victim", command="sleep 120"))
    events: dict[Any, Any] = {}
    heartbeat_until(ex, lambda _: _running(jobwatch_sandbox, "victim") is not None, timeout=60, events=events)
    pod = _running(jobwatch_sandbox, "victim")
    assert pod is not None
    jobwatch_sandbox.evict_pod("default", pod["metadata"]["name"])
    heartbeat_until(ex, lambda e: "victim" in terminal(e), timeout=60, events=events)
    state, info = terminal(events)["victim"]
    assert state == "failed"
    assert "was evicted on node" in info, info
