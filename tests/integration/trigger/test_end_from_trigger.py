"""A deferred KubernetesJobOperator whose post-processing can all run in the triggerer is ended there
(``TaskSuccessEvent`` / ``TaskFailedEvent``), with the same XComs, log lines and failure message as
when it resumes on a worker; the rest resumes."""

from __future__ import annotations

import json
from typing import Any

import pytest
import structlog.testing
from airflow.providers.common.compat.sdk import AirflowException, TaskDeferred
from airflow.triggers.base import TaskFailedEvent, TaskSuccessEvent
from airflow.utils.json import XComDecoder

from airflow_jobwatch.ending.end import end_from_triggerer, may_fail_here
from airflow_jobwatch.operators.job import KubernetesJobOperator

from .conftest import NS
from .test_job_operator import FakeTI, _rendered, make_context, make_operator

pytestmark = pytest.mark.timeout(120)


def _deferred(op: KubernetesJobOperator, context: dict[str, Any]) -> Any:
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context)
    return deferred.value.trigger


def _decoded(value: Any) -> Any:
    return json.loads(json.dumps(value), cls=XComDecoder)


def _ending_lines(entries: list[dict[str, Any]]) -> list[str]:
    text = _rendered([e for e in entries if e.get("log_level") in ("info", "error")])
    return [line for line in text.splitlines() if line.startswith(("Job ", "  pod ", "xcom result", "["))]


async def test_success_ends_from_the_triggerer_with_the_resumes_xcoms_and_lines(
    sandbox, kubeconfig, k8s_async_client, tmp_path
) -> None:
    path = tmp_path / "return.json"
    op = make_operator(
        kubeconfig,
        cmds=[
            "sh",
            "-c",
            f"echo 'line one'; printf 'caf\\303\\251 \\377\\n'; echo '{{\"answer\": [4, 2]}}' > {path}",
        ],
        deferrable=True,
        wait_until_job_complete=True,
        get_logs=False,  # the pods' logs from the trigger: test_trigger_pod_logs.py
        on_finish_action="keep_pod",
        do_xcom_push=True,
        xcom_path=str(path),
    )
    trigger = _deferred(op, make_context())
    assert trigger.end_task is not None and trigger.end_task["push_return"] is True
    payload = await trigger.wait()

    resumed = FakeTI()
    with structlog.testing.capture_logs() as worker_entries:
        returned = op.execute_complete(make_context(resumed), payload)
    with structlog.testing.capture_logs() as trigger_entries:
        event = await end_from_triggerer(trigger, payload)

    assert isinstance(event, TaskSuccessEvent), event
    assert _decoded(event.xcoms["return_value"]) == returned == {"answer": [4, 2]}
    assert _decoded(event.xcoms["job"]) == resumed.xcoms["job"]
    lines = _ending_lines(trigger_entries)
    assert lines == _ending_lines(worker_entries)
    assert any(line.startswith("xcom result") for line in lines), lines


async def test_failure_ends_from_the_triggerer_with_the_operators_message(sandbox, kubeconfig) -> None:
    op = make_operator(
        kubeconfig,
        cmds=["sh", "-c", "echo about to fail; exit 3"],
        deferrable=True,
        wait_until_job_complete=True,
        get_logs=False,
        retries=0,
    )
    trigger = _deferred(op, make_context())
    assert trigger.end_task is not None and may_fail_here(trigger.end_task)
    payload = await trigger.wait()
    with pytest.raises(AirflowException) as raised, structlog.testing.capture_logs() as worker_entries:
        op.execute_complete(make_context(), payload)
    with structlog.testing.capture_logs() as trigger_entries:
        event = await end_from_triggerer(trigger, payload)

    assert isinstance(event, TaskFailedEvent), event
    errors = [e for e in trigger_entries if e.get("log_level") == "error"]
    assert _rendered(errors) == f"Task failed with exception: {raised.value}"
    assert "exited with code 3" in str(raised.value)
    assert _ending_lines(trigger_entries) == _ending_lines(worker_entries)


@pytest.mark.parametrize(
    "change",
    [
        {"on_failure_callback": lambda context: None},
        {"on_success_callback": lambda context: None},
        {"multiple_outputs": True},
    ],
    ids=["on_failure_callback", "on_success_callback", "multiple_outputs"],
)
def test_what_must_run_on_a_worker_resumes(sandbox, kubeconfig, change: dict[str, Any]) -> None:
    op = make_operator(kubeconfig, cmds=["true"], deferrable=True, wait_until_job_complete=True, **change)
    assert _deferred(op, make_context()).end_task is None


def test_a_subclass_with_its_own_execute_complete_resumes(sandbox, kubeconfig) -> None:
    class Mine(KubernetesJobOperator):
        def execute_complete(self, context: Any, event: dict[str, Any], **kwargs: Any) -> Any:
            return super().execute_complete(context, event, **kwargs)

    op = Mine(
        task_id="mine",
        image="busybox:1.36",
        namespace=NS,
        cmds=["true"],
        kubernetes_conn_id=None,
        config_file=str(kubeconfig),
        deferrable=True,
        wait_until_job_complete=True,
        get_logs=False,
    )
    assert _deferred(op, make_context()).end_task is None
