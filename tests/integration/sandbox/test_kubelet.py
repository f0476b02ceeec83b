"""The sandbox kubelet: pods run as local processes and report status like a real kubelet."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from airflow_jobwatch_testing.sandbox import SandboxThread

from .helpers import pod_body, wait_for


def phase_of(sandbox: SandboxThread, name: str) -> str | None:
    pod = sandbox.get_object("pods", "default", name)
    return pod["status"].get("phase") if pod else None


def terminal(sandbox: SandboxThread, name: str) -> dict[str, Any] | None:
    pod = sandbox.get_object("pods", "default", name)
    if pod and pod["status"].get("phase") in ("Succeeded", "Failed"):
        return pod
    return None


def test_pod_succeeds_with_realistic_status(sandbox: SandboxThread, core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", pod_body("ok", "echo hello; echo oops >&2"))
    pod = wait_for(lambda: terminal(sandbox, "ok"), what="pod ok to finish")
    assert pod["status"]["phase"] == "Succeeded"
    assert pod["spec"]["nodeName"]
    term = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert term["exitCode"] == 0 and term["reason"] == "Completed"
    assert term["containerID"] and term["startedAt"] and term["finishedAt"]
    conds = {c["type"]: c for c in pod["status"]["conditions"]}
    assert conds["PodScheduled"]["status"] == "True"
    assert conds["Ready"]["status"] == "False" and conds["Ready"]["reason"] == "PodCompleted"
    assert core.read_namespaced_pod_log("ok", "default", _preload_content=False).data == b"hello\noops\n"


def test_a_container_ends_with_its_process_though_a_child_holds_its_output(
    sandbox: SandboxThread, core: client.CoreV1Api
) -> None:
    # In Kubernetes a container ends when its first process exits: the kernel kills the rest of its PID
    # namespace. A child left running in the background (here one that ignores SIGTERM) must neither keep
    # the container running nor outlive it, though it holds the container's output open.
    script = "(trap '' TERM; exec sleep 600) & echo started"
    core.create_namespaced_pod("default", pod_body("orphan", script))
    pod = wait_for(lambda: terminal(sandbox, "orphan"), what="the pod to end with its shell")
    assert pod["status"]["phase"] == "Succeeded"
    assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
    log = core.read_namespaced_pod_log("orphan", "default", _preload_content=False)
    assert log.data == b"started\n"


def test_pod_fails_with_exit_code(sandbox: SandboxThread, core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", pod_body("bad", "exit 3"))
    pod = wait_for(lambda: terminal(sandbox, "bad"), what="pod bad to finish")
    assert pod["status"]["phase"] == "Failed"
    term = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert term["exitCode"] == 3 and term["reason"] == "Error"


def test_pod_goes_pending_running_succeeded_in_watch_order(
    sandbox: SandboxThread, core: client.CoreV1Api
) -> None:
    from kubernetes import watch

    rv = core.list_namespaced_pod("default").metadata.resource_version
    core.create_namespaced_pod("default", pod_body("seq", "sleep 0.2"))
    wait_for(lambda: terminal(sandbox, "seq"), what="pod seq to finish")
    phases = [
        e["object"].status.phase
        for e in watch.Watch().stream(
            core.list_namespaced_pod, "default", resource_version=rv, timeout_seconds=1
        )
    ]
    assert phases[0] == "Pending"
    assert "Running" in phases
    assert phases[-1] == "Succeeded"
    assert phases.index("Running") < phases.index("Succeeded")


def test_command_not_found_is_start_error(sandbox: SandboxThread, core: client.CoreV1Api) -> None:
    containers = [{"name": "main", "image": "x", "command": ["/no/such/binary"]}]
    core.create_namespaced_pod("default", pod_body("nocmd", containers=containers))
    pod = wait_for(lambda: terminal(sandbox, "nocmd"), what="pod nocmd to fail")
    term = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert pod["status"]["phase"] == "Failed"
    assert term["exitCode"] == 128 and term["reason"] == "StartError"
    assert "/no/such/binary" in term["message"]


def test_python_in_pod_uses_our_interpreter_and_env(sandbox: SandboxThread, core: client.CoreV1Api) -> None:
    containers = [
        {
            "name": "main",
            "image": "python",
            "command": [
                "python",
                "-c",
                "import os, sys; print(sys.executable); print(os.environ['GREETING'])",
            ],
            "env": [{"name": "GREETING", "value": "hi"}],
        }
    ]
    core.create_namespaced_pod("default", pod_body("py", containers=containers))
    wait_for(lambda: terminal(sandbox, "py"), what="pod py to finish")
    out = core.read_namespaced_pod_log("py", "default", _preload_content=False).data.decode().split()
    assert Path(out[0]).parent == Path(sys.executable).parent
    assert out[1] == "hi"


def test_on_failure_restarts_in_place(sandbox: SandboxThread, core: client.CoreV1Api, tmp_path: Path) -> None:
    marker = tmp_path / "attempts"
    command = f"echo x >> {marker}; [ $(wc -l < {marker}) -ge 2 ]"
    core.create_namespaced_pod("default", pod_body("retry", command, restart_policy="OnFailure"))
    pod = wait_for(lambda: terminal(sandbox, "retry"), what="pod retry to succeed after a restart")
    status = pod["status"]["containerStatuses"][0]
    assert pod["status"]["phase"] == "Succeeded"
    assert status["restartCount"] == 1
    assert status["lastState"]["terminated"]["exitCode"] == 1


def test_graceful_delete_sigterm_then_gone(sandbox: SandboxThread, core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", pod_body("long", "sleep 60"))
    wait_for(lambda: phase_of(sandbox, "long") == "Running", what="pod long to run")
    deleted = core.delete_namespaced_pod("long", "default")
    assert deleted.metadata.deletion_timestamp is not None
    assert deleted.metadata.deletion_grace_period_seconds == 2
    wait_for(lambda: sandbox.get_object("pods", "default", "long") is None, what="pod long to be removed")


def test_pod_active_deadline(sandbox: SandboxThread, core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", pod_body("dl", "sleep 60", activeDeadlineSeconds=1))
    pod = wait_for(lambda: terminal(sandbox, "dl"), what="pod dl to hit its deadline")
    assert pod["status"]["phase"] == "Failed"
    assert pod["status"]["reason"] == "DeadlineExceeded"


def test_a_deadline_patched_on_a_pending_pod_stops_it_and_keeps_the_object(
    sandbox: SandboxThread, core: client.CoreV1Api
) -> None:
    # The kubelet reads spec.activeDeadlineSeconds at every sync, measured from status.startTime: a deadline
    # set later on a pod stuck Pending (its image cannot be pulled) fails it, and the object stays.
    containers = [{"name": "main", "image": "registry.invalid/never:1", "command": ["true"]}]
    core.create_namespaced_pod("default", pod_body("stuck", containers=containers))

    def waiting_reason() -> str | None:
        pod = sandbox.get_object("pods", "default", "stuck") or {}
        statuses = (pod.get("status") or {}).get("containerStatuses") or [{}]
        return ((statuses[0].get("state") or {}).get("waiting") or {}).get("reason")

    wait_for(lambda: waiting_reason() == "ErrImagePull", what="the pod to fail pulling its image")
    core.patch_namespaced_pod("stuck", "default", {"spec": {"activeDeadlineSeconds": 1}})
    pod = wait_for(lambda: terminal(sandbox, "stuck"), what="the patched deadline to stop the pod")
    assert (pod["status"]["phase"], pod["status"]["reason"]) == ("Failed", "DeadlineExceeded")
    assert pod["spec"]["activeDeadlineSeconds"] == 1
    assert sandbox.get_object("pods", "default", "stuck") is not None


def test_a_deadline_patched_on_a_running_pod_counts_from_its_start(
    sandbox: SandboxThread, core: client.CoreV1Api
) -> None:
    core.create_namespaced_pod("default", pod_body("late", "sleep 60"))
    wait_for(lambda: phase_of(sandbox, "late") == "Running", what="pod late to run")
    core.patch_namespaced_pod("late", "default", {"spec": {"activeDeadlineSeconds": 1}})
    pod = wait_for(lambda: terminal(sandbox, "late"), what="the patched deadline to stop the pod")
    assert (pod["status"]["phase"], pod["status"]["reason"]) == ("Failed", "DeadlineExceeded")


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        (
            {"spec": {"activeDeadlineSeconds": 31}},
            "Invalid value: 31: must be less than or equal to previous value",
        ),
        (
            {"spec": {"activeDeadlineSeconds": None}},
            'Invalid value: "null": must not update from a positive integer to nil value',
        ),
    ],
    ids=["increase", "removal"],
)
def test_a_set_deadline_may_only_be_lowered(
    sandbox: SandboxThread, core: client.CoreV1Api, patch: dict[str, Any], message: str
) -> None:
    core.create_namespaced_pod("default", pod_body("bounded", "sleep 60", activeDeadlineSeconds=30))
    with pytest.raises(ApiException) as refused:
        core.patch_namespaced_pod("bounded", "default", patch)
    assert refused.value.status == 422
    assert f"spec.activeDeadlineSeconds: {message}" in json.loads(refused.value.body)["message"]
    assert sandbox.get_object("pods", "default", "bounded")["spec"]["activeDeadlineSeconds"] == 30
    lowered = core.patch_namespaced_pod("bounded", "default", {"spec": {"activeDeadlineSeconds": 20}})
    assert lowered.spec.active_deadline_seconds == 20


def test_logs_need_container_name_when_ambiguous(sandbox: SandboxThread, core: client.CoreV1Api) -> None:
    containers = [
        {"name": "a", "image": "x", "command": ["sh", "-c", "echo from-a"]},
        {"name": "b", "image": "x", "command": ["sh", "-c", "echo from-b"]},
    ]
    core.create_namespaced_pod("default", pod_body("two", containers=containers))
    wait_for(lambda: terminal(sandbox, "two"), what="pod two to finish")
    with pytest.raises(ApiException) as err:
        core.read_namespaced_pod_log("two", "default")
    assert err.value.status == 400
    assert "a container name must be specified for pod two, choose one of: [a b]" in err.value.body
    assert (
        core.read_namespaced_pod_log("two", "default", container="b", _preload_content=False).data
        == b"from-b\n"
    )


def test_log_follow_and_tail(sandbox: SandboxThread, core: client.CoreV1Api) -> None:
    core.create_namespaced_pod(
        "default", pod_body("chatty", "for i in 1 2 3 4; do echo line$i; sleep 0.1; done")
    )
    wait_for(lambda: phase_of(sandbox, "chatty") in ("Running", "Succeeded"), what="pod chatty to start")
    followed = core.read_namespaced_pod_log("chatty", "default", follow=True, _preload_content=False).data
    assert followed == b"line1\nline2\nline3\nline4\n"
    tail = core.read_namespaced_pod_log("chatty", "default", tail_lines=2, _preload_content=False).data
    assert tail == b"line3\nline4\n"


@pytest.mark.sandbox(pod_start_delay=0.5)
def test_pod_start_delay_shows_container_creating(sandbox: SandboxThread, core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", pod_body("slowstart", "true"))

    def waiting_reason() -> str | None:
        pod = sandbox.get_object("pods", "default", "slowstart") or {}
        for cs in pod.get("status", {}).get("containerStatuses") or []:
            return cs["state"].get("waiting", {}).get("reason")
        return None

    assert wait_for(waiting_reason, what="a waiting container") == "ContainerCreating"
    assert phase_of(sandbox, "slowstart") == "Pending"
    wait_for(lambda: terminal(sandbox, "slowstart"), what="the pod to finish after the delay")


def test_termination_message_from_host_path(
    sandbox: SandboxThread, core: client.CoreV1Api, tmp_path: Path
) -> None:
    message_file = tmp_path / "termination-log"
    containers = [
        {
            "name": "main",
            "image": "x",
            "command": ["sh", "-c", f"echo 'result: 42' > {message_file}; exit 5"],
            "terminationMessagePath": str(message_file),
        }
    ]
    core.create_namespaced_pod("default", pod_body("msg", containers=containers))
    pod = wait_for(lambda: terminal(sandbox, "msg"), what="pod msg to finish")
    term = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert term["message"] == "result: 42\n" and term["exitCode"] == 5


@pytest.mark.parametrize(
    ("container", "reason", "message"),
    [
        ({"image": "Not A Valid/Image"}, "InvalidImageName", "invalid reference format"),
        (
            {
                "image": "busybox:1.36",
                "env": [{"name": "PW", "valueFrom": {"secretKeyRef": {"name": "db", "key": "pw"}}}],
            },
            "CreateContainerConfigError",
            'secret "db" not found',
        ),
        (
            {"image": "busybox:1.36", "envFrom": [{"configMapRef": {"name": "settings"}}]},
            "CreateContainerConfigError",
            'configmap "settings" not found',
        ),
    ],
)
def test_containers_that_cannot_be_created_stay_waiting(
    sandbox: SandboxThread, core: client.CoreV1Api, container: dict[str, Any], reason: str, message: str
) -> None:
    containers = [{"name": "main", "command": ["true"], **container}]
    core.create_namespaced_pod("default", pod_body("cfg", containers=containers))

    def waiting() -> dict[str, Any] | None:
        pod = sandbox.get_object("pods", "default", "cfg") or {}
        for cs in pod.get("status", {}).get("containerStatuses") or []:
            return cs["state"].get("waiting")
        return None

    state = wait_for(waiting, what=f"the container to wait with {reason}")
    assert state["reason"] == reason and message in state["message"]
    assert phase_of(sandbox, "cfg") == "Pending"
    core.delete_namespaced_pod("cfg", "default")
    wait_for(lambda: sandbox.get_object("pods", "default", "cfg") is None, what="the pod to be deleted")


def test_init_containers_run_first(sandbox: SandboxThread, core: client.CoreV1Api, tmp_path: Path) -> None:
    marker = tmp_path / "order"
    body = pod_body("init", f"echo main >> {marker}")
    body["spec"]["initContainers"] = [
        {"name": "setup", "image": "busybox:1.36", "command": ["sh", "-c", f"echo setup >> {marker}"]}
    ]
    core.create_namespaced_pod("default", body)
    pod = wait_for(lambda: terminal(sandbox, "init"), what="pod init to finish")
    assert pod["status"]["phase"] == "Succeeded"
    assert marker.read_text() == "setup\nmain\n"
    init_status = pod["status"]["initContainerStatuses"][0]
    assert init_status["state"]["terminated"]["exitCode"] == 0 and init_status["ready"] is True
    assert (
        core.read_namespaced_pod_log("init", "default", container="setup", _preload_content=False).data == b""
    )


def test_failed_init_container_fails_the_pod(
    sandbox: SandboxThread, core: client.CoreV1Api, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    body = pod_body("badinit", f"touch {marker}")
    body["spec"]["initContainers"] = [
        {"name": "setup", "image": "busybox:1.36", "command": ["sh", "-c", "exit 4"]}
    ]
    core.create_namespaced_pod("default", body)
    pod = wait_for(lambda: terminal(sandbox, "badinit"), what="pod badinit to fail")
    assert pod["status"]["phase"] == "Failed"
    assert pod["status"]["initContainerStatuses"][0]["state"]["terminated"]["exitCode"] == 4
    assert pod["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "PodInitializing"
    initialized = next(c for c in pod["status"]["conditions"] if c["type"] == "Initialized")
    assert initialized["status"] == "False" and initialized["reason"] == "ContainersNotInitialized"
    assert not marker.exists()
