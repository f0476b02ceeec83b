"""Disruptions, quota and Kueue while a JobTrigger / KubernetesJobOperator waits, on the sandbox.

* a disrupted pod is logged as it happens and listed in the event; with ``disruption_retries`` the
  operator's podFailurePolicy keeps it from failing the Job, and the trigger bounds the count;
* a Job whose pods the quota refuses keeps waiting, and the task log says why once;
* a Job suspended by Kueue (not admitted yet, or preempted) keeps waiting; admission and preemption
  are logged.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import threading
from pathlib import Path
from typing import Any

import pytest
import structlog.testing
from airflow.providers.common.compat.sdk import AirflowException, TaskDeferred
from kubernetes.client import models as k8s

from airflow_jobwatch.operators.disruption import add_disruption_rule
from airflow_jobwatch.triggers import notes

from .conftest import NS, collect, create_job, job_manifest, make_trigger, wait_until
from .test_job_operator import FakeTI, _rendered, make_context, make_operator, wait_until_sync

pytestmark = pytest.mark.timeout(180)

# "status" is written out: the API server defaults it to "True", the sandbox does not, and kubernetes 35's
# models (Airflow 3.1/3.2's pins) refuse a response without it (kubernetes 36 does not validate responses).
IGNORE_DISRUPTIONS = {
    "rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]
}


def _once_then_succeed(marker: Path) -> list[str]:
    """The first pod marks that it ran, then waits to be disrupted; its replacement finds the marker and
    succeeds. Disrupt the first pod only once :func:`_marked_and_running` names it: a pod is Running as
    soon as its shell process is started, before the shell has run ``touch``, and a pod stopped in
    between leaves no marker, so its replacement sleeps its 60 s as well and the wait never ends."""
    return ["sh", "-c", f"if [ -e {marker} ]; then exit 0; fi; touch {marker}; sleep 60"]


def _marked_and_running(sandbox: Any, marker: Path) -> str | None:
    """The running pod of an :func:`_once_then_succeed` Job, once it has left its marker (the marker is
    only ever left by a first pod, which then sleeps until it is disrupted)."""
    return _running_pod(sandbox) if marker.exists() else None


async def _start(trigger: Any) -> asyncio.Task[list[dict[str, Any]]]:
    """Run the trigger; return once it has looked at its Job (its watch is synced), as a deferred
    task's trigger has long before a disruption comes."""
    task = asyncio.create_task(collect(trigger))
    await wait_until(lambda: trigger.notes.observations > 0 or task.done(), what="the trigger watching")
    return task


def _running_pod(sandbox: Any, *, besides: set[str] = frozenset()) -> str | None:  # type: ignore[assignment]
    for pod in sandbox.objects("pods", NS):
        name = pod["metadata"]["name"]
        if (
            name not in besides
            and pod["status"].get("phase") == "Running"
            and not pod["metadata"].get("deletionTimestamp")
        ):
            return str(name)
    return None


def _explain(sandbox: Any, name: str, logs: list[dict[str, Any]], marker: Path | None = None) -> str:
    """What a wait that ended in an error needs to explain itself: the trigger's log lines (with their
    times when the capture stamps them), the Job's spec.suspend and status, its pods and containers,
    the namespace's events, the sandbox Kueue's state, and when a pod left the marker, if one did."""
    lines = ["--- the trigger's log ---"]
    for entry in logs:
        event, args = str(entry.get("event")), entry.get("positional_args")
        text = event % tuple(args) if args else event
        lines.append(f"{entry.get('timestamp', '-')} {entry.get('log_level', '')} {text}")
    job = sandbox.get_object("jobs", NS, name) or {}
    suspend = (job.get("spec") or {}).get("suspend")
    lines += [f"--- Job {NS}/{name}: spec.suspend={suspend} status ---", json.dumps(job.get("status"))]
    lines.append("--- pods ---")
    for pod in sandbox.objects("pods", NS):
        meta, status = pod["metadata"], pod.get("status") or {}
        states = [cs.get("state") for cs in status.get("containerStatuses") or []]
        deleting = f" deleting since {meta['deletionTimestamp']}" if meta.get("deletionTimestamp") else ""
        lines.append(f"{meta['name']} {status.get('phase')}{deleting} containers={json.dumps(states)}")
    lines.append("--- events ---")
    for ev in sandbox.objects("events", NS):
        who = (ev.get("involvedObject") or {}).get("name")
        lines.append(f"{ev.get('lastTimestamp')} {who} {ev.get('reason')}: {ev.get('message')}")
    lines.append(f"--- sandbox Kueue: {json.dumps(sandbox.kueue_state())}")
    if marker is not None:  # left by the first pod that got past its ``touch`` (compare with the events)
        left = (
            datetime.datetime.fromtimestamp(marker.stat().st_mtime, datetime.UTC).isoformat()
            if marker.exists()
            else "never"
        )
        lines.append(f"--- the marker file {marker} was left at: {left}")
    return "\n".join(lines)


