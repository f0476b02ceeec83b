"""A task ended from the triggerer uses the client of the shared watch its trigger waited on, so an
exec-plugin credential (EKS, GKE) runs its plugin once per credential, not twice more per task end.

The sandbox's own exec plugin (``python -m airflow_jobwatch_testing.sandbox.credential``) mints a new token on
each run; the server counts the distinct tokens it accepted for the user, which is how many plugin runs
made requests."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from airflow.triggers.base import TaskSuccessEvent
from kubernetes_asyncio.client import CoreV1Api

from airflow_jobwatch.kube.meaning import xcom_sidecar
from airflow_jobwatch.triggers.job import JobTrigger
from airflow_jobwatch.triggers.registry import get_registry

from .conftest import NS, create_job, job_manifest, wait_until
from .test_end_from_trigger import _decoded
from .test_job_operator import FakeTI

pytestmark = pytest.mark.timeout(180)

EXEC_USER = "eks-like-user"
ENDS = 10


def _sidecar_job(name: str, script: str, xcom_path: str) -> dict[str, Any]:
    """A Job whose base container runs ``script`` beside the operator's native XCom sidecar."""
    folder = str(Path(xcom_path).parent)
    manifest = job_manifest(name, ["sh", "-c", script])
    spec = manifest["spec"]["template"]["spec"]
    spec["volumes"] = [{"name": xcom_sidecar.VOLUME_NAME, "emptyDir": {}}]
    spec["containers"][0]["volumeMounts"] = [{"name": xcom_sidecar.VOLUME_NAME, "mountPath": folder}]
    spec["initContainers"] = [
        {
            "name": xcom_sidecar.SIDECAR_NAME,
            "image": xcom_sidecar.DEFAULT_IMAGE,
            "command": xcom_sidecar.sidecar_command(xcom_path),
            "restartPolicy": "Always",
            "volumeMounts": [{"name": xcom_sidecar.VOLUME_NAME, "mountPath": folder}],
        }
    ]
    return manifest


@pytest.mark.parametrize("push_return", [False, True], ids=["logs", "logs-and-sidecar-xcom"])
@pytest.mark.exec_credential(user=EXEC_USER, token_ttl=600.0)
async def test_ten_task_ends_run_the_credential_plugin_no_more_than_their_one_shared_watch(
    sandbox: Any, exec_kubeconfig: Path, k8s_async_client: Any, tmp_path: Path, push_return: bool
) -> None:
    """With ``push_return``, each end also reads its pod's result from the XCom sidecar's log."""
    gate = tmp_path / "gate"
    gate.mkdir()
    release = gate / "release"
    triggers = []
    for i in range(ENDS):
        name = f"ends-{i}"
        script = f"while [ ! -e {release} ]; do sleep 0.05; done; echo done {i}"
        xcom_path = str(tmp_path / f"xcom-{i}" / "return.json")
        if push_return:
            manifest = _sidecar_job(name, f"{script}; echo '{{\"end\": {i}}}' > {xcom_path}", xcom_path)
        else:
            manifest = job_manifest(name, ["sh", "-c", script])
        job = await create_job(k8s_async_client, manifest)
        trigger = JobTrigger(
            name,
            NS,
            config_file=str(exec_kubeconfig),
            job_uid=job["metadata"]["uid"],
            poll_interval=5.0,
            do_xcom_push=push_return,
            mask_secrets=[],  # the task's secrets are known (it has none): it may end here
            end_task={
                "on_finish_action": "delete_pod",
                "push_return": push_return,
                "xcom_path": xcom_path,
                "fail": True,
                "logs": {"container_logs": True, "init_container_logs": None},  # get_logs=True
            },
        )
        trigger.task_instance = FakeTI()  # as the triggerer sets it: the trigger ends the task itself
        triggers.append(trigger)

    async def run(trigger: JobTrigger) -> Any:
        async for event in trigger.run():
            return event

    tasks = [asyncio.create_task(run(t)) for t in triggers]
    await wait_until(lambda: sum(get_registry().active().values()) == ENDS, what="all ten waits subscribed")
    await wait_until(lambda: sandbox.tokens_seen(EXEC_USER) >= 1, what="the shared watch's first request")
    release.touch()
    events = await asyncio.wait_for(asyncio.gather(*tasks), 120)

    assert all(isinstance(event, TaskSuccessEvent) for event in events), events
    if push_return:  # each value read from its sidecar's log
        assert [_decoded(e.xcoms["return_value"]) for e in events] == [{"end": i} for i in range(ENDS)]
    left = await CoreV1Api(k8s_async_client).list_namespaced_pod(NS, label_selector="controller-uid")
    assert [p.metadata.name for p in left.items if not p.metadata.deletion_timestamp] == []  # ends ran
    # one plugin run in all: the shared watch's client served the ten waits and the ten ends (the pods'
    # logs, the sidecar's result, the result written onto the Job, the clean-up); before, each end built
    # two clients, and the sidecar's read a third
    assert sandbox.tokens_seen(EXEC_USER) == 1
