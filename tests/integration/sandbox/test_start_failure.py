"""A container that fails to start on demand (annotation ``sandbox.jobwatch.io/start-failure``), read over
HTTP with the official client: the container runtime's status shape for each reason, restartPolicy, a
simulated pod, one container of several, and bad values reported in the pod's status."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from airflow_jobwatch_testing.sandbox import SandboxThread
from airflow_jobwatch_testing.sandbox.kubelet import START_FAILURE_ANNOTATION
from airflow_jobwatch_testing.sandbox.simulated import SIMULATE_ANNOTATION

from .helpers import pod_body, wait_for

EPOCH = "1970-01-01T00:00:00Z"


def raw_pod(core: client.CoreV1Api, name: str) -> dict[str, Any]:
    """The pod exactly as the server sent it (timestamps as strings, not parsed by the client)."""
    resp = core.read_namespaced_pod(name, "default", _preload_content=False)
    return dict(json.loads(resp.data))


def terminal(core: client.CoreV1Api, name: str) -> dict[str, Any] | None:
    pod = raw_pod(core, name)
    return pod if pod["status"].get("phase") in ("Succeeded", "Failed") else None


def events(core: client.CoreV1Api, name: str) -> list[tuple[str, str, str]]:
    return [
        (e.type, e.reason, e.message)
        for e in core.list_namespaced_event("default", field_selector=f"involvedObject.name={name}").items
    ]


def annotated(body: dict[str, Any], value: str, **more: str) -> dict[str, Any]:
    body["metadata"]["annotations"] = {START_FAILURE_ANNOTATION: value, **more}
    return body


def failed_start(
    core: client.CoreV1Api, name: str, value: str, ran: Path
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Create pod ``name`` annotated ``value``, whose command would create ``ran``; once it ended, the pod
    and its first container's ``terminated`` state."""
    core.create_namespaced_pod("default", annotated(pod_body(name, f"touch {ran}"), value))
    pod = wait_for(lambda: terminal(core, name), what=f"pod {name} (start-failure {value!r}) to end")
    return pod, pod["status"]["containerStatuses"][0]["state"]["terminated"]


@pytest.mark.parametrize("reason", ["StartError", "ContainerCannotRun"])
def test_the_container_fails_to_start_with_the_runtimes_status(
    sandbox: SandboxThread, core: client.CoreV1Api, tmp_path: Path, reason: str
) -> None:
    ran = tmp_path / "ran"
    pod, term = failed_start(core, "nostart", reason, ran)
    assert pod["status"]["phase"] == "Failed"
    status = pod["status"]["containerStatuses"][0]
    assert term["exitCode"] == 128 and term["reason"] == reason
    assert START_FAILURE_ANNOTATION in term["message"] and term["message"].endswith(": unknown")
    assert term["containerID"] and term["finishedAt"]
    assert status["restartCount"] == 0 and status["started"] is False and status["ready"] is False
    if reason == "StartError":
        # containerd / CRI-O: the zero start time.
        assert term["startedAt"] == EPOCH and term["finishedAt"] != EPOCH
        assert term["message"].startswith("failed to create containerd task: ")
    else:
        # dockershim: started and finished both at the container's creation time.
        assert term["startedAt"] == term["finishedAt"] != EPOCH
        assert term["message"].startswith("OCI runtime create failed: ")
    assert not ran.exists(), "the container's command ran"
    failed = [e for e in events(core, "nostart") if e[1] == "Failed"]
    assert failed and failed[0][0] == "Warning", events(core, "nostart")
    if reason == "StartError":
        assert failed[0][2] == f"Error: {term['message']}"
    else:
        assert failed[0][2].startswith('Error: failed to start container "')
        assert failed[0][2].endswith(f"Error response from daemon: {term['message']}")
    assert "Started" not in [e[1] for e in events(core, "nostart")]


def test_on_failure_restarts_and_fails_again(
    sandbox: SandboxThread, core: client.CoreV1Api, tmp_path: Path
) -> None:
    ran = tmp_path / "ran"
    body = annotated(pod_body("loop", f"touch {ran}", restart_policy="OnFailure"), "StartError")
    core.create_namespaced_pod("default", body)

    def restarted() -> dict[str, Any] | None:
        status = raw_pod(core, "loop")["status"].get("containerStatuses") or [{}]
        return status[0] if status[0].get("restartCount", 0) >= 1 else None

    status = wait_for(restarted, what="the container to be restarted after its start failure")
    assert status["lastState"]["terminated"]["reason"] == "StartError"
    assert status["lastState"]["terminated"]["exitCode"] == 128
    pod = raw_pod(core, "loop")
    assert pod["status"]["phase"] not in ("Succeeded", "Failed"), "OnFailure keeps restarting it"
    assert not ran.exists()
    core.delete_namespaced_pod("loop", "default", grace_period_seconds=0)


def test_one_named_container_fails_the_others_run(
    sandbox: SandboxThread, core: client.CoreV1Api, tmp_path: Path
) -> None:
    ran = tmp_path / "main-ran"
    containers = [
        {"name": "main", "image": "busybox:1.36", "command": ["sh", "-c", f"touch {ran}"]},
        {"name": "side", "image": "busybox:1.36", "command": ["sh", "-c", "true"]},
    ]
    core.create_namespaced_pod(
        "default", annotated(pod_body("pair", containers=containers), "ContainerCannotRun:side")
    )
    pod = wait_for(lambda: terminal(core, "pair"), what="the pod with one container that cannot start")
    by_name = {s["name"]: s["state"]["terminated"] for s in pod["status"]["containerStatuses"]}
    assert pod["status"]["phase"] == "Failed"
    assert (by_name["main"]["reason"], by_name["main"]["exitCode"]) == ("Completed", 0)
    assert (by_name["side"]["reason"], by_name["side"]["exitCode"]) == ("ContainerCannotRun", 128)
    assert ran.exists()


def test_a_simulated_pod_fails_to_start_too(sandbox: SandboxThread, core: client.CoreV1Api) -> None:
    body = annotated(pod_body("sim", "sleep 30"), "StartError", **{SIMULATE_ANNOTATION: "true"})
    core.create_namespaced_pod("default", body)
    pod = wait_for(lambda: terminal(core, "sim"), what="the simulated pod that cannot start to fail")
    term = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert pod["status"]["phase"] == "Failed"
    assert (term["reason"], term["exitCode"], term["startedAt"]) == ("StartError", 128, EPOCH)
    assert START_FAILURE_ANNOTATION in term["message"]


@pytest.mark.parametrize(
    "value", ["Crash", "starterror", "StartError:nosuch"], ids=["unknown", "case", "no-such-container"]
)
def test_a_bad_value_is_reported_in_the_pods_status(
    sandbox: SandboxThread, core: client.CoreV1Api, tmp_path: Path, value: str
) -> None:
    ran = tmp_path / "ran"
    _, term = failed_start(core, "bad", value, ran)
    assert (term["reason"], term["exitCode"]) == ("StartError", 128)
    message = term["message"]
    assert f"{START_FAILURE_ANNOTATION}={value!r}" in message, message
    assert "expected StartError or ContainerCannotRun" in message and "(main)" in message, message
    assert not ran.exists()
    assert any(e[1] == "Failed" and START_FAILURE_ANNOTATION in e[2] for e in events(core, "bad"))
