"""Only the cluster decides how a Job's task ends: a result written onto the Job by someone who may only
patch Jobs (not ``jobs/status``, which only the Job controller writes) does not decide it.

A user with ``get`` and ``patch`` on jobs writes a result annotation of their own (the unsigned format
earlier releases wrote, or a forged signature) onto a running Job, which then fails with
BackoffLimitExceeded. The task ends failed, without that user's XCom, and the task log names the
annotation it did not use. The sandbox runs with RBAC on, and the annotation is written over HTTP with
that user's own token."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import structlog.testing
from airflow.triggers.base import TaskFailedEvent
from kubernetes_asyncio.client import BatchV1Api, CoreV1Api
from kubernetes_asyncio.client.exceptions import ApiException

from airflow_jobwatch.ending.end import end_from_triggerer
from airflow_jobwatch.kube.cluster.client import ClusterConfig, async_api_client
from airflow_jobwatch.kube.meaning.result import RESULT_ANNOTATION
from airflow_jobwatch.triggers.job import JobTrigger

from .conftest import NS, wait_until
from .test_end_from_trigger import _deferred
from .test_job_operator import _rendered, make_context, make_operator

pytestmark = pytest.mark.timeout(120)

PATCHER = "mallory"

#: The user's rights: read and patch Jobs (their metadata, so their annotations), not ``jobs/status``.
PATCHER_ROLE = f"""
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: job-patcher, namespace: {NS}}}
rules:
- apiGroups: [batch]
  resources: [jobs]
  verbs: [get, patch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: job-patcher, namespace: {NS}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: job-patcher}}
subjects:
- {{kind: User, name: {PATCHER}}}
"""


def _forged(uid: str, *, signed: bool) -> str:
    """The result the user writes: a success with an XCom of their choosing, for the Job's uid."""
    forged: dict[str, Any] = {
        "format": 2 if signed else 1,
        "status": "success",
        "message": "Job succeeded",
        "pod_names": ["p"],
        "xcom_result": ['"chosen by the patcher"'],
        "outcome": "success",
        "reason": "Complete",
        "uid": uid,
        "pods": [{"name": "p", "phase": "succeeded", "exit_code": 0, "reason": "Completed"}],
        "disruptions": [],
    }
    if signed:
        forged["mac"] = "A" * 43  # a signature made without the deployment's key
    return json.dumps(forged)


def _deferred_task(kubeconfig: Any, script: str, xcom_path: Path, on_finish_action: str) -> JobTrigger:
    """The trigger a deferrable operator running ``script`` defers with; it ends the task itself."""
    options = {"deferrable": True, "wait_until_job_complete": True, "get_logs": False, "retries": 0}
    options.update(on_finish_action=on_finish_action, do_xcom_push=True)
    op = make_operator(kubeconfig, cmds=["sh", "-c", script], xcom_path=str(xcom_path), **options)
    trigger: JobTrigger = _deferred(op, make_context())
    return trigger


@pytest.mark.parametrize("signed", [False, True], ids=["unsigned", "forged-signature"])
async def test_a_result_written_by_a_job_patcher_does_not_decide_the_task(
    sandbox: Any, kubeconfig: Any, tmp_path: Path, signed: bool
) -> None:
    gate = tmp_path / "gate"  # not beside xcom_path: the kubelet gives that folder to the container
    gate.mkdir()
    release = gate / "release"
    # fails once the patcher has written the annotation (the test creates the file)
    script = f"while [ ! -e {release} ]; do sleep 0.05; done; exit 1"
    trigger = _deferred_task(kubeconfig, script, tmp_path / "xcom" / "return.json", "keep_pod")
    assert trigger.end_task is not None
    uid = str(trigger.job_uid)

    sandbox.load_rbac_manifests(PATCHER_ROLE)
    patcher_config = tmp_path / "patcher-kubeconfig"
    sandbox.write_kubeconfig(patcher_config, token=sandbox.issue_token(PATCHER))
    patcher = await async_api_client(ClusterConfig(config_file=str(patcher_config)))
    try:
        batch = BatchV1Api(patcher)
        with pytest.raises(ApiException) as refused:  # the user cannot write how the Job ended
            await batch.patch_namespaced_job_status(trigger.job_name, NS, {"status": {"succeeded": 1}})
        assert refused.value.status == 403
        await batch.patch_namespaced_job(
            trigger.job_name,
            NS,
            {"metadata": {"annotations": {RESULT_ANNOTATION: _forged(uid, signed=signed)}}},
        )
    finally:
        await patcher.close()
    release.touch()

    with structlog.testing.capture_logs() as entries:
        payload = await trigger.wait()
        event = await end_from_triggerer(trigger, payload)

    assert payload["outcome"] == "failed" and payload["reason"] == "BackoffLimitExceeded", payload
    assert payload["xcom_result"] == [], payload
    assert [p["exit_code"] for p in payload["pods"]] == [1], payload
    assert isinstance(event, TaskFailedEvent), event
    assert "return_value" not in event.xcoms
    text = _rendered(entries)
    assert f"{RESULT_ANNOTATION} annotation that is not used" in text, text
    assert ("not in the signed format" if not signed else "signature does not verify") in text, text


