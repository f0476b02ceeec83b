"""Hybrid executors end to end: the upstream KubernetesExecutor and JobWatchExecutor in one scheduler.

``[core] executor = KubernetesExecutor,airflow_jobwatch.executors.JobWatchExecutor``, each task of
``tests/e2e/dags_hybrid/executor_hybrid.py`` naming its executor, and ``[jobwatch] worker_pod_labels =
jobwatch``. Worker pods are kept (``delete_worker_pods = False``) so that what each executor did to
which pod can be read afterwards: each launched its own tasks' pods exactly once, labelled its own pods
done, and touched (deleted, relabelled, reported) none of the other's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.stack import AirflowStack, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(300)]

DAGS = Path(__file__).parent / "dags_hybrid"


@pytest.fixture(scope="module")
def stack() -> Iterator[AirflowStack]:
    with AirflowStack(
        executor="KubernetesExecutor,airflow_jobwatch.executors.JobWatchExecutor",
        dags_folder=DAGS,
        dag_ids=["executor_hybrid"],
        config={
            ("jobwatch", "worker_pod_labels"): "jobwatch",
            ("kubernetes_executor", "delete_worker_pods"): "False",
            ("kubernetes_executor", "delete_worker_pods_on_failure"): "False",
        },
    ) as s:
        yield s


def test_each_executor_runs_reports_and_cleans_up_only_its_own_pods(stack: AirflowStack) -> None:
    run_id = stack.trigger_dag("executor_hybrid")
    stack.wait_for_run("executor_hybrid", run_id, timeout=240)
    states = {k: v["state"] for k, v in stack.task_states("executor_hybrid", run_id).items()}
    expected = {
        **{f"by_upstream[{i}]": "success" for i in range(3)},
        **{f"by_jobwatch[{i}]": "success" for i in range(3)},
        "upstream_fails": "failed",
        "jobwatch_fails": "failed",
    }
    assert states == expected

    def run_pods() -> list[dict[str, Any]]:
        return [
            p
            for p in stack.admin.objects("pods", "default")
            if p["metadata"]["annotations"].get("run_id") == run_id
        ]

    def all_done() -> list[dict[str, Any]] | None:
        pods = run_pods()
        done = [p for p in pods if p["metadata"]["labels"].get("airflow_executor_done") == "True"]
        return pods if len(pods) == 8 and len(done) == 8 else None

    pods = wait_until(all_done, timeout=60, what="8 pods, each labelled done by its executor")
    # One pod per task instance: nothing launched twice, nothing deleted by the other executor.
    per_task = Counter(
        (p["metadata"]["annotations"]["task_id"], p["metadata"]["annotations"].get("map_index", "-1"))
        for p in pods
    )
    assert set(per_task.values()) == {1}, per_task
    job_id = str(stack.scheduler_job_ids()[-1])
    for p in pods:
        task_id = p["metadata"]["annotations"]["task_id"]
        labels = p["metadata"]["labels"]
        if "upstream" in task_id:
            assert labels.get("airflow-worker") == job_id and labels.get("kubernetes_executor") == "True"
            assert "airflow-jobwatch-worker" not in labels
        else:
            assert (
                labels.get("airflow-jobwatch-worker") == job_id and labels.get("jobwatch_executor") == "True"
            )
            assert "airflow-worker" not in labels and "kubernetes_executor" not in labels
    # JobWatchExecutor launched and reported its 4 pods, nothing of upstream's. (The status file is
    # rewritten at most once a second: wait for the one written after the last report.)
    status = wait_until(
        lambda: (s := stack.executor_status()) and s.get("running") == 0 and s,
        timeout=30,
        what="JobWatchExecutor's status with no task running",
    )
    assert status["pods_launched"] == 4
    assert status["success"] + status["failed"] == 4
    assert status["completed_pods_cleaned"] == 0
    assert status["running"] == 0
