"""What JobTrigger reports about an ending it did not see, against the sandbox over HTTP.

The rule: a terminal outcome is reported only when it was observed (the Job's own state, or its pods'
final states); a Job that vanished while the watch was away is ``unknown``, never "deleted before it
finished ... retry it". The relist windows are made deterministic with LIST errors injected while the
informers must list.
"""

from __future__ import annotations

import asyncio
import datetime
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from airflow.providers.common.compat.sdk import AirflowException, TaskDeferred
from kubernetes_asyncio.client import BatchV1Api, CoreV1Api

from airflow_jobwatch.ending.end import end_from_triggerer
from airflow_jobwatch.triggers import waiting as waiting_module
from airflow_jobwatch.triggers.registry import NamespaceWatch, get_registry

from .conftest import NS, collect, complete_without_pods, create_job, job_manifest, make_trigger, wait_until
from .test_job_operator import make_context, make_operator

pytestmark = [pytest.mark.timeout(90), pytest.mark.sandbox(job_controller=False, kubelet=False)]


def _watch() -> NamespaceWatch | None:
    return next(iter(get_registry()._watches.values()), None)


def _cached(name: str) -> bool:
    watch = _watch()
    return watch is not None and watch.synced and watch.job(name) is not None


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def _create_pod(
    api_client: Any, job: dict[str, Any], *, phase: str = "Running", **container: Any
) -> str:
    """A pod of ``job`` as its Job controller would make it (labels and controller reference), with
    the status ``phase`` (the sandbox runs without kubelet and Job controller here)."""
    meta = job["metadata"]
    name = f"{meta['name']}-pod"
    labels = {"controller-uid": meta["uid"], "batch.kubernetes.io/job-name": meta["name"]}
    pod = {
        "metadata": {
            "name": name,
            "labels": labels,
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                }
            ],
        },
        "spec": {"restartPolicy": "Never", "containers": [{"name": "base", "image": "busybox:1.36"}]},
    }
    core = CoreV1Api(api_client)
    await core.create_namespaced_pod(NS, pod)
    await _set_pod_phase(api_client, name, phase, **container)
    return name


def _container_status(state: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": "base",
        "ready": False,
        "restartCount": 0,
        "image": "busybox:1.36",
        "imageID": "",
        "state": state,
    }


async def _set_pod_phase(api_client: Any, name: str, phase: str, **terminated: Any) -> None:
    state: dict[str, Any] = {"running": {"startedAt": _now()}}
    if phase in ("Succeeded", "Failed"):
        state = {"terminated": {"startedAt": _now(), "finishedAt": _now(), **terminated}}
    await CoreV1Api(api_client).patch_namespaced_pod_status(
        name,
        NS,
        {"status": {"phase": phase, "containerStatuses": [_container_status(state)]}},
        _content_type="application/merge-patch+json",
    )


async def _delete_job_in_a_relist_gap(
    sandbox: Any, api_client: Any, name: str, *, inside: Callable[[], Awaitable[None]] | None = None
) -> None:
    """Open a relist window and delete the Job inside it: every watch is dropped and answered 410 from
    then on, so the informers must list, and every LIST fails until the Job is gone."""
    sandbox.set_error_rate(1.0, verbs=["list"])
    sandbox.set_watch_expired(True)
    try:
        lists_before = sandbox.counters().get("list jobs", 0)
        sandbox.drop_watches()
        await wait_until(
            lambda: sandbox.counters().get("list jobs", 0) > lists_before, what="a failing relist of the Jobs"
        )
        if inside is not None:
            await inside()
        await BatchV1Api(api_client).delete_namespaced_job(name, NS, propagation_policy="Orphan")
        await wait_until(lambda: sandbox.get_object("jobs", NS, name) is None, what="the Job's removal")
    finally:
        sandbox.set_watch_expired(False)
        sandbox.set_error_rate(0.0)


async def test_a_job_that_vanished_in_a_relist_gap_is_unknown_not_deleted(
    sandbox, kubeconfig, k8s_async_client
):
    job = await create_job(k8s_async_client, job_manifest("gap", ["true"]))
    await _create_pod(k8s_async_client, job)
    trigger = make_trigger(sandbox, kubeconfig, "gap", job["metadata"]["uid"], poll_interval=60)

    waiting = asyncio.create_task(collect(trigger))
    await wait_until(lambda: _cached("gap"), what="the Job in the synced cache")
    await _delete_job_in_a_relist_gap(sandbox, k8s_async_client, "gap")
    [event] = await waiting
    assert event["outcome"] == "unknown", event
    assert event["status"] == "error"
    assert event["reason"] == "FinalStateUnknown"
    assert "vanished while the watch was reconnecting; its final state is unknown" in event["message"]
    assert "retry" not in event["message"] and "before it finished" not in event["message"]
    assert event["uid"] == job["metadata"]["uid"]


