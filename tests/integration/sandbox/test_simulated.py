"""Simulated pods: no host process, the same status a process pod reports, read over HTTP."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from airflow_jobwatch_testing.sandbox import SandboxThread
from airflow_jobwatch_testing.sandbox.simulated import (
    DURATION_ANNOTATION,
    EXIT_CODE_ANNOTATION,
    LOG_LINE,
    SIMULATE_ANNOTATION,
    Script,
    read_command,
)

from .helpers import condition, job_body, pod_body, wait_for


def simulated(body: dict[str, Any], **annotations: str) -> dict[str, Any]:
    body["metadata"]["annotations"] = {SIMULATE_ANNOTATION: "true", **annotations}
    return body


def read_pod(core: client.CoreV1Api, name: str) -> dict[str, Any]:
    return dict(core.api_client.sanitize_for_serialization(core.read_namespaced_pod(name, "default")))


def terminal(core: client.CoreV1Api, name: str) -> dict[str, Any] | None:
    pod = read_pod(core, name)
    return pod if pod["status"].get("phase") in ("Succeeded", "Failed") else None


def running(core: client.CoreV1Api, name: str) -> dict[str, Any] | None:
    pod = read_pod(core, name)
    return pod if condition(pod, "Ready") else None


def shape(pod: dict[str, Any]) -> dict[str, Any]:
    """The status fields a client decides on, with times and ids replaced by whether they are set."""
    status = pod["status"]
    cs = status["containerStatuses"][0]
    state_kind, state = next(iter(cs["state"].items()))
    return {
        "phase": status["phase"],
        "conditions": sorted((c["type"], c["status"], c.get("reason")) for c in status.get("conditions", [])),
        "startTime": bool(status.get("startTime")),
        "state": state_kind,
        "exitCode": state.get("exitCode"),
        "reason": state.get("reason"),
        "startedAt": bool(state.get("startedAt")),
        "finishedAt": bool(state.get("finishedAt")),
        "containerID": bool(cs.get("containerID") or state.get("containerID")),
        "ready": cs["ready"],
        "restartCount": cs["restartCount"],
        "nodeName": pod["spec"].get("nodeName"),
    }


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["sh", "-c", "sleep 30; exit 3"], Script(30, 3)),
        (["sh", "-c", "sleep 1.5 && exit 0"], Script(1.5, 0)),
        (["/bin/bash", "-c", "echo start; sleep 2; false"], Script(2, 1)),
        (["sleep", "7"], Script(7, 0)),
        (["true"], Script(0, 0)),
        (["false"], Script(0, 1)),
        (["python3", "-c", "import time, sys; time.sleep(4); sys.exit(2)"], Script(4, 2)),
        (["python", "-c", "print('x')"], None),
        (["sh", "-c", "curl http://example"], None),
        (["airflow", "tasks", "run"], None),
    ],
)
def test_command_shapes_are_read(argv: list[str], expected: Script | None) -> None:
    assert read_command(argv) == expected


@pytest.mark.parametrize(
    ("command", "phase", "code"), [("sleep 0.3; exit 0", "Succeeded", 0), ("sleep 0.3; exit 3", "Failed", 3)]
)
def test_simulated_status_matches_process_status(
    sandbox: SandboxThread, core: client.CoreV1Api, command: str, phase: str, code: int
) -> None:
    core.create_namespaced_pod("default", pod_body("proc", command))
    core.create_namespaced_pod("default", simulated(pod_body("sim", command)))
    for name in ("proc", "sim"):
        wait_for(lambda n=name: running(core, n), what=f"pod {name} Running and Ready")
    assert shape(read_pod(core, "sim")) == shape(read_pod(core, "proc"))
    proc = wait_for(lambda: terminal(core, "proc"), what="process pod to end")
    sim = wait_for(lambda: terminal(core, "sim"), what="simulated pod to end")
    assert shape(sim) == shape(proc)
    assert sim["status"]["phase"] == phase
    assert sim["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == code
    log = core.read_namespaced_pod_log("sim", "default", _preload_content=False).data
    assert log == LOG_LINE


@pytest.mark.sandbox(pod_start_delay=0.3)
def test_simulated_pod_goes_through_the_same_phases(sandbox: SandboxThread, core: client.CoreV1Api) -> None:
    from kubernetes import watch

    rv = core.list_namespaced_pod("default").metadata.resource_version
    core.create_namespaced_pod("default", pod_body("proc", "sleep 0.2"))
    core.create_namespaced_pod("default", simulated(pod_body("sim", "sleep 0.2")))
    for name in ("proc", "sim"):
        wait_for(lambda n=name: terminal(core, n), what=f"pod {name} to end")
    seen: dict[str, list[tuple[str, str | None]]] = {"proc": [], "sim": []}
    for ev in watch.Watch().stream(
        core.list_namespaced_pod, "default", resource_version=rv, timeout_seconds=1
    ):
        pod = ev["object"]
        cs = (pod.status.container_statuses or [None])[0]
        waiting = cs.state.waiting.reason if cs is not None and cs.state.waiting else None
        seen[pod.metadata.name].append((pod.status.phase, waiting))
    assert ("Pending", "ContainerCreating") in seen["sim"]
    assert seen["sim"] == seen["proc"]
    assert seen["sim"][-1] == ("Succeeded", None)


def test_annotations_set_duration_and_exit_code(sandbox: SandboxThread, core: client.CoreV1Api) -> None:
    body = simulated(
        pod_body("ann", "python -m some.unreadable"),
        **{DURATION_ANNOTATION: "0.2", EXIT_CODE_ANNOTATION: "7"},
    )
    core.create_namespaced_pod("default", body)
    pod = wait_for(lambda: terminal(core, "ann"), what="annotated pod to end")
    assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 7


def test_bad_annotation_is_a_start_error_naming_it(sandbox: SandboxThread, core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", simulated(pod_body("bad", "true"), **{DURATION_ANNOTATION: "soon"}))
    pod = wait_for(lambda: terminal(core, "bad"), what="pod with a bad annotation to fail")
    term = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert term["reason"] == "StartError" and DURATION_ANNOTATION in term["message"]


@pytest.mark.sandbox(simulated_namespaces=["default"], simulated_default_seconds=0.2)
def test_namespace_option_and_default_duration(sandbox: SandboxThread, core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", pod_body("unread", "airflow tasks run x"))
    pod = wait_for(lambda: terminal(core, "unread"), what="unreadable simulated pod to end after the default")
    assert pod["status"]["phase"] == "Succeeded"
    assert core.read_namespaced_pod_log("unread", "default", _preload_content=False).data == LOG_LINE


def test_graceful_delete_ends_like_a_process(sandbox: SandboxThread, core: client.CoreV1Api) -> None:
    from kubernetes import watch

    core.create_namespaced_pod("default", pod_body("proc", "sleep 300"))
    core.create_namespaced_pod("default", simulated(pod_body("sim", "sleep 300")))
    for name in ("proc", "sim"):
        wait_for(lambda n=name: running(core, n), what=f"pod {name} Running")
    rv = core.list_namespaced_pod("default").metadata.resource_version
    for name in ("proc", "sim"):
        core.delete_namespaced_pod(name, "default")
    for name in ("proc", "sim"):
        wait_for(lambda n=name: sandbox.get_object("pods", "default", n) is None, what=f"pod {name} deleted")
    last: dict[str, tuple[str, int | None]] = {}
    for ev in watch.Watch().stream(
        core.list_namespaced_pod, "default", resource_version=rv, timeout_seconds=1
    ):
        pod = ev["object"]
        term = pod.status.container_statuses[0].state.terminated
        last[pod.metadata.name] = (pod.status.phase, term.exit_code if term else None)
    assert last["sim"] == ("Failed", 143)
    assert last["sim"] == last["proc"]


def test_eviction_matches_process(sandbox: SandboxThread, core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", pod_body("proc", "sleep 300"))
    core.create_namespaced_pod("default", simulated(pod_body("sim", "sleep 300")))
    for name in ("proc", "sim"):
        wait_for(lambda n=name: running(core, n), what=f"pod {name} Running")
        sandbox.evict_pod("default", name)
    proc = wait_for(lambda: terminal(core, "proc"), what="process pod evicted")
    sim = wait_for(lambda: terminal(core, "sim"), what="simulated pod evicted")
    assert shape(sim) == shape(proc)
    assert sim["status"]["reason"] == proc["status"]["reason"] == "Evicted"
    assert condition(sim, "DisruptionTarget") is not None


def test_active_deadline_matches_process(sandbox: SandboxThread, core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", pod_body("proc", "sleep 300", activeDeadlineSeconds=1))
    core.create_namespaced_pod("default", simulated(pod_body("sim", "sleep 300", activeDeadlineSeconds=1)))
    proc = wait_for(lambda: terminal(core, "proc"), what="process pod past its deadline")
    sim = wait_for(lambda: terminal(core, "sim"), what="simulated pod past its deadline")
    assert sim["status"]["reason"] == proc["status"]["reason"] == "DeadlineExceeded"
    assert shape(sim)["phase"] == shape(proc)["phase"] == "Failed"


def _job(name: str, command: str, **spec: Any) -> dict[str, Any]:
    body = job_body(name, command, **spec)
    body["spec"]["template"]["metadata"] = {"annotations": {SIMULATE_ANNOTATION: "true"}}
    return body


def job_condition(sandbox: SandboxThread, name: str, type_: str) -> dict[str, Any] | None:
    return condition(sandbox.get_object("jobs", "default", name), type_)


def test_job_controller_on_simulated_pods(sandbox: SandboxThread, kubeconfig: Any) -> None:
    from kubernetes import config

    api = client.BatchV1Api(config.new_client_from_config(config_file=str(kubeconfig)))
    api.create_namespaced_job("default", _job("ok", "sleep 0.2; exit 0"))
    api.create_namespaced_job("default", _job("bad", "sleep 0.1; exit 2", backoffLimit=1))
    api.create_namespaced_job("default", _job("long", "sleep 300"))
    wait_for(lambda: job_condition(sandbox, "ok", "Complete"), what="Job ok Complete")
    failed = wait_for(lambda: job_condition(sandbox, "bad", "Failed"), what="Job bad Failed", timeout=40)
    assert failed["reason"] == "BackoffLimitExceeded"
    assert sandbox.get_object("jobs", "default", "bad")["status"]["failed"] == 2
    wait_for(
        lambda: (sandbox.get_object("jobs", "default", "long") or {}).get("status", {}).get("ready"),
        what="Job long ready",
    )
    core = client.CoreV1Api(api.api_client)
    pods = core.list_namespaced_pod("default", label_selector="job-name=long").items
    sandbox.evict_pod("default", pods[0].metadata.name)
    wait_for(
        lambda: (sandbox.get_object("jobs", "default", "long") or {}).get("status", {}).get("failed"),
        what="evicted pod counted as failed",
    )
    api.delete_namespaced_job("long", "default", propagation_policy="Foreground")
    wait_for(lambda: sandbox.get_object("jobs", "default", "long") is None, what="Job long deleted")
    assert not core.list_namespaced_pod("default", label_selector="job-name=long").items
    api.api_client.close()