async def _event_of(
    task: asyncio.Task[list[dict[str, Any]]],
    sandbox: Any,
    name: str,
    logs: list[dict[str, Any]],
    marker: Path | None = None,
) -> dict[str, Any]:
    """The trigger's one event; if the wait fails (``collect``'s time limit), the error carries
    :func:`_explain`'s account of the trigger and the sandbox."""
    try:
        [event] = await task
    except Exception as exc:
        exc.add_note(_explain(sandbox, name, logs, marker))
        raise
    return event


# --------------------------------------------------------------------------------------------------
# JobTrigger


async def test_disrupted_pod_is_logged_and_listed_and_the_job_goes_on(
    sandbox, kubeconfig, k8s_async_client, tmp_path
):
    marker = tmp_path / "ran"
    manifest = job_manifest("spot", _once_then_succeed(marker), podFailurePolicy=IGNORE_DISRUPTIONS)
    await create_job(k8s_async_client, manifest)
    with structlog.testing.capture_logs(processors=[structlog.processors.TimeStamper(fmt="iso")]) as logs:
        task = await _start(make_trigger(sandbox, kubeconfig, "spot", disruption_retries=1))
        await wait_until(lambda: _marked_and_running(sandbox, marker) is not None, what="the first pod ran")
        victim = _running_pod(sandbox)
        sandbox.preempt_pod(NS, victim, grace_seconds=1)
        event = await _event_of(task, sandbox, "spot", logs, marker)
    assert event["status"] == "success", event
    assert [(d["pod"], d["reason"], d["started"]) for d in event["disruptions"]] == [
        (victim, "PreemptionByScheduler", True)
    ]
    text = _rendered(logs)
    assert f"Pod {victim} of Job {NS}/spot was disrupted (1 of 1 allowed): preempted by the scheduler" in text
    assert text.count("was disrupted") == 1, text  # once, though the pod changed several times


async def test_past_disruption_retries_the_wait_fails_and_deletes_the_job(
    sandbox, kubeconfig, k8s_async_client
):
    manifest = job_manifest("churn", ["sleep", "60"], podFailurePolicy=IGNORE_DISRUPTIONS)
    await create_job(k8s_async_client, manifest)
    task = await _start(
        make_trigger(sandbox, kubeconfig, "churn", disruption_retries=1, termination_grace_period=0)
    )
    victims: list[str] = []
    for _ in range(2):
        await wait_until(
            lambda: _running_pod(sandbox, besides=set(victims)) is not None, limit=30, what="a pod running"
        )
        victim = _running_pod(sandbox, besides=set(victims))
        assert victim is not None
        victims.append(victim)
        sandbox.api_evict_pod(NS, victim, grace_seconds=1)
    [event] = await task
    assert (event["status"], event["outcome"], event["reason"]) == (
        "error",
        "failed",
        "DisruptionRetriesExceeded",
    )
    assert "disrupted 2 times, more than disruption_retries=1" in event["message"]
    for victim in victims:
        assert f"pod {victim}: evicted through the Eviction API" in event["message"]
    assert [d["reason"] for d in event["disruptions"]] == ["EvictionByEvictionAPI"] * 2
    await wait_until(
        lambda: sandbox.get_object("jobs", NS, "churn") is None, limit=30, what="the Job deleted"
    )


async def test_job_without_disruption_retries_lists_disruptions_without_a_bound(
    sandbox, kubeconfig, k8s_async_client, tmp_path
):
    marker = tmp_path / "ran"
    manifest = job_manifest("unbounded", _once_then_succeed(marker), podFailurePolicy=IGNORE_DISRUPTIONS)
    await create_job(k8s_async_client, manifest)
    with structlog.testing.capture_logs(processors=[structlog.processors.TimeStamper(fmt="iso")]) as logs:
        task = await _start(make_trigger(sandbox, kubeconfig, "unbounded"))
        await wait_until(lambda: _marked_and_running(sandbox, marker) is not None, what="the first pod ran")
        sandbox.shutdown_node(NS, _running_pod(sandbox))
        event = await _event_of(task, sandbox, "unbounded", logs, marker)
    assert event["status"] == "success", event
    assert [d["reason"] for d in event["disruptions"]] == ["NodeShutdown"]


