"""Each fault of the sandbox, seen through the official ``kubernetes`` client over HTTP."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import pytest
import urllib3
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from airflow_jobwatch_testing.sandbox import SandboxThread

from .helpers import condition, job_body, pod_body, wait_for


class WatchThread(threading.Thread):
    """Runs one watch request in the background and records what happened to it."""

    def __init__(self, core: client.CoreV1Api, **kwargs: Any) -> None:
        super().__init__(daemon=True)
        self.core = core
        self.kwargs = kwargs
        self.events: list[tuple[str, str]] = []
        self.error: BaseException | None = None
        self.ended = threading.Event()

    def run(self) -> None:
        try:
            for event in watch.Watch().stream(self.core.list_namespaced_pod, "default", **self.kwargs):
                self.events.append((event["type"], event["object"].metadata.name))
        except BaseException as exc:  # recorded for the test to assert on
            self.error = exc
        finally:
            self.ended.set()


@pytest.mark.sandbox(kubelet=False, job_controller=False)
def test_drop_watches_breaks_open_streams(sandbox: SandboxThread, core: client.CoreV1Api) -> None:
    w = WatchThread(core, resource_version="0", timeout_seconds=60)
    w.start()
    wait_for(lambda: sandbox.counters().get("watch pods") == 1, what="the watch to be open")
    wait_for(lambda: sandbox.drop_watches() == 0 or w.ended.is_set(), what="the watch to be dropped")
    assert w.ended.wait(10)
    assert w.error is not None  # the connection broke mid-stream (not a clean end)


@pytest.mark.sandbox(kubelet=False, job_controller=False)
def test_stall_watches_sends_nothing(sandbox: SandboxThread, core: client.CoreV1Api) -> None:
    w = WatchThread(core, resource_version="0", timeout_seconds=1, _request_timeout=(5, 0.5))
    sandbox.stall_watches(True)
    w.start()
    wait_for(lambda: sandbox.counters().get("watch pods", 0) >= 1, what="the watch request")
    core.create_namespaced_pod("default", pod_body("unseen"))
    assert w.ended.wait(15)
    # timeoutSeconds=1 never ended the stream: only the client's read timeout did.
    assert isinstance(w.error, urllib3.exceptions.HTTPError) and "Read timed out" in str(w.error)
    assert w.events == []
    sandbox.stall_watches(False)
    names = [
        e["object"].metadata.name
        for e in watch.Watch().stream(
            core.list_namespaced_pod, "default", resource_version="0", timeout_seconds=1
        )
    ]
    assert names == ["unseen"]


@pytest.mark.sandbox(kubelet=False, job_controller=False)
def test_watch_expired_fault(sandbox: SandboxThread, core: client.CoreV1Api) -> None:
    rv = core.list_namespaced_pod("default").metadata.resource_version
    sandbox.set_watch_expired(True)
    with pytest.raises(ApiException) as err:
        for _ in watch.Watch().stream(
            core.list_namespaced_pod, "default", resource_version=rv, timeout_seconds=1
        ):
            pass
    assert err.value.status == 410
    # resourceVersion "0" still works: a server that forgot everything can still list.
    list(watch.Watch().stream(core.list_namespaced_pod, "default", resource_version="0", timeout_seconds=1))
    sandbox.set_watch_expired(False)
    list(watch.Watch().stream(core.list_namespaced_pod, "default", resource_version=rv, timeout_seconds=1))
    # The one watch answered 410 is counted as such (the client may have retried it once itself).
    assert sandbox.counters().get("expired watch pods", 0) >= 1
    assert "expired watch jobs" not in sandbox.counters()


@pytest.mark.sandbox(kubelet=False, job_controller=False)
def test_error_rate_with_retry_after_and_verbs(sandbox: SandboxThread, core: client.CoreV1Api) -> None:
    sandbox.set_error_rate(1.0, status=429, retry_after=1, verbs={"list"})
    with pytest.raises(ApiException) as err:
        core.list_namespaced_pod("default")
    assert err.value.status == 429
    assert err.value.headers["Retry-After"] == "1"
    assert '"reason":"TooManyRequests"' in err.value.body
    core.create_namespaced_pod("default", pod_body("fine"))  # other verbs are not affected
    sandbox.set_error_rate(1.0, status=500)
    with pytest.raises(ApiException) as err500:
        core.read_namespaced_pod("fine", "default")
    assert err500.value.status == 500 and '"reason":"InternalError"' in err500.value.body
    sandbox.set_error_rate(0.0)
    assert core.read_namespaced_pod("fine", "default").metadata.name == "fine"
    counters = sandbox.counters()
    # urllib3 retried the 429 (it honours Retry-After); each attempt reached the server.
    assert counters["list pods"] >= 1 and counters["create pods"] == 1 and counters["get pods"] >= 2


@pytest.mark.sandbox(kubelet=False, job_controller=False)
def test_outage_refuses_connections_then_same_port(sandbox: SandboxThread, core: client.CoreV1Api) -> None:
    port = sandbox.port
    sandbox.start_outage()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    sandbox.end_outage()
    assert sandbox.port == port
    assert core.list_namespaced_pod("default").items == []
    sandbox.outage(0.5)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    wait_for(lambda: _can_connect(port), what="the outage to end by itself")


def _can_connect(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


@pytest.mark.sandbox(kubelet=False, job_controller=False)
def test_outage_cuts_open_watches(sandbox: SandboxThread, core: client.CoreV1Api) -> None:
    w = WatchThread(core, resource_version="0", timeout_seconds=60)
    w.start()
    wait_for(lambda: sandbox.counters().get("watch pods") == 1, what="the watch to be open")
    time.sleep(0.1)  # let the response headers reach the client
    sandbox.start_outage()
    try:
        assert w.ended.wait(10)
        assert w.error is not None
    finally:
        sandbox.end_outage()


def test_image_pull_failure(sandbox: SandboxThread, core: client.CoreV1Api) -> None:
    sandbox.set_image_pull_failure(r"^registry\.invalid/")
    containers = [{"name": "main", "image": "registry.invalid/nope:1", "command": ["true"]}]
    core.create_namespaced_pod("default", pod_body("pull", containers=containers))

    def waiting_reason() -> str | None:
        pod = sandbox.get_object("pods", "default", "pull") or {}
        for cs in pod.get("status", {}).get("containerStatuses") or []:
            return cs["state"].get("waiting", {}).get("reason")
        return None

    wait_for(lambda: waiting_reason() == "ErrImagePull", what="ErrImagePull")
    wait_for(lambda: waiting_reason() == "ImagePullBackOff", what="ImagePullBackOff")
    assert sandbox.get_object("pods", "default", "pull")["status"]["phase"] == "Pending"  # type: ignore[index]


def test_reserved_invalid_registry_fails_to_pull_by_default(
    sandbox: SandboxThread, core: client.CoreV1Api
) -> None:
    """With no pattern set, an image from a ``.invalid`` registry still never starts; others do."""
    sandbox.set_image_pull_failure(None)
    bad = [{"name": "main", "image": "registry.invalid/jobwatch/nope:1", "command": ["true"]}]
    good = [{"name": "main", "image": "busybox:1.36", "command": ["true"]}]
    core.create_namespaced_pod("default", pod_body("pull-default", containers=bad))
    core.create_namespaced_pod("default", pod_body("pull-ok", containers=good))

    def reason(name: str) -> str | None:
        pod = core.read_namespaced_pod(name, "default")
        for cs in pod.status.container_statuses or []:
            return cs.state.waiting.reason if cs.state.waiting else None
        return None

    wait_for(lambda: reason("pull-default") == "ImagePullBackOff", what="ImagePullBackOff")
    assert core.read_namespaced_pod("pull-default", "default").status.phase == "Pending"
    wait_for(
        lambda: core.read_namespaced_pod("pull-ok", "default").status.phase == "Succeeded",
        what="the pullable image's pod to succeed",
    )


def test_evict_pod(sandbox: SandboxThread, core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", pod_body("ev", "sleep 60"))
    wait_for(
        lambda: (
            (sandbox.get_object("pods", "default", "ev") or {}).get("status", {}).get("phase") == "Running"
        )
    )
    sandbox.evict_pod("default", "ev")

    def evicted() -> dict[str, Any] | None:
        pod = sandbox.get_object("pods", "default", "ev")
        return pod if pod and pod["status"].get("phase") == "Failed" else None

    pod = wait_for(evicted, what="the pod to be evicted")
    assert pod["status"]["reason"] == "Evicted"
    assert pod["status"]["message"] == "The node was low on resource: memory."
    target = condition(pod, "DisruptionTarget")
    assert target and target["reason"] == "TerminationByKubelet"


def test_lose_node_deletes_pods_without_terminal_status(
    sandbox: SandboxThread, core: client.CoreV1Api
) -> None:
    core.create_namespaced_pod("default", pod_body("n1", "sleep 60"))
    core.create_namespaced_pod("default", pod_body("n2", "sleep 60"))
    wait_for(
        lambda: all(p["status"].get("phase") == "Running" for p in sandbox.objects("pods")),
        what="both pods running",
    )
    rv = core.list_namespaced_pod("default").metadata.resource_version
    assert sandbox.lose_node() == 2
    deleted = [
        (e["type"], e["object"].status.phase)
        for e in watch.Watch().stream(
            core.list_namespaced_pod, "default", resource_version=rv, timeout_seconds=1
        )
    ]
    assert deleted == [("DELETED", "Running"), ("DELETED", "Running")]
    assert sandbox.objects("pods") == []


def test_force_deleted_job_pod_counts_as_failed_and_is_replaced(
    sandbox: SandboxThread, core: client.CoreV1Api
) -> None:
    batch = client.BatchV1Api(core.api_client)
    batch.create_namespaced_job("default", job_body("fd", "sleep 60", backoffLimit=2))
    first = wait_for(lambda: sandbox.objects("pods"), what="the job's pod")[0]["metadata"]["name"]
    assert sandbox.force_delete_pod("default", first)

    def replaced() -> bool:
        job = sandbox.get_object("jobs", "default", "fd") or {}
        names = [p["metadata"]["name"] for p in sandbox.objects("pods")]
        return job.get("status", {}).get("failed") == 1 and bool(names) and first not in names

    wait_for(replaced, what="a replacement pod and failed=1")


def test_admin_endpoints_and_client(sandbox: SandboxThread, core: client.CoreV1Api) -> None:
    from airflow_jobwatch_testing.sandbox import AdminClient

    admin = AdminClient(sandbox.url, sandbox.token)
    core.list_namespaced_pod("default")
    assert admin.counters() == {"list pods": 1}
    admin.reset_counters()
    assert admin.counters() == {}
    assert admin.fault("current_resource_version") == sandbox.current_resource_version()
    admin.fault("set_error_rate", share=1.0, status=503, verbs=["list"])
    with pytest.raises(ApiException) as err:
        core.list_namespaced_pod("default")
    assert err.value.status == 503
    admin.fault("set_error_rate", share=0.0)
    assert admin.objects("namespaces")[0]["metadata"]["name"] == "default"
    with pytest.raises(RuntimeError, match="unknown action"):
        admin.fault("rm_rf")
    assert admin.counters() == {"list pods": 1}  # admin calls are never counted


@pytest.mark.sandbox(kubelet=False, job_controller=False)
def test_set_history_window_at_run_time(sandbox: SandboxThread, core: client.CoreV1Api) -> None:
    start = sandbox.current_resource_version()
    core.create_namespaced_pod("default", pod_body("h1"))
    core.create_namespaced_pod("default", pod_body("h2"))
    assert sandbox.current_resource_version() == start + 2
    # Still in history: the watch replays both creations.
    replay = [
        e["object"].metadata.name
        for e in watch.Watch().stream(
            core.list_namespaced_pod, "default", resource_version=str(start), timeout_seconds=1
        )
    ]
    assert replay == ["h1", "h2"]
    sandbox.set_history_window(1)
    with pytest.raises(ApiException) as err:
        for _ in watch.Watch().stream(
            core.list_namespaced_pod, "default", resource_version=str(start), timeout_seconds=1
        ):
            pass
    assert err.value.status == 410
