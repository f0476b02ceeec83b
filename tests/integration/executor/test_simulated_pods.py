"""The executor cannot tell a simulated sandbox pod (no host process) from a process pod: a task on
either ends in the same state, reported the same way, as the scheduler loop drives it."""

from __future__ import annotations

from typing import Any

import pytest
from exec_helpers import heartbeat_until, poll, submit, terminal
from kubernetes import client, config
from support.workloads import make_workload

from airflow_jobwatch_testing.sandbox.simulated import SIMULATE_ANNOTATION

# slow: the same on every Airflow minor, so CI runs it once (in the main suite), not in each compat run
pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def workload(task_id: str, command: str, *, simulated: bool) -> Any:
    from kubernetes.client import models as k8s

    override = k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(annotations={SIMULATE_ANNOTATION: "true" if simulated else "false"}),
        spec=k8s.V1PodSpec(containers=[k8s.V1Container(name="base", command=["sh", "-c", command])]),
    )
    return make_workload(task_id=task_id, executor_config={"pod_override": override})


def test_simulated_and_process_pods_reach_the_same_outcome(executor_factory: Any, kube_sandbox: Any) -> None:
    sandbox, _ = kube_sandbox
    ex = executor_factory()
    cases = {"ok": "sleep 0.5; exit 0", "bad": "sleep 0.5; exit 3"}
    for name, command in cases.items():
        submit(ex, workload(f"{name}-proc", command, simulated=False))
        submit(ex, workload(f"{name}-sim", command, simulated=True))
    events = heartbeat_until(ex, lambda e: len(terminal(e)) == 4, timeout=90)
    ended = terminal(events)
    assert ended["ok-sim"][0] == ended["ok-proc"][0] == "success"
    assert ended["bad-sim"][0] == ended["bad-proc"][0] == "failed"
    # The simulated pods really ran with no process: their log is the simulator's fixed line.
    sims = [
        p
        for p in sandbox.objects("pods", "default")
        if p["metadata"]["annotations"].get(SIMULATE_ANNOTATION) == "true"
    ]
    for pod in sims:
        assert pod["status"]["containerStatuses"][0]["containerID"].startswith("sandbox://")


def test_deleted_simulated_pod_fails_its_task_like_a_process_pod(
    executor_factory: Any, kube_sandbox: Any
) -> None:
    sandbox, _ = kube_sandbox
    ex = executor_factory()
    submit(ex, workload("del-proc", "sleep 300", simulated=False))
    submit(ex, workload("del-sim", "sleep 300", simulated=True))
    order: list[tuple[Any, Any]] = []

    def running_pods() -> list[dict[str, Any]]:
        pods = [
            p for p in sandbox.objects("pods", "default") if p.get("status", {}).get("phase") == "Running"
        ]
        return pods if len(pods) == 2 else []

    pods = poll(ex, running_pods, timeout=60, what="both pods Running", events=order)
    api = client.CoreV1Api(config.new_client_from_config(config_file=kube_sandbox[1]))
    try:
        for pod in pods:
            api.delete_namespaced_pod(pod["metadata"]["name"], "default", grace_period_seconds=1)
    finally:
        api.api_client.close()
    events = heartbeat_until(ex, lambda e: len(terminal(e)) == 2, timeout=90)
    ended = terminal(events)
    assert ended["del-sim"][0] == ended["del-proc"][0]