async def test_job_over_quota_keeps_waiting_and_says_why_once(
    sandbox, kubeconfig, k8s_async_client, monkeypatch
):
    monkeypatch.setattr(notes, "MISSING_PODS_FIRST_CHECK_SECONDS", 0.3)
    sandbox.set_pod_quota(NS, 0, "team-quota")
    await create_job(k8s_async_client, job_manifest("capped", ["true"]))
    with structlog.testing.capture_logs() as logs:
        task = asyncio.create_task(collect(make_trigger(sandbox, kubeconfig, "capped", poll_interval=0.2)))
        await wait_until(
            lambda: "cannot create its pods yet" in _rendered(logs), limit=30, what="the reason in the log"
        )
        await asyncio.sleep(2.0)  # ten polls and several event reads later ...
        assert not task.done()
        sandbox.set_pod_quota(NS, None)
        [event] = await task
    assert event["status"] == "success", event
    text = _rendered(logs)
    assert text.count("cannot create its pods yet") == 1, text  # ... still said once
    assert "exceeded quota: team-quota, requested: pods=1, used: pods=0, limited: pods=0" in text


async def test_kueue_suspension_admission_and_preemption_are_waited_through(
    sandbox, kubeconfig, k8s_async_client, tmp_path
):
    sandbox.set_kueue(0)  # no capacity yet: the Job waits suspended
    marker = tmp_path / "ran"
    manifest = job_manifest(
        "queued", _once_then_succeed(marker), labels={"kueue.x-k8s.io/queue-name": "local-queue"}
    )
    await create_job(k8s_async_client, manifest)
    with structlog.testing.capture_logs(processors=[structlog.processors.TimeStamper(fmt="iso")]) as logs:
        task = asyncio.create_task(collect(make_trigger(sandbox, kubeconfig, "queued", poll_interval=0.5)))
        await wait_until(lambda: "waiting to be admitted" in _rendered(logs), what="the suspension logged")
        await asyncio.sleep(1.5)
        assert not task.done()
        sandbox.set_kueue(1)
        await wait_until(
            lambda: _marked_and_running(sandbox, marker) is not None, what="the admitted Job's first pod ran"
        )
        sandbox.kueue_preempt(NS, "queued", hold_seconds=1.0)
        event = await _event_of(task, sandbox, "queued", logs, marker)
    assert event["status"] == "success", event
    text = _rendered(logs)
    assert "Job default/queued is suspended: waiting to be admitted by Kueue (queue 'local-queue')" in text
    assert text.count("was admitted (resumed)") == 2, text
    assert "was suspended again (preempted by Kueue (queue 'local-queue'), 1 time(s))" in text
    assert event["disruptions"] == []  # Kueue's preemption suspends the Job; it does not disrupt pods


# --------------------------------------------------------------------------------------------------
# KubernetesJobOperator(disruption_retries=N)


def test_disruption_retries_adds_the_ignore_rule_and_restart_policy_never(sandbox, kubeconfig):
    op = make_operator(kubeconfig, cmds=["true"], wait_until_job_complete=False, disruption_retries=2)
    context = make_context()
    op.execute(context)
    job = sandbox.get_object("jobs", NS, context["ti"].xcoms["job_name"])
    assert job["spec"]["podFailurePolicy"] == {
        "rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]
    }
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    plain = make_operator(kubeconfig, task_id="plain", cmds=["true"], wait_until_job_complete=False)
    context = make_context(FakeTI(task_id="plain"))
    plain.execute(context)
    assert "podFailurePolicy" not in sandbox.get_object("jobs", NS, context["ti"].xcoms["job_name"])["spec"]