async def test_a_signed_result_altered_after_the_pods_are_gone_does_not_give_the_xcom(
    sandbox: Any, kubeconfig: Any, k8s_async_client: Any, tmp_path: Path
) -> None:
    """The first run signs the result onto the Job and deletes the pods; someone then changes the XCom
    in it. A second run does not report the changed value: the result is rejected, and what the
    cluster still shows (a Job that succeeded, no pod left) is what it reports."""
    path = tmp_path / "return.json"
    trigger = _deferred_task(kubeconfig, f"echo '\"the real one\"' > {path}", path, "delete_pod")
    _, kwargs = trigger.serialize()
    first = await end_from_triggerer(trigger, await trigger.wait())
    assert first is not None and first.xcoms["return_value"] == "the real one"

    batch = BatchV1Api(k8s_async_client)

    async def annotated() -> bool:
        job = await batch.read_namespaced_job(trigger.job_name, NS)
        return RESULT_ANNOTATION in (job.metadata.annotations or {})

    await wait_until(annotated, what="the first run's result on the Job")
    job = await batch.read_namespaced_job(trigger.job_name, NS)
    stored = json.loads(job.metadata.annotations[RESULT_ANNOTATION])
    assert stored["xcom_result"] == ['"the real one"\n']
    stored["xcom_result"] = ['"altered"']
    await batch.patch_namespaced_job(
        trigger.job_name, NS, {"metadata": {"annotations": {RESULT_ANNOTATION: json.dumps(stored)}}}
    )

    again = JobTrigger(**kwargs)
    with structlog.testing.capture_logs() as entries:
        payload = await again.wait()
    assert payload["outcome"] == "success", payload
    assert payload["xcom_result"] != ['"altered"'], payload
    assert "signature does not verify" in _rendered(entries)


async def test_without_a_fernet_key_the_pods_that_hold_the_result_are_kept(
    sandbox: Any, kubeconfig: Any, k8s_async_client: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No key, no signature: an unsigned result would not count, so the pods are not deleted."""
    monkeypatch.setenv("AIRFLOW__CORE__FERNET_KEY", "")  # set and empty: no airflow.cfg value either
    path = tmp_path / "return.json"
    trigger = _deferred_task(kubeconfig, f"echo 1 > {path}", path, "delete_pod")
    with structlog.testing.capture_logs() as entries:
        event = await end_from_triggerer(trigger, await trigger.wait())
    assert event is not None and event.xcoms["return_value"] == 1
    job = await BatchV1Api(k8s_async_client).read_namespaced_job(trigger.job_name, NS)
    assert RESULT_ANNOTATION not in (job.metadata.annotations or {})
    pods = await CoreV1Api(k8s_async_client).list_namespaced_pod(
        NS, label_selector=f"controller-uid={job.metadata.uid}"
    )
    assert len(pods.items) == 1
    assert "[core] fernet_key is not set" in _rendered(entries)


async def test_a_second_run_on_a_watch_that_cached_the_job_projected_still_gives_the_xcom(
    sandbox: Any, kubeconfig: Any, tmp_path: Path
) -> None:
    """The cache keeps no stored result in a Job it holds projected (one that changed last before a
    trigger waited for it: a triggerer whose watch of the namespace was already open). The second run
    then takes the result from the whole Job it reads once at the end."""
    from airflow_jobwatch.triggers.registry import GET_PROJECTED

    path = tmp_path / "return.json"
    trigger = _deferred_task(kubeconfig, f"echo '[4, 2]' > {path}", path, "delete_pod")
    _, kwargs = trigger.serialize()
    first = await end_from_triggerer(trigger, await trigger.wait())
    assert first is not None and first.xcoms["return_value"] == [4, 2]
    await wait_until(lambda: not sandbox.objects("pods", NS), what="the first run's clean-up of the pods")

    other = JobTrigger("another-job", NS, config_file=str(kubeconfig))
    async with other.watching() as watch:  # the namespace's watch, open before the second run
        again = JobTrigger(**kwargs)
        payload = await again.wait()
        assert watch.job_gets[GET_PROJECTED] == 1
    assert payload["outcome"] == "success" and payload["xcom_result"] == ["[4, 2]\n"], payload
    assert payload["pods"] and payload["pods"][0]["exit_code"] == 0
