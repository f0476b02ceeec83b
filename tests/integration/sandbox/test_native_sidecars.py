"""Native sidecars in the sandbox kubelet and Job controller, as Kubernetes 1.29+ runs them
(KEP-753): an init container with ``restartPolicy: Always`` starts in its turn, runs beside the main
containers, is restarted when it exits, is stopped once they have ended, and decides neither the pod's
phase nor the Job's completion; its log is served. A sandbox told to act as an older cluster drops the
field, as such an API server does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubernetes import client, config, watch

from airflow_jobwatch_testing.sandbox import SandboxThread

from .helpers import condition, job_body, pod_body, wait_for


def _sidecar(name: str, script: str) -> dict[str, Any]:
    return {"name": name, "image": "busybox:1.36", "restartPolicy": "Always", "command": ["sh", "-c", script]}


def _terminal(sandbox: SandboxThread, name: str) -> dict[str, Any] | None:
    pod = sandbox.get_object("pods", "default", name)
    return pod if pod and pod["status"].get("phase") in ("Succeeded", "Failed") else None


#: Runs until SIGTERM, then says so and exits 0 (the trap runs between two short sleeps).
_UNTIL_TERM = (
    "trap 'echo stopped >> {log}; exit 0' TERM; echo side-started >> {log}; while :; do sleep 0.05; done"
)


def test_a_sidecar_starts_first_runs_beside_the_main_container_and_is_stopped_after_it(
    sandbox: SandboxThread, core: client.CoreV1Api, tmp_path: Path
) -> None:
    order = tmp_path / "order"
    setup = {"name": "setup", "image": "busybox:1.36", "command": ["sh", "-c", f"echo setup >> {order}"]}
    helper = _sidecar("helper", _UNTIL_TERM.format(log=order))
    body = pod_body("side", f"sleep 0.3; echo main >> {order}", initContainers=[setup, helper])
    rv = core.list_namespaced_pod("default").metadata.resource_version
    core.create_namespaced_pod("default", body)
    pod = wait_for(lambda: _terminal(sandbox, "side"), what="the pod to end")

    assert order.read_text().splitlines() == ["setup", "side-started", "main", "stopped"]
    assert pod["status"]["phase"] == "Succeeded"
    setup, helper = pod["status"]["initContainerStatuses"]
    assert setup["state"]["terminated"]["exitCode"] == 0
    assert helper["name"] == "helper" and helper["state"]["terminated"]["exitCode"] == 0
    assert helper["restartCount"] == 0 and helper["started"] is False and helper["ready"] is False

    # What the watch showed on the way: the sidecar running and ready beside the main container, then
    # the pod still Running with the main container ended while the sidecar was being stopped.
    seen: list[tuple[str, str, str]] = []
    for event in watch.Watch().stream(
        core.list_namespaced_pod,
        "default",
        resource_version=rv,
        field_selector="metadata.name=side",
        timeout_seconds=2,
    ):
        status = event["object"].status
        main = next(iter(status.container_statuses or []), None)
        side = [c for c in status.init_container_statuses or [] if c.name == "helper"]
        if main is None or not side:
            continue
        main_state = "running" if main.state.running else "terminated" if main.state.terminated else "waiting"
        side_state = (
            "running" if side[0].state.running else "terminated" if side[0].state.terminated else "waiting"
        )
        seen.append((status.phase, main_state, side_state))
    assert ("Running", "running", "running") in seen, seen
    assert ("Running", "terminated", "running") in seen, seen
    assert seen[-1] == ("Succeeded", "terminated", "terminated"), seen


def test_a_sidecar_whose_child_outlives_its_stop_ends_with_its_shell(
    sandbox: SandboxThread, core: client.CoreV1Api
) -> None:
    # A sidecar stopped while it starts a background child (the SIGTERM sent just before the child was
    # forked, so the child never got it) exits on its trap and leaves the child holding its output. In
    # Kubernetes the sidecar container ends with its shell, and the pod with it, long before the grace
    # period; the sandbox used to keep both running.
    side = _sidecar(
        "helper", "trap 'echo bye; exit 0' TERM; (trap '' TERM; exec sleep 600) & echo hello; wait"
    )
    core.create_namespaced_pod("default", pod_body("left", "sleep 0.3", initContainers=[side], grace=60))
    pod = wait_for(lambda: _terminal(sandbox, "left"), what="the pod to end well within its 60 s grace")

    assert pod["status"]["phase"] == "Succeeded"
    (helper,) = pod["status"]["initContainerStatuses"]
    assert helper["state"]["terminated"]["exitCode"] == 0, helper
    log = core.read_namespaced_pod_log("left", "default", container="helper", _preload_content=False)
    lines = log.data.decode().splitlines()
    assert (lines[0], lines[-1]) == ("hello", "bye"), lines


def test_a_sidecar_that_exits_is_restarted_and_decides_nothing(
    sandbox: SandboxThread, core: client.CoreV1Api, tmp_path: Path
) -> None:
    marker = tmp_path / "sidecar-runs"
    body = pod_body(
        "restarts", f"while [ $(wc -l < {marker} 2>/dev/null || echo 0) -lt 2 ]; do sleep 0.1; done"
    )
    body["spec"]["initContainers"] = [_sidecar("flaky", f"echo run | tee -a {marker}; exit 7")]
    core.create_namespaced_pod("default", body)
    pod = wait_for(lambda: _terminal(sandbox, "restarts"), what="the pod to end", timeout=60)
    assert pod["status"]["phase"] == "Succeeded"  # the sidecar's exit code 7 decides nothing
    (flaky,) = pod["status"]["initContainerStatuses"]
    assert flaky["restartCount"] >= 1
    log = core.read_namespaced_pod_log("restarts", "default", container="flaky", _preload_content=False)
    assert log.data == b"run\n"  # its current run's log


def test_a_jobs_pods_with_a_sidecar_complete_the_job(
    sandbox: SandboxThread, kubeconfig: Path, tmp_path: Path
) -> None:
    batch = client.BatchV1Api(config.new_client_from_config(config_file=str(kubeconfig)))
    body = job_body("with-sidecar", "echo work", completions=2, parallelism=2)
    body["spec"]["template"]["spec"]["initContainers"] = [
        _sidecar("helper", "trap 'echo bye; exit 0' TERM; echo hello; while :; do sleep 0.05; done")
    ]
    batch.create_namespaced_job("default", body)
    job = wait_for(
        lambda: (
            condition(sandbox.get_object("jobs", "default", "with-sidecar"), "Complete")
            and sandbox.get_object("jobs", "default", "with-sidecar")
        ),
        what="the Job to complete",
        timeout=60,
    )
    assert job["status"]["succeeded"] == 2
    core = client.CoreV1Api(batch.api_client)
    for pod in core.list_namespaced_pod("default", label_selector="job-name=with-sidecar").items:
        log = core.read_namespaced_pod_log(
            pod.metadata.name, "default", container="helper", _preload_content=False
        )
        # (the sandbox signals the container's whole process group, so the shell may report its
        # killed sleep as "Terminated" in between)
        lines = log.data.decode().splitlines()
        assert (lines[0], lines[-1]) == ("hello", "bye")


def test_an_older_cluster_drops_the_sidecars_restart_policy(
    sandbox: SandboxThread, core: client.CoreV1Api, kubeconfig: Path
) -> None:
    sandbox.set_native_sidecars(False)
    body = pod_body("old", "true")
    body["spec"]["initContainers"] = [_sidecar("helper", "true")]
    created = core.create_namespaced_pod("default", body)
    assert created.spec.init_containers[0].restart_policy is None
    batch = client.BatchV1Api(core.api_client)
    job = job_body("old-job", "true")
    job["spec"]["template"]["spec"]["initContainers"] = [_sidecar("helper", "true")]
    created_job = batch.create_namespaced_job("default", job)
    assert created_job.spec.template.spec.init_containers[0].restart_policy is None
    # without the field it is an ordinary init container: run to completion, before the main one
    pod = wait_for(lambda: _terminal(sandbox, "old"), what="the pod to end")
    assert pod["status"]["phase"] == "Succeeded"