@pytest.mark.parametrize("when", ["before the gap", "in the gap"])
async def test_a_vanished_job_whose_pod_succeeded_is_a_success(sandbox, kubeconfig, k8s_async_client, when):
    """The pod's final state proves how a one-completion Job ended: seen before the gap, or delivered by
    the pod watch's own relist after the Job's (an `unknown` with running pods waits for it, briefly)."""
    job = await create_job(k8s_async_client, job_manifest("proved", ["true"]))
    pod = await _create_pod(k8s_async_client, job)
    trigger = make_trigger(
        sandbox, kubeconfig, "proved", job["metadata"]["uid"], poll_interval=60, do_xcom_push=True
    )
    waiting = asyncio.create_task(collect(trigger))
    await wait_until(lambda: _cached("proved"), what="the Job in the synced cache")

    async def succeed() -> None:
        await _set_pod_phase(k8s_async_client, pod, "Succeeded", exitCode=0, message='{"v": 1}')

    if when == "before the gap":
        await succeed()
        await wait_until(
            lambda: [p["status"]["phase"] for p in _watch().pods_of(job["metadata"]["uid"])] == ["Succeeded"],
            what="the pod's success in the cache",
        )
        await _delete_job_in_a_relist_gap(sandbox, k8s_async_client, "proved")
    else:
        await _delete_job_in_a_relist_gap(sandbox, k8s_async_client, "proved", inside=succeed)
    [event] = await waiting
    assert (event["outcome"], event["reason"]) == ("success", "Complete"), event
    assert event["xcom_result"] == ['{"v": 1}']


async def test_a_job_that_ends_while_lists_fail_is_seen_by_the_watch(sandbox, kubeconfig, k8s_async_client):
    """``[jobwatch] resync_interval_seconds = 0`` (the tests' setting) disables the periodic relist, and
    the triggerer's watches never relist on a timer: a relist closed the watch first, so a Job that ended
    and was removed while the LIST failed was only found gone."""
    job = await create_job(k8s_async_client, job_manifest("seen", ["true"]))

    poll = 0.5
    waiting = asyncio.create_task(
        collect(make_trigger(sandbox, kubeconfig, "seen", job["metadata"]["uid"], poll_interval=poll))
    )
    await wait_until(lambda: _cached("seen"), what="the Job in the synced cache")
    lists = sandbox.counters().get("list jobs", 0)
    sandbox.set_error_rate(1.0, verbs=["list"])
    try:
        # Nothing to wait for but time: a periodic relist would be due after `poll` (the old default for
        # a resync interval of 0), and would now fail, leaving no watch open.
        started = asyncio.get_running_loop().time()
        await wait_until(
            lambda: asyncio.get_running_loop().time() - started > 4 * poll, what="4 poll intervals"
        )
        await complete_without_pods(k8s_async_client, "seen")
        await BatchV1Api(k8s_async_client).delete_namespaced_job("seen", NS, propagation_policy="Background")
        await wait_until(lambda: sandbox.get_object("jobs", NS, "seen") is None, what="the Job's removal")
    finally:
        sandbox.set_error_rate(0.0)
    [event] = await waiting
    assert (event["outcome"], event["reason"]) == ("success", "Complete"), event
    assert sandbox.counters().get("list jobs", 0) == lists  # no relist was even tried


async def test_a_deleted_jobs_pods_keep_updating_its_result(
    sandbox, kubeconfig, k8s_async_client, monkeypatch
):
    """The pod watch lags the Job's: the Job is Complete and deleted before its pod's final state (its
    exit code, its termination message: the XCom value) arrives; the pod's later events still count."""
    # A hold long enough that a slow machine cannot end it before the pod's events: the result is
    # released as soon as the pod is final, so a passing run never waits for it.
    monkeypatch.setattr(waiting_module, "_POD_SETTLE_SECONDS", 30.0)
    job = await create_job(k8s_async_client, job_manifest("late", ["true"]))
    pod = await _create_pod(k8s_async_client, job)

    trigger = make_trigger(
        sandbox, kubeconfig, "late", job["metadata"]["uid"], poll_interval=60, do_xcom_push=True
    )
    waiting = asyncio.create_task(collect(trigger))
    await wait_until(
        lambda: _cached("late") and len(_watch().pods_of(job["metadata"]["uid"])) == 1,
        what="the Job and its pod in the synced cache",
    )
    await complete_without_pods(k8s_async_client, "late")
    await BatchV1Api(k8s_async_client).delete_namespaced_job("late", NS, propagation_policy="Orphan")
    await wait_until(lambda: _watch().tombstone("late") is not None, what="the Job's DELETED event")
    await _set_pod_phase(k8s_async_client, pod, "Succeeded", exitCode=0, message=json.dumps({"v": 42}))
    await CoreV1Api(k8s_async_client).delete_namespaced_pod(pod, NS)
    [event] = await asyncio.wait_for(waiting, 20)
    assert event["outcome"] == "success", event
    assert [(p["phase"], p["exit_code"]) for p in event["pods"]] == [("succeeded", 0)]
    assert event["xcom_result"] == ['{"v": 42}']


