"""By default a JobTrigger does not fail a Job at once on CreateContainerConfigError.

That reason means a Secret or ConfigMap the pod needs does not exist (yet). The kubelet keeps retrying and
the pod starts as soon as it is created (often by another task of the same DAG, moments later).
Upstream's KubernetesJobTrigger never fails a Job on a waiting reason; ours fails fast on the reasons that
need a new image or spec (ErrImagePull, ImagePullBackOff, InvalidImageName, CreateContainerError,
ImageInspectError), and waits on this one: the task's own deadline still ends the wait.
"""

from __future__ import annotations

import pytest

from .conftest import collect, create_job, job_manifest, make_trigger

pytestmark = pytest.mark.timeout(120)


def _needs_missing_secret(name: str) -> dict:
    manifest = job_manifest(name, ["sh", "-c", "exit 0"])
    manifest["spec"]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "not-created-yet", "key": "token"}}}
    ]
    return manifest


async def test_missing_secret_waits_by_default(sandbox, kubeconfig, k8s_async_client):
    await create_job(k8s_async_client, _needs_missing_secret("waits"))
    [event] = await collect(make_trigger(sandbox, kubeconfig, "waits", timeout=4))
    assert event["outcome"] == "timeout", event
    assert "CreateContainerConfigError" in event["message"], event["message"]


async def test_missing_secret_fails_fast_when_asked(sandbox, kubeconfig, k8s_async_client):
    await create_job(k8s_async_client, _needs_missing_secret("fails"))
    trigger = make_trigger(
        sandbox, kubeconfig, "fails", timeout=60, fatal_waiting_reasons=["CreateContainerConfigError"]
    )
    [event] = await collect(trigger)
    assert (event["outcome"], event["reason"]) == ("failed", "CreateContainerConfigError"), event
