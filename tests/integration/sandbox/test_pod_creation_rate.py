"""The sandbox Job controller's slow mode (``pod_creation_rate``): Jobs wait for their pods, first come
first served, at the configured rate in all, through the official ``kubernetes`` client."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from airflow_jobwatch_testing.sandbox import Sandbox, SandboxThread
from airflow_jobwatch_testing.sandbox.__main__ import _parser

from .helpers import job_body, wait_for

SIMULATED = {"sandbox.jobwatch.io/simulate": "true", "sandbox.jobwatch.io/duration-seconds": "60"}


@pytest.fixture
def batch(kubeconfig: Path) -> Iterator[client.BatchV1Api]:
    api_client = config.new_client_from_config(config_file=str(kubeconfig))
    try:
        yield client.BatchV1Api(api_client)
    finally:
        api_client.close()


def _job(name: str) -> dict[str, Any]:
    body = job_body(name, "sleep 60")
    body["spec"]["template"]["metadata"] = {"annotations": SIMULATED}
    return body


def _pod_owners(sandbox: SandboxThread) -> list[str]:
    return [p["metadata"]["labels"]["job-name"] for p in sandbox.objects("pods", "default")]


@pytest.mark.sandbox(pod_creation_rate=4.0)
def test_jobs_get_their_pods_at_the_rate_first_come_first_served(
    sandbox: SandboxThread, batch: client.BatchV1Api
) -> None:
    names = [f"slow-{i}" for i in range(6)]
    for name in names:
        batch.create_namespaced_job("default", _job(name))
    seen: dict[str, float] = {}
    deadline = time.monotonic() + 20
    while len(seen) < len(names):
        assert time.monotonic() < deadline, f"only {sorted(seen)} got pods"
        for owner in _pod_owners(sandbox):
            seen.setdefault(owner, time.monotonic())
        time.sleep(0.02)
    assert sorted(seen, key=seen.__getitem__) == names  # in the order the Jobs were created
    # Six pods at 4 per second: the last comes at least 5 intervals (1.25 s) after the first, not at once.
    assert seen[names[-1]] - seen[names[0]] >= 1.0
    # One pod per Job (parallelism 1): a Job that waited was not given extra pods to catch up.
    assert all(len([o for o in _pod_owners(sandbox) if o == n]) == 1 for n in names)


@pytest.mark.sandbox(pod_creation_rate=0.2)
def test_lifting_the_rate_releases_every_waiting_job(
    sandbox: SandboxThread, batch: client.BatchV1Api
) -> None:
    for name in ("held-a", "held-b", "held-c"):
        batch.create_namespaced_job("default", _job(name))
    wait_for(lambda: _pod_owners(sandbox) == ["held-a"], what="the first Job's pod")
    time.sleep(0.5)
    assert _pod_owners(sandbox) == ["held-a"]  # the next permit is 5 s away
    job = sandbox.get_object("jobs", "default", "held-b")
    assert job is not None and not (job.get("status") or {}).get("active")
    sandbox.set_pod_creation_rate(None)
    wait_for(
        lambda: sorted(_pod_owners(sandbox)) == ["held-a", "held-b", "held-c"],
        timeout=10,
        what="every Job's pod once the rate is lifted",
    )


def test_the_rate_is_validated_and_settable_on_the_command_line(sandbox: SandboxThread) -> None:
    with pytest.raises(ValueError, match="pod_creation_rate must be > 0 pods per second"):
        sandbox.set_pod_creation_rate(0)
    with pytest.raises(ValueError, match="pod_creation_rate must be > 0 pods per second"):
        Sandbox(pod_creation_rate=-1)
    args = _parser().parse_args(["--kubeconfig", "k", "--pod-creation-rate", "2.5"])
    assert args.pod_creation_rate == 2.5
    assert _parser().parse_args(["--kubeconfig", "k"]).pod_creation_rate is None
