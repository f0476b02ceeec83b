"""Capacity and disruptions on demand: preemption, the Eviction API, taint eviction, kubelet stops, node
shutdown, a pod-count ResourceQuota, podFailurePolicy and a minimal Kueue, seen through the official
``kubernetes`` client. The shapes asserted here are the recorded ones (tests/fixtures/real-apiserver/)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from airflow_jobwatch.kube.meaning.states import classify_pod, pod_disruption
from airflow_jobwatch_testing.sandbox import SandboxThread
from airflow_jobwatch_testing.sandbox.admin import AdminClient

from .helpers import condition, job_body, pod_body, wait_for

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "real-apiserver"


@pytest.fixture
def batch(kubeconfig: Path) -> Iterator[client.BatchV1Api]:
    api_client = config.new_client_from_config(config_file=str(kubeconfig))
    try:
        yield client.BatchV1Api(api_client)
    finally:
        api_client.close()


def _phase(sandbox: SandboxThread, name: str) -> str | None:
    return ((sandbox.get_object("pods", "default", name) or {}).get("status") or {}).get("phase")


def _pod_events(core: client.CoreV1Api, rv: str, name: str, timeout: int = 20) -> list[tuple[str, Any]]:
    """The watch events of one pod from ``rv`` until its DELETED event (or the timeout)."""
    seen: list[tuple[str, Any]] = []
    for event in watch.Watch().stream(
        core.list_namespaced_pod,
        "default",
        field_selector=f"metadata.name={name}",
        resource_version=rv,
        timeout_seconds=timeout,
        _preload_content=True,
    ):
        seen.append((event["type"], client.ApiClient().sanitize_for_serialization(event["object"])))
        if event["type"] == "DELETED":
            break
    return seen


def _job_events(core: client.CoreV1Api, job: str) -> list[tuple[str, str]]:
    return [
        (e.reason, e.message)
        for e in core.list_namespaced_event(
            "default", field_selector=f"involvedObject.kind=Job,involvedObject.name={job}"
        ).items
    ]


def _recorded_condition(name: str) -> dict[str, Any]:
    recorded = json.loads((FIXTURES / "disruptions.json").read_text())
    return dict(recorded["conditions"][name])


# --------------------------------------------------------------------------------------------------
# Preemption and eviction: the condition first, then the graceful delete


def test_preempt_running_pod_condition_then_delete(sandbox: SandboxThread, core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", pod_body("victim", "sleep 60", grace=1))
    wait_for(lambda: _phase(sandbox, "victim") == "Running", what="the pod to run")
    rv = core.read_namespaced_pod("victim", "default").metadata.resource_version
    sandbox.preempt_pod("default", "victim")
    seen = _pod_events(core, rv, "victim")
    first = seen[0][1]
    target = condition(first, "DisruptionTarget")
    assert target is not None and "deletionTimestamp" not in first["metadata"], seen[0]
    want = _recorded_condition("PreemptionByScheduler")
    assert (target["reason"], target["message"]) == (want["reason"], want["message"])
    assert seen[1][1]["metadata"].get("deletionTimestamp"), "then the graceful delete"
    assert seen[-1][0] == "DELETED"
    last = seen[-1][1]
    assert last["status"]["phase"] == "Failed"
    disruption = pod_disruption(last, deleted=True)
    assert disruption is not None and disruption.reason == "PreemptionByScheduler" and disruption.started
    assert "preempted by the scheduler on node sandbox-node" in classify_pod(last, deleted=True).message
    reasons = [e.reason for e in core.list_namespaced_event("default").items]
    assert "Preempted" in reasons


@pytest.mark.sandbox(pod_start_delay=60)
def test_preempt_pending_pod_never_started(sandbox: SandboxThread, core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", pod_body("early", "sleep 60", grace=1))
    wait_for(lambda: _phase(sandbox, "early") == "Pending", what="the pod to be pending")
    rv = core.read_namespaced_pod("early", "default").metadata.resource_version
    sandbox.preempt_pod("default", "early")
    seen = _pod_events(core, rv, "early")
    assert seen[-1][0] == "DELETED"
    disruption = pod_disruption(seen[-1][1], deleted=True)
    assert disruption is not None
    assert (disruption.reason, disruption.started) == ("PreemptionByScheduler", False)


def test_eviction_api_with_the_official_client(sandbox: SandboxThread, core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", pod_body("ev", "sleep 60", grace=30))
    wait_for(lambda: _phase(sandbox, "ev") == "Running", what="the pod to run")
    rv = core.read_namespaced_pod("ev", "default").metadata.resource_version
    answer = core.create_namespaced_pod_eviction(
        "ev",
        "default",
        client.V1Eviction(
            metadata=client.V1ObjectMeta(name="ev"),
            delete_options=client.V1DeleteOptions(grace_period_seconds=1),
        ),
        _preload_content=False,
    )
    recorded = json.loads((FIXTURES / "disruptions.json").read_text())["eviction_answer"]
    assert (answer.status, json.loads(answer.data)) == (201, recorded)
    seen = _pod_events(core, rv, "ev")
    target = condition(seen[0][1], "DisruptionTarget")
    want = _recorded_condition("EvictionByEvictionAPI")
    assert target is not None and (target["reason"], target["message"]) == (want["reason"], want["message"])
    assert seen[1][1]["metadata"]["deletionGracePeriodSeconds"] == 1
    assert seen[-1][0] == "DELETED"
    assert classify_pod(seen[-1][1], deleted=True).reason == "EvictionByEvictionAPI"
    with pytest.raises(ApiException) as missing:
        core.create_namespaced_pod_eviction(
            "nope", "default", client.V1Eviction(metadata=client.V1ObjectMeta(name="nope"))
        )
    assert missing.value.status == 404


def test_taint_eviction(sandbox: SandboxThread, core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", pod_body("tainted", "sleep 60", grace=1))
    wait_for(lambda: _phase(sandbox, "tainted") == "Running", what="the pod to run")
    rv = core.read_namespaced_pod("tainted", "default").metadata.resource_version
    sandbox.taint_evict_pod("default", "tainted")
    seen = _pod_events(core, rv, "tainted")
    target = condition(seen[0][1], "DisruptionTarget")
    want = _recorded_condition("DeletionByTaintManager")
    assert target is not None and (target["reason"], target["message"]) == (want["reason"], want["message"])
    assert seen[-1][0] == "DELETED"


def test_kubelet_preemption(sandbox: SandboxThread, core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", pod_body("crit", "sleep 60"))
    wait_for(lambda: _phase(sandbox, "crit") == "Running", what="the pod to run")
    sandbox.kubelet_preempt_pod("default", "crit")
    wait_for(lambda: _phase(sandbox, "crit") == "Failed", what="the pod to fail")
    pod = sandbox.get_object("pods", "default", "crit") or {}
    assert (pod["status"]["reason"], pod["status"]["message"]) == (
        "Preempting",
        "Preempted in order to admit critical pod",
    )
    want = _recorded_condition("TerminationByKubelet/Preempting")
    target = condition(pod, "DisruptionTarget")
    assert target is not None and (target["reason"], target["message"]) == (want["reason"], want["message"])


def test_node_shutdown_running_and_not_started(sandbox: SandboxThread, core: client.CoreV1Api) -> None:
    sandbox.set_image_pull_failure("never-pulled")
    core.create_namespaced_pod("default", pod_body("up", "sleep 60"))
    core.create_namespaced_pod(
        "default",
        pod_body("down", containers=[{"name": "main", "image": "never-pulled:1", "command": ["true"]}]),
    )
    wait_for(lambda: _phase(sandbox, "up") == "Running", what="the first pod to run")
    wait_for(lambda: _phase(sandbox, "down") == "Pending", what="the second pod to be pending")
    assert sandbox.shutdown_node() == 2
    wait_for(
        lambda: _phase(sandbox, "up") == "Failed" and _phase(sandbox, "down") == "Failed", what="both stopped"
    )
    up = sandbox.get_object("pods", "default", "up") or {}
    down = sandbox.get_object("pods", "default", "down") or {}
    want = _recorded_condition("TerminationByKubelet/NodeShutdown")
    assert (up["status"]["reason"], up["status"]["message"]) == ("Terminated", want["message"])
    target = condition(up, "DisruptionTarget")
    assert target is not None and (target["reason"], target["message"]) == (want["reason"], want["message"])
    assert down["status"]["reason"] == "NodeShutdown"
    assert condition(down, "DisruptionTarget") is None
    assert "deletionTimestamp" not in up["metadata"], "a node shutdown does not delete pods"
    up_disruption, down_disruption = pod_disruption(up), pod_disruption(down)
    assert up_disruption is not None and (up_disruption.reason, up_disruption.started) == (
        "NodeShutdown",
        True,
    )
    assert down_disruption is not None and (down_disruption.reason, down_disruption.started) == (
        "NodeShutdown",
        False,
    )


# --------------------------------------------------------------------------------------------------
# ResourceQuota on pod count


def test_pod_quota_refuses_with_the_real_403_body(sandbox: SandboxThread, core: client.CoreV1Api) -> None:
    admin = AdminClient(sandbox.url, sandbox.token)
    admin.fault("set_pod_quota", namespace="default", pods=1, name="compute")
    core.create_namespaced_pod("default", pod_body("q1", "sleep 2"))
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod("default", pod_body("q2", "true"))
    assert refused.value.status == 403
    body = json.loads(refused.value.body)
    recorded = json.loads((FIXTURES / "disruptions.json").read_text())["quota_403"]
    assert body == {
        **recorded,
        "message": 'pods "q2" is forbidden: exceeded quota: compute, requested: pods=1, used: pods=1, limited: pods=1',
        "details": {"name": "q2", "kind": "pods"},
    }
    assert admin.fault("pod_quota_usage", namespace="default")["status"]["used"] == {"pods": "1"}
    # a finished pod no longer counts
    wait_for(lambda: _phase(sandbox, "q1") == "Succeeded", what="the first pod to finish")
    core.create_namespaced_pod("default", pod_body("q2", "true"))
    sandbox.set_pod_quota("default", None)
    with pytest.raises(ValueError, match="pods must be an int"):
        sandbox.set_pod_quota("default", -1)


def test_job_over_quota_retries_its_create(
    sandbox: SandboxThread, core: client.CoreV1Api, batch: client.BatchV1Api
) -> None:
    sandbox.set_pod_quota("default", 0)
    batch.create_namespaced_job("default", job_body("capped", "true"))
    wait_for(
        lambda: any(reason == "FailedCreate" for reason, _ in _job_events(core, "capped")),
        what="a FailedCreate event",
    )
    message = next(m for r, m in _job_events(core, "capped") if r == "FailedCreate")
    assert message.startswith('Error creating: pods "capped-') and "exceeded quota: pod-quota" in message
    assert not core.list_namespaced_pod("default").items
    sandbox.set_pod_quota("default", None)
    wait_for(
        lambda: condition(sandbox.get_object("jobs", "default", "capped"), "Complete"),
        timeout=60,
        what="the Job to complete once the quota is lifted",
    )


# --------------------------------------------------------------------------------------------------
# podFailurePolicy


def _disruption_policy_job(name: str, marker: Path) -> dict[str, Any]:
    # The first pod waits to be disrupted; the replacement finds the marker and succeeds.
    body = job_body(name, f"if [ -e {marker} ]; then exit 0; fi; touch {marker}; sleep 60", backoffLimit=0)
    body["spec"]["podFailurePolicy"] = {
        "rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]
    }
    return body


def test_pod_failure_policy_ignores_a_preempted_pod(
    sandbox: SandboxThread, core: client.CoreV1Api, batch: client.BatchV1Api, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    batch.create_namespaced_job("default", _disruption_policy_job("ignored", marker))
    # Running and its marker left: a pod preempted before its shell left it would run again and sleep 60 s.
    first = wait_for(
        lambda: (
            marker.exists()
            and next((p for p in sandbox.objects("pods") if p["status"].get("phase") == "Running"), None)
        ),
        what="the first pod to run and leave its marker",
    )
    sandbox.preempt_pod("default", first["metadata"]["name"], grace_seconds=1)
    job = wait_for(
        lambda: (
            condition(sandbox.get_object("jobs", "default", "ignored"), "Complete")
            and sandbox.get_object("jobs", "default", "ignored")
        ),
        timeout=60,
        what="the Job to complete with a replacement pod",
    )
    assert job["status"].get("failed", 0) == 0 and job["status"]["succeeded"] == 1


def test_pod_failure_policy_counts_other_failures(
    sandbox: SandboxThread, core: client.CoreV1Api, batch: client.BatchV1Api
) -> None:
    body = job_body("counted", "exit 3", backoffLimit=0)
    body["spec"]["podFailurePolicy"] = {
        "rules": [
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
            {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [3]}},
        ]
    }
    batch.create_namespaced_job("default", body)
    failed = wait_for(
        lambda: condition(sandbox.get_object("jobs", "default", "counted"), "Failed"),
        timeout=60,
        what="the Job to fail by its FailJob rule",
    )
    assert failed["reason"] == "PodFailurePolicy"
    assert "failed with exit code 3 matching FailJob rule at index 1" in failed["message"]


def test_pod_failure_policy_condition_status_defaults_to_true(batch: client.BatchV1Api) -> None:
    """As the real API server defaults it: an ``onPodConditions`` pattern without ``status`` is stored with
    ``status: "True"`` (the official client's model then reads the Job back; it refuses the field missing)."""
    batch.create_namespaced_job("default", _disruption_policy_job("defaulted", Path("/nonexistent/marker")))
    job = batch.read_namespaced_job("defaulted", "default")
    assert job.spec.pod_failure_policy.rules[0].on_pod_conditions[0].status == "True"


def test_pod_failure_policy_needs_restart_policy_never(batch: client.BatchV1Api) -> None:
    body = job_body("onfail", "true", restart_policy="OnFailure")
    body["spec"]["podFailurePolicy"] = {
        "rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]
    }
    with pytest.raises(ApiException) as invalid:
        batch.create_namespaced_job("default", body)
    assert invalid.value.status == 422
    assert (
        'spec.template.spec.restartPolicy: Unsupported value: "OnFailure"'
        in json.loads(invalid.value.body)["message"]
    )


# --------------------------------------------------------------------------------------------------
# Kueue


def _queued(name: str, command: str) -> dict[str, Any]:
    body = job_body(name, command)
    body["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "local-queue"}
    return body


def test_kueue_admits_one_job_at_a_time(
    sandbox: SandboxThread, core: client.CoreV1Api, batch: client.BatchV1Api
) -> None:
    sandbox.set_kueue(1)
    batch.create_namespaced_job("default", _queued("first", "sleep 1"))
    batch.create_namespaced_job("default", _queued("second", "true"))
    wait_for(lambda: sandbox.kueue_state()["admitted"] == ["default/first"], what="the first Job admitted")
    second = wait_for(
        lambda: (
            condition(sandbox.get_object("jobs", "default", "second"), "Suspended")
            and sandbox.get_object("jobs", "default", "second")
        ),
        what="the second Job suspended",
    )
    assert second["spec"]["suspend"] is True
    assert condition(second, "Suspended")["reason"] == "JobSuspended"  # type: ignore[index]
    for name in ("first", "second"):
        wait_for(
            lambda name=name: condition(sandbox.get_object("jobs", "default", name), "Complete"),
            timeout=60,
            what=f"Job {name} to complete",
        )
    assert ("Started", "Admitted by clusterQueue cluster-queue") in _job_events(core, "second")
    resumed = [
        c
        for c in sandbox.get_object("jobs", "default", "second")["status"]["conditions"]
        if c["type"] == "Suspended"
    ]  # type: ignore[index]
    assert resumed[0]["status"] == "False" and resumed[0]["reason"] == "JobResumed"


def test_kueue_preemption_suspends_and_readmits(
    sandbox: SandboxThread, core: client.CoreV1Api, batch: client.BatchV1Api, tmp_path: Path
) -> None:
    sandbox.set_kueue(1)
    marker = tmp_path / "ran"
    batch.create_namespaced_job(
        "default", _queued("bumped", f"if [ -e {marker} ]; then exit 0; fi; touch {marker}; sleep 60")
    )
    wait_for(
        lambda: marker.exists() and _phase_of_job_pod(sandbox) == "Running",
        what="the Job's pod to run and leave its marker",
    )
    sandbox.kueue_preempt("default", "bumped", hold_seconds=1.0)
    wait_for(
        lambda: condition(sandbox.get_object("jobs", "default", "bumped"), "Suspended"),
        what="the Job suspended again",
    )
    stopped = [m for r, m in _job_events(core, "bumped") if r == "Stopped"]
    assert stopped and stopped[0].startswith("Preempted to accommodate a workload (UID: ")
    job = wait_for(
        lambda: (
            condition(sandbox.get_object("jobs", "default", "bumped"), "Complete")
            and sandbox.get_object("jobs", "default", "bumped")
        ),
        timeout=60,
        what="the Job re-admitted and complete",
    )
    assert job["status"].get("failed", 0) == 0
    assert sandbox.kueue_state()["admissions"] == {"default/bumped": 2}
    with pytest.raises(RuntimeError, match="not admitted"):
        sandbox.kueue_preempt("default", "bumped")


def _phase_of_job_pod(sandbox: SandboxThread) -> str | None:
    pods = sandbox.objects("pods")
    return pods[0]["status"].get("phase") if pods else None