def test_disruption_retries_validation(sandbox, kubeconfig):
    with pytest.raises(ValueError, match="disruption_retries must be an int >= 0"):
        make_operator(kubeconfig, cmds=["true"], disruption_retries=-1)
    # a pod template asking for OnFailure cannot carry a podFailurePolicy: said before anything is created
    job = k8s.V1Job(
        spec=k8s.V1JobSpec(
            template=k8s.V1PodTemplateSpec(spec=k8s.V1PodSpec(containers=[], restart_policy="OnFailure"))
        )
    )
    with pytest.raises(ValueError, match="restartPolicy 'Never'.*'OnFailure'"):
        add_disruption_rule(job)
    # a user's own rules stay, after ours (the first matching rule wins)
    job.spec.template.spec.restart_policy = None
    job.spec.pod_failure_policy = k8s.V1PodFailurePolicy(
        rules=[
            k8s.V1PodFailurePolicyRule(
                action="FailJob",
                on_exit_codes=k8s.V1PodFailurePolicyOnExitCodesRequirement(operator="In", values=[137]),
            )
        ]
    )
    add_disruption_rule(add_disruption_rule(job))
    assert [r.action for r in job.spec.pod_failure_policy.rules] == ["Ignore", "FailJob"]
    assert job.spec.template.spec.restart_policy == "Never"


@pytest.mark.parametrize("mode", ["worker", "deferred"])
def test_evicted_mid_run_with_disruption_retries_1_succeeds(sandbox, kubeconfig, tmp_path, mode):
    marker = tmp_path / "ran"
    op = make_operator(
        kubeconfig,
        cmds=_once_then_succeed(marker),
        wait_until_job_complete=True,
        deferrable=mode == "deferred",
        disruption_retries=1,
        get_logs=False,
    )
    context = make_context()

    def evict_when_running(trigger: Any = None) -> None:
        # deferred: the triggerer watches long before a spot node goes; here, once the trigger looked
        if trigger is not None:
            wait_until_sync(lambda: trigger.notes.observations > 0, "the trigger watching", limit=60)
        wait_until_sync(
            lambda: _marked_and_running(sandbox, marker) is not None, "the first pod ran", limit=60
        )
        sandbox.api_evict_pod(NS, _running_pod(sandbox), grace_seconds=1)

    evictors: list[threading.Thread] = []
    with structlog.testing.capture_logs() as logs:
        try:
            if mode == "worker":
                evictors.append(threading.Thread(target=evict_when_running))
                evictors[-1].start()
            op.execute(context)
        except TaskDeferred as deferred:
            evictors.append(threading.Thread(target=evict_when_running, args=(deferred.trigger,)))
            evictors[-1].start()
            event = asyncio.run(asyncio.wait_for(_first_event(deferred.trigger), 120))
            op.execute_complete(context, event)
    for evictor in evictors:
        evictor.join(60)
    assert "was disrupted (1 of 1 allowed): evicted through the Eviction API" in _rendered(logs)
    job = sandbox.get_object("jobs", NS, context["ti"].xcoms["job_name"])
    assert job["status"]["succeeded"] == 1 and job["status"].get("failed", 0) == 0


async def _first_event(trigger: Any) -> dict[str, Any]:
    async for event in trigger.run():
        return event.payload
    raise AssertionError("the trigger ended without an event")


@pytest.mark.parametrize("mode", ["worker", "deferred"])
def test_a_job_failed_by_an_eviction_names_it_in_the_tasks_error(sandbox, kubeconfig, mode):
    """No ``disruption_retries``: the eviction counts against ``backoff_limit=0`` and the Job fails; the
    task's exception says so, in both modes, and names the option that would have absorbed it."""
    op = make_operator(
        kubeconfig,
        cmds=["sh", "-c", "sleep 60"],
        wait_until_job_complete=True,
        deferrable=mode == "deferred",
        get_logs=False,
    )
    context = make_context()
    victims: list[str] = []

    def evict_when_running(trigger: Any = None) -> None:
        if trigger is not None:
            wait_until_sync(lambda: trigger.notes.observations > 0, "the trigger watching", limit=60)
        wait_until_sync(lambda: _running_pod(sandbox) is not None, "the pod running", limit=60)
        victims.append(_running_pod(sandbox))
        sandbox.api_evict_pod(NS, victims[-1], grace_seconds=1)

    evictor = threading.Thread(target=evict_when_running)
    with pytest.raises(AirflowException) as raised:
        try:
            if mode == "worker":
                evictor.start()
            op.execute(context)
        except TaskDeferred as deferred:
            evictor = threading.Thread(target=evict_when_running, args=(deferred.trigger,))
            evictor.start()
            event = asyncio.run(asyncio.wait_for(_first_event(deferred.trigger), 120))
            op.execute_complete(context, event)
    evictor.join(60)
    text = str(raised.value)
    assert "failed: BackoffLimitExceeded" in text, text
    assert f"It failed after 1 disruption: pod {victims[0]} was evicted through the Eviction API" in text, (
        text
    )
    assert text.endswith("; `disruption_retries` absorbs disruptions."), text