async def test_a_job_recreated_under_its_name_before_the_trigger_came_ends_the_wait_at_once(
    sandbox, kubeconfig, k8s_async_client
):
    """Another Job under the same name is not ours: the trigger confirms ours is gone within seconds,
    not at its next poll (an hour here)."""
    old = await create_job(k8s_async_client, job_manifest("again", ["true"]))
    await BatchV1Api(k8s_async_client).delete_namespaced_job("again", NS, propagation_policy="Background")
    await wait_until(lambda: sandbox.get_object("jobs", NS, "again") is None, what="the Job's removal")
    new = await create_job(k8s_async_client, job_manifest("again", ["true"]))
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
    trigger = make_trigger(sandbox, kubeconfig, "again", old["metadata"]["uid"], poll_interval=3600)
    [event] = await collect(trigger, limit=20)
    # Its deletion was not seen either (nor how it ended): unknown, never the new Job's result.
    assert (event["outcome"], event["reason"]) == ("unknown", "FinalStateUnknown"), event
    assert event["uid"] == old["metadata"]["uid"]
    assert "was replaced by another Job of the same name" in event["message"], event["message"]


async def test_a_job_that_ended_and_was_removed_before_its_trigger_came_is_unknown(
    sandbox, kubeconfig, k8s_async_client
):
    """A Job that completed and was removed (``ttlSecondsAfterFinished: 0``) while no watch looked: the
    GET answers 404 and no DELETED event ever comes. Neither its end nor its deletion was seen, so the
    trigger says so (``unknown``) instead of claiming a deletion; the task fails with those words."""
    op = make_operator(
        kubeconfig, cmds=["true"], deferrable=True, wait_until_job_complete=True, get_logs=False
    )
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(make_context())
    trigger = deferred.value.trigger
    await complete_without_pods(k8s_async_client, trigger.job_name)
    await BatchV1Api(k8s_async_client).delete_namespaced_job(trigger.job_name, NS)
    await wait_until(lambda: sandbox.get_object("jobs", NS, trigger.job_name) is None, what="removal")

    payload = await asyncio.wait_for(trigger.wait(), 20)
    assert (payload["outcome"], payload["reason"]) == ("unknown", "FinalStateUnknown"), payload
    assert payload["status"] == "error"
    assert f"Job {NS}/{trigger.job_name} (uid {trigger.job_uid}) no longer exists" in payload["message"]
    assert "never saw it end: its final state is unknown" in payload["message"]
    assert "deleted before" not in payload["message"] and "retry" not in payload["message"]
    assert get_registry().job_gets["missing"] == 1  # one GET confirmed it gone
    with pytest.raises(AirflowException) as raised:
        await asyncio.to_thread(op.execute_complete, make_context(), payload)
    assert "unknown: FinalStateUnknown:" in str(raised.value)
    assert "its final state is unknown" in str(raised.value)


async def test_the_operator_fails_an_unknown_ending_with_its_message(sandbox, kubeconfig, k8s_async_client):
    """The task fails with the trigger's words, resumed on a worker (the triggerer does not end it)."""
    op = make_operator(
        kubeconfig, cmds=["true"], deferrable=True, wait_until_job_complete=True, get_logs=False
    )
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(make_context())
    trigger = deferred.value.trigger
    waiting = asyncio.create_task(trigger.wait())
    await wait_until(lambda: _cached(trigger.job_name), what="the Job in the synced cache")
    await _delete_job_in_a_relist_gap(sandbox, k8s_async_client, trigger.job_name)
    payload = await waiting
    assert payload["outcome"] == "unknown", payload
    assert await end_from_triggerer(trigger, payload) is None  # resumed, not ended from the triggerer
    with pytest.raises(AirflowException) as raised:
        await asyncio.to_thread(op.execute_complete, make_context(), payload)
    assert "unknown: FinalStateUnknown:" in str(raised.value)
    assert "its final state is unknown" in str(raised.value)
    assert "retry" not in str(raised.value)
