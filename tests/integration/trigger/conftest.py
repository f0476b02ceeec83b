"""Helpers for driving JobTrigger.run() in the test's event loop against the sandbox."""

from __future__ import annotations

import asyncio
import datetime
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from kubernetes_asyncio.client import BatchV1Api

from airflow_jobwatch.triggers.job import JobTrigger

NS = "default"


@pytest.fixture(autouse=True)
def _fast_watch_config(monkeypatch: pytest.MonkeyPatch) -> None:
    """Short informer timings so that faults resolve in seconds, not in production minutes."""
    for option, value in {
        "WATCH_TIMEOUT_SECONDS": "30",
        "WATCH_STALL_TIMEOUT_SECONDS": "2",
        "API_CONNECT_TIMEOUT_SECONDS": "2",
        "BACKOFF_INITIAL_SECONDS": "0.1",
        "BACKOFF_MAX_SECONDS": "0.5",
        "BACKOFF_RESET_AFTER_SECONDS": "5",
        "UNHEALTHY_AFTER_SECONDS": "1",
        "RESYNC_INTERVAL_SECONDS": "0",
        "API_FAILURE_TOLERANCE_SECONDS": "60",
        "NAMESPACE_WATCH_LINGER_SECONDS": "0",  # tests assert the watch closes with its last trigger
    }.items():
        monkeypatch.setenv(f"AIRFLOW__JOBWATCH__{option}", value)


def job_manifest(
    name: str,
    command: list[str],
    *,
    image: str = "busybox:1.36",
    backoff_limit: int = 0,
    labels: dict[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {
            "backoffLimit": backoff_limit,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "base", "image": image, "command": command}],
                }
            },
            **spec,
        },
    }


async def create_job(api_client: Any, manifest: dict[str, Any]) -> dict[str, Any]:
    """Create the Job; return it as API JSON (dict)."""
    job = await BatchV1Api(api_client).create_namespaced_job(NS, manifest)
    return api_client.sanitize_for_serialization(job)


def make_trigger(sandbox: Any, kubeconfig: str, name: str, uid: str | None = None, **kw: Any) -> JobTrigger:
    kw.setdefault("poll_interval", 5.0)
    return JobTrigger(name, NS, config_file=str(kubeconfig), job_uid=uid, **kw)


async def collect(trigger: JobTrigger, *, limit: float = 60.0) -> list[dict[str, Any]]:
    """Run the trigger to its end and return every payload it yielded."""
    events: list[dict[str, Any]] = []

    async def consume() -> None:
        async for event in trigger.run():
            events.append(event.payload)

    await asyncio.wait_for(consume(), limit)
    return events


async def wait_until(
    predicate: Callable[[], bool | Awaitable[bool]], *, limit: float = 20.0, what: str = "condition"
) -> None:
    """Poll ``predicate`` until it is true or fail after ``limit`` seconds."""
    deadline = time.monotonic() + limit
    while True:
        result = predicate()
        if not isinstance(result, bool):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {limit} s waiting for {what}")
        await asyncio.sleep(0.05)


def job_condition(sandbox: Any, name: str, ctype: str) -> str | None:
    job = sandbox.get_object("jobs", NS, name)
    for cond in ((job or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == ctype:
            return cond.get("status")
    return None


async def complete_without_pods(api_client: Any, name: str) -> None:
    """Mark the Job complete through its status subresource, as the Job controller would, without any pod
    (the tests run the sandbox without its Job controller where they drive a Job's status themselves)."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    await BatchV1Api(api_client).patch_namespaced_job_status(
        name,
        NS,
        {
            "status": {
                "succeeded": 1,
                "conditions": [
                    {"type": "SuccessCriteriaMet", "status": "True", "lastTransitionTime": now},
                    {"type": "Complete", "status": "True", "lastTransitionTime": now},
                ],
            }
        },
        _content_type="application/merge-patch+json",
    )
