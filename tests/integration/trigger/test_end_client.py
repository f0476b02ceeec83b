"""A task ended from the triggerer uses the client of the shared watch its trigger waited on, so an
exec-plugin credential (EKS, GKE) runs its plugin once per credential, not twice more per task end.

The sandbox's own exec plugin (``python -m airflow_jobwatch.sandbox.credential``) mints a new token on
each run; the server counts the distinct tokens it accepted for the user, which is how many plugin runs
made requests."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from airflow.triggers.base import TaskSuccessEvent
from kubernetes_asyncio.client import CoreV1Api

from airflow_jobwatch.triggers.job import JobTrigger
from airflow_jobwatch.triggers.registry import get_registry

from .conftest import NS, create_job, job_manifest, wait_until
from .test_job_operator import FakeTI

pytestmark = pytest.mark.timeout(180)

EXEC_USER = "eks-like-user"
ENDS = 10


@pytest.mark.exec_credential(user=EXEC_USER, token_ttl=600.0)
async def test_ten_task_ends_run_the_credential_plugin_no_more_than_their_one_shared_watch(
    sandbox: Any, exec_kubeconfig: Path, k8s_async_client: Any, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    gate.mkdir()
    release = gate / "release"
    triggers = []
    for i in range(ENDS):
        name = f"ends-{i}"
        script = f"while [ ! -e {release} ]; do sleep 0.05; done; echo done {i}"
        job = await create_job(k8s_async_client, job_manifest(name, ["sh", "-c", script]))
        trigger = JobTrigger(
            name,
            NS,
            config_file=str(exec_kubeconfig),
            job_uid=job["metadata"]["uid"],
            poll_interval=5.0,
            mask_secrets=[],  # the task's secrets are known (it has none): it may end here
            end_task={
                "on_finish_action": "delete_pod",
                "push_return": False,
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
    left = await CoreV1Api(k8s_async_client).list_namespaced_pod(NS, label_selector="controller-uid")
    assert [p.metadata.name for p in left.items if not p.metadata.deletion_timestamp] == []  # ends ran
    # one plugin run in all: the shared watch's client served the ten waits and the ten ends (the pods'
    # logs, the result written onto the Job, the clean-up); before, each end built two clients
    assert sandbox.tokens_seen(EXEC_USER) == 1
