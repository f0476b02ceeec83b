"""The sandbox Job controller, through the official ``kubernetes`` client."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from airflow_jobwatch_testing.sandbox import SandboxThread

from .helpers import condition, job_body, wait_for


@pytest.fixture
def apis(kubeconfig: Path) -> Iterator[tuple[client.BatchV1Api, client.CoreV1Api]]:
    api_client = config.new_client_from_config(config_file=str(kubeconfig))
    try:
        yield client.BatchV1Api(api_client), client.CoreV1Api(api_client)
    finally:
        api_client.close()


def finished(sandbox: SandboxThread, name: str) -> dict[str, Any] | None:
    job = sandbox.get_object("jobs", "default", name)
    if condition(job, "Complete") or condition(job, "Failed"):
        return job
    return None


def test_job_success_follows_recorded_order(sandbox: SandboxThread, apis: Any) -> None:
    batch, core = apis
    rv = core.list_namespaced_pod("default").metadata.resource_version
    created = batch.create_namespaced_job("default", job_body("ok", "echo hello"))
    assert created.metadata.labels["job-name"] == "ok"
    assert created.spec.backoff_limit == 6 and created.spec.completion_mode == "NonIndexed"
    job = wait_for(lambda: finished(sandbox, "ok"), what="job ok to finish")
    assert condition(job, "Complete") and job["status"]["succeeded"] == 1
    assert job["status"]["completionTime"]
    statuses = [
        e["raw_object"]["status"]
        for e in watch.Watch().stream(
            batch.list_namespaced_job, "default", resource_version=rv, timeout_seconds=1
        )
    ]
    types = [[c["type"] for c in s.get("conditions", [])] for s in statuses]
    assert ["SuccessCriteriaMet"] in types
    assert types[-1] == ["SuccessCriteriaMet", "Complete"]
    assert types.index(["SuccessCriteriaMet"]) < types.index(["SuccessCriteriaMet", "Complete"])
    pods = core.list_namespaced_pod("default", label_selector="job-name=ok").items
    assert len(pods) == 1
    pod = pods[0]
    assert pod.metadata.name.startswith("ok-") and len(pod.metadata.name) == len("ok-") + 5
    assert pod.metadata.owner_references[0].controller is True
    assert pod.metadata.owner_references[0].block_owner_deletion is True
    assert not pod.metadata.finalizers  # the tracking finalizer was removed once counted
    assert pod.metadata.labels["batch.kubernetes.io/controller-uid"] == created.metadata.uid


def test_job_failure_with_backoff_limit(sandbox: SandboxThread, apis: Any) -> None:
    batch, core = apis
    batch.create_namespaced_job("default", job_body("bad", "exit 3", backoffLimit=1))
    job = wait_for(lambda: finished(sandbox, "bad"), what="job bad to fail")
    failed = condition(job, "Failed")
    assert failed and failed["reason"] == "BackoffLimitExceeded"
    assert condition(job, "FailureTarget")
    assert job["status"]["failed"] == 2
    assert "completionTime" not in job["status"]
    assert len(core.list_namespaced_pod("default", label_selector="job-name=bad").items) == 2


def test_job_parallelism_and_completions(sandbox: SandboxThread, apis: Any) -> None:
    batch, core = apis
    batch.create_namespaced_job("default", job_body("par", "sleep 0.3", parallelism=2, completions=3))
    wait_for(
        lambda: (sandbox.get_object("jobs", "default", "par") or {}).get("status", {}).get("active") == 2,
        what="two active pods",
    )
    job = wait_for(lambda: finished(sandbox, "par"), what="job par to complete")
    assert condition(job, "Complete") and job["status"]["succeeded"] == 3
    assert len(core.list_namespaced_pod("default", label_selector="job-name=par").items) == 3


def test_job_active_deadline(sandbox: SandboxThread, apis: Any) -> None:
    batch, _core = apis
    batch.create_namespaced_job("default", job_body("slow", "sleep 60", activeDeadlineSeconds=1))
    job = wait_for(lambda: finished(sandbox, "slow"), what="job slow to hit its deadline")
    failed = condition(job, "Failed")
    assert failed and failed["reason"] == "DeadlineExceeded"
    assert condition(job, "FailureTarget")["reason"] == "DeadlineExceeded"  # type: ignore[index]


def test_job_suspend_and_resume(sandbox: SandboxThread, apis: Any) -> None:
    batch, core = apis
    batch.create_namespaced_job("default", job_body("sus", "echo done", suspend=True))
    job = wait_for(
        lambda: condition(sandbox.get_object("jobs", "default", "sus"), "Suspended"), what="Suspended"
    )
    assert job["reason"] == "JobSuspended"
    assert core.list_namespaced_pod("default", label_selector="job-name=sus").items == []
    batch.patch_namespaced_job("sus", "default", {"spec": {"suspend": False}})
    done = wait_for(lambda: finished(sandbox, "sus"), what="resumed job to complete")
    suspended = [c for c in done["status"]["conditions"] if c["type"] == "Suspended"]
    assert suspended[0]["status"] == "False" and suspended[0]["reason"] == "JobResumed"
    assert condition(done, "Complete")


def test_job_ttl_after_finished_deletes_job_and_pods(sandbox: SandboxThread, apis: Any) -> None:
    batch, _core = apis
    batch.create_namespaced_job("default", job_body("ttl", "true", ttlSecondsAfterFinished=0))
    wait_for(
        lambda: sandbox.get_object("jobs", "default", "ttl") is None and not sandbox.objects("pods"),
        what="job and pods removed by TTL",
    )


def test_job_validation_errors(sandbox: SandboxThread, apis: Any) -> None:
    batch, _core = apis
    body = job_body("nocont", "true")
    body["spec"]["template"]["spec"]["containers"] = []
    with pytest.raises(ApiException) as err:
        batch.create_namespaced_job("default", body)
    assert err.value.status == 422
    assert (
        'Job.batch \\"nocont\\" is invalid: spec.template.spec.containers: Required value' in err.value.body
    )
    with pytest.raises(ApiException) as bad_name:
        batch.create_namespaced_job("default", job_body("Bad_Name", "true"))
    assert bad_name.value.status == 422 and "RFC 1123" in bad_name.value.body
    with pytest.raises(ApiException) as always:
        batch.create_namespaced_job("default", job_body("always", "true", restart_policy="Always"))
    assert always.value.status == 422 and "restartPolicy" in always.value.body


def _log_or_empty(core: Any, pod: str) -> str:
    try:
        return str(core.read_namespaced_pod_log(pod, "default"))
    except ApiException:  # the container has not started yet
        return ""


def test_delete_job_foreground_waits_for_pods(sandbox: SandboxThread, apis: Any) -> None:
    batch, core = apis
    # The container ignores SIGTERM, so its pod outlives the delete by the grace period (2 s), until
    # the kubelet's SIGKILL: long enough to see the Job kept while its pod is there.
    batch.create_namespaced_job("default", job_body("fg", "trap '' TERM; echo ready; sleep 60"))
    pod = wait_for(lambda: (sandbox.objects("pods") or [None])[0], what="a pod of job fg")
    wait_for(
        lambda: "ready" in _log_or_empty(core, pod["metadata"]["name"]),
        what="job fg's container ignoring SIGTERM",
    )
    raw = batch.delete_namespaced_job(
        "fg", "default", propagation_policy="Foreground", _preload_content=False
    )
    answer = json.loads(raw.data)
    assert answer["kind"] == "Job" and answer["metadata"]["deletionTimestamp"]
    assert "foregroundDeletion" in answer["metadata"]["finalizers"]
    assert sandbox.get_object("jobs", "default", "fg") is not None  # kept until its pods are gone
    assert sandbox.objects("pods"), "the pod ignoring SIGTERM is gone before its grace period ended"
    wait_for(lambda: sandbox.get_object("jobs", "default", "fg") is None, what="job fg gone after its pods")
    assert sandbox.objects("pods") == []


def test_delete_job_background_and_orphan(sandbox: SandboxThread, apis: Any) -> None:
    batch, _core = apis
    batch.create_namespaced_job("default", job_body("bg", "sleep 60"))
    batch.create_namespaced_job("default", job_body("orph", "sleep 60"))
    wait_for(lambda: len(sandbox.objects("pods")) == 2, what="two pods")
    batch.delete_namespaced_job("bg", "default", propagation_policy="Background")
    assert sandbox.get_object("jobs", "default", "bg") is None
    batch.delete_namespaced_job("orph", "default", propagation_policy="Orphan")
    wait_for(lambda: len(sandbox.objects("pods")) == 1, what="bg's pod deleted by the garbage collector")
    (orphan,) = sandbox.objects("pods")
    assert orphan["metadata"]["labels"]["job-name"] == "orph"
    assert "ownerReferences" not in orphan["metadata"]


def test_on_failure_restarts_count_against_backoff_limit(sandbox: SandboxThread, apis: Any) -> None:
    batch, _core = apis
    batch.create_namespaced_job(
        "default", job_body("crash", "exit 1", backoffLimit=1, restart_policy="OnFailure")
    )
    job = wait_for(lambda: finished(sandbox, "crash"), what="the OnFailure job to fail")
    failed = condition(job, "Failed")
    assert failed and failed["reason"] == "BackoffLimitExceeded"


def test_suspending_a_running_job_stops_its_pods_without_failures(sandbox: SandboxThread, apis: Any) -> None:
    batch, _core = apis
    batch.create_namespaced_job("default", job_body("pause", "sleep 60", backoffLimit=0))
    wait_for(
        lambda: (sandbox.get_object("jobs", "default", "pause") or {}).get("status", {}).get("active") == 1,
        what="an active pod",
    )
    batch.patch_namespaced_job("pause", "default", {"spec": {"suspend": True}})
    wait_for(lambda: not sandbox.objects("pods"), what="the pod stopped and removed")
    job = sandbox.get_object("jobs", "default", "pause")
    assert condition(job, "Suspended") and not condition(job, "Failed")
    assert not job["status"].get("failed")  # type: ignore[index]


def test_events_of_a_job_and_its_pod(sandbox: SandboxThread, apis: Any) -> None:
    batch, core = apis
    batch.create_namespaced_job("default", job_body("ev", "echo hi"))
    wait_for(lambda: finished(sandbox, "ev"), what="job ev to complete")
    job_reasons = [
        e.reason for e in core.list_namespaced_event("default", field_selector="involvedObject.name=ev").items
    ]
    assert job_reasons[0] == "SuccessfulCreate" and "Completed" in job_reasons
    pod_name = core.list_namespaced_pod("default", label_selector="job-name=ev").items[0].metadata.name
    pod_events = core.list_namespaced_event(
        "default", field_selector=f"involvedObject.name={pod_name},involvedObject.kind=Pod"
    ).items
    assert [e.reason for e in pod_events] == ["Scheduled", "Pulled", "Created", "Started"]
    assert pod_events[0].source.component == "default-scheduler"
    assert pod_events[3].involved_object.field_path == "spec.containers{main}"


@pytest.mark.sandbox(history_window=3)
def test_events_do_not_shorten_pod_watch_history(sandbox: SandboxThread, apis: Any) -> None:
    batch, core = apis
    rv = core.list_namespaced_pod("default").metadata.resource_version
    batch.create_namespaced_job("default", job_body("quiet", "true"))
    wait_for(lambda: finished(sandbox, "quiet"), what="job quiet to complete")
    # Many events were recorded, but the pod's own changes (more than 3) are what count: the
    # window of 3 is exceeded by pod changes alone, so this watch is refused...
    with pytest.raises(ApiException) as err:
        for _ in watch.Watch().stream(
            core.list_namespaced_pod, "default", resource_version=rv, timeout_seconds=1
        ):
            pass
    assert err.value.status == 410
    # ...while a watch from the latest pod's revision replays without 410 despite later events.
    pod = core.list_namespaced_pod("default").items[0]
    events_before = len(core.list_namespaced_event("default").items)
    assert events_before > 3
    seen = list(
        watch.Watch().stream(
            core.list_namespaced_pod,
            "default",
            resource_version=pod.metadata.resource_version,
            timeout_seconds=1,
        )
    )
    assert all(e["type"] != "ERROR" for e in seen)
