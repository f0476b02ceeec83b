"""A trigger that runs again after an earlier run of it ended the task and cleaned up reports the same
result: the same event, XComs and exit codes. Two triggerers can each run one trigger (an HA hand-over,
a triggerer restarted before the first event was saved); the first run deletes the pods the result was
read from (``on_finish_action="delete_pod"``), so the result must be on the Job before they go."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
import structlog.testing
from airflow.triggers.base import TaskFailedEvent, TaskSuccessEvent
from kubernetes_asyncio.client import BatchV1Api, CoreV1Api

from airflow_jobwatch.ending.end import end_from_triggerer
from airflow_jobwatch.ending.result_keys import result_keys
from airflow_jobwatch.kube.meaning.result import RESULT_ANNOTATION, stored_result
from airflow_jobwatch.triggers.job import JobTrigger

from .conftest import NS, wait_until
from .test_end_from_trigger import _deferred
from .test_job_operator import make_context, make_operator

pytestmark = pytest.mark.timeout(120)


def _same_view(value: Any) -> Any:
    """An event or XCom without what changes by itself between two reads of one Job: its
    resourceVersion and the server's managedFields bookkeeping."""
    text = json.dumps(value, default=str, sort_keys=True)
    data = json.loads(text)

    def strip(node: Any) -> Any:
        if isinstance(node, dict):
            return {
                # an empty map and a missing one are the same: a real API server leaves an empty
                # ``annotations`` out (omitempty), the sandbox keeps the one the operator sent
                k: strip(v) if not (k == "annotations" and v == {}) else None
                for k, v in node.items()
                if k not in ("resource_version", "managed_fields")
            }
        if isinstance(node, list):
            return [strip(v) for v in node]
        return node

    return strip(data)


async def _run_once(kwargs: dict[str, Any]) -> tuple[dict[str, Any], Any, list[str]]:
    """One triggerer's run of the trigger: a fresh instance from its serialized form, its wait, then the
    task ended from the triggerer (what ``JobTrigger.run`` does in a triggerer)."""
    trigger = JobTrigger(**kwargs)
    with structlog.testing.capture_logs() as entries:
        payload = await trigger.wait()
        event = await end_from_triggerer(trigger, payload)
    errors = [str(e.get("event")) for e in entries if e.get("log_level") == "error"]
    return payload, event, errors


@pytest.mark.parametrize("xcom", [True, False], ids=["xcom", "no-xcom"])
@pytest.mark.parametrize("fail", [False, True], ids=["success", "failure"])
async def test_a_second_run_after_cleanup_reports_the_same_event(
    sandbox, kubeconfig, k8s_async_client, tmp_path, fail: bool, xcom: bool
) -> None:
    path = tmp_path / "return.json"
    script = f"echo '{{\"answer\": [4, 2]}}' > {path}" + ("; exit 3" if fail else "")
    op = make_operator(
        kubeconfig,
        cmds=["sh", "-c", script],
        deferrable=True,
        wait_until_job_complete=True,
        get_logs=False,
        on_finish_action="delete_pod",
        do_xcom_push=xcom,
        xcom_path=str(path),
        retries=0,
    )
    trigger = _deferred(op, make_context())
    assert trigger.end_task is not None
    _, kwargs = trigger.serialize()

    first_payload, first_event, first_errors = await _run_once(kwargs)

    core = CoreV1Api(k8s_async_client)
    selector = f"controller-uid={first_payload['uid']}"

    async def pods_gone() -> bool:
        return not (await core.list_namespaced_pod(NS, label_selector=selector)).items

    await wait_until(pods_gone, what="the first run's cleanup to delete the pods")
    job = await BatchV1Api(k8s_async_client).read_namespaced_job(trigger.job_name, NS)
    assert RESULT_ANNOTATION in (job.metadata.annotations or {})
    assert stored_result(job, result_keys()) is not None

    second_payload, second_event, second_errors = await _run_once(kwargs)

    assert type(second_event) is type(first_event)
    assert isinstance(first_event, TaskFailedEvent if fail else TaskSuccessEvent)
    assert _same_view(second_event.xcoms) == _same_view(first_event.xcoms)
    # A result printed by the XCom sidecar is read when the task ends, not carried by the wait's
    # payload: the first payload holds its placeholder, the second the result written onto the Job.
    # What the user sees of it is the XComs, compared above.
    assert _same_view({**second_payload, "xcom_result": None}) == _same_view(
        {**first_payload, "xcom_result": None}
    )
    assert second_errors == first_errors
    if fail:
        assert [p["exit_code"] for p in second_payload["pods"]] == [3]
        assert "exited with code 3" in second_errors[0]
    elif xcom:
        assert json.loads(json.dumps(second_event.xcoms["return_value"])) == {"answer": [4, 2]}
    else:
        assert "return_value" not in second_event.xcoms


async def test_a_resume_after_the_pods_are_gone_still_names_the_exit_code(
    sandbox, kubeconfig, k8s_async_client
) -> None:
    """The worker's resume reads the result the event carries when the pods it was read from are gone
    (a TTL, a user, the pod GC): the failure names the container's exit code, as the event does."""
    from airflow.providers.common.compat.sdk import AirflowException

    op = make_operator(
        kubeconfig,
        cmds=["sh", "-c", "exit 3"],
        deferrable=True,
        wait_until_job_complete=True,
        get_logs=False,
        on_finish_action="delete_pod",
    )
    trigger = _deferred(op, make_context())
    payload = await trigger.wait()
    assert "exited with code 3" in payload["message"]
    core = CoreV1Api(k8s_async_client)
    await core.delete_collection_namespaced_pod(NS, label_selector=f"controller-uid={payload['uid']}")

    async def pods_gone() -> bool:
        listed = await core.list_namespaced_pod(NS, label_selector=f"controller-uid={payload['uid']}")
        return not listed.items

    await wait_until(pods_gone, what="the pods to be deleted")
    with pytest.raises(AirflowException, match="exited with code 3"):
        await asyncio.to_thread(op.execute_complete, make_context(), payload)
