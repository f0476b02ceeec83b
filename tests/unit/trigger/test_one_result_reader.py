"""The trigger's event and the operator's resume read a Job's XCom result by one rule: a pod's
termination message counts when kube/states classifies the pod as succeeded, whether the pod comes as
the watch's API JSON (trigger) or as the client's V1Pod from a LIST (operator)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from airflow_jobwatch.kube.meaning.result import JobResult
from airflow_jobwatch.operators.job import KubernetesJobOperator
from airflow_jobwatch.triggers.job import JobTrigger

FIXTURES = Path(__file__).parents[1] / "fixtures"
BASE = "main"  # the recorded pods' container
XCOM_PATH = "/airflow/xcom/return.json"


def _load(kind: str, name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / kind / f"{name}.json").read_text())


def _succeeded(
    name: str, message: str, *, phase: str = "Succeeded", created: str = "2026-12-02T12:19:15Z"
) -> Any:
    pod = copy.deepcopy(_load("pods", "succeeded"))
    pod["metadata"]["name"] = name
    pod["metadata"]["creationTimestamp"] = created
    pod["status"]["phase"] = phase
    pod["status"]["containerStatuses"][0]["state"]["terminated"]["message"] = message
    return pod


def _model(pod: dict[str, Any]) -> Any:
    from kubernetes.client import ApiClient

    class Response:
        data = json.dumps(pod)

    return ApiClient().deserialize(Response(), "V1Pod")


ROWS = [
    pytest.param([_succeeded("a", '{"x": 1}')], {"x": 1}, id="succeeded"),
    # the base container has exited 0, but the pod is not succeeded yet: no result from it, on both paths
    pytest.param([_succeeded("a", '{"x": 1}', phase="Running")], [], id="base-exited-pod-running"),
    pytest.param(
        [_load("pods", "failed-exit-3"), _succeeded("b", '"r"', created="2026-12-03T00:00:00Z")],
        "r",
        id="failed-then-succeeded",
    ),
    pytest.param(
        [_succeeded("a", "1"), _succeeded("b", "2", phase="Failed", created="2026-12-03T00:00:00Z")],
        1,
        id="a-failed-pod-carries-none",
    ),
]


@pytest.mark.parametrize(("pods", "value"), ROWS)
def test_trigger_and_operator_read_the_same_value(pods: list[dict[str, Any]], value: Any) -> None:
    job = copy.deepcopy(_load("jobs", "complete"))
    trigger = JobTrigger("j", "default", do_xcom_push=True, base_container_name=BASE)
    payload = trigger._decisions().payload("success", "Complete", "done", job=job, pods=pods)
    from_trigger = JobResult.from_payload(payload).xcom_value(xcom_path=XCOM_PATH, unwrap_single=True)

    op = KubernetesJobOperator(
        task_id="t", image="busybox:1.36", namespace="default", do_xcom_push=True, base_container_name=BASE
    )
    # what execute_complete does with an event that carries no result of its own (upstream's) and the
    # pods it LISTs after the end
    event = {"status": "success", "name": "j", "namespace": "default"}
    from_operator = op._xcom_value(
        JobResult.from_payload(event).with_fresh_pods([_model(p) for p in pods], op.base_container_name)
    )
    assert from_trigger == from_operator == value
