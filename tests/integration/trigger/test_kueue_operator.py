"""KubernetesStartKueueJobOperator on the sandbox's minimal Kueue, ours next to upstream's.

* Same arguments, validation and labels as upstream's (differential).
* A Job Kueue admits only after a wait, and a Job Kueue preempts (suspends again) and re-admits, both
  succeed in ours, deferred and in the worker; the task log records admission and preemption. Upstream
  lists the pods right after creating the Job and fails on a Job not yet admitted (differential).
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import structlog.testing
from airflow.providers.cncf.kubernetes.operators.kueue import (
    KubernetesStartKueueJobOperator as UpstreamKueueOperator,
)
from airflow.providers.common.compat.sdk import AirflowException, TaskDeferred

from airflow_jobwatch.operators.kueue import KubernetesStartKueueJobOperator

from .conftest import NS
from .test_job_operator import FakeDag, FakeTI, _rendered, wait_until_sync

pytestmark = pytest.mark.timeout(180)

QUEUE = "kueue.x-k8s.io/queue-name"
MODES = pytest.mark.parametrize("mode", ["worker", "deferred"])


def _operator(cls: type, kubeconfig: Path, **kwargs: Any) -> Any:
    kwargs.setdefault("task_id", "task")
    kwargs.setdefault("image", "busybox:1.36")
    kwargs.setdefault("backoff_limit", 0)
    kwargs.setdefault("parallelism", 1)
    return cls(
        queue_name="local-queue",
        namespace=NS,
        kubernetes_conn_id=None,
        config_file=str(kubeconfig),
        job_poll_interval=0.5,
        **kwargs,
    )


def _run(op: Any, run_id: str, task_id: str = "task") -> tuple[dict[str, Any], str]:
    """Execute (resuming a deferral in this thread); return (xcoms, task log)."""
    ti = FakeTI(task_id=task_id)
    context = {"ti": ti, "run_id": run_id, "dag": FakeDag()}
    with structlog.testing.capture_logs() as logs:
        try:
            op.execute(context)
        except TaskDeferred as deferred:
            event = asyncio.run(asyncio.wait_for(_first_event(deferred.trigger), 150))
            op.execute_complete(context, event)
    return ti.xcoms, _rendered(logs)


async def _first_event(trigger: Any) -> dict[str, Any]:
    async for event in trigger.run():
        return event.payload
    raise AssertionError("the trigger ended without an event")


def _succeeds(sandbox: Any, name: str) -> dict[str, Any]:
    """The Job once its counters show the success (the event's copy can predate them)."""
    wait_until_sync(
        lambda: ((sandbox.get_object("jobs", NS, name) or {}).get("status") or {}).get("succeeded") == 1,
        f"Job {name} counted as succeeded",
    )
    return dict(sandbox.get_object("jobs", NS, name))


def _user_view(job: dict[str, Any] | None) -> dict[str, Any]:
    meta = (job or {}).get("metadata") or {}
    labels = {
        k: v
        for k, v in (meta.get("labels") or {}).items()
        if "job-name" not in k and "controller-uid" not in k
    }
    labels.pop("run_id", None)
    return {
        "labels": labels,
        "annotations": meta.get("annotations") or {},
        "suspend": ((job or {}).get("spec") or {}).get("suspend"),
    }


# --------------------------------------------------------------------------------------------------
# Parity with upstream's class


def test_same_validation_as_upstream(kubeconfig):
    for cls in (UpstreamKueueOperator, KubernetesStartKueueJobOperator):
        with pytest.raises(AirflowException, match="The `suspend` parameter can't be False") as refused:
            _operator(cls, kubeconfig, suspend=False)
        assert "set the `suspend` parameter to True" in str(refused.value)
    ours, upstream = (
        _operator(cls, kubeconfig) for cls in (KubernetesStartKueueJobOperator, UpstreamKueueOperator)
    )
    assert ours.suspend is upstream.suspend is True
    assert set(ours.template_fields) == set(upstream.template_fields)
    assert ours.labels == upstream.labels == {QUEUE: "local-queue"}
    assert ours.annotations == upstream.annotations == {QUEUE: "local-queue"}


def test_same_job_as_upstream(sandbox, kubeconfig):
    """Create-only: the Job each creates has the same labels, annotations and suspend."""
    jobs = {}
    for variant, cls in (("upstream", UpstreamKueueOperator), ("ours", KubernetesStartKueueJobOperator)):
        op = _operator(cls, kubeconfig, task_id=variant, cmds=["true"], wait_until_job_complete=False)
        xcoms, _log = _run(op, f"run-{variant}", task_id=variant)
        jobs[variant] = sandbox.get_object("jobs", NS, xcoms["job_name"])
    up, ours = _user_view(jobs["upstream"]), _user_view(jobs["ours"])
    assert ours == up
    assert ours["suspend"] is True and ours["labels"][QUEUE] == "local-queue"


def test_upstream_fails_a_job_not_yet_admitted_ours_waits(sandbox, kubeconfig):
    sandbox.set_kueue(0)  # nothing is admitted
    upstream = _operator(
        UpstreamKueueOperator,
        kubeconfig,
        task_id="up",
        cmds=["true"],
        wait_until_job_complete=True,
        deferrable=True,
    )
    started = time.monotonic()
    with pytest.raises(Exception):  # noqa: B017 - upstream's pod discovery gives up, whatever it raises
        _run(upstream, "run-up", task_id="up")
    assert time.monotonic() - started < 60

    ours = _operator(
        KubernetesStartKueueJobOperator,
        kubeconfig,
        task_id="ours",
        cmds=["true"],
        wait_until_job_complete=True,
        deferrable=True,
    )
    admit_later = threading.Timer(3.0, sandbox.set_kueue, args=(1,))
    admit_later.start()
    try:
        xcoms, log = _run(ours, "run-ours", task_id="ours")
    finally:
        admit_later.cancel()
    _succeeds(sandbox, xcoms["job_name"])
    assert "is suspended: waiting to be admitted by Kueue (queue 'local-queue')" in log


# --------------------------------------------------------------------------------------------------
# Ours in both modes


@MODES
def test_job_admitted_after_a_wait_succeeds(sandbox, kubeconfig, mode):
    sandbox.set_kueue(0)
    op = _operator(
        KubernetesStartKueueJobOperator,
        kubeconfig,
        cmds=["sh", "-c", "echo admitted"],
        wait_until_job_complete=True,
        deferrable=mode == "deferred",
        execution_timeout=None,
    )
    admit_later = threading.Timer(3.0, sandbox.set_kueue, args=(1,))
    admit_later.start()
    try:
        xcoms, log = _run(op, f"run-{mode}")
    finally:
        admit_later.cancel()
    _succeeds(sandbox, xcoms["job_name"])
    assert "waiting to be admitted by Kueue (queue 'local-queue')" in log
    assert "was admitted (resumed) after" in log


@MODES
def test_job_preempted_and_readmitted_succeeds(sandbox, kubeconfig, tmp_path, mode):
    sandbox.set_kueue(1)
    marker = tmp_path / "ran"
    op = _operator(
        KubernetesStartKueueJobOperator,
        kubeconfig,
        cmds=["sh", "-c", f"if [ -e {marker} ]; then exit 0; fi; touch {marker}; sleep 60"],
        wait_until_job_complete=True,
        deferrable=mode == "deferred",
    )

    def preempt_when_running() -> None:
        def running() -> bool:
            # the marker too: a pod preempted before its shell left it would run again and sleep 60 s
            return marker.exists() and any(
                p["status"].get("phase") == "Running" for p in sandbox.objects("pods", NS)
            )

        wait_until_sync(running, "the admitted Job's pod running and its marker left", limit=90)
        job = next(j for j in sandbox.objects("jobs", NS))
        sandbox.kueue_preempt(NS, job["metadata"]["name"], hold_seconds=1.0)

    preemptor = threading.Thread(target=preempt_when_running)
    preemptor.start()
    xcoms, log = _run(op, f"run-{mode}")
    preemptor.join(90)
    assert _succeeds(sandbox, xcoms["job_name"])["status"].get("failed", 0) == 0
    if mode == "worker":  # the worker's watch is open before the Job exists, so it sees it all
        assert "was suspended again (preempted by Kueue (queue 'local-queue'), 1 time(s))" in log
    assert sandbox.kueue_state()["admissions"] == {f"{NS}/{xcoms['job_name']}": 2}
